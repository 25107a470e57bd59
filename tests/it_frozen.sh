#!/usr/bin/env bash
# it_frozen.sh — a lock holder that pauses past its lease (invariant 5, fencing).
#
# Two instances, lock mode redis (or MODE), a 300 ms lease (zk: a 1000 ms ZooKeeper
# session, the shortest its tickTime of 500 ms grants) and 150 ms of work inside the
# critical section, one SKU with a single segment (every order contends on one lock).
# Buyers (curl loops, three per instance, one fresh user per order, until sold out)
# load both instances. As soon as instance 1 holds the segment lock (its /stats show
# more acquisitions than releases) it is frozen with SIGSTOP, in the middle of its
# critical section: it has read the stock and is doing its work. It stays frozen until
# instance 2 has sold 10 more units (its lease ran out; at 150 ms of work per unit that
# is several leases), then gets SIGCONT and finishes what it was doing.
#
#   --fencing off: the frozen holder commits the stock it computed before the freeze.
#                  Either that write gives back the units instance 2 sold meanwhile (the
#                  buyers sell them again), or instance 2's current holder, which read
#                  the stock before it, overwrites it right after: either way the frozen
#                  holder's unit is sold without being taken from the stock, so the
#                  buyers end with sold > initial stock, and the audit shows it.
#   --fencing on:  its commit is refused (fenced_off_commits > 0 on instance 1, and
#                  its leases_lost counts the lease; the buyer gets 503 busy and
#                  retries): sold == stock, client-counted 201s == server sold ==
#                  audit sold, audit consistent. (zk: instance 1's
#                  session expired while it was frozen, so its orders that waited for
#                  the lock may also answer 503 unavailable; nothing placed either;
#                  pg: a query of its in flight may have timed out meanwhile.)
#
# A freeze that missed the critical section (the holder finished between the /stats
# answer and the SIGSTOP) shows as no stale commit on instance 1; the scenario is then
# run again on a fresh SKU (at most 3 attempts).
#
#   tests/it_frozen.sh [MODE]    MODE: the lock mode, redis (default), zk (run by
#                                tests/it_zk.sh) or pg (run by tests/it_pglock.sh);
#                                SECKILL_BIN / SECKILL_BUILD: the server
#
# Last line: "N passed, N failed"; exit status 1 when anything failed.
# shellcheck disable=SC2317 # functions run from traps and wait_until look unreachable
set -uo pipefail

# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- buyer mode: one curl loop (run by the test itself, in its own session) -----------
# it_frozen.sh --buyer URL SKU TAG OUT SECS: POSTs orders of fresh users "TAG-<n>" until
# sold out or SECS pass; writes "201s busy sold_out other other_codes" to OUT (the other
# answers as status:error, comma-separated), and each other answer's status and body
# as a line of OUT.other (their details).
if [[ ${1:-} == --buyer ]]; then
    url=$2 sku=$3 tag=$4 out=$5 secs=$6
    n201=0 busy=0 soldout=0 other=0 codes="" n=0 cpid="" other_was=0
    trap '[[ -n $cpid ]] && kill "$cpid" 2>/dev/null; exit 143' TERM
    deadline=$((SECONDS + secs))
    while ((SECONDS < deadline)); do
        n=$((n + 1))
        curl -s -o "$out.body" -w '%{http_code}' --max-time 30 -X POST \
            -H 'Content-Type: application/json' -d "{\"user_id\":\"$tag-$n\"}" \
            "$url/skus/$sku/orders" >"$out.code" 2>/dev/null &
        cpid=$!
        wait "$cpid"
        cpid=""
        code=$(<"$out.code")
        err=$(grep -o '"error":"[a-z_]*"' "$out.body" 2>/dev/null | cut -d'"' -f4) || true
        other_was=$other
        case $code in
        201) n201=$((n201 + 1)) ;;
        409)
            if grep -q '"sold_out"' "$out.body"; then
                soldout=1
                break
            fi
            other=$((other + 1)) codes+="409:$err,"
            ;;
        503)
            if grep -q '"busy"' "$out.body"; then busy=$((busy + 1)); else
                other=$((other + 1)) codes+="503:$err,"
            fi
            ;;
        *) other=$((other + 1)) codes+="$code:${err:--}," ;;
        esac
        ((other == other_was)) || echo "$code $(tr -d '\n' <"$out.body" 2>/dev/null)" >>"$out.other"
    done
    echo "$n201 $busy $soldout $other ${codes:-none}" >"$out.tmp" && mv "$out.tmp" "$out"
    exit 0
fi

LOCK=${1:-redis}
STOCK=30
WORK_US=150000
TTL_MS=300
ZK_SESSION_MS=1000
case $LOCK in
zk) LEASE=(--zk-session-ms "$ZK_SESSION_MS") LEASE_MS=$ZK_SESSION_MS ;;
*) LEASE=(--lock-ttl-ms "$TTL_MS") LEASE_MS=$TTL_MS ;;
esac
SOLD_WHILE_FROZEN=10 # units instance 2 sells while instance 1 is frozen
BUYERS=3             # per instance
ATTEMPTS=3

gt() { [[ $1 =~ ^-?[0-9]+$ && $2 =~ ^-?[0-9]+$ ]] && (($1 > $2)); }
ge() { [[ $1 =~ ^-?[0-9]+$ && $2 =~ ^-?[0-9]+$ ]] && (($1 >= $2)); }

it_begin "frozen-$LOCK" curl jq redis-server
[[ $LOCK != zk ]] || checks_require java
if [[ $LOCK == pg ]]; then
    checks_require postgres initdb
    chmod o+x "$dir" # the postgres user reaches its data dir under it
fi
CUR_CLUSTER=""
BUYER_NAMES=()

stop_buyers() {
    local b
    for b in "${BUYER_NAMES[@]}"; do proc_stop "$b" "$dir" 2 || true; done
    BUYER_NAMES=()
}
# A frozen instance ignores SIGTERM until it runs again: thaw it before stopping it.
thaw() {
    [[ -n $CUR_CLUSTER ]] && proc_alive seckill-1 "$CUR_CLUSTER" &&
        kill -CONT "$(cat "$CUR_CLUSTER/seckill-1.pid")" 2>/dev/null
    return 0
}
cluster_down() {
    [[ -n $CUR_CLUSTER ]] || return 0
    thaw
    "$ROOT/scripts/cluster.sh" down --dir "$CUR_CLUSTER" --quiet || true
    CUR_CLUSTER=""
}
on_exit() {
    stop_buyers
    cluster_down
}

# jfield JSON FILTER: a jq filter's value, "" when absent or not JSON.
jfield() { jq -r "$2 | if . == null then empty else . end" <<<"$1" 2>/dev/null || true; }
stats() { curl -s --max-time 5 "$1/stats" || true; }
sku_json() { curl -s --max-time 5 "$1/skus/$2" || true; }

# Freezes instance 1 when its /stats show it holds the lock (acquisitions not yet
# released) by an acquisition the previous answer did not count yet: a hold that began
# within one poll (tens of ms), early in its 150 ms of work. A hold seen only as "not yet
# released" may be past its commit, waiting for its release's round trip: on a busy
# machine under TSan that was often enough for three misses in a row (CI, pg).
# Parsed in bash, not jq: every millisecond between the answer and the SIGSTOP is a
# chance for the holder to finish its critical section.
LAST_ACQ=""
freeze_if_holding() {
    local s acq rel rnh last=$LAST_ACQ
    s=$(curl -s --max-time 2 "$I1/stats") || return 1
    [[ $s =~ \"acquisitions\":([0-9]+) ]] || return 1
    acq=${BASH_REMATCH[1]} LAST_ACQ=${BASH_REMATCH[1]}
    [[ -n $last ]] && ((acq > last)) || return 1
    [[ $s =~ \"releases\":([0-9]+) ]] || return 1
    rel=${BASH_REMATCH[1]}
    [[ $s =~ \"releases_not_held\":([0-9]+) ]] || return 1
    rnh=${BASH_REMATCH[1]}
    ((acq > rel + rnh)) || return 1
    kill -STOP "$I1_PID"
}
sold_at_least() { # URL SKU N
    local v
    v=$(jfield "$(sku_json "$1" "$2")" .sold)
    [[ $v =~ ^[0-9]+$ ]] && ((v >= $3))
}
buyers_done() {
    local b
    for b in "${BUYER_NAMES[@]}"; do
        [[ -s $dir/$b.out ]] || return 1
    done
}
instances_idle() {
    local u n
    for u in "$I1" "$I2"; do
        n=$(jfield "$(stats "$u")" .inflight)
        [[ $n =~ ^[0-9]+$ ]] && ((n <= 1)) || return 1
    done
}

# run_scenario on|off: sets the R_* results of the last attempt.
run_scenario() {
    local fencing=$1 attempt cdir body code b i t0 t1 before after counter sold0 st lost_before lost_after want
    cdir=$dir/cluster-$fencing
    echo "# $LOCK, fencing $fencing: 2 instances, lease ${LEASE_MS}ms, ${WORK_US}us of work, 1 segment, stock $STOCK"
    CUR_CLUSTER=$cdir
    if ! "$ROOT/scripts/cluster.sh" up --dir "$cdir" --quiet --instances 2 --lb none --lock "$LOCK" \
        -- "${LEASE[@]}" --work-us "$WORK_US" --fencing "$fencing" \
        --log-level warn >"$dir/up-$fencing.out" 2>&1; then
        tail -n 5 "$dir/up-$fencing.out"
        CUR_CLUSTER=""
        return 1
    fi
    # shellcheck disable=SC1091
    source "$cdir/cluster.env"
    read -r I1 I2 <<<"$INSTANCE_URLS"
    I1_PID=$(cat "$cdir/seckill-1.pid")
    # The stale commit shows on instance 1 as a commit made after its lease was lost
    # (fencing off) or as a fenced-off commit (fencing on).
    if [[ $fencing == off ]]; then counter=.commits_after_lease_lost; else counter=.fenced_off_commits; fi

    R_HIT=0
    for ((attempt = 1; attempt <= ATTEMPTS; attempt++)); do
        R_SKU="frozen-$fencing-$attempt"
        body=$(printf '{"stock":%d,"segments":1,"per_user_limit":1}' "$STOCK")
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT \
            -H 'Content-Type: application/json' -d "$body" "$I1/skus/$R_SKU?reset=true")
        [[ $code == 201 || $code == 200 ]] || {
            echo "  PUT /skus/$R_SKU answered $code"
            return 1
        }
        st=$(stats "$I1")
        before=$(jfield "$st" "$counter") lost_before=$(jfield "$st" .lock.leases_lost)
        for ((i = 1; i <= BUYERS; i++)); do
            for u in 1 2; do
                b="buyer-$fencing-$attempt-$u-$i"
                rm -f "$dir/$b.out"
                proc_start "$b" "$dir" bash "${BASH_SOURCE[0]}" --buyer \
                    "$([[ $u == 1 ]] && echo "$I1" || echo "$I2")" "$R_SKU" "$b" "$dir/$b.out" 60 ||
                    return 1
                BUYER_NAMES+=("$b")
            done
        done

        LAST_ACQ=""
        if ! wait_until 20 freeze_if_holding; then
            echo "  instance 1 never held the lock"
            return 1
        fi
        t0=$(date +%s%N)
        sold0=$(jfield "$(sku_json "$I2" "$R_SKU")" .sold)
        # Instance 2 goes on selling once the frozen lease has run out: SOLD_WHILE_FROZEN
        # units, or what is left when fewer are (a freeze that came late in the sale on a
        # busy machine: CI under stress froze instance 1 at 21 sold and waited 30 s for a
        # 10th unit of 9). The frozen holder has read a unit it has not written, so at
        # least one is left; a lease that never runs out still sells none.
        want=$((sold0 + SOLD_WHILE_FROZEN))
        ((want > STOCK)) && want=$STOCK
        R_KEPT_SELLING=0
        if wait_until 30 sold_at_least "$I2" "$R_SKU" "$want"; then
            R_KEPT_SELLING=1
        fi
        R_SOLD_WHILE_FROZEN=$(($(jfield "$(sku_json "$I2" "$R_SKU")" .sold) - ${sold0:-0}))
        kill -CONT "$I1_PID"
        t1=$(date +%s%N)
        R_FROZEN_MS=$(((t1 - t0) / 1000000))

        wait_until 60 buyers_done || echo "  buyers did not finish"
        stop_buyers
        wait_until 10 instances_idle || echo "  instances still busy"
        st=$(stats "$I1")
        after=$(jfield "$st" "$counter") lost_after=$(jfield "$st" .lock.leases_lost)
        R_STALE=$((after - before))
        R_LOST=$((${lost_after:-0} - ${lost_before:-0}))
        echo "  attempt $attempt: instance 1 frozen ${R_FROZEN_MS}ms while instance 2 sold" \
            "$R_SOLD_WHILE_FROZEN; stale commits on instance 1 (${counter#.}): $R_STALE"
        if ((R_STALE > 0)); then
            R_HIT=1
            break
        fi
        echo "  the freeze missed the critical section; again on a fresh SKU"
    done
    ((attempt <= ATTEMPTS)) || attempt=$ATTEMPTS # the results below are the last attempt's

    # ---- results of the last attempt ----
    # zk: the frozen instance's ZooKeeper session expired during the freeze; an order
    # of it that was waiting for the lock then may answer 503 unavailable (the lock
    # service was gone, for that instance). Nothing is placed; not counted in R_OTHER.
    # pg likewise: the frozen instance's queries in flight may outlive their timeout.
    R_201=0 R_BUSY=0 R_OTHER=0 R_CODES="" R_FROZEN_UNAVAILABLE=0
    local n201 nbusy nother codes unav
    for f in "$dir"/buyer-"$fencing"-"$attempt"-*.out; do
        [[ -s $f ]] || continue
        read -r n201 nbusy _ nother codes <"$f"
        unav=0
        if [[ $LOCK == zk || $LOCK == pg ]] && [[ $f == */buyer-"$fencing"-"$attempt"-1-*.out ]]; then
            unav=$(grep -o '503:unavailable' <<<"$codes" | wc -l)
        fi
        R_201=$((R_201 + n201)) R_BUSY=$((R_BUSY + nbusy)) R_OTHER=$((R_OTHER + nother - unav))
        R_FROZEN_UNAVAILABLE=$((R_FROZEN_UNAVAILABLE + unav))
        [[ $codes == none ]] || R_CODES+="$codes"
    done
    R_SKUJ=$(sku_json "$I2" "$R_SKU")
    R_AUDIT=$(curl -s --max-time 30 "$I2/skus/$R_SKU/audit" || true)
    echo "  sku: $(jq -c 'del(.segments)' <<<"$R_SKUJ" 2>/dev/null || echo "$R_SKUJ")"
    echo "  audit: $R_AUDIT"
    echo "  buyers: $R_201 x 201, $R_BUSY x 503 busy, $R_OTHER other ${R_CODES}$( ((R_FROZEN_UNAVAILABLE)) &&
        echo " ($R_FROZEN_UNAVAILABLE x 503 unavailable from the frozen instance's buyers)")"
    for f in "$dir"/buyer-"$fencing"-"$attempt"-*.out.other; do
        [[ -s $f ]] && sed "s|^|    $(basename "$f" .out.other): |" "$f"
    done
    cluster_down
    return 0
}

# ---- fencing off: the frozen holder's stale write oversells ------------------------
if run_scenario off; then
    check "off: the freeze caught instance 1 inside the critical section (stale commit)" \
        eq "$R_HIT" 1
    check "off: instance 2 kept selling while instance 1 was frozen ($R_SOLD_WHILE_FROZEN units in ${R_FROZEN_MS}ms)" \
        eq "$R_KEPT_SELLING" 1
    sold=$(jfield "$R_SKUJ" .sold)
    check "off: oversold (server sold $sold > stock $STOCK)" gt "$sold" "$STOCK"
    check "off: GET /skus reports oversold > 0" gt "$(jfield "$R_SKUJ" .oversold)" 0
    check "off: the audit finds the oversell (oversold > 0)" gt "$(jfield "$R_AUDIT" .oversold)" 0
    check "off: buyers got more 201s than there was stock ($R_201 > $STOCK)" gt "$R_201" "$STOCK"
else
    check "off: scenario ran" false
fi

# ---- fencing on: the stale commit is refused, the sale is exact --------------------
if run_scenario on; then
    check "on: the freeze caught instance 1 inside the critical section (fenced_off_commits $R_STALE > 0)" \
        eq "$R_HIT" 1
    check "on: instance 2 kept selling while instance 1 was frozen ($R_SOLD_WHILE_FROZEN units in ${R_FROZEN_MS}ms)" \
        eq "$R_KEPT_SELLING" 1
    check "on: instance 1's /stats count the lease it lost while frozen (leases_lost +$R_LOST)" \
        gt "$R_LOST" 0
    sold=$(jfield "$R_SKUJ" .sold)
    check "on: server sold == stock ($sold == $STOCK)" eq "$sold" "$STOCK"
    check "on: nothing oversold, nothing left" eq "$(jfield "$R_SKUJ" .oversold)/$(jfield "$R_SKUJ" .remaining)" 0/0
    check "on: client-counted 201s == server sold ($R_201 == $sold)" eq "$R_201" "$sold"
    check "on: audit sold == stock, orders == 201s" \
        eq "$(jfield "$R_AUDIT" .sold)/$(jfield "$R_AUDIT" .orders)" "$STOCK/$R_201"
    check "on: audit consistent, oversold 0" \
        eq "$(jfield "$R_AUDIT" .consistent)/$(jfield "$R_AUDIT" .oversold)" true/0
    check "on: no limit breach, no duplicate order id" \
        eq "$(jfield "$R_AUDIT" .limit_breaches)/$(jfield "$R_AUDIT" .duplicate_order_ids)" 0/0
    check "on: no answer other than 201 / 409 sold_out / 503 busy$([[ $LOCK == zk || $LOCK == pg ]] &&
        echo " ($LOCK: or 503 unavailable from the frozen instance)")" eq "$R_OTHER" 0
else
    check "on: scenario ran" false
fi

# Sanitizer builds (SECKILL_BUILD=build/address, ...) report into the instance logs.
flagged=$(grep -lE 'ERROR: (Address|Leak|Memory)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "$dir"/cluster-*/seckill-*.log 2>/dev/null | tr '\n' ' ' || true)
check "no sanitizer report in the instance logs ${flagged}" eq "$flagged" ""

checks_finish
