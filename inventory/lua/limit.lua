-- Piece, not a script: `--#include "limit.lua"` in commit.lua, atomic.lua and
-- peek.lua (the build resolves it). No KEYS or ARGV of its own.
-- bought(buyers, user): the units `user` bought so far of the SKU whose buyers
-- hash is `buyers` (0 when none).
-- over_limit(buyers, user, qty, limit): true when qty more units would take
-- the user past the per-user limit.
local function bought(buyers, user)
  return tonumber(redis.call('HGET', buyers, user) or '0')
end
local function over_limit(buyers, user, qty, limit)
  return bought(buyers, user) + qty > limit
end
