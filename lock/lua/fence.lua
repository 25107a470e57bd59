-- Piece, not a script: `--#include "fence.lua"` in the lock scripts that hand
-- out a fencing token (the build resolves it). No KEYS or ARGV of its own.
-- take_fence(key, owner): the next fencing token of a lock: one more than
-- the number of the last, stored as "<n>:<owner>" with the owner of the
-- grant it went to. A commit checks the whole text, so a token never counts
-- for two grants: after a failover that lost the newest grant and its
-- increment (replication is asynchronous), the next grant gets the same
-- number again, but not the same owner, and the old holder's commit is
-- refused. The token is the first of key's value, "<token>[|<token>...]":
-- what follows it is kept, the high waters of the tokens that come from
-- outside the data Redis (inventory/lua/fence.lua), and a token from outside
-- that held the mark joins them, so that neither it nor anything older of
-- its namespace takes the mark again after a change of lock mode. Returns
-- the number.
local function take_fence(key, owner)
  local last = redis.call('GET', key) or ''
  local first, rest = string.match(last, '^([^|]*)(.*)$')
  local n = 1 + (tonumber(string.match(first, '^%d+')) or 0)
  if first ~= '' and not string.find(first, ':', 1, true) then rest = '|' .. first .. rest end
  redis.call('SET', key, string.format('%d', n) .. ':' .. owner .. rest)
  return n
end
-- fence_number(key): the number of the last token taken (0: none).
local function fence_number(key)
  local last = redis.call('GET', key)
  return last and tonumber(string.match(last, '^%d+')) or 0
end
