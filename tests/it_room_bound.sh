#!/usr/bin/env bash
# Integration: a waiting room's tickets and passes are bound to their buyer, their SKU
# and the SKU's epoch (issue 48, point 3), and places whose owners stopped polling are
# skipped, never counted as waiting (point 2).
#
# One Redis, one instance with --buyer-key-file (lock redis).
# - Join: without Seckill-Buyer 401, with another buyer's token 403 forbidden; neither
#   joins (the queue stays empty).
# - Pass: an admitted buyer's pass is refused for another buyer (403 not_admitted,
#   another user's) even with that buyer's own valid token.
# - Reset: PUT ?reset=true starts another queue: the old ticket's poll says expired,
#   the old pass is refused (403 not_admitted, reset; counted in /metrics); a join again
#   gives a new ticket whose pass buys (201, pending with pay_by).
# - Abandoned: of three joiners before the sale's start, one stops polling; once it has
#   not polled for the room's abandon window (INV_ROOM_ABANDON_MS, 10 s) its place is
#   taken out: the waiting count drops to 2 while the sale has not started, and at the
#   start only the two who polled are admitted; its ticket's poll then says expired.
# Timing: every wait is a condition (wait_until) with a bound of seconds; the abandon
# wait is bounded at 25 s (10 s window, polls every <= 2 s by the others, a tick of
# 100 ms, slack for a busy machine). The polling buyers poll every 0.5 s, 4 times
# faster than the service's longest poll_after_ms (2 s).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin room_bound redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/key"
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 2 \
    --buyer-key-file "$dir/key" || exit 1
A=$STARTED_URL
token() { "$SECKILL_BIN_PATH" buyer-token "$1" --key-file "$dir/key"; }
ann=$(token ann) bob=$(token bob) cid=$(token cid) dan=$(token dan) eve=$(token eve)

# join USER [TOKEN]: the status; the answer in $dir/join-USER.json
join() {
    local -a h=()
    [[ -n ${2:-} ]] && h=(-H "Seckill-Buyer: $2")
    curl -s -o "$dir/join-$1.json" -w '%{http_code}' "${h[@]}" -X POST \
        --data "{\"user_id\":\"$1\"}" "$A/skus/b/queue"
}
ticket() { jq -r .ticket "$dir/join-$1.json"; }
poll() { curl -s "$A/skus/b/queue/$1"; } # TICKET
state_is() { [[ $(poll "$1" | jq -r .state) == "$2" ]]; } # TICKET STATE
# order USER TOKEN PASS: "status error detail-reason", the body in $dir/order.json
order() {
    curl -s -o "$dir/order.json" -w '%{http_code} ' -H "Seckill-Buyer: $2" \
        -H "Seckill-Pass: $3" -X POST --data "{\"user_id\":\"$1\"}" "$A/skus/b/orders"
    jq -r '"\(.error // "ok") \((.detail // "-") | split(":")[0])"' "$dir/order.json"
}
refused() { curl -s "$A/metrics" | awk -v m="seckill_room_passes_refused_total{reason=\"$1\"}" '$1 == m { print $2 }'; }

expect "a SKU with a room (pay within a minute)" 201 \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        --data '{"stock": 5, "pay_within_ms": 60000, "room": {"rate_per_s": 50, "max_active": 10}}' \
        "$A/skus/b")"

# ---- joining needs the buyer's own token ------------------------------------------
expect "a join without Seckill-Buyer: 401" "401 unauthorized" "$(join ann) $(jq -r .error "$dir/join-ann.json")"
expect "a join for ann with bob's token: 403 forbidden" "403 forbidden" \
    "$(join ann "$bob") $(jq -r .error "$dir/join-ann.json")"
expect "... neither joined" 0 "$(rcli ZCARD 'sk:{b}:room:q')"
expect "ann joins with her token: 202" 202 "$(join ann "$ann")"
old=$(ticket ann)
check "ann is admitted" wait_until 10 state_is "$old" admitted
pass=$(poll "$old" | jq -r .pass)

# ---- the pass is ann's --------------------------------------------------------------
expect "bob, with his own token, and ann's pass: 403 not_admitted (another user's)" \
    "403 not_admitted another user's" "$(order bob "$bob" "$pass")"

# ---- a reset starts another queue -----------------------------------------------------
expect "PUT ?reset=true" 200 \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        --data '{"stock": 5, "pay_within_ms": 60000, "room": {"rate_per_s": 50, "max_active": 10}}' \
        "$A/skus/b?reset=true")"
# the pacer's next tick (100 ms) empties the room and publishes the new epoch
check "ann's old ticket: expired" wait_until 10 state_is "$old" expired
before=$(refused reset)
expect "ann's old pass: 403 not_admitted (reset)" "403 not_admitted reset" \
    "$(order ann "$ann" "$pass")"
expect "... counted by reason" "$((before + 1))" "$(refused reset)"
expect "ann joins again: 202" 202 "$(join ann "$ann")"
new=$(ticket ann)
check "... a new ticket" test "$new" != "$old"
check "... admitted" wait_until 10 state_is "$new" admitted
expect "her new pass buys: 201, pending" "201 ok -" "$(order ann "$ann" "$(poll "$new" | jq -r .pass)")"
check "... with pay_by" test "$(jq -r '.pay_by // empty' "$dir/order.json")" != ""

# ---- abandoned places are skipped ---------------------------------------------------
now_ms() { rcli TIME | { read -r s; read -r us; echo $((s * 1000 + us / 1000)); }; }
starts=$(($(now_ms) / 1000 + 40)) # whole seconds; the abandon wait fits well before
expect "a SKU whose sale starts in 40 s" 201 \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        --data "{\"stock\": 5, \"starts_at\": \"$(date -u -d "@$starts" +%Y-%m-%dT%H:%M:%SZ)\", \"room\": {\"rate_per_s\": 50, \"max_active\": 10}}" \
        "$A/skus/c")"
jc() {
    curl -s -o "$dir/joinc-$1.json" -w '%{http_code}' -H "Seckill-Buyer: $2" -X POST \
        --data "{\"user_id\":\"$1\"}" "$A/skus/c/queue"
}
expect "cid, dan and eve join before the start" "202 202 202" \
    "$(jc cid "$cid") $(jc dan "$dan") $(jc eve "$eve")"
tc() { jq -r .ticket "$dir/joinc-$1.json"; }
pollc() { curl -s "$A/skus/c/queue/$(tc "$1")"; }
# cid and dan poll every 0.5 s in the background; eve never polls again
(while :; do pollc cid >/dev/null; pollc dan >/dev/null; sleep 0.5; done) &
poller=$!
on_exit() { # (it_cleanup calls it) the poller stopped, whatever happened
    kill "$poller" 2>/dev/null
    wait "$poller" 2>/dev/null
    return 0
}
waiting() { curl -s "$A/metrics" | awk '$1 == "seckill_room_waiting{sku=\"c\"}" { print $2 }'; }
waiting_is() { [[ $(waiting) == "$1" ]]; }
check "3 waiting at first" wait_until 5 waiting_is 3
check "eve, who stopped polling, is no longer counted as waiting (<= 25 s)" \
    wait_until 25 waiting_is 2
expect "... before the start" "waiting" "$(pollc cid | jq -r .state)"
check "at the start cid and dan are admitted" \
    wait_until 60 eval '[[ $(pollc cid | jq -r .state) == admitted && $(pollc dan | jq -r .state) == admitted ]]'
expect "... eve's ticket: expired (her place was given up)" expired "$(pollc eve | jq -r .state)"
expect "... the room admitted 2" 2 "$(rcli HGET 'sk:{c}:room' admitted)"
checks_finish
