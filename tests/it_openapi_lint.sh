#!/usr/bin/env bash
# docs/openapi.yaml passes `redocly lint` (OpenAPI 3.1, the recommended rules less the
# two tools/openapi/redocly.yaml turns off and says why) with no error. The tool is
# pinned in tools/openapi (npm ci); skipped (exit 77, "SKIPPED: why") when npm's
# registry cannot be reached to install it.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/openapi_tools.sh
source "$ROOT/tests/openapi_tools.sh"
it_begin openapi_lint
openapi_tools_ready

out=$("$OPENAPI_TOOLS/node_modules/.bin/redocly" lint --format=stylish \
    --config "$OPENAPI_TOOLS/redocly.yaml" "$ROOT/docs/openapi.yaml" 2>&1)
rc=$?
grep -v -e '^ *║' -e '^ *╔' -e '^ *╚' <<<"$out" | sed '/^$/d'
check "redocly lint docs/openapi.yaml: no error" eq "$rc" 0
checks_summary
