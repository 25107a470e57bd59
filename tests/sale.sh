# sale.sh — sourced by the integration tests that drive one SKU's sale through a
# cluster's balancer and assert it was exact (it_redlock_chaos.sh, it_zk.sh,
# it_pglock.sh), after tests/lib.sh (it_begin: $dir, where wrk's pid file and log live).
# They set LB_URL, INSTANCE_URLS (from the cluster's cluster.env), SKU and STOCK. The
# tests of one lock mode over clusters of their own (it_zk.sh, it_pglock.sh) also use
# the second part: their clusters (cluster_up, cluster_down, $CUR_CLUSTER), load loops
# ($LOADERS, their answers in $dir/load.*), it_frozen.sh in their mode, and their
# on_exit (it_redlock_chaos.sh defines its own).
# shellcheck shell=bash disable=SC2154 # dir: the test's (tests/lib.sh)

# jfield JSON FILTER: a field of a JSON text, empty when missing or not JSON.
jfield() { jq -r "$2 | if . == null then empty else . end" <<<"$1" 2>/dev/null || true; }
sku_json() { curl -s --max-time 5 "$LB_URL/skus/$SKU" || true; }
sold_now() { jfield "$(sku_json)" .sold; }
sold_at_least() { # N
    local v
    v=$(sold_now)
    [[ $v =~ ^[0-9]+$ ]] && (($1 <= v))
}
wrk_done() { ! proc_alive wrk "$dir"; }
instances_idle() {
    local u n
    for u in $INSTANCE_URLS; do
        n=$(jfield "$(curl -s --max-time 2 "$u/stats")" .inflight)
        [[ $n =~ ^[0-9]+$ ]] && ((n <= 1)) || return 1
    done
}

# sale_checks LABEL: the exact-sale assertions over wrk's counts ($dir/wrk.log, kept
# as wrk-LABEL.log), the SKU and its audit, after printing them.
sale_checks() {
    local label=$1 wrk_json skuj audit c201 sold u
    wrk_json=$(grep -m1 '^{"tool":"wrk-orders"' "$dir/wrk.log" 2>/dev/null || true)
    cp "$dir/wrk.log" "$dir/wrk-$label.log" 2>/dev/null || true
    skuj=$(sku_json)
    audit=$(curl -s --max-time 30 "$LB_URL/skus/$SKU/audit" || true)
    echo "  wrk: $(jq -c '{requests, status_201, sold_out, busy, unavailable, other, other_codes, socket_errors}' <<<"$wrk_json" 2>/dev/null || echo "${wrk_json:-none}")"
    echo "  sku: $(jq -c 'del(.segments)' <<<"$skuj" 2>/dev/null || echo "$skuj")"
    echo "  audit: $audit"
    for u in $INSTANCE_URLS; do
        echo "  $u lock: $(curl -s --max-time 2 "$u/stats" | jq -c '.lock | {acquisitions, contended, wait_timeouts, errors, releases_not_held, leases_lost}' 2>/dev/null)"
    done
    c201=$(jfield "$wrk_json" .status_201)
    sold=$(jfield "$skuj" .sold)
    check "$label: wrk reported its counts" has_prefix "$wrk_json" '{"tool":"wrk-orders"'
    check "$label: sold out (remaining 0, sold_out answers > 0)" \
        eq "$(jfield "$skuj" .remaining)/$(jfield "$wrk_json" '.sold_out > 0')" 0/true
    check "$label: client-counted 201s == stock ($c201 == $STOCK)" eq "$c201" "$STOCK"
    check "$label: server sold == stock ($sold == $STOCK), nothing oversold" \
        eq "$sold/$(jfield "$skuj" .oversold)" "$STOCK/0"
    check "$label: audit: sold == stock, orders == 201s" \
        eq "$(jfield "$audit" .sold)/$(jfield "$audit" .orders)" "$STOCK/$c201"
    check "$label: audit: consistent, oversold 0" \
        eq "$(jfield "$audit" .consistent)/$(jfield "$audit" .oversold)" true/0
    check "$label: audit: no limit breach, no duplicate order id" \
        eq "$(jfield "$audit" .limit_breaches)/$(jfield "$audit" .duplicate_order_ids)" 0/0
    check "$label: no answer other than 201 / 409 / 503, no socket error" \
        eq "$(jfield "$wrk_json" '.other + .other_409 + .other_503 + .outcome_unknown + ([.socket_errors[]] | add)')" 0
}

# ---- a lock mode's test over clusters of its own (it_zk.sh, it_pglock.sh) ------------

CLUSTER=$ROOT/scripts/cluster.sh
CUR_CLUSTER=""
LOADERS=()

stop_loaders() {
    : >"$dir/stop"
    local p
    for p in "${LOADERS[@]}"; do wait "$p" 2>/dev/null; done
    LOADERS=()
}
cluster_down() {
    [[ -n $CUR_CLUSTER ]] || return 0
    "$CLUSTER" down --dir "$CUR_CLUSTER" --quiet || check "cluster in $CUR_CLUSTER stopped" false
    CUR_CLUSTER=""
}
on_exit() {
    stop_loaders
    proc_stop wrk "$dir" 2 || true
    cluster_down
}
gt() { [[ $1 =~ ^-?[0-9]+$ && $2 =~ ^-?[0-9]+$ ]] && (($1 > $2)); }
# instances_sum FILTER: a jq filter over each instance's /stats, summed.
instances_sum() {
    local u
    for u in $INSTANCE_URLS; do curl -s --max-time 2 "$u/stats" || echo null; done |
        jq -s "map(($1) // 0) | add" 2>/dev/null
}
instance_pids() { cat "$CUR_CLUSTER"/seckill-*.pid 2>/dev/null | tr '\n' ' '; }
# cluster_up NAME UP_ARGS... [-- seckill flags]: a cluster in $dir/cluster-NAME;
# sources its cluster.env. 1 (after a failed check) when it did not start.
cluster_up() {
    local name=$1
    shift
    CUR_CLUSTER=$dir/cluster-$name
    if ! "$CLUSTER" up --dir "$CUR_CLUSTER" --quiet "$@" >"$dir/up-$name.out" 2>&1; then
        tail -n 5 "$dir/up-$name.out"
        check "$name: cluster started" false
        CUR_CLUSTER=""
        return 1
    fi
    # shellcheck disable=SC1091
    source "$CUR_CLUSTER/cluster.env"
}
put_sku() { # SKU STOCK SEGMENTS
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT \
        -H 'Content-Type: application/json' \
        -d "$(printf '{"stock":%d,"segments":%d,"per_user_limit":1}' "$2" "$3")" \
        "$LB_URL/skus/$1?reset=true")
    [[ $code == 201 || $code == 200 ]] && return 0
    check "PUT /skus/$1 (answered $code)" false
    return 1
}
sold_out_served() { # the stock is gone and the instances answered sold_out many times
    local left n
    left=$(jfield "$(sku_json)" .remaining)
    [[ $left == 0 ]] || return 1
    n=$(instances_sum '.orders.sold_out + .orders.sold_out_from_memory')
    [[ $n =~ ^[0-9]+$ ]] && ((n >= SOLD_OUT_SEEN))
}
answers() { cat "$dir"/load.* 2>/dev/null; }
count_201_since() { answers | awk -v t="$1" '$1 > t && $3 == 201' | wc -l; }
count_since() { answers | awk -v t="$1" '$1 > t' | wc -l; }
at_least_201_since() { (($(count_201_since "$1") >= $2)); }
at_least_since() { (($(count_since "$1") >= $2)); }
placed_per_instance() {
    local u
    for u in $INSTANCE_URLS; do
        jfield "$(curl -s --max-time 2 "$u/stats")" .orders.placed
    done | tr '\n' ' '
}

# run_frozen MODE: tests/it_frozen.sh in MODE, its checks folded into this test's counts.
run_frozen() {
    local mode=$1 last p f rc
    echo "# frozen: tests/it_frozen.sh $mode"
    bash "$ROOT/tests/it_frozen.sh" "$mode" 2>&1 | tee "$dir/frozen.out" | sed -u 's/^/  /'
    rc=${PIPESTATUS[0]}
    # Its summary line; a failed run says where its logs are after it.
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$dir/frozen.out" | tail -n 1)
    if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
        passed=$((passed + p)) failed=$((failed + f))
        ((rc == 0 || f > 0)) || check "frozen: it_frozen.sh $mode exited $rc" false
    else
        check "frozen: it_frozen.sh $mode ran to its summary (exit $rc)" false
    fi
}

# outage_checks LABEL WHAT T_DOWN T_CALM T_RESTART T_UP PLACED_UP PLACED_END PIDS: the
# load loops' answers ($dir/load.*) around an outage of WHAT (ZooKeeper, PostgreSQL):
# down at T_DOWN, no hold of before left from T_CALM, started again at T_RESTART and
# serving at T_UP (microseconds); PLACED_UP and PLACED_END, the instances' placed
# counts then and at the end; PIDS, the instances' pids before. Prints what happened,
# then checks: answers while it was down, all 503 unavailable or busy; no other answer
# but 201; none slower than SLOWEST_MS; every instance placed orders again, the same
# processes; every 201 an order in the audit, nothing oversold.
outage_checks() {
    local label=$1 what=$2 t_down=$3 t_calm=$4 t_restart=$5 t_up=$6 placed_up=$7 placed_end=$8
    local pids_before=$9 all=$dir/$1.all total acked down first slowest sold audit i grew=0
    local -a up_counts end_counts
    answers >"$all"
    total=$(wc -l <"$all")
    acked=$(awk '$3 == 201' "$all" | wc -l)
    down=$(awk -v a="$t_calm" -v b="$t_restart" '$1 > a && $2 < b' "$all")
    first=$(awk -v t="$t_up" '$3 == 201 && $1 > t { d = ($2 - t) / 1000; if (m == "" || d < m) m = d }
        END { printf "%d", m }' "$all")
    slowest=$(awk '{ d = ($2 - $1) / 1000; if (d > m) m = d } END { printf "%d", m }' "$all")
    echo "  requests: $total, 201: $acked, others: $(awk '$3 != 201 { print $3, $7 }' "$all" |
        sort | uniq -c | tr -s ' \n' ' ')"
    echo "  $what down $(((t_restart - t_down) / 1000)) ms; first 201 ${first} ms after it" \
        "served again; slowest answer ${slowest} ms; placed per instance when it came back:" \
        "$placed_up, at the end: $placed_end"
    check "$label: answers while $what was down (no hold of before left): some" \
        gt "$(grep -c . <<<"$down")" 0
    check "$label: ... all 503 unavailable or busy" eq "$(awk '!($3 == 503 &&
        ($7 == "unavailable" || $7 == "busy"))' <<<"$down" | head -3)" ""
    check "$label: no answer other than 201 or 503 unavailable / busy (no hang, no other error)" \
        eq "$(awk '!($3 == 201 || ($3 == 503 && ($7 == "unavailable" || $7 == "busy")))' "$all" |
            head -3)" ""
    check "$label: no answer slower than ${SLOWEST_MS} ms ($slowest)" eq "$((slowest <= SLOWEST_MS))" 1
    read -r -a up_counts <<<"$placed_up"
    read -r -a end_counts <<<"$placed_end"
    for i in "${!end_counts[@]}"; do
        gt "${end_counts[$i]}" "${up_counts[$i]:-0}" && grew=$((grew + 1))
    done
    check "$label: every instance placed orders after $what came back ($grew of $INSTANCES)" \
        eq "$grew" "$INSTANCES"
    check "$label: the same instance processes throughout (pids $pids_before)" \
        eq "$(instance_pids)" "$pids_before"
    check "$label: every instance alive" eq "$(
        for i in $(seq 1 "$INSTANCES"); do proc_alive "seckill-$i" "$CUR_CLUSTER" || echo "seckill-$i"; done
    )" ""
    sold=$(jfield "$(sku_json)" .sold)
    audit=$(curl -s --max-time 60 "$LB_URL/skus/$SKU/audit" || true)
    echo "  audit: $audit"
    check "$label: server sold == 201s ($sold == $acked): every 201 an order, no other answer placed one" \
        eq "$sold" "$acked"
    check "$label: audit consistent, orders == 201s, no duplicate order id, nothing oversold" \
        eq "$(jfield "$audit" .consistent)/$(jfield "$audit" .orders)/$(jfield "$audit" .duplicate_order_ids)/$(jfield "$audit" .oversold)" \
        "true/$acked/0/0"
}
