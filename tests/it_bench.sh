#!/usr/bin/env bash
# it_bench.sh — make bench's harness (loadtest/bench.sh) in quick mode over a subset:
# atomic, redis and canned, S1 at -c64, 1 s each. Asserts the report, not the speed:
#   - it exits 0, prints the table and the targets, writes bench.json and bench.png;
#   - every row has req/s > 0, p50 <= p99, no error answer; the seckill rows placed
#     orders, with Redis CPU, seckill CPU and context switches per request > 0 and
#     nothing oversold; canned has no Redis or seckill figures;
#   - round trips per placed order are what the code does: at most one for atomic (one
#     script per order, calls of concurrent orders pipelined into shared reads);
#     for redis at --batch 1 about two (acquire + read, commit + release), fewer at its
#     default batch (one hold serves several orders); without --batch at least three
#     (peek, acquire + read, commit + release);
#   - the ratios are req/s over atomic's and canned's (atomic's own x_atomic is 1);
#   - the batch label says whether the server has --batch;
#   - loadtest/segments.sh (quick, K=16 and 64) exits 0 with a row per step and K, no
#     error answer, ratios to K=16, no more units placed than the tail SKU lost, the
#     tail timed;
#   - nothing is left running.
#
#   tests/it_bench.sh        SECKILL_BIN / SECKILL_BUILD: the server (default build/seckill)
#
# Last line: "N passed, N failed"; exit status 1 when anything failed.
# shellcheck disable=SC2317 # functions run from traps and check look unreachable
set -uo pipefail

# shellcheck source=tests/lib.sh
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin bench jq wrk nginx redis-server gnuplot
it_plain_only "loadtest/bench.sh (make bench)"

OUT=$dir/bench
rc=0
"$ROOT/loadtest/bench.sh" --quick --systems atomic,redis,canned --scenarios s1-c64 \
    --out "$OUT" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
check "bench.sh exits 0" eq "$rc" 0
if [[ ! -s $OUT/bench.json ]] || ! jq -e . "$OUT/bench.json" >/dev/null 2>&1; then
    check "bench.json written and valid" false
    tail -n 20 "$dir/stderr"
    checks_finish
fi
J=$OUT/bench.json
q() { jq -r "$1" "$J" 2>/dev/null; } # a jq filter over bench.json, as text
row() { # SYSTEM FIELD: the field of the s1-c64 row of SYSTEM
    q "(.results[] | select(.scenario == \"s1-c64\" and .system == \"$1\") | .$2) // \"null\""
}
positive() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$ ]] && awk -v x="$1" 'BEGIN { exit !(x > 0) }'; }
between() { [[ $1 =~ ^[0-9.]+$ ]] && awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }
le() { [[ $1 =~ ^[0-9.]+$ && $2 =~ ^[0-9.]+$ ]] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
ordered() { positive "$1" && le "$1" "$2"; } # 0 < A <= B
lines() { [[ $(grep -cE "$2" "$3") -ge $1 ]]; } # at least N lines of FILE match the ERE
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }'; }

check "quick run recorded as such" eq "$(q .quick)" true
batched=0
# The help text read whole first: grep -q stops at the first match, and under
# pipefail the server's SIGPIPE on the rest of its output would read as "no".
if grep -q -- '--batch' <<<"$("$(seckill_bin)" --help 2>&1)"; then batched=1; fi
steps=$((3 + batched)) # redis runs twice with --batch: at its default and at 1
check "one row per system" eq "$(q '[.results[] | select(.scenario == "s1-c64")] | length')" $steps
if ((batched)); then
    check "batch: the server's default" eq "$(row redis batch)" default
    check "batch: redis-b1 at 1" eq "$(row redis-b1 batch)" 1
else
    check "batch labelled as unsupported" eq "$(row redis batch)" "1 (no --batch)"
fi

for s in atomic redis canned; do
    check "$s: req/s > 0 ($(row $s req_per_s))" positive "$(row $s req_per_s)"
    check "$s: 0 < p50 <= p99 ($(row $s p50_ms), $(row $s p99_ms))" \
        ordered "$(row $s p50_ms)" "$(row $s p99_ms)"
    check "$s: no error answer" eq "$(row $s errors)" 0
    check "$s: ran" eq "$(row $s error)" null
    check "$s: x_canned is req/s over canned's" \
        near "$(row $s ratio_canned)" "$(q "$(printf '%s / %s' "$(row $s req_per_s)" "$(row canned req_per_s)")")"
done
for s in atomic redis; do
    for f in placed redis_cpu_us_per_order seckill_cpu_us_per_request ctx_switches_per_request; do
        check "$s: $f > 0 ($(row $s $f))" positive "$(row $s $f)"
    done
    check "$s: nothing oversold" eq "$(row $s oversold)" 0
done
check "atomic: x_atomic is 1" eq "$(row atomic ratio_atomic)" 1
check "redis: x_atomic is req/s over atomic's" \
    near "$(row redis ratio_atomic)" "$(q "$(printf '%s / %s' "$(row redis req_per_s)" "$(row atomic req_per_s)")")"
if ((batched)); then
    check "atomic: at most one Redis round trip per order ($(row atomic redis_rt_per_order))" \
        between "$(row atomic redis_rt_per_order)" 0.001 1.3
else
    check "atomic: one Redis round trip per order ($(row atomic redis_rt_per_order))" \
        between "$(row atomic redis_rt_per_order)" 0.95 1.3
fi
if ((batched)); then
    # A hold per order costs it two round trips of its own, but the event loops
    # send the commands of concurrent holds in shared writes, which Redis reads
    # together: fewer reads per order than two, still more than when batched.
    check "redis-b1: round trips per order, holds sharing writes ($(row redis-b1 redis_rt_per_order))" \
        between "$(row redis-b1 redis_rt_per_order)" 0.5 50
    check "redis: fewer round trips per order at its default batch ($(row redis redis_rt_per_order) < $(row redis-b1 redis_rt_per_order))" \
        awk -v a="$(row redis redis_rt_per_order)" -v b="$(row redis-b1 redis_rt_per_order)" \
        'BEGIN { exit !(a + 0 > 0 && a + 0 < b + 0) }'
else
    check "redis: at least three round trips per order ($(row redis redis_rt_per_order))" \
        between "$(row redis redis_rt_per_order)" 2.9 50
fi
# Redis's commands per order (commandstats, the scripts' calls included): more than one
# (a script and what it runs), and fewer per order when a hold serves a batch
check "commands per order: above one (atomic $(row atomic redis_calls_per_order), redis $(row redis redis_calls_per_order))" \
    awk -v a="$(row atomic redis_calls_per_order)" -v r="$(row redis redis_calls_per_order)" \
    'BEGIN { exit !(a + 0 > 1 && r + 0 > 1) }'
if ((batched)); then
    check "redis: fewer commands per order at its default batch ($(row redis redis_calls_per_order) < $(row redis-b1 redis_calls_per_order))" \
        awk -v a="$(row redis redis_calls_per_order)" -v b="$(row redis-b1 redis_calls_per_order)" \
        'BEGIN { exit !(a + 0 > 0 && a + 0 < b + 0) }'
fi
check "canned: no Redis or seckill figures" \
    eq "$(row canned redis_rt_per_order)/$(row canned redis_calls_per_order)/$(row canned seckill_cpu_us_per_request)" null/null/null

# (redis-full's is null: it did not run)
check "targets: ten, S1 -c64 ones computed" \
    eq "$(q '[.targets | length, (.[] | select(.name | startswith("S1 -c64")) | .value | type)] | join(" ")')" \
    "10 number number number null number number"
check "machine CPU per request: every row, canned's the least (canned $(row canned machine_cpu_us_per_request), atomic $(row atomic machine_cpu_us_per_request))" \
    awk -v c="$(row canned machine_cpu_us_per_request)" -v a="$(row atomic machine_cpu_us_per_request)" \
    -v r="$(row redis machine_cpu_us_per_request)" 'BEGIN { exit !(c + 0 > 0 && c + 0 < a + 0 && c + 0 < r + 0) }'
check "stdout: the table's header" grep -q '^system  *batch  *req/s  *p50_ms  *p99_ms  *x_atomic  *x_canned' "$dir/stdout"
check "stdout: a row per system" lines $steps '^(atomic|redis|redis-b1|canned) ' "$dir/stdout"
check "stdout: the targets" grep -q 'S1 -c64 redis / atomic' "$dir/stdout"
check "stderr: a progress line per step" lines $steps "^\\[ *[1-$steps]/$steps " "$dir/stderr"
check "bench.png written" test -s "$OUT/bench.png"

# ---- loadtest/segments.sh: K=16 and K=64, quick --------------------------------------
SEG=$dir/segments
rc=0
"$ROOT/loadtest/segments.sh" --quick --ks 16,64 --out "$SEG" >"$dir/seg.stdout" \
    2>"$dir/seg.stderr" || rc=$?
check "segments.sh exits 0" eq "$rc" 0
sq() { jq -r "$1" "$SEG/segments.json" 2>/dev/null; }
check "segments: a row per step and K" \
    eq "$(sq '[.rows[] | "\(.step)@\(.k)"] | sort | join(" ")')" \
    "selling@16 selling@64 sold out@16 sold out@64 tail@16 tail@64"
check "segments: every step answered, no error answer" \
    eq "$(sq '[.rows[] | select(.req_per_s > 0 and .errors == 0)] | length')" 6
check "segments: the ratios are to the first K (K=16 is 1)" \
    eq "$(sq '[.rows[] | select(.k == 16) | .x_first] | unique | join(" ")')" 1
for k in 16 64; do
    # the units the client saw placed on the tail SKU are units it lost (not
    # equal: wrk drops the answers still in flight when its time is up)
    got=$(sq "[.rows[] | select(.k == $k and .step != \"selling\") | .placed] | add")
    lost=$((4096 - $(sq ".rows[] | select(.k == $k and .step == \"sold out\") | .left")))
    check "segments K=$k: tail + sold-out steps placed no more than the SKU lost ($got <= $lost)" \
        test "$got" -le "$lost"
    check "segments K=$k: the tail is timed" \
        test "$(sq ".rows[] | select(.k == $k and .step == \"tail\") | .tail_s >= 0")" = true
done
check "segments: the table on stdout" grep -q '^step  *K  *req/s .* tail_s' "$dir/seg.stdout"

# The clusters' nginx and redis-server run with paths under $OUT: none may be left.
left=""
for f in /proc/[0-9]*/cmdline; do
    c=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
    if [[ $c == *"$OUT"* || $c == *"$SEG"* ]]; then left+="${f%/cmdline} "; fi
done
check "nothing left running" eq "$left" ""

checks_finish
