#!/usr/bin/env bash
# The commit scripts are all or nothing (issue 46, point 1): the group commit
# (batch.lua), one order over several segments (commit.lua) and the atomic mode
# (atomic.lua) read and check every value they compute with before their first write;
# so does the read under a segment's lock (read.lua).
# Each case corrupts one value of a SKU in Redis, places an order that reads it and
# shows: the answer is 503 unavailable, every key of the SKU (and every order record)
# is byte for byte as it was (DUMP), the instance logs the SKU and the key at warn
# and counts it (seckill_orders_malformed_total), and another SKU still sells.
# Before the fix each of these scripts wrote part of the order, then failed on the
# value (Redis does not roll back a script that fails part-way): an order record
# without its counts, a stock written and its index not, units given back dropped;
# and a malformed Idempotency-Key record was answered 422, as a key used for another
# request; the read under the lock answered a malformed stock unavailable while it kept
# the lock to its lease's end, and malformed units given back busy, counted as a
# fenced-off commit. The transfers between a cluster's shards (xfer_out.lua, xfer_in.lua):
# it_malformed_xfer.sh. About 10 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin malformed_commit redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
start_instance lk "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 2 --threads 1
L=$STARTED_URL
start_instance at "$dir" --redis "127.0.0.1:$rport" --lock atomic --segments 2 --threads 1
A=$STARTED_URL

put() { # URL SKU BODY -> status
    curl -s -o /dev/null -w '%{http_code}' -X PUT -d "$3" "$1/skus/$2"
}
snap() { it_key_digests "$rport" "*{$1}*" 'order:*'; } # SKU: its keys, every record
malformed() { # URL: the instance's count of orders refused for a malformed value
    curl -s "$1/metrics" | awk '$1 == "seckill_orders_malformed_total" { print $2 }'
}
# refused NAME URL SKU USER QTY [KEY]: an order that reads the corrupted value: 503,
# nothing of the SKU written, the instance's log names the key
refused() {
    local name=$1 url=$2 sku=$3 before c
    before=$(snap "$sku")
    read -r c _ <<<"$(it_order "$url" "$sku" "$4" "$5" "${6:-}")"
    expect "$name: the order is answered 503" "503" "$c"
    expect "$name: every key of $sku as it was" "$before" "$(snap "$sku")"
}
logged() { # LOG SKU KEY: a warning names the SKU and the key
    grep -q "level=warn event=malformed_record sku=$2 key=\"$3\"" "$dir/$1.log"
}
declare -A url=([lk]=$L [at]=$A)
# corrupt NAME INSTANCE SKU KEY FIELD GOOD USER QTY [IDEMPOTENCY-KEY]: FIELD of hash
# KEY made "x"; USER's order through INSTANCE (lk or at) is refused with nothing
# written and the log names the key and field; then FIELD is GOOD again ("": none)
corrupt() {
    local name=$1 inst=$2 sku=$3 key=$4 field=$5 good=$6
    rcli HSET "$key" "$field" x >/dev/null
    refused "$name" "${url[$inst]}" "$sku" "$7" "$8" "${9:-}"
    check "... the log names it" logged "$inst" "$sku" "$key $field"
    if [[ -n $good ]]; then rcli HSET "$key" "$field" "$good"; else rcli HDEL "$key" "$field"; fi >/dev/null
}

# --- batch.lua: a SKU of one segment, with a payment window; ann's first order
# teaches the instance its layout (placed by itself), her cancel leaves a unit given
# back (the back hash, folded in by the next commit); bob's orders then go through
# the segment's group commit
expect "PUT bt" "201" "$(put "$L" bt '{"stock":10,"segments":1,"per_user_limit":2,"pay_within_ms":60000}')"
read -r c ann _ <<<"$(it_order "$L" bt ann 1)"
expect "bt: ann's reservation placed" "201" "$c"
expect "bt: ann cancels it" "200" "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    -d '{"user_id":"ann"}' "$L/orders/$ann/cancel")"
expect "bt: her unit waits in the back hash" "1" "$(rcli HGET "sk:{bt}:back" 0)"

corrupt "batch, meta's remaining x" lk bt "sk:{bt}:meta" remaining 10 bob 1
corrupt "batch, segment 0's sold x" lk bt "sk:{bt}:sold" 0 0 bob 1
corrupt "batch, cid's count in buyers x" lk bt "sk:{bt}:buyers" cid "" cid 1
corrupt "batch, Idempotency-Key k1's record x (not 422)" lk bt "sk:{bt}:idem" k1 "" dan 1 k1

read -r c _ <<<"$(it_order "$L" bt bob 1)"
expect "bt repaired: bob's order is placed" "201" "$c"
expect "... with ann's unit folded in: 9 left" "9" "$(curl -s "$L/skus/bt" | jq -r .remaining)"

# --- the read under the lock (read.lua), before the commit: a segment's stock or its
# units given back malformed is answered at once, unavailable (not busy, not counted
# as a fenced-off commit), and the lock let go (the next order is answered at once too)
expect "PUT rd" "201" "$(put "$L" rd '{"stock":10,"segments":1,"per_user_limit":2}')"
read -r c _ <<<"$(it_order "$L" rd ann 1)"
expect "rd: ann's order placed (the instance learns its layout)" "201" "$c"
fenced() { curl -s "$L/metrics" | awk '$1 == "seckill_fenced_commits_refused_total" { print $2 }'; }
fenced0=$(fenced)
rcli HSET "sk:{rd}:stock" 0 x >/dev/null
before=$(snap rd)
read -r c _ e1 _ <<<"$(it_order "$L" rd bob 1)"
read -r _ _ e2 secs <<<"$(it_order "$L" rd cid 1)"
expect "read, segment 0's stock x: 503 unavailable, twice" "503 unavailable unavailable" \
    "$c $e1 $e2"
check "... the second at once: the lock was let go (${secs}s < 0.5)" \
    awk -v s="$secs" 'BEGIN { exit !(s < 0.5) }'
expect "... every key of rd as it was" "$before" "$(snap rd)"
check "... the log names it" logged lk rd "sk:{rd}:stock 0"
rcli HSET "sk:{rd}:stock" 0 9 >/dev/null
rcli HSET "sk:{rd}:back" 0 x >/dev/null
read -r c _ e1 _ <<<"$(it_order "$L" rd bob 1)"
expect "read, segment 0's units given back x: 503 unavailable" "503 unavailable" "$c $e1"
check "... the log names it" logged lk rd "sk:{rd}:back 0"
expect "... no commit counted as fenced off" "$fenced0" "$(fenced)"
rcli HDEL "sk:{rd}:back" 0 >/dev/null
read -r c _ <<<"$(it_order "$L" rd bob 1)"
expect "rd repaired: bob's order is placed" "201" "$c"

# --- commit.lua: 2 units in each of 2 segments; an order of 3 takes from both
expect "PUT ms" "201" "$(put "$L" ms '{"stock":4,"segments":2,"per_user_limit":4}')"
corrupt "several segments, segment 0's stock x (not eve's home: read under its lock)" lk ms \
    "sk:{ms}:stock" 0 2 eve 3
corrupt "several segments, segment 1's sold x" lk ms "sk:{ms}:sold" 1 0 eve 3
corrupt "several segments, meta's orders x" lk ms "sk:{ms}:meta" orders 0 eve 3
read -r c _ <<<"$(it_order "$L" ms eve 3)"
expect "ms repaired: eve's order of 3 is placed" "201" "$c"

# --- atomic.lua
expect "PUT at1" "201" "$(put "$A" at1 '{"stock":10,"segments":2}')"
rcli HSET "sk:{at1}:back" 0 x 1 x >/dev/null
refused "atomic, units given back x" "$A" at1 fay 1
check "... the log names it" grep -q 'event=malformed_record sku=at1 key="sk:{at1}:back [01]"' \
    "$dir/at.log"
rcli DEL "sk:{at1}:back" >/dev/null
expect "PUT at2" "201" "$(put "$A" at2 '{"stock":10,"segments":2}')"
rcli HSET "sk:{at2}:sold" 0 x 1 x >/dev/null
refused "atomic, sold x" "$A" at2 fay 1
check "... the log names it" grep -q 'event=malformed_record sku=at2 key="sk:{at2}:sold [01]"' \
    "$dir/at.log"
rcli HSET "sk:{at2}:sold" 0 0 1 0 >/dev/null
read -r c _ <<<"$(it_order "$A" at2 fay 1)"
expect "at2 repaired: fay's order is placed" "201" "$c"

# --- counted, and the other SKUs sell on
expect "lock mode: 10 counted in seckill_orders_malformed_total" "10" "$(malformed "$L")"
expect "atomic mode: 2 counted" "2" "$(malformed "$A")"
expect "PUT ok" "201" "$(put "$L" ok '{"stock":5,"segments":2}')"
read -r c _ <<<"$(it_order "$L" ok gus 1)"
expect "another SKU sells (lock mode)" "201" "$c"
read -r c _ <<<"$(it_order "$A" ok hal 1)"
expect "... and in the atomic mode" "201" "$c"
for s in bt rd ms at2 ok; do
    expect "$s: the audit is consistent" "true" \
        "$(curl -s "$L/skus/$s/audit" | jq -r .consistent)"
done

checks_finish
