#!/usr/bin/env bash
# Runs every test: the cmocka binaries in $SECKILL_BUILD/tests (unit tests and
# integration tests that start their own redis-server), then the integration
# scripts tests/it_*.sh (real instances, real load balancer, on loopback).
# Prints "N passed, N failed" last; exits non-zero when anything failed. A test that
# exits 77 (automake's convention) was skipped: it says why on its output, counts
# neither as passed nor as failed, and is named on a "skipped:" line before the summary.
#
#   tests/run.sh [FILTER]   only the tests whose name contains FILTER
#   SECKILL_BUILD           build directory (build, build/address, build/thread, ...)
#   SECKILL_TESTS           space-separated test names to run (default: all)
#
# Sanitizer builds: every process of a test that carries a sanitizer runtime (the
# cmocka binaries, every server instance a script starts, however deep) writes its
# reports to $SECKILL_BUILD/sanitizer/<test>/, through ASAN/UBSAN/TSAN_OPTIONS'
# log_path. A test that left any report there fails, whatever its own verdict: a
# server instance's data race or leak is not lost in a log nobody reads.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${SECKILL_BUILD:-build}
export SECKILL_BUILD=$build
export SECKILL_BIN=${SECKILL_BIN:-$build/seckill}
only=${1:-}
selected=${SECKILL_TESTS:-}
san_root=$build/sanitizer
[[ $san_root == /* ]] || san_root=$PWD/$san_root
rm -rf "$san_root"
# Options common to every test; log_path is appended per test. exitcode makes a
# process with a report exit non-zero too (a cmocka binary then fails by itself).
san_asan="exitcode=97:detect_leaks=1:abort_on_error=0:print_summary=1"
san_ubsan="exitcode=97:print_stacktrace=1:halt_on_error=1"
san_tsan="exitcode=97:halt_on_error=0:second_deadlock_stack=1:history_size=4"
san_tsan+=":suppressions=$PWD/tests/tsan.supp"

passed=0
failed=0
failures=()
skips=()
run() {
    local name=$1
    shift
    local start=$SECONDS ok=1 san=$san_root/$name reports rc=0
    echo "=== $name"
    mkdir -p "$san"
    ASAN_OPTIONS="$san_asan:log_path=$san/asan" UBSAN_OPTIONS="$san_ubsan:log_path=$san/ubsan" \
        TSAN_OPTIONS="$san_tsan:log_path=$san/tsan" "$@" || rc=$?
    ((rc == 0)) || ok=0
    reports=$(find "$san" -type f -size +0 2>/dev/null | sort)
    if [[ -n $reports ]]; then
        ok=0
        echo "sanitizer reports of $name (kept in $san):"
        for f in $reports; do
            echo "--- $f"
            head -n 60 "$f"
        done
    fi
    if ((rc == 77)) && [[ -z $reports ]]; then
        skips+=("$name")
        echo "--- SKIP $name ($((SECONDS - start))s)"
    elif ((ok)); then
        passed=$((passed + 1))
        echo "--- ok   $name ($((SECONDS - start))s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "--- FAIL $name ($((SECONDS - start))s)"
    fi
}
wanted() { # NAME: selected by FILTER and SECKILL_TESTS
    [[ -z $only || $1 == *"$only"* ]] || return 1
    [[ -z $selected || " $selected " == *" $1 "* ]]
}

for t in "$build"/tests/test_*; do
    [[ -x $t ]] || continue
    wanted "$(basename "$t")" || continue
    run "$(basename "$t")" "$t"
done
for t in tests/it_*.sh; do
    [[ -f $t ]] || continue
    wanted "$(basename "$t" .sh)" || continue
    run "$(basename "$t" .sh)" bash "$t"
done

echo
if ((${#skips[@]})); then
    echo "skipped: ${skips[*]}"
fi
if ((failed)); then
    echo "failed: ${failures[*]}"
fi
echo "$passed passed, $failed failed"
((failed == 0))
