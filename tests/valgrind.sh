#!/usr/bin/env bash
# valgrind.sh — the server under valgrind (memcheck) through a short real workload,
# once per lock mode: a SKU, a few hundred concurrent orders (placed, replayed,
# sold out, limit reached), every route and error status, a Redis crash and restart
# in the middle (503s, reconnects), in zk mode also a ZooKeeper crash and restart, then
# in redis and pg modes the sink to PostgreSQL running (--postgres: the outbox's events
# written there, the store matched), in pg mode also a PostgreSQL crash and restart, then
# SIGTERM with an order in flight. Passes
# when every instance exits 0 and valgrind reports no error and no leak:
# "definitely lost: 0" and "indirectly lost: 0" (memory still reachable at exit,
# e.g. libraries' caches, is not a leak). Needs: valgrind, redis-server, curl, jq; zk
# also java and the zookeeper package (a throwaway server, scripts/lib.sh).
#
#   tests/valgrind.sh [MODES]     MODES comma-separated, also $VG_MODES
#                                 (default redis,redlock,setnx,zk,pg,atomic)
#   VG_ORDERS                     orders per mode (default 300)
#   SECKILL_BIN / SECKILL_BUILD   the server (default build/seckill: an unsanitized
#                                 build; valgrind and the sanitizers do not mix)
#
# Prints each mode's LEAK SUMMARY and ERROR SUMMARY, then "N passed, N failed".
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODES=${1:-${VG_MODES:-redis,redlock,setnx,zk,pg,atomic}}
ORDERS=${VG_ORDERS:-300}
CLIENTS=4

command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
it_begin valgrind redis-server curl jq

# crash NAME: SIGKILL to process NAME of $dir, which is gone when this returns (reaped
# quietly: it is this shell's child)
crash() {
    local pid
    pid=$(cat "$dir/$1.pid")
    cmd_stop "$dir" "$1" 1 2>/dev/null
    wait "$pid" 2>/dev/null
}

start_redis redis "$dir" always || die "redis did not start"
rport=$STARTED_PORT
lock_nodes=""
for i in 1 2 3; do
    start_redis "lock-$i" "$dir" always || die "lock node $i did not start"
    lock_nodes+="${lock_nodes:+,}127.0.0.1:$STARTED_PORT"
done
# zk mode: one throwaway ZooKeeper server, zk-1 (started again after its crash in run_mode).
# redis and pg modes: a throwaway PostgreSQL, pg (crashed and started again in pg mode)
pg_url_=""
if [[ ,$MODES, == *,pg,* || ,$MODES, == *,redis,* ]]; then
    start_pg "$dir" || die "postgres did not start (see $dir/pg.log)"
    pg_url_=$(pg_url "$STARTED_PORT")
fi
zport=""
if [[ ,$MODES, == *,zk,* ]]; then
    start_zk "$dir" 1 || die "zookeeper did not start (see $dir/zk-1.log)"
    zport=${STARTED_NODES##*:}
fi

# req METHOD URL [curl args...] -> "status error"
req() {
    local m=$1 u=$2 out
    shift 2
    out=$(curl -s -X "$m" --max-time 30 -w '\n%{http_code}' "$@" "$u")
    echo "${out##*$'\n'} $(jq -r '.error // empty' <<<"${out%$'\n'*}" 2>/dev/null)"
}

# orders FROM TO: one client placing orders FROM..TO, each with its own key, then
# replaying every tenth; prints one status per request, and the error of any answer
# other than 201 or 409 ("503 busy").
orders() {
    local i n code error
    for ((i = $1; i <= $2; i++)); do
        for ((n = 0; n < 1 + (i % 10 == 0); n++)); do
            read -r code error < <(req POST "$base/skus/$sku/orders" \
                -H "Idempotency-Key: k$i" -d "{\"user_id\":\"u$((i % (ORDERS / 2)))\"}")
            [[ $code == 201 || $code == 409 ]] && echo "$code" || echo "$code $error"
        done
    done
}

zk_down() { ! zk_ready "$zport"; }
# zk_order_placed: one order of a new user; true when it was placed (201).
zk_tries=0 zk_last=""
zk_order_placed() {
    zk_tries=$((zk_tries + 1))
    zk_last=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -X POST \
        "$base/skus/$sku/orders" -d "{\"user_id\":\"zkback-$zk_tries\"}")
    [[ $zk_last == 201 ]]
}

run_mode() {
    local mode=$1 vlog pid code
    sku="vg-$mode"
    vlog="$dir/valgrind.$mode.log"
    local extra=()
    # Time for a process that valgrind slows 20-50 times, on a busy machine: a lock
    # waited for up to 5 s (not 1) before "busy"; in redlock mode, a lock node's
    # answer waited for up to 500 ms, a 20th of the TTL (not 100), before the node
    # counts as unreachable and a grant short of a majority is "unavailable".
    local ttl_ms=2000
    [[ $mode == redlock ]] && extra=(--lock-nodes "$lock_nodes") ttl_ms=10000
    # A long session: the client's heartbeats run slowly under valgrind.
    [[ $mode == zk ]] && extra=(--zk "127.0.0.1:$zport" --zk-session-ms 10000)
    [[ $mode == redis || $mode == pg ]] && extra=(--postgres "$pg_url_")
    echo "# $mode: $ORDERS orders under valgrind"
    local started=$SECONDS
    if ! start_instance --ready-secs 60 --wrap "valgrind --leak-check=full
        --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect
        --error-exitcode=99 --num-callers=30 --log-file=$vlog" seckill "$dir" \
        --redis "127.0.0.1:$rport" --lock "$mode" "${extra[@]}" --segments 4 --threads 4 \
        --admin-token vg --lock-ttl-ms "$ttl_ms" --wait-ms 5000; then
        expect "$mode: ready under valgrind" ready "not ready"
        return 1
    fi
    base=$STARTED_URL
    pid=$(cat "$dir/seckill.pid")
    local auth=(-H 'Authorization: Bearer vg')

    # every route and error status
    expect "$mode: PUT creates" "201 " "$(req PUT "$base/skus/$sku" "${auth[@]}" \
        -d "{\"stock\":$((ORDERS / 3)),\"per_user_limit\":1}")"
    expect "$mode: PUT without token" "401 unauthorized" "$(req PUT "$base/skus/$sku" -d '{"stock":1}')"
    expect "$mode: PUT bad body" "400 bad_request" "$(req PUT "$base/skus/$sku" "${auth[@]}" -d '{"stock":-1}')"
    expect "$mode: bad order" "400 bad_request" "$(req POST "$base/skus/$sku/orders" -d '{"user_id":"a b"}')"
    expect "$mode: bad JSON" "400 bad_request" "$(req POST "$base/skus/$sku/orders" -d '{"user_id":')"
    expect "$mode: unknown SKU" "404 not_found" "$(req POST "$base/skus/none/orders" -d '{"user_id":"a"}')"
    expect "$mode: 405" "405 method_not_allowed" "$(req POST "$base/skus/$sku")"
    expect "$mode: DELETE without token" "401 unauthorized" "$(req DELETE "$base/skus/$sku")"
    expect "$mode: a SKU made and retired" "201 204 404" \
        "$(req PUT "$base/skus/$sku-r" "${auth[@]}" -d '{"stock":2}' | cut -d' ' -f1) $(req DELETE "$base/skus/$sku-r" "${auth[@]}" | cut -d' ' -f1) $(req GET "$base/skus/$sku-r" | cut -d' ' -f1)"
    expect "$mode: 404 route" "404 not_found" "$(req GET "$base/no/such/route")"
    expect "$mode: 413 declared" "413 too_large" "$(req POST "$base/skus/$sku/orders" \
        --data-binary "$(printf '%05000d' 0)")"
    expect "$mode: 413 chunked" "413 too_large" "$(req POST "$base/skus/$sku/orders" \
        -H 'Transfer-Encoding: chunked' --data-binary "$(printf '%05000d' 0)")"

    local order_id
    order_id=$(curl -s -X POST "$base/skus/$sku/orders" -H 'Idempotency-Key: first' \
        -d '{"user_id":"first"}' | jq -r .order_id)

    # concurrent orders: placed, replayed, limit reached, sold out
    local per=$((ORDERS / CLIENTS)) c clients=()
    for ((c = 0; c < CLIENTS; c++)); do
        orders $((c * per + 1)) $(((c + 1) * per)) >"$dir/orders.$mode.$c" &
        clients+=($!)
    done
    wait "${clients[@]}"
    local placed
    placed=$(cat "$dir"/orders."$mode".* | grep -c '^201$')
    expect "$mode: every order answered 201/409 (others: $(cat "$dir"/orders."$mode".* |
        grep -v -e '^201$' -e '^409$' | sort | uniq -c | tr -s ' \n' ' '))" "0" \
        "$(cat "$dir"/orders."$mode".* | grep -vc -e '^201$' -e '^409$')"
    expect "$mode: orders were placed and refused" "yes" \
        "$( ((placed > 0 && placed < ORDERS)) && echo yes || echo no)"
    expect "$mode: GET order" "200 " "$(req GET "$base/orders/$order_id")"
    expect "$mode: GET unknown order" "404 not_found" "$(req GET "$base/orders/1")"
    expect "$mode: GET bad order id" "400 bad_request" "$(req GET "$base/orders/x")"
    expect "$mode: GET sku" "200 " "$(req GET "$base/skus/$sku")"
    expect "$mode: HEAD sku" "200" "$(curl -s -I -o /dev/null -w '%{http_code}' "$base/skus/$sku")"
    expect "$mode: audit consistent" "true" "$(curl -s "$base/skus/$sku/audit" | jq -r .consistent)"
    local sold
    sold=$(curl -s "$base/skus/$sku" | jq -r .sold)
    expect "$mode: the stock sold out, exactly" "$((ORDERS / 3))" "$sold"
    expect "$mode: stats" "200 " "$(req GET "$base/stats")"
    expect "$mode: metrics" "200 " "$(req GET "$base/metrics")"
    expect "$mode: livez" "200 " "$(req GET "$base/livez")"
    if [[ -n ${extra[*]} && ${extra[0]} == --postgres ]]; then
        store_ok() { [[ $(curl -s "$base/skus/$sku/audit" | jq -r '.store.matches and .store.lag_events == 0') == true ]]; }
        check "$mode: the sink's database matches Redis" wait_until 30 store_ok
    fi

    # Redis crash and restart: 503 unavailable meanwhile, reconnects by itself
    crash redis
    wait_until 10 bash -c "! redis-cli -p $rport ping >/dev/null 2>&1"
    expect "$mode: order while Redis is down" "503 unavailable" \
        "$(req POST "$base/skus/$sku/orders" -d '{"user_id":"down"}')"
    # /readyz answers from the health of the last round (service/health.c, 250 ms)
    down() { [[ $(req GET "$base/readyz") == "503 unavailable" ]]; }
    check "$mode: readyz while Redis is down: 503 unavailable (within 5 s)" wait_until 5 down
    expect "$mode: metrics while Redis is down" "200 " "$(req GET "$base/metrics")"
    cmd_start "$dir" redis || return 1
    wait_until 30 http_ok "$base/readyz"
    expect "$mode: ready again" "200 " "$(req GET "$base/readyz")"
    expect "$mode: sold survived the crash" "$sold" "$(curl -s "$base/skus/$sku" | jq -r .sold)"
    expect "$mode: PUT resets" "200 " "$(req PUT "$base/skus/$sku?reset=true" "${auth[@]}" -d '{"stock":5}')"
    expect "$mode: order after recovery" "201 " "$(req POST "$base/skus/$sku/orders" -d '{"user_id":"back"}')"

    # zk: ZooKeeper crash and restart (same port, same data): 503 unavailable meanwhile,
    # then orders again, with no restart of the server
    if [[ $mode == zk ]]; then
        crash zk-1
        wait_until 10 zk_down
        expect "$mode: order while ZooKeeper is down" "503 unavailable" \
            "$(req POST "$base/skus/$sku/orders" -d '{"user_id":"zkdown"}')"
        cmd_start "$dir" zk-1 || { expect "$mode: ZooKeeper started again" ok failed; return 1; }
        zk_tries=0
        wait_until 60 zk_order_placed
        expect "$mode: an order placed after ZooKeeper came back (in $zk_tries tries)" "201" \
            "$zk_last"
    fi

    # pg: PostgreSQL crash (an immediate shutdown) and restart: 503 meanwhile, then
    # orders again, with no restart of the server
    if [[ $mode == pg ]]; then
        crash pg
        expect "$mode: order while PostgreSQL is down" "503" \
            "$(req POST "$base/skus/$sku/orders" -d '{"user_id":"pgdown"}' | cut -d' ' -f1)"
        cmd_start "$dir" pg || { expect "$mode: PostgreSQL started again" ok failed; return 1; }
        pg_back() {
            [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -X POST "$base/skus/$sku/orders" \
                -d "{\"user_id\":\"pgback-$RANDOM\"}") == 201 ]]
        }
        check "$mode: an order placed after PostgreSQL came back" wait_until 60 pg_back
    fi

    # SIGTERM with an order in flight (a slow one: the server is under valgrind)
    curl -s -o "$dir/inflight.$mode" --max-time 30 -X POST "$base/skus/$sku/orders" \
        -d '{"user_id":"last"}' &
    local client=$!
    kill -TERM "$pid"
    wait "$client"
    wait "$pid"
    code=$?
    rm -f "$dir/seckill.pid" "$dir/seckill.start"
    expect "$mode: exit code (99: valgrind found errors)" "0" "$code"
    local summary
    summary=$(grep -E 'total heap usage|in use at exit|definitely lost|indirectly lost|possibly lost|ERROR SUMMARY|no leaks are possible' "$vlog" |
        sed 's/^==[0-9]*== *//')
    echo "$summary" | sed "s/^/  $mode: /"
    expect "$mode: no valgrind error or leak in the log" "" "$(grep -E 'definitely lost: [1-9]|indirectly lost: [1-9]|ERROR SUMMARY: [1-9]|Invalid (read|write|free)|uninitialised|Mismatched' "$vlog" | head -3)"
    echo "# $mode: $((SECONDS - started))s"
    if [[ $code != 0 ]]; then head -60 "$vlog"; fi
}

IFS=', ' read -r -a mode_list <<<"$MODES"
for m in "${mode_list[@]}"; do
    run_mode "$m" || expect "$m: ran" ok failed
done
checks_summary
