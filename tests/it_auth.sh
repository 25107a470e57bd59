#!/usr/bin/env bash
# Integration: Redis AUTH. A redis-server with --requirepass; instances given the
# password by flag (--redis-password) and by environment (SECKILL_REDIS_PASSWORD)
# serve orders; the flag wins over the environment; a wrong password at start-up is
# refused with exit 1 and a reason (no crash, no hang); a password rotated under a
# running instance turns /readyz and orders into 503 unavailable, bounded in time,
# without a crash, and it heals by itself when the password is back.
#
# Admin token and --listen: without --admin-token (or SECKILL_ADMIN_TOKEN) a
# non-loopback --listen is refused with exit 2 and a message naming the token; a
# loopback address other than 127.0.0.1 (127.0.0.2) starts without one. Nothing here
# ever listens on a non-loopback address: the refused starts are given a Redis that
# does not answer, so that a server that wrongly accepted the address would give up
# on Redis (exit 1) before it binds; that a public address WITH a token passes the
# check is shown only at the flag level (a later flag error is reached instead) and
# in tests/test_config.c, never by serving on it.
#
# Secrets from files: --redis-password-file and SECKILL_ADMIN_TOKEN_FILE serve (the
# trailing newline stripped) and leave no secret in /proc/PID/cmdline or environ;
# an unreadable or empty file exits 2 at once, naming the flag or variable.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin auth redis-server redis-cli curl jq

# req METHOD URL [BODY]: "status error" (error empty on success)
req() {
    local out
    out=$(curl -s -X "$1" --max-time 10 -w '\n%{http_code}' ${3:+--data-binary "$3"} "$2")
    echo "${out##*$'\n'} $(jq -r '.error // empty' <<<"${out%$'\n'*}" 2>/dev/null)"
}

PW='s3cr3t-pw'
unset SECKILL_ADMIN_TOKEN # the admin-token checks below decide it per start
bin=$SECKILL_BIN_PATH
start_redis --password "$PW" redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" -a "$1" --no-auth-warning "${@:2}"; }
expect "redis refuses clients without the password" "NOAUTH" \
    "$(redis-cli -p "$rport" get x 2>&1 | grep -o NOAUTH | head -1)"

# A wrong password at start-up: started first, it fails while the rest runs.
wstart=$SECONDS
SECKILL_REDIS_PASSWORD=wrong start_instance --no-wait wrong "$dir" --redis "127.0.0.1:$rport"
wpid=$(cat "$dir/wrong.pid")

# By flag, and by environment; the environment also carries a wrong password for
# the flag instance (the flag wins).
SECKILL_REDIS_PASSWORD=wrong start_instance --ready-secs 15 flag "$dir" \
    --redis "127.0.0.1:$rport" --redis-password "$PW" --lock redis --segments 2
F=$STARTED_URL
SECKILL_REDIS_PASSWORD=$PW start_instance --ready-secs 15 env "$dir" \
    --redis "127.0.0.1:$rport" --lock redis --segments 2
E=$STARTED_URL
expect "ready with --redis-password (and a wrong SECKILL_REDIS_PASSWORD: the flag wins)" \
    "200 " "$(req GET "$F/readyz")"
expect "ready with SECKILL_REDIS_PASSWORD" "200 " "$(req GET "$E/readyz")"
expect "PUT through the flag instance" "201 " "$(req PUT "$F/skus/pw" '{"stock":10}')"
out=$(curl -s -X POST --max-time 10 "$F/skus/pw/orders" -d '{"user_id":"ann"}')
expect "order through the flag instance" "pw ann" "$(jq -r '.sku + " " + .user_id' <<<"$out")"
id=$(jq -r .order_id <<<"$out")
expect "order through the env instance" "201 " "$(req POST "$E/skus/pw/orders" '{"user_id":"bob"}')"
expect "the order is readable through the other instance" "200 " "$(req GET "$E/orders/$id")"
expect "both orders are in Redis" "2" "$(rcli "$PW" hget 'sk:{pw}:meta' sold)"

# The password is rotated under the running instances, and their connections cut:
# every reconnect now fails AUTH.
rcli "$PW" config set requirepass "rotated-pw" >/dev/null
rcli rotated-pw client kill type normal >/dev/null
start=$(date +%s%N)
# /readyz answers from the health of the last round (service/health.c, every 250 ms)
auth_lost() { [[ $(req GET "$F/readyz") == "503 unavailable" ]]; }
check "readyz with a wrong password: 503 unavailable (within 3 s)" wait_until 3 auth_lost
expect "order with a wrong password" "503 unavailable" "$(req POST "$F/skus/pw/orders" '{"user_id":"cid"}')"
expect "order with a wrong password (env instance)" "503 unavailable" \
    "$(req POST "$E/skus/pw/orders" '{"user_id":"dan"}')"
expect "GET with a wrong password" "503 unavailable" "$(req GET "$F/skus/pw")"
ms=$((($(date +%s%N) - start) / 1000000))
expect "... four answers within 4 s (${ms} ms)" "1" "$((ms < 4000))"
expect "livez with a wrong password" "200 " "$(req GET "$F/livez")"
expect "metrics with a wrong password" "200 " "$(req GET "$F/metrics")"
expect "metrics say the stock could not be read" "seckill_sku_stock_read_ok 0" \
    "$(curl -s "$F/metrics" | grep '^seckill_sku_stock_read_ok')"
expect "nothing was placed meanwhile" "2" "$(rcli rotated-pw hget 'sk:{pw}:meta' sold)"
expect "the flag instance is alive" "0" "$(proc_alive flag "$dir"; echo $?)"
expect "the env instance is alive" "0" "$(proc_alive env "$dir"; echo $?)"

# The password comes back: both heal without a restart.
rcli rotated-pw config set requirepass "$PW" >/dev/null
wait_until 15 http_ok "$F/readyz"
wait_until 15 http_ok "$E/readyz"
expect "ready again (flag)" "200 " "$(req GET "$F/readyz")"
expect "ready again (env)" "200 " "$(req GET "$E/readyz")"
expect "orders again (flag)" "201 " "$(req POST "$F/skus/pw/orders" '{"user_id":"eve"}')"
expect "orders again (env)" "201 " "$(req POST "$E/skus/pw/orders" '{"user_id":"fay"}')"
expect "audit consistent" "true 4" "$(curl -s "$F/skus/pw/audit" | jq -r '"\(.consistent) \(.sold)"')"

# The instance started with a wrong password gave up: exit 1 with the reason, no
# signal, within its start-up wait (10 s) and some margin.
wait_until 20 bash -c "! kill -0 $wpid 2>/dev/null"
wait "$wpid"
code=$?
rm -f "$dir/wrong.pid"
expect "wrong password at start-up: exit code" "1" "$code"
expect "... after the start-up wait, not hanging (< 20 s)" "1" "$((SECONDS - wstart < 20))"
expect "... logged with the reason" "1" \
    "$(grep -c 'event=startup_failed.*\(WRONGPASS\|invalid\|AUTH\)' "$dir/wrong.log")"

# --- admin token and --listen
dead=$(free_port) || exit 1 # nobody listens there: a Redis that never answers
pport=$(free_port) || exit 1
# refused_start NAME ARGS...: runs the server with a dead Redis; prints the exit code
# and whether it came within 5 s (1) or not (0): a server that accepted the address
# would spend 10 s waiting for Redis before giving up with 1.
refused_start() {
    local name=$1 t0=${EPOCHREALTIME/./} code
    shift
    timeout 30 "$bin" --redis "127.0.0.1:$dead" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
    code=$?
    echo "$code $(((${EPOCHREALTIME/./} - t0) < 5000000))"
}
res=$(refused_start public --listen "0.0.0.0:$pport")
expect "--listen 0.0.0.0 without a token: exit 2 at once" "2 1" "$res"
expect "... stderr says why (admin-token, loopback)" "1" \
    "$(grep -c 'admin-token.*loopback' "$dir/public.err")"
res=$(SECKILL_LISTEN="0.0.0.0:$pport" refused_start public-env)
expect "SECKILL_LISTEN=0.0.0.0 without a token: exit 2 at once" "2 1" "$res"
expect "... stderr says why" "1" "$(grep -c 'admin-token' "$dir/public-env.err")"
res=$(refused_start public-10 --listen "10.11.12.13:$pport")
expect "--listen 10.11.12.13 without a token: exit 2 at once" "2 1" "$res"
# With a token the address passes the check: the start stops at the next flag
# check instead (--lock redlock without --lock-nodes), before anything is bound.
res=$(SECKILL_ADMIN_TOKEN=t0k refused_start public-token --listen "0.0.0.0:$pport" \
    --lock redlock)
expect "0.0.0.0 with SECKILL_ADMIN_TOKEN passes the admin check (stops at the next one)" \
    "2 1 0 1" "$res $(grep -c admin-token "$dir/public-token.err") $(grep -c \
        'redlock needs --lock-nodes' "$dir/public-token.err")"
# 127.0.0.2 is loopback: no token needed, it serves.
start_instance --host 127.0.0.2 --ready-secs 15 lo2 "$dir" --redis "127.0.0.1:$rport" \
    --redis-password "$PW"
expect "--listen 127.0.0.2 without a token starts and is ready" "200" \
    "$(http_code "$STARTED_URL/readyz")"

# --- secrets from files, read once at start: --redis-password-file, and the admin
# token through SECKILL_ADMIN_TOKEN_FILE; neither shows in /proc/PID/cmdline or environ
printf '%s\n' "$PW" >"$dir/redis.pw"
printf 'f1le-t0ken\r\n' >"$dir/admin.token"
chmod 600 "$dir/redis.pw" "$dir/admin.token"
SECKILL_ADMIN_TOKEN_FILE=$dir/admin.token start_instance --ready-secs 15 files "$dir" \
    --redis "127.0.0.1:$rport" --redis-password-file "$dir/redis.pw"
FI=$STARTED_URL
expect "ready with --redis-password-file" "200 " "$(req GET "$FI/readyz")"
put() { curl -s -o /dev/null -w '%{http_code}' -X PUT --max-time 10 "$@" \
    --data-binary '{"stock":1}' "$FI/skus/files"; }
expect "the admin token from SECKILL_ADMIN_TOKEN_FILE is required" "401" "$(put)"
expect "... and accepted, its trailing newline stripped" "201" \
    "$(put -H 'Authorization: Bearer f1le-t0ken')"
fpid=$(cat "$dir/files.pid")
expect "neither secret is in the process's command line or environment" "0" \
    "$(cat "/proc/$fpid/cmdline" "/proc/$fpid/environ" | tr '\0' '\n' |
        grep -c -e "$PW" -e f1le-t0ken)"
res=$(refused_start nofile --redis-password-file "$dir/missing.pw")
expect "--redis-password-file unreadable: exit 2 at once" "2 1" "$res"
expect "... stderr names the flag and the file" "1" \
    "$(grep -c -- "--redis-password-file: .*$dir/missing.pw.*cannot read" "$dir/nofile.err")"
: >"$dir/empty.token"
res=$(SECKILL_ADMIN_TOKEN_FILE=$dir/empty.token refused_start emptytoken)
expect "an empty SECKILL_ADMIN_TOKEN_FILE: exit 2 at once" "2 1" "$res"
expect "... stderr names the variable" "1" "$(grep -c SECKILL_ADMIN_TOKEN_FILE "$dir/emptytoken.err")"

it_expect_clean_exit flag env lo2 files

checks_summary
