#!/usr/bin/env bash
# saturate.sh — one Redis core's ceiling on the commit path (issue 47, point 4): Redis,
# not the instances, the bottleneck.
#
#   loadtest/saturate.sh [--gen DIR] [--batch N] [--seconds S] [--clients C]
#                        [--pipeline P] [--fsync always|everysec|no] [--pay]
#
#   --gen DIR      the assembled Lua of a build (its gen/inventory/lua; default this
#                  checkout's, $SECKILL_BUILD/gen/inventory/lua): another commit's, built
#                  in a worktree, for a before and after
#   --batch N      orders per commit (default 32; 1 is the atomic mode's one order)
#   --seconds S    how long the load runs (default 8)
#   --clients C    redis-benchmark's connections (default 32), --pipeline P commands
#                  each has in flight (default 4)
#   --fsync F      the AOF policy (default always, as `make bench`)
#   --pay          the SKU has a payment window (every order a reservation)
#   --atomic       atomic.lua, the atomic mode's script, one order a call
#   --perf FILE    perf record -g of Redis over the run, into FILE (perf report -i FILE)
#
# On this 2-core machine the instances, nginx and wrk cannot drive a Redis to 100% of a
# core: they need more CPU per order than Redis does. So here redis-benchmark calls the
# commit script itself, batch.lua, as the instances' group commits call it: a SKU of one
# segment made by an instance (stopped then), every call a batch of N orders of one
# unit, ids, users and Idempotency-Keys drawn at random (__rand_int__), the segment's
# fencing token checked. Redis's CPU is pinned to one core (taskset) and runs
# at ~100%; the orders placed over the run (meta's orders) over its wall time are the
# orders a second one Redis core takes, and its CPU over them the µs per order. The
# lock's own scripts (acquire, read, release: three more calls a hold) are not in it:
# `make bench` shows what they add per order.
#
# Prints one JSON line: {"script", "batch", "layout", "orders", "orders_per_s",
# "redis_cpu_pct", "redis_us_per_order", "calls_per_order" (the script's EVALSHA and its
# calls)}; the cluster it started is taken down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SECKILL_BUILD:-build}
gen=$build/gen/inventory/lua
batch=32 seconds=8 clients=32 pipeline=4 fsync=always pay=0 atomic=0 perf=
while (($#)); do
    case $1 in
    --gen) gen=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --clients) clients=${2:?}; shift 2 ;;
    --pipeline) pipeline=${2:?}; shift 2 ;;
    --fsync) fsync=${2:?}; shift 2 ;;
    --pay) pay=1; shift ;;
    --atomic) atomic=1 batch=1; shift ;;
    --perf) perf=${2:?}; shift 2 ;;
    *) echo "saturate.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[[ -f $gen/batch.lua ]] || { echo "saturate.sh: no $gen/batch.lua (make first)" >&2; exit 2; }
# the records' layout of that build: many to a hash (rec_read.lua), or a key an order
layout=key
[[ -f $gen/rec_read.lua ]] && layout=hash

dir=$(mktemp -d /tmp/seckill-saturate.XXXXXX)
trap '[[ -n ${SATURATE_KEEP:-} ]] || scripts/cluster.sh down --dir "$dir" --rm >/dev/null 2>&1 || true' EXIT
scripts/cluster.sh up --dir "$dir" --quiet --instances 1 --lb none --lock redis \
    --fsync "$fsync" -- --log-level warn >"$dir/up.log" 2>&1 ||
    { tail "$dir/up.log" >&2; exit 1; }
# shellcheck source=/dev/null
source "$dir/cluster.env"
url=${INSTANCE_URLS%% *}
window=""
((pay)) && window=',"pay_within_ms":600000'
curl -sf -o /dev/null -X PUT -d "{\"stock\":1000000000,\"segments\":1,\"per_user_limit\":1000$window}" \
    "$url/skus/sat"
scripts/cluster.sh stop --dir "$dir" seckill-1 >/dev/null # its rounds call nothing now
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
rpid=$(rcli INFO server | tr -d '\r' | awk -F: '$1 == "process_id" { print $2 }')
taskset -pc 0 "$rpid" >/dev/null
T='{sat}'
epoch=$(rcli HGET "sk:$T:meta" epoch)
rcli SET "sk:$T:lock:0:fence" "1:sat" >/dev/null
stock=$(rcli HGET "sk:$T:stock" 0)

# the call: KEYS, then ARGV, as hold.c (batch.lua) or atomic.c (atomic.lua) make them
args=()
if ((atomic)); then
    script=$gen/atomic.lua
    okey="order:__rand_int__"
    [[ $layout == hash ]] && okey="order:7"
    keys=("sk:$T:meta" "sk:$T:stock" "sk:$T:sold" "sk:$T:buyers" "sk:$T:orders" "$okey"
        "sk:$T:idem" "sk:$T:avail" "sk:$T:back" "sk:$T:due" seckill:due seckill:events)
    args=(0 1 "u__rand_int__" "7__rand_int__" sat "k__rand_int__")
else
    script=$gen/batch.lua
    keys=("sk:$T:meta" "sk:$T:stock" "sk:$T:sold" "sk:$T:buyers" "sk:$T:orders"
        "sk:$T:lock:0:fence" "sk:$T:idem" "sk:$T:avail")
    for ((i = 0; i < batch; i++)); do
        # a key an order (the layout before), or the batch's one hash of records
        if [[ $layout == hash ]]; then keys+=("order:7"); else keys+=("order:__rand_int__"); fi
        args+=(1 "u__rand_int__" "7__rand_int__" "k__rand_int__" 0)
    done
    keys+=("sk:$T:back" "sk:$T:due" seckill:due seckill:events)
    args=("$epoch" 0 "$stock" "1:sat" sat "${args[@]}")
fi
sha=$(rcli SCRIPT LOAD "$(cat "$script")")
sample() { # "<orders> <cpu seconds> <calls>"
    echo "$(rcli HGET "sk:$T:meta" orders) $(rcli INFO cpu | tr -d '\r' | awk -F: '
        $1 == "used_cpu_sys" || $1 == "used_cpu_user" { c += $2 } END { print c }') $(
        rcli INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ &&
        $1 != "cmdstat_info" { n += $3 } END { print n + 0 }')"
}
rcli CONFIG RESETSTAT >/dev/null
read -r o0 c0 n0 <<<"$(sample)"
t0=$(date +%s%N)
# (-n large: the run is ended by its time; redis-benchmark's own exit status is not
# ours, so it is let go)
perf_pid=""
if [[ -n $perf ]]; then
    perf record -g -o "$perf" -p "$rpid" -- sleep "$seconds" >/dev/null 2>&1 &
    perf_pid=$!
fi
timeout --signal=INT "$seconds" taskset -c 1 redis-benchmark -p "$REDIS_PORT" -c "$clients" -P "$pipeline" \
    -n 100000000 -r 1000000000 EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" "${args[@]}" \
    >"$dir/bench.log" 2>&1 || true
t1=$(date +%s%N)
[[ -z $perf_pid ]] || wait "$perf_pid" || true
read -r o1 c1 n1 <<<"$(sample)"
jq -cn --argjson o "$((o1 - o0))" --argjson ns "$((t1 - t0))" --arg c0 "$c0" --arg c1 "$c1" \
    --argjson n "$((n1 - n0 - 1))" --argjson b "$batch" --arg layout "$layout" \
    --arg script "$(basename "$script")" '
    ($o / ($ns / 1e9)) as $rate | (($c1 | tonumber) - ($c0 | tonumber)) as $cpu |
    {script: $script, batch: $b, layout: $layout, orders: $o,
     orders_per_s: ($rate | floor),
     redis_cpu_pct: ((100 * $cpu / ($ns / 1e9)) | floor),
     redis_us_per_order: (if $o > 0 then (1e6 * $cpu / $o * 100 | round) / 100 else null end),
     calls_per_order: (if $o > 0 then ($n / $o * 100 | round) / 100 else null end)}'
