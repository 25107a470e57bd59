#!/usr/bin/env bash
# An instance knows the waiting rooms before it takes its first request (issue 48): an
# order it accepts is never answered 503 "the waiting rooms were not read from Redis
# yet" because it had just started (a rolling upgrade's nginx sends orders to an
# instance the moment it accepts connections: tests/it_upgrade.sh met one).
# Redis behind a proxy that holds each chunk 300 ms both ways (faultproxy, slowed): the
# rooms' first read on the event loop then ends about 600 ms after the instance listens.
# An order sent as soon as the instance accepts a connection is placed (201). Fails
# without inv_rooms_prime (the registry read before the listening starts): 503.
# About 15 s (every Redis round trip of the slowed instance takes ~600 ms); the waits
# are for conditions, 30 s at most.
# shellcheck disable=SC2317 # functions run from wait_until look unreachable
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin room_start redis-server redis-cli curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
start_instance a "$dir" --redis "127.0.0.1:$rport" --lock redis || exit 1
A=$STARTED_URL
expect "PUT tv (no room) through an instance on Redis itself" "201" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT -d '{"stock":5}' "$A/skus/tv")"

start_faultproxy px "$dir" "$rport" --slow-ms 300 || { echo "proxy did not start"; exit 1; }
pport=$STARTED_PORT
kill -USR1 "$(cat "$dir/px.pid")" # slow from now on
start_instance --no-wait b "$dir" --redis "127.0.0.1:$pport" --lock redis || exit 1
B=$STARTED_URL
accepts() { curl -s -o /dev/null --max-time 1 "$B/healthz"; }
check "the slowed instance accepts connections (within 30 s)" wait_until 30 accepts
o=$(curl -s --max-time 20 -w '\n%{http_code}' -X POST -d '{"user_id":"ann"}' "$B/skus/tv/orders")
expect "an order at once: placed (no 503: the rooms were read before the listening)" "201" \
    "$(tail -1 <<<"$o")"
check "... its body names the order ($(head -1 <<<"$o"))" \
    test -n "$(head -1 <<<"$o" | jq -r '.order_id // empty')"

checks_finish
