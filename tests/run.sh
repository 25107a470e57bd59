#!/usr/bin/env bash
# Runs every test: the cmocka binaries in $SECKILL_BUILD/tests (unit tests and
# integration tests that start their own redis-server), then the integration
# scripts tests/it_*.sh (real instances, real load balancer, on loopback).
# Prints "N passed, N failed" last; exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${SECKILL_BUILD:-build}
export SECKILL_BUILD=$build
export SECKILL_BIN=${SECKILL_BIN:-$build/seckill}
only=${1:-}

passed=0
failed=0
failures=()
run() {
    local name=$1
    shift
    local start=$SECONDS
    echo "=== $name"
    if "$@"; then
        passed=$((passed + 1))
        echo "--- ok   $name ($((SECONDS - start))s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "--- FAIL $name ($((SECONDS - start))s)"
    fi
}

for t in "$build"/tests/test_*; do
    [[ -x $t ]] || continue
    [[ -z $only || $(basename "$t") == *"$only"* ]] || continue
    run "$(basename "$t")" "$t"
done
for t in tests/it_*.sh; do
    [[ -f $t ]] || continue
    [[ -z $only || $(basename "$t") == *"$only"* ]] || continue
    run "$(basename "$t" .sh)" bash "$t"
done

echo
if ((failed)); then
    echo "failed: ${failures[*]}"
fi
echo "$passed passed, $failed failed"
((failed == 0))
