#!/usr/bin/env bash
# Integration: the edge (issue 29, items 1 and 3), against an instance with the
# default limits and 1024 descriptors (soft and hard: the server raises its soft
# limit to the hard one by itself, so 1024:1024 is the tight case).
#
# - Every answer delivered or counted: 200 orders by 8 clients at once that
#   half-close their sending side after the request (nc -N) all get their 201, as
#   many as seckill_orders_total{outcome="placed"} rose by; clients that reset the
#   connection before their answer are counted in
#   seckill_answers_undelivered_total{route="order_post",status="201"} and logged
#   with their order id.
# - Limits a client cannot exhaust: slowhttptest's slowloris (-H), slow body (-B)
#   and slow read (-X) attacks, 1000 connections each from 127.0.0.1, while real
#   orders and /livez come from 127.0.0.2: every one is answered, promptly; the
#   instance's memory and descriptors come back afterwards. A request trickled a
#   byte every 300 ms (no idle timeout ever fires) is answered 408 at
#   --request-timeout-ms; a kept-alive connection idle for longer than that is not
#   cut (the deadline runs from a request's first byte).
#
# Prints, per attack, the real orders' latency (median, p99, max) and the
# instance's RSS and open descriptors before, during and after.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin edge redis-server curl jq slowhttptest prlimit
edgeclient=${SECKILL_BUILD:-build}/tests/edgeclient
[[ $edgeclient == /* || -e $edgeclient ]] || edgeclient=$ROOT/$edgeclient
check "edgeclient built (make $edgeclient)" test -x "$edgeclient"
# under a sanitizer 6 s (CI runs this three times; the plain pass keeps the 10 s)
san=$(it_sanitizer)
ATTACK_SECS=${EDGE_ATTACK_SECS:-$([[ -n $san ]] && echo 6 || echo 10)}
# slowhttptest holds 1000 connections itself
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"

start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
start_instance --ready-secs 10 --wrap "prlimit --nofile=1024:1024" a "$dir" \
    --redis "127.0.0.1:$rport" --lock redis --segments 4 || { echo "a not ready"; exit 1; }
A=$STARTED_URL aport=$STARTED_PORT
apid=$(cat "$dir/a.pid")
curl -s -o /dev/null -X PUT "$A/skus/edge" -d '{"stock":1000000,"segments":4}'

metric() { # URL SAMPLE: the value of one sample of /metrics, 0 when absent
    curl -s "$1/metrics" | awk -v m="$2" '$1 == m { v = $2 } END { print v + 0 }'
}
placed_m='seckill_orders_total{outcome="placed"}'

# --- 1. half-closing clients get their answers
placed0=$(metric "$A" "$placed_m")
"$edgeclient" halfclose "$aport" edge hc 200 8 >"$dir/halfclose.out"
got201=$(awk '$1 == 201 { print $2 }' "$dir/halfclose.out")
placed=$(($(metric "$A" "$placed_m") - placed0))
echo "half-closing clients: $(tr '\n' ' ' <"$dir/halfclose.out")(placed $placed)"
expect "200 orders by 8 half-closing clients: 200 answered 201" "200" "${got201:-0}"
expect "... every order placed got its 201 (placed: $placed)" "$placed" "${got201:-0}"

# --- 3. slowhttptest against the instance from 127.0.0.1, real clients on 127.0.0.2
check "127.0.0.2 reaches the instance" \
    curl -s -o /dev/null --max-time 2 --interface 127.0.0.2 "$A/livez"
usage() { # RSS in kB and open descriptors of the instance
    echo "$(awk '/^VmRSS/ { print $2 }' "/proc/$apid/status") $(find "/proc/$apid/fd" -mindepth 1 -maxdepth 1 | wc -l)"
}
fds_below() { # N: the instance has fewer than N descriptors open
    (($(find "/proc/$apid/fd" -mindepth 1 -maxdepth 1 | wc -l) < $1))
}
probe() { # NAME: orders and /livez from 127.0.0.2 until $dir/stop, one line each: kind code secs
    local n=0
    while [[ ! -e $dir/stop ]]; do
        n=$((n + 1))
        curl -s -o /dev/null --max-time 5 --interface 127.0.0.2 -w "order %{http_code} %{time_total}\n" \
            -X POST "$A/skus/edge/orders" -d "{\"user_id\":\"$1-$n\"}"
        curl -s -o /dev/null --max-time 5 --interface 127.0.0.2 -w "livez %{http_code} %{time_total}\n" \
            "$A/livez"
        sleep 0.1
    done
}
quantiles() { # KIND FILE: "n median p99 max" of KIND's seconds, in ms
    awk -v k="$1" '$1 == k { print $3 * 1000 }' "$2" | sort -n |
        awk '{ v[NR] = $1 } END { if (!NR) { print "0 - - -"; exit }
            p = int(NR * 0.99 + 0.999); if (p > NR) p = NR
            printf "%d %.1f %.1f %.1f\n", NR, v[int((NR + 1) / 2)], v[p], v[NR] }'
}
attack() { # NAME SLOWHTTPTEST-ARGS...: one attack, probed
    local name=$1 before during after q_order q_livez bad
    shift
    rm -f "$dir/stop"
    before=$(usage)
    proc_start "slow-$name" "$dir" slowhttptest -c 1000 -r 200 -l "$ATTACK_SECS" -p 3 "$@" ||
        { check "slowhttptest $name started" false; return; }
    sleep 3 # the attack's connections open (200 a second)
    probe "$name" >"$dir/probe.$name" &
    local prober=$!
    sleep $((ATTACK_SECS / 2))
    during=$(usage)
    wait_until $((ATTACK_SECS + 10)) bash -c "! kill -0 $(cat "$dir/slow-$name.pid") 2>/dev/null"
    touch "$dir/stop"
    wait "$prober"
    proc_stop "slow-$name" "$dir" 2
    # The attacker's connections close as the instance sees their ends: at once
    # here, but under TSan in CI 123 were still open 1 s after (2026-11-29). A slow
    # reader's end is seen when the kernel's zero-window probe meets its reset (the
    # persist timer backs off to seconds) or at the 15 s idle timeout (http.c); 20 s
    # is that timeout with 5 s of slack, so a connection still open then was leaked.
    local t0=$SECONDS
    wait_until 20 fds_below 100
    after=$(usage)
    echo "$name: descriptors below 100 within $((SECONDS - t0)) s of the attack's end"
    q_order=$(quantiles order "$dir/probe.$name")
    q_livez=$(quantiles livez "$dir/probe.$name")
    echo "$name: orders n/median/p99/max ms: $q_order; /livez: $q_livez;" \
        "rss kB / fds before: $before, during: $during, after: $after"
    echo "$name $q_order $q_livez $before $during $after" >>"$dir/table"
    bad=$(awk '($1 == "order" && $2 != 201) || ($1 == "livez" && $2 != 200)' "$dir/probe.$name" | wc -l)
    expect "$name: every real order 201 and /livez 200 during the attack" "0" "$bad"
    read -r n _ p99 _ <<<"$q_order"
    check "$name: real orders answered during the attack ($n)" test "$n" -ge 5
    # The contract says 100 ms, and the printed figures are what to read it by; the
    # bound is for starvation (a loop whose connections the attack took answers in
    # seconds, or never) on a loaded 2-core machine: 300 ms failed once with the
    # whole suite at -j 4 beside (398 ms).
    check "$name: real orders' p99 under 1 s ($p99 ms)" \
        awk -v p="$p99" 'BEGIN { exit !(p < 1000) }'
    read -r _ _ p99 _ <<<"$q_livez"
    check "$name: /livez p99 under 1 s ($p99 ms)" awk -v p="$p99" 'BEGIN { exit !(p < 1000) }'
    read -r _ fds <<<"$after"
    check "$name: descriptors back after it ($fds)" test "$fds" -lt 100
}
attack slowloris -H -i 2 -u "$A/skus/edge/orders" -t POST
attack slowbody -B -i 2 -s 4096 -u "$A/skus/edge/orders" -t POST
attack slowread -X -w 10 -y 20 -n 5 -z 32 -k 3 -u "$A/metrics"
expect "the attacks crashed nothing" "1" "$(kill -0 "$apid" 2>/dev/null && echo 1)"

# --- an instance with a short deadline and a slow commit: a trickled request gets
# its 408 at the deadline; clients gone before their answer are counted
start_instance --ready-secs 10 b "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4 \
    --request-timeout-ms 2000 --work-us 200000 || { echo "b not ready"; exit 1; }
B=$STARTED_URL bport=$STARTED_PORT
read -r ms code < <("$edgeclient" trickle "$bport" 300)
echo "a request trickled a byte every 300 ms: closed after ${ms} ms with ${code}"
expect "a trickled request is answered 408" "408" "$code"
in_deadline() { [[ $ms =~ ^[0-9]+$ ]] && ((ms >= 1900 && ms < 4000)); }
check "... at the deadline, 2 s (+ a sweep), however its bytes trickle (${ms} ms)" in_deadline
expect "a kept-alive connection idle for twice the deadline still serves its next request" \
    "200 200" "$("$edgeclient" keepalive "$bport" 4000)"
undelivered_m='seckill_answers_undelivered_total{route="order_post",status="201"}'
placed0=$(metric "$B" "$placed_m")
"$edgeclient" gone "$bport" edge gone 5 50
sleep 0.6 # the last order's 200 ms of work
placed=$(($(metric "$B" "$placed_m") - placed0))
expect "5 clients reset before their answer: their placed orders counted undelivered" \
    "$placed" "$(metric "$B" "$undelivered_m")"
check "... which were placed ($placed)" test "$placed" -ge 1
check "... and logged with their order id" \
    grep -q 'event=answer_undelivered route=order_post status=201 order_id=[0-9]' "$dir/b.log"
if command -v promtool >/dev/null; then
    curl -s "$B/metrics" >"$dir/metrics.txt"
    check "promtool check metrics" promtool check metrics <"$dir/metrics.txt"
fi

echo "attack | orders n median p99 max (ms) | livez n median p99 max | rss kB, fds before | during | after"
cat "$dir/table" 2>/dev/null
checks_summary
