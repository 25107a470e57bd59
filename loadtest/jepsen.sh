#!/usr/bin/env bash
# jepsen.sh — make jepsen: the service under random, combined faults on a network of its
# own, checked from the clients' history, as Jepsen checks a database.
#
#   loadtest/jepsen.sh [--time S] [--runs N] [--seed N] [--rows R,R,...] [--stock N]
#                      [--faults F,F,...] [--quick] [--out DIR]
#
# Each run builds a private network of network namespaces on this machine
# (loadtest/jepsen/net.sh): the data Redis on node db, three seckill instances on s1-s3,
# redlock's lock nodes on l1-l3, zk's ZooKeeper ensemble on z1-z3, pg's PostgreSQL on
# pg, the buyers on cl. Nothing listens on loopback; every
# address is the run's own. For S seconds (--time, 30) the buyers order one SKU while a
# schedule drawn from the run's seed strikes, several faults at once at times:
#
#   cut I          instance I cut from the data Redis both ways (its buyers still reach
#                  it); packets dropped, so both ends' TCP waits and retransmits
#   oneway-out I   only I's packets to Redis dropped; oneway-in I: only Redis's to I
#   isolate I      instance I cut from every node, its buyers too
#   flap I         I cut from Redis and healed again every 200-500 ms
#   pause I        SIGSTOP instance I for 2-6 lock leases (zk: sessions), then SIGCONT
#   kill I         kill -9 instance I, started again when the fault ends
#   pacer-pause, pacer-kill  (row room) pause or kill the instance that holds the
#                  waiting rooms' pacer lease when the fault starts (its /metrics says
#                  seckill_room_pacer 1; none found: one drawn at random)
#   redis-kill     kill -9 the data Redis, started again on its AOF
#   lose-tail      the data Redis loses what its AOF had not made durable: the AOF's
#                  size is noted where the policy's last fsync is (appendfsync always:
#                  at the kill, everything answered was synced; everysec: when the
#                  fault starts, 1-2 s before the kill), Redis is killed -9, the AOF cut
#                  back to that size, and Redis started on it
#   lock-cut K     redlock: lock node K cut from every instance
#   clock I        instance I's wall clock strobed (libfaketime): 10 s back and 10 s
#                  ahead by turns, a second or so each, then right again
#   master-partition K@sI  (cluster rows) shard K's master, whichever node it is now, cut
#                  from every other Redis node and from the instances but sI: the
#                  majority fails its replica over, the old master takes sI's writes
#                  until it finds itself in the minority and drops them when it rejoins
#                  as a replica (loadtest/jepsen/rcluster.sh); 4-8 s
#   master-kill K  (cluster rows) kill -9 shard K's master, started again when the fault
#                  ends (it rejoins as a replica); 4-8 s. One master fault at a time
#   zk-minority K  zk: ZooKeeper node K cut from every node (the other two, the
#                  instances): the majority goes on without it
#   zk-leader      zk: the node whose srvr says it leads cut from every node for 4-7 s:
#                  the other two elect a new leader
#   zk-cut I       zk: instance I cut from every ZooKeeper node (not from Redis or its
#                  buyers): its session expires and its locks go to others; a commit of
#                  its own after that must be fenced off
#   zk-kill K      zk: kill -9 ZooKeeper node K, started again on its data when the
#                  fault ends
#   pg-cut I       pg: instance I cut from PostgreSQL (its leases run out there)
#   pg-isolate     pg: PostgreSQL cut from every node
#   pg-restart     pg: PostgreSQL shut down fast (SIGINT to the postmaster), started
#                  again on its data when the fault ends
#
# then every fault heals, the buyers go on for 5 s, and stop. Each run's directory
# (results/jepsen-latest/RUN/) has the buyers' history (history.jsonl: every try of every
# request, invoke and ok/fail/info, loadtest/chaosclient.c), the end state (final.json:
# every order the history names, as GET /orders/{id} tells, loadtest/jepsen/final.py),
# the run (run.json: the SKU, seed and faults with their times) and the checker's
# verdict (check.json) and chart (latency.svg: each request's latency over time, the
# faults shaded), by loadtest/jepsen/checker.py, which reads the history and nothing
# of the service's own audit.
#
# Rows (--rows; the default every one; --quick: CI's short pass, QUICK_ROWS once each,
# 20 s):
#   redis atomic redlock      the safe modes, fsync always, every fault: no violation
#   zk                        --lock zk on a 3-node ensemble, sessions of 1.5 s: the
#                             instance faults, redis-kill and the zk faults
#   pg                        --lock pg on PostgreSQL 15 (its sink too): the instance
#                             faults, redis-kill and the pg faults
#   life-redis                redis with a payment window of 1 s: buyers pay, cancel or
#                             walk away, units come back and are sold again
#   none local                unsafe locks: the checker must find the oversell
#   nofence                   redis --fencing off under pauses of a holder: must oversell
#   everysec                  redis with appendfsync everysec losing its AOF tail: the
#                             checker must find acknowledged orders lost
#   cluster                   redis on a Redis Cluster (3 masters m1-m3, a replica each
#                             r1-r3, nodes in their own namespaces, fsync always) and
#                             --min-replicas-acked 1 (WAIT), under master-partition,
#                             master-kill, pause, kill: no violation
#   cluster-nowait            the same with --min-replicas-acked 0, under
#                             master-partition: the checker must find lost orders
#   midsale                   redis under every fault, with a merchant changing the
#                             sale meanwhile (changer below): restocks of 30 and
#                             withdrawals of 10 by turns, each to an instance drawn
#                             at random, every 0.5-2 s until the buyers stop; stock
#                             T * 30, so that the sale sells out and restocks sell
#                             again. The changes are in the history (f "change"): the
#                             checker holds the orders to the stock they make
#   midsale-zk, midsale-pg    the same in the zk and pg rows (their faults, their
#                             lock's segment holds the readers of the change's
#                             write side)
#   room                      redis with a waiting room (ROOM_* below: 15 a second,
#                             20 live passes, passes of 2 s, the sale 5 s after the
#                             PUT) under cut, isolate, pause, kill, pacer-pause,
#                             pacer-kill, redis-kill and clock: the buyers join, poll
#                             and buy with their passes (chaosclient's CHAOS_ROOM),
#                             one in 5 walks away with its pass, one in 10 first
#                             lets a thief try it (403); stock T * 6, sold out before
#                             the end. The checker's room rules (room_rate,
#                             room_active, room_order, pass_theft) and the stock
#                             rules must find nothing
# The cluster rows read no fences: fences.py reads the MONITOR of one data Redis, and
# a cluster's fences, on whichever node was a shard's master, would be the ones a
# deposed master took and dropped as well as the kept ones (fence_order unchecked).
# An unsafe row whose violations the checker does not find fails the run: the checker
# would be blind. A safe row with any violation fails. A line per run, then a table;
# exit 0 when every run is as its row expects, 1 otherwise, 2 on a usage error.
# --faults keeps each row's schedule to those of its faults (a fault hunted alone).
# Runs replay from the seed on the first line: run REP of ROW draws its schedule from
# that seed, ROW and REP, so --seed S --rows ROW --runs REP --time T draws it again
# (the service's own timing is not replayed).
# shellcheck disable=SC2317 # its functions run from main (the last line) and the traps
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
# shellcheck source=loadtest/jepsen/net.sh
source loadtest/jepsen/net.sh
# shellcheck source=loadtest/jepsen/rcluster.sh
source loadtest/jepsen/rcluster.sh

T=30 RUNS=1 SEED=$((RANDOM * 32768 + RANDOM)) ROWS="" STOCK="" ONLY_FAULTS="" out=""
ALL_ROWS="redis atomic redlock zk pg life-redis none local nofence everysec cluster cluster-nowait"
ALL_ROWS+=" midsale midsale-zk midsale-pg room"
# CI's: one safe row of each kind of store and lifecycle, and each way of losing data
# the checker must see
QUICK_ROWS="redis life-redis nofence everysec cluster-nowait room"
while (($#)); do
    case $1 in
    --time) T=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --rows) ROWS=${2//,/ }; shift 2 ;;
    --stock) STOCK=$2; shift 2 ;;
    --faults) ONLY_FAULTS=${2//,/ }; shift 2 ;;
    --quick) T=20 RUNS=1 ROWS=${ROWS:-$QUICK_ROWS}; shift ;;
    --out) out=$2; shift 2 ;;
    -h | --help) usage_from_header "$0" 0 ;;
    *) usage_from_header "$0" 2 ;;
    esac
done
ROWS=${ROWS:-$ALL_ROWS}
usage_error() { log "error: $*"; exit 2; }
for r in $ROWS; do [[ " $ALL_ROWS " == *" $r "* ]] || usage_error "unknown row $r (rows: $ALL_ROWS)"; done
[[ $T =~ ^[0-9]+$ && $T -ge 5 && $RUNS =~ ^[0-9]+$ && $RUNS -ge 1 ]] ||
    usage_error "--time (>= 5) and --runs take whole numbers"
((EUID == 0)) || die "jepsen.sh builds network namespaces: it needs root"

BIN=$(seckill_bin)
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
CLIENT=$(cd "${SECKILL_BUILD:-build}" && pwd)/loadtest/chaosclient
BATCH_LUA=${SECKILL_BUILD:-build}/gen/inventory/lua/batch.lua
[[ -f $BATCH_LUA ]] || BATCH_LUA=build/gen/inventory/lua/batch.lua
[[ -x $CLIENT ]] || die "$CLIENT not built (make build/loadtest/chaosclient)"
if [[ -z $out ]]; then
    out=results/jepsen-$(date +%Y%m%d-%H%M%S)
    mkdir -p "$out"
    ln -sfn "$(basename "$out")" results/jepsen-latest
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# the instances' clocks are libfaketime's, each reading its offset from DIR/faketime.I
FAKETIME_LIB=$(dpkg -L libfaketime 2>/dev/null | grep -m1 'libfaketimeMT\.so\.1$') || FAKETIME_LIB=""
TOKEN=jepsen-admin
PORT=8080
REDIS_PORT=6379
TTL_MS=500      # the lock lease: the pauses last 2-6 of them
PACE_MS=40      # each buyer's pace: 6 buyers, 150 orders/s at most
LOOPS=6         # buyers 1-3 a new user per order, 4-6 forty users each (the limit is met)
SEGMENTS=4
LIMIT=2
RECOVER_S=5     # the buyers go on this long once every fault healed
ZK_PORT=2181    # each ZooKeeper node's client port (quorum 2888, election 3888)
ZK_SESSION_MS=1500 # zk's session timeout, its lease: a cut or a pause of 2 s expires it
PG_PORT=5432
# the room row's waiting room: 15 admissions a second, 20 live passes at most, each
# for 2 s; the sale starts 5 s after the SKU is made (the buyers join a pre-queue
# first); 6 buyers join a new user each every 200 ms (30 a second, twice the rate),
# one in 5 walks away with its pass unused (so that max_active binds), one in 10
# first tries another user's pass (a thief: 403)
ROOM_RATE=15 ROOM_MAX=20 ROOM_TTL_MS=2000 ROOM_START_S=5 ROOM_JOIN_MS=200 ROOM_CLIENT=20,10
ROOM_STARTS_MS=0

# ---- rows ---------------------------------------------------------------------------

# row_config ROW: sets MODE, FSYNC, FAULTS (the kinds the schedule draws from), EXPECT
# (the violations an unsafe row must show; empty: none allowed), LIFE, WORK_US, FENCING,
# LEASE_MS (the lock's lease, what a pause is measured in), NODES (the network's),
# CLUSTER (1: the data store is a Redis Cluster) and ACKED (--min-replicas-acked).
row_config() {
    MODE=$1 FSYNC=always LIFE=0 WORK_US=2000 FENCING=on EXPECT="" LEASE_MS=$TTL_MS
    CLUSTER=0 ACKED="" CHANGES=0 ROOM=0
    FAULTS="cut oneway-out oneway-in isolate flap pause kill redis-kill lose-tail"
    [[ -n $FAKETIME_LIB ]] && FAULTS+=" clock"
    NODES="db s1 s2 s3 cl"
    case $1 in
    redlock) FAULTS+=" lock-cut" NODES+=" l1 l2 l3" ;;
    zk)
        FAULTS="cut isolate pause kill redis-kill zk-minority zk-leader zk-cut zk-kill${FAKETIME_LIB:+ clock}"
        LEASE_MS=$ZK_SESSION_MS WORK_US=20000 NODES+=" z1 z2 z3" ;;
    pg)
        FAULTS="cut isolate pause kill redis-kill pg-cut pg-isolate pg-restart${FAKETIME_LIB:+ clock}"
        WORK_US=20000 NODES+=" pg" ;;
    life-redis) MODE=redis LIFE=1 ;;
    none | local) FAULTS="pause kill cut"; EXPECT=oversell ;;
    nofence) MODE=redis FENCING=off WORK_US=50000 FAULTS=pause EXPECT=oversell ;;
    everysec) MODE=redis FSYNC=everysec FAULTS=lose-tail EXPECT=lost ;;
    # ACKED given, not left to the default: an instance started again while a shard
    # has no replica would resolve the default to 0
    cluster) MODE=redis CLUSTER=1 ACKED=1 FAULTS="master-partition master-kill pause kill${FAKETIME_LIB:+ clock}" ;;
    cluster-nowait) MODE=redis CLUSTER=1 ACKED=0 FAULTS=master-partition EXPECT=lost ;;
    midsale) MODE=redis CHANGES=1 ;;
    midsale-zk | midsale-pg) row_config "${1#midsale-}"; CHANGES=1 ;;
    room)
        MODE=redis ROOM=1
        FAULTS="cut isolate pause kill pacer-pause pacer-kill redis-kill${FAKETIME_LIB:+ clock}" ;;
    esac
    if [[ -n $ONLY_FAULTS ]]; then
        local f kept=""
        for f in $FAULTS; do [[ " $ONLY_FAULTS " == *" $f "* ]] && kept+=" $f"; done
        FAULTS=${kept# }
    fi
}

# ---- the network and what runs on it -------------------------------------------------

redis_args() { # DIR: the data Redis's flags
    local -a a=(--bind "$(net_addr db)" --port "$REDIS_PORT" --dir "$1/db" --save ""
        --appendonly yes --appendfsync "$FSYNC" --protected-mode no --daemonize no --logfile "")
    printf '%s\n' "${a[@]}"
}

# redis_start DIR: the data Redis on its AOF, and once it answers, a MONITOR of it
# (DIR/monitor.log, appended to across restarts), from which loadtest/jepsen/fences.py
# reads the fencing tokens Redis let through
redis_start() {
    local -a a
    mapfile -t a < <(redis_args "$1")
    mkdir -p "$1/db"
    net_start db redis "$1" redis-server "${a[@]}"
    wait_until 10 redis_up || { echo "Redis did not start again"; return 1; }
    proc_stop monitor "$1" 1 KILL >/dev/null 2>&1 || true
    net_start cl monitor "$1" redis-cli -h "$(net_addr db)" -p "$REDIS_PORT" MONITOR
}
redis_up() { net_exec cl redis-cli -h "$(net_addr db)" -p "$REDIS_PORT" PING 2>/dev/null | grep -q PONG; }

# nodes_csv PREFIX PORT: "ADDR:PORT,..." of nodes PREFIX1-PREFIX3 (redlock's lock nodes
# l, ZooKeeper's z, a Redis Cluster's masters m), as the instances' flags take them
nodes_csv() {
    local k csv=""
    for k in 1 2 3; do csv+=${csv:+,}$(net_addr "$1$k"):$2; done
    echo "$csv"
}

# ZooKeeper (zk): node K on zK, its files in DIR/zK (lib.sh's zoo.cfg, on its address)
zk_node_up() { # DIR K: node K started (once written, its zoo.cfg is kept)
    local k servers=""
    if [[ ! -f $1/z$2/zoo.cfg ]]; then
        for k in 1 2 3; do servers+=${servers:+,}$(net_addr "z$k"):2888:3888; done
        zk_write_conf "$1/z$2" "$ZK_PORT" "$2" "$servers" "$(net_addr "z$2")"
    fi
    net_start "z$2" "zk-$2" "$1" java "${ZK_JVM_FLAGS[@]}" -cp "$ZK_CLASSPATH" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$1/z$2/zoo.cfg"
}
# zk_mode_of K: node K's Mode, asked in its own namespace (so a cut does not hide it)
zk_mode_of() {
    # shellcheck disable=SC2016 # expanded by the inner shell
    net_exec "z$1" bash -c 'source scripts/lib.sh && zk_mode "$1" "$2"' _ "$ZK_PORT" "$(net_addr "z$1")"
}
zk_leader_of() { local k; for k in 1 2 3; do [[ $(zk_mode_of "$k") == leader ]] && { echo "$k"; return 0; }; done; return 1; }
zk_quorum() { # one leader, two followers
    local k m modes=""
    for k in 1 2 3; do m=$(zk_mode_of "$k") || return 1; modes+="$m "; done
    [[ $(tr ' ' '\n' <<<"$modes" | sort | tr '\n' ' ') == " follower follower leader " ]]
}
zk_modes() { local k; for k in 1 2 3; do printf 'z%d %s; ' "$k" "$(zk_mode_of "$k" || echo "not serving")"; done; }

# PostgreSQL (pg): a cluster made by initdb in a temp dir of the postgres user's
# (/tmp/seckill-pg.XXXXXX, named in DIR/pg.data, removed by pg_gone), trusting the
# run's subnet; the postmaster on pg's address
pg_url() { echo "postgresql://postgres@$(net_addr pg):$PG_PORT/postgres"; }
pg_up() { net_exec cl pg_isready -q -h "$(net_addr pg)" -p "$PG_PORT" -t 1; }
pg_init() { # DIR: lib.sh's pg_initdb, trusting the run's subnet too
    local addr
    pg_initdb "$1" 2>&1 || return 1
    addr=$(net_addr pg)
    echo "host all all ${addr%.*}.0/24 trust" >>"$(cat "$1/pg.data")/data/pg_hba.conf"
}
pg_start() { # DIR: the server, waited for
    local data
    data=$(cat "$1/pg.data")
    net_start pg pg "$1" setpriv --reuid=postgres --regid=postgres --init-groups \
        postgres -D "$data/data" -p "$PG_PORT" -k "$data" -c listen_addresses="$(net_addr pg)" \
        -c max_connections=200
    wait_until 30 pg_up || { echo "PostgreSQL did not start (see $1/pg.log)"; return 1; }
}
pg_stop() { proc_stop pg "$1" 30 INT; } # DIR: a fast shutdown
pg_gone() { # DIR: the server stopped, its data dir removed
    [[ -f $1/pg.data ]] || return 0
    pg_stop "$1" && pg_data_gone "$1"
}

instance_start() { # DIR I
    local redis
    if ((CLUSTER)); then redis=$(nodes_csv m "$REDIS_PORT"); else redis=$(net_addr db):$REDIS_PORT; fi
    local -a a=(--listen "$(net_addr "s$2"):$PORT" --admin-token "$TOKEN"
        --redis "$redis" --lock "$MODE" --instance-id "$2" --threads 1
        --max-conns-per-ip 0 --lock-ttl-ms "$TTL_MS" --work-us "$WORK_US" --fencing "$FENCING")
    [[ $MODE == redlock ]] && a+=(--lock-nodes "$(nodes_csv l "$REDIS_PORT")")
    [[ -n $ACKED ]] && a+=(--min-replicas-acked "$ACKED")
    [[ $MODE == zk ]] && a+=(--zk "$(nodes_csv z "$ZK_PORT")" --zk-session-ms "$ZK_SESSION_MS")
    [[ $MODE == pg ]] && a+=(--postgres "$(pg_url)")
    local -a clock=()
    if [[ -n $FAKETIME_LIB ]]; then
        [[ -f $1/faketime.$2 ]] || echo "+0" >"$1/faketime.$2"
        clock=(env LD_PRELOAD="$FAKETIME_LIB" FAKETIME_TIMESTAMP_FILE="$1/faketime.$2"
            FAKETIME_CACHE_DURATION=1 DONT_FAKE_MONOTONIC=1)
    fi
    net_start "s$2" "s$2" "$1" "${clock[@]}" "$BIN" "${a[@]}"
}
instance_url() { echo "http://$(net_addr "s$1"):$PORT"; }
instance_ready() { [[ $(net_exec cl curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$(instance_url "$1")/readyz") == 200 ]]; }
all_ready() { local i; for i in 1 2 3; do instance_ready "$i" || return 1; done; }

put_sku() { # SKU STOCK
    local extra=""
    ((LIFE)) && extra=',"pay_within_ms":1000'
    if ((ROOM)); then
        extra=",\"starts_at\":\"$(date -u -d "@$((ROOM_STARTS_MS / 1000)).$(printf %03d $((ROOM_STARTS_MS % 1000)))" +%Y-%m-%dT%H:%M:%S.%3NZ)\""
        extra+=",\"room\":{\"rate_per_s\":$ROOM_RATE,\"max_active\":$ROOM_MAX,\"pass_ttl_ms\":$ROOM_TTL_MS}"
    fi
    net_exec cl curl -sf -o /dev/null --max-time 10 -X PUT -H 'Content-Type: application/json' \
        -H "Authorization: Bearer $TOKEN" \
        -d "{\"stock\":$2,\"segments\":$SEGMENTS,\"per_user_limit\":$LIMIT$extra}" \
        "$(instance_url 1)/skus/$1?reset=true"
}

client_start() { # DIR C SKU
    local dir=$1 c=$2 i=$((($2 - 1) % 3 + 1)) users=0 life=() room="" pace=$PACE_MS
    ((c > 3)) && users=40
    ((LIFE)) && life=(70 10 -)
    # the room's buyers: a new one joins every ROOM_JOIN_MS, fresh users each
    ((ROOM)) && room=$ROOM_CLIENT users=0 pace=$ROOM_JOIN_MS
    CHAOS_HOST=$(net_addr "s$i") CHAOS_TOKEN=$TOKEN CHAOS_USERS=$users CHAOS_ROOM=$room \
        CHAOS_HISTORY=$dir/history.$c.jsonl \
        net_start cl "client-$c" "$dir" "$CLIENT" "$c" "$PORT" "/skus/$3/orders" "$dir/stop" \
        "$pace" "${life[@]}"
}

# ---- the merchant's changes (row midsale) ---------------------------------------------

CHANGER_PROCESS=100 # the changer's process number in the history (the buyers': 1-6)
CHANGER_PID=""      # the run's changer while it runs (stopped by cleanup)
# change_history DIR TYPE TIME_US BODY [STATUS ERROR WITHDRAWN]: one line of the
# changer's history (DIR/history.changes.jsonl), BODY its "add" and "withdraw" fields
change_history() {
    local t="${3:0:-3}.${3: -3}" line
    line="{\"process\":$CHANGER_PROCESS,\"type\":\"$2\",\"f\":\"change\",\"time\":$t,$4"
    [[ $2 == invoke ]] || line+=",\"status\":$5,\"error\":$6,\"withdrawn\":$7"
    echo "$line}" >>"$1/history.changes.jsonl"
}

# change_one DIR N: the changer's N-th change (even: a restock of 30, odd: a withdrawal
# of 10) sent to an instance drawn at random, recorded: ok for a 200, fail for an
# answer that changed nothing (503 busy: a stale writer fenced off or the write side
# not had; 4xx, 501), info for anything else (no answer, 503 unavailable, 502, 504).
change_one() {
    local dir=$1 n=$2 i=$((RANDOM % 3 + 1)) body req out code err type withdrawn=null
    if ((n % 2 == 0)); then
        body='"add":30,"withdraw":0' req='{"add":30}'
    else
        body='"add":0,"withdraw":10' req='{"withdraw":10}'
    fi
    change_history "$dir" invoke "${EPOCHREALTIME/./}" "$body"
    out=$(net_exec cl curl -s --max-time 10 -w '\n%{http_code}' -X PATCH \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
        -d "$req" "$(instance_url "$i")/skus/jepsen" 2>/dev/null) || true
    code=${out##*$'\n'}
    [[ $code =~ ^[0-9]{3}$ ]] && code=$((10#$code)) || code=0 # 000: no answer
    err=$(jq -c '.error // null' <<<"${out%$'\n'*}" 2>/dev/null) || err=null
    [[ -n $err ]] || err=null
    case $code in
    200) type=ok withdrawn=$(jq -r '.withdrawn // 0' <<<"${out%$'\n'*}" 2>/dev/null) ;;
    4?? | 501) type=fail ;;
    503) if [[ $err == '"busy"' ]]; then type=fail; else type=info; fi ;;
    *) type=info ;;
    esac
    [[ $type == ok && ! $withdrawn =~ ^[0-9]+$ ]] && withdrawn=0
    change_history "$dir" "$type" "${EPOCHREALTIME/./}" "$body" "$code" "$err" "$withdrawn"
}

# changer DIR SEED: changes every 0.5-2 s until DIR/stop appears (run in the
# background; the buyers' stop ends it)
changer() {
    local dir=$1 n=0
    RANDOM=$2
    : >"$dir/history.changes.jsonl"
    sleep 1 # the buyers first
    while [[ ! -e $dir/stop ]]; do
        change_one "$dir" "$n"
        n=$((n + 1))
        sleep "0.$((500 + RANDOM % 1500))"
    done
}

# ---- faults ------------------------------------------------------------------------

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

# The partitions in force, one "KIND TARGET" line each: a heal takes every drop rule
# away and puts back those of the faults still on.
declare -A ACTIVE=()
partition_apply() { # KIND TARGET
    case $1 in
    cut | flap) net_cut "s$2" db ;;
    oneway-out) net_cut_oneway "s$2" db ;;
    oneway-in) net_cut_oneway db "s$2" ;;
    isolate) net_isolate "s$2" ;;
    lock-cut) net_isolate "l$2" ;;
    master-partition) rc_partition_apply "$2" ;;
    zk-minority) net_isolate "$2" ;;
    zk-leader) net_isolate "z$ZK_LEADER_CUT" ;;
    zk-cut) net_cut "s$2" z1 && net_cut "s$2" z2 && net_cut "s$2" z3 ;;
    pg-cut) net_cut "s$2" pg ;;
    pg-isolate) net_isolate pg ;;
    esac
}
partitions_reapply() {
    local k
    net_heal
    for k in "${!ACTIVE[@]}"; do partition_apply "${k%%:*}" "${k#*:}"; done
}

aof_incr() { # DIR: the AOF file Redis appends to now
    local d=$1/db/appendonlydir
    echo "$d/$(awk '$6 == "i" { f = $2 } END { print f }' "$d"/*.manifest)"
}

TAIL_SIZE="" ZK_LEADER_CUT="" PACER_HIT=""
# pacer_of: the instance holding the rooms' pacer lease (its /metrics says
# seckill_room_pacer 1), asked from the buyers' node
pacer_of() {
    local i
    for i in 1 2 3; do
        net_exec cl curl -s --max-time 1 "$(instance_url "$i")/metrics" 2>/dev/null |
            grep -q '^seckill_room_pacer 1$' && { echo "$i"; return 0; }
    done
    return 1
}
fault_start() { # DIR KIND TARGET
    local dir=$1 kind=$2 t=$3
    case $kind in
    cut | oneway-out | oneway-in | isolate | flap | lock-cut | zk-minority | zk-cut | pg-cut | pg-isolate)
        ACTIVE[$kind:$t]=1
        partition_apply "$kind" "$t" ;;
    zk-leader)
        ZK_LEADER_CUT=$(zk_leader_of) || { echo "no leader: nothing cut"; return 0; }
        ACTIVE[$kind:$t]=1
        partition_apply "$kind" "$t"
        echo "leader z$ZK_LEADER_CUT cut" ;;
    zk-kill)
        proc_stop "zk-${t#z}" "$dir" 1 KILL >/dev/null 2>&1 || true
        zk_modes ;;
    pg-restart) pg_stop "$dir" ;;
    pause) kill -STOP "$(cat "$dir/s$t.pid")" ;;
    kill) proc_stop "s$t" "$dir" 1 KILL >/dev/null 2>&1 || true ;;
    pacer-pause | pacer-kill)
        if PACER_HIT=$(pacer_of); then echo "the pacer: s$PACER_HIT"; else
            PACER_HIT=$((RANDOM % 3 + 1))
            echo "no pacer found: s$PACER_HIT drawn"
        fi
        fault_start "$dir" "${kind#pacer-}" "$PACER_HIT" ;;
    redis-kill) proc_stop redis "$dir" 1 KILL >/dev/null 2>&1 || true ;;
    lose-tail) TAIL_SIZE=$(stat -c %s "$(aof_incr "$dir")") ;;
    clock-back) echo "-10" >"$dir/faketime.$t" ;;
    clock-ahead) echo "+10" >"$dir/faketime.$t" ;;
    master-partition | master-kill) rc_fault_start "$dir" "$kind" "$t" ;;
    esac
}
fault_end() { # DIR KIND TARGET
    local dir=$1 kind=$2 t=$3 f
    case $kind in
    cut | oneway-out | oneway-in | isolate | flap | lock-cut | zk-minority | zk-leader | zk-cut | pg-cut | pg-isolate)
        # the ensemble as the fault left it, before the heal
        if [[ $kind == zk-* ]]; then zk_modes; fi
        unset "ACTIVE[$kind:$t]"
        partitions_reapply
        if [[ $kind == zk-leader ]]; then ZK_LEADER_CUT=""; fi ;;
    zk-kill) zk_node_up "$dir" "${t#z}" ;;
    pg-restart) pg_start "$dir" ;;
    pause) kill -CONT "$(cat "$dir/s$t.pid")" ;;
    kill) instance_start "$dir" "$t" ;;
    pacer-pause | pacer-kill) fault_end "$dir" "${kind#pacer-}" "$PACER_HIT" ;;
    redis-kill) redis_start "$dir" ;;
    lose-tail)
        proc_stop redis "$dir" 1 KILL >/dev/null 2>&1 || true
        f=$(aof_incr "$dir")
        [[ $FSYNC == always ]] && TAIL_SIZE=$(stat -c %s "$f")
        echo "lost $(($(stat -c %s "$f") - TAIL_SIZE)) bytes of the AOF"
        truncate -s "$TAIL_SIZE" "$f"
        redis_start "$dir" ;;
    clock-back | clock-ahead) echo "+0" >"$dir/faketime.$t" ;;
    master-partition | master-kill) rc_fault_end "$dir" "$kind" "$t" ;;
    esac
}

# schedule SEED: the run's faults, "START_MS END_MS KIND TARGET" a line each (from the
# run's start), drawn from SEED: a new fault every 1-4 s, lasting 1-5 s, at most two
# at once and never two on one target; flap as cuts of 200-500 ms with gaps as long;
# clock as steps back and ahead by turns, 1-1.5 s each (libfaketime reads its offset
# once a second).
schedule() {
    RANDOM=$1
    local t=1000 end=$((T * 1000 - 1500)) kind target d n k busy line
    local -a kinds lines=()
    read -r -a kinds <<<"$FAULTS"
    ((${#kinds[@]})) || return 0 # no fault of the row left (--faults)
    while ((t < end)); do
        kind=${kinds[RANDOM % ${#kinds[@]}]}
        case $kind in
        redis-kill | lose-tail) target=db ;;
        pacer-*) target=pacer ;;
        lock-cut) target=$((RANDOM % 3 + 1)) ;;
        master-partition) target=shard$((RANDOM % 3 + 1))@s$((RANDOM % 3 + 1)) ;;
        master-kill) target=shard$((RANDOM % 3 + 1)) ;;
        zk-minority | zk-kill) target=z$((RANDOM % 3 + 1)) ;;
        zk-leader) target=zk ;;
        pg-isolate | pg-restart) target=pg ;;
        *) target=$((RANDOM % 3 + 1)) ;;
        esac
        d=$((1000 + RANDOM % 4000))
        [[ $kind == pause || $kind == pacer-pause ]] && d=$((LEASE_MS * (2 + RANDOM % 5)))
        # a leader cut off steps down after syncLimit (2.5 s), the others elect then
        [[ $kind == zk-leader ]] && d=$((4000 + RANDOM % 3000))
        [[ $kind == lose-tail && $FSYNC == everysec ]] && d=$((1000 + RANDOM % 1000))
        [[ $kind == master-* ]] && d=$((4000 + RANDOM % 4000))
        ((t + d > end)) && d=$((end - t))
        # at most two at once, one per target (the data Redis counts as every
        # instance's: a kill of it meets no partition of theirs; the ZooKeeper
        # nodes count as one, and as busy 2 s more, while a node back syncs with its
        # leader: one of them at most is away, so the majority stands)
        n=0 busy=0
        for line in "${lines[@]}"; do
            read -r s e k x <<<"$line"
            [[ $x == z* && $target == z* ]] && ((s < t + d && e + 2000 > t)) && busy=1
            ((s < t + d && e > t)) || continue
            n=$((n + 1))
            [[ $x == "$target" || $x == db || $target == db ]] && busy=1
            # the pacer is whichever instance holds the lease then: busy with each
            [[ $x == pacer && $target == [0-9] || $target == pacer && $x == [0-9] ]] && busy=1
            # one master fault at a time (an instance's fault may meet one: on the
            # instance left with a cut-off master, it takes that master's writers away)
            [[ $k == master-* && $kind == master-* ]] && busy=1
        done
        # a master fault too short for a failover (2 node timeouts and an election)
        [[ $kind == master-* ]] && ((d < 4000)) && busy=1
        if ((n < 2 && !busy && d >= 300)); then
            if [[ $kind == clock ]]; then
                local s0=$t step="clock-back"
                while ((s0 < t + d)); do
                    local on=$((1000 + RANDOM % 500))
                    lines+=("$s0 $((s0 + on)) $step $target")
                    s0=$((s0 + on))
                    if [[ $step == clock-back ]]; then step="clock-ahead"; else step="clock-back"; fi
                done
            elif [[ $kind == flap ]]; then
                local s0=$t
                while ((s0 < t + d)); do
                    local on=$((200 + RANDOM % 300))
                    lines+=("$s0 $((s0 + on)) flap $target")
                    s0=$((s0 + 2 * on))
                done
            else
                lines+=("$t $((t + d)) $kind $target")
            fi
        fi
        t=$((t + 1000 + RANDOM % 3000))
    done
    printf '%s\n' "${lines[@]}"
}

# play DIR T0: the run's schedule (DIR/schedule), in time: starts and ends in the order
# of their moments; each done is logged with its real time in DIR/faults.log.
play() {
    local dir=$1 t0=$2 at what kind target wait msg
    while read -r at what kind target; do
        wait=$((t0 + at - $(now_ms)))
        ((wait > 0)) && sleep "$(printf '%d.%03d' $((wait / 1000)) $((wait % 1000)))"
        # in this shell, not $(...)'s: the faults on (ACTIVE, TAIL_SIZE) are kept here
        "fault_$what" "$dir" "$kind" "$target" >"$dir/fault.out" 2>&1 ||
            echo "(failed)" >>"$dir/fault.out"
        msg=$(tr '\n' ' ' <"$dir/fault.out")
        echo "$(now_ms) $what $kind $target $msg" >>"$dir/faults.log"
    done < <(awk '{ print $1, "start", $3, $4; print $2, "end", $3, $4 }' "$dir/schedule" | sort -n -s -k1,1)
}

# ---- a run -----------------------------------------------------------------------------

# heal_all DIR: every fault of the schedule over, whatever it was doing when stopped
heal_all() {
    local dir=$1 i
    ACTIVE=()
    net_heal
    for i in 1 2 3; do
        [[ -f $dir/faketime.$i ]] && echo "+0" >"$dir/faketime.$i"
        proc_alive "s$i" "$dir" && kill -CONT "$(cat "$dir/s$i.pid")" 2>/dev/null
        proc_alive "s$i" "$dir" || instance_start "$dir" "$i"
    done
    if ((CLUSTER)); then rc_heal "$dir"; else proc_alive redis "$dir" || redis_start "$dir"; fi
    if [[ $MODE == zk ]]; then
        for i in 1 2 3; do proc_alive "zk-$i" "$dir" || zk_node_up "$dir" "$i"; done
        wait_until 60 zk_quorum || echo "no ZooKeeper quorum 60 s after the heal: $(zk_modes)"
    fi
    if [[ $MODE == pg ]]; then proc_alive pg "$dir" || pg_start "$dir"; fi
}

clients_done() { local c; for c in $(seq "$LOOPS"); do ! proc_alive "client-$c" "$1" || return 1; done; }

# run_json DIR ROW SEED STOCK: DIR/run.json, the faults' times from faults.log
run_json() {
    local dir=$1
    local room=null
    ((ROOM)) && room="{\"rate_per_s\":$ROOM_RATE,\"max_active\":$ROOM_MAX,\"pass_ttl_ms\":$ROOM_TTL_MS,\"starts_ms\":$ROOM_STARTS_MS}"
    python3 - "$dir" "$2" "$3" "$4" "$LIMIT" "$((LIFE ? 1000 : 0))" "$room" <<'PY'
import json, sys
d, row, seed, stock, limit, pay, room = sys.argv[1:]
faults, open_ = [], {}
for line in open(f"{d}/faults.log"):
    w = line.split()
    if len(w) < 4 or w[1] not in ("start", "end"):
        continue
    t, what, kind, target = w[:4]
    if what == "start":
        open_[(kind, target)] = float(t)
    elif (kind, target) in open_:
        faults.append({"kind": kind, "target": target, "start": open_.pop((kind, target)), "end": float(t)})
json.dump({"sku": "jepsen", "stock": int(stock), "per_user_limit": int(limit),
           "pay_within_ms": int(pay), "staleness_ms": 1000, "mode": row, "seed": int(seed),
           "faults": faults, "room": json.loads(room)}, open(f"{d}/run.json", "w"))
PY
}

NET_DIR="" # net.sh's: the run's network while it is up
RUN_DIR="" # the run's directory (its PostgreSQL's data dir is removed with pg_gone)
run_one() { # ROW REP
    local row=$1 rep=$2 dir seed stock c rc=0 verdict expect=() t0
    row_config "$row"
    seed=$(((SEED + $(cksum <<<"$row $rep" | cut -d' ' -f1)) % 2147483647))
    dir=$out/$row-$rep
    RUN_DIR=$dir
    rm -rf "$dir"
    mkdir -p "$dir"
    stock=${STOCK:-$((T * 60))}
    ((LIFE)) && stock=${STOCK:-$((T * 20))}
    ((CHANGES)) && stock=${STOCK:-$((T * 30))}
    # the room's: sold out two thirds in (the rate's admissions, one in 5 unused)
    ((ROOM)) && stock=${STOCK:-$((T * 6))}
    schedule "$seed" >"$dir/schedule"
    : >"$dir/faults.log"
    local nodes
    read -r -a nodes <<<"$NODES"
    ((CLUSTER)) && nodes=("${RC_NODES[@]}" s1 s2 s3 cl)
    net_up "$dir" "${nodes[@]}" || { echo "$row #$rep: the network did not come up"; return 1; }
    if ((CLUSTER)); then
        rc_start "$dir" >"$dir/redis-up.log" || { echo "$row #$rep: the Redis Cluster did not start"; return 1; }
    else
        redis_start "$dir" >"$dir/redis-up.log" || { echo "$row #$rep: Redis did not start"; return 1; }
    fi
    if [[ $MODE == redlock ]]; then
        for c in 1 2 3; do
            net_start "l$c" "lock-$c" "$dir" redis-server --bind "$(net_addr "l$c")" \
                --port "$REDIS_PORT" --save "" --appendonly no --protected-mode no --daemonize no --logfile ""
        done
    fi
    if [[ $MODE == zk ]]; then
        for c in 1 2 3; do zk_node_up "$dir" "$c"; done
        # JVMs start slowly here: the instances only once the ensemble has its leader
        wait_until 120 zk_quorum || { echo "$row #$rep: no ZooKeeper quorum ($(zk_modes); see $dir/zk-*.log)"; return 1; }
    fi
    if [[ $MODE == pg ]]; then
        { pg_init "$dir" && pg_start "$dir"; } >"$dir/pg-up.log" || { echo "$row #$rep: PostgreSQL did not start"; return 1; }
    fi
    for c in 1 2 3; do instance_start "$dir" "$c"; done
    wait_until 30 all_ready || { echo "$row #$rep: instances not ready (see $dir/s*.log)"; return 1; }
    ROOM_STARTS_MS=$(($(now_ms) + ROOM_START_S * 1000))
    put_sku jepsen "$stock" || { echo "$row #$rep: PUT /skus/jepsen failed"; return 1; }
    for c in $(seq "$LOOPS"); do client_start "$dir" "$c" jepsen; done
    if ((CHANGES)); then
        changer "$dir" "$seed" >"$dir/changer.log" 2>&1 &
        CHANGER_PID=$!
    fi
    t0=$(now_ms)
    play "$dir" "$t0"
    heal_all "$dir" >>"$dir/faults.log" 2>&1
    echo "$(now_ms) healed" >>"$dir/faults.log"
    wait_until 30 all_ready || true
    sleep "$RECOVER_S" # the buyers' recovery time, measured by the clock on purpose
    touch "$dir/stop"
    wait_until 30 clients_done "$dir" || echo "$row #$rep: a buyer did not stop" >&2
    if [[ -n $CHANGER_PID ]]; then
        wait "$CHANGER_PID" # its last change: 10 s at most
        CHANGER_PID=""
    fi
    cat "$dir"/history.*.jsonl >"$dir/history.jsonl"
    if ((CLUSTER)); then
        echo "fences: not read on a Redis Cluster" >"$dir/fences.log"
    else
        python3 loadtest/jepsen/fences.py "$dir/monitor.log" "$BATCH_LUA" "$dir/fences.jsonl" >"$dir/fences.log"
    fi
    run_json "$dir" "$row" "$seed" "$stock"
    net_exec cl python3 loadtest/jepsen/final.py "$(instance_url 1)" jepsen "$dir" >"$dir/final.log" 2>&1 ||
        { echo "$row #$rep: no end state ($(tail -n 1 "$dir/final.log"))"; return 1; }
    for c in 1 2 3; do # each instance's counters (fenced_off, the lock's), for the record
        net_exec cl curl -s --max-time 5 "$(instance_url "$c")/stats" >"$dir/stats.$c.json" || true
    done
    pg_gone "$dir"
    net_down "$NET_DIR"
    NET_DIR=""
    [[ -n $EXPECT ]] && expect=(--expect-invalid "$EXPECT")
    python3 loadtest/jepsen/checker.py "$dir" --json "$dir/check.json" --chart "$dir/latency.svg" \
        "${expect[@]}" >"$dir/check.txt" 2>&1 || rc=$?
    verdict=$(head -n 1 "$dir/check.txt")
    printf '%s #%d (seed %d, %d faults): %s%s\n' "$row" "$rep" "$seed" "$(wc -l <"$dir/schedule")" \
        "$( ((rc == 0)) && echo ok || echo FAILED)" " — $verdict"
    return "$rc"
}

cleanup() {
    local rc=$?
    # PostgreSQL first, by SIGINT (net_down's SIGTERM is a smart shutdown: it would
    # wait for the instances' connections)
    [[ -n $CHANGER_PID ]] && kill "$CHANGER_PID" 2>/dev/null
    [[ -n $RUN_DIR ]] && pg_gone "$RUN_DIR"
    [[ -n $NET_DIR ]] && net_down "$NET_DIR"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The runs, in a function read whole before it starts: bash reads a script as it goes,
# and an edit of this file during a long run would otherwise be read from the middle.
main() {
    local failed=0 rep row
    echo "jepsen: rows $ROWS, $RUNS run(s) of ${T} s each, seed $SEED; results in $out"
    for ((rep = 1; rep <= RUNS; rep++)); do
        for row in $ROWS; do
            run_one "$row" "$rep" || failed=$((failed + 1))
            if [[ -n $NET_DIR ]]; then net_down "$NET_DIR"; NET_DIR=""; fi
            pg_gone "$RUN_DIR"; RUN_DIR=""
        done
    done
    python3 loadtest/jepsen/summary.py "$out" || true
    ((failed == 0)) || { echo "jepsen: $failed run(s) not as their row expects"; return 1; }
    echo "jepsen: every run as its row expects"
}
main; exit
