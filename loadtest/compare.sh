#!/usr/bin/env bash
# compare.sh — two builds side by side (make bench BASE=REV): the server of another
# commit against this checkout's, in alternating rounds of loadtest/bench.sh, reported
# as the median and the range of each figure over the rounds and the ratio of the
# medians.
#
#   loadtest/compare.sh --base REV [--rounds N] [--out DIR] [bench.sh options...]
#
#   --base REV     the commit to compare against (anything git rev-parse takes: a hash,
#                  main~3, a tag)
#   --rounds N     rounds (BENCH_ROUNDS, else 3); an odd round runs BASE, then HEAD,
#                  an even one HEAD, then BASE
#   --out DIR      where the rounds and compare.json go
#                  (results/compare-<time>/, results/compare-latest links to it)
#   every other option goes to each bench.sh run as it is (--quick or BENCH_QUICK=1,
#   --systems, --scenarios, the durations); --no-chart is always given
#
# BASE is checked out in a throwaway git worktree (git worktree add --detach) in a temp
# dir and built there (make -s all, with $SANITIZER when set; its build output stays
# in that worktree, its log in build.log there). HEAD is the server this checkout built: $SECKILL_BIN, else
# $SECKILL_BUILD/seckill, else build/seckill (make bench builds it first). Both run
# under this checkout's bench.sh, cluster.sh and wrk script: the harness is the same,
# only the server binary differs. A BASE that does not resolve or does not build stops
# the run at once, with nothing left behind. The worktree is removed at the end, also
# when a run fails or on Ctrl-C (the running bench.sh is stopped first and takes its
# cluster down, which can take the rest of its current wrk step).
#
# Output: DIR/round-I/base/ and DIR/round-I/head/, each a bench.sh --out dir (bench.json,
# steps/, bench.txt: its table); then loadtest/compare.py prints, per scenario and
# system, Redis CPU and commands per placed order (per answer in S2), seckill CPU per
# request, the machine's CPU per request and
# req/s, BASE and HEAD as "median (min-max)" over the rounds, and HEAD/BASE of the
# medians, and writes DIR/compare.json.
#
# Exit status: 0 when every run ran every step, 1 otherwise (the report is still
# printed from what ran), 2 on a usage error.
# shellcheck disable=SC2317 # functions run from traps look unreachable
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

base="" rounds=${BENCH_ROUNDS:-3} out=""
bench_args=()
usage() { usage_from_header "${BASH_SOURCE[0]}" "${1:-2}"; }
while (($#)); do
    case $1 in
    --base) base=${2:?"$1 needs a value"}; shift 2 ;;
    --rounds) rounds=${2:?"$1 needs a value"}; shift 2 ;;
    --out) out=${2:?"$1 needs a value"}; shift 2 ;;
    -h | --help) usage 0 ;;
    --no-chart) shift ;;
    # bench.sh's options with a value keep it
    --systems | --scenarios | --s1 | --s2 | --cont | --warmup)
        bench_args+=("$1" "${2:?"$1 needs a value"}"); shift 2 ;;
    *) bench_args+=("$1"); shift ;;
    esac
done
[[ -n $base ]] || { log "--base REV is required (make bench BASE=REV)"; usage; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { log "--rounds: a whole number >= 1, got '$rounds'"; usage; }
lt_require jq python3 git

HEAD_BIN=$(seckill_bin)
head_rev=$(git -C "$ROOT" rev-parse --short HEAD)
git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || head_rev+="-dirty"
case $("$HEAD_BIN" --version 2>&1) in
*"$(git -C "$ROOT" rev-parse --short=12 HEAD)"*) ;;
*) log "warning: $HEAD_BIN says '$("$HEAD_BIN" --version 2>&1 | head -n 1)', this checkout is at $head_rev (make all first?)" ;;
esac
base_commit=$(git -C "$ROOT" rev-parse --verify --quiet "$base^{commit}") ||
    die "BASE '$base' is no commit of $ROOT (git rev-parse '$base^{commit}' failed)"
base_short=$(git -C "$ROOT" rev-parse --short "$base_commit")

# ---- cleanup: the running child stopped, then the worktree removed -------------------

wt_parent="" wt="" child=""
cleanup() {
    local rc=$?
    trap '' INT TERM # a second signal (Ctrl-C twice, timeout's to the group) cuts nothing short
    if [[ -n $child ]]; then
        kill -TERM "$child" 2>/dev/null || true
        wait "$child" 2>/dev/null || true
        child=""
    fi
    # git's record of the worktree goes with it; should remove fail, that record (named
    # in the worktree's .git file) is removed by hand, no other worktree's touched
    if [[ -n $wt ]] && ! git -C "$ROOT" worktree remove --force "$wt" >/dev/null 2>&1; then
        local admin
        admin=$(sed -n 's/^gitdir: //p' "$wt/.git" 2>/dev/null) || true
        [[ -z $admin || $admin != */worktrees/* ]] || rm -rf "$admin"
    fi
    [[ -z $wt_parent ]] || rm -rf "$wt_parent"
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'exit 143' TERM

# run_child CMD...: CMD in the background, waited for, so that a signal to this script
# is handled at once (the trap stops CMD) rather than when CMD ends. Its status.
run_child() {
    local rc=0
    "$@" &
    child=$!
    wait "$child" || rc=$?
    child=""
    return "$rc"
}

# ---- BASE: a worktree, built -----------------------------------------------------------

# $SANITIZER (make bench SANITIZER=... BASE=...) builds BASE as HEAD was built
base_build=build${SANITIZER:+/$SANITIZER}
wt_parent=$(mktemp -d "${TMPDIR:-/tmp}/seckill-base.XXXXXX")
wt=$wt_parent/$base_short
log "BASE $base_short: worktree $wt, make -s all"
if ! git -C "$ROOT" worktree add --quiet --detach "$wt" "$base_commit" >"$wt_parent/add.log" 2>&1; then
    cat "$wt_parent/add.log" >&2
    die "BASE $base_short: git worktree add failed"
fi
t0=$SECONDS
if ! run_child make -C "$wt" -s --no-print-directory all >"$wt/build.log" 2>&1 ||
    [[ ! -x $wt/$base_build/seckill ]]; then
    tail -n 25 "$wt/build.log" >&2
    die "BASE $base_short does not build (make -s all in its worktree; the end of its log is above)"
fi
BASE_BIN=$wt/$base_build/seckill
log "BASE $base_short built in $((SECONDS - t0))s: $("$BASE_BIN" --version 2>&1 | head -n 1)"

# ---- the rounds --------------------------------------------------------------------------

if [[ -n $out ]]; then # an --out used before: its old rounds must not join this report
    mkdir -p "$out"
    rm -rf "$out"/round-* "$out/compare.json" "$out/meta.json"
fi
lt_out "compare-$(date +%Y%m%d-%H%M%S)" compare-latest
version() { "$1" --version 2>&1 | head -n 1; }
jq -n --arg base_rev "$base" --arg base_commit "$base_commit" --arg base_short "$base_short" \
    --arg base_subject "$(git -C "$ROOT" log -1 --format=%s "$base_commit")" \
    --arg base_bin "$BASE_BIN" --arg base_version "$(version "$BASE_BIN")" --arg wt "$wt" \
    --arg head_rev "$head_rev" --arg head_commit "$(git -C "$ROOT" rev-parse HEAD)" \
    --arg head_subject "$(git -C "$ROOT" log -1 --format=%s HEAD)" \
    --arg head_bin "$HEAD_BIN" --arg head_version "$(version "$HEAD_BIN")" \
    --argjson rounds "$rounds" --arg quick "${BENCH_QUICK:-0}" \
    --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --argjson args "$(for a in "${bench_args[@]}"; do printf '%s\n' "$a"; done | jq -Rnc '[inputs]')" '{
      created: $created, rounds: $rounds, bench_args: $args,
      quick: ($quick == "1" or any($args[]; . == "--quick")),
      base: {rev: $base_rev, commit: $base_commit, short: $base_short, subject: $base_subject,
             binary: $base_bin, version: $base_version, worktree: $wt},
      head: {rev: $head_rev, commit: $head_commit, short: $head_rev, subject: $head_subject,
             binary: $head_bin, version: $head_version}
    }' >"$out/meta.json"

failed=0
for ((i = 1; i <= rounds; i++)); do
    # the order alternates too (BASE first in odd rounds, HEAD first in even ones), so
    # that a drift of the machine within a round does not always favour one side
    sides="base head"
    ((i % 2 == 0)) && sides="head base"
    for side in $sides; do
        d=$out/round-$i/$side
        mkdir -p "$d"
        bin=$BASE_BIN label="BASE $base_short"
        [[ $side == head ]] && bin=$HEAD_BIN label="HEAD $head_rev"
        log "== round $i/$rounds: $label ($d)"
        rc=0
        run_child env SECKILL_BIN="$bin" "$ROOT/loadtest/bench.sh" --no-chart --out "$d" \
            "${bench_args[@]}" >"$d/bench.txt" || rc=$?
        if [[ ! -s $d/bench.json ]]; then
            tail -n 5 "$d/bench.txt" >&2
            die "round $i, $label: bench.sh wrote no bench.json (exit $rc); stopping"
        fi
        ((rc == 0)) || { failed=1; log "round $i, $label: bench.sh exit $rc (a step failed; see $d/bench.txt)"; }
    done
done

echo ""
python3 "$ROOT/loadtest/compare.py" "$out" || failed=1
echo "report: $out/compare.json  rounds: $out/round-*/{base,head}/"
exit "$failed"
