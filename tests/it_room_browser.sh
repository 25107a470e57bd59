#!/usr/bin/env bash
# The waiting room's page, GET /skus/{sku}/room, in a real browser (issue 48, point 5):
# Debian's chromium, headless, driven by chromedriver through Selenium
# (tests/room_browser.py). One Redis, one instance with --buyer-key-file; the page gets
# the buyer's token in its URL's fragment (#buyer=...), joins, waits, is admitted,
# buys with the pass, and shows the 201 answer with pay_by (a reservation). The
# service's side is checked too: one unit pending, ann's order. The screenshots are
# kept in the test's directory (docs/room.png is one of them).
# Debian's python3 (/usr/bin/python3: its Selenium, not another python's).
# Skipped (77) when chromium, chromedriver or Selenium is missing (scripts/deps.sh
# installs them). About 5 s; every wait is a condition with a bound of 30 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
for need in /usr/bin/chromium /usr/bin/chromedriver; do
    [[ -x $need ]] || { echo "SKIPPED: $need missing (scripts/deps.sh installs it)"; exit 77; }
done
/usr/bin/python3 -c 'import selenium' 2>/dev/null ||
    { echo "SKIPPED: python3-selenium missing (scripts/deps.sh installs it)"; exit 77; }
it_begin room_browser redis-server curl jq

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/key"
start_instance one "$dir" --redis "127.0.0.1:$STARTED_PORT" --lock redis --segments 2 \
    --buyer-key-file "$dir/key" || exit 1
A=$STARTED_URL
expect "a SKU with a room and a payment window" 201 \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
        --data '{"stock": 3, "pay_within_ms": 600000, "room": {"rate_per_s": 5}}' "$A/skus/web")"
token=$("$SECKILL_BIN_PATH" buyer-token ann --key-file "$dir/key")
mkdir -p "$dir/browser"
/usr/bin/python3 "$ROOT/tests/room_browser.py" "$A/skus/web/room#buyer=$token" "$dir/browser" \
    >"$dir/browser.out" 2>&1
status=$?
while IFS= read -r line; do
    case $line in
    "ok   - "*) check "${line#ok   - }" true ;;
    "FAIL - "*) check "${line#FAIL - }" false ;;
    *) echo "$line" ;;
    esac
done <"$dir/browser.out"
expect "the browser's run ended well" 0 "$status"
expect "the service: one unit pending, ann's" "1 1" \
    "$(curl -s "$A/skus/web" | jq -r '"\(.pending) \(.sold)"')"
[[ -n ${SECKILL_ROOM_SCREENSHOT:-} ]] && cp "$dir/browser/room-bought.png" "$SECKILL_ROOM_SCREENSHOT"
checks_finish
