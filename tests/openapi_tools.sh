# shellcheck shell=bash
# shellcheck disable=SC2154 # dir: the test's temp dir, set by lib.sh's it_begin
# openapi_tools.sh — the pinned npm tools of tests/it_openapi_lint.sh and tests/it_contract.sh
# (source it after lib.sh): tools/openapi/package.json and package-lock.json,
# installed by `npm ci` into tools/openapi/node_modules (git-ignored) once, again only
# when the lock file changed.
#
#   openapi_tools_ready   0 when node_modules matches the lock; else installs it. When
#                         node or npm are missing or the registry cannot be reached,
#                         prints "SKIPPED: <why>" and exits 77, which tests/run.sh
#                         counts as skipped (neither passed nor failed), never as passed.
#                         Call it right after it_begin, before anything is started: a
#                         skip removes the test's temp dir and leaves at once
#   OPENAPI_TOOLS         the directory (tools/openapi)

OPENAPI_TOOLS=$ROOT/tools/openapi
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1

_openapi_skip() { # WHY...: the skip, as tests/run.sh counts it
    printf '%s\n' "$@"
    trap - EXIT
    rm -rf "$dir"
    exit 77
}

openapi_tools_ready() {
    local stamp=$OPENAPI_TOOLS/node_modules/.seckill-lock
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        _openapi_skip "SKIPPED: node or npm not installed (scripts/deps.sh installs nodejs and npm)"
    fi
    # One install at a time: it_openapi_lint and it_contract run side by side
    # (tests/run.sh -j), and two npm ci into one node_modules break each other
    # (ENOTEMPTY, then a half-installed tree). Held until the tools are there (an exit
    # on the way releases it too).
    local lock
    exec {lock}>"$OPENAPI_TOOLS/.install.lock"
    flock -w 600 "$lock" || { check "the npm tools' install lock within 600 s" false; checks_finish; }
    if [[ -f $stamp ]] && cmp -s "$stamp" "$OPENAPI_TOOLS/package-lock.json"; then
        exec {lock}>&-
        return 0
    fi
    local log
    log=$(mktemp)
    if ! (cd "$OPENAPI_TOOLS" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
        if grep -qiE 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ECONNRESET|network|getaddrinfo|proxy' "$log"; then
            local tailend
            tailend=$(tail -n 5 "$log")
            rm -f "$log"
            _openapi_skip "SKIPPED: npm's registry is unreachable, the pinned tools could not be installed:" "$tailend"
        fi
        echo "npm ci failed in tools/openapi:"
        tail -n 20 "$log"
        rm -f "$log"
        check "the pinned npm tools install" false
        checks_finish
    fi
    rm -f "$log"
    cp "$OPENAPI_TOOLS/package-lock.json" "$stamp"
    exec {lock}>&-
}
