-- Acquire of the read side of a read-write lock (lock/rwlock_redis.c), by
-- itself: rw_read_take (rw_read.lua) and the lease left.
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/lock/lua/rw_read_acquire.lua.
-- KEYS[1] the lock hash "<key>", KEYS[2] the writer's intent "<key>:writer".
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] "1" for a re-entry (the
-- caller's session holds a read of the key), else "0".
-- Returns {1, 0} a new read hold, {2, 0} one more of the owner's, {0, PTTL} refused (the
-- lease left of the writer's hold or intent, -2 when there is none).
--#include "rw_read.lua"
local kind = rw_read_take(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
if kind ~= 0 then return {kind, 0} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then pttl = redis.call('PTTL', KEYS[2]) end
return {0, pttl}
