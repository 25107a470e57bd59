#!/usr/bin/env bash
# shards.sh — one hot SKU over Redis Cluster shards (make bench runs it after
# segments.sh): the same sale on a cluster of 1 master and of 3, in one run, with a
# progress line per step.
#
#   loadtest/shards.sh [--quick] [--masters LIST] [--modes LIST] [--out DIR]
#
#   --quick         a smoke test: 1 s per step (also BENCH_QUICK=1)
#   --masters LIST  cluster sizes, comma-separated (1,3); the ratios are to the first
#   --modes LIST    lock modes, comma-separated (redis,atomic)
#   --out DIR       where shards.json goes (results/shards-<time>/, results/shards-latest
#                   links to it)
#
# Per mode and size, a fresh cluster (scripts/cluster.sh --redis-cluster M: M masters
# with a replica each, AOF always; 3 instances behind nginx, every 201 acknowledged by a
# replica), a SKU of 10^9 units in 16 segments, wrk -t2 -c64 through the balancer for
# 5 s (loadtest/orders.lua, a new user per request). Columns: req/s and x_first (over the
# first size, same mode); placed orders; each master's Redis CPU per placed order (µs,
# from used_cpu_user + used_cpu_sys), their sum and the busiest one's share of it; the
# replicas' CPU per order; errors (answers other than 201, and socket errors).
#
# On one machine every process shares its cores: the sum of the masters' CPU per order
# says what the sale costs Redis, the busiest master's share says how evenly it spreads
# (1/M when even), and the busiest master's CPU per order, times the orders per second
# one core does, is the ceiling of a cluster whose masters each have their own core (see
# the model for N machines in docs/redis-cluster.md).
#
# SECKILL_BIN / SECKILL_BUILD choose the server. Exit status 0 when every step ran.
# shellcheck disable=SC2317 # functions run from traps look unreachable
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"
INSTANCES=3 CONNECTIONS=64 WRK_THREADS=2 STOCK=1000000000 SEGMENTS=16

sizes="1,3" modes="redis,atomic" out=""
quick=${BENCH_QUICK:-0}
usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }
while (($#)); do
    case $1 in
    --quick) quick=1; shift ;;
    --masters) sizes=${2:?"$1 needs a value"}; shift 2 ;;
    --modes) modes=${2:?"$1 needs a value"}; shift 2 ;;
    --out) out=${2:?"$1 needs a value"}; shift 2 ;;
    -h | --help) usage 0 ;;
    *) log "unknown option $1"; usage ;;
    esac
done
IFS=', ' read -r -a size_list <<<"$sizes"
IFS=', ' read -r -a mode_list <<<"$modes"
for m in "${size_list[@]}"; do
    [[ $m =~ ^[0-9]+$ ]] && ((m >= 1 && m <= 8)) || die "--masters: sizes are 1..8 (got '$m')"
done
if [[ $quick == 1 ]]; then dur=1s; else dur=5s; fi
lt_require jq wrk curl redis-cli
lt_out "shards-$(date +%Y%m%d-%H%M%S)" shards-latest steps
lt_traps never
TOTAL=$((${#size_list[@]} * ${#mode_list[@]}))
# cpu_seconds PORT: the Redis on PORT's used_cpu_user + used_cpu_sys
cpu_seconds() {
    redis-cli -p "$1" info cpu 2>/dev/null | tr -d '\r' |
        awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { c += $2 } END { printf "%.6f", c }'
}
# nodes ROLE: the ports of the cluster's nodes with that role (master or slave)
nodes() {
    local seed=${REDIS_CLUSTER_SEEDS%%,*}
    redis-cli -p "${seed##*:}" cluster nodes |
        awk -v r="$1" '$3 ~ r { split($2, a, "@"); split(a[1], b, ":"); print b[2] }' | sort -n
}

# run MODE MASTERS: one cluster, one wrk run; writes $out/steps/MODE.MASTERS.json
run() {
    local mode=$1 m=$2 dir=$out/clusters/$1-$2 t0=$SECONDS f=$out/steps/$1.$2 p
    local -a masters replicas before_m before_r
    STEP=$((STEP + 1))
    mkdir -p "$out/clusters"
    if ! lt_cluster_up "$dir" "$dir.up.err" --redis-cluster "$m" --instances "$INSTANCES" \
        --lb nginx --lock "$mode" -- --segments "$SEGMENTS" --log-level warn; then
        progress "$mode, $m master(s): cluster did not start: $UP_ERROR"
        any_error=1
        return
    fi
    mapfile -t masters < <(nodes master)
    mapfile -t replicas < <(nodes slave)
    put_sku hot "$STOCK" "$SEGMENTS" || { progress "$mode, $m: PUT failed"; any_error=1; }
    for p in "${masters[@]}"; do before_m+=("$(cpu_seconds "$p")"); done
    for p in "${replicas[@]}"; do before_r+=("$(cpu_seconds "$p")"); done
    wrk -t "$WRK_THREADS" -c "$CONNECTIONS" -d "$dur" -s "$LUA" "$LB_URL" \
        -- hot 0 1 "s$m$$x$RANDOM" >"$f.wrk.txt" 2>&1 || true
    local cpu_m="" cpu_r=0 i
    for i in "${!masters[@]}"; do
        cpu_m+="${cpu_m:+,}$(awk -v a="${before_m[i]}" -v b="$(cpu_seconds "${masters[i]}")" 'BEGIN { printf "%.6f", b - a }')"
    done
    for i in "${!replicas[@]}"; do
        cpu_r=$(awk -v s="$cpu_r" -v a="${before_r[i]}" -v b="$(cpu_seconds "${replicas[i]}")" 'BEGIN { printf "%.6f", s + b - a }')
    done
    local wrk_json
    wrk_json=$(grep -m1 '^{"tool":"wrk-orders"' "$f.wrk.txt" || echo '{}')
    jq -c --arg mode "$mode" --argjson m "$m" --argjson cpu "[$cpu_m]" --argjson rcpu "$cpu_r" '
        (.units_201 // 0) as $n
        | {mode: $mode, masters: $m, req_per_s: (.req_per_s // 0), placed: $n,
           master_us: [$cpu[] | if $n > 0 then . * 1e6 / $n else 0 end],
           replica_us: (if $n > 0 then $rcpu * 1e6 / $n else 0 end),
           errors: ((.requests // 0) - (.status_201 // 0) +
               ([.socket_errors // {} | .[]] | add // 0)),
           ran: (.requests != null)}
        | . + {sum_us: (.master_us | add), busiest_share:
               (if (.master_us | add) > 0 then (.master_us | max) / (.master_us | add) else 0 end)}' \
        <<<"$wrk_json" >"$f.json"
    [[ $(jq -r .ran "$f.json") == true ]] || any_error=1
    progress "$mode, $m master(s) (up in $((SECONDS - t0))s): $(jq -r '"\(.req_per_s) req/s, placed \(.placed), Redis µs/order per master \(.master_us | map(. * 10 | round / 10))"' "$f.json")"
    lt_cluster_down || progress "cluster down failed"
}

for mode in "${mode_list[@]}"; do
    for m in "${size_list[@]}"; do run "$mode" "$m"; done
done

# ---- report: ratios to the first size of each mode, table, JSON ------------------------
jq -s --argjson first "${size_list[0]}" '
    (map(select(.masters == $first)) | map({key: .mode, value: .}) | from_entries) as $base
    | map(. + {x_first: (if ($base[.mode].req_per_s // 0) > 0
                          then .req_per_s / $base[.mode].req_per_s else null end)})
    | sort_by([.mode, .masters])' "$out"/steps/*.json >"$out/rows.json"
{
    printf '%-7s %7s %8s %7s %7s %-24s %8s %8s %8s %6s\n' mode masters req/s x_first placed \
        'master_us/order' sum_us busiest replica_us errors
    jq -r '.[] | [.mode, .masters, .req_per_s, (.x_first // -1), .placed,
        (.master_us | map(. * 10 | round / 10 | tostring) | join(",")), .sum_us,
        .busiest_share, .replica_us, .errors] | @tsv' "$out/rows.json" |
        while IFS=$'\t' read -r mo m r x pl per sum b rep e; do
            printf '%-7s %7d %8.0f %7.2f %7d %-24s %8.1f %8.2f %8.1f %6d\n' \
                "$mo" "$m" "$r" "$x" "$pl" "$per" "$sum" "$b" "$rep" "$e"
        done
} | tee "$out/table.txt"
jq -n --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg sizes "$sizes" \
    --arg bin "$(seckill_bin)" --slurpfile rows "$out/rows.json" \
    '{created: $created, masters: $sizes, segments: 16, server: $bin, rows: $rows[0]}' \
    >"$out/shards.json"
echo "shards: $out/shards.json"
exit "$any_error"
