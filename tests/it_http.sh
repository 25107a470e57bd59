#!/usr/bin/env bash
# Integration: every route and status of the contract's API table, end to end
# through one real instance and a real redis-server; a failed request changes
# no state; a Redis outage answers 503 and heals; SIGTERM drains and exits 0.
set -uo pipefail
source "$(dirname "$0")/../scripts/lib.sh"

dir=$(mktemp -d /tmp/seckill-it-http.XXXXXX)
cleanup() {
    proc_stop seckill "$dir" 5
    proc_stop redis "$dir" 5
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

bin=$(seckill_bin)
rport=$(free_port) || exit 1
hport=$(free_port) || exit 1
mkdir -p "$dir/redis"
proc_start redis "$dir" redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir/redis" \
    --save "" --appendonly yes --appendfsync always
wait_until 10 redis_ping "$rport" || { echo "redis did not start"; exit 1; }
proc_start seckill "$dir" "$bin" --listen "127.0.0.1:$hport" --redis "127.0.0.1:$rport" \
    --segments 4 --admin-token s3cret --lock redis
base="http://127.0.0.1:$hport"
wait_until 10 http_ok "$base/readyz" || { echo "seckill not ready"; cat "$dir/seckill.log"; exit 1; }

pass=0
fail=0
check() { # NAME EXPECTED ACTUAL
    if [[ $2 == "$3" ]]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL $1: expected '$2', got '$3'"
    fi
}

# req METHOD PATH [BODY] [curl args...]: sets $status and $body
req() {
    local method=$1 path=$2 data=${3:-}
    shift 3 2>/dev/null || shift $#
    local out
    if [[ -n $data ]]; then
        out=$(curl -s -X "$method" -w '\n%{http_code}' --max-time 10 "$@" \
            -H 'Content-Type: application/json' --data-binary "$data" "$base$path")
    else
        out=$(curl -s -X "$method" -w '\n%{http_code}' --max-time 10 "$@" "$base$path")
    fi
    status=${out##*$'\n'}
    body=${out%$'\n'*}
}
err() { jq -r '.error + "/" + (.detail | type)' <<<"$body" 2>/dev/null; }
field() { jq -r "$1" <<<"$body" 2>/dev/null; }
sold() { curl -s "$base/skus/$1" | jq -r '.sold'; }

auth=(-H 'Authorization: Bearer s3cret')

# --- admin
req PUT /skus/tv '{"stock":3,"per_user_limit":1}'
check "PUT without token" "401 unauthorized/string" "$status $(err)"
req PUT /skus/tv '{"stock":3,"per_user_limit":1}' -H 'Authorization: Bearer wrong'
check "PUT with a wrong token" "401 unauthorized/string" "$status $(err)"
req GET /skus/tv
check "a refused PUT created nothing" "404 not_found/string" "$status $(err)"
req PUT /skus/tv '{"stock":3,"segments":2,"per_user_limit":1}' "${auth[@]}"
check "PUT creates" "201" "$status"
req PUT /skus/tv '{"stock":3,"segments":1,"per_user_limit":2}' "${auth[@]}"
check "PUT resets" "200" "$status"
req PUT /skus/tv '{"stock":-5}' "${auth[@]}"
check "PUT negative stock" "400 bad_request/string" "$status $(err)"
req PUT /skus/tv '{"stock":3,"segments":5000}' "${auth[@]}"
check "PUT too many segments" "400 bad_request/string" "$status $(err)"
req GET /skus/tv
check "bad PUTs changed nothing" "200 2 1 3" "$status $(field .per_user_limit) $(field '.segments|length') $(field .remaining)"
req PUT '/skus/bad$sku' '{"stock":1}' "${auth[@]}"
check "PUT invalid sku name" "400 bad_request/string" "$status $(err)"

# --- orders: bad input changes nothing
req POST /skus/tv/orders '{"user_id": "ann"'
check "truncated JSON" "400 bad_request/string" "$status $(err)"
req POST /skus/tv/orders 'not json at all'
check "not JSON" "400 bad_request/string" "$status $(err)"
req POST /skus/tv/orders '{"qty":1}'
check "no user_id" "400 bad_request/string" "$status $(err)"
req POST /skus/tv/orders '{"user_id":"a b"}'
check "user_id charset" "400 bad_request/string" "$status $(err)"
req POST /skus/tv/orders '{"user_id":"ann","qty":0}'
check "qty 0" "400 bad_request/string" "$status $(err)"
req POST /skus/tv/orders '{"user_id":"ann","qty":3}'
check "qty over the limit" "400 bad_request/string" "$status $(err)"
req POST /skus/tv/orders '{"user_id":"ann","qty":"1"}'
check "qty as a string" "400 bad_request/string" "$status $(err)"
big=$(printf '{"user_id":"ann","pad":"%05000d"}' 0)
req POST /skus/tv/orders "$big"
check "body over 4 KiB" "413 too_large/string" "$status $(err)"
req POST /skus/tv/orders '{"user_id":"ann"}' -H 'Idempotency-Key: bad key!'
check "bad Idempotency-Key" "400 bad_request/string" "$status $(err)"
req POST /skus/nosuch/orders '{"user_id":"ann"}'
check "unknown SKU" "404 not_found/string" "$status $(err)"
check "nothing was sold by bad requests" "0" "$(sold tv)"

# --- orders that work
req POST /skus/tv/orders '{"user_id":"ann","qty":2}' -H 'Idempotency-Key: ann-1'
check "order placed" "201 string tv ann 2" "$status $(field '.order_id|type') $(field .sku) $(field .user_id) $(field .qty)"
first=$(field .order_id)
req POST /skus/tv/orders '{"user_id":"ann","qty":2}' -H 'Idempotency-Key: ann-1'
check "idempotent retry returns the first order" "201 $first" "$status $(field .order_id)"
check "the retry placed nothing" "2" "$(sold tv)"
req GET "/orders/$first"
check "GET order" "200 $first tv ann 2" "$status $(field .order_id) $(field .sku) $(field .user_id) $(field .qty)"
req POST /skus/tv/orders '{"user_id":"ann"}'
check "limit reached" "409 limit_reached/string" "$status $(err)"
req POST /skus/tv/orders '{"user_id":"bob"}'
check "last unit" "201" "$status"
req POST /skus/tv/orders '{"user_id":"cid"}'
check "sold out" "409 sold_out/string" "$status $(err)"
req GET /skus/tv
check "SKU report" "200 3 0 3 0 2" "$status $(field .initial) $(field .remaining) $(field .sold) $(field .oversold) $(field .orders)"
req GET /skus/tv/audit
check "audit" "200 2 3 0 0 0 true" "$status $(field .orders) $(field .sold) $(field .oversold) $(field .limit_breaches) $(field .duplicate_order_ids) $(field .consistent)"

# --- routing
req DELETE /skus/tv
check "wrong method" "405 method_not_allowed/string" "$status $(err)"
allow=$(curl -s -o /dev/null -D - -X DELETE "$base/skus/tv" | tr -d '\r' | awk -F': ' 'tolower($1)=="allow"{print $2}')
check "405 names the allowed methods" "PUT, GET, HEAD" "$allow"
req GET /nothing/here
check "unknown path" "404 not_found/string" "$status $(err)"
req GET /orders/12345
check "unknown order" "404 not_found/string" "$status $(err)"
req GET /orders/12x
check "malformed order id" "400 bad_request/string" "$status $(err)"
head=$(curl -s -I -o /dev/null -w '%{http_code} %{size_download}' "$base/skus/tv")
check "HEAD works where GET does" "200 0" "$head"
ctype=$(curl -s -o /dev/null -w '%{content_type}' "$base/skus/tv")
check "JSON content type" "application/json" "$ctype"
ctype=$(curl -s -o /dev/null -w '%{content_type}' "$base/metrics")
check "metrics content type" "text/plain; version=0.0.4; charset=utf-8" "$ctype"
check "metrics carry counters" "1" "$(curl -s "$base/metrics" | grep -c '^seckill_orders_total{outcome="placed"} 2$')"
req GET /stats
check "stats" "200 2 1" "$status $(field .orders.placed) $(field .orders.replayed)"
check "livez" "200" "$(http_code "$base/livez")"

# --- Redis outage: 503 unavailable within bounds, nothing half-written, heals
proc_stop redis "$dir" 5
start=$SECONDS
req POST /skus/tv/orders '{"user_id":"dan"}'
check "order while Redis is down" "503 unavailable/string" "$status $(err)"
check "readyz while Redis is down" "503" "$(http_code "$base/readyz")"
check "answered within bounds" "1" "$(( SECONDS - start < 5 ))"
check "livez while Redis is down" "200" "$(http_code "$base/livez")"
proc_start redis "$dir" redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir/redis" \
    --save "" --appendonly yes --appendfsync always
wait_until 10 redis_ping "$rport"
wait_until 10 http_ok "$base/readyz"
check "ready again after Redis returns" "200" "$(http_code "$base/readyz")"
check "acknowledged orders survived the restart (AOF)" "3" "$(sold tv)"
req PUT /skus/tv '{"stock":5}' "${auth[@]}"
req POST /skus/tv/orders '{"user_id":"dan"}'
check "orders work again" "201" "$status"

# --- SIGTERM drains and exits 0
pid=$(cat "$dir/seckill.pid")
kill -TERM "$pid"
wait_until 10 bash -c "! kill -0 $pid 2>/dev/null"
check "exited after SIGTERM" "1" "$(kill -0 "$pid" 2>/dev/null && echo 0 || echo 1)"
check "clean exit logged" "1" "$(grep -c 'event=exit code=0' "$dir/seckill.log")"

echo "$pass passed, $fail failed"
((fail == 0))
