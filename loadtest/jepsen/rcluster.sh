# shellcheck shell=bash
# rcluster.sh — the Redis Cluster of loadtest/jepsen.sh's cluster rows, and its faults.
# Sourced by jepsen.sh after net.sh; uses its REDIS_PORT, FSYNC, ACTIVE and
# partitions_reapply.
#
# The cluster: three shards, masters m1-m3 and a replica each r1-r3 (rK follows mK at
# the start), every node in its own namespace on port REDIS_PORT (bus +10000), node
# timeout 1 s, AOF with FSYNC, a full sync started at once (no diskless-sync delay: a
# deposed master back as a replica is in sync in milliseconds, ready for the next
# failover; a replica not yet in sync cannot be elected), slots split evenly: shard K is the slot range
# [(K-1)*16384/3, K*16384/3). A node's files are in DIR/NODE/ (nodes.conf, the AOF), its
# log in DIR/redis-NODE.log (appended to across restarts). Which node is shard K's
# master changes with each failover: rc_master asks every reachable node.
#
#   rc_start DIR                  the six nodes up, the cluster made, every node
#                                 cluster_state:ok and every replica in sync
#   rc_master K                   shard K's master now (a node name); 1 when none found
#   rc_fault_start DIR KIND TARGET / rc_fault_end DIR KIND TARGET
#       master-partition K@sI     shard K's master (found now) cut from every other
#                                 Redis node and from the instances but sI; sI and the
#                                 buyers still reach it. It keeps taking sI's writes
#                                 until it finds itself in the minority (a node timeout),
#                                 the majority fails its replica over; healed, it
#                                 rejoins as a replica and drops what it took
#       master-kill K             shard K's master killed -9; started again at the end
#                                 (it rejoins as a replica of whoever took over)
#   rc_partition_apply TARGET     the cut of a master-partition in force (for a heal's
#                                 re-application of ACTIVE)
#   rc_heal DIR                   every node running, then waits (30 s at most) until
#                                 the cluster is whole again; prints each node's role
#
# What the faults did goes to stdout (jepsen.sh's faults.log): which node was cut or
# killed, and who is shard K's master when the fault ends.

RC_NODES=(m1 m2 m3 r1 r2 r3)
declare -A RC_CUT=() RC_KILLED=() # the node a fault hit, by target

rc_cli() { # NODE ARG...: redis-cli against NODE, from the buyers' node, 2 s at most
    local node=$1
    shift
    net_exec cl timeout 2 redis-cli -h "$(net_addr "$node")" -p "$REDIS_PORT" "$@"
}

rc_node_start() { # DIR NODE: the node on its files; returns once it answers
    local dir=$1 node=$2
    mkdir -p "$dir/$node"
    net_start "$node" "redis-$node" "$dir" redis-server --bind "$(net_addr "$node")" \
        --port "$REDIS_PORT" --dir "$dir/$node" --save "" --appendonly yes \
        --appendfsync "$FSYNC" --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 1000 --repl-diskless-sync-delay 0 --protected-mode no \
        --daemonize no --logfile "" ||
        return 1
    wait_until 10 rc_pong "$node" || { echo "redis on $node did not answer"; return 1; }
}
rc_pong() { [[ $(rc_cli "$1" PING 2>/dev/null) == PONG ]]; }

rc_knows_all() { # NODE: it knows the six nodes, none still in handshake
    local nodes
    nodes=$(rc_cli "$1" CLUSTER NODES 2>/dev/null) || return 1
    (($(grep -c . <<<"$nodes") == ${#RC_NODES[@]})) && ! grep -q handshake <<<"$nodes"
}
rc_replicate() { [[ $(rc_cli "$1" CLUSTER REPLICATE "$2" 2>/dev/null) == OK ]]; }

# rc_ready: every node says cluster_state:ok, and every replica has its link up and its
# sync done
rc_ready() {
    local n info
    for n in "${RC_NODES[@]}"; do
        rc_cli "$n" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
        info=$(rc_cli "$n" INFO replication 2>/dev/null) || return 1
        grep -q '^role:slave' <<<"$info" || continue
        grep -q '^master_link_status:up' <<<"$info" &&
            grep -q '^master_sync_in_progress:0' <<<"$info" || return 1
    done
}

rc_start() { # DIR
    local dir=$1 k id
    RC_CUT=() RC_KILLED=()
    for k in "${RC_NODES[@]}"; do rc_node_start "$dir" "$k" || return 1; done
    # distinct config epochs before the nodes meet (scripts/cluster.sh says why)
    for k in 1 2 3; do
        rc_cli "m$k" CLUSTER SET-CONFIG-EPOCH "$k" >/dev/null &&
            rc_cli "r$k" CLUSTER SET-CONFIG-EPOCH $((k + 3)) >/dev/null &&
            rc_cli "m$k" CLUSTER ADDSLOTSRANGE $(((k - 1) * 16384 / 3)) $((k * 16384 / 3 - 1)) \
                >/dev/null || return 1
    done
    # m1 meets every node; both meet again while a node does not know them all
    # (scripts/cluster.sh says why)
    local attempt all
    for ((attempt = 1; ; attempt++)); do
        for k in m2 m3 r1 r2 r3; do
            rc_cli m1 CLUSTER MEET "$(net_addr "$k")" "$REDIS_PORT" >/dev/null || return 1
            ((attempt == 1)) || rc_cli "$k" CLUSTER MEET "$(net_addr m1)" "$REDIS_PORT" >/dev/null
        done
        all=1
        for k in "${RC_NODES[@]}"; do
            wait_until 10 rc_knows_all "$k" || { all=0; break; }
        done
        ((all)) && break
        ((attempt < 3)) || { echo "the cluster's nodes did not meet"; return 1; }
        echo "the cluster's nodes did not all meet within 10 s: meeting again"
    done
    for k in 1 2 3; do
        id=$(rc_cli "m$k" CLUSTER MYID) || return 1
        wait_until 30 rc_replicate "r$k" "$id" || { echo "r$k did not become m$k's replica"; return 1; }
    done
    wait_until 60 rc_ready || { echo "the cluster did not become ready"; return 1; }
    rc_cli m1 CLUSTER NODES >"$dir/cluster-nodes.start"
}


rc_node_named() { # ADDRESS: the node whose address it is
    local n
    for n in "${RC_NODES[@]}"; do
        [[ $(net_addr "$n") == "$1" ]] && { echo "$n"; return 0; }
    done
    return 1
}

# rc_master K: of every master not flagged failed that claims shard K's first slot, in
# the view of any node that answers, the one of the highest config epoch: a node cut
# off or just back may still believe itself master, with the epoch it had.
rc_master() {
    local slot=$((($1 - 1) * 16384 / 3)) n addr
    addr=$(for n in "${RC_NODES[@]}"; do rc_cli "$n" CLUSTER NODES 2>/dev/null; done | awk -v s="$slot" '
        $3 ~ /master/ && $3 !~ /(^|,)fail(,|$)/ {
            for (i = 9; i <= NF; i++) {
                split($i, r, "-"); if (r[2] == "") r[2] = r[1]
                if (r[1] ~ /^[0-9]+$/ && s >= r[1] && s <= r[2] && (best == "" || $7 + 0 > best)) {
                    best = $7 + 0; split($2, a, ":"); owner = a[1] } } }
        END { if (owner != "") print owner }')
    [[ -n $addr ]] && rc_node_named "$addr"
}

# rc_replica_state NODE: "REPLICA online|wait_bgsave|..." of the master NODE's replica, as
# it reports it (INFO replication's slave0), or "none"
rc_replica_state() {
    local line addr
    line=$(rc_cli "$1" INFO replication 2>/dev/null | tr -d '\r' | grep -m1 '^slave0:' || true)
    [[ -n $line ]] || { echo none; return; }
    addr=$(sed -n 's/.*ip=\([^,]*\),.*/\1/p' <<<"$line")
    echo "$(rc_node_named "$addr" || echo "$addr") $(sed -n 's/.*state=\([^,]*\),.*/\1/p' <<<"$line")"
}

rc_partition_apply() { # K@sI
    local master=${RC_CUT[$1]} inst=${1#*@} n far=()
    [[ -n $master ]] || return 1
    for n in "${RC_NODES[@]}" s1 s2 s3; do
        [[ $n == "$master" || $n == "$inst" ]] || far+=("$n")
    done
    net_partition "$master" "${far[*]}"
}

rc_fault_start() { # DIR KIND TARGET
    local dir=$1 kind=$2 t=$3 shard=${3%@*} m
    shard=${shard#shard}
    m=$(rc_master "$shard") || { echo "no master of shard $shard found"; return 1; }
    echo "replica: $(rc_replica_state "$m");"
    case $kind in
    master-partition)
        RC_CUT[$t]=$m
        # shellcheck disable=SC2034,SC2004 # jepsen.sh's associative array
        ACTIVE[$kind:$t]=1
        rc_partition_apply "$t" || return 1
        echo "cut $m (shard $shard's master) off; only ${t#*@} and the buyers reach it" ;;
    master-kill)
        RC_KILLED[$t]=$m
        proc_stop "redis-$m" "$dir" 1 KILL >/dev/null 2>&1 || true
        echo "killed $m (shard $shard's master)" ;;
    esac
}

rc_fault_end() { # DIR KIND TARGET
    local dir=$1 kind=$2 t=$3 shard=${3%@*} m
    shard=${shard#shard}
    case $kind in
    master-partition)
        unset "ACTIVE[$kind:$t]"
        partitions_reapply
        echo "healed ${RC_CUT[$t]:-?}" ;;
    master-kill)
        m=${RC_KILLED[$t]:-}
        [[ -n $m ]] && { rc_node_start "$dir" "$m" && echo "restarted $m"; } ;;
    esac
    echo "shard $shard's master now $(rc_master "$shard" || echo none)"
}

rc_heal() { # DIR
    local dir=$1 n
    for n in "${RC_NODES[@]}"; do
        proc_alive "redis-$n" "$dir" || rc_node_start "$dir" "$n"
    done
    wait_until 30 rc_ready || echo "the cluster not whole 30 s after the heal"
    for n in "${RC_NODES[@]}"; do
        echo "$n: $(rc_cli "$n" INFO replication 2>/dev/null | grep -m1 '^role:' | tr -d '\r')"
    done
}
