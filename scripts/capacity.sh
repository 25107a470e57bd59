#!/usr/bin/env bash
# capacity.sh — what an order, a SKU, a reservation and an outbox event cost in Redis and
# in PostgreSQL, measured on a throwaway Redis and PostgreSQL (docs/operations.md,
# "Capacity", has the figures this printed).
#
#   scripts/capacity.sh [--quick] [--dir D]
#
#   --quick   small counts (about 15 s): the same figures, noisier
#   --dir D   the work dir (default: a fresh temp dir), removed at the end unless given
#
# One instance (--lock atomic, --postgres, --threads 2) on a Redis (AOF off: memory is
# the subject, not the disk) and a PostgreSQL. The workload, each step measured by
# INFO used_memory before and after, and by MEMORY USAGE (SAMPLES 0: exact) on real keys:
#   - SKUs: S SKUs of 16 segments, no order;
#   - orders: N orders (wrk, loadtest/orders.lua, a fresh user id "w-t1-123" each, an
#     Idempotency-Key on none) on a SKU without a payment window (final at 201);
#   - reservations: N orders on a SKU with a payment window (pending, due to expire);
#   - PostgreSQL down (stopped by its pid): N orders, the outbox stream's growth (its
#     events are kept in Redis until the database has them), then PostgreSQL started
#     again and the time until the sink has written them all;
#   - in PostgreSQL: pg_total_relation_size of seckill_orders and seckill_events (table,
#     indexes, TOAST) over their rows.
# Prints a line per figure, "capacity: NAME VALUE UNIT", then the date, the commit and
# the versions. Exit 1 when a step failed.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/cluster.sh
source "$SECKILL_ROOT/scripts/cluster.sh"
QUIET=1

quick=0 dir="" keep=0
while (($#)); do
    case $1 in
    --quick) quick=1; shift ;;
    --dir) dir=$2; keep=1; shift 2 ;;
    -h | --help) usage_from_header "$0" 0 ;;
    *) usage_from_header "$0" 2 ;;
    esac
done
for t in redis-server redis-cli psql wrk curl jq; do
    command -v "$t" >/dev/null || die "capacity: $t is missing (scripts/deps.sh installs it)"
done
if ((quick)); then S=50 N=2000; else S=500 N=20000; fi
[[ -n $dir ]] || dir=$(mktemp -d "${TMPDIR:-/tmp}/seckill-capacity.XXXXXX")
mkdir -p "$dir"
done_() {
    local rc=$?
    cmd_down "$dir" 0 >/dev/null 2>&1 || rc=1
    ((keep)) || rm -rf "$dir"
    exit "$rc"
}
trap done_ EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_pg "$dir" >/dev/null || die "capacity: PostgreSQL did not start"
pg_port=$STARTED_PORT
start_redis data "$dir" no >/dev/null || die "capacity: Redis did not start"
rport=$STARTED_PORT
start_instance s1 "$dir" --redis "127.0.0.1:$rport" --postgres "$(pg_url "$pg_port")" \
    --lock atomic --threads 2 --max-conns-per-ip 0 >/dev/null || die "capacity: the instance did not start"
U=$STARTED_URL
rcli() { redis-cli -h 127.0.0.1 -p "$rport" "$@"; }
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$(pg_url "$pg_port")" -c "$1"; }
used() { rcli info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
mem_usage() { rcli memory usage "$1" samples 0; } # KEY: its bytes, exact
say_() { # NAME VALUE WHAT: one figure; a figure that is no number stops the script
    [[ $2 =~ ^[0-9]+$ ]] || die "capacity: $1 was not measured ('$2')"
    printf 'capacity: %-34s %10s %s\n' "$1" "$2" "$3"
}
per() { echo $((($1 + $2 / 2) / $2)); } # A / B rounded
put() { # SKU BODY
    [[ $(curl -s -o /dev/null -w '%{http_code}' -X PUT "$U/skus/$1" -d "$2") == 201 ]] ||
        die "capacity: PUT $1 refused"
}
orders_of() { curl -s "$U/skus/$1" | jq -r .orders; }
sell() { # SKU N: N orders (the stock is N: wrk runs until they are sold)
    local sku=$1 n=$2 tag=w$RANDOM
    wrk -t2 -c16 -d60s -s "$SECKILL_ROOT/loadtest/orders.lua" "$U" -- "$sku" 0 1 "$tag" \
        >"$dir/wrk.$sku" 2>&1 &
    local pid=$!
    sold() { [[ $(orders_of "$sku") -ge $n ]]; }
    wait_until 120 sold || { kill -INT "$pid"; wait "$pid"; die "capacity: $sku did not sell $n"; }
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" || true
}
settle() { # SKU: the sink has written all its events (the audit's lag, read from the
    # stream itself) and its stream is trimmed
    local sku=$1
    written() {
        [[ $(curl -s "$U/skus/$sku/audit" | jq -r '.store.lag_events == 0 and .store.matches') == true &&
            $(rcli xlen seckill:events) -le 1 ]]
    }
    wait_until 120 written || die "capacity: the sink did not catch up on $sku"
}
# A SKU's keys on one Redis share its hash tag {SKU}; its orders' records are fields of
# hashes shared with other orders of the same ~238 ms (inventory/lua/rec.lua).
sku_keys_bytes() { # SKU: bytes of every key tagged {SKU}
    local k sum=0
    while read -r k; do
        [[ -n $k ]] && sum=$((sum + $(mem_usage "$k")))
    done < <(rcli --scan --pattern "*{$1}*")
    echo "$sum"
}
# SKU: average bytes of a record, over the hashes that hold 200 of its orders' records
# (each hash's MEMORY USAGE over the records in it, its '#open' count aside)
order_records_bytes() {
    local keys key sum=0 n=0
    keys=$(rcli lrange "sk:{$1}:orders" 0 199 | awk '{ id = $1; n = length(id) - 9
        print "order:" (n > 0 ? substr(id, 1, n) : "0") }' | sort -u)
    for key in $keys; do
        sum=$((sum + $(mem_usage "$key")))
        n=$((n + $(rcli hlen "$key") - $(rcli hexists "$key" '#open')))
    done
    ((n > 0)) || die "capacity: no order record of $1 found"
    per "$sum" "$n"
}

# ---- SKUs
m0=$(used) k0=$(rcli dbsize)
for ((i = 1; i <= S; i++)); do put "sku$i" '{"stock":100,"segments":16}'; done
m1=$(used) k1=$(rcli dbsize)
say_ redis_keys_per_sku "$(per $((k1 - k0)) "$S")" "keys (DBSIZE)"
say_ redis_bytes_per_sku "$(per $((m1 - m0)) "$S")" "bytes (used_memory, 16 segments, no order)"
say_ redis_sku_keys_bytes "$(sku_keys_bytes sku1)" "bytes (MEMORY USAGE of one SKU's keys)"

# ---- orders, final at 201
put plain "{\"stock\":$N,\"segments\":16}"
m0=$(used)
sell plain "$N"
settle plain
m1=$(used)
n=$(orders_of plain)
say_ orders_placed "$n" "orders"
say_ redis_bytes_per_order "$(per $((m1 - m0)) "$n")" "bytes (used_memory, sink caught up)"
say_ redis_order_record_bytes "$(order_records_bytes plain)" "bytes (a hash of records' MEMORY USAGE over its records)"
say_ redis_order_share_of_sku_keys "$(per "$(sku_keys_bytes plain)" "$n")" "bytes (the SKU's keys over its orders)"

# ---- reservations (a payment window: pending, due)
put res "{\"stock\":$N,\"segments\":16,\"pay_within_ms\":3600000}"
m0=$(used)
sell res "$N"
settle res
m1=$(used)
n=$(orders_of res)
say_ redis_bytes_per_reservation "$(per $((m1 - m0)) "$n")" "bytes (used_memory, pending orders)"
say_ redis_reservation_record_bytes "$(order_records_bytes res)" "bytes (a hash of records' MEMORY USAGE over its records)"
say_ redis_reservation_share_of_sku_keys "$(per "$(sku_keys_bytes res)" "$n")" "bytes (the SKU's keys over its orders)"

# ---- PostgreSQL
rows_o=$(sql "SELECT count(*) FROM seckill_orders")
rows_e=$(sql "SELECT count(*) FROM seckill_events")
size_o=$(sql "SELECT pg_total_relation_size('seckill_orders')")
size_e=$(sql "SELECT pg_total_relation_size('seckill_events')")
say_ pg_bytes_per_order "$(per "$size_o" "$rows_o")" "bytes (seckill_orders: $rows_o rows, $size_o bytes)"
say_ pg_bytes_per_event "$(per "$size_e" "$rows_e")" "bytes (seckill_events: $rows_e rows, $size_e bytes)"

# ---- PostgreSQL down: the outbox grows in Redis
put down "{\"stock\":$N,\"segments\":16}"
grouped() { rcli xinfo groups seckill:events 2>/dev/null | grep -qx seckill-sink; }
wait_until 30 grouped || die "capacity: the sink made no group on the new SKU's stream"
proc_stop pg "$dir" 10 INT
# events() : the events in the stream: an entry carries a commit's, one field o each
# (inventory/lua/outbox.lua)
events() {
    rcli EVAL "local n = 0
        for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
          for i = 1, #e[2], 2 do if e[2][i] == 'o' then n = n + 1 end end
        end
        return n" 1 seckill:events
}
x0=$(events) # the shard's stream, shared: what it held before
m0=$(used)
sell down "$N"
m1=$(used)
n=$(orders_of down)
xlen=$(($(events) - x0))
pel=$(rcli xpending seckill:events seckill-sink | head -1)
say_ events_waiting "$xlen" "events in the stream ($(rcli xlen seckill:events) entries), $n orders, PostgreSQL down ($pel entries delivered to the sink, its batch tried again)"
say_ redis_bytes_per_event "$(per "$(mem_usage seckill:events)" "$xlen")" "bytes (MEMORY USAGE of the stream)"
say_ redis_bytes_per_order_pg_down "$(per $((m1 - m0)) "$n")" "bytes (used_memory: the order and its event)"
t0=${EPOCHREALTIME/./}
pg_server_start "$dir" "$pg_port" 60 >/dev/null || die "capacity: PostgreSQL did not start again"
settle down
t1=${EPOCHREALTIME/./}
say_ sink_catch_up_ms $(((t1 - t0) / 1000)) "ms (PostgreSQL started again until lag 0, $xlen events)"
say_ redis_stream_bytes_after "$(mem_usage seckill:events)" "bytes (the stream once written: XLEN $(rcli xlen seckill:events))"

echo "capacity: measured $(date -u +%Y-%m-%d) at commit $(git -C "$SECKILL_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)," \
    "$(redis-server --version | awk '{ print $1, $3 }'), $(psql --version | awk '{ print $1, $3 }'),$( ((quick)) && echo " quick")"
