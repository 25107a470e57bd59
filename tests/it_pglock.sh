#!/usr/bin/env bash
# it_pglock.sh — the pg lock mode (the database lock) end to end. PostgreSQL, Redis, the
# instances and nginx are started by scripts/cluster.sh --lock pg; asserted are
# outcomes, and one bound (no answer hangs while PostgreSQL is down).
#
#   exact    Three instances behind nginx, wrk placing orders of fresh users until the
#            stock is gone: client-counted 201s == stock == server sold, nothing
#            oversold, nothing left; the audit agrees (sold == stock, orders == 201s,
#            consistent, no limit breach, no duplicate order id); no answer other than
#            201 / 409 / 503. The lock rows' versions (the fencing tokens) moved.
#   frozen   tests/it_frozen.sh pg: a holder frozen (SIGSTOP) inside its critical section
#            past its 300 ms lease. With --fencing off its stale commit oversells; with
#            fencing on it is refused (fenced off) and nothing is oversold.
#   restart  Three instances behind nginx, curl loops placing orders (the stock never
#            runs out). PostgreSQL is stopped mid-load (a fast shutdown: every
#            connection closed) and started again on its port. While it is down, orders
#            sent after the holds of that moment ended answer 503 unavailable (or busy);
#            no answer takes longer than the wait plus margin. Once it is back every
#            instance places orders again, the same processes as before. Every 201 is an
#            order and nothing else is (server sold == 201s), the audit is consistent.
#   notify   Two instances, one segment, a 10 s lease, 100 ms of work, one order a hold
#            (--batch 1): orders queue
#            for the one lock across instances. PostgreSQL logs every statement
#            (log_statement = all, ALTER SYSTEM). Every order is placed, none waited
#            anywhere near the lease (a waiter woken by polling or by the lease running
#            out would wait seconds); the waiters were woken by NOTIFY (watch_wakeups > 0,
#            none asleep at the end); and the acquire statements PostgreSQL ran are no
#            more than the attempts the instances account for (one per acquire, one per
#            wake-up, and the row's first making): no polling query while waiting.
#
#   tests/it_pglock.sh [SCENARIOS]   comma-separated, also $IT_PGLOCK_SCENARIOS
#                                    (default exact,frozen,restart,notify)
#   SECKILL_BIN / SECKILL_BUILD      the server binary
#
# Last line: "N passed, N failed"; exit status 1 when anything failed.
# shellcheck disable=SC2317 # functions run from traps and wait_until look unreachable
set -uo pipefail

# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/sale.sh
source "$ROOT/tests/sale.sh"

SCENARIOS=${1:-${IT_PGLOCK_SCENARIOS:-exact,frozen,restart,notify}}
STOCK=3000
SEGMENTS=8
WORK_US=2000
CONNECTIONS=32
WRK_SECS=60       # wrk's cap; a sale stops once sold out (see end_sale)
SOLD_OUT_SEEN=300 # sold_out answers the instances gave before wrk is stopped
LOOP_CLIENTS=6
WAIT_MS=1000
SLOWEST_MS=3000 # longest acceptable answer: the wait, twice, and margin
NOTIFY_ORDERS=16
NOTIFY_TTL_MS=10000
NOTIFY_SLOWEST_MS=4000 # 16 x 100 ms in a row, and margin; far below the lease and the wait

it_begin pglock wrk curl jq nginx redis-server postgres initdb psql
chmod o+x "$dir" # the postgres user reaches its data dir under it

le() { [[ $1 =~ ^-?[0-9]+$ && $2 =~ ^-?[0-9]+$ ]] && (($1 <= $2)); }
sql() { psql -qAtX "$PG_URL" -c "$1" 2>/dev/null; }

# ---- exact: three instances, sold exactly ---------------------------------------------

scenario_exact() {
    echo "# exact: pg, 3 instances + nginx, stock $STOCK in $SEGMENTS segments," \
        "${WORK_US}us of work, wrk -c$CONNECTIONS until sold out"
    cluster_up exact --instances 3 --lb nginx --lock pg -- --work-us "$WORK_US" \
        --log-level warn || return 0
    SKU=exact
    put_sku "$SKU" "$STOCK" "$SEGMENTS" || { cluster_down; return 0; }
    rm -f "$dir/wrk.log"
    proc_start wrk "$dir" wrk -t 2 -c "$CONNECTIONS" -d "${WRK_SECS}s" \
        -s "$ROOT/loadtest/orders.lua" "$LB_URL" -- "$SKU" 0 1 "pg$$x$RANDOM" ||
        { check "wrk started" false; cluster_down; return 0; }
    if ! wait_until 30 sold_at_least 1; then
        echo "  nothing sold in 30 s"
    elif ! wait_until "$WRK_SECS" sold_out_served; then
        echo "  the stock was not sold out (sold $(sold_now))"
    fi
    proc_alive wrk "$dir" && kill -INT "$(cat "$dir/wrk.pid")"
    wait_until 15 wrk_done || { echo "  wrk did not stop"; proc_stop wrk "$dir" 2; }
    wait_until 10 instances_idle || echo "  instances still busy"
    sale_checks exact
    local acq versions
    acq=$(instances_sum '.lock.acquisitions')
    versions=$(sql "SELECT sum(version) FROM seckill_locks WHERE key LIKE '%{$SKU}%'")
    echo "  acquisitions: $acq, the rows' versions summed: $versions"
    check "exact: every acquisition took a new version of its row ($versions >= $acq > 0)" \
        eval "gt $acq 0 && le $acq ${versions:-0}"
    check "exact: no lock row is held once the sale is over" \
        eq "$(sql "SELECT count(*) FROM seckill_locks WHERE owner IS NOT NULL AND expires_at > now()")" 0
    cluster_down
}

# ---- frozen: it_frozen.sh in pg mode ---------------------------------------------------

scenario_frozen() { run_frozen pg; }

# ---- restart: PostgreSQL stopped mid-load, started again -------------------------------

pg_dead() { ! proc_alive pg "$CUR_CLUSTER"; }

scenario_restart() {
    echo "# restart: pg, 3 instances + nginx, $LOOP_CLIENTS order loops; PostgreSQL" \
        "stopped mid-load and started again (wait ${WAIT_MS}ms)"
    cluster_up restart --instances 3 --lb nginx --lock pg -- --work-us "$WORK_US" \
        --wait-ms "$WAIT_MS" --log-level warn || return 0
    SKU=restart
    put_sku "$SKU" 100000000 "$SEGMENTS" || { cluster_down; return 0; }
    local pids_before c t_stop t_calm t_restart t_up placed_up placed_end
    pids_before=$(instance_pids)
    rm -f "$dir/stop" "$dir"/load.*
    for ((c = 1; c <= LOOP_CLIENTS; c++)); do
        it_order_loop "$LB_URL/skus/$SKU/orders" "$c" >"$dir/load.$c" &
        LOADERS+=($!)
    done
    wait_until 30 at_least_201_since 0 100 || echo "  slow: fewer than 100 orders in 30 s"
    t_stop=${EPOCHREALTIME/./}
    "$CLUSTER" stop --dir "$CUR_CLUSTER" pg --quiet
    check "restart: PostgreSQL stopped" pg_dead
    # Holds taken before the stop may still commit (their leases are valid; the fence
    # is in Redis). Orders sent a second after the stop cannot get a lock.
    t_calm=$((t_stop + 1000000))
    wait_until 60 at_least_since "$t_calm" 30 || echo "  slow: fewer than 30 answers while it was down"
    t_restart=${EPOCHREALTIME/./}
    "$CLUSTER" start --dir "$CUR_CLUSTER" pg --quiet || check "restart: PostgreSQL started again" false
    t_up=${EPOCHREALTIME/./}
    placed_up=$(placed_per_instance)
    check "restart: orders placed again after PostgreSQL came back (100 within 60 s)" \
        wait_until 60 at_least_201_since "$t_up" 100
    stop_loaders
    wait_until 10 instances_idle || echo "  instances still busy"
    placed_end=$(placed_per_instance)

    outage_checks restart PostgreSQL "$t_stop" "$t_calm" "$t_restart" "$t_up" "$placed_up" "$placed_end" \
        "$pids_before"
    cluster_down
}

# ---- notify: waiters woken by NOTIFY, no polling ----------------------------------------

acquire_statements() { # the conditional UPDATEs PostgreSQL ran (its log)
    grep -c 'execute <unnamed>: WITH prev AS' "$CUR_CLUSTER/pg.log" 2>/dev/null
}
logging_all() { [[ $(sql "SHOW log_statement") == all ]]; }

scenario_notify() {
    echo "# notify: pg, 2 instances + nginx, 1 segment, lease ${NOTIFY_TTL_MS}ms, 100 ms of" \
        "work, $NOTIFY_ORDERS orders at once"
    cluster_up notify --instances 2 --lb nginx --lock pg -- --work-us 100000 --batch 1 \
        --lock-ttl-ms "$NOTIFY_TTL_MS" --wait-ms 8000 --log-level warn || return 0
    SKU=notify
    put_sku "$SKU" 1000 1 || { cluster_down; return 0; }
    sql "ALTER SYSTEM SET log_statement = 'all'" >/dev/null
    sql "SELECT pg_reload_conf()" >/dev/null
    check "notify: PostgreSQL logs every statement" wait_until 10 logging_all
    local before i statements acq jobs wakeups slowest codes
    # One order through each instance first: the lock's row is made, and each
    # instance's loop has its connections up and LISTENing before the count starts.
    for i in 1 2; do
        curl -s -o /dev/null --max-time 10 -X POST "$LB_URL/skus/$SKU/orders" \
            -d "{\"user_id\":\"warm$i\"}"
    done
    acq=$(instances_sum '.lock.acquisitions + .lock.wait_timeouts + .lock.errors')
    wakeups=$(instances_sum '.lock.watch_wakeups')
    before=$(acquire_statements)
    for ((i = 1; i <= NOTIFY_ORDERS; i++)); do
        curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 20 -X POST \
            "$LB_URL/skus/$SKU/orders" -d "{\"user_id\":\"n$i\"}" >"$dir/notify.$i" &
        LOADERS+=($!)
    done
    stop_loaders
    wait_until 10 instances_idle || echo "  instances still busy"
    statements=$(($(acquire_statements) - before))
    codes=$(cat "$dir"/notify.* | awk '{ print $1 }' | sort | uniq -c | tr -s ' \n' ' ')
    slowest=$(cat "$dir"/notify.* | awk '{ if ($2 * 1000 > m) m = $2 * 1000 } END { printf "%d", m }')
    jobs=$(($(instances_sum '.lock.acquisitions + .lock.wait_timeouts + .lock.errors') - acq))
    wakeups=$(($(instances_sum '.lock.watch_wakeups') - wakeups))
    acq=$(instances_sum '.lock.acquisitions')
    echo "  answers: $codes; slowest ${slowest} ms; acquisitions $acq, wake-ups $wakeups," \
        "acquire statements run by PostgreSQL $statements"
    check "notify: every order placed" eq "$(cat "$dir"/notify.* | awk '$1 != 201' | wc -l)" 0
    check "notify: the orders contended across the instances (acquisitions $acq > 1)" gt "$acq" 1
    check "notify: no order waited for a lease to run out (slowest $slowest ms <= $NOTIFY_SLOWEST_MS)" \
        le "$slowest" "$NOTIFY_SLOWEST_MS"
    check "notify: waiters were woken by NOTIFY (watch_wakeups $wakeups > 0)" gt "$wakeups" 0
    check "notify: no waiter asleep at the end" eq "$(instances_sum '.lock.watch_waiters')" 0
    check "notify: no polling: acquire statements ($statements) <= acquires + wake-ups ($jobs + $wakeups)" \
        le "$statements" "$((jobs + wakeups))"
    cluster_down
}

for s in ${SCENARIOS//,/ }; do
    case $s in
    exact | frozen | restart | notify) "scenario_$s" ;;
    *) check "known scenario '$s' (exact, frozen, restart, notify)" false ;;
    esac
done

# Sanitizer builds (SECKILL_BUILD=build/address, ...) report into the instance logs.
flagged=$(grep -lE 'ERROR: (Address|Leak|Memory)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "$dir"/cluster-*/seckill-*.log 2>/dev/null | tr '\n' ' ' || true)
check "no sanitizer report in the instance logs ${flagged}" eq "$flagged" ""

checks_finish
