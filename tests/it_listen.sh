#!/usr/bin/env bash
# Integration: --listen. An IPv6 address ("[::1]:P") serves /livez, /readyz and a
# real order, and ::1 counts as loopback (no --admin-token needed); a --listen that
# is no address is a bad flag: its message on stderr, nothing on stdout, exit 2
# (before anything starts: no Redis is asked).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin listen redis-server redis-cli curl jq

if ! ip -6 addr show dev lo 2>/dev/null | grep -q 'inet6 ::1/'; then
    echo "no IPv6 loopback (::1) on this machine: skipped"
    exit 77
fi

# --- bad --listen values: exit 2, the message on stderr and nothing on stdout
bad_flag() { # NAME EXPECTED-IN-MESSAGE ARGS...
    local name=$1 want=$2 code
    shift 2
    "$SECKILL_BIN_PATH" --redis 127.0.0.1:1 "$@" >"$dir/bad.out" 2>"$dir/bad.err"
    code=$?
    expect "$name: exit code" "2" "$code"
    expect "$name: nothing on stdout" "" "$(cat "$dir/bad.out")"
    check "$name: the message on stderr names the flag" grep -q -- "$want" "$dir/bad.err"
}
bad_flag "--listen of a host that does not resolve (with a token)" "--listen" \
    --listen nosuch.invalid:8080 --admin-token t
bad_flag "--listen without a port" "--listen" --listen '[::1]'
bad_flag "--listen [::]:P (the wildcard) without a token" "loopback" --listen '[::]:8080'

# --- an instance on [::1]: no token needed, it serves over IPv6
start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
start_instance --host '[::1]' --ready-secs 10 v6 "$dir" --redis "127.0.0.1:$rport" \
    --threads 2 || { echo "the instance on [::1] did not get ready"; tail -5 "$dir/v6.log"; }
V6=$STARTED_URL
check "an instance listens on [::1] without --admin-token (::1 is loopback)" \
    has_prefix "$V6" "http://[::1]:"
expect "GET /livez over [::1]" "200" \
    "$(curl -sg -o /dev/null -w '%{http_code}' --max-time 5 "$V6/livez")"
expect "GET /readyz over [::1]" "200" \
    "$(curl -sg -o /dev/null -w '%{http_code}' --max-time 5 "$V6/readyz")"
expect "PUT /skus/v6 over [::1]" "201" \
    "$(curl -sg -o /dev/null -w '%{http_code}' --max-time 5 -X PUT "$V6/skus/v6" -d '{"stock":2}')"
out=$(curl -sg --max-time 5 -w ' %{http_code}' -X POST "$V6/skus/v6/orders" -d '{"user_id":"bob"}')
expect "POST an order over [::1]: 201" "201" "${out##* }"
check "... with an order id" jq -e '.order_id | test("^[0-9]+$")' >/dev/null <<<"${out% *}"
expect "... and the SKU says one sold" "1" "$(curl -sg --max-time 5 "$V6/skus/v6" | jq -r .sold)"
check "the log says where it listens: addr=[::1]:PORT" \
    grep -q "event=listening addr=\[::1\]:${V6##*:} " "$dir/v6.log"
check "nobody answers on 127.0.0.1 at that port (IPv6 only)" \
    bash -c "! curl -s --max-time 2 -o /dev/null http://127.0.0.1:${V6##*:}/livez"
it_expect_clean_exit v6

checks_summary
