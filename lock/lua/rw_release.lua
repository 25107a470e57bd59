-- Release of either side of a read-write lock (lock/rwlock_redis.c):
-- rw_drop (rw_read.lua).
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/lock/lua/rw_release.lua.
-- KEYS[1] the lock hash "<key>".
-- ARGV[1] owner, ARGV[2] "r" (a read) or "w" (the write), ARGV[3] lease ms.
-- Returns the owner's holds left (> 0: its lease renewed), 0 when it holds
-- none any more, -1 when it held no such side (its lease ran out).
--#include "rw_read.lua"
local left = rw_drop(KEYS[1], ARGV[1], ARGV[2])
if left > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return left
