#!/usr/bin/env bash
# it_redlock_chaos.sh — Redlock keeps selling, exactly, when one of its three lock nodes
# dies in the middle of the load.
#
# Three instances behind nginx, lock mode redlock over three independent lock nodes
# (scripts/cluster.sh --lock redlock --lock-nodes 3), wrk placing orders of fresh users.
# Once a sixth of the stock is sold, lock node 2 is killed with SIGKILL (by its pid
# file). Asserted, never timings:
#   - the kill happened mid-load (stock was left) and orders went on being placed after
#     it (the server's sold count grew by 500 more units after the node was gone);
#   - exactly the stock was sold: client-counted 201s == stock == server sold, nothing
#     oversold, nothing left;
#   - the audit (recomputed from the order records) agrees: sold == stock, orders ==
#     201s, consistent, no per-user-limit breach, no duplicate order id;
#   - no answer other than 201 / 409 / 503 and no socket error.
#
#   tests/it_redlock_chaos.sh    SECKILL_BIN / SECKILL_BUILD: the server binary
#
# Last line: "N passed, N failed"; exit status 1 when anything failed.
# shellcheck disable=SC2317 # functions run from traps and wait_until look unreachable
set -uo pipefail

# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STOCK=3000
SEGMENTS=8
WORK_US=2000
DURATION=12s # wrk; the stock sells out in a few seconds, the rest is sold_out answers
CONNECTIONS=32
AFTER_KILL=500 # units that must still be sold after the node died

# shellcheck source=tests/sale.sh
source "$(dirname "$0")/sale.sh"
lt() { [[ $1 =~ ^-?[0-9]+$ && $2 =~ ^-?[0-9]+$ ]] && (($1 < $2)); }

it_begin redlock wrk curl jq nginx redis-server
CDIR=$dir/cluster
UP=0
on_exit() {
    proc_stop wrk "$dir" 2 || true
    if ((UP)); then "$ROOT/scripts/cluster.sh" down --dir "$CDIR" --quiet || return 1; fi
}

node_dead() { ! proc_alive lock-2 "$CDIR"; }

echo "# redlock over 3 lock nodes, 3 instances + nginx, stock $STOCK in $SEGMENTS segments," \
    "${WORK_US}us of work, wrk -c$CONNECTIONS -d$DURATION; lock node 2 killed mid-load"
UP=1
if ! "$ROOT/scripts/cluster.sh" up --dir "$CDIR" --quiet --instances 3 --lb nginx \
    --lock redlock --lock-nodes 3 -- --work-us "$WORK_US" --log-level warn \
    >"$dir/up.out" 2>&1; then
    tail -n 5 "$dir/up.out"
    check "cluster started" false
    checks_finish
fi
# shellcheck disable=SC1091
source "$CDIR/cluster.env"
SKU=chaos
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT \
    -H 'Content-Type: application/json' \
    -d "$(printf '{"stock":%d,"segments":%d,"per_user_limit":1}' "$STOCK" "$SEGMENTS")" \
    "$LB_URL/skus/$SKU?reset=true")
if [[ $code != 201 && $code != 200 ]]; then
    check "PUT /skus/$SKU (answered $code)" false
    checks_finish
fi

proc_start wrk "$dir" wrk -t 2 -c "$CONNECTIONS" -d "$DURATION" -s "$ROOT/loadtest/orders.lua" \
    "$LB_URL" -- "$SKU" 0 1 "chaos$$x$RANDOM" || {
    check "wrk started" false
    checks_finish
}

# ---- the kill, mid-load ----
if ! wait_until 30 sold_at_least $((STOCK / 6)); then
    check "a sixth of the stock sold before the kill (sold $(sold_now))" false
    checks_finish
fi
node_pid=$(cat "$CDIR/lock-2.pid")
proc_alive lock-2 "$CDIR" && kill -KILL "$node_pid"
wait_until 10 node_dead
check "lock node 2 (pid $node_pid) is dead" node_dead
sold_at_kill=$(sold_now)
echo "  lock node 2 killed with $sold_at_kill of $STOCK units sold"
check "the kill came mid-load (sold $sold_at_kill < stock $STOCK)" lt "${sold_at_kill:-$STOCK}" "$STOCK"
target=$((sold_at_kill + AFTER_KILL))
((target <= STOCK)) || target=$STOCK
check "orders went on after the kill (sold reached $target)" wait_until 30 sold_at_least "$target"

# ---- the end of the load ----
wait_until 60 wrk_done || echo "  wrk did not finish"
wait_until 10 instances_idle || echo "  instances still busy"
sale_checks chaos
"$ROOT/scripts/cluster.sh" down --dir "$CDIR" --quiet || check "cluster stopped" false
UP=0
# Sanitizer builds (SECKILL_BUILD=build/address, ...) report into the instance logs.
flagged=$(grep -lE 'ERROR: (Address|Leak|Memory)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "$CDIR"/seckill-*.log 2>/dev/null | tr '\n' ' ' || true)
check "no sanitizer report in the instance logs ${flagged}" eq "$flagged" ""

checks_finish
