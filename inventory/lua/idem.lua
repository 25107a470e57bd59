-- Piece, not a script: `--#include "idem.lua"` in commit.lua, atomic.lua,
-- batch.lua and peek.lua (the build resolves it, after malformed.lua). No
-- KEYS or ARGV of its own.
-- idem_seen(hash, key, user, qty, fresh, known): looks up the
-- Idempotency-Key `key` in the SKU's idem hash `hash`, whose record is
-- "<order id> <qty> <user id>", or first in fresh (nil, or key -> record:
-- those this script recorded and has not written yet, tally's keys in
-- record.lua); known (nil: read it now), the records of the script's keys as
-- idem_known read them at once.
-- idem_known(hash, keys): key -> record of those of keys that hash holds,
-- one HMGET for them all (none for no key).
-- Returns nil when key is '' or unused; {-3, first order id} when the same
-- user used it for the same qty (a replay: the first answer again); {-8} when
-- it was used for another user or qty (refused, and the reply says nothing of
-- that order); malformed's {-17, '<hash> <key>'} when its record does not
-- read so (nothing may be written).
local function idem_seen(hash, key, user, qty, fresh, known)
  if key == '' then return nil end
  local rec = fresh and fresh[key]
  if not rec then
    if known then rec = known[key] else rec = redis.call('HGET', hash, key) end
  end
  if not rec then return nil end
  local id, q, u = string.match(rec, '^(%d+) (%d+) (.+)$')
  if not id then return malformed(hash, key) end
  if u == user and tonumber(q) == tonumber(qty) then return {-3, id} end
  return {-8}
end
local function idem_known(hash, keys)
  local known = {}
  if #keys == 0 then return known end
  for i, rec in ipairs(redis.call('HMGET', hash, unpack(keys))) do
    if rec then known[keys[i]] = rec end
  end
  return known
end
