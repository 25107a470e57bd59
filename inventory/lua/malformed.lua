-- Piece, not a script: `--#include "malformed.lua"` first in the scripts that
-- place orders, move units or give them back, and in those that read for
-- them (the build resolves it). No KEYS or ARGV of its own.
-- All or nothing: Redis does not roll back a script that fails part-way (a
-- Lua error on a value that is not a number, a HINCRBY refused), so these
-- scripts read every value they compute with before their first write, and
-- answer {-17, '<key> <field>'} for one that is malformed, writing nothing.
-- (pay.lua and cancel.lua answer {-17, the order's key} for a malformed
-- order record, give.lua's give_read.) The checks cost no call and allocate nothing: they run on
-- every order.
-- int_of(v): v, a Redis answer (a string; false: none), as a number when it
-- is written as Redis writes an integer (what HINCRBY takes: an optional
-- '-', no leading zero, at most 18 digits); nil for anything else, none too.
-- malformed(key, field): the answer {-17, '<key> <field>'}.
-- sold_first(sold, parts): the first write of a script that places orders or
-- gives units back, once every value it reads is checked: the units of each
-- segment of parts ({segment, units} pairs) added to the sold hash. That hash
-- is not read (a read would cost a call per order): a malformed count there
-- is met by its HINCRBY, which Redis refuses without writing anything, so the
-- first HINCRBY's refusal is malformed's answer (returned: nothing was
-- written). With more than one segment their counts are read first (one
-- HMGET), since a refusal of the second would come after the first's write.
-- Nil when written.
-- meta_get(key, ...): HMGET of meta's fields named, as HMGET answers them
-- (false: none), checked: each one there is an integer, but epoch and outbox
-- (text). Returns them, or nil and malformed's answer for the first that is
-- not. (A field the script cannot do without, it checks is there.)
local function int_of(v)
  if v == '0' then return 0 end
  if v and #v < 19 and string.find(v, '^-?[1-9]%d*$') then return tonumber(v) end
  return nil
end
-- plus(v, d): v (as HMGET answered it, checked: false for none, counted 0)
-- plus d: the new value of a sum the script writes with one HSET.
local function plus(v, d) return (tonumber(v or '0') or 0) + d end
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
local function sold_first(sold, parts)
  if #parts > 1 then
    local segs = {}
    for i, p in ipairs(parts) do segs[i] = p[1] end
    for i, v in ipairs(redis.call('HMGET', sold, unpack(segs))) do
      if v and not int_of(v) then return malformed(sold, segs[i]) end
    end
  end
  for i, p in ipairs(parts) do
    local r = redis.pcall('HINCRBY', sold, p[1], p[2])
    if type(r) == 'table' and r.err then
      if i == 1 and string.find(r.err, 'not an integer', 1, true) then
        return malformed(sold, p[1])
      end
      error(r)
    end
  end
  return nil
end
