#!/usr/bin/env bash
# Structure: every state machine's table (a comment of its file in inventory/ or
# lock/ with a "state" column: a header's opening one, or life.c's pay and cancel) names
# the states of its enum, no more, no
# fewer (scripts/state_tables.py). On the tree before issue 45 it found engine_refill.c's
# table naming a PLAN its enum lacked. Seconds.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin states python3

out=$(python3 "$ROOT/scripts/state_tables.py" "$ROOT" 2>&1)
rc=$?
check "scripts/state_tables.py ran (exit $rc)" eq "$rc" 0
[[ -z $out ]] || sed 's/^/  /' <<<"$out"
check "each state table names its enum's states" eq "$(grep -c . <<<"$out")" 0

# It sees a difference: a machine whose table names a state its enum lacks (made
# here, so that the check cannot be blind to what it exists for).
mkdir -p "$dir/tree/inventory" "$dir/tree/lock"
cat >"$dir/tree/inventory/toy.h" <<'TOY'
/* toy: a machine.
 *
 *   state     in flight      next
 *   --------  -------------  ------
 *   GOING     a command      DONE
 *   PLAN      nothing        DONE
 *   DONE      nothing
 */
typedef enum { TOY_GOING, TOY_DONE } toy_state;
TOY
check "... and it finds a state a table names and its enum lacks" \
    eq "$(python3 "$ROOT/scripts/state_tables.py" "$dir/tree")" \
    "inventory/toy.h: PLAN is in the table, not in the enum (TOY_*)"

checks_finish
