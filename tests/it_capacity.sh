#!/usr/bin/env bash
# scripts/capacity.sh --quick (docs/operations.md, "Capacity"): it runs, leaves nothing
# behind, and prints every figure, each a number in a sane range (an order's bytes in
# Redis are tens to thousands, not 0 and not a megabyte); while PostgreSQL is down
# every order's event waits in the stream, and once it is back the stream is trimmed.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin capacity redis-server redis-cli psql wrk curl jq
it_plain_only "scripts/capacity.sh"
bash "$ROOT/scripts/capacity.sh" --quick --dir "$dir/cap" >"$dir/out" 2>&1
expect "scripts/capacity.sh --quick exits 0" "0" "$?"
cat "$dir/out"
figure() { awk -v n="$1" '$1 == "capacity:" && $2 == n { print $3 }' "$dir/out"; }
in_range() { # NAME LO HI
    local v
    v=$(figure "$1")
    [[ $v =~ ^[0-9]+$ ]] && ((v >= $2 && v <= $3))
}
# name, low, high: bytes unless said. A record's bytes depend on its hash's encoding:
# ~100 in a hash table, ~40 in a listpack, which a hash stays while it holds 128
# records or fewer; how many orders of ~238 ms share one depends on how fast the run
# placed them, so on a busy machine it is a listpack (38 bytes met): the floor is 20.
while read -r name lo hi; do
    check "$name in [$lo, $hi]: $(figure "$name")" in_range "$name" "$lo" "$hi"
done <<'EOF'
redis_keys_per_sku 2 50
redis_bytes_per_sku 200 100000
redis_sku_keys_bytes 100 100000
redis_bytes_per_order 50 5000
redis_order_record_bytes 20 2000
redis_bytes_per_reservation 50 5000
redis_reservation_record_bytes 20 2000
pg_bytes_per_order 30 5000
pg_bytes_per_event 30 5000
redis_bytes_per_event 10 2000
redis_bytes_per_order_pg_down 50 5000
EOF
placed=$(figure orders_placed)
expect "PostgreSQL down: one event waiting per order" "$placed" "$(figure events_waiting)"
check "... and the stream trimmed once written" grep -q 'redis_stream_bytes_after .*XLEN [01])' "$dir/out"
check "the date and the commit are printed" grep -qE '^capacity: measured [0-9]{4}-[0-9]{2}-[0-9]{2} at commit [0-9a-f]+' "$dir/out"
no_pids() { ! compgen -G "$dir/cap/*.pid" >/dev/null; }
check "nothing left in its dir but its logs (its processes stopped)" no_pids
checks_summary
