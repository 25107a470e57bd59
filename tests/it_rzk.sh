#!/usr/bin/env bash
# Integration: the zk lock mode on a Redis Cluster (3 masters, a replica each), its
# orders on the event loops (the zk steps, the loop's router, acluster), when a shard's
# slot moves to another master or its master fails over. (Found when these orders ran
# on blocking batch threads: a hold went to the master its map named; when that
# answered MOVED (or nothing), the orders were answered 503 and the map was not learnt
# again, so every later order of that shard went to the same old master: 503 for good;
# chaos.sh cluster-migrate and cluster-master-kill, zk: most of the stock left unsold.)
#
#   - a 3-segment SKU, one segment per master; orders of every segment are placed;
#   - the slot of segment 0's shard moved to another master (cluster_move_slot, as
#     redis-cli --cluster reshard moves a slot): orders of fresh users are placed
#     again, each within a few tries (a first try may still go to the old master; the
#     next learns the map); every acknowledged order is found, the audit is consistent;
#   - the master now serving segment 0 killed with -9: once its replica has taken
#     over, the same.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin rzk redis-server redis-cli curl jq java

USERS=24 # orders after each fault: 8 or so in the shard that moved
TRIES=8  # an order's tries with its key: a 503 per loop at most, and margin

it_cluster_up --redis-cluster 3 --instances 1 --lb none --lock zk -- --threads 2 \
    --log-level warn || exit 1

# order NAME: one order of user NAME (key NAME), asked again on 503 up to TRIES times;
# "status tries segment order_id"
order() {
    local t out status
    for ((t = 1; t <= TRIES; t++)); do
        out=$(curl -s --max-time 10 -w '\n%{http_code}' -X POST -H "Idempotency-Key: $1" \
            -d "{\"user_id\": \"$1\"}" "$LB_URL/skus/rz/orders")
        status=${out##*$'\n'}
        [[ $status == 503 ]] || break
        sleep 0.2
    done
    echo "$status $t $(jq -r '"\(.segment // "-") \(.order_id // "-")"' <<<"${out%$'\n'*}" 2>/dev/null)"
}
# orders NAME: USERS orders of fresh users NAME-1.. into $dir/NAME
orders() {
    local i
    for ((i = 1; i <= USERS; i++)); do order "$1-$i"; done >"$dir/$1"
}
placed() { awk '$1 == 201' "$dir/$1" | wc -l; }
in_segment() { awk -v s="$2" '$1 == 201 && $3 == s' "$dir/$1" | wc -l; }
found() { # NAME: how many of its order ids GET /orders/{id} finds
    local n=0 id
    for id in $(awk '$1 == 201 { print $4 }' "$dir/$1"); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' "$LB_URL/orders/$id") == 200 ]] && n=$((n + 1))
    done
    echo "$n"
}
consistent() { curl -s "$LB_URL/skus/rz/audit" | jq -r '"\(.oversold) \(.consistent)"'; }
# synced PORT: every node ok, every replica synced
# shellcheck disable=SC2046 # one port per word
synced() { cluster_ready $(cluster_node_ports "$1"); }

# cluster_dump: what each node says, and the restarted node's log (when a wait failed)
cluster_dump() {
    local f p
    for f in "$dir"/c/shard-*.args; do
        p=$(sed -n '/^--port$/{n;p;q}' "$f")
        echo "--- $(basename "$f" .args) ($p): $(redis-cli -p "$p" cluster info 2>&1 | grep -m1 cluster_state)"
        redis-cli -p "$p" cluster nodes 2>&1 | sed 's/^/    /'
        redis-cli -p "$p" info replication 2>&1 | grep -E '^(role|master_link_status|master_sync_in_progress):' | sed 's/^/    /'
    done
    echo "--- restart.out"; cat "$dir/restart.out"
    echo "--- $victim.log (end)"; tail -n 25 "$dir/c/$victim.log"
}

expect "PUT rz" "201" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
    -d '{"stock": 3000, "segments": 3, "per_user_limit": 1}' "$LB_URL/skus/rz")"
orders before
expect "orders before any fault: placed" "$USERS" "$(placed before)"
check "... some in segment 0" test "$(in_segment before 0)" -gt 0

# ---- the slot of segment 0's shard moved ----------------------------------------------
seed=${seeds[0]##*:}
read -r src key < <(cluster_sku_segment0 "$seed" rz)
slot=$(redis-cli -p "$seed" cluster keyslot "$key")
dst=$(cluster_masters "$seed" | awk -v p="$src" '$1 != p { print $1; exit }')
cluster_move_slot "$src" "$slot" "$dst" >"$dir/move.out" 2>&1
check "slot $slot of $key moved to another master (IMPORTING, MIGRATE, SETSLOT NODE)" \
    eq "$(cluster_slot_owner "$seed" "$slot")" "$dst" || cat "$dir/move.out"
# Every node, the new owner's replica too, must know the move before that owner is
# killed: a replica promoted before its master's ping told it of the last slot moved
# takes over without that slot, claims it nowhere, and says cluster_state:fail for good
# (seen in CI: the slot unassigned in the promoted node's own view, served in the others').
all_know() {
    local p
    for p in $(cluster_node_ports "$seed"); do
        [[ $(cluster_slot_owner "$p" "$slot") == "$dst" ]] || return 1
    done
}
check "... every node knows it, the new owner's replica too" wait_until 20 all_know || cluster_dump
orders moved
expect "orders after the move: placed, each within $TRIES tries" "$USERS" "$(placed moved)"
check "... some in segment 0 ($(in_segment moved 0))" test "$(in_segment moved 0)" -gt 0
expect "every order placed after the move found" "$(placed moved)" "$(found moved)"
expect "audit after the move: oversold, consistent" "0 true" "$(consistent)"

# ---- the master of segment 0's shard killed -------------------------------------------
victim=$(basename "$(grep -lx "$dst" "$dir"/c/shard-*.args | head -1)" .args)
seed=$(cluster_masters "$seed" | awk -v p="$dst" '$1 != p { print $1; exit }') # one that stays
kill -9 "$(cat "$dir/c/$victim.pid")"
took_over() { [[ -n $(cluster_slot_owner "$seed" "$slot") && $(cluster_slot_owner "$seed" "$slot") != "$dst" ]]; }
check "$victim (segment 0's master) killed: its replica took over" wait_until 20 took_over
# shellcheck disable=SC2046 # one port per word
others_ok() { cluster_ready $(cluster_node_ports "$seed" | grep -vx "$dst"); }
check "... every other node says cluster_state:ok" wait_until 20 others_ok || cluster_dump
"$ROOT/scripts/cluster.sh" start --dir "$dir/c" "$victim" >"$dir/restart.out" 2>&1
# Redis 7.0 sometimes loses the moved slot here (2 runs of 7 on 2026-11-26): the killed
# master comes back with the configuration it had, its claim to the slot it imported
# wins over the promoted replica's in the replica's own view, it then turns replica,
# and the promoted master lists the slot as nobody's (cluster_state:fail in its view
# alone, for good). That is Redis's, not seckill's: the operator's heal is CLUSTER
# SETSLOT on the master every other node says owns it, and the test does it, says so,
# and still asks seckill to follow.
healed=""
if ! wait_until 20 synced "$seed"; then
    owner=$(cluster_slot_owner "$seed" "$slot")
    if [[ -n $owner && $(cluster_slot_owner "$owner" "$slot") != "$owner" ]]; then
        echo "healing: 127.0.0.1:$owner does not list slot $slot, which the others say it owns"
        redis-cli -p "$owner" cluster setslot "$slot" node "$(redis-cli -p "$owner" cluster myid)"
        healed=$owner
    fi
fi
check "$victim started again, a synced replica" wait_until 60 synced "$seed" || cluster_dump
# The same bug may take the slot's keys with it (seen once under TSan, 2026-11-27: the
# healed owner held none, so the SKU's shard was gone and its orders answered 404). Then
# there is nothing left for seckill to sell from in that shard: said, and the checks
# after the failover are skipped rather than blamed on seckill.
if [[ -n $healed ]] && (($(redis-cli -p "$healed" cluster countkeysinslot "$slot") == 0)); then
    echo "SKIPPED after the failover: Redis lost slot $slot's keys with the heal (the bug above)"
    checks_summary
    exit
fi
orders failover
expect "orders after the failover: placed, each within $TRIES tries" "$USERS" "$(placed failover)"
check "... some in segment 0 ($(in_segment failover 0))" test "$(in_segment failover 0)" -gt 0
expect "every order placed after the failover found" "$(placed failover)" "$(found failover)"
expect "audit after the failover: oversold, consistent" "0 true" "$(consistent)"

checks_summary
