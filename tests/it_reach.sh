#!/usr/bin/env bash
# Integration: the log tells when a dependency goes away and when it is back, once
# per change, not per failed check or request (service/reach.h): the data Redis
# (redis_down at warn, redis_up at info; on a Redis Cluster each master, also one a
# failover replaced, which comes back as a replica), a redlock lock node (lock_node_down,
# lock_node_up) and the ZooKeeper session of --lock zk (zk_down, zk_up; skipped
# when ZooKeeper is not installed). Every line an instance prints, the ZooKeeper
# client's own included, goes through the logger (starts with ts=); a drain logs no
# down line of its own.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin reach redis-server redis-cli curl jq

count() { # LOG PATTERN: lines of LOG matching PATTERN
    grep -c -- "$2" "$1" 2>/dev/null || true
}
all_through_logger() { # LOG: every line starts with ts= and has a level
    ! grep -v '^ts=[0-9T:.Z-]* level=\(debug\|info\|warn\|error\) event=' "$1"
}

start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
nodes=()
for i in 1 2 3; do
    start_redis "node-$i" "$dir" no || exit 1
    nodes+=("127.0.0.1:$STARTED_PORT")
done
start_instance --ready-secs 10 x "$dir" --redis "127.0.0.1:$rport" --lock redlock \
    --lock-nodes "$(IFS=,; echo "${nodes[*]}")" --threads 2 || { echo "x not ready"; exit 1; }
X=$STARTED_URL
log=$dir/x.log
curl -s -o /dev/null -X PUT "$X/skus/r" -d '{"stock":1000}'
expect "all well: no down line" "0" "$(count "$log" '_down ')"

# --- the data Redis stops: one redis_down, however many rounds and orders fail
proc_stop redis "$dir" 5
check "Redis stopped: a redis_down line at warn" \
    wait_until 5 grep -q "level=warn event=redis_down addr=127.0.0.1:$rport reason=" "$log"
for i in $(seq 1 20); do
    curl -s -o /dev/null --max-time 2 -X POST "$X/skus/r/orders" -d "{\"user_id\":\"down-$i\"}"
done
sleep 2 # eight more failed health rounds
expect "... exactly one, after 20 failed orders and 2 s of failed checks" "1" \
    "$(count "$log" 'event=redis_down')"
expect "... and no redis_up meanwhile" "0" "$(count "$log" 'event=redis_up')"
start_redis --port "$rport" redis "$dir" no || exit 1
check "Redis back: a redis_up line at info, saying how long it was gone" \
    wait_until 5 grep -q "level=info event=redis_up addr=127.0.0.1:$rport down_ms=[0-9]" "$log"
sleep 1
expect "... exactly one" "1" "$(count "$log" 'event=redis_up')"
expect "... and still one redis_down" "1" "$(count "$log" 'event=redis_down')"
check "the instance serves again" wait_until 10 http_ok "$X/readyz"

# --- a lock node stops and comes back
proc_stop node-2 "$dir" 5
check "lock node 2 stopped: a lock_node_down line naming it" \
    wait_until 5 grep -q "level=warn event=lock_node_down addr=${nodes[1]} reason=" "$log"
curl -s -o /dev/null -X PUT "$X/skus/r" -d '{"stock":1000}'
for i in $(seq 1 10); do
    curl -s -o /dev/null --max-time 2 -X POST "$X/skus/r/orders" -d "{\"user_id\":\"node-$i\"}"
done
sleep 1
expect "... exactly one, after 10 orders (a majority of nodes still answers)" "1" \
    "$(count "$log" 'event=lock_node_down')"
start_redis --port "${nodes[1]##*:}" node-2 "$dir" no || exit 1
check "lock node 2 back: one lock_node_up" \
    wait_until 5 grep -q "level=info event=lock_node_up addr=${nodes[1]} down_ms=" "$log"
sleep 1
expect "... exactly one" "1" "$(count "$log" 'event=lock_node_up')"
expect "the other lock nodes never went down" "0" \
    "$(grep 'event=lock_node_' "$log" | grep -vc "addr=${nodes[1]} ")"

before=$(count "$log" '_down ')
it_expect_clean_exit x
expect "a drain logs no down line of its own" "$before" "$(count "$log" '_down ')"
check "every line of the redlock instance went through the logger" all_through_logger "$log"

# --- a Redis Cluster: a master dies, a replica takes over, it comes back as a replica
mkdir -p "$dir/rc"
start_redis_cluster "$dir/rc" 3 no || { check "a Redis Cluster of 3 masters" false; checks_finish; }
start_instance --ready-secs 20 c "$dir" --redis "$STARTED_SEEDS" --threads 2 ||
    { echo "c not ready"; exit 1; }
clog=$dir/c.log
m1=$(awk 'prev == "--port" { print; exit } { prev = $0 }' "$dir/rc/shard-1.args")
proc_stop shard-1 "$dir/rc" 5
check "a master stopped: one redis_down naming it" \
    wait_until 10 grep -q "level=warn event=redis_down addr=127.0.0.1:$m1 " "$clog"
check "... its replica takes over: the instance is ready again" wait_until 20 http_ok "$STARTED_URL/readyz"
expect "... and the other masters never went down (the cluster's state failing is not a node down)" \
    "0" "$(grep 'event=redis_down' "$clog" | grep -vc "addr=127.0.0.1:$m1 ")"
sleep 1
expect "... no redis_up while it is away (the new master's answers are not its)" "0" \
    "$(count "$clog" 'event=redis_up')"
start_redis --port "$m1" shard-1 "$dir/rc" no --cluster-enabled yes --cluster-node-timeout 1000 ||
    exit 1
check "it comes back, a replica now: one redis_up naming it" \
    wait_until 10 grep -q "level=info event=redis_up addr=127.0.0.1:$m1 " "$clog"
sleep 1
expect "... exactly one down and one up in all" "1 1" \
    "$(count "$clog" 'event=redis_down') $(count "$clog" 'event=redis_up')"
it_expect_clean_exit c

# --- ZooKeeper: the zk lock's session
if [[ ! -r /usr/share/java/zookeeper.jar ]] || ! command -v java >/dev/null; then
    echo "ZooKeeper not installed: its part skipped"
    checks_summary
    exit
fi
start_zk "$dir" 1 || { check "ZooKeeper started" false; checks_finish; }
zk=$STARTED_NODES
start_instance --ready-secs 20 z "$dir" --redis "127.0.0.1:$rport" --lock zk --zk "$zk" \
    --zk-session-ms 20000 --threads 2 || { echo "z not ready"; exit 1; }
Z=$STARTED_URL
zlog=$dir/z.log
curl -s -o /dev/null -X PUT "$Z/skus/z" -d '{"stock":1000}'
expect "an order under the zk lock" "201" "$(it_order "$Z" z zk-0 1 | cut -d' ' -f1)"
proc_stop zk-1 "$dir" 10
check "ZooKeeper stopped: a zk_down line at warn" \
    wait_until 10 grep -q "level=warn event=zk_down addr=$zk reason=" "$zlog"
down_at=$SECONDS
for i in 1 2 3; do it_order "$Z" z "zk-down-$i" 1 >/dev/null; done
sleep 3
expect "... exactly one, after 3 failed orders and 3 s of reconnects" "1" \
    "$(count "$zlog" 'event=zk_down')"
if ! zk_node_start zk-1 "$dir" "$dir/zk-1" || ! wait_until 60 zk_ready "${zk##*:}"; then
    check "ZooKeeper started again" false
    checks_finish
fi
client_lines=$(count "$zlog" 'event=zk_client ')
secs=$((SECONDS - down_at + 1))
expect "the ZooKeeper client's own lines: through the logger, at most one a second ($client_lines in ${secs} s)" \
    "1" "$((client_lines <= secs + 1))"
zk_up() { it_order "$Z" z "zk-up-$RANDOM" 1 >/dev/null; grep -q "level=info event=zk_up addr=$zk " "$zlog"; }
check "ZooKeeper back: a zk_up line at info" wait_until 30 zk_up
expect "... exactly one" "1" "$(count "$zlog" 'event=zk_up')"
it_expect_clean_exit z
check "every line of the zk instance went through the logger" all_through_logger "$zlog"

checks_summary
