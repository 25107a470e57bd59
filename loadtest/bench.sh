#!/usr/bin/env bash
# bench.sh — the performance report (make bench): every system through the same
# balancer, side by side, in one run on this machine, with a progress line per step.
#
#   loadtest/bench.sh [--quick] [--systems LIST] [--scenarios LIST] [--out DIR]
#                     [--s1 D] [--s2 D] [--cont D] [--warmup D] [--no-chart] [--keep]
#
#   --quick            a smoke test of the harness: 1 s per step, no warm-up (also
#                      BENCH_QUICK=1); its figures are not worth quoting
#   --systems LIST     lock modes, system ids (redis-b1) or canned, comma-separated
#                      (none,local,setnx,redis,redlock,zk,pg,atomic,redis-pay,redis-sink,
#                      redis-full,redis-buyer,canned)
#   --scenarios LIST   s1-c256,s1-c64,s2,cont (all)
#   --s1 D, --s2 D, --cont D, --warmup D
#                      wrk duration per step, wrk syntax (5s, 4s, 4s, 1s; quick: 1s, 0)
#   --out DIR          where bench.json and bench.png go
#                      (results/bench-<time>/, results/bench-latest links to it)
#   --no-chart, --keep skip the chart; keep the clusters' logs under DIR/clusters/
#   --redis-quota PCT  hold the data Redis to PCT% of one core (a cgroup v1 cpu quota:
#                      2.5 ms of each 10 ms period at 25), so that Redis, not the
#                      instances, nginx and wrk that share its cores, is what saturates:
#                      its µs per order then are what one saturated core spends (issue
#                      47's saturation run of the whole order path; BENCH_REDIS_QUOTA)
#
# Set-up: per system one cluster from scripts/cluster.sh (a data Redis with its default
# AOF policy, 3 lock nodes for redlock, one ZooKeeper server for zk, one PostgreSQL for
# pg, 3 seckill instances
# behind nginx, K=16), used for
# all of its S1 and S2 steps; contention needs other server flags and gets its own.
#
# Scenarios (wrk -t2 through the balancer, loadtest/orders.lua):
#   s1-c256  flash crowd: stock 10^9 (it never runs out), a new user per request, -c256
#   s1-c64   the same at -c64
#   s2       sold out: a SKU of stock 0, so every answer is 409 sold_out, -c64
#   cont     contention: one segment (K=1), --work-us 2000 in the critical section, -c64;
#            seckill systems only (the canned 201 has nothing to contend on)
#
# Systems: every lock mode; redis-pay, the redis mode selling SKUs with a payment window
# of 2 s (PAY_WITHIN_MS) whose buyers pay half of their orders 200 ms after the 201,
# cancel a quarter then and let the rest expire (orders.lua's PAY_RATIO 0.5; a pay or
# cancel is a request of its own; its Redis and seckill CPU count in the per-order and
# per-request columns, and the sweeps' too); redis-sink, the redis mode with --postgres
# (every order's change goes to its SKU's outbox stream, and the instances' sinks carry
# it to a throwaway PostgreSQL: its CPU per placed order, and the sink's lag over the
# run, peak and last, and the time it took to drain to 0 after it, are the step's
# "sink" and a line below the table); redis-full, both at once (the whole life of an
# order with its outbox: the per-order cost with the lifecycle and the outbox on);
# redis-buyer, the redis mode with --buyer-key-file, wrk's buyers signing a Seckill-Buyer
# token each (its seckill_us/req less redis's is what checking a token costs); and
# canned (scripts/cluster.sh up --canned: the same nginx balancer in front of upstreams
# that answer a fixed 201; the ceiling). When the
# server takes --batch, each mode of BATCHED_MODES runs twice, at its default batch
# and at --batch 1; without it every mode runs once, labelled "1 (no --batch)".
#
# Columns, per step: req/s, p50/p99 (ms, wrk); x_atomic, x_canned: req/s over atomic's
# and canned's in the same scenario; ord/s/core: 10^6 / redis_us/ord, the orders a
# second one core of that Redis would take; redis_us/ord: Redis CPU (INFO used_cpu_sys +
# used_cpu_user, data Redis + lock nodes) per placed order; rt/ord: Redis round trips
# (INFO total_reads_processed, data Redis + lock nodes) per placed order; cmd/ord: the
# data Redis's commands (INFO commandstats, calls summed: the scripts' own calls
# counted, so a script of eight calls is nine) per placed order, the same from run to run
# where CPU is not, the background work included (sweeps, health); for zk the
# ZooKeeper server counts as a lock node (CPU: its JVM's /proc utime + stime; round
# trips: the requests it received, srvr's Received), and so does pg's PostgreSQL (CPU:
# the postmaster's and its children's utime + stime; round trips: the transactions of
# pg_stat_database, one per statement, whose figures may lag by up to a second); in S2, where
# nothing is placed, both are per answer; seckill_us/req: CPU of the instances
# (/proc/<pid>/stat utime + stime) per answer; cs/req: context switches of every
# instance thread (/proc/<pid>/task/*/status) per answer; mach_us/req: the whole
# machine's busy CPU (/proc/stat: wrk, nginx, the instances, Redis and the rest) over the
# wrk run per answer; placed: orders placed (the
# instances' /stats); oversold: units sold that the stock never lost (sold minus
# initial − remaining, which a finite stock would have oversold); errors: answers other
# than 201 and 409 sold_out, and socket errors.
#
# Exit status 0 when every step ran, 1 otherwise (the step's row says why). Whether a
# target is met is reported, not enforced. Ctrl-C stops the running cluster.
# shellcheck disable=SC2317 # functions run from traps and wait_until look unreachable
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

# The lock modes that get a --batch 1 row beside their default batch, once the server
# has --batch: the ones that hold a lock. none has no hold, atomic is the baseline.
BATCHED_MODES="local setnx redis redlock zk pg"
INSTANCES=3 SEGMENTS=16 S1_STOCK=1000000000 CONT_STOCK=100000000 CONT_WORK_US=2000
WRK_THREADS=2

systems="none,local,setnx,redis,redlock,zk,pg,atomic,redis-pay,redis-sink,redis-full,redis-buyer,canned"
# redis-pay's reservations: the SKUs' payment window, the share of buyers who pay, and
# when they pay or cancel
PAY_WITHIN_MS=2000 PAY_RATIO=0.5 PAY_DELAY_MS=200
scenarios="s1-c256,s1-c64,s2,cont"
quick=${BENCH_QUICK:-0}
[[ $quick == 1 || $quick == 0 || -z $quick ]] || quick=1
d_s1="" d_s2="" d_cont="" d_warm="" out="" chart=1 keep=0

usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }
while (($#)); do
    case $1 in
    --quick) quick=1; shift ;;
    --systems) systems=${2:?"$1 needs a value"}; shift 2 ;;
    --scenarios) scenarios=${2:?"$1 needs a value"}; shift 2 ;;
    --s1) d_s1=${2:?"$1 needs a value"}; shift 2 ;;
    --s2) d_s2=${2:?"$1 needs a value"}; shift 2 ;;
    --cont) d_cont=${2:?"$1 needs a value"}; shift 2 ;;
    --warmup) d_warm=${2:?"$1 needs a value"}; shift 2 ;;
    --out) out=${2:?"$1 needs a value"}; shift 2 ;;
    --no-chart) chart=0; shift ;;
    --keep) keep=1; shift ;;
    --redis-quota) redis_quota=${2:?"$1 needs a value"}; shift 2 ;;
    -h | --help) usage 0 ;;
    *) log "unknown option $1"; usage ;;
    esac
done
if ((${quick:-0})); then
    quick=1 d_s1=${d_s1:-1s} d_s2=${d_s2:-1s} d_cont=${d_cont:-1s} d_warm=${d_warm:-0}
else
    quick=0 d_s1=${d_s1:-5s} d_s2=${d_s2:-4s} d_cont=${d_cont:-4s} d_warm=${d_warm:-1s}
fi
for d in "$d_s1" "$d_s2" "$d_cont" "$d_warm"; do
    [[ $d =~ ^[0-9]+[smh]?$ ]] || die "durations are whole wrk durations (4s, 1m), got '$d'"
done
lt_require jq wrk curl redis-cli nginx awk
redis_quota=${redis_quota:-${BENCH_REDIS_QUOTA:-0}}
if ! [[ $redis_quota =~ ^[0-9]+$ ]] || ((redis_quota > 100)); then
    die "--redis-quota is a whole percentage of one core, 0..100 (0: none), got '$redis_quota'"
fi
# The cgroup that holds the data Redis to its quota (cgroup v1's cpu controller),
# made at the first cluster and removed on exit.
QUOTA_CG=/sys/fs/cgroup/cpu/seckill-bench.$$
quota_hold() { # DIR: the data Redis of the cluster in DIR into the quota's cgroup
    ((redis_quota > 0)) || return 0
    local pid
    read -r pid <"$1/redis.pid" || die "no $1/redis.pid to hold to the quota"
    [[ -d $QUOTA_CG ]] || mkdir "$QUOTA_CG" || die "cannot make $QUOTA_CG (cgroup v1 cpu)"
    echo 10000 >"$QUOTA_CG/cpu.cfs_period_us"
    echo $((redis_quota * 100)) >"$QUOTA_CG/cpu.cfs_quota_us"
    echo "$pid" >"$QUOTA_CG/cgroup.procs"
}
lt_on_exit() { # the quota's cgroup emptied (its Redis back at the root) and removed
    [[ -d $QUOTA_CG ]] || return 0
    local pid
    while read -r pid; do echo "$pid" >/sys/fs/cgroup/cpu/cgroup.procs; done <"$QUOTA_CG/cgroup.procs"
    rmdir "$QUOTA_CG"
}
BIN=$(seckill_bin)
CLK_TCK=$(getconf CLK_TCK)

# ---- the systems ---------------------------------------------------------------------

# Each system is "id|lock|batch label|extra seckill flags". Adding a variant is one line
# here; everything downstream goes by id.
BATCH_SUPPORTED=0
# The help text is read whole first: grep -q stops at the first match, and under
# pipefail the server's SIGPIPE on the rest of its output would read as "no".
if grep -q -- '--batch' <<<"$("$BIN" --help 2>&1)"; then BATCH_SUPPORTED=1; fi
SYSTEMS=()
add_system() { # ID LOCK BATCH_LABEL [FLAGS...]: added when --systems names its id or lock
    local id=$1 lock=$2 label=$3
    shift 3
    [[ ",$systems," == *",$id,"* || ",$systems," == *",$lock,"* ]] || return 0
    SYSTEMS+=("$id|$lock|$label|$*")
}
for m in none local setnx redis redlock zk pg atomic; do
    if ((!BATCH_SUPPORTED)); then
        add_system "$m" "$m" "1 (no --batch)"
    elif [[ " $BATCHED_MODES " == *" $m "* ]]; then
        add_system "$m" "$m" default
        add_system "$m-b1" "$m" 1 --batch 1
    else
        add_system "$m" "$m" default
    fi
done
# by its id only (--systems redis means the mode's own rows)
[[ ",$systems," != *,redis-pay,* ]] || SYSTEMS+=("redis-pay|redis|default|")
[[ ",$systems," != *,redis-sink,* ]] || SYSTEMS+=("redis-sink|redis|default|")
[[ ",$systems," != *,redis-full,* ]] || SYSTEMS+=("redis-full|redis|default|")
# (BUYER_KEY: the key file made below, once the output dir is there)
[[ ",$systems," != *,redis-buyer,* ]] || SYSTEMS+=("redis-buyer|redis|default|--buyer-key-file BUYER_KEY")
add_system canned canned -
IFS=', ' read -r -a names <<<"$systems"
for n in "${names[@]}"; do
    printf '%s\n' "${SYSTEMS[@]}" | grep -qE "^$n\||^[^|]*\|$n\|" ||
        die "--systems: '$n' is no system here (lock modes, canned$( ((BATCH_SUPPORTED)) && echo ', <mode>-b1'))"
done
IFS=', ' read -r -a SCENARIOS <<<"$scenarios"
for s in "${SCENARIOS[@]}"; do
    case $s in s1-c256 | s1-c64 | s2 | cont) ;; *) die "unknown scenario '$s'" ;; esac
done
want() { [[ ",$scenarios," == *",$1,"* ]]; }
sys_field() { # ID N: field N (1 id, 2 lock, 3 batch label, 4 flags) of system ID
    local s
    for s in "${SYSTEMS[@]}"; do
        [[ ${s%%|*} == "$1" ]] && { cut -d'|' -f"$2" <<<"$s"; return 0; }
    done
    return 1
}

# Steps, for the progress lines: every scenario of every system (canned has no contention).
for s in "${SYSTEMS[@]}"; do
    id=${s%%|*}
    for sc in "${SCENARIOS[@]}"; do
        [[ $sc == cont && $id == canned ]] && continue
        TOTAL=$((TOTAL + 1))
    done
done

# ---- output and cleanup ----------------------------------------------------------------

# An --out used before: its old steps must not join this report.
[[ -z $out ]] || rm -rf "$out/steps"
lt_out "bench-$(date +%Y%m%d-%H%M%S)" bench-latest steps clusters
# the clusters' logs go unless --keep, or the run failed
if ((keep)); then lt_traps always; else lt_traps failed; fi
CANNED=0 # cluster.env says, once a cluster is up
# redis-buyer's --buyer-key-file: 32 random bytes as hex, in the output dir
BUYER_KEY=$out/buyer.key
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$BUYER_KEY"
WRK_BUYER_KEY="" # the key wrk's buyers sign with (orders.lua), for redis-buyer

# ---- measuring ---------------------------------------------------------------------------

# redis_sample PORT: "<total_reads_processed> <used_cpu_sys + used_cpu_user, seconds>
# <commands run>" from one INFO (which is itself one read and one command): the
# commands are commandstats' calls summed, scripts' own calls included.
redis_sample() {
    redis-cli -h 127.0.0.1 -p "$1" info stats cpu commandstats 2>/dev/null | tr -d '\r' | awk -F: '
        $1 == "total_reads_processed" { r = $2 }
        $1 == "used_cpu_sys" { c += $2 } $1 == "used_cpu_user" { c += $2 }
        $1 ~ /^cmdstat_/ { split($2, f, /[=,]/); k += f[2] }
        END { printf "%d %.6f %d\n", r, c, k }'
}
# zk_sample DIR NAME: "<requests received> <CPU seconds>" of ZooKeeper node NAME of DIR:
# srvr's Received (each srvr is one of them, as an INFO is one read) and its JVM's
# utime + stime.
zk_sample() {
    local pid r t
    r=$(zk_srvr "$(sed -n 's/^clientPort=//p' "$1/$2/zoo.cfg")" | sed -n 's/^Received: //p') || true
    read -r pid <"$1/$2.pid" 2>/dev/null || pid=0
    t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null) || t=0
    awk -v r="${r:-0}" -v t="${t:-0}" -v hz="$CLK_TCK" 'BEGIN { printf "%d %.6f\n", r, t / hz }'
}
# pg_sample DIR: "<transactions> <CPU seconds>" of the PostgreSQL of DIR (pg): its
# database's committed and rolled back transactions (each statement of the lock is one)
# and the utime + stime of the postmaster and its children (the backends).
pg_sample() {
    local pid r t=0 p
    r=$(psql -qAtX "$PG_URL" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database
        WHERE datname = current_database()" 2>/dev/null) || r=0
    read -r pid <"$1/pg.pid" 2>/dev/null || pid=0
    for p in "$pid" $(pgrep -P "$pid" 2>/dev/null); do
        t=$((t + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    awk -v r="${r:-0}" -v t="$t" -v hz="$CLK_TCK" 'BEGIN { printf "%d %.6f\n", r, t / hz }'
}
# proc_sample DIR: "<utime + stime ticks> <context switches>" summed over the seckill
# instances recorded in DIR. utime/stime of /proc/<pid>/stat cover every thread; the
# context switches of /proc/<pid>/status only the main one, hence task/*/status.
proc_sample() {
    local f pid ticks=0 cs=0 t c
    for f in "$1"/seckill-*.pid; do
        [[ -e $f ]] || continue
        read -r pid <"$f"
        t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null) || t=0
        c=$(cat "/proc/$pid"/task/*/status 2>/dev/null |
            awk '/^(non)?voluntary_ctxt_switches:/ { s += $2 } END { print s + 0 }') || c=0
        ticks=$((ticks + ${t:-0})) cs=$((cs + ${c:-0}))
    done
    echo "$ticks $cs"
}
# stats_sample: the instances' order counters summed, as JSON ({placed, busy, ...}).
stats_sample() {
    local u
    for u in $INSTANCE_URLS; do curl -s --max-time 5 "$u/stats" || echo null; done |
        jq -cs 'map(.orders? // {}) | {placed: (map(.placed // 0) | add),
            busy: (map(.busy // 0) | add), sold_out: (map(.sold_out // 0) | add)}'
}
# sample before|after: everything above as one JSON object (zeros for canned). The
# instances' /proc figures are read nearest to the measured window, so that the /stats
# requests of the sample itself stay out of it; each INFO is one read of its Redis,
# subtracted later (the "after" INFO is inside the delta).
sample() {
    local data="0 0 0" lock_r=0 lock_c=0 nodes=0 n r c k proc="0 0" stats='{}' ticks cs
    if ((!CANNED)); then
        [[ $1 == after ]] && proc=$(proc_sample "$CUR_CLUSTER")
        data=$(redis_sample "$REDIS_PORT")
        for n in ${LOCK_NODES//,/ } ${ZK_NAMES:-} $([[ ${LOCK_MODE:-} == pg ]] && echo pg); do
            if [[ $n == pg ]]; then
                read -r r c <<<"$(pg_sample "$CUR_CLUSTER")"
            elif [[ $n == zk-* ]]; then
                read -r r c <<<"$(zk_sample "$CUR_CLUSTER" "$n")"
            else
                read -r r c _ <<<"$(redis_sample "${n##*:}")"
            fi
            nodes=$((nodes + 1)) lock_r=$((lock_r + r))
            lock_c=$(awk -v a="$lock_c" -v b="$c" 'BEGIN { print a + b }')
        done
        stats=$(stats_sample)
        [[ $1 == before ]] && proc=$(proc_sample "$CUR_CLUSTER")
    fi
    read -r r c k <<<"$data"
    read -r ticks cs <<<"$proc"
    jq -cn --argjson stats "$stats" --argjson dr "$r" --argjson dc "$c" --argjson dk "$k" \
        --argjson lr "$lock_r" \
        --argjson lc "$lock_c" --argjson nodes "$nodes" --argjson ticks "$ticks" --argjson cs "$cs" \
        '{orders: $stats, data_reads: $dr, data_cpu_s: $dc, data_calls: $dk, lock_nodes: $nodes,
          lock_reads: $lr,
          lock_cpu_s: $lc, seckill_ticks: $ticks, seckill_ctx_switches: $cs}'
}
# machine_ticks: the machine's busy CPU so far, in clock ticks (/proc/stat's cpu line:
# everything but idle and iowait), for the CPU per answer of the whole machine (wrk,
# nginx, the instances, Redis, the rest) over a wrk run.
machine_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
instances_idle() {
    local u n
    for u in $INSTANCE_URLS; do
        n=$(curl -s --max-time 2 "$u/stats" | jq -r '.inflight' 2>/dev/null) || return 1
        [[ $n =~ ^[0-9]+$ ]] && ((n <= 1)) || return 1 # the /stats request itself
    done
}
# sink_lag_watch FILE: the sink's lag (redis-sink) as the first instance last measured
# it, every 0.5 s until killed: a line "<events> <seconds>" each.
sink_lag_watch() {
    local u=${INSTANCE_URLS%% *}
    while :; do
        curl -s --max-time 2 "$u/stats" | jq -r '"\(.sink.lag_events) \(.sink.lag_seconds)"' >>"$1" 2>/dev/null
        sleep 0.5
    done
}
# sink_drain FILE WATCHER PG_BEFORE: the watcher stopped; then the wait until every
# instance's sink says lag 0 (30 s at most), and PostgreSQL's CPU since PG_BEFORE, as
# JSON: the peak and last lag seen under the load, the time to drain, the CPU.
sink_drain() {
    local t0=${EPOCHREALTIME/./} ms=null c0 c1
    kill "$2" 2>/dev/null
    wait "$2" 2>/dev/null
    drained() {
        local u
        for u in $INSTANCE_URLS; do
            [[ $(curl -s --max-time 2 "$u/stats" | jq -r .sink.lag_events) == 0 ]] || return 1
        done
    }
    wait_until 30 drained && ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
    read -r _ c0 <<<"$3"
    read -r _ c1 <<<"$(pg_sample "$CUR_CLUSTER")"
    awk -v ms="$ms" -v c="$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%d", (b - a) * 1e6 }')" '
        $1 ~ /^[0-9]+$/ { n++; if ($1 > pe) pe = $1; if ($2 > ps) ps = $2; le = $1; ls = $2 }
        END { printf "{\"lag_events_peak\": %d, \"lag_seconds_peak\": %.3f, \"lag_events_last\": %d, \"lag_seconds_last\": %.3f, \"samples\": %d, \"drain_ms\": %s, \"pg_cpu_us\": %d}\n", pe, ps, le, ls, n, ms, c }' "$1"
}
PAYING=() # the buyers' orders.lua arguments when the system sells with a payment window
wrk_run() { # SKU CONNECTIONS DURATION FILE
    SECKILL_BUYER_KEY_FILE=$WRK_BUYER_KEY wrk -t "$WRK_THREADS" -c "$2" -d "$3" -s "$LUA" "$LB_URL" -- "$1" 0 1 "b$$x$RANDOM" \
        "${PAYING[@]}" >"$4" 2>&1 || true
}

# sys_pays ID, sys_sinks ID: whether system ID sells with a payment window (its buyers
# pay, cancel or let expire), whether its instances have --postgres (the outbox and the
# sink); redis-full does both.
sys_pays() { [[ $1 == *-pay || $1 == redis-full ]]; }
sys_sinks() { [[ $1 == redis-sink || $1 == redis-full ]]; }

# step SCENARIO SYSTEM_ID SKU CONNECTIONS DURATION: one measured wrk run on the current
# cluster; writes $out/steps/SCENARIO.SYSTEM_ID.json (the row, without the ratios).
step() {
    local sc=$1 id=$2 sku=$3 conns=$4 dur=$5 f=$out/steps/$1.$2
    local before after wrk_json="" sku_json=null error=""
    STEP=$((STEP + 1))
    local sink_pg="" sink_watch="" sink_json=null
    if sys_sinks "$id"; then # the sink: PostgreSQL's CPU, the lag over the run
        sink_pg=$(pg_sample "$CUR_CLUSTER")
        sink_lag_watch "$f.lag" &
        sink_watch=$!
    fi
    before=$(sample before)
    local m0 m1
    m0=$(machine_ticks)
    wrk_run "$sku" "$conns" "$dur" "$f.wrk.txt"
    m1=$(machine_ticks)
    wrk_json=$(grep -m1 '^{"tool":"wrk-orders"' "$f.wrk.txt" || true)
    if [[ -z $wrk_json ]]; then
        error="wrk gave no summary: $(tail -n 1 "$f.wrk.txt")"
        wrk_json=null
    fi
    if ((!CANNED)); then
        wait_until 10 instances_idle || error="${error:-instances still busy 10s after wrk}"
    fi
    after=$(sample after)
    if [[ -n $sink_watch ]]; then
        sink_json=$(sink_drain "$f.lag" "$sink_watch" "$sink_pg")
    fi
    if ((!CANNED)); then # after the sample: it reads Redis
        sku_json=$(curl -s --max-time 10 "$LB_URL/skus/$sku" | jq -c . 2>/dev/null) || sku_json=null
        [[ -n $sku_json ]] || sku_json=null
    fi
    [[ -z $error ]] || any_error=1
    jq -n --arg scenario "$sc" --arg system "$id" --arg lock "$(sys_field "$id" 2)" \
        --arg batch "$(sys_field "$id" 3)" --argjson connections "$conns" --arg duration "$dur" \
        --argjson canned "$CANNED" --argjson b "$before" --argjson a "$after" \
        --argjson wrk "$wrk_json" --argjson sku "$sku_json" --argjson tck "$CLK_TCK" \
        --argjson sink "$sink_json" --argjson mticks "$((m1 - m0))" \
        --arg error "$error" -f /dev/stdin >"$f.json" <<'JQ'
def per($x; $n): if $canned == 1 or $n == null or $n <= 0 then null else ($x / $n * 100 | round) / 100 end;
($wrk.requests // 0) as $req
| (if $canned == 1 then null
   else ($a.orders.placed // 0) - ($b.orders.placed // 0) end) as $placed
| ($a.data_reads - $b.data_reads - 1 + $a.lock_reads - $b.lock_reads - $a.lock_nodes) as $reads
| {
    scenario: $scenario, system: $system, lock: $lock, batch: $batch,
    connections: $connections, duration: $duration,
    requests: $req, req_per_s: ($wrk.req_per_s // 0),
    p50_ms: ($wrk.p50_ms // null), p99_ms: ($wrk.p99_ms // null),
    placed: $placed,
    sold_out: ($wrk.sold_out // 0),
    busy: ($wrk.busy // 0),
    errors: (if $wrk == null then null else
        ($wrk.limit_reached + $wrk.busy + $wrk.unavailable + ($wrk.outcome_unknown // 0)
         + $wrk.other_409 + $wrk.other_503
         + $wrk.other + ($wrk.socket_errors | add)) end),
    oversold: (if $sku == null then null
               else [$sku.sold - ($sku.initial - $sku.remaining), 0] | max end),
    redis_reads: (if $canned == 1 then null else $reads end),
    redis_calls: (if $canned == 1 then null else $a.data_calls - $b.data_calls - 1 end),
    redis_cpu_us: (if $canned == 1 then null else
        (($a.data_cpu_s - $b.data_cpu_s) + ($a.lock_cpu_s - $b.lock_cpu_s)) * 1e6 | round end),
    seckill_cpu_us: (if $canned == 1 then null else
        ($a.seckill_ticks - $b.seckill_ticks) * 1e6 / $tck | round end),
    machine_cpu_us: ($mticks * 1e6 / $tck | round),
    seckill_ctx_switches: (if $canned == 1 then null else
        $a.seckill_ctx_switches - $b.seckill_ctx_switches end),
    error: (if $error == "" then null else $error end),
    sink: (if $sink == null then null else $sink + {
        pg_cpu_us_per_order: per($sink.pg_cpu_us; $placed)} end),
    wrk: $wrk, sku: $sku, before: $b, after: $a
  }
| .redis_rt_per_order = per(.redis_reads; $placed)
| .redis_calls_per_order = per(.redis_calls; $placed)
| .redis_calls_per_request = per(.redis_calls; $req)
| .redis_cpu_us_per_order = per(.redis_cpu_us; $placed)
| .redis_orders_per_core_s = (if (.redis_cpu_us_per_order // 0) > 0
                              then (1000000 / .redis_cpu_us_per_order | floor) else null end)
| .redis_rt_per_request = per(.redis_reads; $req)
| .redis_cpu_us_per_request = per(.redis_cpu_us; $req)
| .machine_cpu_us_per_request = (if $req > 0 then (.machine_cpu_us / $req * 10 | round) / 10
                                 else null end)
| .seckill_cpu_us_per_request = per(.seckill_cpu_us; $req)
| .ctx_switches_per_request = per(.seckill_ctx_switches; $req)
JQ
    progress "$(jq -r '"\(.scenario) \(.system): \(.req_per_s | floor) req/s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms"
        + (if .placed != null then ", placed \(.placed)" else "" end)
        + (if .error then ", ERROR: \(.error)" else "" end)' "$f.json")"
}

# cluster_up ID KIND [-- seckill flags]: starts the cluster of system ID (KIND main or
# cont) and sources its cluster.env. Returns 1 (after saying why) when it did not start.
cluster_up() {
    local id=$1 kind=$2 lock dir=$out/clusters/$1.$2 t0=$SECONDS
    shift 2
    lock=$(sys_field "$id" 2)
    local -a up=(--instances "$INSTANCES" --lb nginx)
    if [[ $lock == canned ]]; then
        up+=(--canned)
    else
        sys_sinks "$id" && up+=(--postgres)
        local flags
        flags=$(sys_field "$id" 4)
        # shellcheck disable=SC2206 # the flags are words
        up+=(--lock "$lock" -- --segments "$SEGMENTS" --log-level warn ${flags//BUYER_KEY/$BUYER_KEY} "$@")
    fi
    if ! lt_cluster_up "$dir" "$dir.up.err" "${up[@]}"; then
        progress "$id ($kind): cluster did not start: $UP_ERROR"
        return 1
    fi
    quota_hold "$dir"
    local what="redis, $INSTANCES instances, nginx"
    ((redis_quota == 0)) || what="redis held to ${redis_quota}% of a core, $INSTANCES instances, nginx"
    [[ -z $LOCK_NODES ]] || what+=", $(tr ',' '\n' <<<"$LOCK_NODES" | wc -l) lock nodes"
    [[ -z ${ZK_NAMES:-} ]] || what+=", ZooKeeper ($ZK_NAMES)"
    ((!CANNED)) || what="nginx, $INSTANCES canned 201 upstreams"
    progress "$id: $kind cluster up in $((SECONDS - t0))s ($what)"
}
cluster_down() { lt_cluster_down || progress "cluster down failed"; }
# A step that could not run still gets its row, saying why.
failed_step() { # SCENARIO ID ERROR
    STEP=$((STEP + 1))
    any_error=1
    jq -n --arg scenario "$1" --arg system "$2" --arg lock "$(sys_field "$2" 2)" \
        --arg batch "$(sys_field "$2" 3)" --arg error "$3" \
        '{scenario: $scenario, system: $system, lock: $lock, batch: $batch,
          req_per_s: null, error: $error}' >"$out/steps/$1.$2.json"
    progress "$1 $2: ERROR: $3"
}

run_system() {
    local id=$1 sc pay=""
    local -a main=()
    PAYING=()
    WRK_BUYER_KEY=""
    [[ $id != redis-buyer ]] || WRK_BUYER_KEY=$BUYER_KEY
    if sys_pays "$id"; then
        pay=",\"pay_within_ms\":$PAY_WITHIN_MS"
        PAYING=(- "$PAY_RATIO" "$PAY_DELAY_MS" "${SECKILL_ADMIN_TOKEN:-}")
    fi
    for sc in s1-c256 s1-c64 s2; do want "$sc" && main+=("$sc"); done
    if ((${#main[@]})) && ! cluster_up "$id" main; then
        for sc in "${main[@]}"; do failed_step "$sc" "$id" "cluster did not start"; done
    elif ((${#main[@]})); then
        if ((!CANNED)) && ! { put_sku s1-c256 "$S1_STOCK" "$SEGMENTS" "$pay" &&
            put_sku s1-c64 "$S1_STOCK" "$SEGMENTS" "$pay" && put_sku s2 0 "$SEGMENTS" "$pay"; }; then
            for sc in "${main[@]}"; do failed_step "$sc" "$id" "PUT /skus failed"; done
            main=()
        elif [[ $d_warm != 0 ]]; then
            # Connections up, threads and caches warm; its orders land before the first
            # sample.
            wrk_run s1-c256 64 "$d_warm" "$out/steps/warmup.$id.wrk.txt"
            ((CANNED)) || wait_until 10 instances_idle || true
        fi
        for sc in "${main[@]}"; do
            case $sc in
            s1-c256) step "$sc" "$id" s1-c256 256 "$d_s1" ;;
            s1-c64) step "$sc" "$id" s1-c64 64 "$d_s1" ;;
            s2) step "$sc" "$id" s2 64 "$d_s2" ;;
            esac
        done
        cluster_down
    fi
    if want cont && [[ $id != canned ]]; then
        if ! cluster_up "$id" cont --work-us "$CONT_WORK_US"; then
            failed_step cont "$id" "cluster did not start"
        else
            if put_sku hot "$CONT_STOCK" 1 "$pay"; then
                step cont "$id" hot 64 "$d_cont"
            else
                failed_step cont "$id" "PUT /skus failed"
            fi
            cluster_down
        fi
    fi
}

progress "seckill bench$( ((quick)) && echo ' (QUICK: smoke test, not numbers)'):" \
    "systems $(printf '%s\n' "${SYSTEMS[@]}" | cut -d'|' -f1 | paste -sd,)," \
    "scenarios $scenarios, S1 $d_s1, S2 $d_s2, contention $d_cont, warm-up $d_warm;" \
    "--batch $( ((BATCH_SUPPORTED)) && echo supported || echo 'not supported by this server')"
for s in "${SYSTEMS[@]}"; do run_system "${s%%|*}"; done

# ---- the report --------------------------------------------------------------------------

# Ratios to atomic and canned in the same scenario, then one document.
jq -s --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --argjson quick "$quick" \
    --argjson batch "$BATCH_SUPPORTED" --arg rev "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" \
    --arg d_s1 "$d_s1" --arg d_s2 "$d_s2" --arg d_cont "$d_cont" --arg d_warm "$d_warm" \
    --argjson nproc "$(nproc)" --arg kernel "$(uname -r)" --argjson took "$((SECONDS - started))" \
    --argjson instances "$INSTANCES" --argjson segments "$SEGMENTS" \
    --argjson cont_work_us "$CONT_WORK_US" --arg systems "$systems" --arg scenarios "$scenarios" '
    def ratio($x; $y): if $x == null or $y == null or $y <= 0 then null
                       else ($x / $y * 1000 | round) / 1000 end;
    def rps($sc; $sys): (map(select(.scenario == $sc and .system == $sys))[0].req_per_s) // null;
    . as $rows
    | map(.scenario as $sc | . + {ratio_atomic: ratio(.req_per_s; $rows | rps($sc; "atomic")),
                                  ratio_canned: ratio(.req_per_s; $rows | rps($sc; "canned"))})
    | . as $rows
    | def get($sc; $sys; $f): ($rows | map(select(.scenario == $sc and .system == $sys))[0][$f]) // null;
      def target($name; $v; $op; $t): {name: $name, value: $v, op: $op, target: $t,
          met: (if $v == null then null elif $op == ">=" then $v >= $t else $v <= $t end)};
    {
      created: $created, quick: ($quick == 1), took_s: $took, git_rev: $rev,
      host: {nproc: $nproc, kernel: $kernel},
      config: {instances: $instances, segments: $segments, balancer: "nginx",
               wrk_threads: 2, durations: {s1: $d_s1, s2: $d_s2, cont: $d_cont, warmup: $d_warm},
               contention: {segments: 1, work_us: $cont_work_us, connections: 64},
               batch_supported: ($batch == 1), systems: $systems, scenarios: $scenarios},
      targets: [
        target("S1 -c256 redis / atomic req/s"; get("s1-c256"; "redis"; "ratio_atomic"); ">="; 0.9),
        target("S1 -c64 redis / atomic req/s"; get("s1-c64"; "redis"; "ratio_atomic"); ">="; 0.9),
        target("S1 -c256 atomic / canned req/s"; get("s1-c256"; "atomic"; "ratio_canned"); ">="; 0.5),
        target("S1 -c64 atomic / canned req/s"; get("s1-c64"; "atomic"; "ratio_canned"); ">="; 0.5),
        target("S2 redis sold-out answers / canned req/s"; get("s2"; "redis"; "ratio_canned"); ">="; 0.6),
        target("contention redis: round trips per placed order"; get("cont"; "redis"; "redis_rt_per_order"); "<="; 3),
        target("S1 -c64 redis: Redis us per placed order"; get("s1-c64"; "redis"; "redis_cpu_us_per_order"); "<="; 20),
        target("S1 -c64 redis-full: Redis us per placed order"; get("s1-c64"; "redis-full"; "redis_cpu_us_per_order"); "<="; 30),
        target("S1 -c64 redis: seckill us per request"; get("s1-c64"; "redis"; "seckill_cpu_us_per_request"); "<="; 30),
        target("S1 -c64 redis: machine us per request"; get("s1-c64"; "redis"; "machine_cpu_us_per_request"); "<="; 120)
      ],
      results: $rows
    }' "$out"/steps/*.json >"$out/bench.json"

# The table, one block per scenario, systems in their order.
ORDER=$(printf '%s\n' "${SYSTEMS[@]}" | cut -d'|' -f1 | jq -Rsc 'split("\n") | map(select(. != ""))')
table() {
    jq -r --argjson order "$ORDER" --argjson quick "$quick" '
    def v: if . == null then "-" else . end;
    def title: {"s1-c256": "S1 flash crowd (stock never runs out), -c256",
                "s1-c64": "S1 flash crowd (stock never runs out), -c64",
                "s2": "S2 sold out (every answer 409 sold_out), -c64; Redis columns per answer",
                "cont": "contention: K=1, 2 ms of work, -c64"}[.];
    .config.durations as $d
    | .results as $rows
    | ["s1-c256", "s1-c64", "s2", "cont"][] as $sc
    | ($rows | map(select(.scenario == $sc))
        | sort_by(.system as $s | $order | index($s))) as $block
    | select($block | length > 0)
    | "", "\($sc | title), wrk \(if $sc == "s2" then $d.s2 elif $sc == "cont" then $d.cont else $d.s1 end) per step"
        + (if $quick == 1 then " [QUICK]" else "" end),
      (["system", "batch", "req/s", "p50_ms", "p99_ms", "x_atomic", "x_canned",
        (if $sc == "s2" then "redis_us/ans" else "redis_us/ord" end), "ord/s/core",
        (if $sc == "s2" then "rt/ans" else "rt/ord" end),
        (if $sc == "s2" then "cmd/ans" else "cmd/ord" end),
        "seckill_us/req", "cs/req", "mach_us/req", "placed", "oversold", "errors"] | @tsv),
      ($block[] |
        if .req_per_s == null then [.system, .batch, "ERROR: \(.error)"] | @tsv else
        [.system, .batch, .req_per_s, .p50_ms, .p99_ms, .ratio_atomic, .ratio_canned,
         (if $sc == "s2" then .redis_cpu_us_per_request else .redis_cpu_us_per_order end),
         (if $sc == "s2" then null else .redis_orders_per_core_s end),
         (if $sc == "s2" then .redis_rt_per_request else .redis_rt_per_order end),
         (if $sc == "s2" then .redis_calls_per_request else .redis_calls_per_order end),
         .seckill_cpu_us_per_request, .ctx_switches_per_request, .machine_cpu_us_per_request,
         .placed, .oversold, .errors,
         (if .error then "ERROR: \(.error)" else "" end)] | map(v) | @tsv end)
    ' "$out/bench.json" | awk -F'\t' '
        BEGIN { split("0 2 2 2 2 1 0 2 2 1 2 1 0 0 0", dec, " ")
                split("8 7 8 8 8 12 10 7 7 14 7 11 8 8 6", wid, " ") }
        NF <= 1 { print; next }
        NF == 3 { printf "%-9s %-15s %s\n", $1, $2, $3; next }
        {
            line = sprintf("%-9s %-15s", $1, $2)
            for (i = 3; i <= 17; i++) {
                x = $i
                if ($1 != "system" && x ~ /^-?[0-9.e+]+$/) x = sprintf("%." dec[i - 2] "f", x)
                line = line sprintf(" %" wid[i - 2] "s", x)
            }
            print line (NF >= 18 && $18 != "" ? "  " $18 : "")
        }'
}
targets() {
    echo ""
    echo "targets (issues 10 and 32; reported, not enforced$( ((quick)) && echo '; a QUICK run proves nothing about them')):"
    jq -r '.targets[] | [.name, (if .value == null then "-" else (.value | tostring) end),
        "\(.op) \(.target)", (if .met == null then "not run" elif .met then "met" else "MISSED" end)] | @tsv' \
        "$out/bench.json" | awk -F'\t' '{ printf "  %-48s %8s   %-6s %s\n", $1, $2, $3, $4 }'
}

# ---- the chart ---------------------------------------------------------------------------

# plot_clause FILE FIRST_COLUMN SCENARIOS...: a gnuplot plot clause with one bar per
# scenario that ran, the FILE's columns being FIRST_COLUMN + index in ALL_SCENARIOS.
ALL_SCENARIOS=(s1-c256 s1-c64 s2 cont)
declare -A SC_TITLE=([s1-c256]="S1 -c256" [s1-c64]="S1 -c64" [s2]="S2 sold out -c64"
    [cont]="contention K=1 2ms")
declare -A SC_COLOR=([s1-c256]="#1f77b4" [s1-c64]="#aec7e8" [s2]="#ff7f0e" [cont]="#2ca02c")
plot_clause() {
    local file=$1 first=$2 i sc clause=""
    shift 2
    for i in "${!ALL_SCENARIOS[@]}"; do
        sc=${ALL_SCENARIOS[$i]}
        if [[ " $* " != *" $sc "* ]] || ! want "$sc"; then continue; fi
        if [[ -z $clause ]]; then
            clause="'$file' using $((first + i)):xtic(1)"
        else
            clause+=", '' using $((first + i))"
        fi
        clause+=" title '${SC_TITLE[$sc]}' lc rgb '${SC_COLOR[$sc]}'"
    done
    echo "${clause:-1/0 notitle}"
}

if ((chart)) && command -v gnuplot >/dev/null; then
    # One line per system: req/s, rt per placed order and seckill CPU us per answer, each
    # for s1-c256 s1-c64 s2 cont ("?" where there is no figure); canned only in bench.dat.
    jq -r --argjson order "$ORDER" '
        def v($id; $sc; $f):
            ((.results | map(select(.scenario == $sc and .system == $id))[0][$f]) // "?") | tostring;
        . as $doc | $order[] as $id | $doc
        | [$id] + ([["req_per_s", "redis_rt_per_order", "seckill_cpu_us_per_request"][] as $f
                    | ["s1-c256", "s1-c64", "s2", "cont"][] as $sc | v($id; $sc; $f)])
        | join(" ")' "$out/bench.json" >"$out/bench.dat"
    grep -v '^canned ' "$out/bench.dat" >"$out/bench-seckill.dat" || true
    term="pngcairo size 1100,1000 font 'sans,10'"
    gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || term="png size 1100,1000"
    if gnuplot >"$out/chart.log" 2>&1 <<EOF; then
set terminal $term
set termoption noenhanced
set output '$out/bench.png'
set datafile missing '?'
set multiplot layout 3,1 title "seckill bench$( ((quick)) && echo ' (QUICK run: smoke test)'): $INSTANCES instances behind nginx, K=$SEGMENTS, wrk -t2; $(date -u '+%Y-%m-%d %H:%M UTC')" font ',12'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border lc rgb '#404040'
set grid ytics lc rgb '#d0d0d0'
set yrange [0:*]
set offsets 0, 0, graph 0.3, 0
set xtics nomirror scale 0 font ',10'
set ytics nomirror
set key top left opaque box lc rgb '#a0a0a0'
set title 'throughput through the balancer (canned: nginx answering a fixed 201, the ceiling)'
set ylabel 'requests / s'
plot $(plot_clause "$out/bench.dat" 2 s1-c256 s1-c64 s2 cont)
set title 'round trips per placed order (data Redis + lock nodes or ZooKeeper; INFO total_reads_processed, srvr Received)'
set ylabel 'round trips'
plot $(plot_clause "$out/bench-seckill.dat" 6 s1-c256 s1-c64 cont)
set title 'seckill CPU per answer (3 instances summed; /proc utime + stime)'
set ylabel 'CPU us / request'
set xlabel 'system'
plot $(plot_clause "$out/bench-seckill.dat" 10 s1-c256 s1-c64 s2 cont)
unset multiplot
EOF
        rm -f "$out/chart.log" "$out/bench-seckill.dat"
    else
        log "(gnuplot failed, see $out/chart.log)"
    fi
fi

echo ""
echo "seckill bench: $INSTANCES instances behind nginx, K=$SEGMENTS, wrk -t$WRK_THREADS," \
    "$(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')$( ((quick)) && echo ', QUICK run (1 s steps): a smoke test, not numbers')"
((BATCH_SUPPORTED)) || echo "this server has no --batch: every system runs one order per lock hold, batch \"1 (no --batch)\""
table
targets
echo ""
echo "x_atomic, x_canned: req/s over atomic's and canned's in the same block. redis_us, rt: Redis"
echo "CPU (us) and round trips (socket reads) per placed order, data Redis + lock nodes (S2: per"
echo "answer); zk: + the ZooKeeper server (its JVM's CPU, the requests it received); pg: +"
echo "PostgreSQL (its processes' CPU, its transactions). cmd: the data Redis's commands"
echo "(commandstats, scripts' own calls included) per placed order (S2: per answer)."
echo "seckill_us/req, cs/req: CPU and context switches of the 3 instances per answer;"
echo "mach_us/req: the whole machine's busy CPU (wrk, nginx, instances, Redis) per answer."
echo "none and local oversell: their oversold column counts units sold that the stock never lost."
jq -r '.results[]? | select(.sink != null) |
    "sink (\(.scenario) \(.system)): lag peak \(.sink.lag_events_peak) events / \(.sink.lag_seconds_peak) s, last \(.sink.lag_events_last) / \(.sink.lag_seconds_last) s, drained \(.sink.drain_ms) ms after the load; PostgreSQL \(.sink.pg_cpu_us_per_order) us CPU per placed order"' \
    "$out/bench.json" 2>/dev/null || true
echo "report: $out/bench.json$([[ -f $out/bench.png ]] && echo "  chart: $out/bench.png")"
echo "took $((SECONDS - started))s"
exit "$any_error"
