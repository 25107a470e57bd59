-- Piece, not a script: `--#include "give.lua"` (after malformed.lua, back.lua,
-- window.lua, outbox.lua and rec.lua) in pay.lua, cancel.lua and due.lua. No KEYS or
-- ARGV of its own.
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
-- (give_read: nil when it is malformed, and then nothing is written for it),
-- and so is every value of the SKU the end computes with (give_write).
-- give_read(okey, id) -> o: the record of id in its hash okey (rec.lua),
-- read once for the whole script (give_of(r): the same of a record read
-- already, rec_get's or rec_get_all's): {state,
-- by (its pay_by, a number, or nil), user, qtext (its qty as stored, nil: no
-- such order), qty, parts = {{seg, units}...}, seg (the first part's segment, as
-- its segment field) and spread (its segments field; nil: one), for its events,
-- ok}; ok is false when the record lacks its user, its qty is not a whole number
-- above 0, or its segments do not add up to its qty (malformed: nothing may be
-- written); rec, the record itself (rec_get), whose state an end rewrites.
-- For many orders in one script (the sweep), in two steps, so that what adds
-- up is written once: give_tally() is empty sums; give_order(g, k, okey, id,
-- state, o) adds the order up in g, writing nothing, and returns its units;
-- give_write(g, k) reads and checks every value the ends compute with
-- (meta's counters and outbox, each segment's stock and units given back, the
-- buyers' counts; the units sold as sold_first does: malformed.lua) and
-- answers malformed's {-17,
-- '<key> <field>'} for one that is not a number, nothing written; else it
-- writes each order's own (its state, one HSET per hash; its event), then the sums (each
-- segment's back, avail and sold, meta's counters (one HSET), the buyers, the due set,
-- the life list), and answers nil. give_back(k, okey, id, state, o) is the
-- three for one order, o its give_read (ok): its units, or nil and
-- malformed's answer (nothing written).
-- life_keys(first, sku): such a k from KEYS[first .. first + 8], named in
-- that order (the sweep passes them so).
-- life_keys_of(sku, gtag, events): such a k named from the SKU's name as
-- inv_keys_init names them: 'sk:{<sku>}:<name>' on one Redis (gtag ''), else
-- 'sk:{<gtag>}:<sku>:<name>', gtag the tag of the gene the order's id carries,
-- so that on a Redis Cluster they hash to the slot of the order's record, the
-- script's first KEY; events the shard's outbox stream (a KEY of the script). A
-- pay or a cancel learns its SKU from the record in the same script, and so
-- is one call, not a read of the record and then the script.
local life_names = {'meta', 'stock', 'sold', 'buyers', 'back', 'due', 'life', 'avail'}
local function life_keys(first, sku)
  local k = {sku = sku, events = KEYS[first + #life_names]}
  for i, name in ipairs(life_names) do k[name] = KEYS[first + i - 1] end
  return k
end
local function life_keys_of(sku, gtag, events)
  local tag = gtag == '' and ('{' .. sku .. '}') or ('{' .. gtag .. '}:' .. sku)
  local k = {sku = sku, events = events}
  for _, name in ipairs(life_names) do k[name] = 'sk:' .. tag .. ':' .. name end
  return k
end
local function give_of(o)
  o = o or {}
  local r = {state = o.state, by = tonumber(o.pay_by or ''), user = o.user_id, qtext = o.qty,
             qty = tonumber(o.qty or ''), parts = {}, spread = o.segments, ok = false,
             rec = o}
  local qty = r.qty
  if not r.user or not qty or qty < 1 or qty ~= math.floor(qty) then return r end
  local sum = 0
  if o.segments then
    for seg, units in string.gmatch(o.segments, '(%d+):(%d+)') do
      r.parts[#r.parts + 1] = {seg, tonumber(units)}
      sum = sum + tonumber(units)
    end
  elseif o.segment and string.match(o.segment, '^%d+$') then
    r.parts[1], sum = {o.segment, qty}, qty
  end
  r.seg = r.parts[1] and r.parts[1][1]
  r.ok = sum == qty
  return r
end
-- give_answer(rec): a function that makes a pay's or a cancel's answer of its
-- list: padded with false to four elements, the record rec as read (rec.lua's
-- rec_seen, taken now: before the script changes it) the fifth.
local function give_answer(rec)
  local seen = rec_seen(rec)
  return function(a)
    for i = #a + 1, 4 do a[i] = false end
    a[5] = seen
    return a
  end
end
local function give_read(okey, id)
  return give_of(rec_get(okey, id))
end
local function give_tally()
  return {units = {}, segs = {}, qty = 0, states = {}, user_qty = {}, users = {}, ids = {},
          life = {}, own = {}}
end
local function give_order(g, k, okey, id, state, o)
  for _, p in ipairs(o.parts) do
    if not g.units[p[1]] then g.segs[#g.segs + 1] = p[1] end
    g.units[p[1]] = (g.units[p[1]] or 0) + p[2]
  end
  g.qty = g.qty + o.qty
  g.states[state] = (g.states[state] or 0) + 1
  if not g.user_qty[o.user] then g.users[#g.users + 1] = o.user end
  g.user_qty[o.user] = (g.user_qty[o.user] or 0) + o.qty
  g.ids[#g.ids + 1] = id
  g.life[#g.life + 1] = id .. ' ' .. state
  g.own[#g.own + 1] = {okey, id, state, o}
  return o.qty
end
local give_fields = {'remaining', 'sold', 'pending', 'returned', 'cancelled', 'expired',
                     'outbox'}
local function give_write(g, k)
  if #g.ids == 0 then return nil end
  -- every value first: nothing is written before all are checked
  local meta, bad = meta_get(k.meta, unpack(give_fields))
  if not meta then return bad end
  local segs = g.segs
  local stock = redis.call('HMGET', k.stock, unpack(segs))
  local back = redis.call('HMGET', k.back, unpack(segs))
  local parts = {}
  for i, seg in ipairs(segs) do
    stock[i] = int_of(stock[i] or '0')
    if not stock[i] then return malformed(k.stock, seg) end
    back[i] = int_of(back[i] or '0')
    if not back[i] then return malformed(k.back, seg) end
    parts[i] = {seg, -g.units[seg]}
  end
  local had = redis.call('HMGET', k.buyers, unpack(g.users))
  for i, u in ipairs(g.users) do
    had[i] = int_of(had[i] or '0')
    if not had[i] then return malformed(k.buyers, u) end
  end
  -- then the writes: the units sold first (sold_first: its refusal writes
  -- nothing), each order's own, then the sums
  bad = sold_first(k.sold, parts)
  if bad then return bad end
  local events, w = {}, {}
  for _, x in ipairs(g.own) do
    local o = x[4]
    o.rec.state = x[3]
    rec_put(w, x[1], x[2], rec_text(o.rec), o.rec.old and meta[7] and true, o.rec.old)
    outbox_event(events, meta[7], x[2], x[3], k.sku, o.user, o.qtext, o.seg, o.spread)
  end
  rec_write(w)
  outbox_write(k.events, events)
  for i, seg in ipairs(segs) do
    local u = g.units[seg]
    redis.call('HSET', k.back, seg, back[i] + u)
    redis.call('ZADD', k.avail, stock[i] + back[i] + u, seg)
  end
  -- meta's sums one HSET, from the values read and checked above
  local q = g.qty
  local sums = {'remaining', plus(meta[1], q), 'sold', plus(meta[2], -q), 'pending',
                plus(meta[3], -q), 'returned', plus(meta[4], q)}
  for state, n in pairs(g.states) do
    sums[#sums + 1] = state
    sums[#sums + 1] = plus(meta[state == 'cancelled' and 5 or 6], n)
  end
  redis.call('HSET', k.meta, unpack(sums))
  local keep, gone = {}, {}
  for i, u in ipairs(g.users) do
    local left = had[i] - g.user_qty[u]
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
  return nil
end
local function give_back(k, okey, id, state, o)
  local g = give_tally()
  local qty = give_order(g, k, okey, id, state, o)
  local bad = give_write(g, k)
  if bad then return nil, bad end
  return qty
end
