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
# - the same sale, SKU D, with the changes made by an instance that writes the stock
#   hash itself (SECKILL_TEST_PATCH_DIRECT, tests only): a change lands while a
#   segment's holder has read the stock, the holder's commit writes over it, and the
#   books no longer balance (the audit says so). This is what the back hash prevents.
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

sale D "$DIRECT"
audit=$(curl -s "${urls[1]}/skus/D/audit")
echo "D (changes written into the stock hash): books $((400 + added - withdrawn))," \
    "audit $(jq -c '{sold, remaining, added, withdrawn, consistent}' <<<"$audit")"
expect "D: without the back hash a holder's commit overwrote a change: the books do not balance" \
    false "$(jq -r '.sold + .remaining == .initial + .added - .withdrawn' <<<"$audit")"
checks_finish
