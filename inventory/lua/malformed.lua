-- Piece, not a script: `--#include "malformed.lua"` first in the scripts that
-- place orders or move units, and in peek.lua (the build resolves it). No
-- KEYS or ARGV of its own.
-- All or nothing: Redis does not roll back a script that fails part-way (a
-- Lua error on a value that is not a number, a HINCRBY refused), so these
-- scripts read every value they compute with before their first write, and
-- answer {-17, '<key> <field>'} for one that is malformed, writing nothing.
-- (pay.lua and cancel.lua answer {-17} for a malformed order record.)
-- int_of(v): v, a Redis answer (a string; false: none), as a number when it
-- is written as Redis writes an integer (what HINCRBY takes: an optional
-- '-', no leading zero, at most 18 digits); nil for anything else, none too.
-- malformed(key, field): the answer {-17, '<key> <field>'}.
-- meta_bad(m, key): m maps meta's fields that a script asked for to what
-- HMGET answered (false: none). segments (at least 1) and limit must be
-- integers, the
-- other numbers (starts_ms, ends_ms, pay_ms, remaining, initial, sold,
-- orders, pending) integers or none. Nil when they are, else malformed's
-- answer for the first that is not.
-- meta_read(key, ...): HMGET of meta's fields named, as such an m.
local function int_of(v)
  if v == '0' then return 0 end
  if v and #v < 19 and string.match(v, '^-?[1-9]%d*$') then return tonumber(v) end
  return nil
end
local function malformed(key, field)
  return {-17, key .. ' ' .. field}
end
local meta_ints = {'segments', 'limit', 'starts_ms', 'ends_ms', 'pay_ms', 'remaining',
                   'initial', 'sold', 'orders', 'pending'}
local meta_needed = {segments = true, limit = true}
local function meta_bad(m, key)
  for _, field in ipairs(meta_ints) do
    local v = m[field]
    if v ~= nil and not int_of(v) and (v or meta_needed[field]) then
      return malformed(key, field)
    end
  end
  if m.segments and int_of(m.segments) < 1 then return malformed(key, 'segments') end
  return nil
end
local function meta_read(key, ...)
  local names, got, m = {...}, redis.call('HMGET', key, ...), {}
  for i, name in ipairs(names) do m[name] = got[i] end
  return m
end
