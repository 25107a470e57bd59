#!/usr/bin/env bash
# coverage.sh BUILD OUT: line coverage of the core folders from the gcov counters a
# --coverage build's tests left in BUILD (make coverage): lcov's tracefile and the
# summary in OUT, and one line per folder and one for the four together on stdout:
#   coverage: service/ 81.2% (4012 of 4941 lines) ...
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: coverage.sh BUILD OUT}
out=${2:?usage: coverage.sh BUILD OUT}
mkdir -p "$out"
lcov --quiet --capture --directory "$build/obj" --base-directory . \
    --output-file "$out/all.info" 2>"$out/lcov.log"
folders=(service inventory lock redis)
patterns=()
for f in "${folders[@]}"; do patterns+=("$PWD/$f/*"); done
lcov --quiet --extract "$out/all.info" "${patterns[@]}" --output-file "$out/core.info" \
    2>>"$out/lcov.log"
for f in "${folders[@]}" core; do
    if [[ $f == core ]]; then
        info=$out/core.info
    else
        info=$out/$f.info
        lcov --quiet --extract "$out/all.info" "$PWD/$f/*" --output-file "$info" 2>>"$out/lcov.log"
    fi
    lcov --summary "$info" 2>&1 | awk -v f="$f" '/lines\.+:/ {
        gsub(/[()]/, ""); printf "coverage: %s %s (%s of %s lines)\n", (f == "core" ? "the four" : f "/"), $2, $3, $5 }'
done | tee "$out/summary.txt"
