#!/usr/bin/env bash
# Integration: on a Redis Cluster of 3 masters, orders whose users all live in one
# shard (their home segments are that shard's) buy the whole SKU: units move to that
# shard from the others, and no user gets two with a per-user limit of 1, also when
# the process moving units is killed (-9, through the SECKILL_TEST_CRASH test hook)
# between the steps of a transfer.
#
#   - 3 segments of 10 units, one per master; 40 users homed in the first shard:
#     exactly 30 orders are placed, every other one is answered 409, and the users'
#     second orders too (no user gets 2);
#   - an instance that dies right after taking units from a shard (transfer-out):
#     the units are in flight, the audit counts them (consistent, 0 sold of them)
#     and GET /skus shows them as remaining; the next order through another
#     instance brings them where they were going and is placed;
#   - an instance that dies after the units arrived but before it deleted the
#     transfer's record (transfer-in): the units are there, the audit consistent,
#     and the next order that needs units deletes the record without counting them
#     twice;
#   - at the end no transfer is left recorded, the audit is consistent, nothing is
#     left, and every 201's order is found;
#   - 4 units in 3 segments (2, 1, 1): an order of 5 by a user of the first shard is
#     refused and moves nothing; one of 4 gets its shard's 2 and one from each other
#     shard, placed whole;
#   - all of it on the instances' event loops: no batch thread (sk-batch).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin rspill redis-server redis-cli curl jq

lock=${RSPILL_LOCK:-redis} # it_rspill_atomic.sh: the same with the atomic mode
it_cluster_up --redis-cluster 3 --instances 3 --lock "$lock" -- --log-level warn || exit 1

# crash_instance NAME STEP: an instance that kills itself (-9) right after STEP of
# its first transfer; its URL in STARTED_URL
crash_instance() {
    SECKILL_TEST_CRASH=$2 start_instance --ready-secs 20 "$1" "$dir" \
        --redis "$REDIS_CLUSTER_SEEDS" --lock "$lock" --threads 1 --log-level warn
}
crash_instance crash-out transfer-out && out_url=$STARTED_URL || exit 1
crash_instance crash-in transfer-in && in_url=$STARTED_URL || exit 1

users=()
for ((n = 0; ${#users[@]} < 40; n++)); do
    (($(it_seg_route "u$n") % 3 == 0)) && users+=("u$n")
done

order() { # URL USER -> the status code (000: no answer); the 201's id in $dir/ids
    local body code
    body=$(curl -s -w '\n%{http_code}' -X POST -d "{\"user_id\": \"$2\"}" "$1/skus/sp/orders")
    code=${body##*$'\n'}
    [[ $code == 201 ]] && jq -r .order_id <<<"${body%$'\n'*}" >>"$dir/ids"
    echo "$code"
}
records() { # transfers recorded and not deleted, over the masters
    local m k n=0
    for m in "${seeds[@]}"; do
        for k in $(redis-cli -p "${m##*:}" --scan --pattern 'sk:{*}:sp:xout'); do
            n=$((n + $(redis-cli -p "${m##*:}" hlen "$k")))
        done
    done
    echo "$n"
}
audit() { curl -s "$LB_URL/skus/sp/audit" | jq -r "$1"; }

code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
    -d '{"stock": 30, "segments": 3, "per_user_limit": 1}' "$LB_URL/skus/sp")
expect "PUT sp: 30 units, 3 segments (one per master)" "201" "$code"
: >"$dir/ids"
placed=0
for u in "${users[@]:0:10}"; do [[ $(order "$LB_URL" "$u") == 201 ]] && placed=$((placed + 1)); done
expect "10 users of the first shard: placed from its own 10 units" "10" "$placed"

# killed after taking units from another shard
expect "an order through the instance killed after transfer-out: no answer" "000" \
    "$(order "$out_url" "${users[10]}")"
wait_until 10 bash -c "! kill -0 $(cat "$dir/crash-out.pid") 2>/dev/null"
check "... the instance is dead" bash -c "! kill -0 $(cat "$dir/crash-out.pid") 2>/dev/null"
expect "... and its transfer is recorded, in flight" "1" "$(records)"
expect "audit with units in flight: consistent, sold, remaining" "true 10 20" \
    "$(audit '"\(.consistent) \(.sold) \(.remaining)"')"
expect "GET /skus/sp counts them as remaining" "20" \
    "$(curl -s "$LB_URL/skus/sp" | jq .remaining)"
expect "the next order, through another instance: placed" "201" \
    "$(order "$LB_URL" "${users[10]}")"
expect "... the transfer finished" "0" "$(records)"

# killed after the units arrived, before its record was deleted: orders through
# that instance until its shard is short again and it moves units
next=11 placed=11 refused=0 crashed=""
while ((next < 40)); do
    code=$(order "$in_url" "${users[next]}")
    [[ $code == 000 ]] && { crashed=${users[next]}; break; }
    [[ $code == 201 ]] && placed=$((placed + 1))
    [[ $code == 409 ]] && refused=$((refused + 1))
    next=$((next + 1))
done
check "an order through the instance killed after transfer-in: no answer" test -n "$crashed"
wait_until 10 bash -c "! kill -0 $(cat "$dir/crash-in.pid") 2>/dev/null"
expect "... its record is left" "1" "$(records)"
expect "audit: consistent (units arrived, not counted twice)" "true" "$(audit .consistent)"
expect "the next order: placed" "201" "$(order "$LB_URL" "$crashed")"
placed=$((placed + 1))

# the rest of the users, then everyone once more
for u in "${users[@]:next+1}"; do
    case $(order "$LB_URL" "$u") in 201) placed=$((placed + 1)) ;; 409) refused=$((refused + 1)) ;; esac
done
expect "40 users: placed, refused (30 units in all)" "30 10" "$placed $refused"
again=0
for u in "${users[@]}"; do [[ $(order "$LB_URL" "$u") == 201 ]] && again=$((again + 1)); done
expect "every user's second order: none placed" "0" "$again"
expect "audit: orders, sold, remaining, limit breaches, consistent" "30 30 0 0 true" \
    "$(audit '"\(.orders) \(.sold) \(.remaining) \(.limit_breaches) \(.consistent)"')"
expect "no transfer left recorded" "0" "$(records)"
found=0
while read -r id; do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$LB_URL/orders/$id") == 200 ]] &&
        found=$((found + 1))
done <"$dir/ids"
expect "every 201's order found" "30" "$found"

# ---- orders of several units: drawn from the home shard, with units brought from one
# shard or from two first, all or nothing ------------------------------------------------
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
    -d '{"stock": 4, "segments": 3, "per_user_limit": 5}' "$LB_URL/skus/mq")
expect "PUT mq: 4 units, 3 segments (2, 1, 1)" "201" "$code"
mq() { # USER QTY -> the status code
    curl -s -o /dev/null -w '%{http_code}' -X POST -d "{\"user_id\": \"$1\", \"qty\": $2}" \
        "$LB_URL/skus/mq/orders"
}
expect "5 units for a user of the first shard: refused, nothing moved" "409" "$(mq "${users[0]}" 5)"
expect "... 4: the 2 of its shard and 1 from each other shard" "201" "$(mq "${users[1]}" 4)"
expect "audit of mq: orders, sold, remaining, consistent" "1 4 0 true" \
    "$(curl -s "$LB_URL/skus/mq/audit" | jq -r '"\(.orders) \(.sold) \(.remaining) \(.consistent)"')"

# every transfer ran on the instances' event loops: no batch thread
batch_threads=0
for f in "$dir"/c/seckill-*.pid; do
    p=$(cat "$f")
    batch_threads=$((batch_threads + $(grep -lx sk-batch /proc/"$p"/task/*/comm 2>/dev/null |
        wc -l)))
done
expect "batch threads (sk-batch), over the instances" 0 "$batch_threads"

checks_summary
