-- Piece, not a script: `--#include "rw_read.lua"` in a script that takes or
-- drops the read side of a read-write lock (lock/rwlock_redis.c): the
-- standalone rw_read_acquire.lua and rw_release.lua, and any caller's own
-- script that takes the read side in the same round trip as its own work (the
-- order path's segment lock). No KEYS or ARGV of its own; the caller passes
-- the keys and arguments lock_rw_read_args (lock.h) fills in:
--   hash   the lock, "<key>": field "mode" ("read" or "write"), field
--          "<owner>" the holds of owner (reads and writes), field
--          "<owner>:w" the writes among them; one PX lease for the hash,
--          renewed by every holder's watchdog
--   writer "<key>:writer", a waiting writer's intent: its owner, with a
--          short lease that each of its attempts renews (writer preference)
--   owner  the caller's session (lock_session: 128 random bits in hex)
--   ttl    the lease in ms
-- A caller's script must hold all of them in one slot: keys with the same
-- hash tag.
--
--   reenter "1" when the caller holds a read of the key already and takes
--          another (lock_rw_acquire's re-entry), "0" for a new hold
-- Holds are counted per owner, and one owner has many at once (every order
-- of a loop's session), so a count found in Redis is never taken for one
-- whose release was lost: such a count (the release's answer lost with
-- Redis) stays until the owner's last hold goes and then runs out with the
-- lease, one ttl, as a lost release of the plain lock does.
--
-- rw_read_take(hash, writer, owner, ttl, reenter): 1 a new read hold, 2 one
-- more of an owner that held the key (its count goes up), 0 refused: another
-- writer holds it, or a writer waits for it (its intent keeps new holds out,
-- the owner's own too, or a loop that always has an order in flight would
-- starve it). Let through are only a re-entry ("1": refused, the holder would
-- wait for a writer that waits for it) and a read of the writer itself.
local function rw_read_take(hash, writer, owner, ttl, reenter)
  local mode = redis.call('HGET', hash, 'mode')
  local mine = redis.call('HEXISTS', hash, owner) == 1
  if mode == 'write' then
    if redis.call('HEXISTS', hash, owner .. ':w') == 0 then return 0 end
  elseif not (mine and reenter == '1') then
    if redis.call('EXISTS', writer) == 1 then return 0 end
    redis.call('HSET', hash, 'mode', 'read')
  end
  redis.call('HINCRBY', hash, owner, 1)
  redis.call('PEXPIRE', hash, ttl)
  if mine then return 2 end
  return 1
end
-- rw_drop(hash, owner, side): drops one hold of owner, side "r" (a read) or
-- "w" (the write). The writer's last write gone, what it still reads keeps
-- the lock as a read; the last hold gone, the hash goes. Returns the
-- owner's holds left (>= 0), -1 when owner held no such side.
local function rw_drop(hash, owner, side)
  local total = tonumber(redis.call('HGET', hash, owner)) or 0
  local writes = tonumber(redis.call('HGET', hash, owner .. ':w')) or 0
  if side == 'w' then
    if writes < 1 then return -1 end
    writes = writes - 1
    if writes == 0 then
      redis.call('HDEL', hash, owner .. ':w')
      redis.call('HSET', hash, 'mode', 'read')
    else
      redis.call('HSET', hash, owner .. ':w', writes)
    end
  elseif total - writes < 1 then
    return -1
  end
  total = total - 1
  if total == 0 then
    redis.call('HDEL', hash, owner)
  else
    redis.call('HSET', hash, owner, total)
  end
  if redis.call('HLEN', hash) <= 1 then redis.call('DEL', hash) end
  return total
end
-- rw_read_drop(hash, owner): rw_drop of a read.
local function rw_read_drop(hash, owner)
  return rw_drop(hash, owner, 'r')
end
-- rw_writer_pttl(hash, writer): the lease left of a writer that holds the
-- lock or waits for it (its intent), nil when there is none: what keeps a
-- plain lock that is the read side of hash (a segment lock: redis_acquire.lua,
-- redis_release.lua) from being granted or handed over.
local function rw_writer_pttl(hash, writer)
  if redis.call('EXISTS', writer) == 1 then return redis.call('PTTL', writer) end
  if redis.call('HGET', hash, 'mode') == 'write' then return redis.call('PTTL', hash) end
  return nil
end
