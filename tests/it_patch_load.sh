#!/usr/bin/env bash
# Integration: a merchant's changes in the middle of a sale under load keep the books
# (invariant 11). Three instances (lock redis, --work-us 2000: each hold keeps its
# segment a while, as orders with work do) sell SKU L from two buyer loops each; while
# they sell, 10 adds and 10 withdrawals go to the three instances in turn, then the
# SKU sells out. Then:
# - every unit is accounted for: sold + remaining = initial + added - withdrawn, with
#   added and withdrawn the sums of the PATCH answers, remaining 0, never oversold
#   (the audit, recomputed from the records, is consistent), and the 201s the buyers
#   got are the orders recorded;
# - one hold and one change made to meet (below): with the change made by an instance
#   that writes the stock hash itself (SECKILL_TEST_PATCH_DIRECT, tests only) the
#   holder's commit writes over it and the books no longer balance (the audit says
#   so); made by the service, through the back hash, they balance. This is what the
#   back hash prevents.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin patch_load redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
urls=()
for i in 1 2 3; do
    start_instance "i$i" "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 2 \
        --work-us 2000
    urls+=("$STARTED_URL")
done
start_instance --wrap "env SECKILL_TEST_PATCH_DIRECT=1" direct "$dir" \
    --redis "127.0.0.1:$rport" --lock redis --segments 2
DIRECT=$STARTED_URL

# sale SKU PATCHER...: the sale of SKU with its changes sent to PATCHER in turn;
# leaves added, withdrawn (the answers' sums) and ok201 (the buyers' 201s)
sale() {
    local sku=$1 i p out loops=()
    shift
    expect "PUT $sku" 201 "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "${urls[0]}/skus/$sku" \
        -d '{"stock":400,"segments":2}')"
    rm -f "$dir/stop"
    for i in 0 1 2 3 4 5; do
        it_order_loop "${urls[i % 3]}/skus/$sku/orders" "$sku$i" >"$dir/orders.$sku.$i" &
        loops+=($!)
    done
    selling() { [[ $(cat "$dir"/orders."$sku".* | grep -c ' 201 ') -ge 20 ]]; }
    check "$sku: the sale is on" wait_until 30 selling
    added=0 withdrawn=0
    for i in $(seq 0 19); do
        p=$(($# > 1 ? i % $# + 1 : 1))
        if ((i % 2 == 0)); then
            out=$(curl -s -X PATCH "${!p}/skus/$sku" -d '{"add":20}')
            added=$((added + 20))
        else
            out=$(curl -s -X PATCH "${!p}/skus/$sku" -d '{"withdraw":10}')
            withdrawn=$((withdrawn + $(jq -r '.withdrawn // 0' <<<"$out")))
        fi
        check "$sku: change $i answered ($(jq -c '{error, withdrawn}' <<<"$out"))" \
            test "$(jq -r '.sku // "-"' <<<"$out")" = "$sku"
    done
    sold_out() { [[ $(curl -s "${urls[0]}/skus/$sku" | jq .remaining) == 0 ]]; }
    # Slack: 600 units at a few hundred curl orders a second; 120 s for a busy machine.
    check "$sku: sold out" wait_until 120 sold_out
    touch "$dir/stop"
    wait "${loops[@]}"
    ok201=$(cat "$dir"/orders."$sku".* | grep -c ' 201 ')
}

sale L "${urls[@]}"
audit=$(curl -s "${urls[1]}/skus/L/audit")
expect "L: every unit accounted for: sold + remaining = initial + added - withdrawn" \
    "$((400 + added - withdrawn)) 0 $added $withdrawn" \
    "$(jq -r '"\(.sold + .remaining) \(.remaining) \(.added) \(.withdrawn)"' <<<"$audit")"
check "L: ten withdrawals took units during the sale ($withdrawn)" test "$withdrawn" -gt 0
expect "L: never oversold, the audit consistent" "0 true" \
    "$(jq -r '"\(.oversold) \(.consistent)"' <<<"$audit")"
expect "L: the buyers' 201s are the units sold" "$ok201" "$(jq .sold <<<"$audit")"

# D and B, one hold and one change, made to meet: an instance whose holds work 3 s
# (--work-us) places an order, and once its hold has the segment's lock (and so has read
# the stock: the read goes with the acquire) a change adds 100 units. Made by the
# instance that writes the stock hash itself (D), the holder's commit writes over the
# 100: the books no longer balance. Made by the service (B), they go through the back
# hash, which the commit folds in: they balance. Slack: the change takes milliseconds of
# the hold's 3 s, waited for by condition.
start_instance slow "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 1 \
    --work-us 3000000
SLOW=$STARTED_URL
met() { # SKU PATCHER: the order on SLOW, the change on PATCHER during its hold
    local sku=$1 patcher=$2 order
    expect "PUT $sku" 201 "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$SLOW/skus/$sku" \
        -d '{"stock":10,"segments":1}')"
    curl -s -o "$dir/met.$sku" -w '%{http_code}' -X POST -d '{"user_id":"m1"}' \
        "$SLOW/skus/$sku/orders" >"$dir/met.$sku.code" &
    order=$!
    held() { (($(redis-cli -p "$rport" EXISTS "sk:{$sku}:lock:0") == 1)); }
    check "$sku: the order's hold has the lock (within 10 s)" wait_until 10 held
    expect "$sku: a change of 100 units during the hold" "200" \
        "$(curl -s -o /dev/null -w '%{http_code}' -X PATCH "$patcher/skus/$sku" -d '{"add":100}')"
    wait "$order"
    expect "$sku: the order placed" "201" "$(cat "$dir/met.$sku.code")"
    audit=$(curl -s "$SLOW/skus/$sku/audit")
    echo "$sku: audit $(jq -c '{initial, sold, remaining, added, withdrawn, consistent}' <<<"$audit")"
}
met D "$DIRECT"
expect "D: without the back hash the holder's commit wrote over the change: the books do not balance" \
    "false" "$(jq -r '.sold + .remaining == .initial + .added - .withdrawn' <<<"$audit")"
met B "${urls[0]}"
expect "B: through the back hash the change is kept: sold 1, remaining 109 of 110" \
    "true 1 109" "$(jq -r '"\(.sold + .remaining == .initial + .added - .withdrawn) \(.sold) \(.remaining)"' <<<"$audit")"
checks_finish
