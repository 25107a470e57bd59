-- The atomic mode (inventory/inventory.c): check and decrement in one step,
-- no lock. Costs O(log K), whatever K is.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/atomic.lua.
-- KEYS as commit.lua's first eight: [1] meta, [2] stock, [3] sold, [4]
-- buyers, [5] orders, [6] the hash of the
-- order's record (rec.lua), [7] idem, [8] avail, then [9] back
-- (back.lua), [10] due and [11] the deadline index (record.lua), [12] events
-- (outbox.lua).
-- ARGV[1] the user's routing number (seg_route; the home segment is it modulo
-- the segment count), [2] qty, [3] user id, [4] order id, [5] sku, [6]
-- Idempotency-Key or ''.
-- The order is served by its home segment when that holds qty, else by one
-- chosen by the routing number among those that do, else by the fullest
-- segments together.
-- A segment's returned units (back.lua) are folded into its stock before it
-- is read.
-- Returns {1, segment, home, pay_by or '', seg, units, seg, units...} placed
-- (the pairs list what it took from each segment; pay_by with a payment
-- window), {-3, first id} replay, {-4} limit,
-- {-5, per-user limit, remaining} sold out (fewer than qty remain), {-6}
-- unknown SKU, {-7} qty above the limit, {-8} Idempotency-Key used for
-- another user or qty, {-9} the order's record exists already, the sale window's
-- {-10, ...}, {-11, ''} or {-12, ''} paused (window.lua), {-17, '<key> <field>'} a value it
-- computes with is malformed (malformed.lua: meta's numbers, the user's
-- count in buyers, the Idempotency-Key's record, a segment's stock, units
-- given back or sold). Writes nothing unless {1}: every check comes before
-- the first write.
--#include "malformed.lua"
--#include "idem.lua"
--#include "limit.lua"
--#include "stock.lua"
--#include "outbox.lua"
--#include "rec.lua"
--#include "record.lua"
--#include "window.lua"
--#include "back.lua"
local meta, bad = meta_get(KEYS[1], 'segments', 'limit', 'remaining', 'starts_ms',
                           'ends_ms', 'pay_ms', 'outbox', 'sold', 'orders', 'pending',
                           'paused')
if not meta then return bad end
if not meta[1] then return {-6} end
if tonumber(meta[1]) < 1 then return malformed(KEYS[1], 'segments') end
if not meta[2] then return malformed(KEYS[1], 'limit') end
local k, limit, qty = tonumber(meta[1]), tonumber(meta[2]), tonumber(ARGV[2])
local left = tonumber(meta[3] or '0')
if qty > limit then return {-7} end
local seen = idem_seen(KEYS[7], ARGV[6], ARGV[3], ARGV[2])
if seen then return seen end
local pay = tonumber(meta[6] or '0')
local now = pay > 0 and now_ms() or nil
local shut = window_shut(meta[4], meta[5], now, meta[11])
if shut then return shut end
local t = tally()
t.bought[ARGV[3]] = bought(KEYS[4], ARGV[3])
if not t.bought[ARGV[3]] then return malformed(KEYS[4], ARGV[3]) end
if over_limit(t.bought[ARGV[3]], qty, limit) then return {-4} end
if left < qty then return {-5, limit, left} end
if redis.call('HEXISTS', KEYS[6], ARGV[4]) == 1 then return {-9} end
local route = tonumber(ARGV[1])
local home = route % k
local parts, h = nil, tostring(home)
-- Each segment drawn from is read once (held): the stock hash's and the
-- units given back to it, s[seg] and b[seg].
local hs, hb = held(KEYS[2], KEYS[9], h)
if not hs then return hb end
local s, b = {[h] = hs}, {[h] = hb}
if hs + hb >= qty then
  parts = {{h, qty}}
else
  local c = candidates(KEYS[8], qty, route, 1)[1]
  if c then
    parts = {{c, qty}}
  else
    parts = {}
    local need = qty
    for _, p in ipairs(plan(KEYS[8], qty, h)) do
      parts[#parts + 1] = {p[1], math.min(p[2], need)}
      need = need - parts[#parts][2]
    end
  end
  for _, p in ipairs(parts) do
    if p[1] ~= h then
      s[p[1]], bad = held(KEYS[2], KEYS[9], p[1])
      if not s[p[1]] then return bad end
      b[p[1]] = bad
    end
  end
end
-- Every value is checked: the writes, the sold counts first (sold_first).
bad = sold_first(KEYS[3], parts)
if bad then return bad end
local by = now and string.format('%d', now + pay)
local out = {1, tonumber(parts[1][1]), home, by or ''}
for _, p in ipairs(parts) do
  local seg = p[1]
  local have = s[seg] + b[seg]
  fold(KEYS[9], seg, b[seg])
  set_stock(KEYS[1], KEYS[2], KEYS[8], seg, have - p[2], have, t)
  out[#out + 1] = tonumber(seg)
  out[#out + 1] = p[2]
end
record_order(t, KEYS[6], parts, qty, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], by,
             {KEYS[12], meta[7]})
tally_write(t, KEYS[10], KEYS[11], ARGV[5], {meta[3], meta[8], meta[9], meta[10]})
return out
