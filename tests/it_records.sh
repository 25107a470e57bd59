#!/usr/bin/env bash
# Order records, many to a hash (inventory/lua/rec.lua, issue 47).
#
# A group commit's Redis calls do not grow with its batch (point 3): batch.lua run by
# hand on a SKU an instance made, once for 1 order and once for 32, every order with an
# Idempotency-Key, a payment window (each one pending: the due set, the deadline index)
# and the outbox on (its events, the records counted open). The calls each made,
# command by command (INFO commandstats, reset before each), are the same. On 9e3478e
# (a key and an HSET per record, an HGET per Idempotency-Key) the 32 made 31 more HSETs
# and 31 more HGETs. The 32 records are one hash's fields, each readable as the service
# reads it (rec_read.lua), and the batch's events are one stream entry. The sweep too:
# due.lua expiring 1 reservation and 20 makes the same calls (9e3478e: an HMGET and an
# HSET per record).
#
# Records of the layout before (a hash of its own, order:<id>, fields by name) are still
# read and changed: three reservations turned back into it by hand; GET answers each
# as before, a pay and a cancel answer as for any record and move it into its hash (its
# old key gone), and a PUT ?reset=true deletes the third's old key. Fails on a build that
# reads only the hashes (GET 404, pay 404).
#
# A pay and a cancel are one call each: the script reads the record and learns its SKU
# (MONITOR: no rec_read.lua before pay.lua; on c8a0f31, one).
#
# The atomic mode's group commit: an instance with --lock atomic under 32 connections
# (wrk, 2 s) on a SKU of one segment sells with fewer scripts than orders (a segment's
# queued orders in one batch.lua call); on 9e3478e, one atomic.lua call an order (and
# Redis's EVALSHA calls were more than the orders).
# About 10 s; no timing in it.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin records redis-server redis-cli curl jq wrk
gen=${SECKILL_BUILD:-build}/gen/inventory/lua
[[ $gen == /* ]] || gen=$ROOT/$gen

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis || exit 1
U=$STARTED_URL
expect "PUT b: one segment, a payment window" "201" "$(curl -s -o /dev/null -w '%{http_code}' \
    -X PUT -d '{"stock":1000,"segments":1,"per_user_limit":5,"pay_within_ms":600000}' \
    "$U/skus/b")"

# ---- records of the layout before ---------------------------------------------------
expect "PUT old: a payment window" "201" "$(curl -s -o /dev/null -w '%{http_code}' \
    -X PUT -d '{"stock":10,"segments":2,"per_user_limit":1,"pay_within_ms":600000}' \
    "$U/skus/old")"
olds=()
for u in ann bob cid; do
    olds+=("$(curl -s -X POST -d "{\"user_id\":\"$u\"}" "$U/skus/old/orders" | jq -r .order_id)")
done
# as_old ID: its record moved to order:<id>, field by field, out of its hash
as_old() {
    rcli EVAL "$(it_rec_lua)
local r = rec_get(KEYS[1], ARGV[1])
local f = {}
for _, name in ipairs(REC_FIELDS) do
  if r[name] then f[#f + 1] = name; f[#f + 1] = r[name] end
end
redis.call('HSET', KEYS[2], unpack(f))
return redis.call('HDEL', KEYS[1], ARGV[1])" 2 "$(it_rec_key "$1")" "order:$1" "$1"
}
for id in "${olds[@]}"; do as_old "$id" >/dev/null; done
get() { curl -s "$U/orders/$1" | jq -r '"\(.user_id) \(.state)"'; }
expect "three reservations, their records in the layout before" "1 1 1 0" \
    "$(rcli EXISTS "order:${olds[0]}") $(rcli EXISTS "order:${olds[1]}") $(rcli EXISTS "order:${olds[2]}") $(it_rec_exists "$rport" "${olds[0]}")"
expect "GET of each: as before" "ann pending bob pending cid pending" \
    "$(get "${olds[0]}") $(get "${olds[1]}") $(get "${olds[2]}")"
expect "a pay of ann's: 200 paid" "200 paid" "$(curl -s -w ' %{http_code}' -X POST \
    -d '{"payment_id":"p-1"}' "$U/orders/${olds[0]}/pay" | jq -rR 'split(" ") | "\(.[-1]) \(.[0:-1] | join(" ") | fromjson | .state)"')"
expect "... its record moved into its hash, the old key gone" "paid p-1 0" \
    "$(it_rec "$rport" "${olds[0]}" state) $(it_rec "$rport" "${olds[0]}" payment_id) $(rcli EXISTS "order:${olds[0]}")"
expect "a cancel of bob's: 200" "200" "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    -d '{"user_id":"bob"}' "$U/orders/${olds[1]}/cancel")"
expect "... moved too, its unit back (8 of 10 left)" "cancelled 0 8" \
    "$(it_rec "$rport" "${olds[1]}" state) $(rcli EXISTS "order:${olds[1]}") $(curl -s "$U/skus/old" | jq .remaining)"
expect "PUT ?reset=true of old: 200" "200" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
    -d '{"stock":10,"segments":2}' "$U/skus/old?reset=true")"
expect "... cid's old record gone with the others" "0 0 0" \
    "$(rcli EXISTS "order:${olds[2]}") $(it_rec_exists "$rport" "${olds[2]}") $(it_rec_exists "$rport" "${olds[0]}")"

# ---- a pay and a cancel: one call each ---------------------------------------------
# The script reads the record and names its SKU's keys from it: no read of the record
# (rec_read.lua) first, the pay's one EVALSHA of pay.lua (MONITOR over the pay, until a
# marker after it; on c8a0f31 a rec_read.lua then a pay.lua).
sha_of() { sha1sum <"$gen/$1" | cut -c1-40; }
# evalshas CMD...: the EVALSHAs of rec_read, pay and cancel Redis ran over CMD
evalshas() {
    local mon="$dir/monitor.$RANDOM" mpid marker="mark-$RANDOM"
    redis-cli -p "$rport" MONITOR >"$mon" &
    mpid=$!
    monitoring() { grep -q '^OK' "$mon"; }
    wait_until 10 monitoring || { kill "$mpid"; echo "no monitor"; return; }
    "$@" >/dev/null
    rcli ECHO "$marker" >/dev/null
    marked() { grep -q "$marker" "$mon"; }
    wait_until 10 marked
    kill "$mpid"
    wait "$mpid" 2>/dev/null
    echo "$(grep -c "$(sha_of rec_read.lua)" "$mon") $(grep -c "$(sha_of pay.lua)" "$mon") $(grep -c "$(sha_of cancel.lua)" "$mon")"
}
expect "PUT pc: a payment window" "201" "$(curl -s -o /dev/null -w '%{http_code}' \
    -X PUT -d '{"stock":10,"segments":2,"per_user_limit":1,"pay_within_ms":600000}' \
    "$U/skus/pc")"
pays=()
for u in pat quin; do
    pays+=("$(curl -s -X POST -d "{\"user_id\":\"$u\"}" "$U/skus/pc/orders" | jq -r .order_id)")
done
pay_it() { curl -sf -X POST -d '{}' "$U/orders/${pays[0]}/pay"; }
cancel_it() { curl -sf -X POST -d '{"user_id":"quin"}' "$U/orders/${pays[1]}/cancel"; }
expect "a pay: one pay.lua, no read of the record first (rec_read pay cancel)" "0 1 0" \
    "$(evalshas pay_it)"
expect "... paid" "paid" "$(it_rec "$rport" "${pays[0]}" state)"
expect "a cancel: one cancel.lua" "0 0 1" "$(evalshas cancel_it)"
expect "... cancelled" "cancelled" "$(it_rec "$rport" "${pays[1]}" state)"

# ---- a batch's calls -------------------------------------------------------------
T='{b}'
epoch=$(rcli HGET "sk:$T:meta" epoch)
rcli HSET "sk:$T:meta" outbox "$epoch" >/dev/null # the outbox on, as --postgres sets it
# the instance made the SKU; stopped, its own rounds (the sweep, its worker lease) call
# nothing while the test counts
pid=$(cat "$dir/one.pid")
kill -TERM "$pid"
stopped() { ! kill -0 "$pid" 2>/dev/null; }
check "the instance stopped (SIGTERM)" wait_until 10 stopped

# batch N FIRST_ID: batch.lua for N orders of one unit (ids FIRST_ID + i, users u<i>,
# Idempotency-Keys k<id>), segment 0 as read now; its answer's first code
batch() {
    local n=$1 first=$2 i id keys=() args=()
    for ((i = 0; i < n; i++)); do
        id=$((first + i))
        keys+=("$(it_rec_key "$id")")
        args+=(1 "u$id" "$id" "k$id" 0)
    done
    rcli --eval "$gen/batch.lua" "sk:$T:meta" "sk:$T:stock" "sk:$T:sold" "sk:$T:buyers" \
        "sk:$T:orders" "sk:$T:lock:0:fence" "sk:$T:idem" "sk:$T:avail" "${keys[@]}" \
        "sk:$T:back" "sk:$T:due" seckill:due seckill:events , "$epoch" 0 \
        "$(rcli HGET "sk:$T:stock" 0)" 0 b "${args[@]}" | head -1
}
# calls: the commands the last batch called, "name=calls" sorted (EVAL, the call of
# the script itself, and CONFIG and INFO, the test's own, aside)
calls() {
    rcli INFO commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ {
        c = substr($1, 9); if (c != "eval" && c !~ /^config/ && c != "info") print c "=" $3 }' |
        sort | paste -sd' '
}
rcli CONFIG RESETSTAT >/dev/null
expect "a batch of 1: placed" "1" "$(batch 1 7000000001000000000)"
one=$(calls)
rcli CONFIG RESETSTAT >/dev/null
expect "a batch of 32: placed" "1" "$(batch 32 7000000002000000000)"
many=$(calls)
check "... both made calls ($one)" test -n "$one"
expect "the batch of 32 made the calls the batch of 1 made" "$one" "$many"

h=$(it_rec_key 7000000002000000000)
expect "its 32 records are fields of one hash, counted open" "33 32" \
    "$(rcli HLEN "$h") $(rcli HGET "$h" '#open')"
read_rec() { rcli --eval "$gen/rec_read.lua" "$(it_rec_key "$1")" , "$1" "${@:2}" | paste -sd' '; }
expect "... each read as the service reads it (rec_read.lua)" \
    "b u7000000002000000031 1 0 pending" \
    "$(read_rec 7000000002000000031 sku user_id qty segment state)"
expect "... with its pay_by" "1" \
    "$(read_rec 7000000002000000031 pay_by | awk '{ print ($1 > 1700000000000) }')"
expect "the batch's events: one stream entry (two, with the batch of 1)" "2" \
    "$(rcli XLEN seckill:events)"
expect "a replay of the batch: every order answered by its key (-3)" "-3" \
    "$(batch 32 7000000002000000000)"

# The sweep's calls do not grow with the orders it expires either: due.lua by hand for
# the batch of 1's reservation, then for 20 of the 32's (their pay_by made 1 first);
# on 9e3478e an HMGET and an HSET per record
due() { # ID...: due.lua for them, its first answer (the orders it expired)
    local keys=() id
    for id in "$@"; do keys+=("$(it_rec_key "$id")"); done
    rcli --eval "$gen/due.lua" "sk:$T:meta" "sk:$T:stock" "sk:$T:sold" "sk:$T:buyers" \
        "sk:$T:back" "sk:$T:due" "sk:$T:life" "sk:$T:avail" seckill:events seckill:due \
        "${keys[@]}" , seckill:reset b "$@" | head -1
}
twenty=()
for ((i = 0; i < 20; i++)); do twenty+=($((7000000002000000000 + i))); done
for id in 7000000001000000000 "${twenty[@]}"; do it_rec_set "$rport" "$id" pay_by 1 >/dev/null; done
rcli CONFIG RESETSTAT >/dev/null
expect "the sweep of 1: expired" "1" "$(due 7000000001000000000)"
one=$(calls)
rcli CONFIG RESETSTAT >/dev/null
expect "the sweep of 20: expired" "20" "$(due "${twenty[@]}")"
many=$(calls)
expect "... with the calls the sweep of 1 made" "$one" "$many"
expect "... each record expired in its hash" "expired expired" \
    "$(it_rec "$rport" 7000000001000000000 state) $(it_rec "$rport" 7000000002000000019 state)"

# ---- the atomic mode's group commit -----------------------------------------------
start_instance at "$dir" --redis "127.0.0.1:$rport" --lock atomic --threads 1 || exit 1
expect "PUT at: one segment, an atomic instance" "201" "$(curl -s -o /dev/null \
    -w '%{http_code}' -X PUT -d '{"stock":1000000,"segments":1}' "$STARTED_URL/skus/at")"
rcli CONFIG RESETSTAT >/dev/null
wrk -t1 -c32 -d2s -s "$ROOT/loadtest/orders.lua" "$STARTED_URL" -- at 0 1 "a$RANDOM" \
    >"$dir/wrk.out" 2>&1
placed=$(rcli HGET "sk:{at}:meta" orders)
scripts=$(rcli INFO commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_evalsha" { print $3 }')
check "atomic under load: $placed orders placed" test "${placed:-0}" -ge 200
# (the instance's own duties call a few scripts a second too: the rooms' tick, its
# worker lease; the orders' are well under half)
check "... with $scripts scripts called in all, under half the orders (group commits)" \
    test "${scripts:-0}" -lt $((${placed:-0} / 2))

checks_finish
