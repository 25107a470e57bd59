#!/usr/bin/env bash
# Integration: the waiting room (issue 48; docs/api.md, "Waiting room").
#
# One Redis, instances on loopback (lock redis).
# - Config: PUT /skus/{sku} takes "room": {"rate_per_s", "max_active", "pass_ttl_ms"}
#   (defaults for the last two), GET /skus/{sku} reports it, a PUT without it
#   removes it; a bad room is a 400 that writes nothing (the SKU as it was).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin room redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
rcli() { redis-cli -p "$rport" "$@"; }
start_instance one "$dir" --redis "127.0.0.1:$rport" --lock redis --segments 4
A=$STARTED_URL

# put SKU BODY: the status; the answer in $dir/put.json
put() {
    curl -s -o "$dir/put.json" -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
        --data "$2" "$A/skus/$1"
}
room_of() { curl -s "$A/skus/$1" | jq -c '.room'; }

# ---- config -------------------------------------------------------------------------
expect "PUT with a room: 201" 201 \
    "$(put cfg '{"stock": 10, "room": {"rate_per_s": 5, "max_active": 20, "pass_ttl_ms": 30000}}')"
expect "... its answer has the room" '{"rate_per_s":5,"max_active":20,"pass_ttl_ms":30000}' \
    "$(jq -c .room "$dir/put.json")"
expect "GET reports the room" '{"rate_per_s":5,"max_active":20,"pass_ttl_ms":30000}' \
    "$(room_of cfg)"
expect "a room of rate_per_s only: max_active one second's worth, a minute's pass" 200 \
    "$(put cfg '{"stock": 10, "room": {"rate_per_s": 7}}')"
expect "... as GET reports" '{"rate_per_s":7,"max_active":7,"pass_ttl_ms":60000}' \
    "$(room_of cfg)"
for bad in '{"rate_per_s": 0}' '{"max_active": 3}' '{"rate_per_s": 5, "pass_ttl_ms": 10}' \
    '{"rate_per_s": 5, "speed": 1}' '"fast"'; do
    expect "room $bad: 400" 400 "$(put cfg "{\"stock\": 99, \"room\": $bad}")"
    expect "... bad_request naming the room" "bad_request room" \
        "$(jq -r '.error + " " + (.detail | split(":")[0] | split(" ")[0])' "$dir/put.json")"
done
expect "... nothing written: the SKU and its room as they were" '10 {"rate_per_s":7,"max_active":7,"pass_ttl_ms":60000}' \
    "$(curl -s "$A/skus/cfg" | jq -r '"\(.initial) \(.room | tojson)"')"
expect "a PUT without a room removes it" 200 "$(put cfg '{"stock": 10}')"
expect "... GET has no room" null "$(room_of cfg)"
expect "... nor has the meta hash" 0 "$(rcli HEXISTS 'sk:{cfg}:meta' room_rate)"

checks_finish
