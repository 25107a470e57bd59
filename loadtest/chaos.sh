#!/usr/bin/env bash
# chaos.sh — the fault matrix (make chaos): each fault against each lock mode it applies
# to, CHAOS_REPS times (default 10), each run on a fresh cluster of scripts/cluster.sh
# (3 instances behind nginx). An honest client buys one SKU through the balancer while a
# fault strikes at a random moment and heals; then the run is checked from the client's
# own records and the server's audit:
#
#   oversell    more units acknowledged (distinct order ids), sold or recorded than stock
#   stranded    stock left once the faults healed although every buyer was answered
#               sold out
#   limit       a user over the per-user limit (audit)
#   lost        an acknowledged order id that GET /orders/{id} does not find
#   duplicate   one order id acknowledged for two keys, or the audit's duplicate ids
#   audit       the audit not consistent
#
# The client (loadtest/chaosclient.c): 8 loops, each a new user with its own
# Idempotency-Key per order, one order per 80 ms at most (CHAOS_PACE_MS); an answer 503
# outcome_unknown or unavailable, 502, 504, or none at all (5 s), is asked again with
# the same key and body until it is final; every acknowledged id is kept. Two loops buy
# through the balancer, the others each from one instance.
#
# Faults (the moment drawn from the run's seed, printed with it), and the modes each
# runs against (fault_modes):
#   kill-instance   kill -9 an instance mid-load, then start it again (same flags, port)
#   pause-holder    SIGSTOP the instance with the most orders in flight (a lock holder)
#                   for 5 lock leases, then SIGCONT
#   kill-redis      kill -9 the data Redis (AOF always), then start it again
#   net-slow-cut    the network between an instance and the data Redis (a test proxy,
#                   tests/faultproxy.c): 100 ms each way for 2 s, then cut for 3 s
#                   (nothing passes; what was sent arrives after the heal, as TCP does)
#   clock-step      an instance's wall clock (libfaketime) 10 s back for 2 s, then 10 s
#                   ahead for 2 s, then right again
#   redlock-nodes   redlock: one of the 3 lock nodes killed, and meanwhile another killed
#                   and started again empty (lock nodes keep nothing on disk); then the
#                   first back
#   zk-expire       zk: sessions of 1.5 s: SIGSTOP an instance seen holding a lock for 2
#                   sessions (ZooKeeper expires its session and grants its locks to the
#                   others), then SIGCONT: its stale commits must be fenced off (czxid)
#   zk-restart      zk: a standalone ZooKeeper: kill -9 it, start it again 1 s later on
#                   its data (sessions are restored and resume when their clients reconnect)
#   zk-node-kill    zk: an ensemble of 3: kill -9 one node (the leader when one says so),
#                   start it again 3 s later (it rejoins the quorum as a follower)
#   pg-restart      pg: PostgreSQL stopped (a fast shutdown: every connection closed,
#                   the lock rows kept), started again 1 s later on its port and data
#   cluster-master-kill   on a Redis Cluster (3 masters, a replica each): kill -9 the
#                   master of segment 0's shard; once its replica has taken over, start
#                   it again (it rejoins as a replica)
#   cluster-migrate on a Redis Cluster: the slot of segment 0's shard moved to another
#                   master by hand (SETSLOT IMPORTING/MIGRATING, MIGRATE its keys, then
#                   SETSLOT NODE on every master)
#   midsale         the merchant's changes during the sale (PATCH /skus/{sku}; modes with
#                   a read-write lock: redis, zk, pg, and redis-nofence, where the stale
#                   change must pass; the cluster with --postgres): 4
#                   restocks of 20 and 4 withdrawals of 10 from seckill-3; then the
#                   changer paused past its lease: a restock of 50 sent to seckill-1, which
#                   keeps the write side 400 ms before its script
#                   (SECKILL_TEST_PATCH_HOLD_MS), SIGSTOPped 150 ms in, for 5 leases;
#                   meanwhile a restock of 30 from seckill-3 takes the write side once the
#                   lease ran out; SIGCONT: the stale writer's script must be fenced off;
#                   then the changer killed mid-change: a withdrawal of 10 sent to
#                   seckill-2, which dies (SECKILL_TEST_CRASH) holding the write side
#                   before its script or after it (drawn), and a withdrawal of 10 from
#                   seckill-3 after it; seckill-2 started again. Its checks (with the
#                   others'; oversell against initial + added - withdrawn):
#     fence         the stale writer's change answered 200 (or its units in the books)
#     changes       the audit's added or withdrawn is not what the changes answered 200
#                   (plus, at most, the killed one's)
#     books         sold + remaining is not initial + added - withdrawn (the audit's)
#     takeover      a change after the pause or the kill not answered 200 (the write
#                   side not had again once the lease ran out)
#
# The lifecycle (rows life-*): a SKU of 300 units (LIFE_STOCK) with a payment window of
# 1 s (PAY_MS). A buyer whose order is pending pays it (70%), cancels it (10%), each at
# a random moment in the window's first 80%, or walks away (20%: it expires and its
# units go back); one payer in 4 pays at pay_by itself, the same pay sent at once to
# each of the 3 instances. The sale goes on until every unit is paid. Rows:
#   life-F          fault F (any above) during such a sale
#   life-kill-sweeper     kill -9 an instance while units come back (1.1-2.1 s into
#                   the sale: the first walk-aways' deadlines), started again 1 s later
#   life-pause-sweeper    SIGSTOP an instance as units come back, for 5 lock leases,
#                   while the others sweep; then SIGCONT (its sweeps and pays land late)
#   life-redis-restart    kill -9 the data Redis (AOF always) as units come back, then
#                   start it again
#   life-deadline-pays    no fault but the pays at pay_by from every instance
# and more checks, from the client's records, each order's state (GET /orders/{id}) at
# the end and the audit:
#   unsettled   units still pending, or not paid, once the sale should be over
#   paid_lost   a pay answered 200 whose order is not paid; cancel_lost, the same for a
#               cancel answered 200 and an order not cancelled
#   expired_kept  a pay answered 409 expired whose order did not expire (its units
#               did not come back)
#   pay_split   one order's pays answered 200 and 409 expired (the deadline pays)
#   paid_late   a pay sent at or after pay_by (this machine's clock, which is the data
#               Redis's) answered 200
#   conflicts   orders both paid and returned, or returned twice (the audit's
#               state_conflicts + returned_twice, from the life records)
# and oversell counts paid orders (distinct ids with a 200 to a pay) over the stock.
# With PostgreSQL in the cluster (the pg rows run the sink too: --lock pg implies
# --postgres), once the sink's lag is 0 (20 s at most):
#   store       the audit's store block does not match the records in Redis (an order
#               missing from PostgreSQL, or in another state), or a change recorded
#               there twice (two events of one order and state)
#
# Modes: setnx, redis, redlock, zk, pg, atomic must pass every run. none and local, and
# redis-nofence and pg-nofence (--fencing off) under pause-holder, are unsafe: their rows
# must show violations, or the harness does not see what it claims to check (said in
# the output).
#
#   loadtest/chaos.sh [--reps N] [--faults F,F] [--modes M,M] [--pairs F:M,F:M]
#                     [--quick] [--seed S] [--out DIR]
#   --pairs      only these cells (fault:mode), instead of faults x modes
#   --quick      the short pass CI runs (make chaos CHAOS_QUICK=1): every fault once,
#                against one safe mode each, so that every safe mode meets at least two
#                faults, plus none under the pause (the harness must still see an
#                oversell), and three lifecycle cells; 17 runs instead of 130 per
#                repetition
#   CHAOS_REPS   repetitions (default 10)
#   CHAOS_PACE_MS  each client loop's least time between orders (default 80)
#
# Output: a line per run (its violations, and what the instances saw: fenced commits,
# commits after the lease was lost, the client's retries), then the matrix;
# results/chaos-<time>/chaos.json (every run: seed, fault moment, answers, audit,
# violations), chaos.svg (the matrix as a chart), runs/ (each run's client records) and
# results/chaos-latest. Exits 1 when a safe mode had any violation, or an unsafe row of
# 3 runs or more none (a single run of the pause may miss the stale holder; it says so).
set -uo pipefail
# shellcheck source=loadtest/lib.sh
source "$(dirname "$0")/lib.sh"
# The launcher's start_faultproxy (sourcing it sets -e, which this script does not run with).
_opts=$(set +o)
# shellcheck source=/dev/null # linted by itself
source "$(dirname "$0")/../scripts/cluster.sh"
eval "$_opts"
# shellcheck disable=SC2034 # read by the launcher's functions
QUIET=1

reps=${CHAOS_REPS:-10}
faults=kill-instance,pause-holder,kill-redis,net-slow-cut,clock-step,redlock-nodes,zk-expire,zk-restart,zk-node-kill,pg-restart,cluster-master-kill,cluster-migrate
faults+=,life-kill-instance,life-pause-holder,life-kill-redis,life-net-slow-cut,life-clock-step,life-redlock-nodes,life-zk-expire,life-zk-restart,life-zk-node-kill,life-pg-restart,life-cluster-master-kill,life-cluster-migrate
faults+=,life-kill-sweeper,life-pause-sweeper,life-redis-restart,life-deadline-pays
faults+=,midsale
modes=setnx,redis,redlock,zk,pg,atomic,none,local,redis-nofence,pg-nofence
QUICK_PAIRS=kill-instance:redis,pause-holder:redis,pause-holder:none,kill-redis:setnx,net-slow-cut:atomic,clock-step:redlock,redlock-nodes:redlock,zk-expire:zk,zk-restart:zk,zk-node-kill:zk,cluster-master-kill:setnx,cluster-migrate:atomic,life-pause-sweeper:redis,life-redis-restart:atomic,life-cluster-master-kill:zk,pg-restart:pg,pause-holder:pg
pairs=""
seed=${CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
out=""
while (($#)); do
    case $1 in
    --reps) reps=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --quick) pairs=$QUICK_PAIRS; shift ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) usage_from_header "$0" 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done

STOCK=600
SEGMENTS=4
TTL_MS=500 # the lock lease: a pause of 5 leases lasts 2.5 s
# zk-expire's ZooKeeper session timeout, the zk lock's lease (ZooKeeper grants 1 s at
# least: 2 ticks): a pause of 2 sessions, 3 s, outlives it whatever the tick rounding.
ZK_SESSION_MS=1500
LOOPS=8
# Each client loop's pace: 8 loops at one order per 80 ms at most, ~100 orders/s, sell
# the stock in ~6 s, long enough that every fault strikes and heals in the sale.
PACE_MS=${CHAOS_PACE_MS:-80}
# The lifecycle: its stock (a smaller one: every unit sold until paid, ~1.7 times), the
# payment window, and its buyers: percent who pay, who cancel.
LIFE_STOCK=300
PAY_MS=1000
PAY_PCT=70
CANCEL_PCT=10
CHAOS_CLIENT=${SECKILL_BUILD:-build}/loadtest/chaosclient
[[ -x $CHAOS_CLIENT ]] || { echo "chaos: $CHAOS_CLIENT not built (make $CHAOS_CLIENT)" >&2; exit 2; }

lt_require curl jq nginx redis-server
FAKETIME_LIB=$(dpkg -L libfaketime 2>/dev/null | grep -m1 'libfaketimeMT\.so\.1$') || FAKETIME_LIB=""
lt_out "chaos-$(date -u +%Y%m%d-%H%M%S)" chaos-latest clusters runs
CLIENTS=() # the running run's client loops, stopped on exit (lt_traps)
lt_on_exit() { ((${#CLIENTS[@]} == 0)) || kill "${CLIENTS[@]}" 2>/dev/null || true; }
lt_traps failed

unsafe_mode() { [[ $1 == none || $1 == local || $1 == redis-nofence || $1 == pg-nofence ]]; }
SAFE="setnx redis redlock zk pg atomic"
# fault_modes FAULT: the modes FAULT runs against. The unsafe ones under the pause: none
# and local oversell under any fault (or none), --fencing off needs a stale holder.
fault_modes() {
    case $1 in
    kill-instance | kill-redis | net-slow-cut | clock-step) echo "$SAFE" ;;
    pause-holder) echo "$SAFE none local redis-nofence pg-nofence" ;;
    redlock-nodes) echo redlock ;;
    zk-expire | zk-restart | zk-node-kill) echo zk ;;
    pg-restart) echo pg ;;
    cluster-master-kill | cluster-migrate) echo "$SAFE" ;; # each runs on a Redis Cluster
    life-kill-sweeper | life-pause-sweeper | life-redis-restart | life-deadline-pays) echo "$SAFE" ;;
    life-*) fault_modes "${1#life-}" ;;
    # the modes with a read-write lock (PATCH's write side); redis-nofence: the stale
    # writer's change must go through there, or the harness does not see it
    midsale) echo "redis zk pg redis-nofence" ;;
    esac
}
life_fault() { [[ $1 == life-* ]]; }
# base_fault FAULT: the fault a life- row strikes with (life-kill-instance's kill-instance;
# the life-only ones are themselves)
base_fault() {
    case $1 in
    life-kill-sweeper | life-pause-sweeper | life-redis-restart | life-deadline-pays) echo "$1" ;;
    *) echo "${1#life-}" ;;
    esac
}
applies() { [[ " $(fault_modes "$1") " == *" $2 "* ]]; } # FAULT MODE
# fault_up_flags FAULT: what the fault needs of the cluster beyond the mode's own
fault_up_flags() {
    case $1 in
    zk-restart) echo "--zk-nodes 1" ;;
    zk-node-kill) echo "--zk-nodes 3" ;;
    cluster-*) echo "--redis-cluster 3" ;;
    midsale) echo "--postgres" ;; # each change an event: the store check counts them
    esac
}
# fault_seckill_flags FAULT: the extra seckill flags the fault needs (after the mode's)
fault_seckill_flags() {
    case $1 in
    zk-expire) echo "--zk-session-ms $ZK_SESSION_MS" ;;
    esac
}
# The work inside the critical section: long under the pauses, so that a pause lands
# in it (between the read under the lock and the commit) most of the time.
work_us() { [[ $1 == pause-holder || $1 == zk-expire ]] && echo 50000 || echo 2000; }
mode_flags() { # MODE -> cluster.sh up flags
    case $1 in
    redis-nofence) echo "--lock redis -- --fencing off" ;;
    pg-nofence) echo "--lock pg -- --fencing off" ;;
    *) echo "--lock $1 --" ;;
    esac
}

# ---- the client --------------------------------------------------------------------

# chaos_client C URL [LIFE]: orders by fresh users uC-N with keys kC-N until $run/stop
# appears, one every $PACE_MS at most; an undecided answer is asked again with the same
# key. A line per final answer: "status key order_id error tries"; with LIFE (1) the
# buyers pay, cancel or walk away, and pay at the deadline through every instance
# (loadtest/chaosclient.c says how, and the lines of pays and cancels).
chaos_client() {
    local c=$1 url=$2 hostport path u ports=""
    local -a life_args=()
    hostport=${url#http://}
    path=/${hostport#*/}
    hostport=${hostport%%/*}
    if [[ ${3:-} == 1 ]]; then
        for u in $INSTANCE_URLS; do ports+=${ports:+,}${u##*:}; done
        life_args=("$PAY_PCT" "$CANCEL_PCT" "$ports")
    fi
    # run in the background: exec, so that its pid is the client's (lt_on_exit)
    exec "$CHAOS_CLIENT" "$c" "${hostport##*:}" "$path" "$run/stop" "$PACE_MS" "${life_args[@]}"
}

# ---- faults ------------------------------------------------------------------------

# An instance again with the flags and port it had (its command line, read before the
# kill), until /readyz answers.
instance_restart() { # NAME CMDLINE_FILE
    local name=$1 port
    local -a cmd
    mapfile -d '' -t cmd <"$2"
    proc_start "$name" "$CUR_CLUSTER" "${cmd[@]}" || return 1
    port=$(grep -o -- '--listen 127.0.0.1:[0-9]*' <<<"${cmd[*]}" | grep -o '[0-9]*$')
    [[ -n $port ]] || return 1
    wait_until 30 http_ok "http://127.0.0.1:$port/readyz"
}

proc_dead() { ! proc_alive "$1" "$2"; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); } # T0_NS

# instance_again NAME REDIS [VAR=VALUE...]: instance NAME stopped (SIGTERM) and started
# again as it was, but on REDIS (host:port; "" keeps its own) and with the environment
# VAR=VALUE... (libfaketime's, say).
instance_again() {
    local name=$1 redis=$2 i
    shift 2
    local pid
    pid=$(cat "$CUR_CLUSTER/$name.pid")
    cp "/proc/$pid/cmdline" "$run/$name.cmdline"
    proc_stop "$name" "$CUR_CLUSTER" 10 || return 1
    local -a cmd
    mapfile -d '' -t cmd <"$run/$name.cmdline"
    for ((i = 0; i < ${#cmd[@]} - 1; i++)); do
        [[ ${cmd[i]} == --redis && -n $redis ]] && cmd[i + 1]=$redis
    done
    (($#)) && cmd=(env "$@" "${cmd[@]}")
    printf '%s\0' "${cmd[@]}" >"$run/$name.cmdline"
    instance_restart "$name" "$run/$name.cmdline"
}

fault_kill_instance() {
    local name=seckill-$((RANDOM % 3 + 1)) pid
    pid=$(cat "$CUR_CLUSTER/$name.pid")
    cp "/proc/$pid/cmdline" "$run/$name.cmdline"
    kill -KILL "$pid"
    wait_until 10 proc_dead "$name" "$CUR_CLUSTER"
    echo "killed $name"
    sleep 1
    instance_restart "$name" "$run/$name.cmdline" && echo "restarted $name"
}

# An instance that holds a segment's lock now (by its /stats: acquired more than it
# released, whether it still held the lock then or not), asked again until one does
# (1-2 s at most); else the one with the most orders in flight. The pause then lands
# inside a critical section, between the read under the lock and the commit, which is
# where a stale holder does harm.
holding_instance() {
    local i st a r l
    local -a urls
    read -r -a urls <<<"$INSTANCE_URLS"
    local until=$((SECONDS + 2))
    while ((SECONDS < until)); do
        for i in 1 2 3; do
            st=$(curl -s --max-time 1 "${urls[i - 1]}/stats") || continue
            [[ $st =~ \"lock\":\ ?null ]] && break 2 # atomic: no lock to hold
            [[ $st =~ \"acquisitions\":([0-9]+) ]] && a=${BASH_REMATCH[1]} || continue
            [[ $st =~ \"releases\":([0-9]+) ]] && r=${BASH_REMATCH[1]} || continue
            [[ $st =~ \"releases_not_held\":([0-9]+) ]] && l=${BASH_REMATCH[1]} || l=0
            if ((a - r - l > 0)); then
                echo "seckill-$i"
                echo "seckill-$i holds $((a - r - l)) lock(s)" >&2 # into the fault log
                return
            fi
        done
    done
    busiest_instance
}

# The instance with the most orders in flight now (a random one when none has any).
busiest_instance() {
    local i n best=$((RANDOM % 3 + 1)) most=1 # /stats counts itself in flight
    local -a urls
    read -r -a urls <<<"$INSTANCE_URLS"
    for i in 1 2 3; do
        n=$(curl -s --max-time 1 "${urls[i - 1]}/stats" | jq -r '.inflight // 0' 2>/dev/null) || n=0
        [[ $n =~ ^[0-9]+$ ]] && ((n > most)) && { most=$n; best=$i; }
    done
    echo "seckill-$best"
}

# pause_instance NAME [SAYS]: instance NAME frozen (SIGSTOP) for 5 lock leases, then
# SIGCONT; SAYS, a command, adds its output to both lines.
pause_instance() {
    local name=$1 says=${2:-} pid
    pid=$(cat "$CUR_CLUSTER/$name.pid")
    kill -STOP "$pid"
    echo "stopped $name${says:+ ($($says))}"
    sleep "$(awk -v t="$TTL_MS" 'BEGIN { print 5 * t / 1000 }')"
    kill -CONT "$pid"
    echo "continued $name${says:+ ($($says))}"
}

fault_pause_holder() { pause_instance "$(holding_instance)"; }

fault_kill_redis() {
    "$CLUSTER" stop --dir "$CUR_CLUSTER" redis --kill >/dev/null 2>&1 && echo "killed redis"
    sleep 1
    "$CLUSTER" start --dir "$CUR_CLUSTER" redis >/dev/null 2>&1 && echo "restarted redis"
}

# ---- the lifecycle's own faults (as units come back: the moment drawn past PAY_MS) --

# An instance killed as units come back. A sweep is one script (inventory/lua/due.lua):
# Redis runs it whole or not at all, whether its caller lives to read the answer or not.
fault_life_kill_sweeper() { fault_kill_instance; }

# An instance frozen for 5 lock leases as units come back: the others sweep meanwhile;
# woken, its sweeps, pays and cancels in flight land late. A sweep takes no lease (each
# order's state is checked in the script that expires it), so there is none to outlive.
fault_life_pause_sweeper() { pause_instance "seckill-$((RANDOM % 3 + 1))" life_counts; }

fault_life_redis_restart() { fault_kill_redis; }

fault_life_deadline_pays() { echo "no fault: pays at pay_by through every instance"; }

# life_counts: the SKU's pending, paid and returned units now
life_counts() { jq -r '"pending \(.pending), paid \(.paid), returned \(.returned)"' <<<"$(sku_json)" 2>/dev/null; }

# fault_prepare FAULT: what the fault needs set up once the cluster runs, before the
# load (the faults that act on one instance act on seckill-1).
fault_prepare() {
    case $1 in
    net-slow-cut)
        start_faultproxy netproxy "$CUR_CLUSTER" "$REDIS_PORT" --slow-ms 100 || return 1
        instance_again seckill-1 "127.0.0.1:$STARTED_PORT"
        ;;
    midsale) midsale_prepare ;;
    clock-step)
        echo "+0" >"$run/faketime"
        instance_again seckill-1 "" LD_PRELOAD="$FAKETIME_LIB" \
            FAKETIME_TIMESTAMP_FILE="$run/faketime" FAKETIME_CACHE_DURATION=1 \
            DONT_FAKE_MONOTONIC=1
        ;;
    esac
}

fault_net_slow_cut() {
    local proxy
    proxy=$(cat "$CUR_CLUSTER/netproxy.pid")
    kill -USR1 "$proxy" && echo "slowed seckill-1 to redis by 100 ms"
    sleep 2
    kill -USR2 "$proxy" && echo "cut seckill-1 from redis"
    sleep 3
    kill -HUP "$proxy" && echo "healed"
}

# The offset libfaketime reads (at most once a second: FAKETIME_CACHE_DURATION).
fault_clock_step() {
    echo "-10" >"$run/faketime" && echo "seckill-1's clock 10 s back"
    sleep 2
    echo "+10" >"$run/faketime" && echo "10 s ahead"
    sleep 2
    echo "+0" >"$run/faketime" && echo "right again"
}

# One lock node down; meanwhile another killed and started again empty (a lock node has
# no AOF: it forgets every lock it held), then the first back. A lock granted by a
# majority that included the emptied node is then held by one node of three.
fault_redlock_nodes() {
    local down=$((RANDOM % 3 + 1)) empty
    empty=$((down % 3 + 1))
    "$CLUSTER" stop --dir "$CUR_CLUSTER" "lock-$down" --kill >/dev/null 2>&1 && echo "killed lock-$down"
    sleep 0.5
    "$CLUSTER" stop --dir "$CUR_CLUSTER" "lock-$empty" --kill >/dev/null 2>&1 &&
        "$CLUSTER" start --dir "$CUR_CLUSTER" "lock-$empty" >/dev/null 2>&1 &&
        echo "lock-$empty killed and started empty"
    sleep 2
    "$CLUSTER" start --dir "$CUR_CLUSTER" "lock-$down" >/dev/null 2>&1 && echo "lock-$down back"
}

# segments_sold URL: the units each segment has sold so far, as the instance at URL
# says (not the balancer: it may pick a frozen one), a JSON array ([] when no answer).
segments_sold() {
    jq -c '[.segments[]?.sold]' <<<"$(curl -s --max-time 2 "$1/skus/chaos")" 2>/dev/null ||
        echo '[]'
}
sold_since() { # BEFORE AFTER (segments_sold): what each segment sold in between
    jq -rn --argjson b "$1" --argjson a "$2" '[range($a | length) | $a[.] - ($b[.] // 0)] | join(" ")'
}

instance_url() { # NAME (seckill-I)
    local -a urls
    read -r -a urls <<<"$INSTANCE_URLS"
    echo "${urls[${1#seckill-} - 1]}"
}
# instance_stat NAME FILTER: FILTER (jq) of instance NAME's /stats.
instance_stat() { curl -s --max-time 2 "$(instance_url "$1")/stats" | jq -r "$2" 2>/dev/null; }
leases_lost_by() { [[ $(instance_stat "$1" '.lock.leases_lost // 0') -gt 0 ]]; } # NAME

# A lock holder (holding_instance) frozen for 2 ZooKeeper sessions: the server expires
# its session and deletes its lock nodes, so the others take its segments while it
# sleeps (each segment's sales during the freeze show it); woken, it commits what it
# read under the lost locks, which the czxid must fence off. Then how many holds it
# found lost (the expiry, as its client saw it) and how many of its commits were fenced.
fault_zk_expire() {
    local name pid before after live
    name=$(holding_instance)
    pid=$(cat "$CUR_CLUSTER/$name.pid")
    kill -STOP "$pid"
    echo "stopped $name"
    live=$(instance_url "seckill-$((${name#seckill-} % 3 + 1))")
    before=$(segments_sold "$live")
    sleep "$(awk -v s="$ZK_SESSION_MS" 'BEGIN { print 2 * s / 1000 }')"
    after=$(segments_sold "$live")
    kill -CONT "$pid"
    echo "continued $name (sold by segment meanwhile: $(sold_since "$before" "$after"))"
    wait_until 3 leases_lost_by "$name" || true
    echo "$name: $(instance_stat "$name" '"\(.lock.leases_lost) hold(s) lost to the expiry and \(.fenced_off_commits) commit(s) fenced off"')"
}

# The standalone ZooKeeper killed and started again on its data: while it is down no
# lock is granted or released. Its sessions come back with it (their timeouts start
# again) and resume when their clients reconnect; a client that was cut off longer
# than its session takes its holds for lost, and its commits are fenced.
fault_zk_restart() {
    local t0
    "$CLUSTER" stop --dir "$CUR_CLUSTER" zk-1 --kill >/dev/null 2>&1 &&
        echo "killed zk-1 ($(remaining) units left)"
    t0=$(date +%s%N)
    sleep 1
    "$CLUSTER" start --dir "$CUR_CLUSTER" zk-1 >/dev/null 2>&1 &&
        echo "zk-1 serving again $(ms_since "$t0") ms after the kill ($(remaining) left)"
}

# PostgreSQL stopped (a fast shutdown: its connections are closed, the lock rows and
# their versions kept) and started again 1 s later: meanwhile no lock is granted,
# renewed or released (holds of that moment run out on the database's clock, which
# restarts with it); the instances' connections come back on their own.
fault_pg_restart() {
    local t0
    "$CLUSTER" stop --dir "$CUR_CLUSTER" pg >/dev/null 2>&1 &&
        echo "stopped pg ($(remaining) units left)"
    t0=$(date +%s%N)
    sleep 1
    "$CLUSTER" start --dir "$CUR_CLUSTER" pg >/dev/null 2>&1 &&
        echo "pg serving again $(ms_since "$t0") ms after the stop ($(remaining) left)"
}

# The member of the ensemble that says it leads (a random one between elections).
leader_or_any() {
    local -a names
    zk_leader "$CUR_CLUSTER" "$ZK_NAMES" && return
    read -r -a names <<<"$ZK_NAMES"
    echo "${names[RANDOM % ${#names[@]}]}"
}

# One node of the ensemble of 3 killed (the leader: the other two elect a new one,
# and no write passes meanwhile) and started again 3 s later (it rejoins as a
# follower). The sessions it served move to the other two.
fault_zk_node_kill() {
    local name port mode
    name=$(leader_or_any)
    port=$(zk_port "$CUR_CLUSTER" "$name")
    mode=$(zk_mode "$port") || mode="not serving"
    "$CLUSTER" stop --dir "$CUR_CLUSTER" "$name" --kill >/dev/null 2>&1 &&
        echo "killed $name ($mode; $(remaining) units left)"
    sleep 3
    "$CLUSTER" start --dir "$CUR_CLUSTER" "$name" >/dev/null 2>&1 &&
        echo "$name back as $(zk_mode "$port" || echo "not serving") (leader $(zk_leader "$CUR_CLUSTER" "$ZK_NAMES" || echo none); $(remaining) left)"
}

# ---- the Redis Cluster faults ------------------------------------------------------
# A fresh cluster's masters are shard-1..3 (replicas shard-I-r); a node's port is the
# second line of its D/NAME.args. The SKU's shard that holds segment 0 (and 3: shard
# i % 3) is the hot one: its init hash gives segment 0 units.

shard_name() { # PORT: the cluster.sh name of the node on PORT
    local f
    for f in "$CUR_CLUSTER"/shard-*.args; do
        [[ $(sed -n 2p "$f") == "$1" ]] && { basename "$f" .args; return 0; }
    done
    return 1
}

# a_master [NOT_PORT]: the port of a node that answers as a master (not the one on
# NOT_PORT): the one to ask for the map, a replica's view can lag.
a_master() {
    local f p
    for f in "$CUR_CLUSTER"/shard-*.args; do
        p=$(sed -n 2p "$f")
        [[ $p == "${1:-}" ]] && continue
        [[ $(redis-cli -p "$p" role 2>/dev/null | head -n 1) == master ]] && { echo "$p"; return 0; }
    done
    return 1
}

# live_masters: "port id" of every master alive, in a master's view.
live_masters() { local p; p=$(a_master) && cluster_masters "$p"; }

# hot_shard: "port key" of the master holding segment 0, key its sk:{tag}:chaos:init.
hot_shard() { local p; p=$(a_master) && cluster_sku_segment0 "$p" chaos; }

# slot_owner SLOT [NOT_PORT]: the port of the master serving SLOT, in the view of a
# master other than NOT_PORT.
slot_owner() { local p; p=$(a_master "${2:-}") && cluster_slot_owner "$p" "$1"; }
owns() { [[ $(slot_owner "$1") == "$2" ]]; } # SLOT PORT
taken_over() { local o; o=$(slot_owner "$1" "$2") && [[ -n $o && $o != "$2" ]]; } # SLOT OLD_PORT

# The master of segment 0 killed with -9; once its replica has taken its slots over
# (node timeout 1 s, then the election), started again: it rejoins as that replica's
# replica and syncs (the promoted master acknowledges nothing without one: WAIT 1).
fault_cluster_master_kill() {
    local port key name slot t0
    read -r port key < <(hot_shard) || { echo "no master holds segment 0"; return 1; }
    name=$(shard_name "$port") || { echo "no node on port $port"; return 1; }
    slot=$(redis-cli -p "$port" cluster keyslot "$key")
    t0=$(date +%s%N)
    "$CLUSTER" stop --dir "$CUR_CLUSTER" "$name" --kill >/dev/null 2>&1 &&
        echo "killed $name (segment 0's master, slot $slot)"
    wait_until 20 taken_over "$slot" "$port" &&
        echo "$(shard_name "$(slot_owner "$slot" "$port")") took over after $(ms_since "$t0") ms"
    "$CLUSTER" start --dir "$CUR_CLUSTER" "$name" >/dev/null 2>&1 && echo "restarted $name"
    wait_until 30 cluster_synced_replica "$port" && echo "$name a synced replica after $(ms_since "$t0") ms"
}

# The slot of segment 0's keys moved by hand to another master (drawn from the seed),
# as redis-cli --cluster reshard moves a slot (cluster_move_slot, scripts/cluster.sh).
# Meanwhile the instances are answered ASK and TRYAGAIN, then MOVED.
fault_cluster_migrate() {
    local port key slot dst moved t0
    local -a others
    read -r port key < <(hot_shard) || { echo "no master holds segment 0"; return 1; }
    slot=$(redis-cli -p "$port" cluster keyslot "$key")
    mapfile -t others < <(live_masters | awk -v p="$port" '$1 != p { print $1 }')
    dst=${others[RANDOM % ${#others[@]}]}
    t0=$(date +%s%N)
    echo "migrating slot $slot (segment 0) from $(shard_name "$port") to $(shard_name "$dst")"
    moved=$(cluster_move_slot "$port" "$slot" "$dst") && echo "moved $moved"
    wait_until 5 owns "$slot" "$dst" &&
        echo "slot $slot served by $(shard_name "$dst") after $(ms_since "$t0") ms"
}

# ---- the merchant's changes during the sale (midsale) --------------------------------

MIDSALE_HOLD_MS=400 # how long seckill-1 keeps the write side before its script
# midsale_prepare: seckill-1 keeps the write side MIDSALE_HOLD_MS before its script;
# seckill-2 dies holding it (before its script or after it, drawn); its command line
# without that kept for its restart.
midsale_prepare() {
    local pid where=patch-locked
    ((RANDOM % 2)) && where=patch-written
    pid=$(cat "$CUR_CLUSTER/seckill-2.pid")
    cp "/proc/$pid/cmdline" "$run/seckill-2.plain"
    instance_again seckill-1 "" SECKILL_TEST_PATCH_HOLD_MS=$MIDSALE_HOLD_MS || return 1
    instance_again seckill-2 "" SECKILL_TEST_CRASH=$where || return 1
    echo "$where" >"$run/midsale.crash"
}

# midsale_patch NAME KIND UNITS ROLE: one change (KIND add or withdraw) sent to
# instance NAME; appends "ROLE KIND UNITS CODE WITHDRAWN" to $run/patches (CODE 000:
# no answer; WITHDRAWN the answer's, 0 without one).
midsale_patch() {
    local code w=0
    code=$(curl -s --max-time 10 -o "$run/patch.$4" -w '%{http_code}' -X PATCH         "$(instance_url "$1")/skus/chaos" -d "{\"$2\":$3}") || code=000
    [[ $code == 200 && $2 == withdraw ]] && w=$(jq -r '.withdrawn // 0' "$run/patch.$4")
    echo "$4 $2 $3 $code $w" >>"$run/patches"
}

# The write side's mode in the data Redis now (redis mode; "-" elsewhere, or free).
midsale_rw() {
    local m
    m=$(redis-cli -p "$REDIS_PORT" hget "sk:{chaos}:lock:rw" mode 2>/dev/null)
    echo "${m:--}"
}

fault_midsale() {
    local pid stale t0 i
    : >"$run/patches"
    for i in 1 2 3 4; do
        midsale_patch seckill-3 add 20 "restock$i"
        midsale_patch seckill-3 withdraw 10 "withdraw$i"
    done
    echo "4 restocks, 4 withdrawals ($(remaining) units left)"
    # the changer paused past its lease
    pid=$(cat "$CUR_CLUSTER/seckill-1.pid")
    t0=$(date +%s%N)
    midsale_patch seckill-1 add 50 stale &
    stale=$!
    sleep 0.15 # inside its MIDSALE_HOLD_MS (curl starts and the grant takes ms)
    midsale_rw >"$run/midsale.held"
    kill -STOP "$pid"
    echo "stopped seckill-1 holding the write side ($(cat "$run/midsale.held"))"
    midsale_patch seckill-3 add 30 takeover
    echo "seckill-3's restock answered $(awk '$1 == "takeover" { print $4 }' "$run/patches") $(ms_since "$t0") ms after"
    sleep "$(awk -v t="$TTL_MS" -v e="$(ms_since "$t0")" 'BEGIN { s = (5 * t - e) / 1000; print (s > 0 ? s : 0) }')"
    kill -CONT "$pid"
    wait "$stale"
    echo "continued seckill-1: its change answered $(awk '$1 == "stale" { print $4 }' "$run/patches")"
    # the changer killed mid-change
    midsale_patch seckill-2 withdraw 10 killed
    wait_until 10 proc_dead seckill-2 "$CUR_CLUSTER" &&
        echo "seckill-2 died $(cat "$run/midsale.crash") (answered $(awk '$1 == "killed" { print $4 }' "$run/patches"))"
    midsale_patch seckill-3 withdraw 10 after
    echo "seckill-3's withdrawal after it answered $(awk '$1 == "after" { print $4 }' "$run/patches")"
    instance_restart seckill-2 "$run/seckill-2.plain" && echo "restarted seckill-2"
}

# midsale_checks AUDIT: the midsale violations (see the top) as JSON, from $run/patches
# and the audit.
midsale_checks() {
    # held: the write side as the data Redis showed it at the stop (redis mode; the
    # others keep it elsewhere: taken as held, the stop lands 150 ms into 400)
    local held
    held=$(cat "$run/midsale.held" 2>/dev/null)
    [[ $mode == redis ]] || held=write
    awk -v held="$held" '
        { role = $1; kind = $2; units = $3; code = $4; w = $5 }
        code == 200 && kind == "add" { ok_add += units }
        code == 200 && kind == "withdraw" { ok_w += w }
        code == "000" && kind == "add" { unk_add += units }
        code == "000" && kind == "withdraw" { unk_w += units }
        role == "stale" { stale = code }
        (role == "takeover" || role == "after") && code != 200 { blocked++ }
        END {
            printf "{\"ok_add\":%d,\"ok_withdrawn\":%d,\"unknown_add\":%d,\"unknown_withdraw\":%d,", ok_add, ok_w, unk_add, unk_w
            printf "\"stale_code\":\"%s\",\"held\":\"%s\",\"blocked\":%d}\n", stale, held, blocked
        }' "$run/patches" |
        jq -c --argjson a "$1" '. as $p | {
            fence: (if $p.stale_code == "200" and $p.held == "write" then 1 else 0 end),
            changes: (if (($a.added // -1) < $p.ok_add) or (($a.added // -1) > $p.ok_add + $p.unknown_add)
                         or (($a.withdrawn // -1) < $p.ok_withdrawn)
                         or (($a.withdrawn // -1) > $p.ok_withdrawn + $p.unknown_withdraw)
                      then 1 else 0 end),
            books: (if ($a.sold // -1) + ($a.remaining // -1) ==
                       ($a.initial // 0) + ($a.added // 0) - ($a.withdrawn // 0) then 0 else 1 end),
            takeover: $p.blocked, patches: $p}'
}

# ---- one run -----------------------------------------------------------------------

sku_json() { curl -s --max-time 5 "$LB_URL/skus/chaos" || true; }
remaining() { jq -r '.remaining // empty' <<<"$(sku_json)" 2>/dev/null; }
sold_out_now() { [[ $(remaining) == 0 ]]; }
# every unit paid: nothing remains, nothing waits for a payment
all_paid() { [[ $(jq -r '"\(.remaining) \(.pending)"' <<<"$(sku_json)" 2>/dev/null) == "0 0" ]]; }

# run FAULT MODE REP: one run; appends its JSON line to $out/runs.jsonl.
run_one() {
    local fault=$1 mode=$2 rep=$3 at_ms c fault_log verdict why base life=0 sku_extra=""
    local stock=$STOCK
    base=$(base_fault "$fault")
    life_fault "$fault" && life=1 stock=$LIFE_STOCK sku_extra=",\"pay_within_ms\":$PAY_MS"
    # the run's own seed: the same for FAULT MODE REP under --seed S, whatever else runs
    local run_seed=$(((seed + $(cksum <<<"$fault $mode $rep" | cut -d' ' -f1)) % 2147483647))
    RANDOM=$run_seed
    UP_ERROR=""
    at_ms=$((100 + RANDOM % 600))
    [[ $base == life-* ]] && at_ms=$((PAY_MS + 100 + RANDOM % 1000)) # as units come back
    run=$out/runs/$fault-$mode-$rep
    rm -rf "$run" "$out/clusters/$fault-$mode-$rep" # an --out used before
    mkdir -p "$run"
    # shellcheck disable=SC2046 # the flags are words
    if ! lt_cluster_up "$out/clusters/$fault-$mode-$rep" "$run/up.err" --fsync always \
        $(fault_up_flags "$base") $(mode_flags "$mode") --lock-ttl-ms "$TTL_MS" \
        --work-us "$(work_us "$base")" $(fault_seckill_flags "$base") ||
        ! fault_prepare "$base" >"$run/prepare.log" 2>&1; then
        why=${UP_ERROR:-$(tail -n 1 "$run/prepare.log" 2>/dev/null)}
        jq -cn --arg fault "$fault" --arg mode "$mode" --argjson rep "$rep" \
            --argjson seed "$run_seed" --arg why "$why" \
            '{fault: $fault, mode: $mode, rep: $rep, seed: $seed, error: "cluster: \($why)"}' \
            >>"$out/runs.jsonl"
        any_error=1
        progress "$fault $mode #$rep: cluster did not start: $why"
        lt_cluster_down || true
        return
    fi
    put_sku chaos "$stock" "$SEGMENTS" "$sku_extra" || any_error=1
    # loops 1-2 buy through the balancer, the others each from one instance: a frozen
    # instance holds its own buyers (and the balancer's, whose 5 s patience outlasts
    # the pause, so a stale holder commits what it took), but not everyone's
    local -a urls
    read -r -a urls <<<"$INSTANCE_URLS"
    for ((c = 1; c <= LOOPS; c++)); do
        local base_url=$LB_URL
        ((c > 2)) && base_url=${urls[(c - 3) % ${#urls[@]}]}
        chaos_client "$c" "$base_url/skus/chaos/orders" "$life" >"$run/client.$c" &
        CLIENTS+=($!)
    done
    sleep "$(awk -v t="$at_ms" 'BEGIN { print t / 1000 }')"
    fault_log=$("fault_${base//-/_}" 2>&1)
    # healed: buy on until the stock is gone (stranded stock fails the run), 60 s at
    # most; with the lifecycle until every unit is paid, 90 s at most
    if ((life)); then
        wait_until 90 all_paid || true
    else
        wait_until 60 sold_out_now || true
    fi
    sleep 0.5 # the loops see sold_out answers: every buyer was answered
    touch "$run/stop"
    wait "${CLIENTS[@]}"
    CLIENTS=()
    verdict=$(check_run "$fault" "$mode" "$rep" "$run_seed" "$at_ms" "$fault_log" "$life" "$stock")
    echo "$verdict" >>"$out/runs.jsonl"
    lt_cluster_down || any_error=1
    progress "$fault $mode #$rep (seed $run_seed, fault at ${at_ms} ms: $(tr '\n' ',' <<<"$fault_log" | sed 's/,$//')): $(jq -r '(.violations | if length == 0 then "ok" else (to_entries | map("\(.key) \(.value)") | join(", ")) end) + " (seen: " + ((["retried \(.retried)"] + (.seen | to_entries | map(select(.value > 0) | "\(.key) \(.value)"))) | join(", ")) + ")"
        + (if .life.pays_ok then "; life: \(.audit.orders) orders, pays \(.life.pays_ok) ok \(.life.pays_expired) expired, \(.life.deadline_pays) at pay_by, cancels \(.life.cancels_ok), units returned \(.audit.returned)" else "" end)' <<<"$verdict")"
}

# check_run ...: the run's JSON line, from the client's records and the server's audit.
check_run() {
    local fault=$1 mode=$2 rep=$3 run_seed=$4 at_ms=$5 fault_log=$6 life=$7 stock=$8
    local audit skuj acked ids keys lost=0 seen u lifej='{}'
    local -a urls
    cat "$run"/client.* >"$run/answers"
    audit=$(curl -s --max-time 30 "$LB_URL/skus/chaos/audit" || echo '{}')
    skuj=$(sku_json)
    jq -e 'type == "object"' >/dev/null 2>&1 <<<"$audit" || audit='{}'
    jq -e 'type == "object"' >/dev/null 2>&1 <<<"$skuj" || skuj='{}'
    # what the instances saw of the fault (a killed one's counts died with it)
    read -r -a urls <<<"$INSTANCE_URLS"
    for u in "${urls[@]}"; do curl -s --max-time 5 "$u/stats"; done >"$run/stats.json"
    seen=$(jq -cs '
        map(select(type == "object")) |
        {fenced: (map(.fenced_off_commits // 0) | add // 0),
         epoch_changed: (map(.epoch_changed_commits // 0) | add // 0),
         after_lease_lost: (map(.commits_after_lease_lost // 0) | add // 0),
         outcome_unknown: (map(.orders.outcome_unknown // 0) | add // 0),
         unavailable: (map(.orders.unavailable // 0) | add // 0),
         releases_not_held: (map(.lock.releases_not_held // 0) | add // 0),
         id_collisions: (map(.orders.order_id_collisions // 0) | add // 0)}' "$run/stats.json" 2>/dev/null) ||
        seen='{}'
    [[ -n $seen ]] || seen='{}'
    # acknowledged: distinct (key, id) of 201 answers
    awk '$1 == 201 { print $2, $3 }' "$run/answers" | sort -u >"$run/acked"
    acked=$(wc -l <"$run/acked")
    ids=$(awk '{ print $2 }' "$run/acked" | sort -u | wc -l)
    keys=$(awk '{ print $1 }' "$run/acked" | sort -u | wc -l)
    # every acknowledged id asked of the balancer, over one kept-alive connection: its
    # state now ("ID STATE" in states), lost when not found
    awk -v u="$LB_URL/orders/" '{ printf "url = \"%s%s\"\n", u, $2 }' "$run/acked" >"$run/lookups.curl"
    : >"$run/states"
    if ((acked > 0)); then
        curl -s --max-time 120 -K "$run/lookups.curl" -w ' %{http_code}\n' |
            sed -n 's/ 200$//p' | jq -r '"\(.order_id) \(.state)"' >"$run/states" 2>/dev/null
        lost=$((acked - $(wc -l <"$run/states")))
    fi
    ((life)) && lifej=$(life_checks)
    local storej='{}' midj='{}'
    [[ -n ${PG_URL:-} ]] && storej=$(store_check)
    [[ $fault == midsale ]] && midj=$(midsale_checks "$audit")
    jq -cn --arg fault "$fault" --arg mode "$mode" --argjson rep "$rep" \
        --argjson seed "$run_seed" --argjson at_ms "$at_ms" --arg fault_log "$fault_log" \
        --argjson stock "$stock" --argjson acked "$acked" --argjson ids "$ids" \
        --argjson keys "$keys" --argjson lost "$lost" \
        --arg retried "$(awk '$5 > 1 { n++ } END { print n + 0 }' "$run/answers")" \
        --argjson audit "$audit" --argjson sku "$skuj" --argjson seen "$seen" \
        --argjson life "$lifej" --argjson lifecycle "$life" --argjson store "$storej" \
        --argjson midsale "${midj:-{\}}" \
        --argjson answers "$(awk '{ k = $1 ~ /^[0-9]+$/ ? $1 "/" $4 : $1 " " $2 "/" $5; n[k]++ } END { printf "{"; s=""; for (k in n) { printf "%s\"%s\":%d", s, k, n[k]; s="," } printf "}" }' "$run/answers")" '
        ($audit.sold // -1) as $sold |
        # the books: the merchant changes (midsale) move the stock
        ($stock + ($audit.added // 0) - ($audit.withdrawn // 0)) as $stock |
        {fault: $fault, mode: $mode, rep: $rep, seed: $seed, fault_at_ms: $at_ms,
         fault_log: $fault_log, stock: $stock, acked_ids: $ids, answers: $answers,
         audit: $audit, remaining: ($sku.remaining // null), seen: $seen,
         retried: ($retried | tonumber), life: $life, store: $store,
         midsale: $midsale.patches,
         violations: ({
           # with the lifecycle a unit is sold again once it came back: count the paid
           oversell: ([(if $lifecycle == 1 then ($life.paid_ids // 0) else $ids end) - $stock,
                       ($audit.oversold // 0), ($sold - $stock)] | max | if . > 0 then . else 0 end),
           stranded: (if ($sku.remaining // 0) > 0 then $sku.remaining else 0 end),
           limit: ($audit.limit_breaches // 0),
           lost: $lost,
           duplicate: (($keys - $ids) + ($audit.duplicate_order_ids // 0)),
           audit: (if $audit.consistent == true then 0 else 1 end),
           store: ((if $store.matches == false then 1 else 0 end) + ($store.twice // 0))
         } + ($midsale | del(.patches)) + (if $lifecycle == 1 then {
           unsettled: (($sku.pending // 0) + ([$stock - ($audit.paid // 0) - ($sku.remaining // 0), 0] | max)),
           paid_lost: ($life.paid_lost // 0), cancel_lost: ($life.cancel_lost // 0),
           expired_kept: ($life.expired_kept // 0), pay_split: ($life.pay_split // 0),
           paid_late: ($life.paid_late // 0),
           conflicts: (($audit.state_conflicts // 0) + ($audit.returned_twice // 0))
         } else {} end) | with_entries(select(.value != 0)))}'
}

# store_check: the system of record once the sink drained, as JSON: the audit's store
# block's matches and lag_events (waited for: lag 0 and matches, 20 s at most), and
# twice, the changes PostgreSQL holds more than once.
store_check() {
    local a twice
    drained() {
        a=$(curl -s --max-time 10 "$LB_URL/skus/chaos/audit")
        [[ $(jq -r '(.store.lag_events == 0) and .store.matches' <<<"$a" 2>/dev/null) == true ]]
    }
    wait_until 20 drained || true
    twice=$(psql -X -tA "$PG_URL" -c \
        "select count(*) - count(distinct (order_id, state)) from seckill_events" 2>/dev/null)
    jq -c --argjson twice "${twice:-0}" \
        '{matches: (.store.matches // false), lag: (.store.lag_events // null), twice: $twice}' \
        <<<"${a:-{\}}" 2>/dev/null || echo '{"matches": false}'
}

# life_checks: the lifecycle's answers against each order's state at the end ($run/states),
# as JSON: pays answered (200, 409 expired, other), cancels answered 200, deadline pays
# and how many were sent at or after pay_by, paid_ids (distinct ids with a 200 to a
# pay), and the violations paid_lost, cancel_lost, expired_kept, pay_split and paid_late
# (see the top).
life_checks() {
    awk '
        FILENAME == ARGV[1] { state[$1] = $2; next }
        $1 != "pay" && $1 != "dpay" && $1 != "cancel" { next }
        {
            id = $4
            if ($1 == "dpay") {
                dpays++
                if ($8 >= 0) { dlate++; if ($2 == 200) paid_late++ }
            }
            if ($1 == "cancel") {
                if ($2 == 200) { cancels++; if (state[id] != "cancelled") cancel_lost++ }
                next
            }
            if ($2 == 200) {
                pays++
                if (!(id in paid)) { paid[id] = 1; paid_ids++ }
                if (state[id] != "paid") paid_lost++
                ok[id] = 1
            } else if ($2 == 409 && $5 == "expired") {
                late++
                if (state[id] != "expired") expired_kept++
                refused[id] = 1
            } else other++
        }
        END {
            for (id in ok) if (id in refused) splits++
            printf "{\"pays_ok\":%d,\"pays_expired\":%d,\"pays_other\":%d,\"cancels_ok\":%d,", pays, late, other, cancels
            printf "\"deadline_pays\":%d,\"deadline_pays_at_or_after\":%d,\"paid_ids\":%d,", dpays, dlate, paid_ids
            printf "\"paid_lost\":%d,\"cancel_lost\":%d,\"expired_kept\":%d,\"pay_split\":%d,", paid_lost, cancel_lost, expired_kept, splits
            printf "\"paid_late\":%d}\n", paid_late
        }' "$run/states" "$run/answers"
}

# ---- the matrix --------------------------------------------------------------------

# cells: "fault mode" of each cell to run; fault_list and mode_list, in order of first
# appearance, the grid's rows and columns.
cells=()
if [[ -n $pairs ]]; then
    IFS=, read -r -a pair_list <<<"$pairs"
    faults="" modes=""
    for p in "${pair_list[@]}"; do
        f=${p%%:*} m=${p#*:}
        [[ $p == *:* && -n $f && -n $m ]] || die "--pairs wants fault:mode, got $p"
        cells+=("$f $m")
        [[ ,$faults, == *,$f,* ]] || faults+=${faults:+,}$f
        [[ ,$modes, == *,$m,* ]] || modes+=${modes:+,}$m
    done
fi
IFS=, read -r -a fault_list <<<"$faults"
IFS=, read -r -a mode_list <<<"$modes"
for f in "${fault_list[@]}"; do
    [[ -n $(fault_modes "$f") ]] || die "unknown fault $f (see --help)"
done
if [[ -z $pairs ]]; then
    for f in "${fault_list[@]}"; do
        for m in "${mode_list[@]}"; do applies "$f" "$m" && cells+=("$f $m"); done
    done
fi
for c in "${cells[@]}"; do
    applies "${c% *}" "${c#* }" || die "fault ${c% *} does not run against mode ${c#* } (see --help)"
done
[[ ,$faults, != *,clock-step,* || -n $FAKETIME_LIB ]] ||
    die "clock-step needs libfaketime (Debian faketime; scripts/deps.sh installs it)"
# shellcheck disable=SC2034 # progress (loadtest/lib.sh) shows STEP/TOTAL
TOTAL=$((${#cells[@]} * reps))
progress "chaos: ${#cells[@]} cells (faults $faults; modes $modes), $reps run(s) each, seed $seed, stock $STOCK over $SEGMENTS segments ($LIFE_STOCK in life-* rows, a payment window of $PAY_MS ms), $LOOPS clients, lease ${TTL_MS} ms"
: >"$out/runs.jsonl"
for c in "${cells[@]}"; do
    for ((r = 1; r <= reps; r++)); do
        STEP=$((STEP + 1))
        run_one "${c% *}" "${c#* }" "$r"
    done
done

# ---- the matrix, the chart, the verdict -------------------------------------------

# chart_svg: chaos.json's matrix as an SVG grid (faults down, modes across), each
# cell its runs passed / runs, coloured by what it means.
chart_svg() {
    jq -r --arg unsafe "none local redis-nofence" '
        ($unsafe | split(" ")) as $u |
        ([.matrix[].fault] | unique) as $fs |
        . as $all |
        (["setnx","redis","redlock","zk","atomic","none","local","redis-nofence"]
            | map(select(. as $m | $all.matrix | any(.mode == $m)))) as $ms |
        def cell($f; $m): $all.matrix | map(select(.fault == $f and .mode == $m)) | .[0];
        def colour($c; $m): if $c == null then "#eeeeee"
            elif ($u | index($m)) then (if $c.passed < $c.runs then "#f4b183" else "#c00000" end)
            elif $c.passed == $c.runs then "#a9d18e" else "#c00000" end;
        ([210 + 100 * ($ms | length), 900] | max) as $w | (70 + 30 * ($fs | length) + 40) as $h |
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\($w)\" height=\"\($h)\" font-family=\"sans-serif\" font-size=\"13\">",
        "<text x=\"10\" y=\"20\" font-size=\"15\">make chaos: runs passed / runs (\($all.reps) per cell, seed \($all.seed))</text>",
        ($ms | to_entries[] | "<text x=\"\(210 + 100 * .key + 50)\" y=\"55\" text-anchor=\"middle\">\(.value)</text>"),
        ($fs | to_entries[] | . as $r |
            "<text x=\"10\" y=\"\(70 + 30 * $r.key + 20)\">\($r.value)</text>",
            ($ms | to_entries[] | . as $c | cell($r.value; $c.value) as $x |
                "<rect x=\"\(210 + 100 * $c.key + 2)\" y=\"\(70 + 30 * $r.key + 2)\" width=\"96\" height=\"26\" fill=\"\(colour($x; $c.value))\"/>",
                (if $x then "<text x=\"\(210 + 100 * $c.key + 50)\" y=\"\(70 + 30 * $r.key + 20)\" text-anchor=\"middle\">\($x.passed)/\($x.runs)</text>" else empty end))),
        "<text x=\"10\" y=\"\($h - 12)\" font-size=\"11\">green: a safe mode, every run clean; red: a violation in a safe mode, or an unsafe mode that showed none; orange: an unsafe mode caught (expected); grey: not run</text>",
        "</svg>"' "$out/chaos.json"
}

failed=0
jq -s --arg seed "$seed" --argjson reps "$reps" '
    {seed: ($seed | tonumber), reps: $reps, runs: .,
     matrix: (group_by([.fault, .mode]) | map({fault: .[0].fault, mode: .[0].mode,
        runs: length, passed: (map(select((.violations // {x: 1}) == {})) | length),
        violations: (map(.violations // {error: 1})
            | reduce (.[] | to_entries[]) as $e ({}; .[$e.key] += $e.value))}))}' \
    "$out/runs.jsonl" >"$out/chaos.json"
chart_svg >"$out/chaos.svg"
# the matrix as a grid: runs passed / runs, faults down and modes across as given
declare -A cell=()
while IFS=$'\t' read -r f m v; do cell["$f $m"]=$v; done < <(jq -r '.matrix[] |
    [.fault, .mode, "\(.passed)/\(.runs)"] | @tsv' "$out/chaos.json")
echo
printf '%-26s' "passed/runs"
for m in "${mode_list[@]}"; do printf ' %8s' "$m"; done
echo
for f in "${fault_list[@]}"; do
    printf '%-26s' "$f"
    for m in "${mode_list[@]}"; do printf ' %8s' "${cell["$f $m"]:--}"; done
    echo
done
echo
printf '%-26s %-14s %7s  %s\n' fault mode passed violations
blind=0
while IFS=$'\t' read -r f m runs passed viol; do
    note=""
    if unsafe_mode "$m"; then
        if ((passed < runs)); then
            note="  (unsafe: expected)"
        else
            # the pause catches a stale holder in most runs, not all: a row of 3 or
            # more runs that never does means the harness is blind
            note="  UNSAFE MODE SHOWED NOTHING: the harness does not see it"
            ((runs >= 3)) && blind=1
        fi
    elif ((passed != runs)); then
        failed=1
    fi
    printf '%-26s %-14s %3d/%-3d  %s%s\n' "$f" "$m" "$passed" "$runs" "$viol" "$note"
done < <(jq -r '.matrix[] | [.fault, .mode, .runs, .passed,
    (.violations | to_entries | map("\(.key) \(.value)") | join(", ") | if . == "" then "-" else . end)] | @tsv' "$out/chaos.json")
echo
((failed)) && echo "chaos: FAILED: a safe mode had a violation (runs.jsonl has each run's seed)"
((blind)) && echo "chaos: FAILED: an unsafe row showed no violation in $reps runs"
echo "chaos: $out/chaos.json, chart $out/chaos.svg (seed $seed: loadtest/chaos.sh --seed $seed [--faults F --modes M] draws the same moments and instances again; --pairs F:M,... runs chosen cells)"
((failed == 0 && blind == 0 && any_error == 0)) || exit 1
