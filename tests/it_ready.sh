#!/usr/bin/env bash
# Integration: /readyz answers from what the process already knows (service/health.c:
# a timer on loop 0 keeps the data Redis's answers fresh), so it never waits behind a
# route that waits on Redis, and it still follows Redis:
#
#   - a SKU of ORDERS orders (placed by wrk) whose audit takes a while, fetched over
#     and over by 8 clients (the audits queue on the main thread): 200 /readyz probes
#     meanwhile answer 200 with a median under 50 ms and a p99 under 1 s (issue 29:
#     an audit-hammering client pushed /readyz to 1.0-1.5 s, and a balancer's 1 s
#     probe dropped a healthy instance);
#   - meanwhile pays and cancels are answered on the loops, not behind the audits
#     (median under a quarter of an audit's computation);
#   - meanwhile GET /skus/{sku} (another route that waits on Redis) waits behind one
#     audit at most, not behind the queue of them (under 3 computations' time each), and the
#     audits waiting together share one computation (ROUTE_SHARED): at least 2 answers
#     for each audit computed (Redis's LRANGE calls, counted in one audit alone first);
#   - Redis frozen (SIGSTOP): /readyz turns 503 within 3 s, while /livez answers; Redis
#     woken: 200 again within 3 s;
#   - Redis stopped: 503 within 3 s; started again: 200 within 10 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin ready redis-server redis-cli curl jq wrk

ORDERS=${READY_ORDERS:-120000}
AUDITORS=8

auditors=()
on_exit() {
    [[ -f $dir/redis.pid ]] && kill -CONT "$(cat "$dir/redis.pid")" 2>/dev/null
    touch "$dir/stop"
    for p in "${auditors[@]}"; do kill "$p" 2>/dev/null; done
    return 0
}

start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
start_instance --ready-secs 10 r "$dir" --redis "127.0.0.1:$rport" --lock redis \
    --threads 2 --log-level warn || { echo "not ready"; exit 1; }
R=$STARTED_URL
curl -s -o /dev/null -X PUT "$R/skus/big" -d '{"stock":100000000,"segments":16}'
# reservations to pay and cancel while the audits are hammered
curl -s -o /dev/null -X PUT "$R/skus/res" -d '{"stock":40,"segments":2,"pay_within_ms":600000}'
res_ids=()
for ((i = 0; i < 40; i++)); do
    res_ids+=("$(curl -s -X POST "$R/skus/res/orders" -d "{\"user_id\":\"r$i\"}" | jq -r .order_id)")
done

# ---- the audit hammered --------------------------------------------------------------
# wrk places orders until there are ORDERS of them (a few seconds a run)
for ((run = 0; run < 20; run++)); do
    sold=$(curl -s "$R/skus/big" | jq -r .sold)
    ((sold >= ORDERS)) && break
    wrk -t2 -c32 -d2s -s "$ROOT/loadtest/orders.lua" "$R" -- big 0 1 "r$run" >/dev/null 2>&1
done
check "at least $ORDERS orders placed ($sold)" test "$sold" -ge "$ORDERS"
lranges() { redis-cli -p "$rport" info commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_lrange:calls=\([0-9]*\),.*/\1/p'; }
audits_answered() {
    curl -s "$R/metrics" | tr -d '\r' |
        sed -n 's/^seckill_http_requests_total{route="audit",code="200"} //p'
}
l0=$(lranges)
one=$(curl -s -o /dev/null -w '%{time_total}' --max-time 30 "$R/skus/big/audit")
chunks=$(($(lranges) - ${l0:-0}))
echo "one audit of $sold orders: ${one}s, $chunks LRANGE calls"
l0=$(lranges)
a0=$(audits_answered)

hammer_t0=$(date +%s%N)
for ((i = 0; i < AUDITORS; i++)); do
    (while [[ ! -e $dir/stop ]]; do
        curl -s -o /dev/null --max-time 60 "$R/skus/big/audit"
    done) &
    auditors+=($!)
done
# the audits are queued when the instance counts them in flight
check "the $AUDITORS auditors' requests are in flight" \
    wait_until 10 bash -c "curl -s --max-time 1 $R/stats | jq -e '.inflight >= $AUDITORS' >/dev/null"
: >"$dir/probes"
: >"$dir/gets"
: >"$dir/ends"
for ((i = 0; i < 200; i++)); do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 5 "$R/readyz" \
        >>"$dir/probes"
    ((i % 10 == 0)) && curl -s -o /dev/null -w '%{http_code} %{time_total}\n' \
        --max-time 30 "$R/skus/big" >>"$dir/gets"
    if ((i % 5 == 0)); then # 40 pays and cancels, alternately
        if ((i % 10 == 0)); then
            body='{"payment_id":"p"}' verb=pay
        else
            body="{\"user_id\":\"r$((i / 5))\"}" verb=cancel
        fi
        curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 30 -X POST \
            -d "$body" "$R/orders/${res_ids[i / 5]}/$verb" >>"$dir/ends"
    fi
done
touch "$dir/stop"
for p in "${auditors[@]}"; do wait "$p" 2>/dev/null; done
auditors=()
hammer_ms=$((($(date +%s%N) - hammer_t0) / 1000000))
computed=$((($(lranges) - l0) / (chunks > 0 ? chunks : 1)))
answered=$(($(audits_answered) - a0))
expect "/readyz during the audits: 200 probes answered 200" "200" \
    "$(awk '$1 == 200' "$dir/probes" | wc -l)"
p99=$(awk '{ print $2 }' "$dir/probes" | sort -n | awk '{ t[NR] = $1 } END { print t[int(NR * 0.99)] }')
p50=$(awk '{ print $2 }' "$dir/probes" | sort -n | awk '{ t[NR] = $1 } END { print t[int(NR * 0.5)] }')
echo "/readyz under $AUDITORS auditors: p50 ${p50}s, p99 ${p99}s (one audit ${one}s)"
# The fault (/readyz queued behind the audits, as before issue 29; route flag
# ROUTE_WAITS put back by hand): p50 155 ms, p99 439 ms, one audit 161 ms. Healthy: p50
# 4 ms, p99 49 ms with the machine busy, which the old p99 bound of 50 ms nearly failed.
# So the median carries the point (50 ms: 3 times under the fault's, 12 over a healthy
# busy one), and the p99 the user's bound: a balancer's 1 s probe never times out.
check "... p50 ${p50}s under 50 ms (not queued behind an audit)" awk -v t="$p50" 'BEGIN { exit !(t < 0.05) }'
check "... p99 ${p99}s under 1 s (a balancer's probe timeout)" awk -v t="$p99" 'BEGIN { exit !(t < 1) }'
expect "GET /skus/big during the audits: 20 answered 200" "20" \
    "$(awk '$1 == 200' "$dir/gets" | wc -l)"
slowest=$(awk '{ print $2 }' "$dir/gets" | sort -n | tail -1)
# One audit's time is judged under the same load as the GETs: the auditors keep a
# computation going back to back, so the hammering's wall time over the computations
# made is one computation's time (a little more, for the gaps). One audit alone before
# the hammering is no measure: on a busy machine it took 0.14 s, then the slowest GET
# 1.68 s (CI under stress; the computations' time then was not measured).
comp=$(awk -v ms="$hammer_ms" -v n="$computed" 'BEGIN { printf "%.3f", ms / 1000 / (n > 0 ? n : 1) }')
echo "GET /skus/big under $AUDITORS auditors: slowest ${slowest}s;" \
    "one computation ${comp}s (${computed} in ${hammer_ms} ms; one audit alone ${one}s)"
# A GET waits behind the computation in progress at most (healthy: at most 1.2
# computations, idle and busy); behind the queue of them, up to the 8 auditors' (the
# fault, ROUTE_SHARED taken from the audit by hand: slowest 1.10 s and 1.19 s, 8.8
# computations each). 3: over twice the healthy wait, a third of the fault's.
check "... slowest ${slowest}s under 3 computations' time" \
    awk -v t="$slowest" -v c="$comp" 'BEGIN { exit !(t < 3 * c) }'
echo "audits answered $answered, computed $computed"
check "... $answered audits answered by $computed computations (2 or more each)" \
    test "$answered" -ge $((2 * computed))

expect "pays and cancels during the audits: 40 answered 200" "40" \
    "$(awk '$1 == 200' "$dir/ends" | wc -l)"
ends50=$(awk '{ print $2 }' "$dir/ends" | sort -n | awk '{ t[NR] = $1 } END { print t[int(NR * 0.5)] }')
echo "pay and cancel under $AUDITORS auditors: p50 ${ends50}s (one computation ${comp}s)"
# They are answered on the event loops, not queued on the main thread behind the
# audits (issue 45). The fault (the build before, where the main thread ran them):
# p50 0.16 s and 0.10 s, 0.57 and 0.53 computations: a pay waits for the rest of the
# audit in progress, half of one on average. Healthy: 5 ms, 0.02-0.04 computations.
# A quarter of a computation: half the fault's, six times the healthy's.
check "... their median ${ends50}s under a quarter of a computation's time (not queued behind the audits)" \
    awk -v t="$ends50" -v c="$comp" 'BEGIN { exit !(t < c / 4) }'

# ---- Redis frozen, woken, stopped, started -------------------------------------------
not_ready() { [[ $(http_code "$R/readyz") == 503 ]]; }
rpid=$(cat "$dir/redis.pid")
kill -STOP "$rpid"
check "Redis frozen: /readyz 503 within 3 s" wait_until 3 not_ready
expect "... /livez still 200" "200" "$(http_code "$R/livez")"
kill -CONT "$rpid"
check "Redis woken: /readyz 200 within 3 s" wait_until 3 http_ok "$R/readyz"
proc_stop redis "$dir" 5
check "Redis stopped: /readyz 503 within 3 s" wait_until 3 not_ready
cmd_start "$dir" redis || { echo "redis did not restart"; exit 1; }
check "Redis started again: /readyz 200 within 10 s" wait_until 10 http_ok "$R/readyz"

checks_summary
