#!/usr/bin/env bash
# run.sh — the oversell proof: for every lock mode, a fresh cluster (redis + N seckill
# instances + a load balancer, scripts/cluster.sh), a SKU reset, wrk through the
# balancer, then the client's counts against the server's counters and audit.
#
#   loadtest/run.sh [options] [-- extra seckill flags]
#       (with --buyer-key-file F among them, wrk's buyers carry Seckill-Buyer tokens
#       made with F)
#
#   --modes LIST        comma-separated lock modes (none,local,setnx,redis,redlock,zk,pg,atomic);
#                       zk starts a throwaway ZooKeeper beside Redis, pg a throwaway
#                       PostgreSQL (scripts/cluster.sh)
#   --instances N       seckill instances behind the balancer (3)
#   --segments K        stock segments of the SKU (16)
#   --stock N           initial stock (300)
#   --duration D        wrk duration per mode, wrk syntax (5s)
#   --connections C     wrk connections (48)
#   --threads T         wrk threads (2)
#   --work-us US        simulated work inside the critical section (3000)
#   --users N           0: a fresh user per request; N: users drawn from a pool of N (0)
#   --per-user-limit L  the SKU's per-user limit (1)
#   --qty Q             units per order (1); a range A-B (e.g. 1-3) gives each order a
#                       random quantity in it. Placed, stock and oversold count units.
#   --lb nginx|haproxy  the load balancer (nginx)
#   --redis-cluster M   a Redis Cluster of M masters (each with a replica) in place of
#                       the one data Redis (0: none)
#   --out DIR           where report.json, summary.tsv, chart.png go
#                       (results/<time>-<pid>/, results/latest links to it)
#   --no-chart          skip the gnuplot chart
#   --keep              keep the clusters' dirs (logs, AOF) under DIR/clusters/
#   --quiet             only the report table
#   --pay-ratio R       reservations: the SKU gets a payment window (--pay-within-ms),
#                       and each buyer of a 201 pays with probability R (0..1) after
#                       --pay-delay-ms; the others cancel (half) or let it expire. The
#                       report adds paid, expired, cancelled and resold, and waits for
#                       every reservation to end; "exact" then means every unit ended
#                       paid or remaining, none twice (the audit agrees)
#   --postgres          every mode's instances get a throwaway PostgreSQL as the orders'
#                       system of record (the pg mode always has one): after the sale
#                       the report waits until the sinks drained and shows the database
#                       against the records in Redis (the audit's store block)
#   --pay-delay-ms D    how long a buyer takes to pay or cancel (500)
#   --pay-within-ms W   the SKU's payment window (2000)
#
# Exit status: 0 when every mode ran and gave numbers the client and the server agree
# on; 1 when a mode failed to run (its row says why). Whether a mode oversold is the
# report's business, not an error: tests/it_invariants.sh asserts on it. Ctrl-C stops
# the running cluster; nothing is left running.
# shellcheck disable=SC2317 # functions run from traps and wait_until look unreachable
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

modes="none,local,setnx,redis,redlock,zk,pg,atomic"
instances=3 segments=16 stock=300 duration=5s connections=48 wrk_threads=2
work_us=3000 users=0 limit=1 qty=1 lb=nginx out="" chart=1 keep=0 quiet=0 rcluster=0
pay_ratio="" pay_delay=500 pay_within=2000 postgres=0
extra=()

usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }
while (($#)); do
    case $1 in
    --modes) modes=${2:?"$1 needs a value"}; shift 2 ;;
    --instances) instances=${2:?"$1 needs a value"}; shift 2 ;;
    --segments) segments=${2:?"$1 needs a value"}; shift 2 ;;
    --stock) stock=${2:?"$1 needs a value"}; shift 2 ;;
    --duration) duration=${2:?"$1 needs a value"}; shift 2 ;;
    --connections) connections=${2:?"$1 needs a value"}; shift 2 ;;
    --threads) wrk_threads=${2:?"$1 needs a value"}; shift 2 ;;
    --work-us) work_us=${2:?"$1 needs a value"}; shift 2 ;;
    --users) users=${2:?"$1 needs a value"}; shift 2 ;;
    --per-user-limit) limit=${2:?"$1 needs a value"}; shift 2 ;;
    --qty) qty=${2:?"$1 needs a value"}; shift 2 ;;
    --lb) lb=${2:?"$1 needs a value"}; shift 2 ;;
    --redis-cluster) rcluster=${2:?"$1 needs a value"}; shift 2 ;;
    --out) out=${2:?"$1 needs a value"}; shift 2 ;;
    --no-chart) chart=0; shift ;;
    --keep) keep=1; shift ;;
    --quiet) quiet=1; shift ;;
    --pay-ratio) pay_ratio=${2:?"$1 needs a value"}; shift 2 ;;
    --postgres) postgres=1; shift ;;
    --pay-delay-ms) pay_delay=${2:?"$1 needs a value"}; shift 2 ;;
    --pay-within-ms) pay_within=${2:?"$1 needs a value"}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage 0 ;;
    *) log "unknown option $1"; usage ;;
    esac
done
[[ $qty =~ ^([0-9]+)(-([0-9]+))?$ ]] || die "--qty must be N or A-B (got '$qty')"
# With --buyer-key-file among the extra flags, wrk's buyers send tokens made with it
# (loadtest/orders.lua, SECKILL_BUYER_KEY_FILE).
for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[$i]} in
    --buyer-key-file) export SECKILL_BUYER_KEY_FILE=${extra[$((i + 1))]:-} ;;
    --buyer-key-file=*) export SECKILL_BUYER_KEY_FILE=${extra[$i]#*=} ;;
    esac
done
qty_lo=$((10#${BASH_REMATCH[1]})) qty_hi=$((10#${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}))
((qty_lo > 0 && qty_hi >= qty_lo)) || die "--qty: need 0 < A <= B (got '$qty')"
for v in instances:instances segments:segments stock:stock connections:connections \
    wrk_threads:threads work_us:work-us users:users limit:per-user-limit \
    rcluster:redis-cluster; do
    var=${v%%:*}
    [[ ${!var} =~ ^[0-9]+$ ]] || die "--${v#*:} must be a whole number (got '${!var}')"
    printf -v "$var" '%d' "$((10#${!var}))" # "08" -> 8: they go into the report as JSON numbers
done
((stock > 0 && instances > 0)) || die "--stock and --instances must be > 0"
if [[ -n $pay_ratio ]]; then
    [[ $pay_ratio =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || die "--pay-ratio must be in 0..1 (got '$pay_ratio')"
    [[ $pay_delay =~ ^[0-9]+$ && $pay_within =~ ^[1-9][0-9]*$ ]] ||
        die "--pay-delay-ms and --pay-within-ms must be whole numbers (--pay-within-ms > 0)"
fi
((qty_hi <= limit)) || die "--qty $qty asks more than --per-user-limit $limit: those orders would be refused"
IFS=', ' read -r -a mode_list <<<"$modes"
for m in "${mode_list[@]}"; do
    case $m in none | local | setnx | redis | redlock | zk | pg | atomic) ;; *) die "unknown mode '$m'" ;; esac
done
lt_require jq wrk curl

say() { ((quiet)) || printf '%s\n' "$*" >&2; }

lt_out "$(date +%Y%m%d-%H%M%S)-$$" latest modes clusters
# ---- cleanup: whatever cluster is up goes down, on success, failure or Ctrl-C -------
if ((keep)); then lt_traps always; else lt_traps failed; fi

# ---- one mode -----------------------------------------------------------------------

# JSON goes through jq only. field JSON PATH [DEFAULT]: the value at the jq PATH
# (.sold, .socket_errors.connect) as text (strings without quotes), or DEFAULT (empty)
# when JSON is not one valid JSON value or the value is absent or null.
field() {
    local v
    v=$(jq -r "($2)? | select(. != null)" <<<"$1" 2>/dev/null) || v=""
    printf '%s\n' "${v:-${3:-}}"
}
# num JSON PATH [DEFAULT]: the number at PATH, or DEFAULT (0).
num() {
    local v
    v=$(field "$1" "$2")
    [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]] && echo "$v" || echo "${3:-0}"
}
# json_or_null TEXT: TEXT compacted when it is one valid JSON value, else null (an empty
# answer or a balancer's HTML error page must not break the report).
json_or_null() {
    local j
    if j=$(jq -c . <<<"$1" 2>/dev/null) && [[ -n $j && $j != *$'\n'* ]]; then
        printf '%s' "$j"
    else
        printf 'null'
    fi
}

# All instances have finished what they were doing (the last answers wrk did not wait
# for are still placed or refused server-side before the audit is read).
instances_idle() {
    local u s n
    for u in $INSTANCE_URLS; do
        s=$(curl -s --max-time 2 "$u/stats") || return 1
        n=$(num "$s" .inflight 0)
        ((n <= 1)) || return 1 # the /stats request itself
    done
}

ROWS=()      # tab-separated rows, see the header in summary.tsv
LIFE_ROWS=() # with --pay-ratio: "mode paid expired cancelled resold remaining result"
STORE_ROWS=() # a mode whose instances had a sink: "mode redis_orders pg_orders matches drained"

# run_mode MODE: one mode's cluster, sale, row and JSON record. Its steps share the
# locals declared here (bash's scoping: a function sees its caller's locals).
run_mode() {
    local mode=$1 cdir=$out/clusters/$1 mdir=$out/modes
    local error="" wrk_json="" sku_json="" audit_json="" stats_json="[]"
    local reqs p50 p99 selling c201 sold_out lim busy unav others placed oversold stranded
    local remaining srv_sold audit_sold audit_orders breaches consistent agree result
    local paid=0 expired=0 cancelled=0 resold=0 returned=0 twice=0
    if mode_cluster_up; then
        mode_sale
        mode_cluster_down
    fi
    mode_figures
    mode_result
    mode_record
}

# mode_cluster_up: the mode's cluster, or error says why not.
mode_cluster_up() {
    local -a up_args=(--instances "$instances" --lb "$lb" --lock "$mode")
    local on=""
    ((rcluster == 0)) || { up_args+=(--redis-cluster "$rcluster"); on=", a Redis Cluster of $rcluster masters"; }
    ((!postgres)) || { up_args+=(--postgres); on+=", PostgreSQL as the system of record"; }
    say ""
    say "== $mode: $instances instances, K=$segments, stock $stock, ${work_us}us of work, wrk -c$connections -d$duration$on"
    lt_cluster_up "$cdir" "$mdir/$mode.up.err" "${up_args[@]}" -- --segments "$segments" \
        --work-us "$work_us" --log-level warn "${extra[@]}" && return 0
    error="cluster did not start: $UP_ERROR"
    return 1
}

# mode_sale: the SKU reset, wrk through the balancer, then what the server says: the
# SKU, its audit, each instance's /stats.
mode_sale() {
    local sku="proof-$mode" body tag put_code u s
    local -a auth=() stats=()
    body=$(printf '{"stock":%d,"segments":%d,"per_user_limit":%d%s}' "$stock" "$segments" "$limit" \
        "${pay_ratio:+,\"pay_within_ms\":$pay_within}")
    [[ -n ${SECKILL_ADMIN_TOKEN:-} ]] && auth=(-H "Authorization: Bearer $SECKILL_ADMIN_TOKEN")
    put_code=$(curl -s -o "$mdir/$mode.put.json" -w '%{http_code}' --max-time 10 -X PUT \
        -H 'Content-Type: application/json' "${auth[@]}" -d "$body" "$LB_URL/skus/$sku?reset=true") || true
    if [[ $put_code != 200 && $put_code != 201 ]]; then
        error="PUT /skus/$sku answered $put_code: $(cat "$mdir/$mode.put.json" 2>/dev/null)"
        return
    fi
    tag="$mode$$x$RANDOM"
    say "   wrk through $LB_KIND at $LB_URL ..."
    local -a pay_args=()
    [[ -z $pay_ratio ]] || pay_args=(- "$pay_ratio" "$pay_delay" "${SECKILL_ADMIN_TOKEN:-}")
    wrk -t "$wrk_threads" -c "$connections" -d "$duration" -s "$LUA" "$LB_URL" \
        -- "$sku" "$users" "$qty" "$tag" "${pay_args[@]}" >"$mdir/$mode.wrk.txt" 2>&1 || true
    wrk_json=$(grep -m1 '^{"tool":"wrk-orders"' "$mdir/$mode.wrk.txt" || true)
    [[ -n $wrk_json ]] || error="wrk gave no summary: $(tail -n 1 "$mdir/$mode.wrk.txt")"
    wait_until 10 instances_idle || say "   (instances still busy after 10s)"
    # reservations: every one ends (paid, cancelled, or expired by the sweeps)
    reservations_over() { [[ $(curl -s --max-time 2 "$LB_URL/skus/$sku" | jq -r .pending) == 0 ]]; }
    [[ -z $pay_ratio ]] || wait_until $((pay_within / 1000 + 10)) reservations_over ||
        say "   (reservations still pending)"
    sku_json=$(curl -s --max-time 10 "$LB_URL/skus/$sku" || true)
    audit_json=$(curl -s --max-time 30 "$LB_URL/skus/$sku/audit" || true)
    # the system of record: the sinks drain what the sale left on its way
    if [[ -n ${PG_URL:-} ]]; then
        local t0=$SECONDS drained="-"
        store_drained() {
            audit_json=$(curl -s --max-time 30 "$LB_URL/skus/$sku/audit" || true)
            [[ $(jq -r '(.store.lag_events == 0) and .store.matches' <<<"$audit_json" 2>/dev/null) == true ]]
        }
        wait_until 60 store_drained && drained="$((SECONDS - t0)) s" ||
            error="${error:-the database does not match Redis 60 s after the sale: $(jq -c .store <<<"$audit_json")}"
        STORE_ROWS+=("$mode $(jq -r '.orders' <<<"$audit_json") $(jq -r '.store.orders // "-"' <<<"$audit_json") $(jq -r '.store.matches' <<<"$audit_json") ${drained// /}")
    fi
    for u in $INSTANCE_URLS; do
        s=$(curl -s --max-time 5 "$u/stats" || true)
        stats+=("$(json_or_null "$s")")
    done
    stats_json=$(printf '%s\n' "${stats[@]}" | jq -cs .)
    [[ -n $error || $audit_json == \{* ]] || error="no audit: $audit_json"
}

# mode_cluster_down: the cluster down; a sanitizer build's reports in its logs are an
# error.
mode_cluster_down() {
    local flagged
    lt_cluster_down || error="${error:-cluster down failed}"
    # Sanitizer builds (SECKILL_BUILD=build/address, ...) report into the logs.
    flagged=$(grep -lE 'ERROR: (Address|Leak|Memory)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
        "$cdir"/seckill-*.log 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ' || true)
    [[ -z $flagged ]] || error="${error:+$error; }sanitizer report in ${flagged% } (kept in $cdir)"
}

# mode_figures: the row's figures, from wrk's summary and the server's answers.
mode_figures() {
    # Latencies and rates keep wrk's own format (jq 1.6 writes 8090.0 as 8090).
    reqs=$(printf '%.1f' "$(num "$wrk_json" .req_per_s)")
    p50=$(printf '%.3f' "$(num "$wrk_json" .p50_ms)")
    p99=$(printf '%.3f' "$(num "$wrk_json" .p99_ms)")
    selling=$(printf '%.3f' "$(num "$wrk_json" .selling_s -1)")
    c201=$(num "$wrk_json" .status_201) sold_out=$(num "$wrk_json" .sold_out)
    lim=$(num "$wrk_json" .limit_reached) busy=$(num "$wrk_json" .busy)
    unav=$(num "$wrk_json" .unavailable)
    others=$(($(num "$wrk_json" .other_409) + $(num "$wrk_json" .other_503) + $(num "$wrk_json" .other) +
        $(num "$wrk_json" .outcome_unknown) +
        $(num "$wrk_json" .socket_errors.connect) + $(num "$wrk_json" .socket_errors.read) +
        $(num "$wrk_json" .socket_errors.write) + $(num "$wrk_json" .socket_errors.timeout)))
    placed=$(num "$wrk_json" .units_201)
    oversold=$((placed > stock ? placed - stock : 0))
    remaining=$(num "$sku_json" .remaining -1)
    srv_sold=$(num "$sku_json" .sold -1)
    # Refused as sold out while units that would have served the order were left
    # (stock only goes down, so what is left at the end was left then too).
    stranded=0
    if ((sold_out > 0 && remaining >= qty_lo)); then stranded=$remaining; fi
    audit_sold=$(num "$audit_json" .sold -1) audit_orders=$(num "$audit_json" .orders -1)
    breaches=$(num "$audit_json" .limit_breaches -1)
    consistent=$(field "$audit_json" .consistent "?")
    if [[ -n $pay_ratio ]]; then
        paid=$(num "$audit_json" .paid) expired=$(num "$audit_json" .expired)
        cancelled=$(num "$audit_json" .cancelled) returned=$(num "$audit_json" .returned)
        twice=$(($(num "$audit_json" .state_conflicts) + $(num "$audit_json" .returned_twice)))
        # units that came back and were bought again: placed beyond the stock
        resold=$((placed > stock ? placed - stock : 0))
        oversold=$(num "$audit_json" .oversold)
        stranded=0
    fi
}

# mode_result: whether client and server agree, and the verdict (exact, OVERSOLD, ...).
mode_result() {
    if [[ -n $error ]]; then
        agree="-"
    elif [[ -n $pay_ratio ]]; then # sold counts what is not given back
        ((audit_sold + returned == placed && audit_orders == c201 && srv_sold == audit_sold)) &&
            agree=yes || agree=NO
    elif ((audit_sold == placed && audit_orders == c201 && srv_sold == placed)); then
        agree=yes
    else
        agree=NO
    fi
    if [[ -n $error ]]; then
        result="ERROR"
        any_error=1
    elif ((oversold > 0)); then
        result="OVERSOLD"
    elif [[ -n $pay_ratio ]]; then # every unit paid or remaining, none twice
        ((twice == 0 && paid + remaining == stock)) && [[ $consistent == true ]] &&
            result="exact" || result="UNSETTLED"
    elif ((placed == stock)); then
        result="exact"
    elif ((sold_out == 0 && lim > 0)); then
        result="limited" # stock left, every user got their limit: demand ran out
    elif ((sold_out == 0)); then
        result="UNFINISHED" # stock left and nobody was refused: the run was too short
    else
        result="UNDERSOLD"
    fi
    if [[ $result != ERROR && $agree == NO ]]; then
        result+="+MISMATCH" # acknowledged orders and the server's records disagree
        any_error=1
    fi
    [[ -z $error ]] || say "   ERROR: $error"
}

# mode_record: the row of summary.tsv, the JSON record, the closing lines.
mode_record() {
    ROWS+=("$(printf '%s\t' "$mode" "$instances" "$segments" "$reqs" "$p50" "$p99" "$selling" "$placed" \
        "$stock" "$oversold" "$stranded" "$breaches" "$busy" "$unav" "$others" "$srv_sold" \
        "$audit_sold" "$consistent" "$agree" "$result")${error//$'\t'/ }")

    # ---- the JSON record ----
    jq -cn --arg mode "$mode" --argjson instances "$instances" --argjson segments "$segments" \
        --argjson stock "$stock" --argjson req_per_s "$reqs" --argjson p50_ms "$p50" \
        --argjson p99_ms "$p99" --argjson selling_s "$selling" --argjson placed "$placed" \
        --argjson oversold "$oversold" --argjson stranded "$stranded" \
        --argjson limit_breaches "$breaches" --argjson busy "$busy" --argjson unavailable "$unav" \
        --argjson other_errors "$others" --argjson server_sold "$srv_sold" \
        --argjson server_remaining "$remaining" --argjson audit_sold "$audit_sold" \
        --argjson audit_orders "$audit_orders" --arg agree "$agree" --arg result "$result" \
        --arg error "$error" --argjson wrk "$(json_or_null "$wrk_json")" \
        --argjson sku "$(json_or_null "$sku_json")" --argjson audit "$(json_or_null "$audit_json")" \
        --argjson stats "$stats_json" '{
            mode: $mode, instances: $instances, segments: $segments, stock: $stock,
            req_per_s: $req_per_s, p50_ms: $p50_ms, p99_ms: $p99_ms, selling_s: $selling_s,
            placed: $placed, oversold: $oversold, stranded: $stranded,
            limit_breaches: $limit_breaches, busy: $busy, unavailable: $unavailable,
            other_errors: $other_errors, server_sold: $server_sold,
            server_remaining: $server_remaining, audit_sold: $audit_sold,
            audit_orders: $audit_orders, client_matches_server: ($agree == "yes"),
            result: $result, error: (if $error == "" then null else $error end),
            wrk: $wrk, sku: $sku, audit: $audit, stats: $stats
        }' >"$mdir/$mode.json"
    say "   placed $placed of $stock, server sold $srv_sold, audit sold $audit_sold: $result"
    [[ -z $pay_ratio ]] || say "   reservations: paid $paid units, cancelled $cancelled and" \
        "expired $expired orders, $returned units back, $resold resold"
    [[ -z $pay_ratio ]] || LIFE_ROWS+=("$mode $paid $expired $cancelled $resold $remaining $result")
    if [[ $stats_json != "[]" ]]; then
        say "   orders placed per instance: $(jq -r \
            '[.[] | (.orders.placed? | numbers) // "?" | tostring] | join(" / ")' <<<"$stats_json")"
    fi
}

for m in "${mode_list[@]}"; do run_mode "$m"; done

# ---- report -------------------------------------------------------------------------
{
    printf 'mode\tinstances\tsegments\treq_per_s\tp50_ms\tp99_ms\tselling_s\tplaced\tstock\toversold\tstranded\t'
    printf 'limit_breaches\tbusy\tunavailable\tother_errors\tserver_sold\taudit_sold\taudit_consistent\t'
    printf 'client_matches_server\tresult\terror\n'
    printf '%s\n' "${ROWS[@]}"
} >"$out/summary.tsv"

files=()
for m in "${mode_list[@]}"; do files+=("$out/modes/$m.json"); done
jq -cn --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg modes "$modes" \
    --argjson instances "$instances" --argjson segments "$segments" --argjson stock "$stock" \
    --arg duration "$duration" --argjson connections "$connections" \
    --argjson threads "$wrk_threads" --argjson work_us "$work_us" --argjson users "$users" \
    --argjson per_user_limit "$limit" --arg qty "$qty" --arg lb "$lb" \
    --arg extra_flags "${extra[*]}" '{
        created: $created,
        config: {modes: $modes, instances: $instances, segments: $segments, stock: $stock,
                 duration: $duration, connections: $connections, threads: $threads,
                 work_us: $work_us, users: $users, per_user_limit: $per_user_limit,
                 qty: $qty, lb: $lb, extra_flags: $extra_flags},
        modes: [inputs]
    }' "${files[@]}" >"$out/report.json"

print_table() {
    local fmt='%-8s %4s %4s %9s %8s %8s %7s %7s %6s %9s %9s %9s %6s %8s %7s %9s %9s  %s\n'
    # shellcheck disable=SC2059
    printf "$fmt" mode inst K req/s p50_ms p99_ms sell_s placed stock oversold stranded breaches \
        busy unavail errors audit "consistent" result
    local row mode inst k reqs p50 p99 sell placed stock over strand br busy unav oth cons agree result err
    for row in "${ROWS[@]}"; do
        IFS=$'\t' read -r mode inst k reqs p50 p99 sell placed stock over strand br busy unav oth _ _ cons agree result err <<<"$row"
        if [[ $result == ERROR ]]; then
            # shellcheck disable=SC2059
            printf "$fmt" "$mode" "$inst" "$k" - - - - - "$stock" - - - - - - - - "ERROR: $err"
            continue
        fi
        [[ $agree == yes ]] && agree="=client" || agree="MISMATCH"
        [[ $sell == -* ]] && sell="?"
        # shellcheck disable=SC2059
        printf "$fmt" "$mode" "$inst" "$k" "$reqs" "$p50" "$p99" "$sell" "$placed" "$stock" "$over" \
            "$strand" "$br" "$busy" "$unav" "$oth" "$agree" "$cons" "$result"
    done
}

if ((chart)) && command -v gnuplot >/dev/null; then
    {
        echo "# mode placed stock req_per_s selling_s"
        for row in "${ROWS[@]}"; do
            IFS=$'\t' read -r m _ _ r _ _ sell p s _ <<<"$row"
            echo "$m $p $s $r $sell"
        done
    } >"$out/chart.dat"
    # Three panels over the modes: units placed against a line at the stock (a bar above
    # the line is oversell), req/s through the balancer, and sell_s. column(N) rather
    # than $N keeps gnuplot's syntax clear of this heredoc's expansions.
    term="pngcairo size 1000,960 font 'sans,10'"
    gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || term="png size 1000,960"
    if gnuplot >"$out/chart.log" 2>&1 <<EOF; then
set terminal $term
set termoption noenhanced
set output '$out/chart.png'
n = ${#ROWS[@]}
stock = $stock
set multiplot layout 3,1 title "seckill oversell proof: $instances instances via $lb, K=$segments segments, stock $stock, ${work_us}us work, wrk -c$connections -d$duration" font ',12'
set style fill solid 0.85 border lc rgb '#404040'
set boxwidth 0.6
set grid ytics lc rgb '#d0d0d0'
set xrange [-0.6:n - 0.4]
set yrange [0:*]
set offsets 0, 0, graph 0.22, 0
set xtics nomirror scale 0 font ',11'
set ytics nomirror
set key top right opaque box lc rgb '#a0a0a0'
set title 'units sold (client-counted 201 answers) against the initial stock: a bar above the line is oversell'
set ylabel 'units'
plot '$out/chart.dat' using 0:(column(2) > column(3) ? column(2) : 1/0) with boxes lc rgb '#d62728' title 'oversold', \
     '' using 0:(column(2) > column(3) ? 1/0 : column(2)) with boxes lc rgb '#2ca02c' title 'within stock', \
     '' using 0:2:2:xtic(1) with labels offset 0,0.8 notitle, \
     stock with lines dt 2 lw 2.5 lc rgb 'black' title sprintf('initial stock (%d)', stock)
unset key
set title 'throughput through the balancer: every answer counts, mostly 409 sold_out once the stock is gone'
set ylabel 'requests / s'
plot '$out/chart.dat' using 0:4 with boxes lc rgb '#1f77b4', \
     '' using 0:4:(sprintf('%.0f', column(4))):xtic(1) with labels offset 0,0.8
set title 'sell_s: seconds from the first request to the last 201 (how long selling the stock took)'
set ylabel 'seconds'
set xlabel 'lock mode (--lock)'
plot '$out/chart.dat' using 0:(column(5) < 0 ? 1/0 : column(5)) with boxes lc rgb '#ff7f0e', \
     '' using 0:(column(5) < 0 ? 0 : column(5)):(column(5) < 0 ? '?' : sprintf('%.2f', column(5))):xtic(1) \
        with labels offset 0,0.8
unset multiplot
EOF
        rm -f "$out/chart.log"
    else
        say "(gnuplot failed, see $out/chart.log)"
    fi
fi

echo ""
echo "seckill oversell report: instances $instances via $lb, K=$segments, stock $stock, ${work_us}us work," \
    "wrk -t$wrk_threads -c$connections -d$duration, users $([[ $users == 0 ]] && echo 'unique' || echo "pool of $users"), limit $limit"
print_table
if [[ -n $pay_ratio ]]; then
    echo ""
    echo "reservations: window ${pay_within} ms, ${pay_ratio} of buyers pay after ${pay_delay} ms, the others cancel (half) or walk away"
    printf '%-8s %7s %8s %10s %7s %10s  %s\n' mode paid expired cancelled resold remaining result
    for row in "${LIFE_ROWS[@]}"; do
        # shellcheck disable=SC2086
        printf '%-8s %7s %8s %10s %7s %10s  %s\n' $row
    done
fi
if ((${#STORE_ROWS[@]} > 0)); then
    echo ""
    echo "system of record: PostgreSQL, fed by the instances' sinks from the outbox streams, against the order records in Redis"
    printf '%-8s %12s %15s %8s %s\n' mode redis_orders postgres_orders matches "drained after the sale"
    for row in "${STORE_ROWS[@]}"; do
        # shellcheck disable=SC2086
        printf '%-8s %12s %15s %8s %s\n' $row
    done
fi
if ((quiet)); then exit "$any_error"; fi
echo ""
echo "sell_s = seconds from the first request to the last 201 (req/s counts every answer,"
echo "mostly sold_out once the stock is gone); placed = client-counted units in 201 answers;"
echo "oversold = placed - stock (floored at 0);"
echo "stranded = stock left although demand was refused as sold_out; breaches = users over the"
echo "per-user limit (audit); errors = other answers and socket errors; audit = the server's"
echo "audit (recomputed from order records) vs the client's count."
echo "none and local are expected to oversell across instances; the other modes must be exact."
echo "report: $out/report.json  table: $out/summary.tsv$([[ -f $out/chart.png ]] && echo "  chart: $out/chart.png")"
echo "took $((SECONDS - started))s"
exit "$any_error"
