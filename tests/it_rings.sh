#!/usr/bin/env bash
# Structure: within each of service/, inventory/, lock/ and redis/, no two .c files call
# each other, directly or round a ring (scripts/call_rings.py: definitions from
# Universal Ctags, calls by name); a lower file reaches a higher one only through a
# function table or a callback it was given. On the tree before issue 45 it listed
# six rings (inventory's atomic, inventory, order, shards, sku, ticket; engine,
# engine_refill, engine_single; lock_pg and pg_steps; lock_zk and zk_steps; zk_conn and
# zk_nodes; http and waiters). And docs/ARCHITECTURE.md's "calls:" list of each file of
# inventory/ and lock/ is what the file calls (call_rings.py --doc). Seconds.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin rings ctags python3

out=$(python3 "$ROOT/scripts/call_rings.py" "$ROOT" 2>&1)
rc=$?
check "scripts/call_rings.py ran (exit $rc)" eq "$rc" 0
[[ -z $out ]] || sed 's/^/  ring: /' <<<"$out"
check "no call ring in service/, inventory/, lock/, redis/" eq "$(grep -c . <<<"$out")" 0

# The check sees a ring: a tree of two files of redis/ that call each other (made
# here, so that the check cannot be blind to what it exists for).
mkdir -p "$dir/tree/redis"
printf 'void ring_a(void);\nvoid ring_b(void) { ring_a(); }\n' >"$dir/tree/redis/b.c"
printf 'void ring_b(void);\nvoid ring_a(void) { ring_b(); }\n' >"$dir/tree/redis/a.c"
check "... and it lists one made on purpose" \
    eq "$(python3 "$ROOT/scripts/call_rings.py" "$dir/tree")" "redis/a.c <-> redis/b.c"

# The map says what each file calls, and a file the map does not list, or a callee it
# leaves out, is seen (a copy of the map with life.c's `ticket` taken out).
doc=$(python3 "$ROOT/scripts/call_rings.py" --doc "$ROOT/docs/ARCHITECTURE.md" "$ROOT" 2>&1)
[[ -z $doc ]] || sed 's/^/  map: /' <<<"$doc"
check "ARCHITECTURE.md's calls: lists match inventory/ and lock/" eq "$(grep -c . <<<"$doc")" 0
sed 's/`sku`, `ticket`, `inventory`, `orderid`, `soldout`)/`sku`, `inventory`, `orderid`, `soldout`)/' \
    "$ROOT/docs/ARCHITECTURE.md" >"$dir/map.md"
check "... and a callee left out of the map is seen" \
    has_prefix "$(python3 "$ROOT/scripts/call_rings.py" --doc "$dir/map.md" "$ROOT")" \
    "inventory/life.c: the table says it calls inventory, orderid, sku, soldout"

checks_finish
