#!/usr/bin/env bash
# The restore drill of docs/runbook.md, as the runbook says, mid-sale:
#
#   - a sale with a payment window on one instance with --postgres (the database and
#     its role as deploy/postgres/roles.sql makes them), orders coming all along from a
#     buyer loop; some paid, some cancelled;
#   - the Redis AOF copied by scripts/redis-backup.sh, then more orders and a pay and a
#     cancel of orders the copy has, then PostgreSQL dumped (pg_dump -Fc), then more
#     orders: the three kinds of loss a restore has;
#   - both stores lost: Redis, PostgreSQL and the instance stopped by their pids, the
#     data dirs removed;
#   - restored: the AOF copy put back, a new database cluster with roles.sql and
#     pg_restore, scripts/restore-cut.sh, the instance started again.
#
# Then what a user notices: every order answered 201 before the Redis backup answers
# GET /orders/{id}, in the state it had then (a pay after the backup undone: the order is
# pending again, and paying it again with the same payment_id is a 200); the orders
# placed between the two backups are not in Redis and are set aside in
# seckill_orders_after_restore, the cut pay in seckill_events_after_restore; nothing
# oversold; the audit consistent and store.matches true; and the sale goes on (a new
# order placed and in PostgreSQL).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin restore redis-server redis-cli psql pg_dump pg_restore createdb curl jq
loop_pid=""
on_exit() {
    if [[ -n $loop_pid ]]; then
        touch "$dir/stop"
        wait "$loop_pid" 2>/dev/null
    fi
    return 0
}

# --- PostgreSQL as the deployment has it: database seckill, role seckill (roles.sql)
pg_pw=pgpw-$RANDOM$RANDOM
start_pg "$dir" || { echo "postgres did not start"; exit 1; }
pg_port=$STARTED_PORT
pg_setup() { # the database and the role, on a fresh cluster
    createdb -h 127.0.0.1 -p "$pg_port" -U postgres seckill &&
        psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d seckill \
            -v password="$pg_pw" -f "$ROOT/deploy/postgres/roles.sql" >/dev/null
}
check "database seckill and its role (deploy/postgres/roles.sql)" pg_setup || exit 1
pg_url="postgresql://seckill:$pg_pw@127.0.0.1:$pg_port/seckill"
echo "$pg_url" >"$dir/postgres" # the instances' --postgres-file, and restore-cut's @FILE
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$pg_url" -c "$1"; }

# --- the data Redis: AOF always, as deploy/redis/seckill-redis.conf
start_redis data "$dir" always || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
flags=(--redis "127.0.0.1:$rport" --postgres-file "$dir/postgres" --lock redis --threads 2)
start_instance s1 "$dir" "${flags[@]}" || { echo "instance did not start"; exit 1; }
U=$STARTED_URL

# --- the sale: 1000 units, a 10-minute payment window (nothing expires in this test)
expect "PUT the SKU" "201" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$U/skus/tv" \
    -d '{"stock":1000,"segments":4,"pay_within_ms":600000}')"
place() { # TAG N: N orders by users TAG-1..TAG-N; "order_id user" lines in $dir/TAG
    local i out
    for ((i = 1; i <= $2; i++)); do
        out=$(it_order "$U" tv "$1-$i" 1 "k$1-$i")
        [[ ${out%% *} == 201 ]] && echo "$(cut -d' ' -f2 <<<"$out") $1-$i"
    done >"$dir/$1"
}
pay() { # ORDER PAYMENT_ID -> the state, or the error
    curl -s --max-time 10 -X POST "$U/orders/$1/pay" -d "{\"payment_id\":\"$2\"}" |
        jq -r '.state // .error'
}
cancel() { # ORDER USER
    curl -s --max-time 10 -X POST "$U/orders/$1/cancel" -d "{\"user_id\":\"$2\"}" | jq -r '.state // .error'
}
state() { # ORDER -> its state, or the HTTP status when not 200
    local out
    out=$(curl -s --max-time 10 -w '\n%{http_code}' "$U/orders/$1")
    if [[ ${out##*$'\n'} == 200 ]]; then jq -r .state <<<"${out%$'\n'*}"; else echo "${out##*$'\n'}"; fi
}
audit() { curl -s --max-time 10 "$U/skus/tv/audit"; }
settled() { [[ $(audit | jq -r '.consistent and .store.matches and .store.lag_events == 0') == true ]]; }

place a 30
expect "before: 30 orders placed" "30" "$(wc -l <"$dir/a")"
mapfile -t a_ids < <(cut -d' ' -f1 "$dir/a")
mapfile -t a_users < <(cut -d' ' -f2 "$dir/a")
ok=0
for i in 0 1 2 3 4 5 6 7; do [[ $(pay "${a_ids[i]}" "pay-a$i") == paid ]] && ok=$((ok + 1)); done
for i in 8 9 10 11; do [[ $(cancel "${a_ids[i]}" "${a_users[i]}") == cancelled ]] && ok=$((ok + 1)); done
expect "before: 8 paid, 4 cancelled" "12" "$ok"
# Slack: the sink writes within a second; 20 s on a busy machine.
check "before: the audit consistent, PostgreSQL matching" wait_until 20 settled

# --- buyers all along, from here to the disaster
it_order_loop "$U/skus/tv/orders" L >"$dir/loop" &
loop_pid=$!
loop_running() { (($(grep -c ' 201 ' "$dir/loop") >= 5)); }
# the sale is running when the backup starts (Slack: 20 s for 5 orders on a busy machine)
wait_until 20 loop_running

# --- backup 1: Redis (runbook: first)
r_start=${EPOCHREALTIME/./}
check "scripts/redis-backup.sh copies the AOF while the sale runs" \
    bash "$ROOT/scripts/redis-backup.sh" "$dir/backup/redis" -h 127.0.0.1 -p "$rport" >"$dir/backup.out" 2>&1 ||
    cat "$dir/backup.out"
expect "... automatic rewrites back on" "100" \
    "$(redis-cli -p "$rport" config get auto-aof-rewrite-percentage | sed -n 2p)"
r_end=${EPOCHREALTIME/./}

# --- between the backups: orders, and a pay and a cancel of orders the copy has
place b 10
expect "between: 10 orders placed" "10" "$(wc -l <"$dir/b")"
expect "between: order a12 paid after the Redis backup" "paid" "$(pay "${a_ids[12]}" pay-late)"
expect "between: order a13 cancelled after the Redis backup" "cancelled" \
    "$(cancel "${a_ids[13]}" "${a_users[13]}")"
b_list=$(cut -d' ' -f1 "$dir/b" | paste -sd,)
in_pg() {
    [[ $(sql "SELECT count(*) FROM seckill_orders WHERE order_id IN ($b_list)") == 10 &&
        $(sql "SELECT state FROM seckill_orders WHERE order_id = ${a_ids[12]}") == paid &&
        $(sql "SELECT state FROM seckill_orders WHERE order_id = ${a_ids[13]}") == cancelled ]]
}
# Slack as above: what the dump must hold is in PostgreSQL before it starts.
check "between: those changes reached PostgreSQL" wait_until 20 in_pg

# --- backup 2: PostgreSQL (runbook: second), as the instances' role
check "pg_dump -Fc of the database while the sale runs" \
    pg_dump -Fc -f "$dir/backup/seckill.dump" -d "$pg_url"

# --- after both backups: orders no copy has
place c 5
expect "after: 5 orders placed" "5" "$(wc -l <"$dir/c")"
touch "$dir/stop"
wait "$loop_pid"
loop_pid=""

# --- the disaster: both stores and the instance gone, their data with them
proc_stop s1 "$dir"
check "Redis killed by its pid" proc_stop data "$dir" 10 KILL 2>/dev/null
check "PostgreSQL stopped by its pid" proc_stop pg "$dir" 10 QUIT
rm -rf "$dir/data"
pg_data_gone "$dir"
gone() { [[ ! -e $dir/data && ! -e $dir/pg.data ]]; }
check "both data dirs are gone" gone

# --- the restore, as the runbook says
mkdir -p "$dir/data"
cp -a "$dir/backup/redis/appendonlydir" "$dir/data/"
check "Redis restarted on its port from the AOF copy" \
    start_redis --port "$rport" data "$dir" always
pg_restored() {
    pg_initdb "$dir" && pg_server_start "$dir" "$pg_port" 60 && pg_setup &&
        pg_restore --exit-on-error --single-transaction -h 127.0.0.1 -p "$pg_port" \
            -U postgres -d seckill --clean --if-exists "$dir/backup/seckill.dump"
}
check "PostgreSQL restored into a new cluster (roles.sql, pg_restore)" pg_restored
check "scripts/restore-cut.sh" bash "$ROOT/scripts/restore-cut.sh" "@$dir/postgres" \
    -h 127.0.0.1 -p "$rport" >"$dir/cut.out" 2>&1
cat "$dir/cut.out"
check "instance restarted" start_instance s1 "$dir" "${flags[@]}" || exit 1
U=$STARTED_URL

# --- what a buyer and the shop see
check "after the restore: the audit consistent, PostgreSQL matching" wait_until 20 settled ||
    audit | jq -c .
expect "... nothing oversold" "0 true" "$(audit | jq -r '"\(.oversold) \(.sold <= .initial)"')"
want=() got=()
for i in "${!a_ids[@]}"; do
    case $i in [0-7]) w=paid ;; 8 | 9 | 10 | 11) w=cancelled ;; *) w=pending ;; esac
    want+=("$w")
    got+=("$(state "${a_ids[i]}")")
done
expect "orders placed before the backup answer, in their state then" "${want[*]}" "${got[*]}"
lost=0
while read -r id _; do [[ $(state "$id") == 404 ]] && lost=$((lost + 1)); done < <(cat "$dir/b" "$dir/c")
expect "orders placed after the Redis backup are not in Redis (404)" "15" "$lost"
expect "... those between the backups set aside in seckill_orders_after_restore" "10" \
    "$(sql "SELECT count(*) FROM seckill_orders_after_restore WHERE order_id IN ($b_list)")"
expect "... the cut pay in seckill_events_after_restore" "paid" \
    "$(sql "SELECT state FROM seckill_events_after_restore WHERE order_id = ${a_ids[12]}")"
expect "... the cut cancel too" "cancelled" \
    "$(sql "SELECT state FROM seckill_events_after_restore WHERE order_id = ${a_ids[13]}")"
expect "the payment service pays the undone pay again: 200 paid" "paid" "$(pay "${a_ids[12]}" pay-late)"

# The loop's orders: those answered before the backup started are all there; of the
# later ones each is in Redis, set aside, or placed after PostgreSQL's copy.
early=0 early_ok=0 later=0 later_kept=0
while read -r t0 t1 status _ _ id _; do
    [[ $status == 201 ]] || continue
    if ((t1 < r_start)); then
        early=$((early + 1))
        [[ $(state "$id") != 404 ]] && early_ok=$((early_ok + 1))
    elif ((t0 > r_end)); then
        later=$((later + 1))
        [[ $(state "$id") != 404 ]] && later_kept=$((later_kept + 1))
    fi
done <"$dir/loop"
expect "the buyer loop's orders answered before the backup: all there" "$early" "$early_ok"
expect "... and none placed after the copy ended is in Redis" "0" "$later_kept"
echo "buyer loop: $early orders before the Redis backup, $later after it"

# --- the runbook's queries: the schema's version, and the audit's store block by hand
expect "the schema's versions (runbook, schema migration)" "1 2 3 4" \
    "$(psql -X -At -d "$(cat "$dir/postgres")" -c 'SELECT version, applied_at FROM seckill_schema ORDER BY version' | cut -d'|' -f1 | paste -sd' ')"
gen=$(redis-cli -p "$rport" hget 'sk:{tv}:meta' outbox)
by_hand=$(sql "SELECT state, count(*), sum(qty) FROM seckill_orders
    WHERE sku = 'tv' AND generation = '$gen' GROUP BY state ORDER BY state" | tr '|' ' ' | paste -sd' ')
by_audit=$(audit | jq -r '.store.by_state | to_entries | map(select(.value.orders > 0)) | sort_by(.key)
    | map("\(.key) \(.value.orders) \(.value.units)") | join(" ")')
echo "by state in PostgreSQL: $by_hand"
check "the runbook's comparison query finds the SKU's orders" test -n "$by_hand"
expect "... and says what the audit's store.by_state says" "$by_audit" "$by_hand"

# --- the sale goes on
out=$(it_order "$U" tv after-1 1 kafter-1)
expect "a new order is placed" "201" "${out%% *}"
check "... and reaches PostgreSQL: the audit consistent, matching" wait_until 20 settled

checks_summary
