#!/usr/bin/env bash
# A reservation's end is all or nothing (issue 46, point 1): the sweep (due.lua), a pay
# (pay.lua) and a cancel (cancel.lua) read and check every record before their first
# write. A record with state pending and no qty (or a qty that is not a number) beside
# valid orders: the valid ones end and their units come back; the malformed one is
# left exactly as it was (still due, counted in seckill_sweep_malformed_total), and a
# pay or cancel of one answers 503 with nothing written. So does a malformed value of
# the SKU that the end computes with (units given back, the pending count): a cancel,
# a pay and the sweep write nothing, log the key (a cancel, a pay) and count it.
# Before the fix the sweep wrote the first order's state and event, then failed on
# the malformed record: that order stayed "expired" with its unit never back (Redis
# does not roll back a script that fails part-way); a cancel with the SKU's units given
# back malformed wrote the order cancelled, then failed: its unit never came back, and
# a repeat answered 200. About 10 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin malformed redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 2
U=$STARTED_URL

expect "PUT bad (a payment window of a minute)" "201" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        -d '{"stock":10,"segments":2,"per_user_limit":2,"pay_within_ms":60000}' "$U/skus/bad")"
ids=()
for u in ann bob cid dan; do
    read -r c id _ <<<"$(it_order "$U" bad "$u" 1)"
    expect "$u's reservation placed" "201" "$c"
    ids+=("$id")
done
ann=${ids[0]} bob=${ids[1]} cid=${ids[2]} dan=${ids[3]}
remaining() { curl -s "$U/skus/bad" | jq -r .remaining; }
expect "6 left after 4 reservations" "6" "$(remaining)"

# bob's record loses its qty, cid's and dan's get a qty that is no number
it_rec_set "$rport" "$bob" qty '' >/dev/null
it_rec_set "$rport" "$cid" qty x >/dev/null
it_rec_set "$rport" "$dan" qty x >/dev/null
snap() { rcli HGET "$(it_rec_key "$1")" "$1"; }
meta() { rcli HGETALL "sk:{bad}:meta" | paste -sd' '; }
bob0=$(snap "$bob") cid0=$(snap "$cid") dan0=$(snap "$dan") meta0=$(meta)

# --- a pay and a cancel of a malformed record: refused, nothing written
expect "a pay of cid's malformed record: 503" "503" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{}' "$U/orders/$cid/pay")"
expect "... cid's record as it was" "$cid0" "$(snap "$cid")"
expect "a cancel of dan's: 503" "503" "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    -d '{"user_id":"dan"}' "$U/orders/$dan/cancel")"
expect "... dan's record as it was" "$dan0" "$(snap "$dan")"
expect "... and the SKU's counters as they were" "$meta0" "$(meta)"

# --- the sweep: ann's and bob's made due at once (records, due set, deadline index)
it_due_now "$rport" bad "$ann" "$bob" >/dev/null
bob0=$(snap "$bob")
state() { curl -s "$U/orders/$1" | jq -r .state; }
ann_expired() { [[ $(state "$ann") == expired ]]; }
check "the sweep expires ann's valid reservation" wait_until 10 ann_expired
malformed() { # the counter of malformed records the sweep met
    curl -s "$U/metrics" | awk '$1 == "seckill_sweep_malformed_total" { print $2 }'
}
seen() { [[ $(malformed) -ge 1 ]]; }
check "... counts bob's malformed record (seckill_sweep_malformed_total)" wait_until 10 seen
expect "... and gives ann's unit back: 7 left" "7" "$(remaining)"
expect "bob's record is as it was" "$bob0" "$(snap "$bob")"
expect "... still due" "1" "$(rcli ZSCORE "sk:{bad}:due" "$bob")"
expect "... and the SKU with it, in the deadline index" "1" "$(rcli ZSCORE seckill:due bad)"

# --- a value of the SKU the end computes with (give_write), not the record: units
# given back or the pending count malformed; a cancel, a pay and the sweep write
# nothing (every key of the SKU and its records as they were, by DUMP)
expect "PUT bv (one segment, a payment window)" "201" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        -d '{"stock":10,"segments":1,"per_user_limit":2,"pay_within_ms":60000}' "$U/skus/bv")"
bv=()
for u in eve fay gus; do
    read -r c id _ <<<"$(it_order "$U" bv "$u" 1)"
    expect "bv: $u's reservation placed" "201" "$c"
    bv+=("$id")
done
eve=${bv[0]} fay=${bv[1]} gus=${bv[2]}
keys() { it_key_digests "$rport" '*{bv}*' 'order:*'; } # SKU bv's and every record
logged() { grep -q "level=warn event=malformed_record sku=bv key=\"$1\"" "$dir/one.log"; }
rcli HSET "sk:{bv}:back" 0 x >/dev/null
keys0=$(keys)
expect "bv's back x: eve's cancel is answered 503" "503" "$(curl -s -o /dev/null \
    -w '%{http_code}' -X POST -d '{"user_id":"eve"}' "$U/orders/$eve/cancel")"
expect "... every key of bv as it was" "$keys0" "$(keys)"
check "... the log names it" logged "sk:{bv}:back 0"
# fay's made due: the sweep meets the malformed back and leaves her order as it is
rcli EVAL "$(it_rec_lua)
           local r = rec_get(KEYS[1], ARGV[1])
           r.pay_by = '1'
           redis.call('HSET', KEYS[1], ARGV[1], rec_text(r))
           redis.call('ZADD', KEYS[2], 1, ARGV[1])
           redis.call('ZADD', KEYS[3], 1, ARGV[2])" 3 "$(it_rec_key "$fay")" "sk:{bv}:due" seckill:due \
    "$fay" bv >/dev/null
keys0=$(keys) m0=$(malformed)
# two rounds at least: each counts fay's and bob's (still malformed, above) once; the
# first round after fay was made due may have run before, so the second did sweep bv
swept() { [[ $(malformed) -ge $((m0 + 4)) ]]; }
check "... the sweep meets it (seckill_sweep_malformed_total, each round)" wait_until 10 swept
expect "... and writes nothing" "$keys0" "$(keys)"
# in one step: a sweep between a repaired back and a malformed pending would expire
# fay's order (a sweep round every 100 ms)
rcli EVAL "redis.call('HSET', KEYS[1], 0, 0) redis.call('HSET', KEYS[2], 'pending', 'x')" \
    2 "sk:{bv}:back" "sk:{bv}:meta" >/dev/null
m0=$(malformed)
check "bv's pending x: the sweep meets it" wait_until 10 swept
expect "... fay's order still pending" "pending" "$(it_rec "$rport" "$fay" state)"
fay_expired() { [[ $(it_rec "$rport" "$fay" state) == expired ]]; }
keys0=$(keys)
expect "... gus's pay is answered 503" "503" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{}' "$U/orders/$gus/pay")"
expect "... every key of bv as it was" "$keys0" "$(keys)"
check "... the log names it" logged "sk:{bv}:meta pending"
rcli HSET "sk:{bv}:meta" pending 3 >/dev/null
check "repaired: the sweep expires fay's" wait_until 10 fay_expired
expect "... eve cancels" "200" "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    -d '{"user_id":"eve"}' "$U/orders/$eve/cancel")"
expect "... gus pays" "200" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{}' "$U/orders/$gus/pay")"
expect "... 9 left, the audit consistent" "9 true" \
    "$(curl -s "$U/skus/bv/audit" | jq -r '"\(.initial - .sold) \(.consistent)"')"

checks_finish
