#!/usr/bin/env bash
# Integration: with --postgres every change of an order's state reaches PostgreSQL
# exactly once (SPEC invariant 10), through the outbox streams and the instances' sink.
#
#   - without --postgres nothing changes: a SKU PUT by such an instance has no
#     outbox, its orders append no event;
#   - a sale with a payment window through 2 instances: placed, paid, cancelled and
#     expired orders all reach the database, each change once (one event row per
#     change, 2 per order), and the audit's store block matches the records in Redis
#     with the lag at 0;
#   - PostgreSQL stopped in the middle of a sale (until 30 orders more) and started again: the sale
#     goes on (201s while it is down), the sink says it is down and its lag grows,
#     then drains; every 201's order is in the database, none twice;
#   - a consumer killed (-9, SECKILL_TEST_CRASH) after reading events and before its
#     transaction: another claims them (XAUTOCLAIM) and writes them;
#   - a consumer killed after the commit and before XACK: the events stay pending,
#     another claims them and writes them again, which changes nothing (the same
#     rows, no event twice);
#   - a stream entry that is no event of the scripts is skipped (counted), and what
#     comes after it still arrives;
#   - events that PostgreSQL refuses for their data (19 digits beyond bigint or int, a
#     pay_by beyond to_timestamp) go to seckill_dead_letters with its error, counted,
#     and what comes after them still arrives;
#   - a transaction refused at its commit (a deferred trigger) is not acknowledged:
#     its events stay pending, and arrive once commits pass;
#   - the store block is no rubber stamp: an order put in another state in the
#     database makes it say so;
#   - a Redis Cluster of 3 masters: one stream per shard, and the same agreement;
#   - the streams are trimmed: what reached the database leaves Redis.
set -uo pipefail
# shellcheck disable=SC2317 # functions run from wait_until look unreachable
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin sink redis-server redis-cli curl jq psql pg_isready initdb

sql() { psql -X -q -tA -F ' ' "$1" -c "$2"; }
audit() { curl -s "$1/skus/$2/audit"; }
matches() { [[ $(audit "$1" "$2" | jq -r '.store.matches and .store.lag_events == 0') == true ]]; }
post() { # URL SKU USER -> the 201's order id, or nothing
    curl -s -X POST "$1/skus/$2/orders" -d "{\"user_id\":\"$3\",\"qty\":1}" | jq -r '.order_id // empty'
}
metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

it_cluster_up --instances 2 --postgres -- --log-level warn || exit 1
url=$LB_URL

# ---- without --postgres, nothing changes -----------------------------------------
start_instance plain "$dir" --redis "$REDIS_ADDR" --threads 1 --log-level warn --instance-id 9 ||
    exit 1
plain=$STARTED_URL
curl -s -o /dev/null -X PUT "$plain/skus/plain" -d '{"stock": 5}'
[[ -n $(post "$plain" plain u1) ]]
# (every SKU's events go to the shard's one stream, seckill:events: none names plain)
expect "without --postgres: no outbox for its SKU" "0 " \
    "$(redis-cli -p "$REDIS_PORT" xrange seckill:events - + | grep -cx plain) $(redis-cli -p "$REDIS_PORT" hget 'sk:{plain}:meta' outbox)"

# ---- a sale's whole life reaches the database, each change once --------------------
curl -s -o /dev/null -X PUT "$url/skus/life" -d '{"stock": 100, "pay_within_ms": 4000}'
# Each pay and cancel right after its order, well inside its 4 s window however slow
# the machine (all 40 orders first, then 25 pays and cancels, is 65 requests that a
# busy machine may not finish before the first pay_by).
ids=()
for i in $(seq 1 40); do
    id=$(post "$url" life "u$i")
    ids+=("$id")
    if ((i <= 15)); then
        curl -s -o /dev/null -X POST "$url/orders/$id/pay" -d '{}'
    elif ((i <= 25)); then
        curl -s -o /dev/null -X POST "$url/orders/$id/cancel" -d "{\"user_id\":\"u$i\"}"
    fi
done
expect "40 orders placed" 40 "$(printf '%s\n' "${ids[@]}" | grep -c .)"
expired() { [[ $(audit "$url" life | jq -r .expired) == 15 ]]; }
check "the 15 unpaid orders expire" wait_until 10 expired
check "the audit's store matches Redis once the lag is 0" wait_until 15 matches "$url" life
store=$(audit "$url" life | jq -c '.store.by_state | map_values([.orders, .units])')
expect "the database by state" \
    '{"placed":[0,0],"pending":[0,0],"paid":[15,15],"cancelled":[10,10],"expired":[15,15]}' "$store"
expect "one event per change: 40 pending + 40 ends, none twice" "80 80" \
    "$(sql "$PG_URL" "select count(*), count(distinct (e.order_id, e.state)) from seckill_events e join seckill_orders o using (order_id) where o.sku = 'life'")"
# a pay or cancel right after its order: its pending event and its end often go in one
# batch, and only the pending event carries pay_by
expect "every order of the sale has its pay_by, whatever the batches its events went in" \
    "40 0" "$(sql "$PG_URL" "select count(*), count(*) filter (where pay_by is null) from seckill_orders where sku = 'life'")"
expect "every paid, cancelled and expired order came from pending" 40 \
    "$(sql "$PG_URL" "select count(*) from seckill_events where state = 'pending' and order_id in (select order_id from seckill_orders where sku = 'life')")"
one=$(sql "$PG_URL" "select order_id from seckill_orders where sku = 'life' and state = 'paid' limit 1")
sql "$PG_URL" "update seckill_orders set state = 'expired', rank = 2 where order_id = $one"
expect "an order in another state in the database: the store does not match" "false" \
    "$(audit "$url" life | jq -r .store.matches)"
sql "$PG_URL" "update seckill_orders set state = 'paid' where order_id = $one"
# Every event up to the last delivered is acknowledged: none is kept (the last one was,
# before, and with it its node of up to 4 KB)
trimmed() { (($(redis-cli -p "$REDIS_PORT" xlen seckill:events) == 0)); }
check "the stream is trimmed of everything that reached the database" wait_until 10 trimmed

# an entry that is no event of the scripts is skipped, not retried forever
# (also whole ones with what JSON would escape, or what is not UTF-8: the sink writes
# the events' JSON itself, and no script writes such a value)
redis-cli -p "$REDIS_PORT" xadd seckill:events '*' o not-a-number s paid >/dev/null
redis-cli -p "$REDIS_PORT" xadd seckill:events '*' o 91 s placed k life u 'q"uo\te' q 1 g 1 >/dev/null
redis-cli -p "$REDIS_PORT" xadd seckill:events '*' o 92 s placed k life u "$(printf 'u\xff\xfe')" q 1 g 1 >/dev/null
skipped() {
    local u n=0
    for u in $INSTANCE_URLS; do n=$((n + $(metric "$u" seckill_sink_skipped_total))); done
    ((n == 3))
}
check "entries that are no event are skipped (counted once each)" wait_until 10 skipped
expect "... and none of them is in the database" 0 \
    "$(sql "$PG_URL" "select count(*) from seckill_orders where order_id in (91, 92)")"
[[ -n $(post "$url" life late-buyer) ]]
check "and the changes after it still reach the database" wait_until 10 matches "$url" life

# events that pass the sink's checks (19 digits) and that PostgreSQL refuses for their
# data (an order id beyond bigint, units beyond int, a pay_by beyond to_timestamp's
# range): dead letters with PostgreSQL's error, and they hold up nothing after them
redis-cli -p "$REDIS_PORT" xadd seckill:events '*' o 9223372036854775808 s placed k life u p1 q 1 g 1 >/dev/null
redis-cli -p "$REDIS_PORT" xadd seckill:events '*' o 93 s placed k life u p2 q 2147483648 g 1 >/dev/null
redis-cli -p "$REDIS_PORT" xadd seckill:events '*' o 94 s pending k life u p3 q 1 g 1 b 9223372036854775807 >/dev/null
[[ -n $(post "$url" life after-poison) ]]
dead_counted() { # the 3 skipped entries above and these 3
    local u v n=0
    for u in $INSTANCE_URLS; do
        v=$(metric "$u" seckill_sink_dead_letters_total)
        n=$((n + ${v:-0}))
    done
    ((n == 6))
}
# (a failed batch, its events alone, the dead letters: three round trips, well under a
# second here; 10 s for a loaded machine)
check "events PostgreSQL refuses are dead letters, counted once each" wait_until 10 dead_counted
expect "... in seckill_dead_letters with PostgreSQL's error (and the 3 skipped)" "6 3" \
    "$(sql "$PG_URL" "select count(*), count(*) filter (where error like '%out of range%') from seckill_dead_letters")"
check "and the order placed after them reaches the database" wait_until 10 matches "$url" life

# ---- PostgreSQL down in the middle of a sale ----------------------------
curl -s -o /dev/null -X PUT "$url/skus/outage" -d '{"stock": 100000}'
loops=()
for c in 1 2; do
    it_order_loop "$url/skus/outage/orders" "$c" >"$dir/loop-$c.out" &
    loops+=($!)
done
placed_some() { (($(cat "$dir"/loop-*.out | awk '$3 == 201' | wc -l) >= 20)); }
check "orders placed before the outage" wait_until 20 placed_some
scripts_cluster() { "$ROOT/scripts/cluster.sh" "$@" --dir "$CLUSTER_DIR"; }
scripts_cluster stop pg >/dev/null 2>&1
before=$(cat "$dir"/loop-*.out | awk '$3 == 201' | wc -l)
down() { [[ $(metric "${INSTANCE_URLS%% *}" seckill_sink_up) == 0 ]]; }
check "the sink says PostgreSQL is down" wait_until 10 down
# The outage lasts until 30 orders more were placed without the database (not a fixed
# 10 s: a busy machine places fewer a second; 20 s bounds it, about 2 s here).
placed_during() { (($(cat "$dir"/loop-*.out | awk '$3 == 201' | wc -l) - before >= 30)); }
wait_until 20 placed_during
during=$(($(cat "$dir"/loop-*.out | awk '$3 == 201' | wc -l) - before))
check "orders placed while PostgreSQL is down ($during)" test "$during" -gt 0
lagging() { (($(metric "${INSTANCE_URLS%% *}" seckill_sink_lag_events) > 0)); }
check "the lag counts the changes not yet in the database" wait_until 5 lagging
scripts_cluster start pg >/dev/null 2>&1
touch "$dir/stop"
wait "${loops[@]}"
check "after the outage the store matches Redis again" wait_until 30 matches "$url" outage
expect "one event per order in the database, none twice" "1" \
    "$(sql "$PG_URL" "select count(*) = count(distinct order_id) from seckill_events where order_id in (select order_id from seckill_orders where sku = 'outage')" | tr -d ' ' | sed 's/t/1/;s/f/0/')"
missing=$(cat "$dir"/loop-*.out | awk '$3 == 201 {print $6}' | sort >"$dir/acked"
    sql "$PG_URL" "select order_id from seckill_orders where sku = 'outage'" | sort >"$dir/stored"
    comm -23 "$dir/acked" "$dir/stored" | wc -l)
expect "no acknowledged order missing from the database" 0 "$missing"
up() { [[ $(metric "${INSTANCE_URLS%% *}" seckill_sink_up) == 1 ]]; }
check "the sink is up again" wait_until 10 up

# ---- consumers killed before the commit and after it --------------------------------
# A Redis and a database of their own, so that only the instances started here read.
mkdir -p "$dir/k"
start_redis redis "$dir/k" always || exit 1
kport=$STARTED_PORT
start_pg "$dir/k" || exit 1
kurl=$(pg_url "$STARTED_PORT")
consumer() { # NAME ID [CRASH [--no-wait]]
    SECKILL_TEST_CRASH=${3:-} start_instance ${4:-} --ready-secs 20 "$1" "$dir/k" \
        --redis "127.0.0.1:$kport" --postgres "$kurl" --threads 1 --log-level warn \
        --instance-id "$2"
}
pending() { redis-cli -p "$kport" xpending seckill:events seckill-sink | head -1; }
dead() { ! proc_alive "$1" "$dir/k"; }
consumer before 21 sink-before-commit || exit 1
curl -s -o /dev/null -X PUT "$STARTED_URL/skus/k" -d '{"stock": 1000}'
: >"$dir/k-ids"
for i in $(seq 1 30); do post "$STARTED_URL" k "k$i" >>"$dir/k-ids"; done
n=$(grep -c . "$dir/k-ids")
check "a consumer killed before its transaction dies" wait_until 10 dead before
expect "nothing of its batch reached the database" 0 \
    "$(sql "$kurl" "select count(*) from seckill_events")"
check "its events stay pending" test "$(pending)" -gt 0

# Not waited for: it claims the pending events as it starts and dies after their
# commit, which on a busy machine came before its /readyz was asked (CI under stress:
# "after did not come up"). What it did is judged below.
consumer after 22 sink-after-commit --no-wait || exit 1
check "a consumer that claims them and is killed after the commit dies" wait_until 20 dead after
expect "its commit reached the database: every order" "$n" \
    "$(sql "$kurl" "select count(*) from seckill_events")"
check "its events stay pending: not acknowledged" test "$(pending)" -gt 0

consumer last 23 || exit 1
last=$STARTED_URL
drained() { [[ $(pending) == 0 ]] && matches "$last" k; }
check "a third consumer claims them; the store matches" wait_until 20 drained
check "it claimed events already written ($(metric "$last" seckill_sink_claimed_total))" \
    test "$(metric "$last" seckill_sink_claimed_total)" -gt 0
expect "written twice, applied once: one event and one order each" "$n $n" \
    "$(sql "$kurl" "select (select count(*) from seckill_events), (select count(*) from seckill_orders)" | tr '|' ' ')"

# ---- an error at the commit itself: nothing acknowledged -------------------------------
# A deferred constraint trigger refuses every transaction that records an event, at its
# commit, after the statement's own result came (a serialization failure: not the
# data's, so the batch is tried again, not dead-lettered). The events must stay pending.
sql "$kurl" "create function refuse_at_commit() returns trigger language plpgsql as
    \$\$ begin raise exception 'refused at commit' using errcode = '40001'; end \$\$;
    create constraint trigger refuse_at_commit after insert on seckill_events
    deferrable initially deferred for each row execute function refuse_at_commit()" >/dev/null
errors_before=$(metric "$last" seckill_sink_errors_total)
stored_before=$(sql "$kurl" "select count(*) from seckill_events")
for i in $(seq 1 5); do post "$last" k "c$i" >/dev/null; done
# two failed commits: the batch and its first retry 250 ms later (10 s: a loaded machine)
refused() { (($(metric "$last" seckill_sink_errors_total) >= errors_before + 2)); }
check "a transaction refused at its commit counts as failed (tried again)" wait_until 10 refused
expect "nothing of it in the database" "$stored_before" "$(sql "$kurl" "select count(*) from seckill_events")"
check "its events stay pending: not acknowledged" test "$(pending)" -gt 0
sql "$kurl" "drop trigger refuse_at_commit on seckill_events" >/dev/null
check "once the commit passes, they reach the database and the store matches" \
    wait_until 20 drained

# ---- a Redis Cluster: one stream per shard -------------------------------------------
"$ROOT/scripts/cluster.sh" up --dir "$dir/rc" --quiet --redis-cluster 3 --instances 2 \
    --lb none --postgres -- --log-level warn >"$dir/rc.out" 2>&1 || { tail "$dir/rc.out"; exit 1; }
# shellcheck source=/dev/null
rurl=$(source "$dir/rc/cluster.env" && echo "${INSTANCE_URLS%% *}")
# shellcheck source=/dev/null
rpg=$(source "$dir/rc/cluster.env" && echo "$PG_URL")
# shellcheck source=/dev/null
rport=$(source "$dir/rc/cluster.env" && echo "$REDIS_PORT")
# (a window of 4 s, each of the first 10 orders paid right after it: 30 orders and then
# 10 pays took more than 1.5 s on a loaded machine, and every pay met an expired order)
curl -s -o /dev/null -X PUT "$rurl/skus/rs" -d '{"stock": 60, "segments": 6, "pay_within_ms": 4000}'
rids=()
paid=0
for i in $(seq 1 30); do
    id=$(post "$rurl" rs "r$i")
    [[ -z $id ]] && continue
    rids+=("$id")
    ((${#rids[@]} <= 10)) &&
        [[ $(curl -s -o /dev/null -w '%{http_code}' -X POST "$rurl/orders/$id/pay" -d '{}') == 200 ]] &&
        paid=$((paid + 1))
done
expect "one stream per shard in the registry" 3 \
    "$(redis-cli -c -p "$rport" smembers seckill:streams | grep -c '^seckill:events:{')"
stand_ins() { # keys a shard wrote in the registry's stead (none: the PUT lists the streams)
    local m n=0
    for m in $(redis-cli -c -p "$rport" cluster nodes | awk '/master/ { split($2, a, "@"); print a[1] }'); do
        n=$((n + $(redis-cli -p "${m##*:}" --scan --pattern '*:lock:streams' | grep -c .)))
    done
    echo "$n"
}
expect "... and no shard keeps a stand-in for the registry" 0 "$(stand_ins)"
ended() { # every order paid or expired, and the store matches Redis
    [[ $(sql "$rpg" "select count(*) from seckill_orders where sku = 'rs' and state = 'pending'") == 0 ]] &&
        matches "$rurl" rs
}
check "on a cluster every order ended and the store matches Redis" wait_until 20 ended
check "on a cluster: orders placed ($((${#rids[@]})) of 30) and paid ($paid of 10)" \
    test "${#rids[@]}" -ge 25 -a "$paid" -ge 8
expect "on a cluster: the pays answered 200 paid, the rest expired, in the database" \
    "$paid $((${#rids[@]} - paid))" \
    "$(sql "$rpg" "select count(*) filter (where state = 'paid'), count(*) filter (where state = 'expired') from seckill_orders where sku = 'rs'" | tr '|' ' ')"

checks_finish
