#!/usr/bin/env bash
# A rolling upgrade under load (docs/runbook.md, "Rolling upgrade"), as the runbook says:
# three instances behind nginx with deploy/nginx/seckill.conf (TLS, a self-signed
# certificate made here; the site values replaced by lib.sh's it_deploy_nginx), one data
# Redis (AOF always) and PostgreSQL; wrk (loadtest/orders.lua) over HTTPS through nginx
# the whole time, and two buyer loops (curl) that note every order id they are given.
# Each instance in turn is drained (SIGTERM, its exit code 0) and started again on its
# port from a "new binary" (this build copied elsewhere), and the next one only once
# nginx sends it orders again and its fail_timeout has passed (each nginx worker takes
# an instance back on its own).
#
# What a buyer and the shop notice: no 5xx but 503 busy (every other 5xx, nginx's 502
# included, is counted and printed, and must be 0); no order lost: every 201 of the loops
# answers GET /orders/{id} afterwards, and the orders in the store are the 201s wrk and
# the loops were given, plus at most the requests wrk had in flight when it stopped (it
# drops their answers); the audit consistent and PostgreSQL matching; each instance runs
# the new binary at the end. The admin token is rotated on the way, as the runbook says:
# its file rewritten before the first restart; afterwards the new token is taken by
# every instance and the old one refused (401) by every instance.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin upgrade redis-server redis-cli nginx openssl psql wrk curl jq
loops=() wrk_pid=""
on_exit() {
    touch "$dir/stop"
    [[ -n $wrk_pid ]] && kill -TERM "$wrk_pid" 2>/dev/null
    local p
    for p in "${loops[@]}" $wrk_pid; do wait "$p" 2>/dev/null; done
    return 0
}
UPGRADE_SECS=${UPGRADE_SECS:-40} # wrk's run: longer than the three restarts take
WRK_CONNS=16

# --- the stores
start_pg "$dir" || { echo "postgres did not start"; exit 1; }
pg_port=$STARTED_PORT
start_redis data "$dir" always || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT

# --- three instances, flags as deploy/env/seckill.env has them
old=$SECKILL_BIN_PATH
mkdir -p "$dir/new"
cp "$old" "$dir/new/seckill" # the "new binary": another file at another path
new=$dir/new/seckill
old_token=adm-old-$RANDOM$RANDOM
new_token=adm-new-$RANDOM$RANDOM
printf '%s\n' "$old_token" >"$dir/admin-token"
flags=(--redis "127.0.0.1:$rport" --postgres "$(pg_url "$pg_port")" --lock redis
    --max-conns-per-ip 0 --threads 2 --admin-token-file "$dir/admin-token")
ports=()
run_instance() { # I BIN: instance I on its port, from BIN
    proc_start "seckill-$1" "$dir" "$2" --listen "127.0.0.1:${ports[$1 - 1]}" "${flags[@]}"
}
ready() { http_ok "http://127.0.0.1:${ports[$1 - 1]}/readyz"; }
for i in 1 2 3; do
    ports+=("$(free_port)") || exit 1
    run_instance "$i" "$old" || exit 1
done
for i in 1 2 3; do
    # Slack: ready in well under a second; 30 s on a busy machine.
    check "instance $i ready (old binary)" wait_until 30 ready "$i" || exit 1
done

# --- nginx: deploy/nginx/seckill.conf, site values replaced
mkdir -p "$dir/tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost -keyout "$dir/tls/seckill.key" \
    -out "$dir/tls/seckill.crt" >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log"; exit 1; }
it_deploy_nginx "${ports[0]}" "${ports[1]}" "${ports[2]}" || exit 1
proc_start lb "$dir" nginx -e "$dir/nginx/error.log" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" || exit 1
export CURL_CA_BUNDLE=$dir/tls/seckill.crt # the loops' curl checks nginx's certificate
P=https://localhost:$pub
A=https://localhost:$adm
serving() { [[ $(http_code "$P/skus/none") == 404 ]]; }
check "nginx serves over TLS" wait_until 15 serving || exit 1
expect "PUT the SKU (admin side, the old admin token)" "201" "$(curl -s -o /dev/null -w '%{http_code}' \
    --max-time 10 -X PUT "$A/skus/tv" -H "Authorization: Bearer $old_token" \
    -d '{"stock":10000000,"segments":16}')"

# --- the load: wrk over HTTPS, and two loops that note their order ids
wrk -t2 -c"$WRK_CONNS" -d"${UPGRADE_SECS}s" -s "$ROOT/loadtest/orders.lua" "$P" -- tv 0 1 w \
    >"$dir/wrk.out" 2>&1 &
wrk_pid=$!
for c in 1 2; do
    it_order_loop "$P/skus/tv/orders" "$c" >"$dir/loop.$c" &
    loops+=($!)
done
placed_by() { curl -s --max-time 2 "http://127.0.0.1:${ports[$1 - 1]}/stats" | jq -r '.orders.placed // 0'; }
serves() { # I N: instance I placed more than N orders
    local n
    n=$(placed_by "$1") && [[ $n =~ ^[0-9]+$ ]] && ((n > $2))
}
for i in 1 2 3; do
    check "instance $i takes orders through nginx before the upgrade" wait_until 20 serves "$i" 0
done

# --- the upgrade: one instance at a time, the admin token rotated (runbook: its file
# rewritten, then the rolling restart)
printf '%s\n' "$new_token" >"$dir/admin-token"
t0=$SECONDS
for i in 1 2 3; do
    pid=$(cat "$dir/seckill-$i.pid")
    kill -TERM "$pid"
    wait "$pid"
    expect "instance $i drained and exited 0 on SIGTERM" "0" "$?"
    rm -f "$dir/seckill-$i.pid" "$dir/seckill-$i.start"
    run_instance "$i" "$new" || exit 1
    check "instance $i ready again, new binary" wait_until 30 ready "$i"
    back_us=${EPOCHREALTIME/./}
    # nginx takes a server that failed back after fail_timeout (3 s), each of its worker
    # processes on its own: one worker may send it orders while the other still keeps it
    # out. So the next instance goes once it takes orders and fail_timeout has passed
    # since it was back, with 1 s to spare (the runbook's rule); 20 s on a busy machine.
    back() { serves "$1" 0 && ((${EPOCHREALTIME/./} - back_us >= 4000000)); }
    check "... nginx sends it orders again, and fail_timeout has passed" wait_until 20 back "$i"
done
echo "three instances upgraded in $((SECONDS - t0)) s"
running=0
for i in 1 2 3; do
    [[ $(readlink "/proc/$(cat "$dir/seckill-$i.pid")/exe") == "$new" ]] && running=$((running + 1))
done
expect "every instance runs the new binary" "3" "$running"
kill -INT "$wrk_pid" 2>/dev/null # its run may outlast the upgrade: the summary all the same
wait "$wrk_pid"
wrk_pid=""
touch "$dir/stop"
for p in "${loops[@]}"; do wait "$p"; done
loops=()

# --- what the buyers got
w=$(grep '^{"tool":"wrk-orders"' "$dir/wrk.out")
[[ -n $w ]] || { cat "$dir/wrk.out"; check "wrk printed its summary" false; }
field() { jq -rc "$1" <<<"$w"; }
loop_201=$(cat "$dir"/loop.* | awk '$3 == 201' | wc -l)
loop_5xx=$(cat "$dir"/loop.* | awk '$3 >= 500 && !($3 == 503 && $7 == "busy")' | wc -l)
loop_busy=$(cat "$dir"/loop.* | awk '$3 == 503 && $7 == "busy"' | wc -l)
wrk_bad=$(field '.unavailable + .outcome_unknown + .other_503 + ([.other_codes | to_entries[] | select((.key | tonumber) >= 500) | .value] | add // 0)')
echo "wrk: $(field .requests) requests, $(field .status_201) placed, $(field .busy) busy," \
    "other 5xx: $wrk_bad ($(field .other_codes), unavailable $(field .unavailable)," \
    "outcome_unknown $(field .outcome_unknown)), socket errors $(field .socket_errors)"
echo "loops: $loop_201 placed, $loop_busy busy, other 5xx: $loop_5xx"
expect "no 5xx but 503 busy through the upgrade (wrk)" "0" "$wrk_bad"
expect "no 5xx but 503 busy through the upgrade (loops)" "0" "$loop_5xx"
missing=0
while read -r id; do
    [[ $(http_code "$P/orders/$id" 10) == 200 ]] || missing=$((missing + 1))
done < <(cat "$dir"/loop.* | awk '$3 == 201 { print $6 }')
expect "every order the loops were given answers GET /orders/{id}" "0" "$missing"
admin_code() { # I TOKEN: instance I's answer to an admin PUT (a SKU of its own) with TOKEN
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT -H "Authorization: Bearer $2" \
        "http://127.0.0.1:${ports[$1 - 1]}/skus/rotated-$1" -d '{"stock":1}'
}
codes_new="" codes_old=""
for i in 1 2 3; do
    codes_new+="$(admin_code "$i" "$new_token") "
    codes_old+="$(admin_code "$i" "$old_token") "
done
expect "the rotated admin token is taken by every instance" "201 201 201 " "$codes_new"
expect "... and the old one refused by every instance" "401 401 401 " "$codes_old"
audit() { curl -s --max-time 10 -H "Authorization: Bearer $new_token" "$A/skus/tv/audit"; }
settled() { [[ $(audit | jq -r '.consistent and .store.matches and .store.lag_events == 0') == true ]]; }
# Slack: the sink writes within a second; 30 s on a busy machine.
check "the audit consistent, PostgreSQL matching" wait_until 30 settled || audit | jq -c .
orders=$(audit | jq -r .orders)
given=$(($(field .status_201) + loop_201))
echo "store: $orders orders; answered 201: $given; wrk's requests in flight at its end: up to $WRK_CONNS"
none_lost() { ((orders >= given && orders <= given + WRK_CONNS)); }
check "no order lost: the store has every 201 ($given), and at most wrk's $WRK_CONNS unanswered more" none_lost
expect "nothing oversold" "0" "$(audit | jq -r .oversold)"

checks_summary
