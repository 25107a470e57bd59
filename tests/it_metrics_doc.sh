#!/usr/bin/env bash
# docs/operations.md's metrics table and GET /metrics agree (issue 51, point 4): every
# family the table lists (its `{a,b}` alternatives expanded, its trailing `{labels}`
# the label names) is in /metrics of a running instance, with exactly those labels
# (a histogram's `le` aside), and every family /metrics has is in the table.
# The instance runs as a shop does: --lock redis (the lock's families), --postgres (the
# sink's), after a sale with reservations paid, cancelled and expired (the counters
# that stay at 0 until then are exported all the same; the sale makes their samples
# more than zeros).
# Fails on bec5c54: seckill_orders_{paid,cancelled,expired}_total and
# seckill_units_returned_total were in the table and not in /metrics, and
# seckill_sku_stock_read_ok had a {sku} label in the table and none in /metrics.
# About 10 s; timing slack: the expiry is waited for, at most 20 s (the sweep ends an
# order within ~1 s of its pay_by).
# shellcheck disable=SC2317 # functions run from wait_until look unreachable
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin metrics_doc redis-server redis-cli curl jq psql pg_isready initdb

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
mkdir -p "$dir/pg"
start_pg "$dir/pg" || exit 1
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis \
    --postgres "$(pg_url "$(cat "$dir/pg/pg.port")")" --log-level warn || exit 1
U=$STARTED_URL

# ---- a sale: placed, paid, cancelled, expired -------------------------------------
post() { curl -s -X POST "$U/skus/$1/orders" -d "{\"user_id\":\"$2\"}" | jq -r '.order_id // empty'; }
curl -s -o /dev/null -X PUT "$U/skus/m" -d '{"stock":10,"segments":2,"pay_within_ms":1000}'
p=$(post m pa) c=$(post m ca) e=$(post m ea)
expect "three reservations" "3" "$(printf '%s\n' "$p" "$c" "$e" | grep -c .)"
expect "one paid, one cancelled" "200 200" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{"payment_id":"p-1"}' "$U/orders/$p/pay") $(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{"user_id":"ca"}' "$U/orders/$c/cancel")"
expired() { [[ $(curl -s "$U/orders/$e" | jq -r .state) == expired ]]; }
check "the third expires" wait_until 20 expired
# a waiting room too (its families have a series a room)
expect "a SKU with a waiting room" "201" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$U/skus/r" -d '{"stock":5,"room":{"rate_per_s":10,"max_active":5,"pass_ttl_ms":60000}}')"
roomed() { curl -s "$U/metrics" | grep -q '^seckill_room_waiting{sku="r"}'; }
check "... its figures in /metrics" wait_until 10 roomed

curl -s "$U/metrics" >"$dir/metrics"
metric() { awk -v m="$1" '$1 == m { print $2 }' "$dir/metrics"; }
expect "the sale's counters" "1 1 1 2" \
    "$(metric seckill_orders_paid_total) $(metric seckill_orders_cancelled_total) $(metric seckill_orders_expired_total) $(metric seckill_units_returned_total)"

# ---- the table ---------------------------------------------------------------------
# "family labels" per line (labels comma-separated, "-" for none), from the table's
# first column: the rows under "## Metrics" whose first cell names metrics in backquotes
# shellcheck disable=SC2016 # backquotes of Markdown, not of the shell
documented() {
    awk '/^## Metrics/ { on = 1; next } on && /^## / { on = 0 } on && /^\| `/' \
        "$ROOT/docs/operations.md" | cut -d'|' -f2 | grep -o '`[^`]*`' | tr -d '`' |
        while read -r token; do
            local labels=- name=$token
            if [[ $name == *\} ]]; then # a trailing {...}: the labels
                labels=${name##*\{}
                labels=${labels%\}}
                name=${name%\{*}
            fi
            [[ $name =~ ^[a-z_{},]+$ ]] || { echo "BAD $token"; continue; }
            # the other braces are alternatives: bash expands them (checked above)
            eval "printf '%s\n' $name" | while read -r one; do echo "$one $labels"; done
        done | sort -u
}
# the same from /metrics: each family (# TYPE) with the label names its samples carry
# (le aside), one line per distinct set
exported() {
    awk '/^# TYPE / { print "TYPE", $3 } /^[a-z]/ { print "S", $1 }' "$dir/metrics" |
        awk '$1 == "TYPE" { fam[$2] = 1; next }
            {
                s = $2; name = s; labels = "-"
                i = index(s, "{")
                if (i) {
                    name = substr(s, 1, i - 1); body = substr(s, i + 1, length(s) - i - 1)
                    n = split(body, kv, /",/); labels = ""
                    for (j = 1; j <= n; j++) {
                        split(kv[j], p, "="); if (p[1] == "le") continue
                        labels = labels (labels == "" ? "" : ",") p[1]
                    }
                    if (labels == "") labels = "-"
                }
                base = name
                if (!(base in fam)) sub(/_(bucket|sum|count)$/, "", base)
                print base, labels
            }' | sort -u
}
documented >"$dir/documented"
exported >"$dir/exported"
check "the table's names parse" eq "$(grep -c '^BAD' "$dir/documented")" 0
check "the table lists families (more than 40)" test "$(wc -l <"$dir/documented")" -gt 40
missing=$(comm -23 "$dir/documented" "$dir/exported")
extra=$(comm -13 "$dir/documented" "$dir/exported")
check "every family and label set the table lists is in /metrics${missing:+: missing $(paste -sd' ' <<<"$missing")}" \
    test -z "$missing"
check "every family and label set /metrics has is in the table${extra:+: not listed $(paste -sd' ' <<<"$extra")}" \
    test -z "$extra"
checks_finish
