#!/usr/bin/env bash
# A transfer of units between a Redis Cluster's shards is all or nothing at each step
# (issue 46, point 1): xfer_out.lua and xfer_in.lua read and check every value they
# compute with before their first write. 3 units in 3 segments, one per master; a
# user of the first shard buys its unit, and the next one's order needs a unit
# brought from another shard:
#   - the giving shards' initial share of their segment (sk:{g}:xf:init) is "x": the
#     order is answered 503, nothing of the SKU is written on any master (DUMP), the
#     instance logs the key at warn and counts it (seckill_orders_malformed_total);
#   - repaired, the receiving shard's is "x": the unit leaves the giver (its record
#     says it is on its way) and nothing is written where it goes; 503;
#   - repaired, the next order applies the record, once: placed, the audit consistent.
# Before the fix xfer_out wrote the giver's stock, then failed on the share: the unit
# was gone with no record of where (the audit inconsistent for good); xfer_in marked
# the transfer applied (SADD) and wrote the stock before failing. About 15 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin malformed_xfer redis-server redis-cli curl jq

it_cluster_up --redis-cluster 3 --instances 1 --lock redis -- --log-level warn || exit 1
U=$LB_URL

users=()
for ((n = 0; ${#users[@]} < 3; n++)); do
    (($(it_seg_route "u$n") % 3 == 0)) && users+=("u$n")
done
order() { # USER -> the status code
    curl -s -o /dev/null -w '%{http_code}' -X POST -d "{\"user_id\": \"$1\"}" "$U/skus/xf/orders"
}
mcli() { local m=$1; shift; redis-cli -p "${m##*:}" "$@"; }
# snap [MASTER...]: the SKU's keys and order records on those masters (all: none
# named), each with its DUMP's digest
snap() {
    local m
    for m in "${@:-${seeds[@]}}"; do
        it_key_digests "${m##*:}" 'sk:*:xf:*' 'o:*' | sed "s/^/${m##*:} /"
    done
}
records() { # transfers recorded and not applied, over the masters
    local m k n=0
    for m in "${seeds[@]}"; do
        for k in $(mcli "$m" --scan --pattern 'sk:*:xf:xout'); do
            n=$((n + $(mcli "$m" HLEN "$k")))
        done
    done
    echo "$n"
}
logged() { grep -qE "level=warn event=malformed_record sku=xf key=\"$1\"" "$dir"/c/seckill-1.log; }

expect "PUT xf: 3 units, 3 segments (one per master)" "201" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        -d '{"stock": 3, "segments": 3, "per_user_limit": 1}' "$U/skus/xf")"
expect "${users[0]} (first shard) buys its unit" "201" "$(order "${users[0]}")"

# each master's init hash (a field per segment: its share there, 0 but for the
# shard's own segment); the home shard's is segment 0
home="" givers=()
declare -A init_key=() init_seg=()
for m in "${seeds[@]}"; do
    k=$(mcli "$m" --scan --pattern 'sk:*:xf:init')
    init_key[$m]=$k init_seg[$m]=$(mcli "$m" HGETALL "$k" | paste - - | awk '$2 != 0 { print $1 }')
    if [[ ${init_seg[$m]} == 0 ]]; then home=$m; else givers+=("$m"); fi
done
check "the SKU's init hashes: one on each master, segment 0's at home" \
    test -n "$home" -a "${#givers[@]}" -eq 2

# --- xfer_out: the givers' initial share malformed
for m in "${givers[@]}"; do mcli "$m" HSET "${init_key[$m]}" "${init_seg[$m]}" x >/dev/null; done
before=$(snap)
expect "giving shards' init x: ${users[1]}'s order is answered 503" "503" "$(order "${users[1]}")"
expect "... nothing of the SKU written on any master" "$before" "$(snap)"
check "... the log names the key" logged 'sk:\{[^}]*\}:xf:init [12]'
expect "... no transfer recorded" "0" "$(records)"
for m in "${givers[@]}"; do mcli "$m" HSET "${init_key[$m]}" "${init_seg[$m]}" 1 >/dev/null; done

# --- xfer_in: the receiving shard's
mcli "$home" HSET "${init_key[$home]}" 0 x >/dev/null
before=$(snap "$home")
expect "receiving shard's init x: ${users[1]}'s order is answered 503" "503" \
    "$(order "${users[1]}")"
expect "... nothing written at home" "$before" "$(snap "$home")"
check "... the log names the key" logged 'sk:\{[^}]*\}:xf:init 0'
expect "... the unit is on its way: its record left at the giver" "1" "$(records)"
mcli "$home" HSET "${init_key[$home]}" 0 1 >/dev/null

# --- repaired: the record applied once, the order placed
expect "repaired: ${users[1]}'s order is placed" "201" "$(order "${users[1]}")"
expect "... no transfer left recorded" "0" "$(records)"
expect "audit: orders, sold, remaining, consistent" "2 2 1 true" \
    "$(curl -s "$U/skus/xf/audit" | jq -r '"\(.orders) \(.sold) \(.remaining) \(.consistent)"')"
expect "counted in seckill_orders_malformed_total" "2" \
    "$(curl -s "$U/metrics" | awk '$1 == "seckill_orders_malformed_total" { print $2 }')"

checks_summary
