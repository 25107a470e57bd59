-- Piece, not a script: `--#include "fence.lua"` in the lock scripts that hand
-- out a fencing token (the build resolves it). No KEYS or ARGV of its own.
-- take_fence(key, owner): the next fencing token of a lock: one more than
-- the last, whose number key holds as "<n>:<owner>" with the owner of the
-- grant it went to. A commit checks the whole text, so a token never counts
-- for two grants: after a failover that lost the newest grant and its
-- increment (replication is asynchronous), the next grant gets the same
-- number again, but not the same owner, and the old holder's commit is
-- refused. Returns the number.
local function take_fence(key, owner)
  local last = redis.call('GET', key)
  local n = 1 + (last and tonumber(string.match(last, '^%d+')) or 0)
  redis.call('SET', key, n .. ':' .. owner)
  return n
end
-- fence_number(key): the number of the last token taken (0: none).
local function fence_number(key)
  local last = redis.call('GET', key)
  return last and tonumber(string.match(last, '^%d+')) or 0
end
