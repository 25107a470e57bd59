-- The first step under a lock whose fencing tokens come from outside the data
-- Redis (zk's czxid; inventory/inventory.c, lock.h lock_fence_external): raise
-- the segment's high-water token to the holder's, and read the segment's
-- stock. A holder whose token is below the mark was already succeeded by a
-- later holder (its lock is gone, whatever it believes): refused, nothing
-- changed. The commit scripts then check the mark as for tokens the data
-- Redis hands out itself: still the holder's token, or refused.
-- KEYS[1] the segment lock's fence key, [2] stock, [3] back (units given
-- back, not yet folded: back.lua).
-- ARGV[1] the holder's token (a decimal integer, no leading zero), [2] segment.
-- Returns {stock, back} as read.lua does (or its {-17, '<key> <segment>'}:
-- malformed, nothing written), or {-2} when fenced off (fence.lua compares
-- the tokens).
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/fence_read.lua.
--#include "malformed.lua"
--#include "stock.lua"
--#include "fence.lua"
local stock, back = held(KEYS[2], KEYS[3], ARGV[2])
if not stock then return back end
if fenced(KEYS[1], ARGV[1]) then return {-2} end
return {stock, back}
