-- Acquire of the redis lock mode (lock/lock_redis.c).
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/lock/lua/redis_acquire.lua.
-- KEYS[1] lock hash, KEYS[2] fence key (fence.lua), KEYS[3] wait queue, KEYS[4] the
-- caller's grant list.
-- KEYS[5], KEYS[6], when given: the hash and the writer's intent of a
-- read-write lock (rw_read.lua) whose read side this lock is: while a writer
-- holds it or waits for it, an attempt is refused (a free key, a re-entry, a
-- taken key: the caller polls; only a grant a release handed over is picked
-- up), unless ARGV[7] is "1": the caller holds another lock that reads it (an
-- order of several segments, whose next part the writer waits for anyway).
-- ARGV[1] owner, ARGV[2] lease ms, ARGV[3] "1" to take fencing tokens,
-- ARGV[4] ms the caller will wait (0: it will not, and leaves the queue),
-- ARGV[5] the caller's queue entry from an earlier attempt or "", ARGV[6] "1"
-- when the caller's session holds a grant of the key (re-entry), ARGV[7]
-- (with KEYS[5]) as above.
-- Returns {1, fence, ""} for a new grant (also one handed over earlier, whose
-- lease then starts again: it counts from the pick-up), {2, fence, ""} when
-- the owner re-entered, {0, holder's PTTL, queue entry} when taken, {-1,
-- the writer's PTTL, ""} when a writer of KEYS[5] holds or waits (out of the
-- queue: no release hands it over while the writer is there).
-- The caller's grant list holds nothing of use but a grant handed over with
-- the key: whenever the key is not the caller's, what is in it is stale (a
-- grant whose lease ran out, a wake "w" that came after its wait) and is
-- dropped before the caller queues or polls, so that no later wait pops it.
-- A grant leaves in the queue any entry of ARGV[1]'s other than ARGV[5] (one
-- that a failed attempt left): the release script skips those. The queue lives
-- until its latest deadline plus a lease: a new entry only ever extends its
-- expiry (PEXPIRE ... GT would not do: it takes the fresh list's missing TTL
-- for an infinite one and never sets any).
--#include "fence.lua"
--#include "rw_read.lua"
-- A new grant to ARGV[1]: its entry out of the queue, one hold, a fresh lease.
local function grant()
  if ARGV[5] ~= '' then redis.call('LREM', KEYS[3], 1, ARGV[5]) end
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then return {1, take_fence(KEYS[2], ARGV[1]), ''} end
  return {1, 0, ''}
end
local pttl = redis.call('PTTL', KEYS[1])
local mine = pttl ~= -2 and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if mine then
  local handed = redis.call('LPOP', KEYS[4])
  while handed == 'w' do -- a wake for a writer (redis_release.lua), not a grant
    handed = redis.call('LPOP', KEYS[4])
  end
  if handed then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(handed), ''}
  end
end
if KEYS[6] and ARGV[7] ~= '1' then
  local writer = rw_writer_pttl(KEYS[5], KEYS[6])
  if writer then
    if ARGV[5] ~= '' then redis.call('LREM', KEYS[3], 1, ARGV[5]) end
    if not mine then redis.call('DEL', KEYS[4]) end
    return {-1, writer, ''}
  end
end
if pttl == -2 then
  return grant()
end
if mine then
  if ARGV[6] ~= '1' then
    -- ours, but the session keeps no grant of it: a release lost with
    -- Redis (crash, timeout). A new grant, not a re-entry.
    return grant()
  end
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then
    return {2, fence_number(KEYS[2]), ''}
  end
  return {2, 0, ''}
end
local entry = ARGV[5]
if ARGV[4] == '0' then
  if entry ~= '' then redis.call('LREM', KEYS[3], 1, entry) end
  entry = ''
elseif entry == '' then
  redis.call('DEL', KEYS[4]) -- stale (above): this wait pops only what comes for it
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  entry = (now + tonumber(ARGV[4])) .. ':' .. ARGV[1]
  redis.call('RPUSH', KEYS[3], entry)
  local keep = tonumber(ARGV[4]) + tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[3]) < keep then
    redis.call('PEXPIRE', KEYS[3], keep)
  end
end
return {0, pttl, entry}
