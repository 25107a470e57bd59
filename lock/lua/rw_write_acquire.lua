-- Acquire of the write side of a read-write lock (lock/rwlock_redis.c).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/lock/lua/rw_write_acquire.lua.
-- KEYS[1] the lock hash "<key>" (rw_read.lua), KEYS[2] the writer's intent
-- "<key>:writer", KEYS[3] the fence key "<key>:fence" (fence.lua).
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] "1" to take fencing tokens,
-- ARGV[4] ms the caller will wait (0: it will not: it gives up its intent),
-- ARGV[5] and ARGV[6], when given: the plain locks that are this lock's
-- readers besides those in the hash (the segment locks of a SKU, whose grants
-- the writer's intent refuses: redis_acquire.lua), "<ARGV[5]>0" to
-- "<ARGV[5]><ARGV[6] - 1>", each a key of the same slot as KEYS[1] (the
-- caller's naming guarantees it; the names are made here, not declared): the
-- write side is granted only when none of them is held.
-- Returns {1, fence} a new write hold (fence 0 without fencing), {2, fence}
-- re-entered (the write held already: the same token), {0, PTTL} taken.
-- Taken and waiting, the caller leaves its intent in KEYS[2] for a lease,
-- or for its wait and 100 ms when that is shorter (its attempts come every
-- 20 ms at most: lock/rwlock_redis.c), unless another writer's is there: new readers are refused while it
-- lives, those that hold finish, and the writer's next attempt, which renews
-- the intent, gets in. A writer that holds only the read side waits like any
-- other (no upgrade: two readers that both wanted to would wait for each
-- other until their deadlines).
--#include "fence.lua"
if redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':w') == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':w', 1)
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then return {2, fence_number(KEYS[3])} end
  return {2, 0}
end
-- True when one of the plain locks that read this one (ARGV[5], ARGV[6]) is held.
local function readers_hold()
  for i = 0, tonumber(ARGV[6] or '0') - 1 do
    if redis.call('EXISTS', ARGV[5] .. i) == 1 then return true end
  end
  return false
end
local intent = redis.call('GET', KEYS[2])
if redis.call('EXISTS', KEYS[1]) == 0 and not readers_hold() then
  if intent == ARGV[1] then redis.call('DEL', KEYS[2]) end
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[1], 1, ARGV[1] .. ':w', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then return {1, take_fence(KEYS[3], ARGV[1])} end
  return {1, 0}
end
if ARGV[4] == '0' then
  if intent == ARGV[1] then redis.call('DEL', KEYS[2]) end
elseif not intent or intent == ARGV[1] then
  local px = math.min(tonumber(ARGV[2]), tonumber(ARGV[4]) + 100)
  redis.call('SET', KEYS[2], ARGV[1], 'PX', px)
end
return {0, redis.call('PTTL', KEYS[1])}
