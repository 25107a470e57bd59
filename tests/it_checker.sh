#!/usr/bin/env bash
# The Jepsen checker, loadtest/jepsen/checker.py, against its hand-written runs
# (loadtest/jepsen/test_checker.py): a valid run passes, each violation kind is caught
# and its near misses are not, malformed input exits 2, --expect-invalid, --json and
# --chart. Pure Python (standard library): no server, not even the binary. Skipped
# (exit 77) without python3. Under a second.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/checks.sh
source "$ROOT/tests/checks.sh"
if ! command -v python3 >/dev/null; then
    echo "python3 not installed: skipped"
    exit 77
fi

cd "$ROOT"
if check "python3 -m unittest loadtest/jepsen/test_checker.py" \
    python3 -m unittest loadtest/jepsen/test_checker.py; then :; fi
checks_summary
