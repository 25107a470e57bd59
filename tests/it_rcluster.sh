#!/usr/bin/env bash
# Integration: scripts/cluster.sh --redis-cluster M sets up a Redis Cluster on loopback
# (the ground for issue 13's scale-out), and takes it down again.
#
#   - 3 masters each serve a third of the 16384 slots; every node says
#     cluster_state:ok; each master has one replica, synced (link up, no sync in
#     progress); every node runs AOF with appendfsync always and a 1 s node timeout;
#   - cluster.env names the masters as seeds, and they are the nodes serving slots;
#   - a write to one master reaches its replica (WAIT 1 says 1);
#   - seckill given a node of it, or its seeds, refuses to start and says why; asking
#     cluster.sh for instances on it is refused with a message (seckill does not serve
#     from a cluster yet), and leaves nothing running;
#   - down stops every node: no pid of the cluster is alive afterwards.
set -uo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/checks.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/seckill-it-rcluster.XXXXXX)
cleanup() {
    local rc=$?
    "$ROOT/scripts/cluster.sh" down --dir "$dir/c" --quiet >/dev/null 2>&1
    "$ROOT/scripts/cluster.sh" down --dir "$dir/refused" --quiet >/dev/null 2>&1
    rm -rf "$dir"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
checks_require redis-server redis-cli

running() { # PID: alive and not a zombie (an exited child nobody reaped yet)
    local state
    state=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z && $state != X ]]
}

"$ROOT/scripts/cluster.sh" up --dir "$dir/c" --redis-cluster 3 --instances 0 --quiet \
    >"$dir/up.out" 2>&1
check "cluster.sh up --redis-cluster 3 --instances 0" test $? -eq 0 || {
    tail -20 "$dir/up.out"
    exit 1
}
source "$dir/c/cluster.env"
IFS=, read -r -a seeds <<<"$REDIS_CLUSTER_SEEDS"
expect "three seeds in cluster.env" "3" "${#seeds[@]}"

nodes=$(ls "$dir/c"/shard-*.pid | wc -l)
expect "six nodes started (3 masters, 3 replicas)" "6" "$nodes"

# every node: state ok, AOF always, node timeout 1 s; masters serve slots, replicas
# are synced
masters=0 replicas=0 slots=0
for node in $(redis-cli -p "${seeds[0]##*:}" cluster nodes | awk '{ split($2, a, "@"); print a[1] }'); do
    p=${node##*:}
    info=$(redis-cli -p "$p" cluster info)
    expect "node $p: state" "cluster_state:ok" "$(grep -o '^cluster_state:[a-z]*' <<<"$info")"
    expect "node $p: appendfsync" "appendfsync always" \
        "$(redis-cli -p "$p" config get appendfsync | xargs)"
    expect "node $p: cluster-node-timeout" "cluster-node-timeout 1000" \
        "$(redis-cli -p "$p" config get cluster-node-timeout | xargs)"
    repl=$(redis-cli -p "$p" info replication)
    if grep -q '^role:master' <<<"$repl"; then
        masters=$((masters + 1))
        expect "master $p has one replica" "connected_slaves:1" \
            "$(grep -o '^connected_slaves:[0-9]*' <<<"$repl")"
        expect "master $p is a seed" "yes" \
            "$([[ " ${seeds[*]} " == *" 127.0.0.1:$p "* ]] && echo yes || echo no)"
    else
        replicas=$((replicas + 1))
        expect "replica $p: link" "master_link_status:up" \
            "$(grep -o '^master_link_status:[a-z]*' <<<"$repl")"
        expect "replica $p: synced" "master_sync_in_progress:0" \
            "$(grep -o '^master_sync_in_progress:[0-9]*' <<<"$repl")"
    fi
done
expect "masters, replicas" "3 3" "$masters $replicas"
slots=$(redis-cli -p "${seeds[0]##*:}" cluster info | awk -F: '/^cluster_slots_ok/ { print $2 + 0 }')
expect "every slot served" "16384" "$slots"
# a write to the master of its slot reaches that master's replica (WAIT on the
# write's own connection)
key="it{$RANDOM}"
acked=""
for s in "${seeds[@]}"; do
    out=$(printf 'SET %s v\nWAIT 1 2000\n' "$key" | redis-cli -p "${s##*:}" 2>&1 | xargs)
    [[ $out == OK* ]] && acked=$out
done
expect "SET then WAIT 1 on the key's master" "OK 1" "$acked"

# seckill pointed at the cluster: refused at start, saying why (not served yet)
bin=$(seckill_bin) || exit 1
for redis in "${seeds[0]}" "$REDIS_CLUSTER_SEEDS"; do
    out=$(timeout 20 "$bin" --listen "127.0.0.1:$(free_port)" --redis "$redis" 2>&1)
    expect "seckill --redis $redis: exit code" "2" "$?"
    check "... saying that it is a Redis Cluster" \
        bash -c 'grep -q "is a Redis Cluster" <<<"$1"' _ "$out"
done

# instances on a cluster: refused, nothing left running
"$ROOT/scripts/cluster.sh" up --dir "$dir/refused" --redis-cluster 3 --instances 2 --quiet \
    >"$dir/refused.out" 2>&1
check "instances on a Redis Cluster are refused" test $? -ne 0
check "... with a message" grep -q "does not serve from a Redis Cluster yet" "$dir/refused.out"
alive=0
for f in "$dir/refused"/*.pid; do [[ -e $f ]] && running "$(cat "$f")" && alive=$((alive + 1)); done
expect "... and nothing of it running" "0" "$alive"

# down stops every node
pids=$(cat "$dir/c"/*.pid)
"$ROOT/scripts/cluster.sh" down --dir "$dir/c" --quiet >/dev/null 2>&1
check "cluster.sh down" test $? -eq 0
alive=0
for p in $pids; do running "$p" && alive=$((alive + 1)); done
expect "no node alive after down" "0" "$alive"

checks_summary
