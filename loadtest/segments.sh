#!/usr/bin/env bash
# segments.sh — what the segment count costs (make bench runs it after bench.sh): one
# hot SKU at several K through the same set-up, in one run, with a progress line per step.
#
#   loadtest/segments.sh [--quick] [--ks LIST] [--lock MODE] [--out DIR]
#
#   --quick        a smoke test: 1 s per step (also BENCH_QUICK=1)
#   --ks LIST      segment counts, comma-separated (16,1024,1); the ratios are to the first
#   --lock MODE    the lock mode (redis)
#   --out DIR      where segments.json goes (results/segments-<time>/,
#                  results/segments-latest links to it)
#
# Per K, a fresh cluster (scripts/cluster.sh: a data Redis, 3 instances behind nginx),
# wrk -t2 -c64 through the balancer (loadtest/orders.lua, a new user per request):
#   selling   a SKU of 10^9 units in K segments (it never runs out)       4 s
#   tail      a SKU of 4096 units in K segments, sold to the last unit    5 s
#   sold out  the same SKU once sold out                                  3 s
# Columns: req/s, p50/p99 (ms); x_first and p99_x_first: req/s and p99 over the first
# K's in the same step; tail_s: the seconds it took to sell the last 10% of the units
# (tail step); placed: units the 201s placed; left: what GET /skus says remains after the
# step; errors: answers other than 201 and 409 sold_out, and socket errors.
#
# SECKILL_BIN / SECKILL_BUILD choose the server (to compare with another build).
# Exit status 0 when every step ran, 1 otherwise. Ctrl-C stops the running cluster.
# shellcheck disable=SC2317 # functions run from traps look unreachable
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"
INSTANCES=3 CONNECTIONS=64 WRK_THREADS=2 SELL_STOCK=1000000000 TAIL_STOCK=4096

ks="16,1024,1" lock=redis out=""
quick=${BENCH_QUICK:-0}
usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }
while (($#)); do
    case $1 in
    --quick) quick=1; shift ;;
    --ks) ks=${2:?"$1 needs a value"}; shift 2 ;;
    --lock) lock=${2:?"$1 needs a value"}; shift 2 ;;
    --out) out=${2:?"$1 needs a value"}; shift 2 ;;
    -h | --help) usage 0 ;;
    *) log "unknown option $1"; usage ;;
    esac
done
IFS=', ' read -r -a k_list <<<"$ks"
for k in "${k_list[@]}"; do
    [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= 1024)) || die "--ks: segment counts are 1..1024 (got '$k')"
done
if [[ $quick == 1 ]]; then d_sell=1s d_tail=1s d_out=1s; else d_sell=4s d_tail=5s d_out=3s; fi
lt_require jq wrk curl
lt_out "segments-$(date +%Y%m%d-%H%M%S)" segments-latest steps
lt_traps never
TOTAL=$((${#k_list[@]} * 3))

# step NAME K SKU DURATION [tail]: one wrk run; writes $out/steps/NAME.K.json.
step() {
    local name=$1 k=$2 sku=$3 d=$4 tail=${5:-} f=$out/steps/$1.$2 wrk_json left
    STEP=$((STEP + 1))
    wrk -t "$WRK_THREADS" -c "$CONNECTIONS" -d "$d" -s "$LUA" "$LB_URL" \
        -- "$sku" 0 1 "k$k$$x$RANDOM" $tail >"$f.wrk.txt" 2>&1 || true
    wrk_json=$(grep -m1 '^{"tool":"wrk-orders"' "$f.wrk.txt" || echo '{}')
    left=$(curl -s --max-time 10 "$LB_URL/skus/$sku" | jq -r '.remaining // -1' 2>/dev/null) || left=-1
    jq -c --arg step "$name" --argjson k "$k" --argjson left "${left:--1}" '{
        step: $step, k: $k, req_per_s: (.req_per_s // 0), p50_ms: (.p50_ms // 0),
        p99_ms: (.p99_ms // 0), tail_s: (.tail_s // -1), placed: (.units_201 // 0),
        left: $left, errors: ((.busy // 0) + (.unavailable // 0) + (.outcome_unknown // 0) +
            (.limit_reached // 0) + (.other_409 // 0) + (.other_503 // 0) + (.other // 0) +
            ([.socket_errors // {} | .[]] | add // 0)),
        ran: (.requests != null)}' <<<"$wrk_json" >"$f.json"
    [[ $(jq -r .ran "$f.json") == true ]] || any_error=1
    progress "$name, K=$k: $(jq -r '"\(.req_per_s) req/s, p99 \(.p99_ms) ms, placed \(.placed), left \(.left)"' "$f.json")"
}

run_k() { # K
    local k=$1 dir=$out/clusters/k$1 t0=$SECONDS
    mkdir -p "$out/clusters"
    if ! lt_cluster_up "$dir" "$dir.up.err" --instances "$INSTANCES" --lb nginx --lock "$lock" \
        -- --segments "$k" --log-level warn; then
        progress "K=$k: cluster did not start: $UP_ERROR"
        any_error=1 STEP=$((STEP + 3))
        return
    fi
    progress "K=$k: cluster up in $((SECONDS - t0))s ($lock, $INSTANCES instances, nginx)"
    put_sku "sell-$k" "$SELL_STOCK" "$k" && step selling "$k" "sell-$k" "$d_sell"
    put_sku "tail-$k" "$TAIL_STOCK" "$k" && step tail "$k" "tail-$k" "$d_tail" tail
    step "sold out" "$k" "tail-$k" "$d_out"
    lt_cluster_down || progress "cluster down failed"
}

for k in "${k_list[@]}"; do run_k "$k"; done

# ---- report: ratios to the first K, table, JSON -----------------------------------------
jq -s --argjson first "${k_list[0]}" '
    (map(select(.k == $first)) | map({key: .step, value: .}) | from_entries) as $base
    | map(. + {x_first: (if ($base[.step].req_per_s // 0) > 0
                          then .req_per_s / $base[.step].req_per_s else null end),
               p99_x_first: (if ($base[.step].p99_ms // 0) > 0
                             then .p99_ms / $base[.step].p99_ms else null end)})
    | sort_by([.step, .k])' "$out"/steps/*.json >"$out/rows.json"
{
    printf '%-9s %5s %9s %8s %8s %8s %11s %7s %7s %5s %6s\n' step K req/s p50_ms p99_ms x_first \
        p99_x_first tail_s placed left errors
    jq -r '.[] | [.step, .k, .req_per_s, .p50_ms, .p99_ms, (.x_first // -1), (.p99_x_first // -1),
        .tail_s, .placed, .left, .errors] | @tsv' "$out/rows.json" |
        while IFS=$'\t' read -r s k r p50 p99 x px t pl l e; do
            printf '%-9s %5d %9.0f %8.2f %8.2f %8.2f %11.2f %7.2f %7d %5d %6d\n' \
                "$s" "$k" "$r" "$p50" "$p99" "$x" "$px" "$t" "$pl" "$l" "$e"
        done
} | tee "$out/table.txt"
jq -n --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg lock "$lock" --arg ks "$ks" \
    --arg bin "$(seckill_bin)" --slurpfile rows "$out/rows.json" \
    '{created: $created, lock: $lock, ks: $ks, server: $bin, rows: $rows[0]}' >"$out/segments.json"
echo "segments: $out/segments.json"
exit "$any_error"
