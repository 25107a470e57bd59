#!/usr/bin/env bash
# Integration: the waiting room (issue 48; docs/api.md, "Waiting room").
#
# One Redis, two instances A and B on loopback (lock redis), one of which paces.
# - Config: PUT /skus/{sku} takes "room": {"rate_per_s", "max_active", "pass_ttl_ms"}
#   (defaults for the last two), GET /skus/{sku} reports it, a PUT without it
#   removes it; a bad room is a 400 that writes nothing (the SKU as it was).
# - Join: 202 with a ticket; joining again (on the other instance too) gives the same
#   ticket; 404 no_room for a SKU without a room; a forged ticket's poll is 400, and
#   so is one polled on an instance with another key (--room-key-file).
# - Pass: an admitted buyer's poll (on either instance) carries a pass; its order is
#   201; 403 not_admitted for each reason (missing, forged, expired, another user's,
#   another SKU's), counted by reason in /metrics; a second order with the pass is
#   refused by the per-user limit.
# - Pace: admitted places bounded by rate x elapsed + one second's burst, elapsed
#   measured on Redis's clock (TIME); at least a third of rate x elapsed (generous for
#   a busy machine: a tick late by up to a second loses nothing, the tokens accrue on
#   Redis's clock). max_active bounds the unused passes. One instance paces.
# - The pacer stopped: the other instance takes the lease within its 0.8 s and the room
#   goes on; the first, started again, does not pace beside it.
# - Order: the pre-queue (joined before starts_at) is admitted in an order that is not
#   the join order; those who joined after are admitted in join order, after it.
# - Polls cost no Redis command: INFO commandstats' total before and after 4000 polls,
#   less what the instances' background duties sent in a quiet window as long.
# - Truth: paused while no unit is left and a reservation is pending; open again once
#   it is cancelled; sold_out for every waiting buyer once sold out for good.
# - Near a sell-out waiting buyers poll sooner: once every unit left is covered by a
#   live pass (a sell-out may come with the next order), a buyer far back is told
#   poll_after_ms 500, not the 2000 its wait would give; while paused, 500 too; far
#   from a sell-out (1000 units at 1 a second) a buyer 60 places back is told 2000, and so is
#   a pre-queue's last place of a 1-unit sale that starts in a minute (nothing sells
#   before the start).
# - A join waits for nothing but its own command: while a merchant's change waits on the
#   main thread for its lock, a join on the same instance is answered at once.
# Timing: every wait is a condition waited on (wait_until), with a bound of seconds.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin room redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4
A=$STARTED_URL
start_instance two "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4
B=$STARTED_URL

# put SKU BODY: the status; the answer in $dir/put.json
put() {
    curl -s -o "$dir/put.json" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
        --data "$2" "$A/skus/$1"
}
room_of() { curl -s "$A/skus/$1" | jq -c '.room'; }
# join URL SKU USER: the status; the answer in $dir/join-SKU-USER.json
join() {
    curl -s -o "$dir/join-$2-$3.json" -w '%{http_code}' -X POST --data "{\"user_id\":\"$3\"}" \
        "$1/skus/$2/queue"
}
ticket() { jq -r .ticket "$dir/join-$1-$2.json"; } # SKU USER
# poll URL SKU USER: the poll's answer (JSON)
poll() { curl -s "$1/skus/$2/queue/$(ticket "$2" "$3")"; }
state_is() { [[ $(poll "$1" "$2" "$3" | jq -r .state) == "$4" ]]; } # URL SKU USER STATE
# order URL SKU USER [PASS]: "status error detail-reason"
order() {
    local -a h=()
    [[ -n ${4:-} ]] && h=(-H "Seckill-Pass: $4")
    curl -s "${h[@]}" -X POST --data "{\"user_id\":\"$3\"}" "$1/skus/$2/orders" |
        jq -r '"\(.error // "ok") \((.detail // "-") | split(":")[0])"'
}
redis_ms() { rcli TIME | { read -r s; read -r us; echo $((s * 1000 + us / 1000)); }; }
rfc() { date -u -d "@$(($1 / 1000))" +%Y-%m-%dT%H:%M:%SZ; } # whole seconds

# ---- config -------------------------------------------------------------------------
expect "PUT with a room: 201" 201 \
    "$(put cfg '{"stock": 10, "room": {"rate_per_s": 5, "max_active": 20, "pass_ttl_ms": 30000}}')"
expect "... its answer has the room" '{"rate_per_s":5,"max_active":20,"pass_ttl_ms":30000}' \
    "$(jq -c .room "$dir/put.json")"
expect "GET reports the room" '{"rate_per_s":5,"max_active":20,"pass_ttl_ms":30000}' \
    "$(room_of cfg)"
expect "a room of rate_per_s only: max_active one second's worth, a minute's pass" 200 \
    "$(put cfg '{"stock": 10, "room": {"rate_per_s": 7}}')"
expect "... as GET reports" '{"rate_per_s":7,"max_active":7,"pass_ttl_ms":60000}' \
    "$(room_of cfg)"
for bad in '{"rate_per_s": 0}' '{"max_active": 3}' '{"rate_per_s": 5, "pass_ttl_ms": 10}' \
    '{"rate_per_s": 5, "speed": 1}' '"fast"'; do
    expect "room $bad: 400" 400 "$(put cfg "{\"stock\": 99, \"room\": $bad}")"
    expect "... bad_request naming the room" "bad_request room" \
        "$(jq -r '.error + " " + (.detail | split(":")[0] | split(" ")[0])' "$dir/put.json")"
done
expect "... nothing written: the SKU and its room as they were" '10 {"rate_per_s":7,"max_active":7,"pass_ttl_ms":60000}' \
    "$(curl -s "$A/skus/cfg" | jq -r '"\(.initial) \(.room | tojson)"')"
expect "the SKU is in the rooms' registry" "7 7 60000" "$(rcli HGET 'seckill:{rooms}' cfg)"
expect "a PUT without a room removes it" 200 "$(put cfg '{"stock": 10}')"
expect "... GET has no room" null "$(room_of cfg)"
expect "... nor has the meta hash" 0 "$(rcli HEXISTS 'sk:{cfg}:meta' room_rate)"
expect "... nor the registry" 0 "$(rcli HEXISTS 'seckill:{rooms}' cfg)"

# ---- join, pass ---------------------------------------------------------------------
expect "SKU tv with a room" 201 \
    "$(put tv '{"stock": 3, "per_user_limit": 1, "room": {"rate_per_s": 50, "max_active": 10, "pass_ttl_ms": 60000}}')"
# 3-second passes, so that one can be seen expire: the poll that sees cy admitted must
# come within the pass's life, and with 1 s passes (the shortest) an ASan build on a
# busy machine polled after it once (admitted, then expired, never seen admitted)
expect "SKU short with a room of 3 s passes" 201 \
    "$(put short '{"stock": 3, "room": {"rate_per_s": 50, "pass_ttl_ms": 3000}}')"
expect "SKU radio with a room" 201 "$(put radio '{"stock": 3, "room": {"rate_per_s": 50}}')"
expect "SKU plain without one" 201 "$(put plain '{"stock": 3}')"
expect "ann joins on A: 202" 202 "$(join "$A" tv ann)"
cp "$dir/join-tv-ann.json" "$dir/first.json"
expect "ann joins again on B: 202" 202 "$(join "$B" tv ann)"
expect "... with the same ticket" "$(jq -r .ticket "$dir/first.json")" "$(ticket tv ann)"
expect "bob joins tv and radio" "202 202" "$(join "$A" tv bob) $(join "$A" radio bob)"
expect "a SKU without a room: 404 no_room" "404 no_room" \
    "$(join "$A" plain ann) $(jq -r .error "$dir/join-plain-ann.json")"
expect "an unknown SKU: 404 not_found" "404 not_found" \
    "$(join "$A" nosuch ann) $(jq -r .error "$dir/join-nosuch-ann.json")"
forged=$(ticket tv ann | sed 's/\.\([A-Za-z0-9_-]\)[A-Za-z0-9_-]*$/.\1AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/')
expect "a forged ticket's poll: 400" 400 \
    "$(curl -s -o /dev/null -w '%{http_code}' "$A/skus/tv/queue/$forged")"
expect "ann's ticket polled as radio's: 400" 400 \
    "$(curl -s -o /dev/null -w '%{http_code}' "$A/skus/radio/queue/$(ticket tv ann)")"
page=$(curl -s -w '\n%{http_code} %{content_type}' "$B/skus/tv/room")
expect "the room's page: 200 text/html" "200 text/html; charset=utf-8" "$(tail -1 <<<"$page")"
check "... which joins, polls and orders with the pass" \
    grep -q "Seckill-Pass" <<<"$page"
expect "... and a SKU without a room has none: 404" 404 \
    "$(curl -s -o /dev/null -w '%{http_code}' "$A/skus/plain/room")"
# an instance with a key of its own (--room-key-file): the others' tickets are not its
head -c 32 /dev/urandom >"$dir/room.key"
start_instance keyed "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4 \
    --room-key-file "$dir/room.key"
K=$STARTED_URL
check "... which logs its key's source and id" grep -q 'event=room_key source=file kid=' "$dir/keyed.log"
expect "ann's ticket polled on an instance of another key: 400" 400 \
    "$(curl -s -o /dev/null -w '%{http_code}' "$K/skus/tv/queue/$(ticket tv ann)")"
proc_stop keyed "$dir" 5
check "ann is admitted within 5 s (50 a second, a tick each 100 ms)" \
    wait_until 5 state_is "$B" tv ann admitted
check "... bob too, on tv and radio" wait_until 5 state_is "$A" tv bob admitted
wait_until 5 state_is "$A" radio bob admitted
pass=$(poll "$A" tv ann | jq -r .pass)
bob_tv=$(poll "$B" tv bob | jq -r .pass)
bob_radio=$(poll "$A" radio bob | jq -r .pass)
check "the admitted answer has a pass and when it expires" \
    test "$(poll "$A" tv ann | jq -r '(.pass | length > 40) and (.pass_expires_at | length > 0)')" = true
expect "an order without a pass: 403 missing" "not_admitted missing" "$(order "$A" tv ann)"
# forged: its signature's last character changed in the bits it carries (a 32-byte MAC
# in base64url ends in one of A E I ... w 0 4 8, whose low two bits are 0: from 'A' to
# 'w', else to 'A'; 'A' for an 'A' would leave the pass as it was, 1 run in 16)
[[ ${pass: -1} == A ]] && forged_pass="${pass%?}w" || forged_pass="${pass%?}A"
expect "with a forged pass: 403 forged" "not_admitted forged" "$(order "$A" tv ann "$forged_pass")"
expect "with bob's pass: 403 another user's" "not_admitted another user's" "$(order "$A" tv ann "$bob_tv")"
expect "bob with his radio pass on tv: 403 another SKU's" "not_admitted another SKU's" \
    "$(order "$B" tv bob "$bob_radio")"
expect "ann with her pass, on B: 201" "ok -" "$(order "$B" tv ann "$pass")"
expect "... a second order with it: the per-user limit" "limit_reached the user already bought the per-user limit" \
    "$(order "$A" tv ann "$pass")"
expect "a SKU without a room needs no pass" "ok -" "$(order "$A" plain ann)"
# a 3 s pass expires; the order is then refused (by Redis's clock as the instance
# knows it). The pass is kept from the poll that says admitted (one poll, not two).
expect "cy joins short" 202 "$(join "$A" short cy)"
cy_admitted() {
    poll "$A" short cy >"$dir/cy.json"
    [[ $(jq -r .state "$dir/cy.json") == admitted ]]
}
check "... admitted" wait_until 5 cy_admitted
exp_ms=$(date -d "$(jq -r .pass_expires_at "$dir/cy.json")" +%s%3N)
expired() { (($(redis_ms) > exp_ms + 100)); }
wait_until 10 expired # the pass's 3 s, and slack
expect "cy with his expired pass: 403 expired" "not_admitted expired" \
    "$(order "$A" short cy "$(jq -r .pass "$dir/cy.json")")"
expect "... and his poll says expired" expired "$(poll "$A" short cy | jq -r .state)"
metric() { curl -s "$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }
refused=0
for u in "$A" "$B"; do
    for r in missing forged expired another_user another_sku; do
        refused=$((refused + $(metric "$u" "seckill_room_passes_refused_total{reason=\"$r\"}")))
    done
done
expect "the refusals counted by reason, over both instances" 5 "$refused"
expect "one instance paces" 1 \
    "$(($(metric "$A" seckill_room_pacer) + $(metric "$B" seckill_room_pacer)))"

# ---- pace, max_active -----------------------------------------------------------------
# 600 joiners, 20 a second: in the seconds the test watches, the rate binds, not the
# queue. Stock and max_active large.
rate=20
expect "SKU pace: 1000 units, 20 a second" 201 \
    "$(put pace "{\"stock\": 1000, \"room\": {\"rate_per_s\": $rate, \"max_active\": 1000}}")"
t0=$(redis_ms) # the pace starts no earlier than the PUT
# curl -K FILE: one process, one kept-alive connection, a request a group (`next`)
joins_cfg() { # SKU PREFIX N: N joins of users PREFIX1..PREFIXN
    for i in $(seq 1 "$3"); do
        ((i > 1)) && echo next
        printf 'url = "%s/skus/%s/queue"\ndata = "{\\"user_id\\":\\"%s%d\\"}"\noutput = "/dev/null"\n' \
            "$A" "$1" "$2" "$i"
    done
}
joins_cfg pace p 600 >"$dir/joins.cfg"
curl -s -K "$dir/joins.cfg"
expect "600 places queued" 600 "$(rcli ZCARD 'sk:{pace}:room:q')"
admitted_pace() { rcli HGET 'sk:{pace}:room' admitted; }
three_s() { (($(redis_ms) - t0 >= 3000)); }
wait_until 10 three_s
n=$(admitted_pace)
t1=$(redis_ms)
elapsed=$((t1 - t0))
hi=$((rate * elapsed / 1000 + rate))
lo=$((rate * elapsed / 3000))
echo "pace: $n admitted in $elapsed ms (Redis's clock) at $rate a second: at most $hi, at least $lo"
check "admitted $n <= rate x elapsed + one second's burst ($hi)" test "$n" -le "$hi"
check "admitted $n >= a third of rate x elapsed ($lo)" test "$n" -ge "$lo"

expect "SKU cap: max_active 5, 100 a second" 201 \
    "$(put cap '{"stock": 100, "room": {"rate_per_s": 100, "max_active": 5}}')"
for i in $(seq 1 12); do join "$A" cap "c$i" >/dev/null; done
five() { [[ $(rcli HGET 'sk:{cap}:room' admitted) == 5 ]]; }
check "max_active 5: five admitted" wait_until 5 five
sleep_ms_redis() { local until=$(($(redis_ms) + $1)); while (($(redis_ms) < until)); do sleep 0.05; done; }
sleep_ms_redis 1000 # a second of ticks, each of which could admit 10 more
expect "... and no more while their passes are unused" 5 "$(rcli HGET 'sk:{cap}:room' admitted)"
expect "... the live passes, as counted" 5 "$(rcli ZCARD 'sk:{cap}:room:live')"
p1=$(poll "$A" cap c1 | jq -r .pass)
expect "c1 buys" "ok -" "$(order "$A" cap c1 "$p1")"
six() { [[ $(rcli HGET 'sk:{cap}:room' admitted) == 6 ]]; }
check "... which frees one place: a sixth admitted" wait_until 5 six
sleep_ms_redis 500
expect "... and only one" 6 "$(rcli HGET 'sk:{cap}:room' admitted)"

# ---- the pacer dies: another takes its lease -----------------------------------------
pacer=one other=two other_url=$B
[[ $(metric "$A" seckill_room_pacer) == 1 ]] || { pacer=two other=one other_url=$A; }
expect "SKU relay: 20 a second" 201 \
    "$(put relay '{"stock": 1000, "room": {"rate_per_s": 20, "max_active": 1000}}')"
joins_cfg relay r 200 >"$dir/relay.cfg"
curl -s -K "$dir/relay.cfg"
proc_stop "$pacer" "$dir" 5 # SIGTERM: it drains; its lease is left to expire
relay_n() { rcli HGET 'sk:{relay}:room' admitted; }
took() { [[ $(metric "$other_url" seckill_room_pacer) == 1 ]]; }
check "the pacer $pacer stopped: $other holds the lease within 0.8 s (+2.2 s slack)" wait_until 3 took
before=$(relay_n)
moved() { (($(relay_n) > before + 10)); }
check "... and the room goes on being admitted" wait_until 5 moved
start_instance "$pacer" "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4
[[ $pacer == one ]] && A=$STARTED_URL || B=$STARTED_URL
expect "... once back, it does not pace beside $other" 0 \
    "$(metric "$([[ $pacer == one ]] && echo "$A" || echo "$B")" seckill_room_pacer)"

# ---- order: pre-queue drawn, FIFO after ---------------------------------------------
start_ms=$(($(redis_ms) / 1000 * 1000 + 3000)) # whole seconds: starts_at's precision
expect "SKU fair: its sale starts in 2..3 s" 201 \
    "$(put fair "{\"stock\": 100, \"starts_at\": \"$(rfc "$start_ms")\", \"room\": {\"rate_per_s\": 100, \"max_active\": 100}}")"
expect "zoe joins the pre-queue first" 202 "$(join "$A" fair zoe)"
cp "$dir/join-fair-zoe.json" "$dir/zoe.json"
joins_cfg fair pre 30 >"$dir/pre.cfg"
curl -s -K "$dir/pre.cfg"
expect "zoe joins again after 30 others drew places (some before hers): the same ticket" \
    "$(jq -r .ticket "$dir/zoe.json")" "$(join "$B" fair zoe >/dev/null; ticket fair zoe)"
check "... the 30 pre-queue joins came before the start" test "$(redis_ms)" -lt "$start_ms"
started() { (($(redis_ms) >= start_ms)); }
wait_until 10 started
for i in $(seq 1 10); do join "$B" fair "post$i" >/dev/null; done
order_of() { rcli ZRANGE 'sk:{fair}:room:q' 0 -1 | tr '\n' ' '; }
pre_order=$(order_of | tr ' ' '\n' | grep '^pre' | tr '\n' ' ')
check "the pre-queue's order is not its join order (a 1 in 30! chance to be)" \
    test "$pre_order" != "$(seq -f 'pre%g' 1 30 | tr '\n' ' ')"
expect "those who joined after the start: in join order, after the pre-queue" \
    "$(seq -f 'post%g' 1 10 | tr '\n' ' ')" "$(order_of | tr ' ' '\n' | tail -n +32 | tr '\n' ' ')"
all41() { [[ $(rcli HGET 'sk:{fair}:room' admitted) == 41 ]]; }
check "all 41 admitted, in that order (the pacer takes the queue by place)" wait_until 10 all41

# ---- polls cost no Redis command ----------------------------------------------------
total_calls() {
    rcli INFO commandstats | awk -F'[=,:]' '/^cmdstat_/ { n += $3 } END { print n }'
}
join "$A" pace p1 >/dev/null # its ticket
t=$(ticket pace p1)
polls=4000
for i in $(seq 1 $polls); do printf 'url = "%s/skus/pace/queue/%s"\noutput = "/dev/null"\n' "$A" "$t"; done >"$dir/polls.cfg"
c0=$(total_calls) s0=$(redis_ms)
curl -s -K "$dir/polls.cfg"
c1=$(total_calls) s1=$(redis_ms)
sleep_ms_redis $((s1 - s0)) # a quiet window as long: the duties' own commands
c2=$(total_calls) s2=$(redis_ms)
busy=$((c1 - c0)) quiet=$((c2 - c1))
extra=$((busy - quiet * (s1 - s0) / (s2 - s1 > 0 ? s2 - s1 : 1)))
echo "polls: $polls in $((s1 - s0)) ms: $busy Redis commands meanwhile (INFO commandstats," \
    "a script's calls included), $quiet in a quiet $((s2 - s1)) ms: $extra more than the" \
    "duties' rate, $(awk -v e="$extra" -v n="$polls" 'BEGIN { printf "%.3f", e / n }') a poll"
# One command a poll would be $polls more. The duties' own commands (every instance's
# ticks: the lease, each room's pace and news, a script's inner calls counted) vary
# with the machine's load by a few hundred a second: half a command a poll is the bound.
check "$polls polls cost less than half a Redis command each (0 by design)" \
    test "$extra" -lt $((polls / 2))

# ---- paused, open again, sold out ---------------------------------------------------
expect "SKU res: 1 unit, reservations" 201 \
    "$(put res '{"stock": 1, "pay_within_ms": 60000, "room": {"rate_per_s": 100, "max_active": 10}}')"
expect "ivy and joe join" "202 202" "$(join "$A" res ivy) $(join "$A" res joe)"
check "ivy admitted (one unit: one pass)" wait_until 5 state_is "$A" res ivy admitted
state_is "$A" res joe waiting
expect "... joe waits" waiting "$(poll "$A" res joe | jq -r .state)"
oid=$(curl -s -H "Seckill-Pass: $(poll "$A" res ivy | jq -r .pass)" -X POST \
    --data '{"user_id":"ivy"}' "$A/skus/res/orders" | jq -r .order_id)
check "ivy reserves the unit" test -n "$oid" -a "$oid" != null
check "joe's poll: paused (no unit left, one pending)" wait_until 5 state_is "$B" res joe paused
curl -s -o /dev/null -X POST --data '{"user_id":"ivy"}' "$A/orders/$oid/cancel"
check "ivy cancels: the unit is back, joe admitted" wait_until 5 state_is "$B" res joe admitted
# (B said admitted; A learns it from the pacer's news a tick later: its pass then)
joe_pass() { jp=$(poll "$A" res joe | jq -r '.pass // empty'); [[ -n $jp ]]; }
check "... and A gives joe his pass (within 5 s)" wait_until 5 joe_pass
# An instance that saw the SKU sold out may say so from memory for up to a second
# after a unit came back (invariant 8): joe, admitted, tries again meanwhile.
joe_orders() {
    curl -s -H "Seckill-Pass: $jp" -X POST --data '{"user_id":"joe"}' "$A/skus/res/orders" \
        >"$dir/joe.json"
    [[ $(jq -r .order_id "$dir/joe.json") =~ ^[0-9]+$ ]]
}
wait_until 3 joe_orders
joe=$(jq -r .order_id "$dir/joe.json")
check "joe reserves it ($(cat "$dir/joe.json"))" test -n "$joe" -a "$joe" != null
expect "kim joins late" 202 "$(join "$B" res kim)"
check "... paused while joe's reservation is pending" wait_until 5 state_is "$B" res kim paused
expect "... told to poll after 500 ms (a payment may end the sale)" 500 \
    "$(poll "$B" res kim | jq -r .poll_after_ms)"
expect "joe pays" paid "$(curl -s -X POST "$A/orders/$joe/pay" | jq -r .state)"
check "... every waiting buyer's poll: sold_out" wait_until 5 state_is "$B" res kim sold_out

# ---- near a sell-out: poll sooner ------------------------------------------------------
# 1 a second: the 5th in line waits ~4 s, which alone would give poll_after_ms 2000
expect "SKU near: 1 unit, 1 a second" 201 \
    "$(put near '{"stock": 1, "room": {"rate_per_s": 1, "max_active": 1}}')"
expect "SKU far: 1000 units, 1 a second" 201 \
    "$(put far '{"stock": 1000, "room": {"rate_per_s": 1, "max_active": 1000}}')"
for i in 0 1 2 3 4; do join "$A" near "n$i" >/dev/null; done
# far: n0, then 60 more (the last ~60 s back at 1 a second, however slow this test)
join "$A" far n0 >/dev/null
joins_cfg far f 59 >"$dir/far.cfg"
curl -s -K "$dir/far.cfg"
join "$A" far f60 >/dev/null
check "n0 admitted to near (within 5 s: a second's token)" wait_until 5 state_is "$B" near n0 admitted
check "... and to far" wait_until 5 state_is "$B" far n0 admitted
# B read the admission and what is left to admit in the same news entry
expect "near: n4 waits, told to poll after 500 ms (the one unit is n0's pass's)" "waiting 500" \
    "$(poll "$B" near n4 | jq -r '"\(.state) \(.poll_after_ms)"')"
expect "far: the last waits, told to poll after 2000 ms (999 units to admit at 1 a second)" \
    "waiting 2000" "$(poll "$B" far f60 | jq -r '"\(.state) \(.poll_after_ms)"')"
# a sale of 1 unit at 1 a second that starts in a minute: 20 in its pre-queue
start_later=$(($(redis_ms) / 1000 * 1000 + 60000))
expect "SKU later: 1 unit, 1 a second, starts in a minute" 201 \
    "$(put later "{\"stock\": 1, \"starts_at\": \"$(rfc "$start_later")\", \"room\": {\"rate_per_s\": 1, \"max_active\": 1}}")"
for i in $(seq 1 20); do join "$A" later "l$i" >/dev/null; done
later_known() { [[ $(curl -s "$B/metrics" | awk '$1 == "seckill_room_waiting{sku=\"later\"}" { print $2 }') == 20 ]]; }
check "B read the pacer's news of the 20 (within 5 s)" wait_until 5 later_known
most=0
for i in $(seq 1 20); do
    p=$(poll "$B" later "l$i" | jq -r .poll_after_ms)
    ((p > most)) && most=$p
done
expect "the last of the pre-queue is told 2000 ms (no sale before the start, a minute away)" \
    2000 "$most"
expect "n0 buys near's unit" "ok -" "$(order "$A" near n0 "$(poll "$A" near n0 | jq -r .pass)")"
check "... n4's poll: sold_out" wait_until 5 state_is "$B" near n4 sold_out

# ---- a join waits for nothing but its own command ----------------------------------
# A merchant's change runs on the main thread and waits there (up to 5 s) for the
# write side of its SKU's lock. Joins are the event loop's: they go on meanwhile.
# (When joins ran on the main thread too, each waited behind the change: 5 s.)
expect "SKU stall: a room" 201 "$(put stall '{"stock": 10, "room": {"rate_per_s": 5}}')"
# a reader that never lets go (30 s), as a hold on a stopped instance would
rcli HSET "sk:{stall}:lock:rw" mode read ghost 1 >/dev/null
rcli PEXPIRE "sk:{stall}:lock:rw" 30000 >/dev/null
curl -s -o "$dir/stall.patch" -w '%{http_code}' -X PATCH --data '{"add": 1}' \
    "$A/skus/stall" >"$dir/stall.code" &
patcher=$!
waits() { [[ $(rcli EXISTS "sk:{stall}:lock:rw:writer") == 1 ]]; }
check "the change waits for the write side (its intent in Redis, within 5 s)" wait_until 5 waits
t0=$(date +%s%N)
# 2 s: the join itself takes a few ms; the change keeps the main thread 5 s
expect "a join meanwhile on the same instance: 202 at once" 202 \
    "$(curl -s -o /dev/null --max-time 2 -w '%{http_code}' -X POST --data '{"user_id":"s1"}' \
        "$A/skus/stall/queue")"
echo "the join took $((($(date +%s%N) - t0) / 1000000)) ms beside the waiting change"
wait "$patcher"
expect "... the change, the lock never freed: 503 after its wait" 503 "$(cat "$dir/stall.code")"
expect "... and nothing added" "10 0" "$(curl -s "$A/skus/stall" | jq -r '"\(.remaining) \(.added_total)"')"

checks_finish
