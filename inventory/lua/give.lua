-- Piece, not a script: `--#include "give.lua"` (after back.lua, window.lua
-- and outbox.lua) in pay.lua, cancel.lua and due.lua. No KEYS or ARGV of its own.
-- A pending order's end without payment: its record says `state`
-- ('cancelled' or 'expired'), its units go back to the segments they came
-- from (the back hash, see back.lua; meta's remaining, the avail index), they
-- no longer count as sold, pending or to the buyer's per-user limit; the
-- order leaves the due set and the life list records "<id> <state>", the
-- outbox (outbox.lua) its event. k names the SKU's keys: meta, stock, sold,
-- buyers, back, due, life, avail, events, and its sku. The caller checked
-- that the order is pending; it publishes on the reset channel once (so that
-- no instance answers sold_out from memory).
-- All or nothing: a record is read and checked before anything is written
-- (give_read: nil when it is malformed, and then nothing is written for it).
-- give_read(okey) -> o: the record, read once for the whole script: {state,
-- by (its pay_by, a number, or nil), user, qtext (its qty as stored, nil: no
-- such order), qty, parts = {{seg, units}...}, seg (the first part's segment, as
-- its segment field) and spread (its segments field; nil: one), for its events,
-- ok}; ok is false when the record lacks its user, its qty is not a whole number
-- above 0, or its segments do not add up to its qty (malformed: nothing may be
-- written).
-- For many orders in one script (the sweep), in two steps, so that what adds
-- up is written once: give_tally() is empty sums; give_order(g, k, okey, id,
-- state, o) writes what is the order's own (its state, its event) and adds
-- the rest up in g, returning its units; give_write(g, k) writes the sums
-- (each segment's back, avail and sold, meta's counters, the buyers, the due
-- set, the life list). give_back(k, okey, id, state, o) is the three for one
-- order, o its give_read (ok): its units.
-- life_keys(first, sku): such a k from KEYS[first .. first + 8], named in
-- that order (each script that gives back passes them so).
local function life_keys(first, sku)
  local k = {sku = sku}
  for i, name in ipairs({'meta', 'stock', 'sold', 'buyers', 'back', 'due', 'life', 'avail',
                         'events'}) do
    k[name] = KEYS[first + i - 1]
  end
  return k
end
local function give_read(okey)
  local o = redis.call('HMGET', okey, 'state', 'pay_by', 'user_id', 'qty', 'segment',
                       'segments')
  local r = {state = o[1], by = tonumber(o[2] or ''), user = o[3], qtext = o[4],
             qty = tonumber(o[4] or ''), parts = {}, spread = o[6] or nil, ok = false}
  local qty = r.qty
  if not r.user or not qty or qty < 1 or qty ~= math.floor(qty) then return r end
  local sum = 0
  if o[6] then
    for seg, units in string.gmatch(o[6], '(%d+):(%d+)') do
      r.parts[#r.parts + 1] = {seg, tonumber(units)}
      sum = sum + tonumber(units)
    end
  elseif o[5] and string.match(o[5], '^%d+$') then
    r.parts[1], sum = {o[5], qty}, qty
  end
  r.seg = r.parts[1] and r.parts[1][1]
  r.ok = sum == qty
  return r
end
local function give_tally()
  return {units = {}, qty = 0, states = {}, user_qty = {}, ids = {}, life = {}}
end
local function give_order(g, k, okey, id, state, o)
  for _, p in ipairs(o.parts) do
    g.units[p[1]] = (g.units[p[1]] or 0) + p[2]
  end
  g.qty = g.qty + o.qty
  g.states[state] = (g.states[state] or 0) + 1
  g.user_qty[o.user] = (g.user_qty[o.user] or 0) + o.qty
  g.ids[#g.ids + 1] = id
  g.life[#g.life + 1] = id .. ' ' .. state
  redis.call('HSET', okey, 'state', state)
  if k.gen == nil then k.gen = redis.call('HGET', k.meta, 'outbox') end
  outbox_add(k.events, k.gen, id, state, k.sku, o.user, o.qtext, o.seg, o.spread)
  return o.qty
end
local function give_write(g, k)
  if #g.ids == 0 then return end
  for seg, u in pairs(g.units) do
    local b = redis.call('HINCRBY', k.back, seg, u)
    local s = tonumber(redis.call('HGET', k.stock, seg) or '0')
    redis.call('ZADD', k.avail, s + b, seg)
    redis.call('HINCRBY', k.sold, seg, -u)
  end
  local q = g.qty
  redis.call('HINCRBY', k.meta, 'remaining', q)
  redis.call('HINCRBY', k.meta, 'sold', -q)
  redis.call('HINCRBY', k.meta, 'pending', -q)
  redis.call('HINCRBY', k.meta, 'returned', q)
  for state, n in pairs(g.states) do
    redis.call('HINCRBY', k.meta, state, n)
  end
  local users = {}
  for u in pairs(g.user_qty) do users[#users + 1] = u end
  local had = redis.call('HMGET', k.buyers, unpack(users))
  local keep, gone = {}, {}
  for i, u in ipairs(users) do
    local left = tonumber(had[i] or '0') - g.user_qty[u]
    if left > 0 then
      keep[#keep + 1] = u
      keep[#keep + 1] = left
    else
      gone[#gone + 1] = u
    end
  end
  if #keep > 0 then redis.call('HSET', k.buyers, unpack(keep)) end
  if #gone > 0 then redis.call('HDEL', k.buyers, unpack(gone)) end
  redis.call('ZREM', k.due, unpack(g.ids))
  redis.call('RPUSH', k.life, unpack(g.life))
end
local function give_back(k, okey, id, state, o)
  local g = give_tally()
  local qty = give_order(g, k, okey, id, state, o)
  give_write(g, k)
  return qty
end
