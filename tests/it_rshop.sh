#!/usr/bin/env bash
# Many SKUs sold at once on a Redis Cluster (issue 46: a shop, not a sale): every order
# is answered 201 or sold out, none 503. Each instance keeps what it knows of a SKU's
# shards in a cache of one slot per hash of its name; SKUs sold side by side take each
# other's slots all the time. A SKU of 3 units over 2 segments on 3 masters leaves a
# shard empty, so its orders often bring units from another shard (a refill), whose
# steps looked the SKU up in the cache again: a SKU whose slot another had taken
# meanwhile answered 503 unavailable (8 of 9,000 orders of 3,000 SKUs in the soak). Here
# the SKUs' names are chosen six by six to share a slot (FNV-1a of the name modulo
# 4096, which also collides modulo any smaller power of two: more than a set of the
# cache holds), so they take the entries from each other as they sell side by side:
# 204 SKUs, 3 buyers each, 8 orders at once, the orders of a group next to each
# other, through 2 instances. About 20 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin rshop redis-server redis-cli curl jq python3

it_cluster_up --redis-cluster 3 --instances 2 --lb none -- --log-level warn ||
    { echo "the cluster did not start"; exit 1; }
read -r -a urls <<<"$INSTANCE_URLS"

# 204 names, six by six in a slot of the cache
python3 - >"$dir/skus" <<'XEOF'
def fnv(s):
    h = 2166136261
    for c in s.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h
by = {}
i = 0
groups = []
while len(groups) < 34:
    name = "c%d" % i
    i += 1
    slot = fnv(name) % 4096
    by.setdefault(slot, []).append(name)
    if len(by[slot]) == 6:
        groups.append(list(by[slot]))
for g in groups:
    print("\n".join(g))
XEOF
expect "204 SKU names, six in each of 34 slots of the cache" "204" "$(wc -l <"$dir/skus")"

put() { # URL SKU
    curl -s -o /dev/null -w '%{http_code}\n' -X PUT \
        -d '{"stock":3,"segments":2,"per_user_limit":1}' "$1/skus/$2"
}
export -f put
puts=$(xargs -P 4 -I{} bash -c 'put "$@"' _ "${urls[0]}" {} <"$dir/skus" | sort | uniq -c |
    awk '{ print $2 "x" $1 }')
expect "every SKU made" "201x204" "$puts"

# 3 buyers a SKU, spread over both instances, 8 orders at once
while read -r s; do
    for b in 1 2 3; do echo "${urls[$((b % 2))]} $s b$b"; done
done <"$dir/skus" >"$dir/orders"
# An order is a sh and a curl (its answer written in one line, whole, among the
# others'); one sed then reads every status and error.
# shellcheck disable=SC2016 # the sh's own variables
answers=$(xargs -P 8 -L 1 sh -c 'a=$(curl -s -w " %{http_code}" -X POST \
    -d "{\"user_id\":\"$3\",\"qty\":1}" "$1/skus/$2/orders"); echo "$a"' _ <"$dir/orders" |
    sed -E 's/.*"error":"([a-z_]+)".* ([0-9]+)$/\2 \1/; t; s/.* ([0-9]+)$/\1/' | sort | uniq -c |
    awk '{ printf "%s%s:%s ", $2, ($3 == "" ? "" : " " $3), $1 }')
expect "612 orders of 612 units: every one placed, none 503" "201:612 " "$answers"
# units sold over every SKU: one curl for all of them, one jq
sold=$(sed "s#^#${urls[0]}/skus/#" "$dir/skus" | xargs curl -s | jq -s 'map(.initial - .remaining) | add')
expect "... and the SKUs say so: 612 units sold" "612" "$sold"

checks_finish
