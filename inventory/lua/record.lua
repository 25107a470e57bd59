-- Piece, not a script: `--#include "record.lua"` in commit.lua, atomic.lua
-- and batch.lua (the build resolves it, after malformed.lua, outbox.lua and
-- rec.lua).
-- KEYS as theirs: [1] meta, [3] sold, [4] buyers, [5] orders, [7] idem. No
-- ARGV of its own.
-- A script records its orders in two steps, once every value it reads is
-- checked and the units sold written first (sold_first, malformed.lua), so
-- that what adds up over a batch is written once per batch, not once per
-- order:
-- tally(): the sums of one script's orders, empty.
-- record_order(t, okey, parts, qty, qtext, user, id, sku, idem_key, by, box)
-- writes what is the order's own and adds the rest up in t. parts lists the
-- segments the order draws from as {segment (a string), units} pairs, first
-- the one it is answered with; qtext is qty as its request said it, passed
-- on as it is (a number Lua turns into text itself, by a concatenation or
-- string.format, costs more than redis.call's own conversion: sums go to
-- Redis as numbers). Adds the order's record (rec.lua: okey is the key of
-- its hash) to those tally_write writes: sku, user_id, qty, segment;
-- `segments` for an order of several, "<seg>:<units>,...". With a payment
-- window, by (pay_by as text,
-- milliseconds by the SKU's clock) makes the order pending: its record says
-- state pending and pay_by, and the due zset holds it by pay_by for the sweep
-- (due.lua); nil for an order final at once (no state field: placed). box:
-- the outbox, {stream, gen} (outbox.lua; gen nil: none): the order's event,
-- placed or pending, which tally_write appends with the others (one entry).
-- t.bought[user] must hold the units the user bought
-- before (the script read them to check the limit); t.keys maps the
-- Idempotency-Keys recorded so far to their records (idem_seen's fresh; nil
-- until one is).
-- tally_write(t, due, dues, sku, was): the records, one HSET per hash
-- (counted open when the SKU has an outbox: rec.lua), then the sums (the
-- units sold of each segment went first, sold_first): meta's remaining (its
-- change set_stock added up in t), sold, orders and pending in one HSET, from
-- was, the four as the script read them ({remaining, sold, orders, pending},
-- checked numbers: meta_get), then each buyer's
-- units, the audit records "<id> <user> <qty> <segment>" (an order of
-- several segments adds " <seg>:<units>,...") appended to the orders list in
-- order, the Idempotency-Keys' records "<id> <qty> <user>", the due zset's
-- entries, and sku's score in the deadline index dues lowered to the
-- earliest of them (ZADD LT: the sweep finds the SKU due then), and the
-- orders' events, one stream entry. Nothing when t holds no order.
local function tally()
  return {orders = 0, units = 0, pending = 0, remaining = 0, buyers = {}, bought = {},
          recs = {}, events = {}, w = {}}
end
local function record_order(t, okey, parts, qty, qtext, user, id, sku, idem_key, by, box)
  t.orders, t.units = t.orders + 1, t.units + qty
  t.buyers[user] = true
  t.bought[user] = t.bought[user] + qty
  local seg, spread = parts[1][1], nil
  local rec = id .. ' ' .. user .. ' ' .. qtext .. ' ' .. seg
  if #parts > 1 then
    spread = {}
    for _, p in ipairs(parts) do spread[#spread + 1] = p[1] .. ':' .. p[2] end
    spread = table.concat(spread, ',')
    rec = rec .. ' ' .. spread
  end
  t.recs[#t.recs + 1] = rec
  -- the record: rec.lua's fields in order
  local text = sku .. ' ' .. user .. ' ' .. qtext .. ' ' .. seg
  if by then
    text = text .. ' ' .. (spread or '') .. ' pending ' .. by
    t.due = t.due or {}
    local n = #t.due
    t.due[n + 1], t.due[n + 2] = by, id
    t.pending = t.pending + qty
  elseif spread then
    text = text .. ' ' .. spread
  end
  rec_put(t.w, okey, id, text, box[2] and true)
  t.box = box
  if by then
    outbox_event(t.events, box[2], id, 'pending', sku, user, qtext, seg, spread, 'b', by)
  else
    outbox_event(t.events, box[2], id, 'placed', sku, user, qtext, seg, spread)
  end
  if idem_key ~= '' then
    t.idem, t.keys = t.idem or {}, t.keys or {}
    local n, irec = #t.idem, id .. ' ' .. qtext .. ' ' .. user
    t.idem[n + 1], t.idem[n + 2], t.keys[idem_key] = idem_key, irec, irec
  end
end
local function tally_write(t, due, dues, sku, was)
  if t.orders == 0 then return end
  rec_write(t.w)
  redis.call('HSET', KEYS[1], 'remaining', plus(was[1], t.remaining), 'sold',
             plus(was[2], t.units), 'orders', plus(was[3], t.orders), 'pending',
             plus(was[4], t.pending))
  if t.pending > 0 then
    redis.call('ZADD', due, unpack(t.due))
    local first = t.due[1]
    for i = 3, #t.due, 2 do
      if tonumber(t.due[i]) < tonumber(first) then first = t.due[i] end
    end
    redis.call('ZADD', dues, 'LT', first, sku)
  end
  local b = {}
  for u in pairs(t.buyers) do
    b[#b + 1] = u
    b[#b + 1] = t.bought[u]
  end
  redis.call('HSET', KEYS[4], unpack(b))
  redis.call('RPUSH', KEYS[5], unpack(t.recs))
  if t.idem then redis.call('HSET', KEYS[7], unpack(t.idem)) end
  outbox_write(t.box[1], t.events)
end
