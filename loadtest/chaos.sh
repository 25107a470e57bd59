#!/usr/bin/env bash
# chaos.sh — the fault matrix (make chaos): each fault against each lock mode it applies
# to, CHAOS_REPS times (default 10), each run on a fresh cluster of scripts/cluster.sh
# (3 instances behind nginx). An honest client buys one SKU through the balancer while a
# fault strikes at a random moment and heals; then the run is checked from the client's
# own records and the server's audit:
#
#   oversell    more units acknowledged (distinct order ids), sold or recorded than stock
#   stranded    stock left once the faults healed although every buyer was answered
#               sold out
#   limit       a user over the per-user limit (audit)
#   lost        an acknowledged order id that GET /orders/{id} does not find
#   duplicate   one order id acknowledged for two keys, or the audit's duplicate ids
#   audit       the audit not consistent
#
# The client (chaos_client below): C loops, each a new user with its own Idempotency-Key
# per order; an answer 503 outcome_unknown or unavailable, or none at all, is asked
# again with the same key and body until it is final; every acknowledged id is kept.
#
# Faults (the moment drawn from the run's seed, printed with it):
#   kill-instance   kill -9 an instance mid-load, then start it again (same flags, port)
#   pause-holder    SIGSTOP the instance with the most orders in flight (a lock holder)
#                   for 5 lock leases, then SIGCONT
#   kill-redis      kill -9 the data Redis (AOF always), then start it again
#
# Modes: setnx, redis, redlock, zk, atomic must pass every run. none and local, and
# redis-nofence (--fencing off) under pause-holder, are unsafe: their rows must show
# violations, or the harness does not see what it claims to check (said in the output).
#
#   loadtest/chaos.sh [--reps N] [--faults F,F] [--modes M,M] [--seed S] [--out DIR]
#   CHAOS_REPS   repetitions (default 10)
#
# Output: a line per run, then the matrix; results/chaos-<time>/chaos.json (every run:
# seed, fault moment, counts, violations) and results/chaos-latest. Exits 1 when a safe
# mode had any violation, or an unsafe row none.
set -uo pipefail
# shellcheck source=loadtest/lib.sh
source "$(dirname "$0")/lib.sh"

reps=${CHAOS_REPS:-10}
faults=kill-instance,pause-holder,kill-redis
modes=setnx,redis,redlock,zk,atomic,none,local,redis-nofence
seed=${CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
out=""
while (($#)); do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) usage_from_header "$0" 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done

STOCK=1500
SEGMENTS=4
TTL_MS=500 # the lock lease: a pause of 5 leases lasts 2.5 s
LOOPS=8

lt_require curl jq nginx redis-server
lt_out "chaos-$(date -u +%Y%m%d-%H%M%S)" chaos-latest clusters runs
lt_traps failed

unsafe_mode() { [[ $1 == none || $1 == local || $1 == redis-nofence ]]; }
applies() { # FAULT MODE
    case $2 in
    redis-nofence) [[ $1 == pause-holder ]] ;;
    *) return 0 ;;
    esac
}
# The work inside the critical section: long under pause-holder, so that a pause lands
# in it (between the read under the lock and the commit) most of the time.
work_us() { [[ $1 == pause-holder ]] && echo 20000 || echo 2000; }
mode_flags() { # MODE -> cluster.sh up flags
    case $1 in
    redis-nofence) echo "--lock redis -- --fencing off" ;;
    *) echo "--lock $1 --" ;;
    esac
}

# ---- the client --------------------------------------------------------------------

# chaos_client C URL: orders by fresh users uC-N with keys kC-N until $run/stop appears;
# an undecided answer is asked again with the same key. A line per final answer:
# "status key order_id error tries".
chaos_client() {
    local c=$1 url=$2 n=0 tries out status body id err
    while [[ ! -e $run/stop ]]; do
        n=$((n + 1))
        tries=0
        while :; do
            tries=$((tries + 1))
            out=$(curl -s --max-time 5 -w '\n%{http_code}' -X POST "$url" \
                -H "Idempotency-Key: k$c-$n" -d "{\"user_id\":\"u$c-$n\"}" 2>/dev/null)
            status=${out##*$'\n'}
            body=${out%$'\n'*}
            id=- err=-
            [[ $body =~ \"order_id\":\"([0-9]+)\" ]] && id=${BASH_REMATCH[1]}
            [[ $body =~ \"error\":\"([a-z_]+)\" ]] && err=${BASH_REMATCH[1]}
            case "$status/$err" in
            503/outcome_unknown | 503/unavailable | 000/* | 502/* | 504/*)
                ((tries < 200)) && { sleep 0.05; continue; } ;;
            esac
            break
        done
        echo "$status k$c-$n $id $err $tries"
    done
}

# ---- faults ------------------------------------------------------------------------

# An instance again with the flags and port it had (its command line, read before the
# kill), until /readyz answers.
instance_restart() { # NAME CMDLINE_FILE
    local name=$1 port
    local -a cmd
    mapfile -d '' -t cmd <"$2"
    proc_start "$name" "$CUR_CLUSTER" "${cmd[@]}" || return 1
    port=$(grep -o -- '--listen 127.0.0.1:[0-9]*' <<<"${cmd[*]}" | grep -o '[0-9]*$')
    wait_until 30 http_ok "http://127.0.0.1:$port/readyz"
}

proc_dead() { ! proc_alive "$1" "$2"; }

fault_kill_instance() {
    local name=seckill-$((RANDOM % 3 + 1)) pid
    pid=$(cat "$CUR_CLUSTER/$name.pid")
    cp "/proc/$pid/cmdline" "$run/$name.cmdline"
    kill -KILL "$pid"
    wait_until 10 proc_dead "$name" "$CUR_CLUSTER"
    echo "killed $name"
    sleep 1
    instance_restart "$name" "$run/$name.cmdline" && echo "restarted $name"
}

# The instance with the most orders in flight now: one that holds a segment's lock
# (a random one when none says so).
busiest_instance() {
    local i n best=$((RANDOM % 3 + 1)) most=0
    local -a urls
    read -r -a urls <<<"$INSTANCE_URLS"
    for i in 1 2 3; do
        n=$(curl -s --max-time 1 "${urls[i - 1]}/stats" | jq -r '.inflight // 0' 2>/dev/null) || n=0
        [[ $n =~ ^[0-9]+$ ]] && ((n > most)) && { most=$n; best=$i; }
    done
    echo "seckill-$best"
}

fault_pause_holder() {
    local name pid
    name=$(busiest_instance)
    pid=$(cat "$CUR_CLUSTER/$name.pid")
    kill -STOP "$pid"
    echo "stopped $name"
    sleep "$(awk -v t="$TTL_MS" 'BEGIN { print 5 * t / 1000 }')"
    kill -CONT "$pid"
    echo "continued $name"
}

fault_kill_redis() {
    "$CLUSTER" stop --dir "$CUR_CLUSTER" redis --kill >/dev/null 2>&1 && echo "killed redis"
    sleep 1
    "$CLUSTER" start --dir "$CUR_CLUSTER" redis >/dev/null 2>&1 && echo "restarted redis"
}

# ---- one run -----------------------------------------------------------------------

sku_json() { curl -s --max-time 5 "$LB_URL/skus/chaos" || true; }
remaining() { jq -r '.remaining // empty' <<<"$(sku_json)" 2>/dev/null; }
sold_out_now() { [[ $(remaining) == 0 ]]; }

# run FAULT MODE REP: one run; appends its JSON line to $out/runs.jsonl.
run_one() {
    local fault=$1 mode=$2 rep=$3 at_ms c pids=() fault_log verdict
    # the run's own seed: the same for FAULT MODE REP under --seed S, whatever else runs
    local run_seed=$(((seed + $(cksum <<<"$fault $mode $rep" | cut -d' ' -f1)) % 2147483647))
    RANDOM=$run_seed
    at_ms=$((200 + RANDOM % 1000))
    run=$out/runs/$fault-$mode-$rep
    mkdir -p "$run"
    # shellcheck disable=SC2046 # the flags are words
    if ! lt_cluster_up "$out/clusters/$fault-$mode-$rep" "$run/up.err" --fsync always \
        $(mode_flags "$mode") --lock-ttl-ms "$TTL_MS" --work-us "$(work_us "$fault")"; then
        echo "{\"fault\":\"$fault\",\"mode\":\"$mode\",\"rep\":$rep,\"seed\":$run_seed,\"error\":\"cluster: ${UP_ERROR//\"/}\"}" >>"$out/runs.jsonl"
        any_error=1
        progress "$fault $mode #$rep: cluster did not start: $UP_ERROR"
        return
    fi
    put_sku chaos "$STOCK" "$SEGMENTS" || any_error=1
    for ((c = 1; c <= LOOPS; c++)); do
        chaos_client "$c" "$LB_URL/skus/chaos/orders" >"$run/client.$c" &
        pids+=($!)
    done
    sleep "$(awk -v t="$at_ms" 'BEGIN { print t / 1000 }')"
    fault_log=$("fault_${fault//-/_}" 2>&1)
    # healed: buy on until the stock is gone (stranded stock fails the run), 60 s at most
    wait_until 60 sold_out_now || true
    sleep 0.5 # the loops see sold_out answers: every buyer was answered
    touch "$run/stop"
    wait "${pids[@]}"
    verdict=$(check_run "$fault" "$mode" "$rep" "$run_seed" "$at_ms" "$fault_log")
    echo "$verdict" >>"$out/runs.jsonl"
    lt_cluster_down || any_error=1
    progress "$fault $mode #$rep (seed $run_seed, fault at ${at_ms} ms: $(tr '\n' ',' <<<"$fault_log" | sed 's/,$//')): $(jq -r '.violations | if length == 0 then "ok" else (to_entries | map("\(.key) \(.value)") | join(", ")) end' <<<"$verdict")"
}

# check_run ...: the run's JSON line, from the client's records and the server's audit.
check_run() {
    local fault=$1 mode=$2 rep=$3 run_seed=$4 at_ms=$5 fault_log=$6
    local audit skuj acked ids keys lost=0 id
    cat "$run"/client.* >"$run/answers"
    audit=$(curl -s --max-time 30 "$LB_URL/skus/chaos/audit" || echo '{}')
    skuj=$(sku_json)
    jq -e 'type == "object"' >/dev/null 2>&1 <<<"$audit" || audit='{}'
    jq -e 'type == "object"' >/dev/null 2>&1 <<<"$skuj" || skuj='{}'
    # acknowledged: distinct (key, id) of 201 answers
    awk '$1 == 201 { print $2, $3 }' "$run/answers" | sort -u >"$run/acked"
    acked=$(wc -l <"$run/acked")
    ids=$(awk '{ print $2 }' "$run/acked" | sort -u | wc -l)
    keys=$(awk '{ print $1 }' "$run/acked" | sort -u | wc -l)
    while read -r _ id; do
        [[ $(http_code "$LB_URL/orders/$id") == 200 ]] || lost=$((lost + 1))
    done <"$run/acked"
    jq -cn --arg fault "$fault" --arg mode "$mode" --argjson rep "$rep" \
        --argjson seed "$run_seed" --argjson at_ms "$at_ms" --arg fault_log "$fault_log" \
        --argjson stock "$STOCK" --argjson acked "$acked" --argjson ids "$ids" \
        --argjson keys "$keys" --argjson lost "$lost" \
        --argjson audit "$audit" --argjson sku "$skuj" \
        --argjson answers "$(awk '{ n[$1 "/" $4]++ } END { printf "{"; s=""; for (k in n) { printf "%s\"%s\":%d", s, k, n[k]; s="," } printf "}" }' "$run/answers")" '
        ($audit.sold // -1) as $sold |
        {fault: $fault, mode: $mode, rep: $rep, seed: $seed, fault_at_ms: $at_ms,
         fault_log: $fault_log, stock: $stock, acked_ids: $ids, answers: $answers,
         audit: $audit, remaining: ($sku.remaining // null),
         violations: ({
           oversell: ([($ids - $stock), (($audit.oversold // 0)), ($sold - $stock)] | max | if . > 0 then . else 0 end),
           stranded: (if ($sku.remaining // 0) > 0 then $sku.remaining else 0 end),
           limit: ($audit.limit_breaches // 0),
           lost: $lost,
           duplicate: (($keys - $ids) + ($audit.duplicate_order_ids // 0)),
           audit: (if $audit.consistent == true then 0 else 1 end)
         } | with_entries(select(.value != 0)))}'
}

# ---- the matrix --------------------------------------------------------------------

IFS=, read -r -a fault_list <<<"$faults"
IFS=, read -r -a mode_list <<<"$modes"
for f in "${fault_list[@]}"; do
    for m in "${mode_list[@]}"; do applies "$f" "$m" && TOTAL=$((TOTAL + reps)); done
done
progress "chaos: faults $faults, modes $modes, $reps run(s) each, seed $seed, stock $STOCK over $SEGMENTS segments, $LOOPS clients, lease ${TTL_MS} ms"
: >"$out/runs.jsonl"
for f in "${fault_list[@]}"; do
    for m in "${mode_list[@]}"; do
        applies "$f" "$m" || continue
        for ((r = 1; r <= reps; r++)); do
            STEP=$((STEP + 1))
            run_one "$f" "$m" "$r"
        done
    done
done

failed=0
jq -s --arg seed "$seed" --argjson reps "$reps" '
    {seed: ($seed | tonumber), reps: $reps, runs: .,
     matrix: (group_by([.fault, .mode]) | map({fault: .[0].fault, mode: .[0].mode,
        runs: length, passed: (map(select((.violations // {x: 1}) == {})) | length),
        violations: (map(.violations // {error: 1}) | add | if . == null then {} else . end)}))}' \
    "$out/runs.jsonl" >"$out/chaos.json"
echo
printf '%-14s %-14s %7s  %s\n' fault mode passed violations
while IFS=$'\t' read -r f m runs passed viol; do
    note=""
    if unsafe_mode "$m"; then
        if ((passed == runs)); then
            note="  UNSAFE MODE SHOWED NOTHING: the harness does not see it"
            failed=1
        else
            note="  (unsafe: expected)"
        fi
    elif ((passed != runs)); then
        failed=1
    fi
    printf '%-14s %-14s %3d/%-3d  %s%s\n' "$f" "$m" "$passed" "$runs" "$viol" "$note"
done < <(jq -r '.matrix[] | [.fault, .mode, .runs, .passed,
    (.violations | to_entries | map("\(.key) \(.value)") | join(", ") | if . == "" then "-" else . end)] | @tsv' "$out/chaos.json")
echo
echo "chaos: $out/chaos.json (seed $seed: loadtest/chaos.sh --seed $seed [--faults F --modes M] draws the same moments and instances again)"
((failed == 0 && any_error == 0)) || exit 1
