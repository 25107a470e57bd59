-- Piece, not a script: `--#include "limit.lua"` in commit.lua, atomic.lua,
-- batch.lua and peek.lua (the build resolves it, after malformed.lua). No
-- KEYS or ARGV of its own.
-- bought(buyers, user): the units `user` bought so far of the SKU whose buyers
-- hash is `buyers` (0 when none); nil when the count is malformed.
-- bought_by(buyers, users, into): the same for each of the list users, read
-- with one HMGET, into into[user] (false when malformed).
-- over_limit(have, qty, limit): true when qty more units would take a user who
-- bought `have` so far past the per-user limit.
local function bought(buyers, user)
  return int_of(redis.call('HGET', buyers, user) or '0')
end
local function over_limit(have, qty, limit)
  return have + qty > limit
end
local function bought_by(buyers, users, into)
  if #users == 0 then return end
  local got = redis.call('HMGET', buyers, unpack(users))
  for i, u in ipairs(users) do into[u] = int_of(got[i] or '0') or false end
end
