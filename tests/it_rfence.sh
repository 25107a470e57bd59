#!/usr/bin/env bash
# Integration: fencing through a failover that lost the newest lock grant. Redis
# replicates asynchronously, so a master can die with a grant, and the increment of
# the fencing token that went with it, that its replica never got; the next grant on
# the promoted replica then gets the same number again. The token carries its grant's
# owner too (lock/lua/fence.lua), so the old holder's commit is refused.
#
#   - a Redis Cluster of 3 masters; instance A (4 s of work in its critical section)
#     and instance B, the redis lock mode; a SKU of 1 unit in 1 segment;
#   - A takes the segment's lock (token 1) and reads the unit, and is frozen
#     (SIGSTOP); the shard's replica takes over (CLUSTER FAILOVER TAKEOVER; no
#     automatic failover in that shard meanwhile) and the test removes A's grant and
#     token from it, as a master that died before they reached its replica would have
#     left it (on loopback they always do);
#   - B's order: granted token number 1 again, placed (201);
#   - A resumes: its commit goes to the old master, is sent on to the new one (MOVED)
#     and refused there (fenced off, in A's /stats); its order is not placed; 1 unit
#     sold in all, audit consistent. With a counter alone A's token would be B's.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin rfence redis-server redis-cli curl jq

stopped=()
on_exit() {
    local p
    for p in "${stopped[@]}"; do kill -CONT "$p" 2>/dev/null; done
    [[ -n ${a_order:-} ]] && kill "$a_order" 2>/dev/null && wait "$a_order" 2>/dev/null
    return 0
}

it_cluster_up --redis-cluster 3 --instances 0 || exit 1

instance() { # NAME WORK_US: an instance on the cluster; its URL in STARTED_URL
    start_instance --ready-secs 20 "$1" "$dir" --redis "$REDIS_CLUSTER_SEEDS" --lock redis \
        --threads 1 --work-us "$2" --min-replicas-acked 0 --lock-ttl-ms 10000 \
        --wait-ms 2000 --log-level warn
}
instance seckill-a 4000000 && a_url=$STARTED_URL || exit 1
instance seckill-b 0 && b_url=$STARTED_URL || exit 1
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -d '{"stock": 1, "segments": 1}' \
    "$b_url/skus/f")
expect "PUT f: 1 unit, 1 segment" "201" "$code"

# the shard's master and replica: the master whose keys hold f's stock
master="" mid=""
for s in "${seeds[@]}"; do
    if [[ -n $(redis-cli -p "${s##*:}" --scan --pattern 'sk:{*}:f:stock') ]]; then
        master=${s##*:}
        mid=$(redis-cli -p "$master" cluster myid)
    fi
done
check "f's shard found on a master" test -n "$master"
replica=$(redis-cli -p "$master" cluster nodes |
    awk -v m="$mid" '$4 == m { split($2, a, "@"); split(a[1], b, ":"); print b[2] }')
check "... and its replica" test -n "$replica"

# A takes the lock (token 1) and reads the unit, then freezes mid-work (A reads the
# SKU first, so that it knows where the SKU lives and places the order on its loop)
expect "A knows the SKU" "200" "$(curl -s -o /dev/null -w '%{http_code}' "$a_url/skus/f")"
curl -s -o "$dir/a.out" -w '%{http_code}' -X POST -d '{"user_id": "a"}' \
    "$a_url/skus/f/orders" >"$dir/a.code" &
a_order=$!
lock_taken() { [[ -n $(redis-cli -p "$master" --scan --pattern 'sk:{*}:f:lock:0') ]]; }
check "A holds the segment's lock" wait_until 10 lock_taken
lock_key=$(redis-cli -p "$master" --scan --pattern 'sk:{*}:f:lock:0' | head -1)
fence_key="$lock_key:fence"
token_a=$(redis-cli -p "$master" get "$fence_key")
expect "A's token: number 1" "1" "${token_a%%:*}"
apid=$(cat "$dir/seckill-a.pid")
kill -STOP "$apid" && stopped+=("$apid")

# the replica takes over; then it loses what asynchronous replication can lose, A's
# grant and its token (on loopback every write reaches the replica at once, so the
# test takes them out, as a master that died before sending them would have left it)
# One failover only: neither node of the shard fails over by itself meanwhile (with a
# node timeout of 1 s, a node stalled on a slow disk's fsync for a second would be
# voted out; the old master, as a replica, would then take its slots back)
for p in "$master" "$replica"; do
    redis-cli -p "$p" config set cluster-replica-no-failover yes >/dev/null
done
expect "CLUSTER FAILOVER TAKEOVER on the replica" "OK" \
    "$(redis-cli -p "$replica" cluster failover takeover)"
promoted() {
    redis-cli -p "$replica" info replication | grep -q '^role:master' &&
        redis-cli -p "$master" info replication | grep -q '^role:slave' &&
        redis-cli -p "$replica" cluster info | grep -q '^cluster_state:ok'
}
if ! check "the replica took over, the old master follows it" wait_until 30 promoted; then
    for p in "$master" "$replica"; do # what each node believed, for the logs kept
        { redis-cli -p "$p" info replication; redis-cli -p "$p" cluster nodes; } \
            >"$dir/node-$p.txt" 2>&1
    done
fi
expect "A's grant and token taken out of the new master" "2" \
    "$(redis-cli -p "$replica" del "$lock_key" "$fence_key")"

# B sells the unit, under token number 1 again
code=""
for ((i = 0; i < 50; i++)); do
    code=$(curl -s -o "$dir/b.out" -w '%{http_code}' -X POST -d '{"user_id": "b"}' \
        "$b_url/skus/f/orders")
    [[ $code == 503 ]] || break
    sleep 0.1
done
expect "B's order" "201" "$code"
token_b=$(redis-cli -p "$replica" get "$fence_key")
expect "B's token: number 1 again" "1" "${token_b%%:*}"
check "... with another owner than A's" test "$token_b" != "$token_a"

# A resumes: its commit is refused
kill -CONT "$apid"
wait "$a_order"
a_order=""
a_code=$(cat "$dir/a.code")
check "A's order not placed (answered $a_code)" test "$a_code" != 201
fenced=$(curl -s "$a_url/stats" | jq .fenced_off_commits)
check "A's commit fenced off ($fenced)" test "${fenced:-0}" -ge 1
a=$(curl -s "$b_url/skus/f/audit")
expect "audit: sold, oversold, consistent" "1 0 true" \
    "$(jq -r '"\(.sold) \(.oversold) \(.consistent)"' <<<"$a")"

checks_summary
