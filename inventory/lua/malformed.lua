-- Piece, not a script: `--#include "malformed.lua"` first in the scripts that
-- place orders or move units, and in those that read for them (the build
-- resolves it). No KEYS or ARGV of its own.
-- All or nothing: Redis does not roll back a script that fails part-way (a
-- Lua error on a value that is not a number, a HINCRBY refused), so these
-- scripts read every value they compute with before their first write, and
-- answer {-17, '<key> <field>'} for one that is malformed, writing nothing.
-- (pay.lua and cancel.lua answer {-17, the order's key} for a malformed
-- order record.) The checks cost no call and allocate nothing: they run on
-- every order.
-- int_of(v): v, a Redis answer (a string; false: none), as a number when it
-- is written as Redis writes an integer (what HINCRBY takes: an optional
-- '-', no leading zero, at most 18 digits); nil for anything else, none too.
-- malformed(key, field): the answer {-17, '<key> <field>'}.
-- meta_get(key, ...): HMGET of meta's fields named, as HMGET answers them
-- (false: none), checked: each one there is an integer, but epoch and outbox
-- (text). Returns them, or nil and malformed's answer for the first that is
-- not. (A field the script cannot do without, it checks is there.)
local function int_of(v)
  if v == '0' then return 0 end
  if v and #v < 19 and string.find(v, '^-?[1-9]%d*$') then return tonumber(v) end
  return nil
end
local function malformed(key, field)
  return {-17, key .. ' ' .. field}
end
local function meta_get(key, ...)
  local m = redis.call('HMGET', key, ...)
  for i = 1, #m do
    local v = m[i]
    if v and v ~= '0' and not (#v < 19 and string.find(v, '^-?[1-9]%d*$')) then
      local field = (select(i, ...))
      if field ~= 'epoch' and field ~= 'outbox' then return nil, malformed(key, field) end
    end
  end
  return m
end
