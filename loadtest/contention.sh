#!/usr/bin/env bash
# contention.sh — what one hot lock costs: every order of a one-segment SKU contends on
# the same segment lock. For each lock mode, a fresh cluster (scripts/cluster.sh: data
# redis, lock nodes for redlock, N instances behind nginx), a SKU with far more stock
# than the run can sell (so every request is a real order attempt, never sold_out), wrk
# through the balancer, and then:
#
#   placed, busy     orders placed and 503 busy answers, from the instances' /stats (wrk
#                    stops counting with requests still queued on the lock; the server
#                    places those too, and pays their commands)
#   req/s            wrk's answers per second
#   cmds/order       Redis commands per placed order on the data redis: INFO commandstats
#                    after minus before, all commands, including those run inside Lua
#                    scripts (Redis counts both); busy attempts are paid for by the orders
#   evalsha/order    script calls (EVALSHA + EVAL) per placed order
#   rt/order         round trips per placed order: INFO stats total_reads_processed (one
#                    socket read per request, or per pipelined batch)
#   lock cmds/rt     the same on the redlock lock nodes, summed over the nodes
#   wait p50/p99     lock wait, from the instances' /stats lock wait_histogram summed over
#                    the instances (bucket upper bounds: "<=2ms" means in (1ms, 2ms]);
#                    waits that ended busy count too
#   wake/acq         zk: ZooKeeper watch wake-ups per lock acquisition (/stats
#                    lock.watch_wakeups / lock.acquisitions, summed over the instances):
#                    the herd effect. Mode zk watches the predecessor, so a release wakes
#                    the next waiter only: about 1 or less. Mode zk-all is --lock zk with
#                    --zk-watch all, the naive recipe: every waiter watches the lock
#                    node's children, and every release (and every new contender) wakes
#                    all of them, about as many per acquisition as there are waiters
#   wake/wait        the same per acquisition that had to wait (lock.contended)
#
# This is a measurement, not a test: it prints a table (and the top commands per order
# of each mode) and exits 0 when every mode ran. scripts/cluster.sh starts a throwaway
# ZooKeeper for zk and zk-all. The zk fence is the lock node's czxid, enforced in the data Redis as a high-water
# mark (inventory/lua/fence_read.lua): the read under the lock takes a round trip of
# its own after the grant.
#
#   loadtest/contention.sh [--modes redis,setnx,redlock,zk,zk-all] [--instances 3]
#                          [--connections 96] [--duration 5s] [--work-us 2000]
#                          [--threads 2] [--keep DIR] [-- extra seckill flags]
# shellcheck disable=SC2317 # functions run from traps and wait_until look unreachable
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
CLUSTER=$ROOT/scripts/cluster.sh

modes="" instances=3 connections=96 duration=5s work_us=2000
wrk_threads=2 keep="" stock=100000000
extra=()
usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }
while (($#)); do
    case $1 in
    --modes) modes=${2:?}; shift 2 ;;
    --instances) instances=${2:?}; shift 2 ;;
    --connections) connections=${2:?}; shift 2 ;;
    --duration) duration=${2:?}; shift 2 ;;
    --work-us) work_us=${2:?}; shift 2 ;;
    --threads) wrk_threads=${2:?}; shift 2 ;;
    --keep) keep=${2:?}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage 0 ;;
    *) log "unknown option $1"; usage ;;
    esac
done
for p in wrk curl jq redis-cli nginx; do
    command -v "$p" >/dev/null || die "$p not found (scripts/deps.sh installs it)"
done
seckill_bin >/dev/null || exit 1
modes=${modes:-redis,setnx,redlock,zk,zk-all}
IFS=', ' read -r -a mode_list <<<"$modes"
for m in "${mode_list[@]}"; do
    case $m in
    none | local | setnx | redis | redlock | zk | zk-all) ;;
    *) die "mode '$m' has no lock to contend on" ;;
    esac
done
# mode_lock MODE: the --lock of a row; mode_flags MODE: the seckill flags it adds.
mode_lock() { case $1 in zk-all) echo zk ;; *) echo "$1" ;; esac; }
mode_flags() { case $1 in zk-all) echo "--zk-watch all" ;; zk) echo "--zk-watch predecessor" ;; esac; }

WORK=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/seckill-contention.XXXXXX")}
mkdir -p "$WORK"
CUR=""
cleanup() {
    local rc=$?
    if [[ -n $CUR ]]; then "$CLUSTER" down --dir "$CUR" --quiet || rc=1; fi
    [[ -n $keep ]] || rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'exit 143' TERM

# redis_snapshot PORT: "<command> <calls>" lines plus "reads <total_reads_processed>",
# from a single INFO (one read on the server side).
redis_snapshot() {
    redis-cli -h 127.0.0.1 -p "$1" info stats commandstats | tr -d '\r' | awk -F'[:=,]' '
        /^cmdstat_/ { sub(/^cmdstat_/, "", $1); print $1, $3 }
        /^total_reads_processed:/ { print "reads", $2 }'
}
# delta BEFORE AFTER: "<command> <calls>" of what happened in between, without INFO.
delta() {
    awk 'NR == FNR { b[$1] = $2; next } { d = $2 - b[$1]; if (d > 0) print $1, d }' "$1" "$2" |
        grep -v '^info ' || true
}
instances_idle() {
    local u n
    for u in $INSTANCE_URLS; do
        n=$(curl -s --max-time 2 "$u/stats" | jq -r '.inflight' 2>/dev/null) || return 1
        [[ $n =~ ^[0-9]+$ ]] && ((n <= 1)) || return 1
    done
}
# The wait histogram of every instance summed, as cumulative "<le_us> <count>" lines
# (le "inf" last). /stats buckets may be per-bucket or cumulative: the buckets of a
# per-bucket histogram add up to wait_count, a cumulative one ends with it.
wait_histogram() {
    local u
    for u in $INSTANCE_URLS; do
        curl -s --max-time 5 "$u/stats" | jq -r '.lock | .wait_count as $n | .wait_histogram
            | to_entries | map({le: (.key | sub("^le_"; "") | sub("us$"; "")), n: .value})
            | (if (map(.n) | add) == $n then . else
                 [foreach .[] as $e (0; .; $e)] as $es
                 | [range(0; length)] | map(. as $i | {le: $es[$i].le,
                     n: ($es[$i].n - (if $i == 0 then 0 else $es[$i - 1].n end))}) end)
            | .[] | "\(.le) \(.n)"'
    done | awk '{ n[$1] += $2; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
        END { c = 0; for (i = 1; i <= k; i++) { c += n[order[i]]; print order[i], c } }'
}
# percentile Q < cumulative histogram: "<=Xms" of the first bucket holding Q of the waits
percentile() {
    awk -v q="$1" '{ le[NR] = $1; c[NR] = $2 } END {
        t = c[NR]; if (t == 0) { print "-"; exit }
        for (i = 1; i <= NR; i++) if (c[i] >= q * t) break
        if (le[i] == "inf") print ">" le[i - 1] / 1000 "ms"; else print "<=" le[i] / 1000 "ms" }'
}

ROWS=()
TOPS=()
WAKES=()
run_mode() {
    local mode=$1 cdir=$WORK/$1 sku=hot
    local -a flags=()
    read -r -a flags <<<"$(mode_flags "$mode")"
    log "== $mode: $instances instances, 1 segment, ${work_us}us of work, wrk -c$connections -d$duration"
    CUR=$cdir
    "$CLUSTER" up --dir "$cdir" --quiet --instances "$instances" --lb nginx --lock "$(mode_lock "$mode")" \
        -- --work-us "$work_us" --log-level warn "${flags[@]}" "${extra[@]}" >/dev/null 2>"$WORK/$mode.up.err" || {
        log "   cluster did not start: $(tail -n 1 "$WORK/$mode.up.err")"
        CUR=""
        return 1
    }
    # shellcheck disable=SC1091
    source "$cdir/cluster.env"
    local -a auth=()
    [[ -n ${SECKILL_ADMIN_TOKEN:-} ]] && auth=(-H "Authorization: Bearer $SECKILL_ADMIN_TOKEN")
    curl -sf -o /dev/null --max-time 10 -X PUT -H 'Content-Type: application/json' "${auth[@]}" \
        -d "{\"stock\":$stock,\"segments\":1,\"per_user_limit\":1}" "$LB_URL/skus/$sku?reset=true" ||
        die "PUT /skus/$sku failed"
    local -a lock_ports=()
    local n
    for n in ${LOCK_NODES//,/ }; do lock_ports+=("${n##*:}"); done

    redis_snapshot "$REDIS_PORT" >"$WORK/$mode.data.0"
    for n in "${!lock_ports[@]}"; do redis_snapshot "${lock_ports[$n]}" >"$WORK/$mode.lock$n.0"; done
    wrk -t "$wrk_threads" -c "$connections" -d "$duration" -s "$ROOT/loadtest/orders.lua" \
        "$LB_URL" -- "$sku" 0 1 "c$$x$RANDOM" >"$WORK/$mode.wrk" 2>&1 || true
    wait_until 10 instances_idle || log "   (instances still busy after 10s)"
    redis_snapshot "$REDIS_PORT" >"$WORK/$mode.data.1"
    for n in "${!lock_ports[@]}"; do redis_snapshot "${lock_ports[$n]}" >"$WORK/$mode.lock$n.1"; done
    wait_histogram >"$WORK/$mode.hist"
    local u
    for u in $INSTANCE_URLS; do curl -s --max-time 5 "$u/stats"; done |
        jq -s '{placed: (map(.orders.placed) | add), busy: (map(.orders.busy) | add),
            fenced_off: (map(.fenced_off_commits) | add),
            acquisitions: (map(.lock.acquisitions) | add),
            contended: (map(.lock.contended) | add),
            wakeups: (map(.lock.watch_wakeups // 0) | add)}' \
            >"$WORK/$mode.orders" || die "$mode: no /stats"
    "$CLUSTER" down --dir "$cdir" --quiet >/dev/null 2>&1 || log "   cluster down failed"
    CUR=""

    local w placed busy rps
    w=$(grep -m1 '^{"tool":"wrk-orders"' "$WORK/$mode.wrk") || die "$mode: wrk gave no summary"
    # The server's counts, not wrk's: the requests still queued on the lock when wrk
    # stops are placed (and paid for) after it stopped counting.
    placed=$(jq -r .placed "$WORK/$mode.orders") busy=$(jq -r .busy "$WORK/$mode.orders")
    rps=$(jq -r .req_per_s <<<"$w")
    if ((placed == 0)) && (($(jq -r .fenced_off "$WORK/$mode.orders") > 0)); then
        die "$mode: nothing placed, every commit fenced off"
    fi
    ((placed > 0)) || die "$mode: nothing placed"
    # watch wake-ups per acquisition, and per acquisition that waited: zk modes only
    local wake="- -" counts
    if [[ $mode == zk* ]]; then
        counts=$(jq -r '"\(.wakeups) \(.acquisitions) \(.contended)"' "$WORK/$mode.orders")
        wake=$(awk '{ for (i = 2; i <= 3; i++) printf "%s%s", (i > 2 ? " " : ""),
            ($i > 0 ? sprintf("%.2f", $1 / $i) : "-"); print "" }' <<<"$counts")
        read -r -a counts <<<"$counts"
        WAKES+=("$mode: ${counts[0]} watch wake-ups, ${counts[1]} acquisitions (${counts[2]} waited)")
    fi
    delta "$WORK/$mode.data.0" "$WORK/$mode.data.1" >"$WORK/$mode.data.d"
    : >"$WORK/$mode.lock.d"
    for n in "${!lock_ports[@]}"; do delta "$WORK/$mode.lock$n.0" "$WORK/$mode.lock$n.1" >>"$WORK/$mode.lock.d"; done
    # per order: all commands, scripts, round trips (the "after" INFO's own read excluded)
    local per
    per=$(awk -v p="$placed" -v nl="${#lock_ports[@]}" '
        FILENAME ~ /data.d$/ { if ($1 == "reads") dr = $2 - 1; else { dc += $2; if ($1 ~ /^eval/) de += $2 } }
        FILENAME ~ /lock.d$/ { if ($1 == "reads") lr += $2; else lc += $2 }
        END {
            printf "%.2f %.2f %.2f ", dc / p, de / p, dr / p
            if (nl > 0) printf "%.2f %.2f\n", lc / p, (lr - nl) / p; else print "- -"
        }' "$WORK/$mode.data.d" "$WORK/$mode.lock.d")
    ROWS+=("$mode $placed $busy $rps $per $(percentile 0.5 <"$WORK/$mode.hist") $(percentile 0.99 <"$WORK/$mode.hist") $wake")
    TOPS+=("$mode: $(cat "$WORK/$mode.data.d" "$WORK/$mode.lock.d" | grep -v '^reads ' |
        awk '{ c[$1] += $2 } END { for (k in c) print c[k], k }' | sort -rn | head -n 8 |
        awk -v p="$placed" '{ printf "%s%s %.2f", (NR > 1 ? ", " : ""), $2, $1 / p }')")
}

for m in "${mode_list[@]}"; do run_mode "$m"; done

echo
echo "one segment, $instances instances behind nginx, ${work_us}us of work, wrk -t$wrk_threads -c$connections -d$duration"
fmt='%-8s %7s %6s %8s %10s %13s %9s %11s %9s %9s %9s %8s %9s\n'
# shellcheck disable=SC2059
printf "$fmt" mode placed busy req/s cmds/order evalsha/order rt/order lock_cmds/o lock_rt/o wait_p50 wait_p99 wake/acq wake/wait
for r in "${ROWS[@]}"; do
    # shellcheck disable=SC2086,SC2059
    printf "$fmt" $r
done
echo
echo "commands per placed order (data redis + lock nodes, top 8):"
printf '  %s\n' "${TOPS[@]}"
if ((${#WAKES[@]})); then
    echo
    echo "zk watch wake-ups, over the instances' /stats (lock.watch_wakeups, acquisitions, contended):"
    printf '  %s\n' "${WAKES[@]}"
fi
