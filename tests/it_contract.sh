#!/usr/bin/env bash
# Contract: real answers of a real instance validated against docs/openapi.yaml by an
# independent validator (ajv over the document's own schemas, driven by
# tools/openapi/contract.mjs). Every route answers at least once, and every status and
# error of docs/api.md's error table is provoked and validated: status, the headers
# the document requires (Retry-After, Allow), content type and body. The script also
# shows that the validator refuses wrong order bodies (a test that cannot fail is none).
#
# Pieces: one Redis; instance "seckill" (admin token, --wait-ms 300, for busy a
# segment lock taken by hand in Redis); instance "lossy" reaching Redis through
# tests/faultproxy, which loses the answer of the first commit (503 outcome_unknown);
# then Redis stopped (503 unavailable). Skipped (exit 77, "SKIPPED: why") when npm's
# registry cannot be reached to install the pinned tools.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/openapi_tools.sh
source "$ROOT/tests/openapi_tools.sh"
it_begin contract redis-server curl
openapi_tools_ready

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
export REDIS_PORT=$STARTED_PORT ADMIN_TOKEN=s3cret
start_instance --ready-secs 10 seckill "$dir" --redis "127.0.0.1:$REDIS_PORT" --segments 4 \
    --admin-token "$ADMIN_TOKEN" --lock redis --wait-ms 300 --request-timeout-ms 1500 ||
    { echo "seckill not ready"; exit 1; }
export BASE=$STARTED_URL
start_faultproxy proxy "$dir" "$REDIS_PORT" --drop-after-arg order: || { echo "proxy did not start"; exit 1; }
start_instance --ready-secs 10 lossy "$dir" --redis "127.0.0.1:$STARTED_PORT" --segments 4 \
    --admin-token "$ADMIN_TOKEN" --lock redis || { echo "lossy not ready"; exit 1; }
export LOST_BASE=$STARTED_URL
# a lock mode without a read-write lock: PATCH answers 501 there
start_instance --ready-secs 10 setnx "$dir" --redis "127.0.0.1:$REDIS_PORT" --segments 4 \
    --admin-token "$ADMIN_TOKEN" --lock setnx || { echo "setnx not ready"; exit 1; }
export SETNX_BASE=$STARTED_URL
export CONTRACT_DOC=$ROOT/docs/openapi.yaml CONTRACT_API_MD=$ROOT/docs/api.md
export CONTRACT_STATE=$dir/contract.json

phase() { # PHASE: contract.mjs's checks, counted here
    local out
    out=$(node "$OPENAPI_TOOLS/contract.mjs" "$1" 2>&1)
    echo "$out"
    passed=$((passed + $(grep -c '^ok   - ' <<<"$out")))
    failed=$((failed + $(grep -c '^FAIL - ' <<<"$out")))
    check "phase $1 ran to its end" eq "$(grep -vc -e '^ok   - ' -e '^FAIL - ' <<<"$out")" 0
}
phase main
phase room
phase lost
phase life
proc_stop redis "$dir" 5
phase down
phase coverage
checks_summary
