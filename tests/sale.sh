# sale.sh — sourced by the integration tests that drive one SKU's sale through a
# cluster's balancer and assert it was exact (it_redlock_chaos.sh, it_zk.sh), after
# tests/lib.sh (it_begin: $dir, where wrk's pid file and log live). They set LB_URL,
# INSTANCE_URLS (from the cluster's cluster.env), SKU and STOCK.
# shellcheck shell=bash disable=SC2154 # dir: the test's (tests/lib.sh)

# jfield JSON FILTER: a field of a JSON text, empty when missing or not JSON.
jfield() { jq -r "$2 | if . == null then empty else . end" <<<"$1" 2>/dev/null || true; }
sku_json() { curl -s --max-time 5 "$LB_URL/skus/$SKU" || true; }
sold_now() { jfield "$(sku_json)" .sold; }
sold_at_least() { # N
    local v
    v=$(sold_now)
    [[ $v =~ ^[0-9]+$ ]] && (($1 <= v))
}
wrk_done() { ! proc_alive wrk "$dir"; }
instances_idle() {
    local u n
    for u in $INSTANCE_URLS; do
        n=$(jfield "$(curl -s --max-time 2 "$u/stats")" .inflight)
        [[ $n =~ ^[0-9]+$ ]] && ((n <= 1)) || return 1
    done
}

# sale_checks LABEL: the exact-sale assertions over wrk's counts ($dir/wrk.log, kept
# as wrk-LABEL.log), the SKU and its audit, after printing them.
sale_checks() {
    local label=$1 wrk_json skuj audit c201 sold u
    wrk_json=$(grep -m1 '^{"tool":"wrk-orders"' "$dir/wrk.log" 2>/dev/null || true)
    cp "$dir/wrk.log" "$dir/wrk-$label.log" 2>/dev/null || true
    skuj=$(sku_json)
    audit=$(curl -s --max-time 30 "$LB_URL/skus/$SKU/audit" || true)
    echo "  wrk: $(jq -c '{requests, status_201, sold_out, busy, unavailable, other, other_codes, socket_errors}' <<<"$wrk_json" 2>/dev/null || echo "${wrk_json:-none}")"
    echo "  sku: $(jq -c 'del(.segments)' <<<"$skuj" 2>/dev/null || echo "$skuj")"
    echo "  audit: $audit"
    for u in $INSTANCE_URLS; do
        echo "  $u lock: $(curl -s --max-time 2 "$u/stats" | jq -c '.lock | {acquisitions, contended, wait_timeouts, errors, releases_not_held, leases_lost}' 2>/dev/null)"
    done
    c201=$(jfield "$wrk_json" .status_201)
    sold=$(jfield "$skuj" .sold)
    check "$label: wrk reported its counts" has_prefix "$wrk_json" '{"tool":"wrk-orders"'
    check "$label: sold out (remaining 0, sold_out answers > 0)" \
        eq "$(jfield "$skuj" .remaining)/$(jfield "$wrk_json" '.sold_out > 0')" 0/true
    check "$label: client-counted 201s == stock ($c201 == $STOCK)" eq "$c201" "$STOCK"
    check "$label: server sold == stock ($sold == $STOCK), nothing oversold" \
        eq "$sold/$(jfield "$skuj" .oversold)" "$STOCK/0"
    check "$label: audit: sold == stock, orders == 201s" \
        eq "$(jfield "$audit" .sold)/$(jfield "$audit" .orders)" "$STOCK/$c201"
    check "$label: audit: consistent, oversold 0" \
        eq "$(jfield "$audit" .consistent)/$(jfield "$audit" .oversold)" true/0
    check "$label: audit: no limit breach, no duplicate order id" \
        eq "$(jfield "$audit" .limit_breaches)/$(jfield "$audit" .duplicate_order_ids)" 0/0
    check "$label: no answer other than 201 / 409 / 503, no socket error" \
        eq "$(jfield "$wrk_json" '.other + .other_409 + .other_503 + .outcome_unknown + ([.socket_errors[]] | add)')" 0
}
