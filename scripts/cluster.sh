#!/usr/bin/env bash
# cluster.sh — a throwaway seckill cluster on loopback: one data redis-server, optional
# redlock lock nodes or ZooKeeper nodes, N seckill instances and a load balancer (nginx
# or haproxy).
#
#   scripts/cluster.sh up [--dir D] [--instances N] [--lb nginx|haproxy|none]
#                         [--lock MODE] [--lock-nodes N] [--zk-nodes N] [--postgres]
#                         [--fsync always|everysec|no] [--redis-cluster M] [--canned] [--quiet]
#                         [-- extra seckill flags...]
#   scripts/cluster.sh down --dir D [--rm]
#   scripts/cluster.sh status --dir D
#   scripts/cluster.sh stop --dir D NAME [--kill]
#   scripts/cluster.sh start --dir D NAME
#
# `up` creates D (default: a fresh mktemp dir), starts everything on free ports, waits
# until redis answers PING, every instance's /readyz is 200 and the balancer forwards,
# then prints the endpoints and writes D/cluster.env (LB_URL, REDIS_PORT, INSTANCE_URLS,
# ...) for callers to source. It prints the dir as its last line. If anything fails (or
# it is interrupted) it stops what it had started. `down` stops exactly the processes
# recorded in D's pid files, also after the caller crashed; --rm then deletes D.
#
# --fsync is the data Redis's AOF policy: always (the default) is the only durable one;
# everysec and no (no AOF at all) lose acknowledged orders in a crash, and up warns.
# The server binary: $SECKILL_BIN, else $SECKILL_BUILD/seckill, else build/seckill.
# --redis-cluster M starts a Redis Cluster in place of the data Redis: M masters
# (shard-1..shard-M) with a replica each (shard-I-r), AOF as --fsync says, node timeout
# 1 s, the slots split evenly, and waits until every replica has synced; cluster.env has
# REDIS_CLUSTER_SEEDS; the instances are given the masters as --redis seeds.
# --lock redlock without --lock-nodes starts 3 lock nodes.
# The instances share this machine's cores as N machines would have their own: each
# runs cores/N event loops (--threads, at least 1) unless the extra flags or
# $SECKILL_THREADS set it (one loop per core per instance oversubscribes the cores,
# and loops of one instance then hand orders over to each other for nothing).
# The instances get --max-conns-per-ip 0 (no per-address limit: all their clients,
# the balancer or wrk, are the one loopback address) unless the extra flags or
# $SECKILL_MAX_CONNS_PER_IP set it.
# --zk-nodes N starts N ZooKeeper nodes, zk-1..zk-N (1: a standalone server; more: an
# ensemble), each in D/zk-I/ on free loopback ports, and gives the instances --zk with
# every node's address; --lock zk without --zk-nodes starts 1. cluster.env has ZK_NODES
# (host:port,...), ZK_PORTS and ZK_NAMES; each node's pid is in D/zk-I.pid.
# --postgres starts a throwaway PostgreSQL, pg (initdb and the server as the postgres
# user, data in D/pg/, trust on loopback, a free port) and gives the instances --postgres
# with its URL; --lock pg implies it. cluster.env has PG_URL and PG_PORT.
# stop NAME stops one recorded process (zk-2, lock-1, seckill-3, redis, lb) by its pid
# file: SIGTERM, or SIGKILL with --kill. start NAME starts a stopped ZooKeeper node
# (zk-N), Redis (redis, lock-N, shard-N, shard-N-r) or PostgreSQL (pg) again, on its port and with its
# data, and waits until it serves (other pieces pick their ports when they start).
# Sourced rather than run (tests/lib.sh does), it defines its functions and runs nothing.
# --canned starts no Redis and no seckill: the nginx balancer, configured as usual, proxies
# to N upstream servers that the same nginx serves itself, each answering every request
# with a fixed 201 JSON body (GET /readyz and /livez: 200). It is the ceiling that
# make bench compares seckill with: the balancer's cost with a backend that does nothing.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }

QUIET=0
CANNED=0
# The answer of a canned upstream (--canned): the shape and size of a real order's 201.
CANNED_BODY='{"order_id":"382855852278681600","sku":"canned","user_id":"canned-user","qty":1,"segment":0}'
say() { ((QUIET)) || printf '%s\n' "$*" >&2; }

# ---- starting pieces ------------------------------------------------------------
# Sourced (tests/lib.sh does), this file only defines its functions: a test starts its
# own pieces with the same start_* as `up`, as children of its shell (it can wait for
# their exit codes). The start_* functions set STARTED_PORT (and STARTED_*) instead of
# printing, so that they are not called in a subshell.

# on_free_port [--port P] NAME DIR SECS READY... -- START...: runs START (which starts
# process NAME of DIR) and waits up to SECS until READY succeeds, every "{port}" in
# both replaced by a free port (or P). When NAME died because the port was taken
# meanwhile, again on another one (5 tries). Sets STARTED_PORT; 1, with the end of
# NAME's log, when it did not come up.
on_free_port() {
    local fixed="" port attempt rc
    if [[ $1 == --port ]]; then fixed=$2; shift 2; fi
    local name=$1 dir=$2 secs=$3
    local -a ready=()
    shift 3
    while [[ $1 != -- ]]; do ready+=("$1"); shift; done
    shift
    STARTED_PORT=""
    for ((attempt = 1; attempt <= 5; attempt++)); do
        port=${fixed:-$(free_port)} || return 1
        "${@//"{port}"/$port}" || return 1
        rc=0
        wait_started "$name" "$dir" "$secs" "${ready[@]//"{port}"/$port}" || rc=$?
        if ((rc == 0)); then
            STARTED_PORT=$port
            return 0
        fi
        if ((rc == 2)) && [[ -z $fixed ]] && log_says_port_in_use "$name" "$dir"; then
            say "  $name: port $port taken, retrying"
            proc_stop "$name" "$dir" 2 || true
            continue
        fi
        log "$name did not come up (see $dir/$name.log):"
        tail -n 15 "$dir/$name.log" >&2 || true
        return 1
    done
    return 1
}

# start_redis [--port P] [--password PW] NAME DIR FSYNC [REDIS FLAGS...]: a
# redis-server on a free port (or P: where a Redis was before), data in DIR/NAME/, AOF
# as FSYNC says ("no": no AOF at all; lock nodes keep nothing worth keeping), clients
# asked for PW (requirepass). Sets STARTED_PORT. DIR/NAME.args keeps how it was
# started, for `start` to start it again.
start_redis() {
    local pw="" port
    local -a at=()
    while [[ $1 == --port || $1 == --password ]]; do
        if [[ $1 == --port ]]; then at=(--port "$2"); else pw=$2; fi
        shift 2
    done
    local name=$1 dir=$2 fsync=$3
    shift 3
    local -a args=(--port "{port}" --bind 127.0.0.1 --dir "$dir/$name" --save "")
    if [[ $fsync == no ]]; then
        args+=(--appendonly no)
    else
        args+=(--appendonly yes --appendfsync "$fsync")
    fi
    args+=(--daemonize no --protected-mode yes --logfile "")
    [[ -n $pw ]] && args+=(--requirepass "$pw")
    mkdir -p "$dir/$name"
    on_free_port "${at[@]}" "$name" "$dir" 15 redis_ping "{port}" "$pw" -- \
        proc_start "$name" "$dir" redis-server "${args[@]}" "$@" || return 1
    port=$STARTED_PORT
    printf '%s\n' "${args[@]//"{port}"/$port}" "$@" >"$dir/$name.args"
}

# ---- a Redis Cluster (--redis-cluster M) ---------------------------------------------

cluster_nodes_known() { # PORT N: the node on PORT knows N nodes, none still in handshake
    local nodes
    nodes=$(redis-cli -p "$1" cluster nodes 2>/dev/null) || return 1
    (($(grep -c . <<<"$nodes") == $2)) && ! grep -q handshake <<<"$nodes"
}

cluster_replicate() { # PORT MASTER_ID: the node on PORT becomes that master's replica
    [[ $(redis-cli -p "$1" cluster replicate "$2" 2>/dev/null) == OK ]]
}

cluster_ready() { # PORT...: every node says cluster_state:ok, every replica has synced
    local p rc
    for p in "$@"; do
        redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
        rc=0
        cluster_synced_replica "$p" || rc=$?
        ((rc == 0 || rc == 2)) || return 1
    done
}

# cluster_synced_replica PORT: 0 when the node is a replica with its link up and its
# sync done; 2 when it is no replica; 1 otherwise (no answer, not synced)
cluster_synced_replica() {
    local info
    info=$(redis-cli -p "$1" info replication 2>/dev/null) || return 1
    grep -q '^role:slave' <<<"$info" || return 2
    grep -q '^master_link_status:up' <<<"$info" && grep -q '^master_sync_in_progress:0' <<<"$info"
}

# What a Redis Cluster says now, in the view of the node on PORT (tests and chaos.sh):
cluster_node_ports() { # PORT: every node's port
    redis-cli -p "$1" cluster nodes | awk '{ split($2, a, "@"); n = split(a[1], b, ":"); print b[n] }'
}
cluster_masters() { # PORT: "port id" of every master not failed
    redis-cli -p "$1" cluster nodes | awk '$3 ~ /master/ && $3 !~ /fail/ {
        split($2, a, "@"); n = split(a[1], b, ":"); print b[n], $1 }'
}
cluster_slot_owner() { # PORT SLOT: the port of the master serving SLOT
    redis-cli -p "$1" cluster nodes | awk -v s="$2" '$3 ~ /master/ && $3 !~ /fail/ {
        for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1]
            if (r[1] ~ /^[0-9]+$/ && s >= r[1] && s <= r[2]) {
                split($2, a, "@"); n = split(a[1], b, ":"); print b[n] } } }'
}
# cluster_sku_segment0 PORT SKU: "port key" of the master holding segment 0 of SKU (and
# every segment i with i % shards == 0), key the shard's init hash, which gives segment 0
# units there.
cluster_sku_segment0() {
    local m k
    for m in $(cluster_masters "$1" | awk '{ print $1 }'); do
        for k in $(redis-cli -p "$m" --scan --pattern "sk:{*}:$2:init"); do
            (($(redis-cli -p "$m" hget "$k" 0) > 0)) && { echo "$m $k"; return 0; }
        done
    done
    return 1
}

# cluster_move_slot SRC SLOT DST: SLOT moved from the master on port SRC to the master
# on port DST the way redis-cli --cluster reshard moves each of its slots: IMPORTING on
# DST, MIGRATING on SRC, the keys over (cluster_migrate_keys), then SETSLOT NODE on DST,
# SRC and every other master. One slot only: reshard takes a master's slots from its
# lowest, so moving a given slot with it moves the thousands below it too, each with a
# few configuration fsyncs on both masters, for seconds in which a node that stalls past
# the 1 s node timeout fails the move (CI, it_rzk under ASan: CLUSTERDOWN mid-reshard).
# Prints what cluster_migrate_keys prints; 1 when a step failed (its answer on stderr;
# a master that refused SETSLOT NODE does not stop the others from being told).
cluster_move_slot() {
    local src=$1 slot=$2 dst=$3 src_id dst_id p ok moved rc=0
    src_id=$(redis-cli -p "$src" cluster myid) && dst_id=$(redis-cli -p "$dst" cluster myid) ||
        return 1
    for p in "$dst:importing $src_id" "$src:migrating $dst_id"; do
        # shellcheck disable=SC2086 # the state and the node id: two words
        ok=$(redis-cli -p "${p%%:*}" cluster setslot "$slot" ${p#*:})
        [[ $ok == OK ]] || { echo "SETSLOT ${p#*:} on ${p%%:*}: $ok" >&2; return 1; }
    done
    moved=$(cluster_migrate_keys "$src" "$dst" "$slot") || return 1
    for p in "$dst" "$src" $(cluster_masters "$src" | awk -v s="$src" -v d="$dst" \
        '$1 != s && $1 != d { print $1 }'); do
        ok=$(redis-cli -p "$p" cluster setslot "$slot" node "$dst_id")
        [[ $ok == OK ]] || { echo "SETSLOT NODE on $p: $ok" >&2; rc=1; }
    done
    echo "$moved"
    return "$rc"
}

# cluster_migrate_keys SRC DST SLOT: every key of SLOT moved from SRC to DST (ports), 10
# at a time, while orders keep coming (what lands on SRC meanwhile goes in a later
# round): small batches keep the shard's keys split over both masters for a while, where
# a script that needs keys of both is answered TRYAGAIN. A MIGRATE the target answered
# CLUSTERDOWN (its view of the cluster failed for a moment) is sent again once the
# target says cluster_state:ok, for up to 20 s. Prints "KEYS keys in ROUNDS rounds" and
# how many MIGRATEs were sent again; 1 when a MIGRATE failed (its answer on stderr).
cluster_migrate_keys() {
    local src=$1 dst=$2 slot=$3 n=0 again=0 round reply deadline=$((SECONDS + 20))
    local -a keys
    for ((round = 0; round < 1000; round++)); do
        # (an empty answer is an empty line)
        mapfile -t keys < <(redis-cli -p "$src" cluster getkeysinslot "$slot" 10 | grep .)
        ((${#keys[@]})) || { echo "$n keys in $round rounds, $again sent again"; return 0; }
        reply=$(redis-cli -p "$src" migrate 127.0.0.1 "$dst" "" 0 5000 keys "${keys[@]}")
        if [[ $reply == *CLUSTERDOWN* ]] && ((SECONDS < deadline)) &&
            wait_until $((deadline - SECONDS)) cluster_ready "$dst"; then
            again=$((again + 1))
            continue
        fi
        [[ $reply == OK || $reply == NOKEY ]] || { echo "MIGRATE: $reply" >&2; return 1; }
        n=$((n + ${#keys[@]}))
    done
    echo "MIGRATE: keys still in slot $slot after 1000 rounds" >&2
    return 1
}

# start_redis_cluster DIR M FSYNC: a Redis Cluster of M masters (shard-1..shard-M) with
# one replica each (shard-I-r), node timeout 1 s, AOF as FSYNC says; the 16384 slots
# split evenly over the masters. Waits until every node says cluster_state:ok and every
# replica has synced with its master. Sets STARTED_SEEDS: the masters' host:port,
# comma-separated (seeds for --redis).
start_redis_cluster() {
    local dir=$1 m=$2 fsync=$3 i p id seeds=""
    local FREE_PORT_BUS=1 # the nodes' bus ports out of the ephemeral range (free_port)
    local -a masters=() replicas=() flags=(--cluster-enabled yes --cluster-node-timeout 1000)
    for ((i = 1; i <= m; i++)); do
        start_redis "shard-$i" "$dir" "$fsync" "${flags[@]}" || return 1
        masters+=("$STARTED_PORT")
        start_redis "shard-$i-r" "$dir" "$fsync" "${flags[@]}" || return 1
        replicas+=("$STARTED_PORT")
    done
    # Each node its own config epoch before they meet, as redis-cli --cluster create
    # gives them: nodes that meet with epoch 0 each settle on distinct epochs by
    # bumping theirs on collisions for a while, and a manual failover in that time may
    # bump to an epoch that a master settling after it goes past; the promoted replica
    # then yields its slots back to the old master.
    for ((i = 0; i < m; i++)); do
        redis-cli -p "${masters[i]}" cluster set-config-epoch $((i + 1)) >/dev/null &&
            redis-cli -p "${replicas[i]}" cluster set-config-epoch $((m + i + 1)) >/dev/null &&
            redis-cli -p "${masters[i]}" cluster addslotsrange $((i * 16384 / m)) \
                $(((i + 1) * 16384 / m - 1)) >/dev/null || return 1
    done
    # The first master meets every node; both meet again while a node does not know them
    # all. Redis 7.0: a node that could not finish its side of a handshake within the
    # handshake timeout (the 1 s node timeout, on a busy machine) drops the node that
    # met it, which still knows it; it then ignores everyone's pings and gossip, for
    # good, until a MEET (CI, TSan: two masters never said cluster_state:ok; valkey
    # issue 1251, fixed there by meeting again).
    local attempt all
    for ((attempt = 1; ; attempt++)); do
        for p in "${masters[@]:1}" "${replicas[@]}"; do
            redis-cli -p "${masters[0]}" cluster meet 127.0.0.1 "$p" >/dev/null || return 1
            ((attempt == 1)) || redis-cli -p "$p" cluster meet 127.0.0.1 "${masters[0]}" >/dev/null
        done
        all=1
        for p in "${masters[@]}" "${replicas[@]}"; do
            wait_until 10 cluster_nodes_known "$p" $((2 * m)) || { all=0; break; }
        done
        ((all)) && break
        for p in "${masters[@]}" "${replicas[@]}"; do
            log "node $p knows: $(redis-cli -p "$p" cluster nodes 2>&1 | awk '{ print $2, $3 }' | xargs)"
        done
        ((attempt < 3)) || { log "shard nodes did not meet"; return 1; }
        log "shard nodes did not all meet within 10 s: meeting again"
    done
    for ((i = 0; i < m; i++)); do
        id=$(redis-cli -p "${masters[i]}" cluster myid) || return 1
        wait_until 30 cluster_replicate "${replicas[i]}" "$id" ||
            { log "shard-$((i + 1))-r did not become a replica"; return 1; }
    done
    wait_until 60 cluster_ready "${masters[@]}" "${replicas[@]}" ||
        { log "the Redis Cluster did not become ready (cluster_state, replica sync)"; return 1; }
    for p in "${masters[@]}"; do seeds+="${seeds:+,}127.0.0.1:$p"; done
    STARTED_SEEDS=$seeds
}

# start_zk DIR N: ZooKeeper nodes zk-1..zk-N (N = 1: a standalone server; more: an
# ensemble) on free loopback ports, each in DIR/zk-I/ (zoo.cfg, data/); waits until
# every node serves. Sets STARTED_NODES: the nodes' host:port, comma-separated. When a
# node dies because one of its ports was taken, all of them start again on other ports.
start_zk() {
    local dir=$1 n=$2 attempt i rc dead t0 p q e port_taken
    local -a ports=() pairs=()
    for ((attempt = 1; attempt <= 3; attempt++)); do
        ports=() pairs=()
        for ((i = 1; i <= n; i++)); do
            p=$(free_port) || return 1
            ports+=("$p")
            if ((n > 1)); then
                q=$(free_port) || return 1
                e=$(free_port) || return 1
                pairs+=("$q:$e")
            fi
        done
        t0=$(date +%s%N)
        for ((i = 1; i <= n; i++)); do
            rm -rf "$dir/zk-$i/data"
            if ((n == 1)); then
                zk_write_conf "$dir/zk-$i" "${ports[0]}"
            else
                zk_write_conf "$dir/zk-$i" "${ports[i - 1]}" "$i" "$(IFS=,; echo "${pairs[*]}")"
            fi
            zk_node_start "zk-$i" "$dir" "$dir/zk-$i" || return 1
        done
        # The nodes start side by side; an ensemble serves once it has elected a leader.
        rc=0 dead=""
        for ((i = 1; i <= n && rc == 0; i++)); do
            wait_started "zk-$i" "$dir" 60 zk_ready "${ports[i - 1]}" || { rc=$? dead=zk-$i; }
        done
        if ((rc == 0)); then
            say "  zookeeper  $n node(s) serving $(( ($(date +%s%N) - t0) / 1000000 )) ms after the start"
            STARTED_NODES=$(IFS=,; echo "${ports[*]/#/127.0.0.1:}")
            return 0
        fi
        port_taken=0
        for ((i = 1; i <= n; i++)); do
            if log_says_port_in_use "zk-$i" "$dir"; then port_taken=1; fi
        done
        for ((i = 1; i <= n; i++)); do proc_stop "zk-$i" "$dir" 5 || true; done
        if ((port_taken)); then
            say "  zookeeper: a port was taken, retrying"
            for ((i = 1; i <= n; i++)); do mv -f "$dir/zk-$i.log" "$dir/zk-$i.log.$attempt"; done
            continue
        fi
        log "$dead did not come up (see $dir/$dead.log):"
        tail -n 15 "$dir/$dead.log" >&2 || true
        return 1
    done
    return 1
}

# zk_port DIR NAME: the client port of ZooKeeper node NAME (from its zoo.cfg).
zk_port() {
    sed -n 's/^clientPort=//p' "$1/$2/zoo.cfg" 2>/dev/null | grep -E '^[0-9]+$'
}

# zk_leader DIR NAMES: the one of the ZooKeeper nodes NAMES (blank-separated, in DIR)
# whose srvr says it leads; 1 when none does (down, or between elections).
zk_leader() {
    local name port
    for name in $2; do
        port=$(zk_port "$1" "$name") || continue
        [[ $(zk_mode "$port" 2>/dev/null) == leader ]] && { echo "$name"; return 0; }
    done
    return 1
}

# start_pg DIR: a throwaway PostgreSQL, pg: a database cluster (lib.sh's pg_initdb, in
# /tmp/seckill-pg.XXXXXX, named in DIR/pg.data and removed by `down`); the server on a
# free loopback port, its socket in
# that dir too; waits until it accepts connections. Sets STARTED_PORT. Stopped by its
# pid with SIGINT (a fast shutdown: SIGTERM, a smart one, waits for every client to
# leave); `stop pg --kill` is SIGQUIT, an immediate shutdown (no checkpoint; the next
# start recovers from the WAL, as after a crash).
start_pg() {
    local dir=$1
    pg_initdb "$dir" || return 1
    pg_server_start "$dir" "" 30 || return 1
    echo "$STARTED_PORT" >"$dir/pg.port"
}

# pg_server_start DIR PORT SECS: the server of DIR/pg.data's cluster on PORT (empty: a
# free one), waited for SECS at most.
pg_server_start() {
    local dir=$1 data
    data=$(cat "$dir/pg.data") || return 1
    on_free_port ${2:+--port "$2"} pg "$dir" "$3" pg_ready "{port}" -- \
        proc_start pg "$dir" setpriv --reuid=postgres --regid=postgres --init-groups \
        postgres -D "$data/data" -p "{port}" -k "$data" -c listen_addresses=127.0.0.1 \
        -c max_connections=200
}

# pg_url PORT: the instances' --postgres.
pg_url() { echo "postgresql://postgres@127.0.0.1:$1/postgres"; }

# start_instance [--host H] [--no-wait] [--ready-secs S] [--wrap CMD] NAME DIR ARGS...:
# a seckill instance on H (127.0.0.1) and a free port; ARGS go after --listen. Waits
# until its /readyz answers 200 (S seconds at most, 30), unless --no-wait (an instance
# meant to fail at start-up). --wrap runs the server under CMD (split on blanks:
# valgrind and its flags). The server: $SECKILL_BIN_PATH, else seckill_bin. Sets
# STARTED_PORT and STARTED_URL.
start_instance() {
    local host=127.0.0.1 secs=30 bin=${SECKILL_BIN_PATH:-}
    local -a ready=() wrap=()
    while [[ $1 == --* ]]; do
        case $1 in
        --host) host=$2; shift 2 ;;
        --no-wait) ready=(true); shift ;;
        --ready-secs) secs=$2; shift 2 ;;
        --wrap) read -r -d "" -a wrap <<<"$2" || true; shift 2 ;;
        *) log "start_instance: unknown option $1"; return 1 ;;
        esac
    done
    local name=$1 dir=$2
    shift 2
    STARTED_URL=""
    [[ -n $bin ]] || bin=$(seckill_bin) || return 1
    ((${#ready[@]})) || ready=(http_ok "http://$host:{port}/readyz")
    on_free_port "$name" "$dir" "$secs" "${ready[@]}" -- \
        proc_start "$name" "$dir" "${wrap[@]}" "$bin" --listen "$host:{port}" "$@" || return 1
    STARTED_URL=http://$host:$STARTED_PORT
}

# start_faultproxy NAME DIR TARGET_PORT [FLAGS...]: the test proxy
# ($SECKILL_BUILD/tests/faultproxy, tests/faultproxy.c) on a free port, in front of the
# Redis on TARGET_PORT, FLAGS saying which answer it loses. Waits until it says ready.
# Sets STARTED_PORT.
start_faultproxy() {
    local name=$1 dir=$2 target=$3 bin=${SECKILL_BUILD:-build}/tests/faultproxy
    shift 3
    [[ $bin == /* || -e $bin ]] || bin=$SECKILL_ROOT/$bin
    on_free_port "$name" "$dir" 10 grep -q ready "$dir/$name.log" -- \
        proc_start "$name" "$dir" "$bin" "{port}" "$target" "$@"
}

# nginx_json_errors: the lines of a server block that answer nginx's own refusals of
# a malformed request (bad framing or Content-Length, a request line or headers too
# large, a body over client_max_body_size, an HTTP version it does not speak) with
# the contract's {"error","detail"} instead of its HTML page. Such requests never
# reach an instance. The instances' answers pass as they are (no
# proxy_intercept_errors), and 502/504 (no instance answered) keep nginx's page:
# for a POST nobody can say here whether the order was placed.
nginx_json_errors() {
    local code status error detail
    while read -r code status error detail; do
        echo "        error_page $code $([[ $code != "$status" ]] && echo "=$status ")/_seckill_error/$status;"
    done <<<"$NGINX_JSON_ERRORS"
    while read -r code status error detail; do
        [[ $code == "$status" ]] || continue
        echo "        location = /_seckill_error/$status {"
        echo "            internal;"
        echo "            default_type application/json;"
        echo "            return $status '{\"error\":\"$error\",\"detail\":\"$detail\"}';"
        echo "        }"
    done <<<"$NGINX_JSON_ERRORS"
}
# nginx's code, the status answered, the error, the detail
NGINX_JSON_ERRORS="400 400 bad_request malformed request (framing, Content-Length, request line or headers), refused by the balancer
494 431 bad_request request headers too large, refused by the balancer
431 431 bad_request request headers too large, refused by the balancer
413 413 too_large the body is over 4 KiB
414 414 bad_request URL too long, refused by the balancer
505 505 bad_request HTTP version not supported, refused by the balancer"

# write_nginx_conf DIR PORT INSTANCE_PORTS...: with CANNED=1 the config also has one
# server per instance port, answering a canned 201 (see --canned).
write_nginx_conf() {
    local dir=$1 port=$2 p
    shift 2
    mkdir -p "$dir/nginx/tmp"
    {
        echo "# generated by scripts/cluster.sh"
        echo "worker_processes 2;"
        echo "daemon off;"
        echo "pid $dir/nginx/nginx.pid;"
        echo "error_log $dir/nginx/error.log warn;"
        echo "events { worker_connections 4096; }"
        echo "http {"
        echo "    access_log off;"
        echo "    client_body_temp_path $dir/nginx/tmp/body;"
        echo "    proxy_temp_path $dir/nginx/tmp/proxy;"
        echo "    fastcgi_temp_path $dir/nginx/tmp/fastcgi;"
        echo "    uwsgi_temp_path $dir/nginx/tmp/uwsgi;"
        echo "    scgi_temp_path $dir/nginx/tmp/scgi;"
        echo "    upstream seckill {"
        for p in "$@"; do echo "        server 127.0.0.1:$p;"; done
        echo "        keepalive 128;"
        # Below the instances' idle timeout (15 s, service/http.c): a connection
        # they close while nginx sends on it comes back reset, a 502 for a POST. And
        # below their drain's wait (5 s): a draining instance waits for nginx to
        # close its idle connections (docs/operations.md, Signals).
        echo "        keepalive_timeout 4s;"
        echo "    }"
        echo "    server {"
        echo "        listen 127.0.0.1:$port;"
        nginx_json_errors
        echo "        location / {"
        echo "            proxy_pass http://seckill;"
        echo "            proxy_http_version 1.1;"
        echo "            proxy_set_header Connection \"\";"
        echo "            proxy_set_header Host \$host;"
        # POSTs are never retried on another instance (nginx's default; stated here
        # because a retried order could be placed twice).
        echo "            proxy_next_upstream error timeout;"
        echo "            proxy_connect_timeout 2s;"
        echo "            proxy_read_timeout 60s;"
        echo "        }"
        echo "    }"
        if ((CANNED)); then
            for p in "$@"; do
                echo "    server {"
                echo "        listen 127.0.0.1:$p;"
                echo "        default_type application/json;"
                echo "        location = /readyz { return 200 '{\"ready\":true}'; }"
                echo "        location = /livez { return 200 '{\"live\":true}'; }"
                echo "        location / {"
                echo "            return 201 '$CANNED_BODY';"
                echo "        }"
                echo "    }"
            done
        fi
        echo "}"
    } >"$dir/nginx/nginx.conf"
}

write_haproxy_conf() { # DIR PORT INSTANCE_PORTS...
    local dir=$1 port=$2 p i=0
    shift 2
    mkdir -p "$dir/haproxy"
    {
        echo "# generated by scripts/cluster.sh"
        echo "global"
        echo "    maxconn 8192"
        echo "    nbthread 2"
        echo "defaults"
        echo "    mode http"
        echo "    option http-keep-alive"
        echo "    timeout connect 2s"
        echo "    timeout client 60s"
        echo "    timeout server 60s"
        echo "    retries 2"
        echo "frontend seckill_front"
        echo "    bind 127.0.0.1:$port"
        echo "    default_backend seckill"
        echo "backend seckill"
        echo "    balance roundrobin"
        echo "    option httpchk GET /readyz"
        echo "    http-check expect status 200"
        echo "    default-server check inter 500ms fall 2 rise 1"
        for p in "$@"; do
            i=$((i + 1))
            echo "    server s$i 127.0.0.1:$p"
        done
    } >"$dir/haproxy/haproxy.cfg"
}

# start_lb KIND DIR INSTANCE_PORTS...: sets STARTED_PORT, the balancer's. With CANNED=1 the
# upstream ports are picked here (as many as INSTANCE_PORTS, which are then ignored)
# and written to DIR/nginx/canned.ports.
start_lb() {
    local kind=$1 dir=$2 port attempt rc i
    shift 2
    local n=$#
    for ((attempt = 1; attempt <= 5; attempt++)); do
        port=$(free_port)
        if ((CANNED)); then
            set --
            for ((i = 0; i < n; i++)); do set -- "$@" "$(free_port)"; done
            mkdir -p "$dir/nginx"
            echo "$*" >"$dir/nginx/canned.ports"
        fi
        case $kind in
        nginx)
            write_nginx_conf "$dir" "$port" "$@"
            # -e: the error log before the config is read; -p: prefix for relative paths.
            proc_start lb "$dir" nginx -e "$dir/nginx/error.log" -p "$dir/nginx" \
                -c "$dir/nginx/nginx.conf" || return 1
            ;;
        haproxy)
            write_haproxy_conf "$dir" "$port" "$@"
            proc_start lb "$dir" haproxy -db -f "$dir/haproxy/haproxy.cfg" || return 1
            ;;
        esac
        rc=0
        wait_started lb "$dir" 15 lb_forwards "$port" "$#" || rc=$?
        if ((rc == 0)); then
            STARTED_PORT=$port
            return 0
        fi
        if ((rc == 2)) && { log_says_port_in_use lb "$dir" ||
            grep -qi 'in use' "$dir/nginx/error.log" 2>/dev/null; }; then
            say "  lb: port $port taken, retrying"
            proc_stop lb "$dir" 2 || true
            continue
        fi
        log "$kind did not forward to the instances (see $dir/lb.log):"
        tail -n 15 "$dir/lb.log" "$dir/nginx/error.log" 2>/dev/null >&2 || true
        return 1
    done
    return 1
}

# The balancer forwards when as many consecutive /readyz through it as there are
# instances (a round robin passes each once) all answer 200.
lb_forwards() {
    local port=$1 n=$2 i
    for ((i = 0; i < n; i++)); do
        http_ok "http://127.0.0.1:$port/readyz" || return 1
    done
}

# ---- commands ---------------------------------------------------------------------

# Stop order: the balancer first (no new traffic), then the instances and whatever else
# is not a store (they drain), then the stores: lock nodes, ZooKeeper, the data Redis
# last (instances may still write while draining). A store is a Redis (DIR/NAME.args) or
# a ZooKeeper node (DIR/NAME/zoo.cfg).
cmd_down() {
    local dir=$1 rm_dir=$2 f name failed=0
    [[ -d $dir ]] || die "no such dir: $dir"
    local -a order=(lb) stores=()
    for f in "$dir"/*.pid; do
        [[ -e $f ]] || continue
        name=$(basename "$f" .pid)
        [[ $name == lb || $name == redis ]] && continue
        if [[ -e $dir/$name.args || -e $dir/$name/zoo.cfg || $name == pg ]]; then
            stores+=("$name")
        else
            order+=("$name")
        fi
    done
    order+=("${stores[@]}" redis)
    for name in "${order[@]}"; do
        [[ -e $dir/$name.pid ]] || continue
        if proc_alive "$name" "$dir"; then say "stopping $name (pid $(cat "$dir/$name.pid"))"; fi
        proc_stop "$name" "$dir" 10 "$(stop_signal "$name")" || failed=1
    done
    if ((failed)); then
        log "down: some processes could not be stopped"
        return 1
    fi
    pg_data_gone "$dir" # PostgreSQL's data dir (start_pg), outside DIR: gone with its server
    if ((rm_dir)); then rm -rf "$dir"; fi
    return 0
}

cmd_status() {
    local dir=$1 f name any=0 running=0
    [[ -d $dir ]] || die "no such dir: $dir"
    for f in "$dir"/*.pid; do
        [[ -e $f ]] || continue
        any=1
        name=$(basename "$f" .pid)
        if proc_alive "$name" "$dir"; then
            running=$((running + 1))
            printf '%-12s pid %-8s running\n' "$name" "$(cat "$f")"
        else
            printf '%-12s pid %-8s not running\n' "$name" "$(cat "$f")"
        fi
    done
    ((any)) || echo "nothing started in $dir"
    [[ -f $dir/cluster.env ]] && { echo "--- $dir/cluster.env"; cat "$dir/cluster.env"; }
    ((running > 0))
}

# stop NAME [--kill]: one recorded process, by its pid file. The pid file stays
# with --kill (a SIGKILL'd process is gone for good: proc_alive tells), so that a test
# sees which pid it killed; status shows it not running.
# stop_signal NAME: the signal that stops NAME cleanly (pg: SIGINT, a fast shutdown).
stop_signal() { if [[ $1 == pg ]]; then echo INT; else echo TERM; fi; }

cmd_stop() {
    local dir=$1 name=$2 kill=$3 pid i
    [[ -e $dir/$name.pid ]] || die "$dir has no process $name"
    if ((!kill)); then
        proc_stop "$name" "$dir" 10 "$(stop_signal "$name")"
        return
    fi
    proc_alive "$name" "$dir" || return 0
    pid=$(cat "$dir/$name.pid")
    say "killing $name (pid $pid)"
    # PostgreSQL's postmaster killed -9 would leave its backends running: SIGQUIT is
    # its crash (an immediate shutdown, recovery from the WAL at the next start).
    if [[ $name == pg ]]; then kill -QUIT "$pid" 2>/dev/null || true; else kill -KILL "$pid" 2>/dev/null || true; fi
    for ((i = 0; i < 100; i++)); do
        proc_alive "$name" "$dir" || return 0
        sleep 0.05
    done
    log "stop: $name (pid $pid) survived SIGKILL"
    return 1
}

# start NAME: a stopped ZooKeeper node (or Redis: data, lock node, Redis Cluster node)
# again, same port, same data; waits until it serves (an ensemble member: until it has
# joined a quorum).
cmd_start() {
    local dir=$1 name=$2 port t0
    if [[ -f $dir/$name.args ]]; then
        cmd_start_redis "$dir" "$name"
        return
    fi
    if [[ $name == pg && -f $dir/pg.port ]]; then
        proc_alive pg "$dir" && die "pg already runs (pid $(cat "$dir/pg.pid"))"
        port=$(cat "$dir/pg.port")
        t0=$(date +%s%N)
        pg_server_start "$dir" "$port" 60 || return 1
        say "pg serving on 127.0.0.1:$port (pid $(cat "$dir/pg.pid")), $(( ($(date +%s%N) - t0) / 1000000 )) ms after the start"
        return 0
    fi
    [[ $name =~ ^zk-[0-9]+$ && -f $dir/$name/zoo.cfg ]] ||
        die "start: only ZooKeeper nodes (zk-N), Redis nodes (redis, lock-N, shard-N[-r]) and pg of $dir start again"
    proc_alive "$name" "$dir" && die "$name already runs (pid $(cat "$dir/$name.pid"))"
    port=$(zk_port "$dir" "$name") || die "no client port in $dir/$name/zoo.cfg"
    t0=$(date +%s%N)
    zk_node_start "$name" "$dir" "$dir/$name" || return 1
    if ! wait_started "$name" "$dir" 60 zk_ready "$port"; then
        log "$name did not come back (see $dir/$name.log):"
        tail -n 15 "$dir/$name.log" >&2 || true
        return 1
    fi
    say "$name serving on 127.0.0.1:$port (pid $(cat "$dir/$name.pid")), $(( ($(date +%s%N) - t0) / 1000000 )) ms after the start"
}

# A Redis again, as it was started (same port, its data; a Redis Cluster node also its
# nodes.conf: it rejoins the cluster, a replica of whoever took over its slots meanwhile).
cmd_start_redis() {
    local dir=$1 name=$2 port pw="" i
    local -a args
    proc_alive "$name" "$dir" && die "$name already runs (pid $(cat "$dir/$name.pid"))"
    mapfile -t args <"$dir/$name.args"
    port=${args[1]}
    for ((i = 0; i < ${#args[@]} - 1; i++)); do
        [[ ${args[i]} == --requirepass ]] && pw=${args[i + 1]}
    done
    proc_start "$name" "$dir" redis-server "${args[@]}" || return 1
    wait_started "$name" "$dir" 15 redis_ping "$port" "$pw" ||
        { log "$name did not come back (see $dir/$name.log)"; return 1; }
    say "$name serving on 127.0.0.1:$port (pid $(cat "$dir/$name.pid"))"
}

# ---- up, step by step: what the steps share ------------------------------------------

UP_DIR=""
UP_DONE=0
up_instances=3 up_lb=nginx up_lock="" up_lock_nodes="" up_zk_nodes="" up_fsync=always
up_postgres=0 up_pg_url=""
up_redis_cluster=0
up_extra=()
# what the steps started: the data Redis, lock nodes, ZooKeeper, instances, balancer
up_redis_port="" up_redis_seeds="" up_nodes_csv="" up_zk_csv="" up_zk_names="" up_lb_port=""
up_lb_url=""
up_ports=() up_urls=()

up_cleanup() {
    local rc=$?
    if ((!UP_DONE)) && [[ -n $UP_DIR && -d $UP_DIR ]]; then
        log "cluster up failed or was interrupted; stopping what it started in $UP_DIR"
        QUIET=1 cmd_down "$UP_DIR" 0 || true
    fi
    exit "$rc"
}

# up_options ARGS...: up's options into the up_* variables; the dir into UP_DIR (not
# made yet).
up_options() {
    while (($#)); do
        case $1 in
        --dir) UP_DIR=${2:?"$1 needs a value"}; shift 2 ;;
        --instances) up_instances=${2:?"$1 needs a value"}; shift 2 ;;
        --lb) up_lb=${2:?"$1 needs a value"}; shift 2 ;;
        --lock) up_lock=${2:?"$1 needs a value"}; shift 2 ;;
        --lock-nodes) up_lock_nodes=${2:?"$1 needs a value"}; shift 2 ;;
        --zk-nodes) up_zk_nodes=${2:?"$1 needs a value"}; shift 2 ;;
        --postgres) up_postgres=1; shift ;;
        --fsync) up_fsync=${2:?"$1 needs a value"}; shift 2 ;;
        --redis-cluster) up_redis_cluster=${2:?"$1 needs a value"}; shift 2 ;;
        --canned) CANNED=1; shift ;;
        --quiet) QUIET=1; shift ;;
        --) shift; up_extra=("$@"); break ;;
        -h | --help) usage 0 ;;
        *) log "up: unknown option $1"; usage ;;
        esac
    done
}

# up_validate: the options make sense together and the tools they need are here; the
# lock mode's defaults (redlock: 3 lock nodes, zk: 1 ZooKeeper node); the server binary.
up_validate() {
    local p
    [[ $up_instances =~ ^[0-9]+$ ]] || die "--instances must be a number"
    ((up_instances > 0 || up_redis_cluster > 0)) || die "--instances must be positive"
    [[ $up_redis_cluster =~ ^[0-9]+$ ]] || die "--redis-cluster takes a count of masters"
    ((up_redis_cluster == 0 || !CANNED)) || die "--redis-cluster and --canned do not go together"
    ((up_instances > 0)) || up_lb=none
    [[ $up_lb == nginx || $up_lb == haproxy || $up_lb == none ]] || die "--lb must be nginx, haproxy or none"
    [[ $up_fsync == always || $up_fsync == everysec || $up_fsync == no ]] || die "--fsync: always|everysec|no"
    ((!CANNED)) || [[ $up_lb == nginx ]] || die "--canned needs --lb nginx"
    # Not durable: said even with --quiet. The instances say it too (seckill_redis_durable 0).
    ((CANNED)) || case $up_fsync in
    everysec) log "warning: --fsync everysec is not durable: the data Redis fsyncs its AOF" \
        "once a second, so orders acknowledged in the last second before a crash of Redis" \
        "or its machine can be lost (use --fsync always, the default, to keep them)" ;;
    no) log "warning: --fsync no is not durable: the data Redis runs without AOF (and" \
        "without snapshots), so every acknowledged order is lost when it crashes or restarts" \
        "(use --fsync always, the default, to keep them)" ;;
    esac
    if [[ -z $up_lock_nodes && $up_lock == redlock ]]; then up_lock_nodes=3; fi
    [[ -z $up_lock_nodes || $up_lock_nodes =~ ^[0-9]+$ ]] || die "--lock-nodes takes a count"
    if [[ -z $up_zk_nodes && $up_lock == zk ]]; then up_zk_nodes=1; fi
    [[ -z $up_zk_nodes || $up_zk_nodes =~ ^[0-9]+$ ]] || die "--zk-nodes takes a count"
    if ((${up_zk_nodes:-0} > 0)); then
        command -v java >/dev/null || die "java not found (scripts/deps.sh installs zookeeper)"
    fi
    [[ $up_lock == pg ]] && up_postgres=1
    if ((up_postgres)); then
        for p in initdb postgres pg_isready setpriv; do
            command -v "$p" >/dev/null || die "$p not found (scripts/deps.sh installs postgresql)"
        done
        id postgres >/dev/null 2>&1 || die "no postgres user (scripts/deps.sh installs postgresql)"
    fi
    for p in redis-server redis-cli curl; do
        command -v "$p" >/dev/null || die "$p not found (scripts/deps.sh installs it)"
    done
    [[ $up_lb == none ]] || command -v "$up_lb" >/dev/null || die "$up_lb not found"
    if ((CANNED)); then
        SECKILL_BIN_PATH="" up_lock="" up_lock_nodes="" up_zk_nodes="" up_postgres=0
    else
        SECKILL_BIN_PATH=$(seckill_bin) || exit 1
    fi
}

# up_dir: UP_DIR made (a fresh temp dir when none was given; a given one must not run a
# cluster already); from here on, a failure or an interrupt stops what up started.
up_dir() {
    local f
    if [[ -z $UP_DIR ]]; then
        UP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/seckill-cluster.XXXXXX")
    else
        mkdir -p "$UP_DIR"
        UP_DIR=$(cd "$UP_DIR" && pwd)
        for f in "$UP_DIR"/*.pid; do
            [[ -e $f ]] || continue
            if proc_alive "$(basename "$f" .pid)" "$UP_DIR"; then
                die "$UP_DIR already runs a cluster (scripts/cluster.sh down --dir $UP_DIR)"
            fi
        done
    fi
    # nginx workers drop to an unprivileged user when started as root; they must be
    # able to reach their temp paths inside the dir.
    chmod 755 "$UP_DIR"
    trap up_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    rm -f "$UP_DIR/cluster.env"
    say "cluster dir: $UP_DIR"
}

# up_start_stores: the data Redis (or Redis Cluster), the lock nodes, the ZooKeeper nodes.
up_start_stores() {
    local dir=$UP_DIR i
    if ((up_redis_cluster > 0)); then
        start_redis_cluster "$dir" "$up_redis_cluster" "$up_fsync" || exit 1
        up_redis_seeds=$STARTED_SEEDS
        up_redis_port=${up_redis_seeds%%,*}
        up_redis_port=${up_redis_port##*:}
        for ((i = 1; i <= up_redis_cluster; i++)); do
            say "  shard $i    master pid $(cat "$dir/shard-$i.pid"), replica pid $(cat "$dir/shard-$i-r.pid")"
        done
        say "  redis cluster seeds $up_redis_seeds"
    elif ((!CANNED)); then
        start_redis redis "$dir" "$up_fsync" || exit 1
        up_redis_port=$STARTED_PORT
        say "  redis      127.0.0.1:$up_redis_port (pid $(cat "$dir/redis.pid"))"
    fi
    for ((i = 1; i <= ${up_lock_nodes:-0}; i++)); do
        start_redis "lock-$i" "$dir" no || exit 1
        up_nodes_csv+="${up_nodes_csv:+,}127.0.0.1:$STARTED_PORT"
        say "  lock node  127.0.0.1:$STARTED_PORT (pid $(cat "$dir/lock-$i.pid"))"
    done
    if ((${up_zk_nodes:-0} > 0)); then
        start_zk "$dir" "$up_zk_nodes" || exit 1
        up_zk_csv=$STARTED_NODES
        for ((i = 1; i <= up_zk_nodes; i++)); do
            up_zk_names+="${up_zk_names:+ }zk-$i"
            say "  zk node    127.0.0.1:$(zk_port "$dir" "zk-$i") (pid $(cat "$dir/zk-$i.pid"))"
        done
    fi
    if ((up_postgres)); then
        start_pg "$dir" || exit 1
        up_pg_url=$(pg_url "$STARTED_PORT")
        say "  postgres   $up_pg_url (pid $(cat "$dir/pg.pid"))"
    fi
}

# up_start_instances: the seckill instances, seckill-1..seckill-N, on the stores.
up_start_instances() {
    local i cores
    local -a args=(--redis "${up_redis_seeds:-127.0.0.1:$up_redis_port}")
    # The instances stand for as many machines but share this one's cores: each
    # gets its share of them as event loops, unless told otherwise.
    if ((up_instances > 0)) && [[ -z ${SECKILL_THREADS:-} && " ${up_extra[*]} " != *" --threads"* ]]; then
        cores=$(nproc)
        args+=(--threads $((cores / up_instances > 0 ? cores / up_instances : 1)))
    fi
    # Every client of these instances is on loopback, one address: the balancer's
    # upstream connections, or wrk's without one. The per-address limit (256 by
    # default) is for clients that are many; here it would refuse the load itself.
    if [[ -z ${SECKILL_MAX_CONNS_PER_IP:-} && " ${up_extra[*]} " != *" --max-conns-per-ip"* ]]; then
        args+=(--max-conns-per-ip 0)
    fi
    [[ -n $up_lock ]] && args+=(--lock "$up_lock")
    [[ -n $up_nodes_csv ]] && args+=(--lock-nodes "$up_nodes_csv")
    [[ -n $up_zk_csv ]] && args+=(--zk "$up_zk_csv")
    [[ -n $up_pg_url ]] && args+=(--postgres "$up_pg_url")
    for ((i = 1; i <= up_instances && !CANNED; i++)); do
        start_instance "seckill-$i" "$UP_DIR" "${args[@]}" --instance-id "$i" "${up_extra[@]}" ||
            exit 1
        up_ports+=("$STARTED_PORT")
        up_urls+=("$STARTED_URL")
        say "  instance   $STARTED_URL (pid $(cat "$UP_DIR/seckill-$i.pid"))"
    done
}

# up_start_balancer: the load balancer in front of the instances (with --canned: of its own
# canned upstreams); LB_URL is the first instance's when there is none.
up_start_balancer() {
    local dir=$UP_DIR lb=$up_lb i port
    local -a slots=()
    if ((CANNED)); then
        for ((i = 1; i <= up_instances; i++)); do slots+=("$i"); done
        start_lb "$lb" "$dir" "${slots[@]}" || exit 1
        read -r -a up_ports <"$dir/nginx/canned.ports"
        for port in "${up_ports[@]}"; do
            up_urls+=("http://127.0.0.1:$port")
            say "  canned     http://127.0.0.1:$port (served by the balancer's nginx)"
        done
    elif [[ $lb != none ]]; then
        start_lb "$lb" "$dir" "${up_ports[@]}" || exit 1
    else
        up_lb_url=${up_urls[0]:-}
        return 0
    fi
    up_lb_port=$STARTED_PORT
    up_lb_url="http://127.0.0.1:$up_lb_port"
    say "  $lb $(printf '%*s' $((9 - ${#lb})) '')$up_lb_url (pid $(cat "$dir/lb.pid"))"
}

# up_write_env: UP_DIR/cluster.env, for callers to source.
up_write_env() {
    local zk_ports=${up_zk_csv//127.0.0.1:/}
    {
        echo "# written by scripts/cluster.sh up; source it"
        printf 'CLUSTER_DIR=%q\n' "$UP_DIR"
        printf 'LB_KIND=%q\n' "$up_lb"
        printf 'LB_PORT=%q\n' "$up_lb_port"
        printf 'LB_URL=%q\n' "$up_lb_url"
        printf 'CANNED=%q\n' "$CANNED"
        printf 'REDIS_HOST=%q\n' "${up_redis_port:+127.0.0.1}"
        printf 'REDIS_PORT=%q\n' "$up_redis_port"
        printf 'REDIS_ADDR=%q\n' "${up_redis_port:+127.0.0.1:$up_redis_port}"
        echo "# --redis-cluster M: the masters (seeds), shard-I (master) and shard-I-r (its"
        echo "# replica) pids in \$CLUSTER_DIR/shard-I.pid, shard-I-r.pid"
        printf 'REDIS_CLUSTER_SEEDS=%q\n' "$up_redis_seeds"
        printf 'REDIS_CLUSTER_MASTERS=%q\n' "$up_redis_cluster"
        printf 'LOCK_MODE=%q\n' "$up_lock"
        printf 'LOCK_NODES=%q\n' "$up_nodes_csv"
        echo "# ZooKeeper node zk-I: pid in \$CLUSTER_DIR/zk-I.pid; stop or kill one with"
        echo "# scripts/cluster.sh stop --dir \$CLUSTER_DIR zk-I [--kill], start it again"
        echo "# (same port and data) with scripts/cluster.sh start --dir \$CLUSTER_DIR zk-I"
        printf 'ZK_NODES=%q\n' "$up_zk_csv"
        printf 'ZK_PORTS=%q\n' "${zk_ports//,/ }"
        printf 'ZK_NAMES=%q\n' "$up_zk_names"
        echo "# --postgres: pg's pid in \$CLUSTER_DIR/pg.pid; stop (or crash, --kill) and"
        echo "# start it again with scripts/cluster.sh stop|start --dir \$CLUSTER_DIR pg"
        printf 'PG_URL=%q\n' "$up_pg_url"
        printf 'PG_PORT=%q\n' "$( [[ -f $UP_DIR/pg.port ]] && cat "$UP_DIR/pg.port" )"
        printf 'INSTANCES=%q\n' "$up_instances"
        printf 'INSTANCE_PORTS=%q\n' "${up_ports[*]}"
        printf 'INSTANCE_URLS=%q\n' "${up_urls[*]}"
        printf 'SECKILL_BIN=%q\n' "$SECKILL_BIN_PATH"
        printf 'SECKILL_EXTRA_FLAGS=%q\n' "${up_extra[*]}"
    } >"$UP_DIR/cluster.env"
}

cmd_up() {
    up_options "$@"
    up_validate
    up_dir
    up_start_stores
    up_start_instances
    up_start_balancer
    up_write_env
    UP_DONE=1
    say "ready: LB_URL=$up_lb_url  (source $UP_DIR/cluster.env; stop with: $0 down --dir $UP_DIR)"
    echo "$UP_DIR"
}

main() {
    (($#)) || usage
    local cmd=$1 dir="" rm_dir=0
    shift
    case $cmd in
    up) cmd_up "$@" ;;
    down | status | stop | start)
        local name="" kill=0
        while (($#)); do
            case $1 in
            --dir) dir=${2:?"$1 needs a value"}; shift 2 ;;
            --rm) rm_dir=1; shift ;;
            --kill) kill=1; shift ;;
            --quiet) QUIET=1; shift ;;
            -*) log "$cmd: unknown option $1"; usage ;;
            *)
                [[ -z $name && ($cmd == stop || $cmd == start) ]] || { log "$cmd: unexpected $1"; usage; }
                name=$1
                shift
                ;;
            esac
        done
        [[ -n $dir ]] || die "$cmd needs --dir D"
        dir=$(cd "$dir" 2>/dev/null && pwd) || die "no such dir"
        [[ -n $name || ($cmd != stop && $cmd != start) ]] || die "$cmd needs a NAME (zk-1, lock-2, ...)"
        [[ $name =~ ^[A-Za-z0-9_-]*$ ]] || die "bad name $name"
        case $cmd in
        down) cmd_down "$dir" "$rm_dir" ;;
        status) cmd_status "$dir" ;;
        stop) cmd_stop "$dir" "$name" "$kill" ;;
        start) cmd_start "$dir" "$name" ;;
        esac
        ;;
    -h | --help | help) usage 0 ;;
    *) log "unknown command $cmd"; usage ;;
    esac
}

# Sourced (tests/lib.sh): the functions only.
[[ ${BASH_SOURCE[0]} != "$0" ]] || main "$@"
