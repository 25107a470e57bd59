#!/usr/bin/env bash
# soak.sh — make soak: a shop, not a sale (issue 46). On a Redis Cluster of 3 masters
# with --postgres, 3 instances behind nginx: SOAK_SKUS SKUs (default 10000) created in
# SOAK_WAVES waves, each with a payment window of SOAK_PAY_MS (2000) and SOAK_ORDERS
# orders (3: one paid, one cancelled, the rest left to expire), then every SKU retired.
#
#   loadtest/soak.sh [--out DIR]     (SOAK_SKUS, SOAK_WAVES, SOAK_ORDERS, SOAK_PAY_MS)
#
# Reports (DIR/report.txt, results/soak-latest): the sweep's lateness (expiry event
# time minus pay_by, from PostgreSQL) p50/p99/max; every event stored once; the sink's
# lag at each wave's end; the masters' key count and memory before, at the peak and
# after retirement; the masters' CPU with every SKU idle (a sale over, not retired);
# the audit's and the store's verdicts on a sample of SKUs; what the retirement
# answered. Everything it starts is stopped by its pid files on exit, also on failure.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
N=${SOAK_SKUS:-10000}
WAVES=${SOAK_WAVES:-5}
ORDERS=${SOAK_ORDERS:-3}
PAY_MS=${SOAK_PAY_MS:-2000}
out=""
[[ ${1:-} == --out ]] && out=$2
[[ -n $out ]] || out=results/soak-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out" && out=$(cd "$out" && pwd)
[[ $out == "$ROOT"/results/* ]] && ln -sfn "$(basename "$out")" results/soak-latest
report=$out/report.txt
: >"$report"
say() { echo "$*" | tee -a "$report"; }

dir=$(mktemp -d /tmp/seckill-soak.XXXXXX)
cleanup() { # SOAK_KEEP=1: the cluster's logs kept in its dir (said on stderr)
    local rc=$?
    if [[ ${SOAK_KEEP:-0} == 1 ]]; then
        scripts/cluster.sh down --dir "$dir" >/dev/null 2>&1 || rc=1
        echo "soak: logs kept in $dir" >&2
    else
        scripts/cluster.sh down --dir "$dir" --rm >/dev/null 2>&1 || rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "soak: $N SKUs in $WAVES waves, $ORDERS orders each, pay window $PAY_MS ms" >&2
scripts/cluster.sh up --dir "$dir" --quiet --redis-cluster 3 --instances 3 --postgres \
    -- --log-level warn >"$out/up.log" 2>&1 || { tail -20 "$out/up.log"; exit 1; }
# shellcheck source=/dev/null
source "$dir/cluster.env"
IFS=, read -r -a seeds <<<"$REDIS_CLUSTER_SEEDS"
sql() { psql -X -q -tA -F ' ' "$PG_URL" -c "$1"; }
masters() { # CMD FIELD: the sum over the masters of an INFO field (CMD: memory, cpu...)
    local s n=0 v
    for s in "${seeds[@]}"; do
        v=$(redis-cli -p "${s##*:}" info "$1" | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }')
        n=$(echo "$n + ${v:-0}" | bc -l)
    done
    echo "$n"
}
keys() { local s n=0; for s in "${seeds[@]}"; do n=$((n + $(redis-cli -p "${s##*:}" dbsize))); done; echo "$n"; }
mem() { masters memory used_memory; }
# the data's share of it: used_memory less Redis's own (the replication backlog, which a
# master fills to its 1 MB with any writes, clients' buffers, the scripts' cache...)
dataset() { masters memory used_memory_dataset; }
keymem() { # the keys' own bytes (MEMORY USAGE of each), over the masters
    local s
    for s in "${seeds[@]}"; do
        redis-cli -p "${s##*:}" --scan | while read -r key; do
            echo "MEMORY USAGE $key"
        done | redis-cli -p "${s##*:}"
    done | awk '{ n += $1 } END { print n + 0 }'
}
cpu() { echo "$(masters cpu used_cpu_sys) + $(masters cpu used_cpu_user)" | bc -l; }
lag() { # the sink's lag, the largest any instance reports
    local u m=0 v
    for u in $INSTANCE_URLS; do
        v=$(curl -s "$u/metrics" | awk '$1 == "seckill_sink_lag_events" { print $2 }')
        ((${v:-0} > m)) && m=${v:-0}
    done
    echo "$m"
}
client() { python3 loadtest/soak_client.py "$LB_URL" "$@"; }

keys0=$(keys) mem0=$(mem) ds0=$(dataset) km0=$(keymem)
memstats() { # DIR/memory-WHEN.txt: each master's MEMORY STATS, where the bytes are
    local s
    for s in "${seeds[@]}"; do
        echo "# ${s##*:}"
        redis-cli -p "${s##*:}" memory stats | paste -sd' ' | sed 's/ \([a-z][a-z.0-9-]*\) / \n\1 /g'
    done >"$out/memory-$1.txt"
}
memstats baseline
idle_cpu() { # the 3 masters' CPU over 10 s, in % of one core
    local c0 c1 t1 t2
    c0=$(cpu) t1=$(date +%s.%N)
    sleep 10
    c1=$(cpu) t2=$(date +%s.%N)
    echo "($c1 - $c0) / ($t2 - $t1) * 100" | bc -l | cut -c1-5
}
cpu0=$(idle_cpu)
say "soak: $(date -u +%Y-%m-%dT%H:%M:%SZ) at $(git rev-parse --short HEAD 2>/dev/null), $N SKUs in $WAVES waves, $ORDERS orders each, pay window ${PAY_MS} ms, 3 masters, 3 instances"
say "baseline: $keys0 keys ($km0 bytes), $mem0 bytes used, $ds0 of them the dataset"
per=$(((N + WAVES - 1) / WAVES))
peak_keys=$keys0 peak_mem=$mem0 placed=0
for ((w = 0; w < WAVES; w++)); do
    first=$((w * per + 1)) last=$(((w + 1) * per))
    ((last > N)) && last=$N
    ((first > last)) && break
    p=$(client put "$first" "$last" "$ORDERS" "$PAY_MS")
    s=$(client sell "$first" "$last" "$ORDERS")
    placed=$((placed + $(jq -r '.order_201 // 0' <<<"$s")))
    k=$(keys) m=$(mem)
    ((k > peak_keys)) && peak_keys=$k
    (($(echo "$m > $peak_mem" | bc) == 1)) && peak_mem=$m
    say "wave $((w + 1)): SKUs $first..$last put $p sold $s; $k keys, $m bytes, sink lag $(lag)"
done
settled() { # every order answered 201 in PostgreSQL, none pending there, no lag
    [[ $(sql "select count(*) from seckill_orders where state = 'pending'") == 0 &&
        $(sql "select count(*) from seckill_orders") -ge $placed && $(lag) == 0 ]]
}
t0=$SECONDS
until settled; do
    ((SECONDS - t0 > 300)) && { say "not settled after 300 s"; break; }
    sleep 1
done
say "$placed orders placed (201); settled $((SECONDS - t0)) s after the last wave: $(sql "select state || '=' || count(*) from seckill_orders group by state order by state" | paste -sd' ')"
say "sweep lateness (the expiry's event time minus pay_by, ms): $(sql "select 'p50=' || round(percentile_cont(0.5) within group (order by d)) || ' p99=' || round(percentile_cont(0.99) within group (order by d)) || ' max=' || round(max(d)) || ' n=' || count(*) from (select extract(epoch from (e.at - o.pay_by)) * 1000 as d from seckill_orders o join seckill_events e using (order_id) where e.state = 'expired') x")"
say "events stored once: $(sql "select count(*) || ' events, ' || (count(*) - count(distinct (order_id, state))) || ' twice' from seckill_events")"
say "dead letters: $(sql "select count(*) from seckill_dead_letters")"
memstats peak
say "peak: $peak_keys keys, $peak_mem bytes"
sleep 2
say "idle: the 3 masters' CPU $(idle_cpu) % of one core with $N SKUs (sale over, not retired), $cpu0 % before the first"
bad=0 checked=0
for ((i = 1; i <= N; i += (N + 49) / 50)); do
    a=$(curl -s "$LB_URL/skus/s$i/audit")
    checked=$((checked + 1))
    [[ $(jq -r '.consistent and .store.matches' <<<"$a" 2>/dev/null) == true ]] || bad=$((bad + 1))
done
say "audits: $checked sampled, $bad not consistent or not matching the store"
r=$(client retire 1 "$N")
say "retirement: $r"
trimmed() { [[ $(lag) == 0 ]]; }
until trimmed; do sleep 1; done
acks() { # the replicas' acknowledgement keys, which go 10 s after their last write
    local s
    for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan --pattern 'sk:*:ack'; done
}
t0=$SECONDS
while [[ -n $(acks) ]] && ((SECONDS - t0 < 30)); do sleep 1; done
k=$(keys) m=$(mem) ds=$(dataset) km=$(keymem)
memstats retired
say "after retirement: $k keys ($((k - keys0)) from the baseline, $km bytes), $m bytes ($(echo "($m - $mem0) * 100 / $mem0" | bc -l | cut -c1-5) % from it), dataset $ds bytes ($(echo "($ds - $ds0) * 100 / $ds0" | bc -l | cut -c1-5) % from it)"
for s in "${seeds[@]}"; do redis-cli -p "${s##*:}" --scan | sed 's/^/  left: /'; done >>"$report"
echo "soak: report in $report" >&2
