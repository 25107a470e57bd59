#!/usr/bin/env bash
# Integration: a segment's fencing mark across lock modes and a pg lock table made anew
# (issue 46, point 5; SPEC invariant 5). One Redis, PostgreSQL, ZooKeeper; one SKU of one
# segment (every order takes the same lock, whose mark is sk:{sw}:lock:0:fence); fencing
# on. The instances run side by side, each in one lock mode (their locks are of different
# services and exclude nothing between them: the mark alone keeps their writes apart).
#
#   - pg; seckill_locks dropped mid-sale and made anew (its versions start again): the
#     next orders are placed (on main refused until the versions passed the old mark);
#   - then redis, pg, zk, pg, setnx: each mode's orders are placed after the one before
#     it sold, none refused busy (on main a data Redis token "<n>:<owner>" compared
#     greater than any pg version or czxid: every pg and zk hold was refused, forever);
#   - a pg holder working (3 s of --work-us) when a zk holder takes the segment's mark
#     and sells: the pg holder's commit is refused (503 busy, fenced_off_commits), its
#     stale read writes nothing; its next hold sells again;
#   - the mark by hand (fence_read.lua, fence_take.lua): a token that held it and lost
#     it, to its own namespace or another, is refused when it comes again;
#   - the audit: every 201 is an order, nothing oversold, consistent;
#   - a reset (PUT ?reset=true) deletes the marks of the SKU's segments, and the next
#     orders make new ones.
# shellcheck disable=SC2317 # functions run from wait_until look unreachable
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin fence_switch redis-server redis-cli curl jq psql pg_isready initdb

start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
start_pg "$dir" || exit 1
pgurl=$(pg_url "$STARTED_PORT")
start_zk "$dir" 1 || exit 1
zk=$STARTED_NODES

mark() { redis-cli -p "$rport" get 'sk:{sw}:lock:0:fence'; }
instance() { # NAME MODE [FLAGS...]: an instance in lock mode MODE (its URL: STARTED_URL)
    local name=$1 mode=$2
    shift 2
    start_instance "$name" "$dir" --redis "127.0.0.1:$rport" --postgres "$pgurl" \
        --zk "$zk" --lock "$mode" --threads 1 --batch 1 --wait-ms 1000 \
        --log-level warn "$@" || exit 1
}
placed=0
users=0
sell() { # URL N WHAT: N orders of fresh users, one after the other; all must be 201
    local url=$1 n=$2 tag=$3 i code codes=""
    for ((i = 1; i <= n; i++)); do
        users=$((users + 1))
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST \
            "$url/skus/sw/orders" -d "{\"user_id\":\"u$users\"}")
        codes+="$code "
        [[ $code == 201 ]] && placed=$((placed + 1))
    done
    expect "$tag: $n orders placed" "$(printf '201 %.0s' $(seq "$n"))" "$codes"
}
fenced_off() { curl -s "$1/stats" | jq -r '.fenced_off_commits'; }

instance p pg
p_url=$STARTED_URL
curl -s -o /dev/null -X PUT "$p_url/skus/sw" -d '{"stock": 1000, "segments": 1}'
sell "$p_url" 5 "pg"
check "the mark is a pg version ($(mark))" grep -qE '^[0-9]+@pg$' <<<"$(mark)"

# made anew as a restore of its schema would make it (the first acquire that finds no
# table at all answers an error and makes it: lock/lock_pg.c, not this test's point)
psql -X -q "$pgurl" -c 'drop table seckill_locks' -c 'create table seckill_locks
    (key text primary key, owner text, expires_at timestamptz, version bigint not null default 0)' \
    >/dev/null
sell "$p_url" 3 "pg, its lock table made anew"

instance r redis
r_url=$STARTED_URL
sell "$r_url" 5 "redis after pg"
check "the mark is a data Redis token, with pg's high water ($(mark))" \
    grep -qE '^[0-9]+:[0-9a-f]{32}\|[0-9]+@pg$' <<<"$(mark)"
sell "$p_url" 5 "pg after redis"

instance z zk
z_url=$STARTED_URL
sell "$z_url" 5 "zk after pg"
check "the mark is a czxid, with pg's high water ($(mark))" grep -qE '^[0-9]+\|[0-9]+@pg$' <<<"$(mark)"
sell "$p_url" 5 "pg after zk"
instance s setnx
s_url=$STARTED_URL
sell "$s_url" 3 "setnx after pg"

# A pg holder at work when a zk holder takes the mark: its commit is refused.
instance slow pg --work-us 3000000
slow_url=$STARTED_URL
before=$(fenced_off "$slow_url")
curl -s -o "$dir/slow.body" -w '%{http_code}' --max-time 20 -X POST \
    "$slow_url/skus/sw/orders" -d '{"user_id":"slow-1"}' >"$dir/slow.code" &
slow=$!
holds() { # its grant came and it has read: the mark is its version (a pg one, first)
    grep -qE '^[0-9]+@pg' <<<"$(mark)"
}
# (a grant and a read: milliseconds here; 10 s for a loaded machine's first pg statements)
check "the slow pg holder holds and has read" wait_until 10 holds
# The zk order takes tens of ms here; the holder works 3 s after its read: a loaded
# machine has about 100 times what the zk order needs.
sell "$z_url" 1 "zk while a pg holder works"
wait "$slow"
expect "the pg holder's commit after the zk holder's: refused (503 busy)" "503 busy" \
    "$(cat "$dir/slow.code") $(jq -r .error "$dir/slow.body")"
expect "... counted as fenced off" "$((before + 1))" "$(fenced_off "$slow_url")"
sell "$p_url" 2 "pg again after that"

# ---- the mark by hand: a token that lost it never takes it back ------------------------
# fence_read.lua is the first step under a lock whose tokens come from outside the data
# Redis (and xfer_out.lua / xfer_in.lua run the same check later in a hold); fence_take.lua
# a setnx or redlock grant's. A token that held the mark and lost it, to any namespace,
# must be refused ({-2}) when it comes again: its holder's read is older than the write
# that took the mark from it.
gen=${SECKILL_BUILD:-build}/gen
[[ $gen == /* ]] || gen=$ROOT/$gen
redis-cli -p "$rport" hset h:stock 0 7 >/dev/null
read_as() { redis-cli -p "$rport" --eval "$gen/inventory/lua/fence_read.lua" h:fence h:stock h:back , "$1" 0 | tr '\n' ' ' | sed 's/ $//'; }
take_as() { redis-cli -p "$rport" --eval "$gen/lock/lua/fence_take.lua" h:fence , "$1" >/dev/null; }
steps=""
for s in take:aa read:5@pg read:4294967297 read:5@pg read:6@pg read:4294967297 \
    read:4294967300 take:bb read:6@pg read:4294967300 read:7@pg read:7@pg read:4294967301; do
    if [[ $s == take:* ]]; then take_as "${s#take:}"; steps+="take "; else steps+="$(read_as "${s#read:}"), "; fi
done
expect "tokens of two namespaces each judged against their own; one that lost the mark refused" \
    "take 7 0, 7 0, -2, 7 0, -2, 7 0, take -2, -2, 7 0, 7 0, 7 0, " "$steps"
expect "the mark: the holder's token, then the other namespace's high water" \
    "4294967301|7@pg" "$(redis-cli -p "$rport" get h:fence)"

audit=$(curl -s "$p_url/skus/sw/audit")
expect "the audit: every 201 an order, nothing oversold, consistent" \
    "$placed $placed 0 true" "$(jq -r '"\(.orders) \(.sold) \(.oversold) \(.consistent)"' <<<"$audit")"

# ---- the marks go with the SKU's epoch ---------------------------------------------------
# a reset to 2 segments: the mark of segment 0 (which it had and has) goes
redis-cli -p "$rport" set 'sk:{sw}:lock:1:fence' '9@pg' >/dev/null # one of a segment it will have
expect "a reset" 200 "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$p_url/skus/sw?reset=true" \
    -d '{"stock": 10, "segments": 2}')"
expect "the segments' marks went with the old epoch" "0" \
    "$(redis-cli -p "$rport" exists 'sk:{sw}:lock:0:fence' 'sk:{sw}:lock:1:fence')"
placed=0
sell "$z_url" 2 "zk after the reset"
check "a new mark for the new epoch ($(redis-cli -p "$rport" mget 'sk:{sw}:lock:0:fence' 'sk:{sw}:lock:1:fence' | tr '\n' ' '))" \
    test "$(redis-cli -p "$rport" exists 'sk:{sw}:lock:0:fence' 'sk:{sw}:lock:1:fence')" -ge 1

checks_finish
