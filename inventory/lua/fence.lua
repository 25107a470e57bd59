-- Piece, not a script: `--#include "fence.lua"` in the scripts that check a
-- segment lock's fencing token of any mode (the build resolves it). No KEYS
-- or ARGV of its own.
-- The mark (the fence key's value) is "<token>[|<token>...]": first the token
-- of the holder that took it last, then, for each other lock namespace whose
-- tokens took it before, the highest of them (its high water). A token the
-- data Redis hands out is "<n>:<owner>" (lock/lua/fence.lua); one from outside
-- is "<n>@<namespace>" (pg: the lock table's version) or "<n>" (zk: the lock
-- node's czxid; namespace zk), its number a decimal integer without leading
-- zeros, compared as text (length, then text): a czxid may pass 2^53, where
-- Lua's numbers stop being exact. Numbers of two namespaces are never
-- compared: each is judged against its own namespace's high water only, so
-- a lock table made anew or a change of lock mode leaves no mark that
-- refuses every token after it.
-- fenced(key, token): true when the holder of token may not go on. A token of
-- the data Redis must be the mark's first (it took it at its grant). One from
-- outside that is the mark's first goes on; else it takes the mark when it is
-- above its namespace's high water, and is refused when not: a later holder
-- of its lock service took the mark since, or the token itself held it and
-- lost it (to any namespace), and a holder never gets the mark back. Token '0'
-- (unfenced) is never fenced.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local function fence_ns(token)
  return string.match(token, '@(.+)$') or 'zk'
end
local function fenced(key, token)
  if token == '0' then return false end
  local mark = redis.call('GET', key) or ''
  local first = string.match(mark, '^[^|]*')
  if string.find(token, ':', 1, true) then return first ~= token end
  if first == token then return false end
  local ns, n = fence_ns(token), string.match(token, '^%d+')
  local high, names = {}, {} -- each namespace's highest token in the mark
  for t in string.gmatch(mark, '[^|]+') do
    if not string.find(t, ':', 1, true) then
      local tns = fence_ns(t)
      if not high[tns] then names[#names + 1] = tns end
      if not high[tns] or below(string.match(high[tns], '^%d+'), string.match(t, '^%d+')) then
        high[tns] = t
      end
    end
  end
  if high[ns] and not below(string.match(high[ns], '^%d+'), n) then return true end
  table.sort(names)
  local kept = {token}
  for _, tns in ipairs(names) do
    if tns ~= ns then kept[#kept + 1] = high[tns] end
  end
  redis.call('SET', key, table.concat(kept, '|'))
  return false
end
-- fence_holds(key, token): true when token is the mark's first, the token of
-- the holder that took it last (the only one whose commit may pass).
local function fence_holds(key, token)
  local mark = redis.call('GET', key)
  if mark == token then return true end -- no other namespace's in it: most times
  return mark ~= false and #mark > #token and string.byte(mark, #token + 1) == 124 -- '|'
    and string.sub(mark, 1, #token) == token
end
