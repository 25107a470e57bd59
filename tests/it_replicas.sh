#!/usr/bin/env bash
# Integration: --min-replicas-acked. The data Redis has a replica and no AOF, so an
# order survives the master's crash only once the replica has it: a 201 waits for the
# replica's acknowledgement (WAIT), and without it the order answers 503
# outcome_unknown with its order id.
#
#   - by default (a replica connected at start) an instance waits for 1 replica, and
#     /metrics says the data is durable; --min-replicas-acked 0 does not wait;
#   - replica healthy: orders answer 201, on the loop's group commits (redis mode), the
#     loop's atomic script, and an order of several segments (the order machine);
#   - replica frozen (SIGSTOP): each of those answers 503 outcome_unknown with an
#     order_id within the WAIT's 0.5 s and the 1 s timeouts, and that order exists on
#     the master (GET /orders/{id} 200); /stats counts them; the instance without
#     acknowledgement still answers 201;
#   - replica back: orders answer 201 again; a retry of an unknown order with its
#     Idempotency-Key returns that same order, and nothing is placed twice;
#   - reservations: a pay and a cancel are answered 200 only once acknowledged too:
#     replica frozen, 503 outcome_unknown (the order paid, or cancelled, on the
#     master); asked again once it is back, 200;
#   - an answer that reports an earlier write waits for the replicas too (found by make
#     jepsen's cluster row: a 201 to a retry whose order a failover then dropped): with
#     the replica still frozen, the unknown order retried with its key answers 503
#     outcome_unknown again, not 201; the pay and the cancel asked again through an
#     instance started meanwhile (its connections wrote nothing the replica missed, so
#     a WAIT of theirs alone passes at once) answer 503 too.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin replicas redis-server redis-cli curl jq

on_exit() {
    [[ -f $dir/replica.pid ]] && kill -CONT "$(cat "$dir/replica.pid")" 2>/dev/null
    return 0
}

it_master_replica || exit 1

# start NAME LOCK [FLAGS...]: an instance; its URL goes into the variable NAME
acked='' atomic='' unacked='' other='' # the URLs start sets (printf -v)
start() {
    local name=$1 lock=$2
    shift 2
    start_instance --ready-secs 15 "$name" "$dir" --redis "127.0.0.1:$mport" --lock "$lock" \
        --threads 1 --segments 4 "$@" || return 1
    printf -v "$name" '%s' "$STARTED_URL"
}
start acked redis || { echo "instance did not start"; exit 1; }
start atomic atomic || { echo "instance did not start"; exit 1; }
start unacked redis --min-replicas-acked 0 || { echo "instance did not start"; exit 1; }

check "by default the instance waits for 1 replica (start-up log)" \
    grep -q 'min_replicas_acked=1' "$dir/acked.log"
check "--min-replicas-acked 0 is taken as given" grep -q 'min_replicas_acked=0' "$dir/unacked.log"
durable() { curl -s "$1/metrics" | awk '$1 == "seckill_redis_durable" { print $2 }'; }
expect "no AOF, replicas acknowledge: durable" "1" "$(durable "$acked")"
expect "no AOF, nothing acknowledged: not durable" "0" "$(durable "$unacked")"

curl -s -X PUT "$acked/skus/r" -d '{"stock":1000,"segments":4}' >/dev/null
curl -s -X PUT "$acked/skus/few" -d '{"stock":4,"segments":4,"per_user_limit":2}' >/dev/null # 1 per segment
curl -s -X PUT "$acked/skus/life" -d '{"stock":10,"segments":2,"pay_within_ms":60000}' >/dev/null
# life_end URL ID pay|cancel USER: "status error state-now" of a pay or cancel of order ID
life_end() {
    local body
    [[ $3 == pay ]] && body='{"payment_id":"p1"}' || body="{\"user_id\":\"$4\"}"
    curl -s --max-time 10 -w '\n%{http_code}' -X POST "$1/orders/$2/$3" -d "$body" |
        { read -r body; read -r code
          echo "$code $(jq -r '.error // "-"' <<<"$body") $(curl -s "$1/orders/$2" | jq -r .state)"; }
}

read -r c _ <<<"$(it_order "$acked" r u1 1)"
expect "replica up: group commit 201" "201" "$c"
read -r c _ <<<"$(it_order "$atomic" r u2 1)"
expect "replica up: atomic 201" "201" "$c"
read -r c _ <<<"$(it_order "$acked" few u3 2)"
expect "replica up: an order of two segments 201" "201" "$c"
life_ids=()
for u in l1 l2 l3; do
    read -r c id _ <<<"$(it_order "$acked" life "$u" 1)"
    expect "replica up: a reservation 201" "201" "$c"
    life_ids+=("$id")
done
expect "replica up: a pay 200, the order paid" "200 - paid" "$(life_end "$acked" "${life_ids[0]}" pay)"

kill -STOP "$(cat "$dir/replica.pid")"
unknown_ids=()
for case in "acked r u4 1 key-u4" "atomic r u5 1" "acked few u6 2"; do
    read -r url sku user qty key <<<"$case"
    read -r c id err secs <<<"$(it_order "${!url}" "$sku" "$user" "$qty" "${key:-}")"
    expect "replica frozen ($url $sku qty $qty): 503 outcome_unknown" "503 outcome_unknown" \
        "$c $err"
    check "... with an order id ($id), answered in ${secs}s" \
        awk -v t="$secs" -v id="$id" 'BEGIN { exit !(id != "-" && t < 3) }'
    expect "... and the order is on the master" "200" \
        "$(http_code "$acked/orders/$id" 5)"
    unknown_ids+=("$id")
done
read -r c _ <<<"$(it_order "$unacked" r u7 1)"
expect "replica frozen, no acknowledgement asked: 201" "201" "$c"
unacked_count=$(curl -s "$acked/stats" | jq '.orders.unacknowledged_by_replicas')
expect "/stats counts the unacknowledged orders" "2" "$unacked_count"
expect "replica frozen: a pay 503 outcome_unknown (paid on the master)" \
    "503 outcome_unknown paid" "$(life_end "$acked" "${life_ids[1]}" pay)"
expect "replica frozen: a cancel 503 outcome_unknown (cancelled on the master)" \
    "503 outcome_unknown cancelled" "$(life_end "$acked" "${life_ids[2]}" cancel l3)"
# an instance started now: its connections wrote nothing the replica missed
start other redis --min-replicas-acked 1 || { echo "instance did not start"; exit 1; }
read -r c id err _ <<<"$(it_order "$acked" r u4 1 key-u4)"
expect "replica frozen: the unknown order retried with its key, 503 outcome_unknown again" \
    "503 outcome_unknown ${unknown_ids[0]}" "$c $err $id"
expect "replica frozen: the pay asked again through another instance, 503 outcome_unknown" \
    "503 outcome_unknown paid" "$(life_end "$other" "${life_ids[1]}" pay)"
expect "replica frozen: the cancel asked again through another instance, 503 outcome_unknown" \
    "503 outcome_unknown cancelled" "$(life_end "$other" "${life_ids[2]}" cancel l3)"

kill -CONT "$(cat "$dir/replica.pid")"
wait_until 20 it_replica_synced || echo "the replica did not come back"
read -r c _ <<<"$(it_order "$acked" r u8 1)"
expect "replica back: 201" "201" "$c"
read -r c id _ <<<"$(it_order "$acked" r u4 1 key-u4)"
expect "the unknown order retried with its key: the same order" "201 ${unknown_ids[0]}" "$c $id"
sold=$(curl -s "$acked/skus/r" | jq .sold)
expect "nothing placed twice: r sold u1 u2 u4 u5 u7 u8" "6" "$sold"
expect "replica back: the pay asked again 200" "200 - paid" "$(life_end "$acked" "${life_ids[1]}" pay)"
expect "replica back: the cancel asked again 200" "200 - cancelled" \
    "$(life_end "$acked" "${life_ids[2]}" cancel l3)"
expect "the SKU: 2 paid, 1 unit back" "2 1 8" \
    "$(curl -s "$acked/skus/life" | jq -r '"\(.paid) \(.returned) \(.remaining)"')"

checks_summary
