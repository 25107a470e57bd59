-- Piece, not a script: `--#include "fence.lua"` in the scripts that write
-- under a segment lock whose token may not be the data Redis's own (the
-- build resolves it). No KEYS or ARGV of its own.
-- fenced(key, token): true when the holder of token was succeeded by a later
-- one (the segment's mark in key is above token); else raises the mark to
-- token. Tokens are decimal integers without leading zeros, compared as
-- strings (length, then text): a zk czxid may pass 2^53, where Lua's numbers
-- stop being exact. Token '0' (unfenced) is never fenced.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local function fenced(key, token)
  if token == '0' then return false end
  local mark = redis.call('GET', key)
  if mark and below(token, mark) then return true end
  if mark ~= token then redis.call('SET', key, token) end
  return false
end
