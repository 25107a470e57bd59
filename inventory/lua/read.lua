-- The read of a segment under its lock (inventory/hold.c), sent in the same
-- round trip as the lock's own command where the mode allows: it writes
-- nothing, so it may run even when the lock turns out not granted.
-- KEYS[1] stock, [2] back (units given back, not yet folded: back.lua).
-- ARGV[1] segment.
-- Returns {stock, back}, each a number (0 for none), or {-17, '<key>
-- <segment>'} when one is malformed (malformed.lua: the commit would refuse
-- it; the lock is let go at once).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/read.lua.
--#include "malformed.lua"
--#include "stock.lua"
local stock, back = held(KEYS[1], KEYS[2], ARGV[1])
if not stock then return back end
return {stock, back}
