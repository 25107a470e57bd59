# shellcheck shell=bash
# lib.sh — shared helpers for scripts/, loadtest/ and tests/ (source it, don't run it).
#
#   free_port                    a loopback port nobody uses, below the ephemeral range
#   proc_start NAME DIR CMD...   start CMD detached (own session); DIR/NAME.pid, DIR/NAME.log
#   proc_alive NAME DIR          0 when the process recorded in DIR/NAME.pid still runs
#   proc_stop NAME DIR [SECS]    SIGTERM, wait up to SECS (10), then SIGKILL; by pid file only
#   wait_until SECS CMD...       poll CMD until it succeeds (0) or SECS pass (1)
#   wait_started NAME DIR SECS CMD...  like wait_until, but gives up (2) when NAME died
#   http_code URL                HTTP status of a GET (000 when no answer)
#   redis_ping PORT [PASSWORD]   0 when redis-server on 127.0.0.1:PORT answers PONG
#   zk_srvr PORT [HOST]          ZooKeeper's answer to the srvr four-letter word
#   zk_mode PORT [HOST]          its Mode (standalone, leader, follower); 1 when not serving
#   zk_ready PORT [HOST]         0 when ZooKeeper on HOST (127.0.0.1):PORT serves requests
#   zk_write_conf NODE_DIR PORT [MYID [A:]Q:E,... [HOST]]  a throwaway ZooKeeper's zoo.cfg
#   zk_node_start NAME DIR NODE_DIR  starts the ZooKeeper of NODE_DIR/zoo.cfg (proc_start)
#   pg_as_postgres CMD...        CMD as the postgres user
#   pg_initdb DIR                a throwaway PostgreSQL's database cluster, named in
#                                DIR/pg.data; pg_data_gone DIR removes it (server stopped)
#   seckill_bin                  path of the server: $SECKILL_BIN, $SECKILL_BUILD/seckill,
#                                or build/seckill
#   usage_from_header SCRIPT [STATUS]  print SCRIPT's header comment as its usage, exit
#
# Processes are found again only through their pid files, and a pid is only signalled
# when /proc shows it is still the process that was started (same start time, kept in
# DIR/NAME.start), so a recycled pid is never hit.

SECKILL_ROOT=${SECKILL_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

log() { printf '%s\n' "$*" >&2; }

# The header comment of SCRIPT (from line 2 down to "set -euo"), without its "# ".
usage_from_header() {
    sed -n '2,/^set -euo/p' "$1" | sed -e '/^set -euo/d' -e '/^# shellcheck/d' -e 's/^# \{0,1\}//'
    exit "${2:-2}"
}
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# Ports recently handed out by free_port, by any script of this user: one empty file per
# port, created atomically (noclobber), so that picks made in subshells ($(free_port))
# or by concurrent scripts differ even before the first one is bound. A reservation
# expires after two minutes; by then the port is bound (and seen by ss) or abandoned.
# Always under /tmp, whatever TMPDIR says: tests/run.sh gives each test a TMPDIR of its
# own, and tests running side by side must see each other's reservations (the cmocka
# tests' test_free_port uses the same directory).
_LIB_PORTS_DIR=/tmp/seckill-ports.$(id -u)

# free_port: prints a TCP port in [10000, ephemeral range start) with no socket on it.
# Callers must still handle losing the race (the start helpers retry on "in use").
# FREE_PORT_BUS=1 (a Redis Cluster node's): its bus port, port + 10000, is below the
# ephemeral range too. Else a client's connection (or its TIME_WAIT) can hold the bus
# port when a killed node is started again on its own port, and the node cannot bind it.
free_port() {
    local lo=10000 hi=32767 range p try
    if [[ -r /proc/sys/net/ipv4/ip_local_port_range ]]; then
        read -r range _ </proc/sys/net/ipv4/ip_local_port_range
        if ((range > lo + 1000)); then hi=$((range - 1)); fi
    fi
    if ((${FREE_PORT_BUS:-0})); then hi=$((hi - 10000)); fi
    mkdir -p "$_LIB_PORTS_DIR" 2>/dev/null || true
    find "$_LIB_PORTS_DIR" -type f -mmin +2 -delete 2>/dev/null || true
    for ((try = 0; try < 200; try++)); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
        # Any socket (listening or connected) on that local port disqualifies it.
        if [[ -n $(ss -Htan "( sport = :$p )" 2>/dev/null) ]]; then continue; fi
        # Belt and braces where ss is missing: nobody must accept a connection.
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
        if [[ -d $_LIB_PORTS_DIR ]] && ! (set -C && : >"$_LIB_PORTS_DIR/$p") 2>/dev/null; then
            continue # somebody reserved it a moment ago
        fi
        echo "$p"
        return 0
    done
    log "free_port: no free port found"
    return 1
}

_proc_pid() { # NAME DIR -> pid on stdout, 1 when there is no pid file
    local f="$2/$1.pid" pid
    [[ -s $f ]] || return 1
    read -r pid <"$f" || true
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    echo "$pid"
}

# proc_alive NAME DIR: the recorded process exists, is not a zombie, and is ours.
proc_alive() {
    local name=$1 dir=$2 pid state want
    pid=$(_proc_pid "$name" "$dir") || return 1
    [[ -d /proc/$pid ]] || return 1
    state=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z && $state != X ]] || return 1
    if [[ -s $dir/$name.start ]]; then
        read -r want <"$dir/$name.start"
        [[ $(_proc_starttime "$pid") == "$want" ]] || return 1
    fi
    return 0
}

_proc_starttime() { # PID -> start time in clock ticks since boot (field 22 of stat)
    awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null
}

# proc_start NAME DIR CMD ARGS...: starts CMD in its own session (terminal signals
# such as Ctrl-C do not reach it; whoever started it stops it with proc_stop), stdin
# from /dev/null, stdout+stderr appended to DIR/NAME.log. Writes DIR/NAME.pid (the
# pid of CMD itself) and DIR/NAME.start. Returns once the pid file exists.
proc_start() {
    local name=$1 dir=$2 prog i pid
    shift 2
    if proc_alive "$name" "$dir"; then
        log "proc_start: $name already runs (pid $(_proc_pid "$name" "$dir"))"
        return 1
    fi
    prog=$(command -v "$1") || {
        log "proc_start: $1: not found"
        return 1
    }
    rm -f "$dir/$name.pid" "$dir/$name.start"
    # The inner shell records its own pid and then becomes CMD (exec keeps the pid).
    # shellcheck disable=SC2016 # expanded by the inner shell
    setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' \
        "$dir/$name.pid" "$prog" "${@:2}" </dev/null >>"$dir/$name.log" 2>&1 &
    for ((i = 0; i < 500; i++)); do
        if [[ -s $dir/$name.pid ]]; then
            # (pid, start time) names the process for good: a recycled pid differs.
            pid=$(_proc_pid "$name" "$dir")
            _proc_starttime "$pid" >"$dir/$name.start" || true
            return 0
        fi
        sleep 0.01
    done
    log "proc_start: $name did not start"
    return 1
}

# proc_stop NAME DIR [SECS [SIG]]: stops the process of DIR/NAME.pid if it is still ours
# (SIG, TERM by default; SIGKILL after SECS, default 10) and removes the pid file. Returns 1 only
# when the process could not be stopped.
proc_stop() {
    local name=$1 dir=$2 secs=${3:-10} sig=${4:-TERM} pid i
    pid=$(_proc_pid "$name" "$dir") || {
        rm -f "$dir/$name.pid"
        return 0
    }
    if proc_alive "$name" "$dir"; then
        kill -"$sig" "$pid" 2>/dev/null || true
        for ((i = 0; i < secs * 20; i++)); do
            proc_alive "$name" "$dir" || break
            sleep 0.05
        done
        if proc_alive "$name" "$dir"; then
            log "proc_stop: $name (pid $pid) ignored SIG$sig for ${secs}s, killing"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 100; i++)); do
                proc_alive "$name" "$dir" || break
                sleep 0.05
            done
            if proc_alive "$name" "$dir"; then
                log "proc_stop: $name (pid $pid) survived SIGKILL"
                return 1
            fi
        fi
    fi
    # Reap it when it happens to be our own child (no zombie left behind).
    wait "$pid" 2>/dev/null || true
    rm -f "$dir/$name.pid" "$dir/$name.start"
    return 0
}

# wait_until SECS CMD...: true as soon as CMD succeeds; false after SECS.
wait_until() {
    local secs=$1 deadline
    shift
    deadline=$((SECONDS + secs))
    while true; do
        "$@" && return 0
        ((SECONDS >= deadline)) && return 1
        sleep 0.05
    done
}

# wait_started NAME DIR SECS CMD...: waits for CMD like wait_until, but returns 2 at
# once when the process NAME has died (so the caller can look at its log and retry).
wait_started() {
    local name=$1 dir=$2 secs=$3 deadline
    shift 3
    deadline=$((SECONDS + secs))
    while true; do
        "$@" && return 0
        proc_alive "$name" "$dir" || return 2
        ((SECONDS >= deadline)) && return 1
        sleep 0.05
    done
}

# Did NAME die because its port was taken? (looks at the end of its log)
log_says_port_in_use() {
    tail -n 30 "$2/$1.log" 2>/dev/null | grep -qiE 'in use|EADDRINUSE|cannot bind|could not bind|bind\(\)'
}

http_code() {
    curl -s -o /dev/null -w '%{http_code}' --max-time "${2:-2}" "$1" 2>/dev/null || true
}
http_ok() { [[ $(http_code "$1") == 200 ]]; }

pg_ready() { pg_isready -q -h 127.0.0.1 -p "$1" -t 1; } # PORT

# pg_as_postgres CMD ARGS...: CMD as the postgres user.
pg_as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

# pg_initdb DIR: a database cluster made by initdb in a temp dir of its own,
# /tmp/seckill-pg.XXXXXX (owned by the postgres user, which the server must run as and
# which may not reach DIR: a test's or CI's mktemp dir is 700), named in DIR/pg.data;
# trust for every local user. initdb's output in DIR/pg-initdb.log.
pg_initdb() {
    local dir=$1 data
    data=$(mktemp -d /tmp/seckill-pg.XXXXXX) || return 1
    echo "$data" >"$dir/pg.data"
    chown postgres: "$data"
    pg_as_postgres initdb -D "$data/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 \
        --no-sync >"$dir/pg-initdb.log" 2>&1 ||
        { log "initdb failed (see $dir/pg-initdb.log)"; return 1; }
}

# pg_data_gone DIR: the data dir DIR/pg.data names removed (its server stopped first).
pg_data_gone() {
    local f
    [[ -f $1/pg.data ]] || return 0
    f=$(cat "$1/pg.data")
    [[ $f == /tmp/seckill-pg.* ]] && rm -rf "$f"
    rm -f "$1/pg.data"
}

redis_ping() { # PORT [PASSWORD]
    [[ $(redis-cli -h 127.0.0.1 -p "$1" ${2:+-a "$2"} --no-auth-warning ping 2>/dev/null) == PONG ]]
}

# ---- ZooKeeper (the zk lock mode) ---------------------------------------------------
# A throwaway ZooKeeper is the Debian package's jars in a small JVM, bound to loopback:
# one node (ZooKeeperServerMain) or a node of an ensemble (QuorumPeerMain), its admin
# server off, tickTime 500 ms (sessions down to 1 s), readiness by the srvr four-letter
# word. Node files live in a NODE_DIR: zoo.cfg, data/ (snapshots, log, myid).

ZK_TICK_MS=${ZK_TICK_MS:-500}
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
# A small JVM that starts fast: serial GC, 128 MB heap, no perf data file in /tmp.
ZK_JVM_FLAGS=(-Xmx128m -Xss512k -XX:+UseSerialGC -XX:-UsePerfData -Djava.awt.headless=true
    -Dzookeeper.admin.enableServer=false)

# zk_srvr PORT [HOST]: prints what ZooKeeper on HOST (127.0.0.1):PORT answers to srvr
# (version, latencies, Mode, ...); 1 when nobody accepts the connection. Reads for at
# most 2 s.
zk_srvr() {
    local fd out=""
    { exec {fd}<>"/dev/tcp/${2:-127.0.0.1}/$1"; } 2>/dev/null || return 1
    { printf srvr >&"$fd"; } 2>/dev/null || true
    # ZooKeeper closes the connection after its answer; on a timeout read keeps what came.
    IFS= read -r -t 2 -d '' out <&"$fd" || true
    exec {fd}<&-
    [[ -n $out ]] || return 1
    printf '%s\n' "$out"
}
# zk_mode PORT [HOST]: standalone, leader or follower; 1 when the node does not serve
# (down, or an ensemble member without a quorum: "not currently serving requests").
zk_mode() {
    local m
    m=$(zk_srvr "$1" "${2:-}" | sed -n 's/^Mode: //p') || true
    [[ -n $m ]] || return 1
    echo "$m"
}
zk_ready() { zk_mode "$1" "${2:-}" >/dev/null; }

# zk_write_conf NODE_DIR PORT [MYID SERVERS [HOST]]: NODE_DIR/zoo.cfg for a node
# serving clients on HOST (127.0.0.1):PORT. With MYID and SERVERS (comma-separated
# QUORUM:ELECTION port pairs, node 1 first, each on 127.0.0.1, or ADDRESS:QUORUM:ELECTION
# for a member on an address of its own) the node is member MYID of that ensemble;
# NODE_DIR/data/myid says which one it is.
zk_write_conf() {
    local node_dir=$1 port=$2 myid=${3:-} servers=${4:-} host=${5:-127.0.0.1} i=0 pair
    mkdir -p "$node_dir/data"
    {
        echo "# written by scripts/lib.sh zk_write_conf"
        echo "tickTime=$ZK_TICK_MS"
        echo "initLimit=20"
        echo "syncLimit=5"
        echo "minSessionTimeout=$((2 * ZK_TICK_MS))"
        echo "maxSessionTimeout=60000"
        echo "dataDir=$node_dir/data"
        echo "clientPort=$port"
        echo "clientPortAddress=$host"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=srvr,stat,ruok,mntr,cons"
        # Transaction log files grow 1 MB at a time, not 64 MB.
        echo "preAllocSize=1024"
        if [[ -n $myid ]]; then
            for pair in ${servers//,/ }; do
                i=$((i + 1))
                if [[ $pair == *:*:* ]]; then echo "server.$i=$pair"; else echo "server.$i=127.0.0.1:$pair"; fi
            done
        fi
    } >"$node_dir/zoo.cfg"
    if [[ -n $myid ]]; then echo "$myid" >"$node_dir/data/myid"; else rm -f "$node_dir/data/myid"; fi
}

# zk_node_start NAME DIR NODE_DIR: starts the node of NODE_DIR/zoo.cfg as process NAME
# of DIR (DIR/NAME.pid, DIR/NAME.log); does not wait for it (zk_ready PORT does).
zk_node_start() {
    local name=$1 dir=$2 node_dir=$3 main=org.apache.zookeeper.server.ZooKeeperServerMain
    [[ -r /usr/share/java/zookeeper.jar ]] || {
        log "zk_node_start: /usr/share/java/zookeeper.jar missing (scripts/deps.sh installs zookeeper)"
        return 1
    }
    if grep -q '^server\.' "$node_dir/zoo.cfg"; then
        main=org.apache.zookeeper.server.quorum.QuorumPeerMain
    fi
    proc_start "$name" "$dir" java "${ZK_JVM_FLAGS[@]}" -cp "$ZK_CLASSPATH" "$main" \
        "$node_dir/zoo.cfg"
}

# seckill_bin: absolute path of the server binary to run.
seckill_bin() {
    local b
    if [[ -n ${SECKILL_BIN:-} ]]; then
        b=$SECKILL_BIN
    elif [[ -n ${SECKILL_BUILD:-} ]]; then
        b=$SECKILL_BUILD/seckill
    else
        b=build/seckill
    fi
    if [[ $b != /* && ! -e $b ]]; then b=$SECKILL_ROOT/$b; fi
    if [[ ! -x $b ]]; then
        log "seckill binary not found at $b (build it with make, or set SECKILL_BIN / SECKILL_BUILD)"
        return 1
    fi
    (cd "$(dirname "$b")" && printf '%s/%s\n' "$(pwd)" "$(basename "$b")")
}
