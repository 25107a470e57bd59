#!/usr/bin/env bash
# The service checks the data Redis's settings it needs (docs/operations.md#durability):
#
#   - a maxmemory-policy that evicts (allkeys-lru) is refused from the start: /readyz
#     503 naming the policy, one level=warn event=redis_evicting line, the gauge
#     seckill_redis_evicting 1, while orders are still answered (readiness is the
#     balancer's business; the instance keeps what it has);
#   - CONFIG SET maxmemory-policy noeviction on the running Redis: ready within seconds,
#     without a restart, an info line and the gauge back to 0;
#   - CONFIG SET to volatile-lru later (the health round reads the settings each
#     second): 503 again and a second warn line;
#   - a Redis without AOF and no --min-replicas-acked: allowed, and /readyz says why
#     ("durable": false and a detail that says what a crash can lose).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin evict redis-server redis-cli curl jq

start_redis evicting "$dir" always --maxmemory-policy allkeys-lru &&
    p_evict=$STARTED_PORT || { echo "redis did not start"; exit 1; }
start_redis noaof "$dir" no && p_noaof=$STARTED_PORT || { echo "redis did not start"; exit 1; }
start_instance --no-wait ev "$dir" --redis "127.0.0.1:$p_evict" --threads 2 --segments 2 ||
    { echo "instance did not start"; exit 1; }
E=$STARTED_URL
start_instance --ready-secs 15 na "$dir" --redis "127.0.0.1:$p_noaof" --threads 2 ||
    { echo "instance did not start"; exit 1; }
N=$STARTED_URL

readyz() { curl -s --max-time 5 -w ' %{http_code}' "$1/readyz"; }
ready_is() { [[ $(readyz "$1") == *" $2" ]]; }
gauge() { curl -s --max-time 5 "$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }
lines() { grep -c "event=$1 " "$dir/$2.log"; }
# /readyz's detail names the policy (before the first health round it says Redis is
# unreachable: also 503, but not yet the reason this test is about).
refusal_told() { [[ $(curl -s --max-time 5 "$E/readyz" | jq -r .detail) == *maxmemory-policy* ]]; }

# Slack: the instance starts and makes a round in well under a second; 20 s for a
# busy 2-core machine.
check "the instance on the evicting Redis says why it is not ready" wait_until 20 refusal_told
first=$(readyz "$E")
expect "an evicting Redis: /readyz 503" "503" "${first##* }"
expect "... naming the policy" "the data Redis's maxmemory-policy is allkeys-lru: it may evict orders and locks; set it to noeviction" \
    "$(jq -r .detail <<<"${first% *}")"
expect "... one warn line" "1" "$(lines redis_evicting ev)"
expect "... which says the policy" "1" \
    "$(grep -c 'level=warn event=redis_evicting .*maxmemory_policy=allkeys-lru' "$dir/ev.log")"
expect "... seckill_redis_evicting 1" "1" "$(gauge "$E" seckill_redis_evicting)"
curl -s -o /dev/null -X PUT "$E/skus/ev" -d '{"stock":3,"segments":1}'
expect "... orders are still answered by the instance itself" "201" "$(curl -s -o /dev/null \
    -w '%{http_code}' -X POST "$E/skus/ev/orders" -d '{"user_id":"ann"}')"

redis-cli -p "$p_evict" config set maxmemory-policy noeviction >/dev/null
# Slack: the settings are read each second and readiness follows the next round
# (250 ms): 2 s idle; 15 s on a busy machine.
check "CONFIG SET noeviction: ready, without a restart" wait_until 15 ready_is "$E" 200
expect "... logged at info" "1" "$(lines redis_noeviction ev)"
expect "... seckill_redis_evicting 0" "0" "$(gauge "$E" seckill_redis_evicting)"
expect "... and durable (AOF always)" "true" "$(curl -s "$E/readyz" | jq -r .durable)"

redis-cli -p "$p_evict" config set maxmemory-policy volatile-lru >/dev/null
check "CONFIG SET volatile-lru later: 503 again" wait_until 15 ready_is "$E" 503
expect "... a second warn line" "2" "$(lines redis_evicting ev)"

body=$(curl -s "$N/readyz")
expect "no AOF and no replicas: allowed (200)" "200" "$(curl -s -o /dev/null -w '%{http_code}' "$N/readyz")"
expect "... durable false" "false" "$(jq -r .durable <<<"$body")"
check "... and the answer says what a crash loses and why it serves" \
    grep -q 'without AOF.*--min-replicas-acked 0); allowed' <<<"$(jq -r .detail <<<"$body")"

checks_summary
