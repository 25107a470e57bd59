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
# - PostgreSQL (--postgres) has each change as one event (seckill_stock_events, one
#   row per change that changed something) once the sink caught up: the audit's store
#   block reads the same added and withdrawn from it as meta's, and its books balance
#   there too: initial + added - withdrawn - the units sold there = remaining (0);
#   a pause and a new end, after the sale, reach it as well;
# - one hold and one change made to meet (below): with the change made by an instance
#   that writes the stock hash itself (SECKILL_TEST_PATCH_DIRECT, tests only) the
#   holder's commit writes over it and the books no longer balance (the audit says
#   so); made by the service, through the back hash, they balance. This is what the
#   back hash prevents.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin patch_load redis-server redis-cli curl jq psql pg_isready initdb

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
start_pg "$dir" || { echo "postgres did not start"; exit 1; }
PG_URL=$(pg_url "$STARTED_PORT")
sql() { psql -X -q -tA -F ' ' "$PG_URL" -c "$1"; }
urls=()
for i in 1 2 3; do
    start_instance "i$i" "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 2 \
        --work-us 2000 --postgres "$PG_URL"
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
    added=0 withdrawn=0 changes=0
    for i in $(seq 0 19); do
        p=$(($# > 1 ? i % $# + 1 : 1))
        if ((i % 2 == 0)); then
            out=$(curl -s -X PATCH "${!p}/skus/$sku" -d '{"add":20}')
            added=$((added + 20)) changes=$((changes + 1))
        else
            out=$(curl -s -X PATCH "${!p}/skus/$sku" -d '{"withdraw":10}')
            withdrawn=$((withdrawn + $(jq -r '.withdrawn // 0' <<<"$out")))
            (($(jq -r '.withdrawn // 0' <<<"$out") > 0)) && changes=$((changes + 1))
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

# PostgreSQL: the sink carries each change with the orders' events. Slack: the sink
# delivers within a second of an event; 30 s for a busy machine.
caught_up() {
    [[ $(curl -s "${urls[2]}/skus/L/audit" | jq -r '.store.lag_events') == 0 ]]
}
check "L: every event in PostgreSQL" wait_until 30 caught_up
audit=$(curl -s "${urls[2]}/skus/L/audit")
expect "L: PostgreSQL has each change once, the units added and withdrawn, and its books balance (remaining 0)" \
    "$changes $added $withdrawn 0 true" \
    "$(jq -r '.store | "\(.changes) \(.added) \(.withdrawn) \(.remaining) \(.matches)"' <<<"$audit")"
expect "L: seckill_stock_events, each change one row: $changes rows, $added added, $withdrawn withdrawn" \
    "$changes $added $withdrawn" \
    "$(sql "select count(*), sum(added), sum(withdrawn) from seckill_stock_events where sku = 'L'")"
expect "L: PostgreSQL's books: initial + added - withdrawn = the units sold there" \
    "$((400 + added - withdrawn))" \
    "$(sql "select sum(qty) from seckill_orders where sku = 'L' and state in ('placed', 'pending', 'paid')")"
ends=$(($(date +%s) + 3600))
expect "L: a pause and a new end" "200 200" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PATCH "${urls[1]}/skus/L" -d '{"paused":true}') $(curl -s -o /dev/null -w '%{http_code}' -X PATCH "${urls[1]}/skus/L" -d "{\"ends_at\":\"$(date -u -d "@$ends" +%Y-%m-%dT%H:%M:%SZ)\"}")"
# Slack: as above.
stored() { [[ $(sql "select count(*) from seckill_stock_events where sku = 'L'") == $((changes + 2)) ]]; }
check "L: the pause and the end reach PostgreSQL" wait_until 30 stored
expect "L: stored as they were made, in order, nothing added or withdrawn by them" \
    "true - 0 0|- $ends 0 0" \
    "$(sql "select coalesce(paused::text, '-') || ' ' || coalesce(extract(epoch from ends_at)::bigint::text, '-') || ' ' || added || ' ' || withdrawn from seckill_stock_events where sku = 'L' order by split_part(event_id, '-', 1)::bigint desc, split_part(event_id, '-', 2)::bigint desc limit 2" | tac | paste -sd'|')"

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
