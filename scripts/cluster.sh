#!/usr/bin/env bash
# cluster.sh — a throwaway seckill cluster on loopback: one data redis-server, optional
# redlock lock nodes or ZooKeeper nodes, N seckill instances and a load balancer (nginx
# or haproxy).
#
#   scripts/cluster.sh up [--dir D] [--instances N] [--lb nginx|haproxy|none]
#                         [--lock MODE] [--lock-nodes N] [--zk-nodes N]
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
# --zk-nodes N starts N ZooKeeper nodes, zk-1..zk-N (1: a standalone server; more: an
# ensemble), each in D/zk-I/ on free loopback ports, and gives the instances --zk with
# every node's address; --lock zk without --zk-nodes starts 1. cluster.env has ZK_NODES
# (host:port,...), ZK_PORTS and ZK_NAMES; each node's pid is in D/zk-I.pid.
# stop NAME stops one recorded process (zk-2, lock-1, seckill-3, redis, lb) by its pid
# file: SIGTERM, or SIGKILL with --kill. start NAME starts a stopped ZooKeeper node
# (zk-N) or Redis Cluster node (shard-N, shard-N-r) again, on its port and with its
# data, and waits until it serves (other pieces pick their ports when they start).
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

# start_redis NAME DIR FSYNC: a redis-server on a free port, data in DIR/NAME/.
# FSYNC "no" means no AOF at all (lock nodes keep nothing worth keeping).
# Prints the port.
start_redis() {
    local name=$1 dir=$2 fsync=$3 port attempt rc
    shift 3 # the rest: more redis-server flags
    local -a persist
    mkdir -p "$dir/$name"
    if [[ $fsync == no ]]; then
        persist=(--appendonly no)
    else
        persist=(--appendonly yes --appendfsync "$fsync")
    fi
    for ((attempt = 1; attempt <= 5; attempt++)); do
        port=$(free_port)
        proc_start "$name" "$dir" redis-server --port "$port" --bind 127.0.0.1 \
            --dir "$dir/$name" --save "" "${persist[@]}" --daemonize no \
            --protected-mode yes --logfile "" "$@" || return 1
        rc=0
        wait_started "$name" "$dir" 15 redis_ping "$port" || rc=$?
        if ((rc == 0)); then
            # how it was started, for `start` to start it again (a cluster node)
            printf '%s\n' --port "$port" --bind 127.0.0.1 --dir "$dir/$name" --save "" \
                "${persist[@]}" --daemonize no --protected-mode yes --logfile "" "$@" \
                >"$dir/$name.args"
            echo "$port"
            return 0
        fi
        if ((rc == 2)) && log_says_port_in_use "$name" "$dir"; then
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
    local p info
    for p in "$@"; do
        redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
        info=$(redis-cli -p "$p" info replication 2>/dev/null) || return 1
        if grep -q '^role:slave' <<<"$info"; then
            grep -q '^master_link_status:up' <<<"$info" || return 1
            grep -q '^master_sync_in_progress:0' <<<"$info" || return 1
        fi
    done
}

# start_redis_cluster DIR M FSYNC: a Redis Cluster of M masters (shard-1..shard-M) with
# one replica each (shard-I-r), node timeout 1 s, AOF as FSYNC says; the 16384 slots
# split evenly over the masters. Waits until every node says cluster_state:ok and every
# replica has synced with its master. Prints the masters' host:port, comma-separated
# (seeds for --redis).
start_redis_cluster() {
    local dir=$1 m=$2 fsync=$3 i p id seeds=""
    local -a masters=() replicas=() flags=(--cluster-enabled yes --cluster-node-timeout 1000)
    for ((i = 1; i <= m; i++)); do
        p=$(start_redis "shard-$i" "$dir" "$fsync" "${flags[@]}") || return 1
        masters+=("$p")
        p=$(start_redis "shard-$i-r" "$dir" "$fsync" "${flags[@]}") || return 1
        replicas+=("$p")
    done
    for ((i = 0; i < m; i++)); do
        redis-cli -p "${masters[i]}" cluster addslotsrange $((i * 16384 / m)) \
            $(((i + 1) * 16384 / m - 1)) >/dev/null || return 1
    done
    for p in "${masters[@]:1}" "${replicas[@]}"; do
        redis-cli -p "${masters[0]}" cluster meet 127.0.0.1 "$p" >/dev/null || return 1
    done
    for p in "${masters[@]}" "${replicas[@]}"; do
        wait_until 30 cluster_nodes_known "$p" $((2 * m)) || { log "shard nodes did not meet"; return 1; }
    done
    for ((i = 0; i < m; i++)); do
        id=$(redis-cli -p "${masters[i]}" cluster myid) || return 1
        wait_until 30 cluster_replicate "${replicas[i]}" "$id" ||
            { log "shard-$((i + 1))-r did not become a replica"; return 1; }
    done
    wait_until 60 cluster_ready "${masters[@]}" "${replicas[@]}" ||
        { log "the Redis Cluster did not become ready (cluster_state, replica sync)"; return 1; }
    for p in "${masters[@]}"; do seeds+="${seeds:+,}127.0.0.1:$p"; done
    echo "$seeds"
}

# start_zk DIR N: ZooKeeper nodes zk-1..zk-N (N = 1: a standalone server; more: an
# ensemble) on free loopback ports, each in DIR/zk-I/ (zoo.cfg, data/); waits until
# every node serves. Prints the nodes' host:port, comma-separated. When a node dies
# because one of its ports was taken, all of them start again on other ports.
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
            (IFS=,; echo "${ports[*]/#/127.0.0.1:}")
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

# start_instance NAME DIR ARGS...: a seckill instance on a free port; ARGS go after
# --listen. Prints the port.
start_instance() {
    local name=$1 dir=$2 port attempt rc
    shift 2
    for ((attempt = 1; attempt <= 5; attempt++)); do
        port=$(free_port)
        proc_start "$name" "$dir" "$SECKILL_BIN_PATH" --listen "127.0.0.1:$port" "$@" || return 1
        rc=0
        wait_started "$name" "$dir" 30 http_ok "http://127.0.0.1:$port/readyz" || rc=$?
        if ((rc == 0)); then
            echo "$port"
            return 0
        fi
        if ((rc == 2)) && log_says_port_in_use "$name" "$dir"; then
            say "  $name: port $port taken, retrying"
            proc_stop "$name" "$dir" 2 || true
            continue
        fi
        log "$name did not become ready (see $dir/$name.log):"
        tail -n 15 "$dir/$name.log" >&2 || true
        return 1
    done
    return 1
}

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
        echo "    }"
        echo "    server {"
        echo "        listen 127.0.0.1:$port;"
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

# start_lb KIND DIR INSTANCE_PORTS...: prints the balancer's port. With CANNED=1 the
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
            echo "$port"
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

# Stop order: the balancer first (no new traffic), then instances (they drain), then
# the lock nodes, ZooKeeper and the data redis last (instances may still write while
# draining).
cmd_down() {
    local dir=$1 rm_dir=$2 f name failed=0
    [[ -d $dir ]] || die "no such dir: $dir"
    local -a order=(lb)
    for f in "$dir"/seckill-*.pid "$dir"/lock-*.pid "$dir"/zk-*.pid; do
        [[ -e $f ]] && order+=("$(basename "$f" .pid)")
    done
    order+=(redis)
    for f in "$dir"/*.pid; do
        [[ -e $f ]] || continue
        name=$(basename "$f" .pid)
        [[ " ${order[*]} " == *" $name "* ]] || order+=("$name")
    done
    for name in "${order[@]}"; do
        [[ -e $dir/$name.pid ]] || continue
        if proc_alive "$name" "$dir"; then say "stopping $name (pid $(cat "$dir/$name.pid"))"; fi
        proc_stop "$name" "$dir" 10 || failed=1
    done
    if ((failed)); then
        log "down: some processes could not be stopped"
        return 1
    fi
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
cmd_stop() {
    local dir=$1 name=$2 kill=$3 pid i
    [[ -e $dir/$name.pid ]] || die "$dir has no process $name"
    if ((!kill)); then
        proc_stop "$name" "$dir" 10
        return
    fi
    proc_alive "$name" "$dir" || return 0
    pid=$(cat "$dir/$name.pid")
    say "killing $name (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        proc_alive "$name" "$dir" || return 0
        sleep 0.05
    done
    log "stop: $name (pid $pid) survived SIGKILL"
    return 1
}

# start NAME: a stopped ZooKeeper node (or Redis Cluster node) again, same port, same
# data; waits until it serves (an ensemble member: until it has joined a quorum).
cmd_start() {
    local dir=$1 name=$2 port t0
    if [[ $name =~ ^shard-[0-9]+(-r)?$ && -f $dir/$name.args ]]; then
        cmd_start_shard "$dir" "$name"
        return
    fi
    [[ $name =~ ^zk-[0-9]+$ && -f $dir/$name/zoo.cfg ]] ||
        die "start: only ZooKeeper nodes (zk-N) and Redis Cluster nodes (shard-N[-r]) of $dir start again"
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

# A Redis Cluster node again, as it was started (same port, its data and nodes.conf):
# it rejoins the cluster, a replica of whoever took over its slots meanwhile.
cmd_start_shard() {
    local dir=$1 name=$2 port
    local -a args
    proc_alive "$name" "$dir" && die "$name already runs (pid $(cat "$dir/$name.pid"))"
    mapfile -t args <"$dir/$name.args"
    port=${args[1]}
    proc_start "$name" "$dir" redis-server "${args[@]}" || return 1
    wait_started "$name" "$dir" 15 redis_ping "$port" ||
        { log "$name did not come back (see $dir/$name.log)"; return 1; }
    say "$name serving on 127.0.0.1:$port (pid $(cat "$dir/$name.pid"))"
}

UP_DIR=""
UP_DONE=0
up_cleanup() {
    local rc=$?
    if ((!UP_DONE)) && [[ -n $UP_DIR && -d $UP_DIR ]]; then
        log "cluster up failed or was interrupted; stopping what it started in $UP_DIR"
        QUIET=1 cmd_down "$UP_DIR" 0 || true
    fi
    exit "$rc"
}

cmd_up() {
    local dir="" instances=3 lb=nginx lock="" lock_nodes="" zk_nodes="" fsync=always i
    local redis_cluster=0
    local -a extra=()
    while (($#)); do
        case $1 in
        --dir) dir=${2:?"$1 needs a value"}; shift 2 ;;
        --instances) instances=${2:?"$1 needs a value"}; shift 2 ;;
        --lb) lb=${2:?"$1 needs a value"}; shift 2 ;;
        --lock) lock=${2:?"$1 needs a value"}; shift 2 ;;
        --lock-nodes) lock_nodes=${2:?"$1 needs a value"}; shift 2 ;;
        --zk-nodes) zk_nodes=${2:?"$1 needs a value"}; shift 2 ;;
        --fsync) fsync=${2:?"$1 needs a value"}; shift 2 ;;
        --redis-cluster) redis_cluster=${2:?"$1 needs a value"}; shift 2 ;;
        --canned) CANNED=1; shift ;;
        --quiet) QUIET=1; shift ;;
        --) shift; extra=("$@"); break ;;
        -h | --help) usage 0 ;;
        *) log "up: unknown option $1"; usage ;;
        esac
    done
    [[ $instances =~ ^[0-9]+$ ]] || die "--instances must be a number"
    ((instances > 0 || redis_cluster > 0)) || die "--instances must be positive"
    [[ $redis_cluster =~ ^[0-9]+$ ]] || die "--redis-cluster takes a count of masters"
    ((redis_cluster == 0 || !CANNED)) || die "--redis-cluster and --canned do not go together"
    ((instances > 0)) || lb=none
    [[ $lb == nginx || $lb == haproxy || $lb == none ]] || die "--lb must be nginx, haproxy or none"
    [[ $fsync == always || $fsync == everysec || $fsync == no ]] || die "--fsync: always|everysec|no"
    ((!CANNED)) || [[ $lb == nginx ]] || die "--canned needs --lb nginx"
    # Not durable: said even with --quiet. The instances say it too (seckill_redis_durable 0).
    ((CANNED)) || case $fsync in
    everysec) log "warning: --fsync everysec is not durable: the data Redis fsyncs its AOF" \
        "once a second, so orders acknowledged in the last second before a crash of Redis" \
        "or its machine can be lost (use --fsync always, the default, to keep them)" ;;
    no) log "warning: --fsync no is not durable: the data Redis runs without AOF (and" \
        "without snapshots), so every acknowledged order is lost when it crashes or restarts" \
        "(use --fsync always, the default, to keep them)" ;;
    esac
    if [[ -z $lock_nodes && $lock == redlock ]]; then lock_nodes=3; fi
    [[ -z $lock_nodes || $lock_nodes =~ ^[0-9]+$ ]] || die "--lock-nodes takes a count"
    if [[ -z $zk_nodes && $lock == zk ]]; then zk_nodes=1; fi
    [[ -z $zk_nodes || $zk_nodes =~ ^[0-9]+$ ]] || die "--zk-nodes takes a count"
    if ((${zk_nodes:-0} > 0)); then
        command -v java >/dev/null || die "java not found (scripts/deps.sh installs zookeeper)"
    fi
    for p in redis-server redis-cli curl; do
        command -v "$p" >/dev/null || die "$p not found (scripts/deps.sh installs it)"
    done
    [[ $lb == none ]] || command -v "$lb" >/dev/null || die "$lb not found"
    if ((CANNED)); then
        SECKILL_BIN_PATH="" lock="" lock_nodes="" zk_nodes=""
    else
        SECKILL_BIN_PATH=$(seckill_bin) || exit 1
    fi

    if [[ -z $dir ]]; then
        dir=$(mktemp -d "${TMPDIR:-/tmp}/seckill-cluster.XXXXXX")
    else
        mkdir -p "$dir"
        dir=$(cd "$dir" && pwd)
        for f in "$dir"/*.pid; do
            [[ -e $f ]] || continue
            if proc_alive "$(basename "$f" .pid)" "$dir"; then
                die "$dir already runs a cluster (scripts/cluster.sh down --dir $dir)"
            fi
        done
    fi
    # nginx workers drop to an unprivileged user when started as root; they must be
    # able to reach their temp paths inside the dir.
    chmod 755 "$dir"
    UP_DIR=$dir
    trap up_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    rm -f "$dir/cluster.env"

    say "cluster dir: $dir"
    local redis_port="" redis_seeds=""
    if ((redis_cluster > 0)); then
        redis_seeds=$(start_redis_cluster "$dir" "$redis_cluster" "$fsync") || exit 1
        redis_port=${redis_seeds%%,*}
        redis_port=${redis_port##*:}
        for ((i = 1; i <= redis_cluster; i++)); do
            say "  shard $i    master pid $(cat "$dir/shard-$i.pid"), replica pid $(cat "$dir/shard-$i-r.pid")"
        done
        say "  redis cluster seeds $redis_seeds"
    elif ((!CANNED)); then
        redis_port=$(start_redis redis "$dir" "$fsync")
        say "  redis      127.0.0.1:$redis_port (pid $(cat "$dir/redis.pid"))"
    fi

    local nodes_csv="" node_port
    for ((i = 1; i <= ${lock_nodes:-0}; i++)); do
        node_port=$(start_redis "lock-$i" "$dir" no)
        nodes_csv+="${nodes_csv:+,}127.0.0.1:$node_port"
        say "  lock node  127.0.0.1:$node_port (pid $(cat "$dir/lock-$i.pid"))"
    done

    local zk_csv="" zk_names=""
    if ((${zk_nodes:-0} > 0)); then
        zk_csv=$(start_zk "$dir" "$zk_nodes")
        for ((i = 1; i <= zk_nodes; i++)); do
            zk_names+="${zk_names:+ }zk-$i"
            say "  zk node    127.0.0.1:$(zk_port "$dir" "zk-$i") (pid $(cat "$dir/zk-$i.pid"))"
        done
    fi

    local -a args=(--redis "${redis_seeds:-127.0.0.1:$redis_port}")
    # The instances stand for as many machines but share this one's cores: each
    # gets its share of them as event loops, unless told otherwise.
    if ((instances > 0)) && [[ -z ${SECKILL_THREADS:-} && " ${extra[*]} " != *" --threads"* ]]; then
        local cores
        cores=$(nproc)
        args+=(--threads $((cores / instances > 0 ? cores / instances : 1)))
    fi
    [[ -n $lock ]] && args+=(--lock "$lock")
    [[ -n $nodes_csv ]] && args+=(--lock-nodes "$nodes_csv")
    [[ -n $zk_csv ]] && args+=(--zk "$zk_csv")
    local -a ports=() urls=()
    local port
    for ((i = 1; i <= instances && !CANNED; i++)); do
        port=$(start_instance "seckill-$i" "$dir" "${args[@]}" --instance-id "$i" "${extra[@]}")
        ports+=("$port")
        urls+=("http://127.0.0.1:$port")
        say "  instance   http://127.0.0.1:$port (pid $(cat "$dir/seckill-$i.pid"))"
    done

    local lb_port="" lb_url
    if ((CANNED)); then
        local -a slots=()
        for ((i = 1; i <= instances; i++)); do slots+=("$i"); done
        lb_port=$(start_lb "$lb" "$dir" "${slots[@]}")
        read -r -a ports <"$dir/nginx/canned.ports"
        for port in "${ports[@]}"; do
            urls+=("http://127.0.0.1:$port")
            say "  canned     http://127.0.0.1:$port (served by the balancer's nginx)"
        done
        lb_url="http://127.0.0.1:$lb_port"
        say "  $lb $(printf '%*s' $((9 - ${#lb})) '')$lb_url (pid $(cat "$dir/lb.pid"))"
    elif [[ $lb != none ]]; then
        lb_port=$(start_lb "$lb" "$dir" "${ports[@]}")
        lb_url="http://127.0.0.1:$lb_port"
        say "  $lb $(printf '%*s' $((9 - ${#lb})) '')$lb_url (pid $(cat "$dir/lb.pid"))"
    else
        lb_url=${urls[0]:-}
    fi

    {
        echo "# written by scripts/cluster.sh up; source it"
        printf 'CLUSTER_DIR=%q\n' "$dir"
        printf 'LB_KIND=%q\n' "$lb"
        printf 'LB_PORT=%q\n' "$lb_port"
        printf 'LB_URL=%q\n' "$lb_url"
        printf 'CANNED=%q\n' "$CANNED"
        printf 'REDIS_HOST=%q\n' "${redis_port:+127.0.0.1}"
        printf 'REDIS_PORT=%q\n' "$redis_port"
        printf 'REDIS_ADDR=%q\n' "${redis_port:+127.0.0.1:$redis_port}"
        echo "# --redis-cluster M: the masters (seeds), shard-I (master) and shard-I-r (its"
        echo "# replica) pids in \$CLUSTER_DIR/shard-I.pid, shard-I-r.pid"
        printf 'REDIS_CLUSTER_SEEDS=%q\n' "$redis_seeds"
        printf 'REDIS_CLUSTER_MASTERS=%q\n' "$redis_cluster"
        printf 'LOCK_MODE=%q\n' "$lock"
        printf 'LOCK_NODES=%q\n' "$nodes_csv"
        echo "# ZooKeeper node zk-I: pid in \$CLUSTER_DIR/zk-I.pid; stop or kill one with"
        echo "# scripts/cluster.sh stop --dir \$CLUSTER_DIR zk-I [--kill], start it again"
        echo "# (same port and data) with scripts/cluster.sh start --dir \$CLUSTER_DIR zk-I"
        printf 'ZK_NODES=%q\n' "$zk_csv"
        zk_csv=${zk_csv//127.0.0.1:/}
        printf 'ZK_PORTS=%q\n' "${zk_csv//,/ }"
        printf 'ZK_NAMES=%q\n' "$zk_names"
        printf 'INSTANCES=%q\n' "$instances"
        printf 'INSTANCE_PORTS=%q\n' "${ports[*]}"
        printf 'INSTANCE_URLS=%q\n' "${urls[*]}"
        printf 'SECKILL_BIN=%q\n' "$SECKILL_BIN_PATH"
        printf 'SECKILL_EXTRA_FLAGS=%q\n' "${extra[*]}"
    } >"$dir/cluster.env"
    UP_DONE=1
    say "ready: LB_URL=$lb_url  (source $dir/cluster.env; stop with: $0 down --dir $dir)"
    echo "$dir"
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

main "$@"
