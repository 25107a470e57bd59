-- Release of the redis lock mode (lock/lock_redis.c).
-- KEYS[1] lock hash, KEYS[2] fence key (fence.lua), KEYS[3] wait queue.
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/lock/lua/redis_release.lua.
-- KEYS[4], KEYS[5], when given: the hash and the writer's intent of a
-- read-write lock whose read side this lock is (redis_acquire.lua): while a
-- writer holds it or waits for it, the lock is handed to nobody, and every
-- live waiter is woken with "w" on its grant list instead (it polls until the
-- writer is done: its attempts are refused meanwhile).
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] "1" to take fencing tokens,
-- ARGV[4] the prefix of grant lists ("<key>:grant:"; the next owner's list is
-- ARGV[4]..owner).
-- Returns the owner's holds left (> 0), 0 when released (and handed to the
-- first live waiter other than ARGV[1], if any), -1 when ARGV[1] does not hold
-- it.
-- Entries popped on the way are dropped: waiters past their deadline, and any
-- of ARGV[1]'s own. The releasing owner is not waiting (a session is one
-- thread, and that thread is releasing), so an entry of its own is one that a
-- failed attempt left behind (its clean-up failed too, or the answer naming it
-- was lost); handing the lock to it would stall the key for a lease. One
-- comparison per entry, and it holds however the entry came to be left.
--#include "fence.lua"
--#include "rw_read.lua"
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left > 0 then return left end
if left < 0 then
  redis.call('HDEL', KEYS[1], ARGV[1]) -- not ours: undo (an empty hash goes)
  return -1
end
redis.call('DEL', KEYS[1])
local now, wake = nil, nil -- wake: a writer of KEYS[4] is there (asked once, at
-- the first live waiter: a release with nobody waiting asks nothing)
while true do
  local e = redis.call('LPOP', KEYS[3])
  if not e then return 0 end
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local sep = string.find(e, ':', 1, true)
  local owner = sep and string.sub(e, sep + 1)
  if sep and owner ~= ARGV[1] and tonumber(string.sub(e, 1, sep - 1)) > now then
    local grant = ARGV[4] .. owner
    if wake == nil then wake = KEYS[5] ~= nil and rw_writer_pttl(KEYS[4], KEYS[5]) ~= nil end
    if wake then -- woken, not granted: on to the next waiter
      redis.call('RPUSH', grant, 'w')
      redis.call('PEXPIRE', grant, ARGV[2])
    else
      redis.call('HSET', KEYS[1], owner, 1)
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      local fence = 0
      if ARGV[3] == '1' then fence = take_fence(KEYS[2], owner) end
      redis.call('RPUSH', grant, fence)
      redis.call('PEXPIRE', grant, ARGV[2])
      return 0
    end
  end
end
