#!/usr/bin/env bash
# The alerting rules of deploy/alerts.yml:
#   - promtool check rules: they parse;
#   - every seckill_* metric their expressions name is one a real instance exports (an
#     instance with --postgres, after a SKU and an order, so that the per-SKU and sink
#     families are there): an alert on a name that does not exist never fires;
#   - promtool test rules deploy/alerts.test.yml: each alert fires on the series it is
#     about (oversold above 0, durability lost, Redis evicting, sink lag and sink down,
#     fenced commits rising, leases lost, readiness flapping and not ready, answers
#     undelivered) and stays quiet on a healthy one.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin alerts promtool redis-server curl
it_plain_only "the alerting rules"

check "promtool check rules deploy/alerts.yml" promtool check rules "$ROOT/deploy/alerts.yml"

start_redis redis "$dir" always || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
start_pg "$dir" || { echo "postgres did not start"; exit 1; }
start_instance --ready-secs 20 seckill "$dir" --redis "127.0.0.1:$rport" --threads 2 \
    --postgres "$(pg_url "$STARTED_PORT")" || { echo "instance not ready"; exit 1; }
U=$STARTED_URL
curl -s -o /dev/null -X PUT "$U/skus/tv" -d '{"stock":3,"segments":1}'
curl -s -o /dev/null -X POST "$U/skus/tv/orders" -d '{"user_id":"ann"}'
curl -s "$U/metrics" | sed -n 's/^\(seckill_[a-z_]*\).*/\1/p' | sed 's/_\(bucket\|sum\|count\)$//' |
    sort -u >"$dir/exported"
grep -o 'seckill_[a-z_]*' "$ROOT/deploy/alerts.yml" | sort -u >"$dir/used"
check "the rules name metrics ($(wc -l <"$dir/used"))" test -s "$dir/used"
expect "every metric the rules name is exported by an instance" "" \
    "$(comm -23 "$dir/used" "$dir/exported" | tr '\n' ' ')"

(cd "$ROOT/deploy" && promtool test rules alerts.test.yml) >"$dir/promtool.out" 2>&1
rc=$?
cat "$dir/promtool.out"
expect "promtool test rules deploy/alerts.test.yml" 0 "$rc"
# A test that cannot fail is none: each alert must be tested firing.
for a in $(sed -n 's/^ *- alert: //p' "$ROOT/deploy/alerts.yml"); do
    check "$a has a test where it fires" \
        awk -v a="$a" '$0 ~ "alertname: " a "$" { want = 1; next }
                       want && /exp_alerts: \[\]/ { want = 0 }
                       want && /exp_labels/ { found = 1 } END { exit !found }' \
        "$ROOT/deploy/alerts.test.yml"
done

checks_summary
