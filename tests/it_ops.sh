#!/usr/bin/env bash
# Integration: operations. Idle and slow (slowloris) connections do not starve
# a real order; an Idempotency-Key retried through another instance, and while
# the first attempt is in flight, places one order; a worker-id lease lost to
# someone else is replaced and /stats shows the id in use; /metrics carries stock
# gauges that match the SKU report (bounded to the SKUs served lately) and passes
# promtool (when installed); reads waiting on a frozen Redis hold up no event loop;
# /metrics has seckill_build_info (what --version says) and the process_* families
# (descriptors, memory, start time); libmicrohttpd's warnings (one per aborted
# connection) are rate-limited and the suppressed ones counted; SIGHUP reopens the
# log by its name and re-reads --log-level-file, never exits;
# SIGTERM drains: /readyz 503, the in-flight order
# finishes, its lock is released, exit 0.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin ops redis-server redis-cli curl jq

held_fds=()
on_exit() {
    for fd in "${held_fds[@]}"; do exec {fd}>&- 2>/dev/null; done
    [[ -f $dir/redis.pid ]] && kill -CONT "$(cat "$dir/redis.pid")" 2>/dev/null
    return 0
}

started_s=$(date +%s)
start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
# No per-address limit: the 300 idle connections below and the real order come from one
# address (the limit itself is tests/it_edge.sh's).
common=(--redis "127.0.0.1:$rport" --lock redis --segments 4 --threads 4 --wait-ms 5000
    --max-conns-per-ip 0)
start_instance --ready-secs 10 a "$dir" "${common[@]}" --work-us 300000 &&
    A=$STARTED_URL aport=$STARTED_PORT &&
    start_instance --ready-secs 10 b "$dir" "${common[@]}" --work-us 300000 &&
    B=$STARTED_URL || { echo "not ready"; exit 1; }
curl -s -X PUT "$A/skus/ops" -d '{"stock":100,"segments":4}' >/dev/null

order() { # URL USER [KEY] -> "status order_id"
    local hdr=()
    [[ -n ${3:-} ]] && hdr=(-H "Idempotency-Key: $3")
    curl -s --max-time 10 -w ' %{http_code}' "${hdr[@]}" -X POST "$1/skus/ops/orders" \
        -d "{\"user_id\":\"$2\"}" | awk '{ code = $NF; $NF = ""; print code, $0 }' |
        { read -r code json; echo "$code $(jq -r .order_id <<<"$json" 2>/dev/null)"; }
}
sold() { curl -s "$A/skus/ops" | jq -r .sold; }

# --- idempotency across instances, also while the first attempt is in flight
clients=()
for i in 1 2 3 4 5 6; do
    if ((i % 2)); then url=$A; else url=$B; fi
    order "$url" same-user retry-key >"$dir/idem.$i" &
    clients+=($!)
done
wait "${clients[@]}"
answers=$(cat "$dir"/idem.* | sort | uniq -c | wc -l)
expect "six concurrent retries through two instances: one answer" "1" "$answers"
expect "... which is a 201" "201" "$(cut -d' ' -f1 "$dir/idem.1")"
expect "... and placed one order" "1" "$(sold)"
later=$(order "$B" same-user retry-key)
expect "a later retry through the other instance returns the same order" "$(cat "$dir/idem.1")" "$later"

# --- one key sent at once through both instances by two users: one order, the
# winner's user gets it, the other user gets 422 and nothing
clients=()
for i in 1 2 3 4 5 6; do
    if ((i % 2)); then url=$A user=kim; else url=$B user=lee; fi
    order "$url" "$user" shared-key >"$dir/shared.$i" &
    clients+=($!)
done
wait "${clients[@]}"
placed=$(cat "$dir"/shared.* | awk '$1 == 201 { print $2 }' | sort -u)
expect "one key, two users, two instances: one order id among the 201s" "1" "$(wc -l <<<"$placed")"
expect "... three 201s (one user's) and three 422s (the other's)" "3 3" \
    "$(cat "$dir"/shared.* | awk '{ n[$1]++ } END { print n[201] + 0, n[422] + 0 }')"
expect "... placed one order in all" "2" "$(sold)"

# --- idle and half-sent connections do not starve a real order
for ((i = 0; i < 150; i++)); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$aport" && held_fds+=("$fd")
    exec {fd}<>"/dev/tcp/127.0.0.1/$aport" && held_fds+=("$fd")
    printf 'POST /skus/ops/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"us' >&"$fd"
done
expect "300 idle/slow connections held open" "300" "${#held_fds[@]}"
fds=$(curl -s "$A/metrics" | awk '$1 == "process_open_fds" { print $2 }')
expect "process_open_fds counts them (${fds})" "1" "$((fds >= 300))"
start=$(date +%s%N)
res=$(order "$A" starved-user)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect "a real order is answered while they sit there" "201" "${res%% *}"
expect "... promptly (< 2 s; 300 ms of it is --work-us)" "1" "$((ms < 2000))"
echo "order answered in ${ms} ms beside 300 idle/slow connections"
for fd in "${held_fds[@]}"; do exec {fd}>&-; done
held_fds=()

# --- stock gauges: read from Redis at scrape time, for the SKUs an instance served
gauge() { # URL NAME SKU
    curl -s "$1/metrics" | awk -v m="$2{sku=\"$3\"}" '$1 == m { print $2 }'
}
report=$(curl -s "$A/skus/ops")
expect "seckill_sku_sold == GET /skus sold" "$(jq -r .sold <<<"$report")" "$(gauge "$A" seckill_sku_sold ops)"
expect "seckill_sku_remaining == GET /skus remaining" "$(jq -r .remaining <<<"$report")" \
    "$(gauge "$A" seckill_sku_remaining ops)"
expect "seckill_sku_initial" "100" "$(gauge "$A" seckill_sku_initial ops)"
expect "seckill_sku_oversold" "0" "$(gauge "$A" seckill_sku_oversold ops)"
expect "the other instance, which also served ops, agrees" "$(jq -r .sold <<<"$report")" \
    "$(gauge "$B" seckill_sku_sold ops)"
curl -s -X POST "$B/skus/ops/orders" -d '{"user_id":"gauge-user"}' >/dev/null
expect "an order through B shows in A's gauge at the next scrape" \
    "$(($(jq -r .sold <<<"$report") + 1))" "$(gauge "$A" seckill_sku_sold ops)"
for ((i = 1; i <= 40; i++)); do
    curl -s -o /dev/null -X PUT "$A/skus/many-$i" -d '{"stock":5}'
done
expect "a SKU an instance never served is not in its gauges" "" "$(gauge "$B" seckill_sku_sold many-40)"
expect "gauges of at most 32 SKUs, the most recent" "32 1 0" \
    "$(curl -s "$A/metrics" | grep -c '^seckill_sku_sold{') $(gauge "$A" seckill_sku_sold many-9 | wc -l) $(gauge "$A" seckill_sku_sold many-8 | wc -l)"
expect "stock read ok" "1" "$(curl -s "$A/metrics" | awk '$1 == "seckill_sku_stock_read_ok" { print $2 }')"

# --- a worker-id lease taken from under an instance: it leases another id,
# /stats shows the id in use, and its new orders carry it
wid_a=$(curl -s "$A/stats" | jq -r .instance_id)
wid=$(curl -s "$B/stats" | jq -r .instance_id)
check "two instances, two worker ids ($wid_a, $wid)" test "$wid" != "$wid_a"
redis-cli -p "$rport" --no-auth-warning set "seckill:worker:$wid" someone-else >/dev/null
wait_until 15 bash -c "[[ \$(curl -s $B/stats | jq -r .instance_id) != $wid ]]"
new=$(curl -s "$B/stats" | jq -r .instance_id)
check "after losing worker id $wid, /stats shows the new one ($new)" test "$new" != "$wid"
expect "... which B holds in Redis" "1" \
    "$(redis-cli -p "$rport" --no-auth-warning exists "seckill:worker:$new")"
read -r code id < <(order "$B" after-relet)
expect "B's next order carries the new worker id" "201 $new" "$code $(( (id >> 12) & 1023 ))"

# --- metrics pass promtool
if command -v promtool >/dev/null; then
    curl -s "$A/metrics" >"$dir/metrics.txt"
    if promtool check metrics <"$dir/metrics.txt" >"$dir/promtool.out" 2>&1; then
        expect "promtool check metrics" "ok" "ok"
    else
        expect "promtool check metrics" "ok" "$(head -5 "$dir/promtool.out")"
    fi
else
    echo "promtool not installed: metrics format check skipped"
fi

# --- build and process metrics, as Prometheus clients export them
ver=$("$SECKILL_BIN_PATH" --version)
expect "--version exits 0" "0" "$?"
if check "--version says the version and the commit ($ver)" \
    grep -Eq '^seckill [^ ]+ \(commit [0-9a-f]+\)$' <<<"$ver"; then
    read -r _ version _ commit <<<"$ver"
    expect "seckill_build_info says the same" \
        "seckill_build_info{version=\"$version\",commit=\"${commit%)}\"} 1" \
        "$(curl -s "$A/metrics" | grep '^seckill_build_info')"
fi
apid=$(cat "$dir/a.pid")
curl -s "$A/metrics" >"$dir/process.txt"
metric() { awk -v m="$1" '$1 == m { print $2 }' "$dir/process.txt"; }
fds=$(metric process_open_fds)
real=$(find "/proc/$apid/fd" -mindepth 1 | wc -l)
expect "process_open_fds ($fds) is what /proc says ($real), within 5" "1" \
    "$((fds - real <= 5 && real - fds <= 5))"
rss=$(metric process_resident_memory_bytes)
vmrss=$(awk '$1 == "VmRSS:" { print $2 * 1024 }' "/proc/$apid/status")
expect "process_resident_memory_bytes ($rss) is VmRSS ($vmrss) within 10 %" "1" \
    "$((rss * 10 >= vmrss * 9 && rss * 10 <= vmrss * 11))"
start=$(metric process_start_time_seconds)
expect "process_start_time_seconds ($start) is when the test started it (${started_s})" "1" \
    "$(awk -v s="$start" -v t="$started_s" -v n="$(date +%s)" 'BEGIN { print (s >= t - 1 && s <= n) }')"
expect "process_max_fds and process_cpu_seconds_total are there" "2" \
    "$(grep -Ec '^process_(max_fds|cpu_seconds_total) ' "$dir/process.txt")"

# --- operator conventions on an instance of its own: aborted connections
# rate-limit their warnings; SIGHUP reopens the log and reads the level again
echo info >"$dir/h.level"
start_instance --ready-secs 10 h "$dir" "${common[@]}" --log-level-file "$dir/h.level" ||
    { echo "h not ready"; exit 1; }
H=$STARTED_URL hport=$STARTED_PORT
hpid=$(cat "$dir/h.pid")
abort_conn() { # a connection that sends half a request and leaves
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$hport" || return 1
    printf 'POST /skus/ops/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"u' >&"$fd"
    exec {fd}>&-
}
for ((i = 0; i < 200; i++)); do abort_conn; done
# How many of the 200 aborts reach libmicrohttpd's warning is its own affair: on a busy
# machine the client may close before the server reads, and no warning comes (CI under
# stress: 61 warnings of 200). So the test judges what the limiter did with the warnings
# that came, from the service's own counter and its log's own clock.
suppressed() { curl -s "$H/metrics" | awk '$1 == "seckill_log_lines_suppressed_total" { print $2 }'; }
some_suppressed() { (($(suppressed) >= 1)); }
# slack: 10 s for the server to read 200 half requests on a loaded machine (idle: <0.1 s)
check "200 aborted connections: the warnings beyond 5 a second are counted" \
    wait_until 10 some_suppressed
counted=$(suppressed)
# At most 5 lines a window, and windows are at least 1 s long: any span under 1 s meets
# at most two windows, so any 11 lines in a row span at least 1 s of the log's clock.
densest=$(grep 'event=http ' "$dir/h.log" | sed -E 's/^ts=[0-9-]+T([0-9]+):([0-9]+):([0-9.]+)Z.*/\1 \2 \3/' |
    awk '{ t[NR] = ($1 * 3600 + $2 * 60 + $3) * 1000; if (NR > 1 && t[NR] < t[NR - 1]) t[NR] += 86400000 }
         END { m = -1; for (i = 11; i <= NR; i++) if (m < 0 || t[i] - t[i - 10] < m) m = t[i] - t[i - 10]
               print (m < 0 ? "none" : int(m + 0.5)) }')
expect "... and not logged: 11 warnings in a row span at least 1 s (shortest: ${densest} ms, ${counted} suppressed)" \
    "1" "$([[ $densest == none ]] || ((densest >= 999)) && echo 1 || echo 0)"
# Every suppressed warning is told by the next one logged: keep aborting until the
# suppressed= counts in the log add up to what the counter had counted.
told() { grep -o 'event=http .*suppressed=[0-9]*' "$dir/h.log" | sed 's/.*suppressed=//' |
    awk '{ s += $1 } END { print s + 0 }'; }
abort_again() { abort_conn && (($(told) >= counted && $(told) >= 1)); }
# slack: the limiter's window is 1 s; 5 s for a new one to open and log on a loaded machine
check "a later warning says how many were suppressed" wait_until 5 abort_again
n=$(told) after=$(suppressed)
expect "... all of them (${n} told, ${counted} counted before, ${after} after)" "1" \
    "$((n >= counted && n <= after))"

mv "$dir/h.log" "$dir/h.log.1"
echo debug >"$dir/h.level"
kill -HUP "$hpid"
check "after SIGHUP the log is a new file of the same name, at the level the file names" \
    wait_until 5 grep -q 'event=reloaded log_reopened=yes log_level=debug' "$dir/h.log"
expect "... and the process serves on" "200" "$(http_code "$H/livez")"
expect "... logging at debug now (a line per request)" "1" \
    "$(grep -c 'level=debug event=request method=GET path=/livez' "$dir/h.log")"
echo loud >"$dir/h.level"
kill -HUP "$hpid"
check "a level file naming no level: the level is kept, and the log says why" \
    wait_until 5 grep -q 'event=log_level_kept.*loud' "$dir/h.log"
for ((i = 0; i < 20; i++)); do kill -HUP "$hpid"; done
# (signals of one kind sent while one is pending merge into it: fewer reloads)
check "twenty SIGHUPs in a row: reloaded again" \
    wait_until 5 bash -c "(( \$(grep -c event=reloaded $dir/h.log) > 2 ))"
expect "... still serving" "200" "$(http_code "$H/livez")"
it_expect_clean_exit h

# --- a request that waits on Redis holds up no event loop: with one loop, /livez
# answers at once while reads wait for a frozen Redis (they run on threads of
# their own; on the loop, /livez would wait for their 1 s timeouts, one by one)
start_instance --ready-secs 10 c "$dir" "${common[@]}" --threads 1 || { echo "c not ready"; exit 1; }
C=$STARTED_URL
rpid=$(cat "$dir/redis.pid")
kill -STOP "$rpid"
readers=()
for i in 1 2 3; do
    curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$C/skus/ops" >"$dir/read-$i" &
    readers+=($!)
done
# the reads have reached the instance when its gauge of requests in flight says so
check "/stats shows the reads in flight while Redis is frozen" \
    wait_until 5 bash -c "curl -s --max-time 0.5 $C/stats | jq -e '.inflight >= 4' >/dev/null"
live=$(curl -s -o /dev/null -w '%{time_total}' --max-time 10 "$C/livez")
kill -CONT "$rpid"
wait "${readers[@]}"
check "/livez answered in ${live}s while 3 reads waited on a frozen Redis" \
    awk -v t="$live" 'BEGIN { exit !(t < 0.5) }'
expect "the reads got their answers (503, or 200 once Redis woke)" "yes yes yes" \
    "$(for i in 1 2 3; do awk '{ print ($1 == 503 || $1 == 200) ? "yes" : $0 }' "$dir/read-$i"; done | xargs)"
proc_stop c "$dir" 5

# --- SIGTERM drains
pid=$(cat "$dir/a.pid")
order "$A" in-flight-user >"$dir/inflight" &
client=$!
wait_until 5 bash -c "[[ \$(redis-cli -p $rport --no-auth-warning keys 'sk:{ops}:lock:*' | grep -vc fence) -ge 1 ]]"
kill -TERM "$pid"
wait_until 5 bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' $A/readyz) != 200 ]]"
wait "$client"
expect "the in-flight order finished during the drain" "201" "$(cut -d' ' -f1 "$dir/inflight")"
wait "$pid"
code=$?
expect "exit code after SIGTERM" "0" "$code"
locks=$(redis-cli -p "$rport" --no-auth-warning keys 'sk:{ops}:lock:*' | grep -vc -e fence -e queue)
expect "no segment lock left held" "0" "$locks"
rm -f "$dir/a.pid"

checks_summary
