#!/usr/bin/env bash
# DELETE /skus/{sku} retires a SKU (issue 46, point 3): refused with 409 not_settled
# while units are pending or, with --postgres, while events have not reached the
# database (nothing written); once settled, 204 and every key of it leaves Redis, the
# key count back to what it was before the SKU: its order records, lock keys and fence
# marks, deadline-index entry (its events leave the shard's shared stream as the sink
# carries them). Without --postgres one
# summary key stays (sk:{sku}:retired). Then the SKU is gone for every route (404),
# and a repeat is 404. Also on a Redis Cluster of 3 masters. About 30 s.
# Issue 51: a PUT with ?reset=true while events have not reached the database is 409
# not_settled and writes nothing; on the cluster a PUT without it of a SKU with orders
# is 409 exists and writes in no shard; GET /skus lists the cluster's SKUs page by page.
set -uo pipefail
# shellcheck disable=SC2317 # functions run from wait_until look unreachable
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin retire redis-server redis-cli curl jq psql pg_isready initdb

code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
body() { curl -s "$@"; }
post() { # URL SKU USER -> the 201's order id, or nothing
    curl -s -X POST "$1/skus/$2/orders" -d "{\"user_id\":\"$3\",\"qty\":1}" | jq -r '.order_id // empty'
}

# ---- one Redis, no --postgres ------------------------------------------------------
start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4 --log-level warn ||
    exit 1
U=$STARTED_URL
# the key count before the SKU: with the instance's own keys there (its worker lease,
# the rooms' pacer lease, which its first tick takes once it is ready)
pacing() { (($(rcli EXISTS 'seckill:{rooms}:pacer') == 1)); }
check "the rooms' pacer lease taken (within 5 s)" wait_until 5 pacing
base=$(rcli DBSIZE)
expect "PUT r1 (a payment window)" "201" \
    "$(code -X PUT -d '{"stock":6,"segments":3,"per_user_limit":2,"pay_within_ms":60000}' "$U/skus/r1")"
a=$(post "$U" r1 ann) b=$(post "$U" r1 bob) c=$(post "$U" r1 cid)
check "3 reservations" test -n "$a" -a -n "$b" -a -n "$c"
keys=$(rcli DBSIZE)
expect "DELETE with units pending: 409 not_settled" "409 not_settled" \
    "$(curl -s -w ' %{http_code}' -X DELETE "$U/skus/r1" | jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "... nothing written (the key count)" "$keys" "$(rcli DBSIZE)"
dan=$(post "$U" r1 dan)
check "... the SKU still sells" test -n "$dan"
code -X POST -d '{}' "$U/orders/$a/pay" >/dev/null
code -X POST -d '{}' "$U/orders/$b/pay" >/dev/null
code -X POST -d '{"user_id":"cid"}' "$U/orders/$c/cancel" >/dev/null
code -X POST -d '{"user_id":"dan"}' "$U/orders/$dan/cancel" >/dev/null
epoch1=$(rcli HGET 'sk:{r1}:meta' epoch)
expect "settled: DELETE 204" "204" "$(code -X DELETE "$U/skus/r1")"
expect "... every key of r1 gone but its summary: the key count as before the SKU, + 1" \
    "$((base + 1))" "$(rcli DBSIZE)"
expect "... no key named after it but the summary" "sk:{r1}:retired" \
    "$(rcli --scan --pattern '*r1*' | paste -sd' ')"
expect "... the summary: initial sold orders paid returned" "6 2 4 2 2" \
    "$(rcli HMGET 'sk:{r1}:retired' initial sold orders paid returned | paste -sd' ')"
expect "... out of the deadline index" "" "$(rcli ZSCORE seckill:due r1)"
expect "GET /skus/r1: 404" "404" "$(code "$U/skus/r1")"
expect "an order of it: 404" "404" "$(code -X POST -d '{"user_id":"eve"}' "$U/skus/r1/orders")"
expect "GET of one of its orders: 404" "404" "$(code "$U/orders/$a")"
expect "DELETE again: 404" "404" "$(code -X DELETE "$U/skus/r1")"
expect "DELETE of a SKU never made: 404" "404" "$(code -X DELETE "$U/skus/never")"
expect "r1 made again: 201" "201" "$(code -X PUT -d '{"stock":2}' "$U/skus/r1")"
check "... with an epoch its retired life never had ($epoch1 before)" \
    test "$(rcli HGET 'sk:{r1}:meta' epoch)" != "$epoch1"
expect "... and it sells" "201" "$(code -X POST -d '{"user_id":"fay"}' "$U/skus/r1/orders")"

# ---- with --postgres, one Redis ----------------------------------------------------
mkdir -p "$dir/pg"
start_pg "$dir/pg" || exit 1
PG_URL=$(pg_url "$(cat "$dir/pg/pg.port")")
start_instance sink "$dir" --redis "127.0.0.1:$rport" --lock redis --postgres "$PG_URL" \
    --log-level warn --instance-id 7 || exit 1
S=$STARTED_URL
# the shard's events stream and the sink's registry, shared by every SKU, made by a
# first SKU (r0): the count below is taken with them there
code -X PUT -d '{"stock":5}' "$S/skus/r0" >/dev/null
post "$S" r0 z1 >/dev/null
stored0() { [[ $(body "$S/skus/r0/audit" | jq -r '.store.matches and .store.lag_events == 0') == true ]]; }
check "r0's order stored" wait_until 20 stored0
trimmed() { (($(rcli XLEN seckill:events) <= 1)); }
wait_until 10 trimmed
base=$(rcli DBSIZE)
code -X PUT -d '{"stock":5}' "$S/skus/r2" >/dev/null
for u in u1 u2 u3; do post "$S" r2 "$u" >/dev/null; done
stored() { [[ $(body "$S/skus/r2/audit" | jq -r '.store.matches and .store.lag_events == 0') == true ]]; }
check "the sink carries r2's 3 orders to PostgreSQL" wait_until 20 stored
expect "settled and stored: DELETE 204" "204" "$(code -X DELETE "$S/skus/r2")"
expect "... the key count as before the SKU (no summary: the database keeps it)" \
    "$base" "$(rcli DBSIZE)"
expect "... no key named after it" "" "$(rcli --scan --pattern '*r2*' | paste -sd' ')"
expect "... its orders still in PostgreSQL" "3" \
    "$(psql -X -q -tA "$PG_URL" -c "select count(*) from seckill_orders where sku = 'r2'")"
# events the database has not: PostgreSQL stopped, one more order, then DELETE
code -X PUT -d '{"stock":5}' "$S/skus/r3" >/dev/null
post "$S" r3 v1 >/dev/null
check "r3's first order stored" wait_until 20 \
    eval '[[ $(body "$S/skus/r3/audit" | jq -r ".store.matches and .store.lag_events == 0") == true ]]'
cmd_stop "$dir/pg" pg 0 >/dev/null 2>&1
post "$S" r3 v2 >/dev/null
keys=$(rcli DBSIZE)
expect "an event not in PostgreSQL: DELETE 409" "409" "$(code -X DELETE "$S/skus/r3")"
expect "... nothing written" "$keys" "$(rcli DBSIZE)"
dump=$(rcli HGETALL 'sk:{r3}:meta' | paste -sd' ')
expect "... and PUT ?reset=true: 409 not_settled" "not_settled" \
    "$(curl -s -X PUT -d '{"stock":9}' "$S/skus/r3?reset=true" | jq -r .error)"
expect "... nothing written, its orders there" "$keys $dump" \
    "$(rcli DBSIZE) $(rcli HGETALL 'sk:{r3}:meta' | paste -sd' ')"

# ---- a Redis Cluster of 3 masters --------------------------------------------------
it_cluster_up --redis-cluster 3 --instances 0 || exit 1
start_instance --ready-secs 5 onc "$dir" --redis "${seeds[0]}" --threads 1 --log-level warn ||
    exit 1
C=$STARTED_URL
keys_all() { # every master's key count
    local n=0 s
    for s in "${seeds[@]}"; do n=$((n + $(redis-cli -p "${s##*:}" DBSIZE))); done
    echo "$n"
}
base=$(keys_all)
code -X PUT -d '{"stock":6,"segments":3,"per_user_limit":3,"pay_within_ms":60000}' "$C/skus/rc" \
    >/dev/null
ids=()
for u in w1 w2 w3 w4; do ids+=("$(post "$C" rc "$u")"); done
check "4 reservations on the cluster" test "$(printf '%s\n' "${ids[@]}" | grep -c .)" -eq 4
expect "DELETE with units pending: 409" "409" "$(code -X DELETE "$C/skus/rc")"
keys=$(keys_all)
expect "PUT without reset of the cluster's SKU with orders: 409 exists" "409 exists" \
    "$(curl -s -w ' %{http_code}' -X PUT -d '{"stock":9,"segments":3}' "$C/skus/rc" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "... nothing written in any shard, its orders there" "$keys pending" \
    "$(keys_all) $(curl -s "$C/orders/${ids[0]}" | jq -r .state)"
listing() { # every page of GET /skus?limit=1: "sku:pending" sorted
    local cursor="" page pages=0
    while ((pages++ < 100)); do
        page=$(curl -s "$C/skus?limit=1${cursor:+&cursor=$cursor}")
        jq -r '.skus[] | "\(.sku):\(.pending)"' <<<"$page"
        cursor=$(jq -r '.next // empty' <<<"$page")
        [[ -n $cursor ]] || break
    done | sort | paste -sd' '
}
expect "GET /skus over the masters' directories, a page at a time" "rc:4" "$(listing)"
for i in 0 1 2 3; do
    if ((i % 2)); then
        code -X POST -d '{}' "$C/orders/${ids[$i]}/pay" >/dev/null
    else
        code -X POST -d "{\"user_id\":\"w$((i + 1))\"}" "$C/orders/${ids[$i]}/cancel" >/dev/null
    fi
done
expect "settled: DELETE 204" "204" "$(code -X DELETE "$C/skus/rc")"
# (the count may also grow by the acknowledgement keys, sk:{<gene tag>}:ack, one per gene
# at most: the loops' WAIT rounds, shared by every SKU, not this one's)
named() { # the keys of any master named after rc
    local s
    for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern '*rc*'; done | paste -sd' '
}
expect "... every shard's keys and the directory gone: no key named after it but the summary" \
    "sk:{rc}:retired" "$(named)"
check "... the key count as before, + the summary and the shared ack keys ($(keys_all) from $base)" \
    test "$(keys_all)" -le $((base + 1 + 3))
summary=$(redis-cli -c -p "${seeds[0]##*:}" HMGET 'sk:{rc}:retired' initial sold orders paid returned |
    paste -sd' ')
expect "... the summary over the shards: initial sold orders paid returned" "6 2 4 2 2" "$summary"
expect "GET /skus/rc: 404" "404" "$(code "$C/skus/rc")"
# units moved between shards: 2 units over 2 shards, one buyer of 2 (a transfer into
# the buyer's home shard, whose record of transfers applied, xin, stays): settled all
# the same once the transfer is done (the soak found xin taken for one on its way)
code -X PUT -d '{"stock":2,"segments":2,"per_user_limit":2}' "$C/skus/rx" >/dev/null
expect "an order of 2 over 2 shards of 1" "201" \
    "$(code -X POST -d '{"user_id":"x1","qty":2}' "$C/skus/rx/orders")"
xin() { local s; for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern '*:rx:xin'; done | grep -c .; }
check "... a transfer was applied (a shard's xin)" test "$(xin)" -ge 1
expect "GET /skus: the retired SKU left, the new one listed" "rx:0" "$(listing)"
expect "DELETE after a transfer: 204" "204" "$(code -X DELETE "$C/skus/rx")"
expect "... no key named after it but its summary" "sk:{rx}:retired" \
    "$(for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern '*rx*'; done | paste -sd' ')"

# a transfer left half-way (its instance killed right after the units left the giving
# shard, SECKILL_TEST_CRASH=transfer-out): the retirement applies it first, then
# retires; the books say 2 units, none sold
SECKILL_TEST_CRASH=transfer-out start_instance --ready-secs 20 crash "$dir" \
    --redis "$REDIS_CLUSTER_SEEDS" --threads 1 --log-level warn || exit 1
X=$STARTED_URL
code -X PUT -d '{"stock":2,"segments":2,"per_user_limit":2}' "$C/skus/ry" >/dev/null
code --max-time 10 -X POST -d '{"user_id":"y1","qty":2}' "$X/skus/ry/orders" >/dev/null
xout() { local s; for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern '*:ry:xout'; done | grep -c .; }
crashed() { ! kill -0 "$(cat "$dir/crash.pid")" 2>/dev/null; }
check "the instance died right after taking units out (a transfer recorded, xout)" \
    wait_until 10 eval 'crashed && (($(xout) == 1))'
expect "DELETE applies the transfer, then retires: 204" "204" "$(code -X DELETE "$C/skus/ry")"
expect "... the summary: initial sold orders" "2 0 0" \
    "$(redis-cli -c -p "${seeds[0]##*:}" HMGET 'sk:{ry}:retired' initial sold orders | paste -sd' ')"
expect "... no key named after it but its summary" "sk:{ry}:retired" \
    "$(for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern '*ry*'; done | paste -sd' ')"

checks_finish
