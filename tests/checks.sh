# shellcheck shell=bash
# checks.sh — assertions for the integration scripts (source it after lib.sh).
#
#   expect NAME EXPECTED ACTUAL   passes when ACTUAL equals EXPECTED; says both when not
#   check NAME CMD...             passes when CMD succeeds; status 1 when it fails (so a
#                                 failed wait can be followed by `|| diagnose`)
#   eq A B, has_prefix S P        conditions for check
#   checks_summary                prints "N passed, N failed"; status 1 when any failed
#   checks_finish                 checks_summary, then exit with its status
#   checks_require TOOL...        fails and finishes unless the server binary and every
#                                 TOOL are there (needs lib.sh's seckill_bin)
#   checks_dispose DIR RC         removes DIR after a clean run (no failed check, RC 0),
#                                 else keeps it and says where the logs are
#
# Every script ends with the summary line, which tests/run.sh and CI read.

passed=0
failed=0

expect() {
    if [[ $2 == "$3" ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $1: expected '$2', got '$3'"
    fi
}

check() {
    local what=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok   - $what"
    else
        failed=$((failed + 1))
        echo "FAIL - $what"
        return 1
    fi
}

eq() { [[ $1 == "$2" ]]; }
has_prefix() { [[ $1 == "$2"* ]]; }

checks_summary() {
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

checks_finish() {
    checks_summary
    exit
}

checks_require() {
    if ! seckill_bin >/dev/null; then
        check "server binary present" false
        checks_finish
    fi
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || {
            check "$tool installed (scripts/deps.sh installs it)" false
            checks_finish
        }
    done
}

checks_dispose() {
    if ((failed == 0 && $2 == 0)); then rm -rf "$1"; else echo "(logs kept in $1)"; fi
}
