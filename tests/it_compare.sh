#!/usr/bin/env bash
# it_compare.sh — make bench BASE=REV's harness (loadtest/compare.sh) in quick mode:
# BASE=HEAD, atomic, S1 at -c64, 1 s steps, 2 rounds. Asserts the report, not the speed:
#   - it exits 0; each round ran both (BASE first in odd rounds, HEAD first in even ones), each a bench.sh run with its bench.json;
#   - the report prints, for the one step, Redis CPU per order, seckill CPU per request
#     and req/s, first in that order, each with BASE and HEAD as "median (min-max)" and
#     a ratio;
#   - compare.json is valid: BASE is HEAD's commit, built from its worktree; each figure
#     has both sides over the 2 rounds, their median, min and max are those of the rounds'
#     bench.json, and the ratio is HEAD's median over BASE's;
#   - the worktree is gone, from the disk and from git's list, and nothing is left
#     running;
#   - a BASE that does not resolve, and one that does not build (a commit of a Makefile
#     that fails, in objects of the test's own), each stop at once with a clear message,
#     exit 1, no results dir, no worktree left.
# About a minute (two 1 s benches a round, and building BASE once).
#
#   tests/it_compare.sh      SECKILL_BIN / SECKILL_BUILD: HEAD's server (default build/seckill)
#
# Last line: "N passed, N failed"; exit status 1 when anything failed.
# shellcheck disable=SC2317 # functions run from traps and check look unreachable
set -uo pipefail

# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin compare jq wrk nginx redis-server git python3
it_plain_only "loadtest/compare.sh (make bench BASE=REV)"

worktrees() { git -C "$ROOT" worktree list --porcelain | sed -n 's/^worktree //p' | sort; }
no_base_dirs() { ! compgen -G "$dir/tmp/seckill-base.*" >/dev/null; }
before=$(worktrees)
# compare.sh makes its worktree under $TMPDIR: the test's own, to look for leftovers
mkdir -p "$dir/tmp"

OUT=$dir/compare
rc=0
TMPDIR=$dir/tmp BENCH_QUICK=1 "$ROOT/loadtest/compare.sh" --base HEAD --rounds 2 \
    --systems atomic --scenarios s1-c64 --out "$OUT" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
check "compare.sh exits 0" eq "$rc" 0
J=$OUT/compare.json
if ! jq -e . "$J" >/dev/null 2>&1; then
    check "compare.json written and valid" false
    tail -n 20 "$dir/stderr"
    checks_finish
fi
q() { jq -r "$1" "$J" 2>/dev/null; }
head_commit=$(git -C "$ROOT" rev-parse HEAD)

for i in 1 2; do
    for side in base head; do
        check "round $i $side: bench.json" jq -e '.results | length == 1' "$OUT/round-$i/$side/bench.json" >/dev/null
    done
done
check "stderr: round 1 ran BASE, then HEAD, round 2 HEAD, then BASE" \
    eq "$(grep -oE '^== round [0-9]/2: (BASE|HEAD)' "$dir/stderr" | awk '{ print $3 $4 }' | paste -sd' ')" \
    "1/2:BASE 1/2:HEAD 2/2:HEAD 2/2:BASE"
check "compare.json: 2 rounds, quick" eq "$(q '"\(.rounds) \(.quick)"')" "2 true"
check "compare.json: BASE is HEAD's commit" eq "$(q .base.commit)" "$head_commit"
check "compare.json: BASE's binary is its worktree's, and says its commit" \
    eq "$(jq -r --arg c "${head_commit:0:12}" \
        '.base as $b | ($b.binary | startswith($b.worktree + "/")) and ($b.version | contains($c))' "$J")" true
check "compare.json: one row, s1-c64 atomic" eq "$(q '[.results[] | "\(.scenario) \(.system)"] | join(",")')" \
    "s1-c64 atomic"
check "compare.json: CPU first, then req/s" \
    eq "$(q '.results[0].metrics | keys_unsorted | join(" ")')" \
    "redis_cpu_us_per_order redis_orders_per_core_s redis_calls_per_order seckill_cpu_us_per_request machine_cpu_us_per_request req_per_s"
check "compare.json: no error" eq "$(q '.errors | length')" 0
for m in redis_cpu_us_per_order redis_orders_per_core_s redis_calls_per_order seckill_cpu_us_per_request machine_cpu_us_per_request req_per_s; do
    for side in base head; do
        vals=$(jq -c --arg m "$m" '[.results[0][$m]]' "$OUT"/round-{1,2}/"$side"/bench.json | jq -sc add)
        got=$(q ".results[0].metrics.$m.$side | [.values, .n, .min, .max] | tostring")
        want=$(jq -c '[., length, min, max]' <<<"$vals")
        check "$m $side: the rounds' values, min, max ($got)" eq "$got" "$want"
        check "$m $side: the median of 2 is their mean ($(q ".results[0].metrics.$m.$side.median"))" \
            eq "$(jq -r --argjson v "$vals" ".results[0].metrics.$m.$side.median - (\$v | add / 2) | fabs < 0.001" "$J")" true
    done
    check "$m: the ratio is HEAD's median over BASE's ($(q ".results[0].metrics.$m.ratio"))" \
        eq "$(q ".results[0].metrics.$m | (.ratio > 0) and (.ratio - (.head.median / .base.median) | fabs) < 0.001")" true
done
line() { # LABEL: the report's line of that figure, as "BASE HEAD ratio" patterns matched
    grep -qE "^s1-c64 +atomic +$1 +[0-9.]+ \([0-9.]+-[0-9.]+\) +[0-9.]+ \([0-9.]+-[0-9.]+\) +[0-9]+\.[0-9]{2}" "$dir/stdout"
}
for l in redis_us/order ord/s/core redis_cmds/order seckill_us/req machine_us/req req/s; do
    check "stdout: $l, BASE and HEAD median (min-max), ratio" line "$l"
done
check "stdout: the CPU lines before req/s" \
    eq "$(grep -oE '^s1-c64 +atomic +[a-z_/]+' "$dir/stdout" | awk '{ print $3 }' | paste -sd' ')" \
    "redis_us/order ord/s/core redis_cmds/order seckill_us/req machine_us/req req/s"
check "stdout: the header" grep -qE '^scenario +system +figure +BASE median \(min-max\) +HEAD median \(min-max\) +HEAD/BASE' "$dir/stdout"

wt=$(q .base.worktree)
check "the worktree is gone from the disk ($wt)" test ! -e "$wt"
check "the worktree is gone from git's list" eq "$(worktrees)" "$before"
check "no seckill-base dir left in TMPDIR" no_base_dirs

# ---- a BASE that does not resolve, one that does not build --------------------------
rc=0
TMPDIR=$dir/tmp "$ROOT/loadtest/compare.sh" --base no-such-rev-here --out "$dir/bad1" \
    >"$dir/bad1.out" 2>&1 || rc=$?
check "unknown BASE: exit 1" eq "$rc" 1
check "unknown BASE: says so" grep -q "BASE 'no-such-rev-here' is no commit" "$dir/bad1.out"
check "unknown BASE: no results dir" test ! -e "$dir/bad1"

# A commit whose Makefile fails, written to objects of the test's own (the repository's
# are read through the alternates, and nothing is written to them).
GIT_ALTERNATE_OBJECT_DIRECTORIES=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir)/objects
export GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_OBJECT_DIRECTORY=$dir/objects
mkdir -p "$GIT_OBJECT_DIRECTORY"
blob=$(printf 'all:\n\t@echo "seckill-it: this base does not build" >&2; exit 1\n' |
    git -C "$ROOT" hash-object -w --stdin)
broken=$(printf '100644 blob %s\tMakefile\n' "$blob" | git -C "$ROOT" mktree |
    xargs git -C "$ROOT" commit-tree -m "it_compare: a base that does not build")
rc=0
TMPDIR=$dir/tmp "$ROOT/loadtest/compare.sh" --base "$broken" --out "$dir/bad2" \
    >"$dir/bad2.out" 2>&1 || rc=$?
unset GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
check "BASE that does not build: exit 1" eq "$rc" 1
check "BASE that does not build: says so" grep -q "BASE ${broken:0:7}.* does not build" "$dir/bad2.out"
check "BASE that does not build: the end of its build log shown" \
    grep -q "seckill-it: this base does not build" "$dir/bad2.out"
check "BASE that does not build: no results dir" test ! -e "$dir/bad2"
check "BASE that does not build: no worktree left" eq "$(worktrees)" "$before"
check "BASE that does not build: no seckill-base dir left" no_base_dirs

# The clusters' nginx and redis-server run with paths under $OUT: none may be left.
left=""
for f in /proc/[0-9]*/cmdline; do
    c=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
    if [[ $c == *"$OUT/"* || $c == *"$dir/tmp/"* ]]; then left+="${f%/cmdline} "; fi
done
check "nothing left running" eq "$left" ""

checks_finish
