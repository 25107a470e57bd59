#!/usr/bin/env bash
# Integration: the threads an instance runs, by name (/proc/PID/task/N/comm), after
# orders of every kind the event loops serve (issue 27: every order on the loops;
# a thread exists only where something needs it):
#
#   - one Redis, --threads 2, in redis, atomic and zk mode (zk also with
#     --zk-watch all, the herd demonstration): the main thread
#     (seckill, which also runs the routes that wait on Redis), 2 loops (sk-loop),
#     in zk mode the zk loop (sk-zk) that drives the ZooKeeper session (libzookeeper_st: the library
#     starts none of its own), nothing else: no batch thread (sk-batch) and no thread
#     of a library. The orders: one unit, three units over two segments (the order
#     machine), a replay of an Idempotency-Key;
#   - at most 4 threads in all (the issue's bound), 3 without ZooKeeper;
#   - the background duties (lease watchdog, order-id lease, sold-out listener,
#     durability) have no thread of their own.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin threads redis-server curl jq java

# Under TSan the runtime adds a background thread of its own, named after main.
extra=0
[[ ${SECKILL_BUILD:-build} == *thread* ]] && extra=1

names() { # PID: "name count" lines, sorted
    cat /proc/"$1"/task/*/comm 2>/dev/null | sort | uniq -c | awk '{ print $2, $1 }'
}
count_of() { # PID NAME
    names "$1" | awk -v n="$2" '$1 == n { c = $2 } END { print c + 0 }'
}

start_redis data "$dir" no || exit 1
rp=$STARTED_PORT
start_zk "$dir" 1 || { echo "zookeeper did not start (see $dir/zk-1.log)"; exit 1; }
zk=$STARTED_NODES

for mode in redis atomic zk zk-all; do
    flags=()
    [[ $mode == zk* ]] && flags=(--zk "$zk")
    [[ $mode == zk-all ]] && flags+=(--zk-watch all)
    start_instance "seckill-$mode" "$dir" --redis "127.0.0.1:$rp" --lock "${mode%-all}" \
        --threads 2 "${flags[@]}" || { echo "instance ($mode) did not start"; exit 1; }
    url=$STARTED_URL
    pid=$(cat "$dir/seckill-$mode.pid")
    sku=t-$mode
    curl -s -X PUT "$url/skus/$sku" -d '{"stock":8,"segments":4,"per_user_limit":4}' \
        >/dev/null
    read -r c id1 _ <<<"$(it_order "$url" "$sku" alice 1 key-a)"
    expect "$mode: one unit: 201" 201 "$c"
    read -r c _ <<<"$(it_order "$url" "$sku" bob 3)"
    expect "$mode: three units, two segments of 2: 201" 201 "$c"
    read -r c id2 _ <<<"$(it_order "$url" "$sku" alice 1 key-a)"
    expect "$mode: a replay: 201" 201 "$c"
    expect "$mode: a replay answers the first order's id" "$id1" "$id2"
    expect "$mode: event loops (sk-loop)" 2 "$(count_of "$pid" sk-loop)"
    expect "$mode: batch threads (sk-batch)" 0 "$(count_of "$pid" sk-batch)"
    expect "$mode: threads named after main (main itself; a library's would be too)" \
        $((1 + extra)) "$(count_of "$pid" seckill)"
    zks=0
    [[ $mode == zk* ]] && zks=1
    expect "$mode: zk loops (sk-zk)" "$zks" "$(count_of "$pid" sk-zk)"
    others=$(names "$pid" | awk '$1 != "seckill" && $1 != "sk-loop" && $1 != "sk-zk"')
    expect "$mode: no other thread" "" "$others"
    expect "$mode: threads in all" $((3 + zks + extra)) "$(ls /proc/"$pid"/task | wc -l)"
    expect "$mode: GET /skus/$sku (a route that waits on Redis) on the main thread" 200 \
        "$(curl -s -o /dev/null -w '%{http_code}' "$url/skus/$sku")"
done
checks_summary
