#!/usr/bin/env bash
# patch_lat.sh — how long a merchant's change takes under S1 load (issue 49's target:
# p99 <= 100 ms from the PATCH to its answer).
#
#   loadtest/patch_lat.sh [--lock MODE] [--patches N] [--conns C] [--postgres]
#                         [--segments K] [--work-us US] [--out DIR] [--keep]
#
#   --lock MODE    the instances' lock mode (redis; any with a read-write lock: zk, pg,
#                  local, none; atomic takes none)
#   --patches N    the changes sent, one after the other (200): add 10 and withdraw 10
#                  alternating, each to the next instance in turn (not through the
#                  balancer: each instance takes its share of the writers)
#   --conns C      wrk's connections (256, S1 -c256; 64 for S1 -c64; 0: no load, the
#                  baseline)
#   --postgres     the instances with --postgres (each change is an event in the outbox
#                  and the sink carries it, with the orders', to PostgreSQL)
#   --segments K   16, as make bench
#   --work-us US   the instances' --work-us (0): time spent in each critical section
#   --out DIR      where patch_lat.json goes (results/patch-lat-<time>/,
#                  results/patch-lat-latest links to it)
#   --keep         keep the cluster's logs under DIR/cluster
#
# Set-up: scripts/cluster.sh (a data Redis, 3 seckill instances behind nginx), the S1
# SKU of stock 10^9 (it never runs out), K segments. wrk -t2 -cC through the balancer
# with loadtest/orders.lua (a new user per request, as make bench's S1) runs for the
# whole measurement; after a 1 s warm-up the changes are sent to the very SKU wrk buys
# (the writer meets the holds in progress), one after the other, each timed by
# curl (time_total: connect to the last byte; curl's own start is not in it). Reports
# the changes' p50, p90, p99 and max (ms), wrk's req/s and p99 over the same time, and
# whether every change answered 200 and the audit balances after it.
# Exit status 0 when every change answered 200 and the books balance; the latency
# target is reported, not enforced.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

lock=redis patches=200 conns=256 pg=0 segments=16 work_us=0 out="" keep=never
while (($#)); do
    case $1 in
    --lock) lock=$2; shift 2 ;;
    --patches) patches=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --postgres) pg=1; shift ;;
    --segments) segments=$2; shift 2 ;;
    --work-us) work_us=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=always; shift ;;
    -h | --help) usage_from_header "$0"; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
    esac
done
[[ $patches =~ ^[1-9][0-9]*$ && $conns =~ ^[0-9]+$ ]] || die "--patches: a positive integer; --conns: an integer >= 0"
lt_require wrk curl jq
lt_out "patch-lat-$(date +%Y%m%d-%H%M%S)" patch-lat-latest
lt_traps "$keep"
wrk_pid=""
lt_on_exit() { [[ -z $wrk_pid ]] || kill "$wrk_pid" 2>/dev/null || true; }

up=(--instances 3 --lb nginx --lock "$lock")
((pg)) && up+=(--postgres)
up+=(-- --segments "$segments" --log-level warn --work-us "$work_us")
lt_cluster_up "$out/cluster" "$out/up.err" "${up[@]}" || die "cluster did not start: $UP_ERROR"
read -r -a inst <<<"$INSTANCE_URLS"
sku=s1
put_sku "$sku" 1000000000 "$segments" || die "PUT $sku refused"
log "cluster up (lock $lock, 3 instances, nginx, K=$segments$( ((pg)) && echo ', --postgres'))"

# wrk for longer than the changes can take; stopped once they are done
: >"$out/wrk.txt"
if ((conns > 0)); then
    wrk -t2 -c "$conns" -d 600s -s "$LUA" "$LB_URL" -- "$sku" 0 1 "p$$x$RANDOM" >"$out/wrk.txt" 2>&1 &
    wrk_pid=$!
    sleep 1 # the warm-up: wrk's connections open and the loops busy
fi
placed_at() { curl -s "${inst[0]}/skus/$sku" | jq -r .sold; }
sold0=$(placed_at)
t0=${EPOCHREALTIME/./}
: >"$out/patches.txt"
added=0 withdrawn=0 bad=0
for i in $(seq 0 $((patches - 1))); do
    u=${inst[i % ${#inst[@]}]}
    if ((i % 2 == 0)); then body='{"add":10}'; else body='{"withdraw":10}'; fi
    res=$(curl -s --max-time 10 -o "$out/patch.body" -w '%{http_code} %{time_total}' \
        -X PATCH -H 'Content-Type: application/json' "$u/skus/$sku" -d "$body") || res="000 10"
    read -r code secs <<<"$res"
    echo "$i $code $secs" >>"$out/patches.txt"
    if [[ $code == 200 ]]; then
        ((i % 2 == 0)) && added=$((added + 10)) ||
            withdrawn=$((withdrawn + $(jq -r .withdrawn "$out/patch.body")))
    else
        bad=$((bad + 1))
    fi
done
t1=${EPOCHREALTIME/./}
sold1=$(placed_at)
if [[ -n $wrk_pid ]]; then
    kill -INT "$wrk_pid" 2>/dev/null || true
    wait "$wrk_pid" 2>/dev/null || true
    wrk_pid=""
fi
secs=$(((t1 - t0) / 1000)) # ms
audit=$(curl -s --max-time 60 "${inst[1]}/skus/$sku/audit")

jq -n --arg lock "$lock" --argjson pg "$pg" --argjson conns "$conns" \
    --argjson segments "$segments" --argjson work_us "$work_us" \
    --argjson n "$patches" --argjson bad "$bad" --argjson added "$added" \
    --argjson withdrawn "$withdrawn" --argjson ms "$secs" \
    --argjson orders $((sold1 - sold0)) --argjson audit "$audit" --argjson ms_total "$secs" \
    --rawfile lat "$out/patches.txt" --rawfile wrk "$out/wrk.txt" '
    def pct(p): . as $a | $a[(((($a | length) * p) | ceil) - 1) | if . < 0 then 0 else . end];
    ($lat | split("\n") | map(select(length > 0) | split(" ") | (.[2] | tonumber) * 1000)
        | sort) as $ms
    | ($wrk | split("\n") | map(select(startswith("{\"tool\":\"wrk-orders\"")))
        | (.[0] // "null") | fromjson?) as $w
    | {lock: $lock, postgres: ($pg == 1), wrk_conns: $conns, segments: $segments,
       work_us: $work_us, patches: $n, not_200: $bad, added: $added, withdrawn: $withdrawn,
       patch_ms: {p50: ($ms | pct(0.5)), p90: ($ms | pct(0.9)), p99: ($ms | pct(0.99)),
                  max: ($ms | max)},
       during_s: ($ms_total / 1000), orders_placed_meanwhile: $orders,
       orders_per_s: (if $ms_total > 0 then ($orders * 1000 / $ms_total | floor) else null end),
       wrk: ($w | if . then {req_per_s, p50_ms, p99_ms} else null end),
       books_balance: ($audit.sold + $audit.remaining == $audit.initial + $audit.added
                       - $audit.withdrawn and $audit.added == $added
                       and $audit.withdrawn == $withdrawn),
       consistent: $audit.consistent, oversold: $audit.oversold}' >"$out/patch_lat.json" 2>"$out/jq.err" ||
    die "report: $(cat "$out/jq.err")"
jq -r '"lock \(.lock)\(if .postgres then " --postgres" else "" end), wrk -c\(.wrk_conns), K=\(.segments): \(.patches) changes in \(.during_s) s, \(.not_200) not 200; PATCH ms p50 \(.patch_ms.p50 | . * 10 | round / 10) p90 \(.patch_ms.p90 | . * 10 | round / 10) p99 \(.patch_ms.p99 | . * 10 | round / 10) max \(.patch_ms.max | . * 10 | round / 10); orders meanwhile \(.orders_placed_meanwhile) (\(.orders_per_s)/s\(if .wrk then ", an order p50 \(.wrk.p50_ms) p99 \(.wrk.p99_ms) ms" else "" end)); books balance \(.books_balance), consistent \(.consistent), oversold \(.oversold); target p99 <= 100 ms \(if .patch_ms.p99 <= 100 then "met" else "MISSED" end)"' \
    "$out/patch_lat.json"
jq -e '.not_200 == 0 and .books_balance and .consistent' "$out/patch_lat.json" >/dev/null
