-- Piece, not a script: `--#include "fence.lua"` in the scripts that check a
-- segment lock's fencing token of any mode (the build resolves it). No KEYS
-- or ARGV of its own.
-- fenced(key, token): true when the holder of token was succeeded by a later
-- one. A token the data Redis handed out ("<n>:<owner>", lock/lua/fence.lua)
-- must be the one key holds; one from outside (zk's czxid) must not be below
-- the segment's mark in key, which it then raises to itself. Those are
-- decimal integers without leading zeros, compared as strings (length, then
-- text): a czxid may pass 2^53, where Lua's numbers stop being exact. Token
-- '0' (unfenced) is never fenced.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local function fenced(key, token)
  if token == '0' then return false end
  local mark = redis.call('GET', key)
  if string.find(token, ':', 1, true) then return mark ~= token end
  if mark and below(token, mark) then return true end
  if mark ~= token then redis.call('SET', key, token) end
  return false
end
