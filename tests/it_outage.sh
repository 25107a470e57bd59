#!/usr/bin/env bash
# Integration: the data Redis crashes (SIGKILL) in the middle of an order load and is
# restarted on the same directory and port; it runs with appendonly yes and
# appendfsync always, so what it acknowledged is on disk.
#
#   - nothing acknowledged is lost: every order answered 201 is there after the
#     restart (GET /orders/{id} 200, same user), and a retry with its
#     Idempotency-Key returns the same order;
#   - an answer lost in the crash is found again: every request that did not get a
#     201 is retried with its key and gets exactly one order, so that in the end the
#     server has sold exactly one unit per key (none placed twice, none lost), and
#     sold >= the 201s the clients saw before the retry; the audit is consistent;
#   - the outage is answered, fast: 503 unavailable (or busy) only, never a hang,
#     every answer within the 1 s Redis timeout plus margin; a commit in flight at
#     the crash answers 503 outcome_unknown with its order_id, and that id tells the
#     truth: the order exists exactly when the retry with its key returns that id;
#   - the instance recovers by itself (same process: /readyz 200, new orders 201),
#     and no segment lock stays held beyond its lease once the load has stopped;
#   - a lock held at the crash is not kept alive afterwards: a second instance
#     (one thread, long critical section) holds a segment lock when Redis dies;
#     Redis brings that lock back from its AOF, but once the holder has placed its
#     next order on that segment the lock is free, and other instances are not
#     refused busy on it.
#
#   OUTAGE_CLIENTS   concurrent order loops (default 6)
set -uo pipefail

CLIENTS=${OUTAGE_CLIENTS:-6}
TTL_MS=3000      # lock lease (the default); the outage is shorter than one lease
SLOWEST_MS=3000  # longest acceptable answer: the 1 s Redis timeout, twice, and margin
                 # for a noisy machine (a hang would be 10 s: curl's limit)

# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin outage redis-server redis-cli curl jq

loaders=()
on_exit() {
    : >"$dir/stop"
    for p in "${loaders[@]}"; do wait "$p" 2>/dev/null; done
    return 0
}

# Redis notes its own stalls (a slow fsync): they explain 503s after the recovery
start_redis redis "$dir" always --latency-monitor-threshold 100 ||
    { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
start_instance --ready-secs 10 seckill "$dir" --redis "127.0.0.1:$rport" --lock redis \
    --segments 8 --threads 4 --lock-ttl-ms "$TTL_MS" --wait-ms 1000 --work-us 2000 ||
    { echo "seckill not ready"; exit 1; }
base=$STARTED_URL
start_instance --ready-secs 10 holder "$dir" --redis "127.0.0.1:$rport" --lock redis \
    --threads 1 --lock-ttl-ms 20000 --wait-ms 1000 --work-us 3000000 ||
    { echo "holder not ready"; exit 1; }
holder=$STARTED_URL
pid=$(cat "$dir/seckill.pid")
curl -s -X PUT "$base/skus/crash" -d '{"stock":1000000,"segments":8}' >/dev/null
curl -s -X PUT "$base/skus/held" -d '{"stock":100,"segments":1}' >/dev/null

count201() { cat "$dir"/load.* 2>/dev/null | awk '$3 == 201' | wc -l; }
lines() { cat "$dir"/load.* 2>/dev/null | wc -l; }
for ((c = 1; c <= CLIENTS; c++)); do
    it_order_loop "$base/skus/crash/orders" "$c" >"$dir/load.$c" &
    loaders+=($!)
done

# --- the crash, in the middle of the load
wait_until 60 bash -c "(( \$(cat $dir/load.* | awk '\$3 == 201' | wc -l) >= 300 ))" ||
    echo "slow: fewer than 300 orders in 60 s"
# The holder is inside its 3 s critical section on sk:{held}:lock:0 at the kill (1 s was
# too short for the polls and the count before the kill on a loaded machine);
# its lease is 20 s, so the lock is still there when Redis comes back. Its first
# order of the SKU (placed by itself, by the order machine: the SKU is new to it)
# teaches it the SKU's layout, so that h1 and h2 both go through the event loop,
# one lock session: the grant that dies with h1 is the one h2 must not keep.
curl -s -o /dev/null --max-time 20 -X POST "$holder/skus/held/orders" -d '{"user_id":"h0"}'
# h0's answer may leave before its lock is released: the lock seen next must be h1's
wait_until 10 bash -c "[[ \$(redis-cli -p $rport exists 'sk:{held}:lock:0') == 0 ]]"
curl -s -o /dev/null --max-time 20 -X POST "$holder/skus/held/orders" -d '{"user_id":"h1"}' &
held_client=$!
wait_until 10 bash -c "[[ \$(redis-cli -p $rport exists 'sk:{held}:lock:0') == 1 ]]"
expect "the holder holds its segment lock at the kill" "1" \
    "$(redis-cli -p "$rport" exists 'sk:{held}:lock:0')"
before_kill=$(count201)
t_kill=${EPOCHREALTIME/./}
rpid=$(cat "$dir/redis.pid")
{
    kill -KILL "$rpid"
    wait "$rpid" # our child (proc_start): reaped here, quietly
} 2>/dev/null
rm -f "$dir/redis.pid" "$dir/redis.start"
wait "$held_client"
# The outage lasts until the clients have had 30 answers after the kill: well
# within a lease, so locks held at the kill are still held when Redis is back.
n_kill=$(lines)
wait_until 30 bash -c "(( \$(cat $dir/load.* | wc -l) >= $n_kill + 30 ))"
expect "the instance answers during the outage (readyz)" "503" "$(http_code "$base/readyz" 3)"
expect "livez during the outage" "200" "$(http_code "$base/livez" 3)"
t_restart=${EPOCHREALTIME/./}
cmd_start "$dir" redis || { echo "redis did not restart"; exit 1; }
t_up=${EPOCHREALTIME/./}
held=$(redis-cli -p "$rport" --scan --pattern 'sk:{crash}:lock:*' | grep -Ecv ':(fence|queue|grant:.*)$')
wait_until 20 http_ok "$base/readyz"
t_ready=${EPOCHREALTIME/./}
expect "ready again by itself after the restart" "200" "$(http_code "$base/readyz")"

# The lock the holder had at the crash came back with Redis (AOF), with what was
# left of its lease. The holder's next order on that segment must not keep it.
expect "the holder's lock came back with Redis" "1" "$(redis-cli -p "$rport" exists 'sk:{held}:lock:0')"
wait_until 20 http_ok "$holder/readyz"
expect "the holder places its next order" "201" "$(curl -s -o /dev/null -w '%{http_code}' \
    --max-time 20 -X POST "$holder/skus/held/orders" -d '{"user_id":"h2"}')"
expect "... after which the lock is free (not kept by a grant that died in the crash)" "0" \
    "$(redis-cli -p "$rport" exists 'sk:{held}:lock:0')"
expect "another instance is not refused busy on that segment" "201" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST "$base/skus/held/orders" \
        -d '{"user_id":"h3"}')"
echo "outage: $(((t_restart - t_kill) / 1000)) ms down, $held segment lock(s) held when Redis came back;" \
    "ready $(((t_ready - t_up) / 1000)) ms after Redis answered"
# The load goes on for two leases after the recovery (and at least 200 orders).
after=$(count201)
wait_until 60 bash -c "(( \$(cat $dir/load.* | awk '\$3 == 201' | wc -l) >= $after + 200 &&
    \${EPOCHREALTIME/./} > $t_ready + 2 * $TTL_MS * 1000 ))" ||
    echo "slow: fewer than 200 orders in 60 s after recovery"
: >"$dir/stop"
wait "${loaders[@]}"
loaders=()
t_stop=${EPOCHREALTIME/./}
cat "$dir"/load.* >"$dir/all"
expect "the instance never restarted" "$pid" "$(cat "$dir/seckill.pid")"
expect "the instance is alive" "0" "$(proc_alive seckill "$dir"; echo $?)"

# --- no lock stays held once the load has stopped: every order released its lock
# before it was answered, and the locks held at the crash ran out long ago.
locks() { redis-cli -p "$rport" --no-auth-warning --scan --pattern 'sk:{crash}:lock:*' |
    grep -Ecv ':(fence|queue|grant:.*)$'; }
wait_until 10 bash -c "(( \$(redis-cli -p $rport --scan --pattern 'sk:{crash}:lock:*' | grep -Ecv ':(fence|queue|grant:.*)$') == 0 ))"
t_free=${EPOCHREALTIME/./}
echo "segment locks all free $(((t_free - t_stop) / 1000)) ms after the load stopped (lease $TTL_MS ms)"
expect "no segment lock held" "0" "$(locks)"
expect "... at once, not a lease later (< 1 s)" "1" "$(((t_free - t_stop) / 1000 < 1000))"

# --- the answers
total=$(wc -l <"$dir/all")
acked=$(awk '$3 == 201' "$dir/all" | wc -l)
echo "requests: $total, 201: $acked ($before_kill before the crash), others: $(awk '$3 != 201 { print $3, $7 }' "$dir/all" | sort | uniq -c | tr '\n' ',')"
expect "every answer is 201 or 503 unavailable/busy/outcome_unknown (no other status, no hang)" "" \
    "$(awk '!($3 == 201 || ($3 == 503 && ($7 == "unavailable" || $7 == "busy" || $7 == "outcome_unknown")))' "$dir/all" | head -3)"
unknown=$(awk '$3 == 503 && $7 == "outcome_unknown"' "$dir/all")
expect "every outcome_unknown names its order_id" "" "$(awk '$6 !~ /^[0-9]+$/' <<<"$unknown" | head -3)"
down=$(awk -v a="$t_kill" -v b="$t_restart" '$1 > a + 50000 && $2 < b' "$dir/all")
expect "answers while Redis was down: some" "yes" "$([[ -n $down ]] && echo yes || echo no)"
expect "answers while Redis was down: all 503 unavailable" "" \
    "$(awk '!($3 == 503 && $7 == "unavailable")' <<<"$down" | head -3)"
slowest=$(awk '{ d = ($2 - $1) / 1000; if (d > m) m = d } END { printf "%d", m }' "$dir/all")
echo "slowest answer: $slowest ms (over the whole run)"
expect "no answer slower than ${SLOWEST_MS} ms" "1" "$((slowest <= SLOWEST_MS))"
# Busy, not unavailable: a Redis that stalls past the 1 s timeout after the recovery
# (a slow fsync on a busy machine: CI saw 2 s) is answered unavailable, rightly.
expect "no 503 busy later than one lease after the recovery (locks held at the crash ran out)" "" \
    "$(awk -v t="$t_ready" -v l="$TTL_MS" '$1 > t + (l + 500) * 1000 && $3 == 503 && $7 == "busy"' \
        "$dir/all" | head -3)"
late=$(awk -v t="$t_ready" '$1 > t && $3 == 503 && $7 == "unavailable"' "$dir/all" | wc -l)
((late == 0)) || echo "503 unavailable after the recovery: $late; Redis's latency events:" \
    "$(redis-cli -p "$rport" latency latest | paste -sd' ')"
expect "201s after the recovery" "1" "$(awk -v t="$t_ready" '$1 > t && $3 == 201' "$dir/all" | wc -l |
    awk '{ print ($1 > 0) }')"

# --- nothing acknowledged is lost: every 201 is readable, same user
awk '$3 == 201 { printf "url = \"%s/orders/%s\"\n", base, $6 }' base="$base" "$dir/all" >"$dir/get.cfg"
curl -s --max-time 120 -K "$dir/get.cfg" -w '\n' |
    jq -R -r 'fromjson? // {} | (.order_id // "-") + " " + (.user_id // "-")' >"$dir/got"
expect "every 201 is found again (GET /orders/{id})" "$acked" \
    "$(join <(awk '$3 == 201 { print $6, $5 }' "$dir/all" | sort) <(sort "$dir/got") |
        awk '$2 == $3' | wc -l)"

# --- retry every request with its key: a 201 replays itself, a lost answer is found
# One curl for all of them (one connection); "next" resets the options per request.
awk 'NR > 1 { print "next" }
     { printf "url = \"%s/skus/crash/orders\"\nrequest = \"POST\"\nsilent\nmax-time = 10\n", base
       printf "header = \"Idempotency-Key: %s\"\ndata = \"{\\\"user_id\\\":\\\"%s\\\"}\"\n", $4, $5
       print "write-out = \" %{http_code}\\n\"" }' base="$base" "$dir/all" >"$dir/retry.cfg"
curl -K "$dir/retry.cfg" |
    awk '{ code = $NF; $NF = ""; print code, $0 }' >"$dir/retried"
expect "every retry answered 201" "$total" "$(awk '$1 == 201' "$dir/retried" | wc -l)"
paste -d' ' <(awk '{ print $3, $6 }' "$dir/all") \
    <(awk '{ $1 = ""; print }' "$dir/retried" | jq -R -r 'fromjson? // {} | .order_id // "-"') \
    >"$dir/pairs"
expect "a retry of a 201 returns the same order" "$acked" \
    "$(awk '$1 == 201 && $2 == $3' "$dir/pairs" | wc -l)"
# An outcome_unknown's order exists (GET 200) exactly when the retry returned its id.
untrue=0
while read -r _ id retried_id; do
    code=$(http_code "$base/orders/$id" 5)
    if [[ $retried_id == "$id" && $code != 200 ]] || [[ $retried_id != "$id" && $code != 404 ]]; then
        untrue=$((untrue + 1))
    fi
done < <(awk '$1 == 503 && $2 ~ /^[0-9]+$/' "$dir/pairs")
echo "outcome_unknown answers: $(grep -c . <<<"$unknown"), of them placed: $(awk '$1 == 503 && $2 ~ /^[0-9]+$/ && $2 == $3' "$dir/pairs" | wc -l)"
expect "each outcome_unknown's order_id tells what happened (exists iff the retry returned it)" "0" "$untrue"
lost=$(awk '$1 != 201' "$dir/pairs" | wc -l)
sold=$(curl -s "$base/skus/crash" | jq -r .sold)
echo "answers lost or refused: $lost; the server sold $sold for $total keys"
expect "one unit per key in the end: none placed twice, none lost" "$total" "$sold"
audit=$(curl -s "$base/skus/crash/audit")
expect "audit consistent, orders == keys" "true $total 0" \
    "$(jq -r '"\(.consistent) \(.orders) \(.duplicate_order_ids)"' <<<"$audit")"
expect "server sold >= the 201s the clients saw" "1" "$((sold >= acked))"

expect "new order after all that" "201" "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    "$base/skus/crash/orders" -d '{"user_id":"late"}')"

kill -TERM "$pid"
wait "$pid"
expect "exit code after SIGTERM" "0" "$?"
rm -f "$dir/seckill.pid"
checks_summary
