#!/usr/bin/env bash
# --order-retention (issue 46, point 3): with --postgres, a settled order's record
# (paid, cancelled, expired, or placed without a payment window) leaves Redis the
# retention after the sink committed its final event, and GET /orders/{id} then answers
# from PostgreSQL, the same JSON as from Redis (also after the SKU is retired).
#
#   - orders of every kind: placed (one segment, and several), paid (with and without a
#     payment id, one of several segments), cancelled (one, several), expired: each GET
#     while in Redis, then their records gone (retention 1 s), then GET: the same bytes;
#   - a pending order keeps its record (no expiry: it is not settled);
#   - PostgreSQL down: a settled order whose event has not reached it keeps its record
#     (no expiry set) until it has; GET of a gone record answers 503 unavailable, of a
#     record still in Redis 200; PostgreSQL stalled (SIGSTOP): such a GET answers 503
#     after the store's 6 s deadline, and the main thread serves other routes after it;
#   - after DELETE /skus/{sku}, the same JSON again; an id never placed: 404;
#   - pay, cancel and an Idempotency-Key's replay of an order whose record is gone:
#     what docs/api.md says (a paid one's payment_id and paid_at kept; a pay with
#     another payment_id 409 paid);
#   - the flag: refused (exit 2) without --postgres and for a bad value;
#   - a Redis Cluster of 3 masters: records in each shard expire, GET answers the same.
# Fails without the retention: the records never leave Redis (and, retired, GET is 404).
# About 30 s; timing slack: every wait is for a condition, at most 20 s (the sink
# commits within ~0.5 s of an event, the retention is 1 s, the sweep expires within
# ~1 s of pay_by).
# shellcheck disable=SC2317 # functions run from wait_until look unreachable
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin retention redis-server redis-cli curl jq psql pg_isready initdb

body() { curl -s "$@"; }
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
post() { # URL SKU USER QTY [KEY] -> the 201's order id, or nothing
    local hdr=()
    [[ -n ${5:-} ]] && hdr=(-H "Idempotency-Key: $5")
    curl -s "${hdr[@]}" -X POST "$1/skus/$2/orders" -d "{\"user_id\":\"$3\",\"qty\":$4}" |
        jq -r '.order_id // empty'
}
metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

# ---- the flag --------------------------------------------------------------------
out=$("$SECKILL_BIN_PATH" --order-retention 1s --listen 127.0.0.1:1 2>&1)
expect "--order-retention without --postgres: exit 2" "2" "$?"
check "... saying it needs --postgres ($out)" grep -q -- '--order-retention needs --postgres' <<<"$out"
out=$("$SECKILL_BIN_PATH" --order-retention 7 --postgres postgresql://x@127.0.0.1/x 2>&1)
expect "--order-retention 7 (no unit): exit 2" "2" "$?"
out=$(SECKILL_ORDER_RETENTION=1w "$SECKILL_BIN_PATH" --postgres postgresql://x@127.0.0.1/x 2>&1)
expect "SECKILL_ORDER_RETENTION=1w (no such unit): exit 2" "2" "$?"

# ---- one Redis -------------------------------------------------------------------
start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
mkdir -p "$dir/pg"
start_pg "$dir/pg" || exit 1
PG_URL=$(pg_url "$(cat "$dir/pg/pg.port")")
start_instance one "$dir" --redis "127.0.0.1:$rport" --postgres "$PG_URL" --threads 2 \
    --order-retention 1s --log-level warn || exit 1
U=$STARTED_URL

code -X PUT -d '{"stock":6,"segments":3,"per_user_limit":3}' "$U/skus/fin" >/dev/null
code -X PUT -d '{"stock":12,"segments":6,"per_user_limit":3,"pay_within_ms":5000}' \
    "$U/skus/res" >/dev/null
code -X PUT -d '{"stock":5,"pay_within_ms":600000}' "$U/skus/long" >/dev/null
# The pending order first, then the others once ids have moved past its hash of
# records (inventory/lua/rec.lua: ~238 ms of ids share one; a hash leaves only when every
# record in it is settled and stored). Same machine: the instance's clock is this one.
k1=$(post "$U" long ka 1)
next_hash() { (((($(date +%s%3N) - 1704067200000) << 22) / 1000000000 > k1 / 1000000000)); }
check "ids past the pending order's hash (within 2 s)" wait_until 2 next_hash
# segments of 2 units: an order of 3 takes from two
f1=$(post "$U" fin fa 1) f2=$(post "$U" fin fb 3 key-fb)
p1=$(post "$U" res pa 1) p2=$(post "$U" res pb 3) p3=$(post "$U" res pc 1)
c1=$(post "$U" res ca 1) c2=$(post "$U" res cb 3) e1=$(post "$U" res ea 1 key-ea)
settled=("$f1" "$f2" "$p1" "$p2" "$p3" "$c1" "$c2" "$e1")
check "9 orders placed" test "$(printf '%s\n' "${settled[@]}" "$k1" | grep -c .)" -eq 9
expect "... one over several segments" "2" "$(body "$U/orders/$f2" | jq '.segments | length')"
expect "pays and cancels" "200 200 200 200 200" "$(code -X POST -d '{"payment_id":"pay-1"}' \
    "$U/orders/$p1/pay") $(code -X POST -d '{}' "$U/orders/$p2/pay") $(code -X POST \
    -d '{"payment_id":"pay-3"}' "$U/orders/$p3/pay") $(code -X POST -d '{"user_id":"ca"}' \
    "$U/orders/$c1/cancel") $(code -X POST -d '{"user_id":"cb"}' "$U/orders/$c2/cancel")"
expired() { [[ $(body "$U/orders/$e1" | jq -r .state) == expired ]]; }
check "the unpaid one expires at its pay_by" wait_until 20 expired
declare -A was
for id in "${settled[@]}"; do was[$id]=$(body "$U/orders/$id"); done
expect "the states, while in Redis" "placed placed paid paid paid cancelled cancelled expired" \
    "$(for id in "${settled[@]}"; do jq -r .state <<<"${was[$id]}"; done | paste -sd' ')"

gone() { # ID...: none of their records is in Redis
    local id
    for id in "$@"; do (($(it_rec_exists "$rport" "$id") == 0)) || return 1; done
}
check "every settled order's record leaves Redis (retention 1 s)" wait_until 20 gone "${settled[@]}"
expect "the pending order's record stays, no expiry" "1 -1" \
    "$(it_rec_exists "$rport" "$k1") $(rcli TTL "$(it_rec_key "$k1")")"
same() { # ID...: GET answers what it answered from Redis, byte for byte
    local id now
    for id in "$@"; do
        now=$(body "$U/orders/$id")
        [[ $now == "${was[$id]}" ]] || { echo "order $id: was ${was[$id]}, now $now"; return 1; }
    done
}
check "GET of each answers from PostgreSQL: the same JSON" same "${settled[@]}"
expect "an id never placed: 404" "404" "$(code "$U/orders/12345")"
expect "the pending order: from Redis" "pending" "$(body "$U/orders/$k1" | jq -r .state)"

# pay, cancel and replays of an order whose record is gone: as a final order in Redis
expect "pay of a paid order gone from Redis: 200, the order" "200 paid" \
    "$(curl -s -w ' %{http_code}' -X POST -d '{"payment_id":"pay-1"}' "$U/orders/$p1/pay" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .state)"')"
expect "... from PostgreSQL too, its payment_id and paid_at (changed_at: the pay's time)" \
    "pay-1 true" "$(jq -r '"\(.payment_id) \(.paid_at | test("^20[0-9-]+T[0-9:.]+Z$"))"' <<<"${was[$p1]}")"
expect "pay of a paid order gone from Redis, another payment_id: 409 paid, the first told" \
    "409 paid pay-1" \
    "$(curl -s -w ' %{http_code}' -X POST -d '{"payment_id":"pay-9"}' "$U/orders/$p1/pay" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | "\(.error) \(.payment_id)")"')"
expect "pay of a cancelled one: 409 cancelled" "409 cancelled" \
    "$(curl -s -w ' %{http_code}' -X POST -d '{}' "$U/orders/$c1/pay" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "pay of an expired one: 409 expired" "409 expired" \
    "$(curl -s -w ' %{http_code}' -X POST -d '{}' "$U/orders/$e1/pay" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "pay of a placed one: 409 not_pending" "409 not_pending" \
    "$(curl -s -w ' %{http_code}' -X POST -d '{}' "$U/orders/$f1/pay" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "cancel of a cancelled one: 200" "200" \
    "$(code -X POST -d '{"user_id":"ca"}' "$U/orders/$c1/cancel")"
expect "cancel of a paid one: 409 paid" "409 paid" \
    "$(curl -s -w ' %{http_code}' -X POST -d '{"user_id":"pa"}' "$U/orders/$p1/cancel" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "cancel of another user's: 403 forbidden" "403" \
    "$(code -X POST -d '{"user_id":"pa"}' "$U/orders/$c1/cancel")"
replay=$(curl -s -w ' %{http_code}' -H 'Idempotency-Key: key-fb' -X POST \
    -d '{"user_id":"fb","qty":3}' "$U/skus/fin/orders")
expect "a replay of a placed order gone from Redis: 201, the first answer" \
    "${was[$f2]} 201" "$replay"
replay=$(curl -s -w ' %{http_code}' -H 'Idempotency-Key: key-ea' -X POST \
    -d '{"user_id":"ea","qty":1}' "$U/skus/res/orders")
expect "a replay of an expired order gone from Redis: 201, the order as it is" \
    "${was[$e1]} 201" "$replay"
check "... none of this brought a record back" gone "${settled[@]}"

# PostgreSQL down: nothing expires before it has the order's final state
cmd_stop "$dir/pg" pg 0 >/dev/null 2>&1
f3=$(post "$U" fin fc 1)
check "an order placed while PostgreSQL is down" test -n "$f3"
lagging() { (($(metric "$U" seckill_sink_lag_events) > 0)); }
check "... the sink counts it as not stored yet" wait_until 20 lagging
expect "... its record has no expiry" "1 -1" \
    "$(it_rec_exists "$rport" "$f3") $(rcli TTL "$(it_rec_key "$f3")")"
expect "GET of a record gone, PostgreSQL down: 503 unavailable" "503 unavailable" \
    "$(curl -s -w ' %{http_code}' "$U/orders/$p1" |
        jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .error)"')"
expect "GET of a record in Redis: 200" "200" "$(code "$U/orders/$k1")"
"$ROOT/scripts/cluster.sh" start --dir "$dir/pg" pg >/dev/null 2>&1
check "PostgreSQL back: the record leaves Redis once stored" wait_until 20 gone "$f3"
was[$f3]='{"order_id":"'$f3'","sku":"fin","user_id":"fc","qty":1,"segment":'$(
    psql -X -q -tA "$PG_URL" -c "select segment from seckill_orders where order_id = $f3")',"state":"placed"}'
check "... and GET answers it from PostgreSQL" same "$f3"

# PostgreSQL stalled: every process of it stopped (SIGSTOP), its connections open, so
# nothing answers and nothing resets. A GET of a record gone from Redis waits on the
# main thread for the store's answer at most STORE_DEADLINE_MS (6 s), then 503; the
# main thread is free after it (/metrics, a route that waits there too, answers). Before
# the deadline the GET, and every waiting route behind it, hung as long as the stall.
pg_pids=()
read -ra pg_pids <<<"$(cat "$dir/pg/pg.pid") $(pgrep -P "$(cat "$dir/pg/pg.pid")" | tr '\n' ' ')"
on_exit() { kill -CONT "${pg_pids[@]}" 2>/dev/null || true; }
kill -STOP "${pg_pids[@]}"
t0=$(date +%s%N)
# 20 s: the 6 s deadline and 14 s of slack for a busy machine
got=$(curl -s --max-time 20 -o /dev/null -w '%{http_code}' "$U/orders/$p1")
ms=$((($(date +%s%N) - t0) / 1000000))
echo "PostgreSQL stalled: GET of a record gone answered $got after $ms ms"
expect "GET of a record gone, PostgreSQL stalled: 503 after the store's deadline ($ms ms)" \
    "503" "$got"
expect "... /metrics, on the same main thread, answers at once after it" "200" \
    "$(code --max-time 5 "$U/metrics")"
kill -CONT "${pg_pids[@]}"
check "PostgreSQL going on: GET answers it from PostgreSQL again (within 10 s)" \
    wait_until 10 same "$p1"

# retired: the same answers
expect "DELETE /skus/res: 204" "204" "$(code -X DELETE "$U/skus/res")"
expect "DELETE /skus/fin: 204" "204" "$(code -X DELETE "$U/skus/fin")"
check "GET after the retirement: the same JSON" same "${settled[@]}" "$f3"

# ---- a Redis Cluster of 3 masters ------------------------------------------------
it_cluster_up --redis-cluster 3 --instances 1 --lb none --postgres -- --order-retention 1s \
    --log-level warn || exit 1
C=${INSTANCE_URLS%% *}
code -X PUT -d '{"stock":12,"segments":6,"per_user_limit":3,"pay_within_ms":60000}' \
    "$C/skus/rc" >/dev/null
ids=()
for u in w1 w2 w3 w4 w5 w6; do ids+=("$(post "$C" rc "$u" 1)"); done
check "6 reservations on the cluster" test "$(printf '%s\n' "${ids[@]}" | grep -c .)" -eq 6
for i in 0 1 2 3 4 5; do
    if ((i % 2)); then
        code -X POST -d '{}' "$C/orders/${ids[$i]}/pay" >/dev/null
    else
        code -X POST -d "{\"user_id\":\"w$((i + 1))\"}" "$C/orders/${ids[$i]}/cancel" >/dev/null
    fi
    was[${ids[$i]}]=$(body "$C/orders/${ids[$i]}")
done
records() { # the order records left on every master
    local s
    for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern 'o:*'; done | grep -c .
}
shards() { # the masters holding the SKU's shards
    local s
    for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern 'sk:*:rc:meta'; done | grep -c .
}
check "the SKU spans the 3 shards" test "$(shards)" -eq 3
none_left() { (($(records) == 0)); }
check "every shard's records leave Redis" wait_until 20 none_left
U=$C
check "GET of each answers from PostgreSQL: the same JSON" same "${ids[@]}"

checks_finish
