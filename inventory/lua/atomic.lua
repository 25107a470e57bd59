-- The atomic mode (inventory/inventory.c): check and decrement in one step,
-- no lock. Costs O(log K), whatever K is.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/atomic.lua.
-- KEYS as commit.lua's first eight: [1] meta, [2] stock, [3] sold, [4]
-- buyers, [5] orders, [6] order:<id>, [7] idem, [8] avail, then [9] back
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
-- another user or qty, {-9} order:<id> exists already, the sale window's
-- {-10, ...} or {-11, ''} (window.lua).
--#include "idem.lua"
--#include "limit.lua"
--#include "stock.lua"
--#include "outbox.lua"
--#include "record.lua"
--#include "window.lua"
--#include "back.lua"
local meta = redis.call('HMGET', KEYS[1], 'segments', 'limit', 'remaining', 'starts_ms',
                        'ends_ms', 'pay_ms', 'outbox')
if not meta[1] then return {-6} end
local k, limit, qty = tonumber(meta[1]), tonumber(meta[2]), tonumber(ARGV[2])
local left = tonumber(meta[3] or '0')
if qty > limit then return {-7} end
local seen = idem_seen(KEYS[7], ARGV[6], ARGV[3], ARGV[2])
if seen then return seen end
local pay = tonumber(meta[6] or '0')
local now = pay > 0 and now_ms() or nil
local shut = window_shut(meta[4], meta[5], now)
if shut then return shut end
local t = tally()
t.bought[ARGV[3]] = bought(KEYS[4], ARGV[3])
if over_limit(t.bought[ARGV[3]], qty, limit) then return {-4} end
if left < qty then return {-5, limit, left} end
if redis.call('EXISTS', KEYS[6]) == 1 then return {-9} end
local route = tonumber(ARGV[1])
local home = route % k
local parts, h = nil, tostring(home)
fold(KEYS[2], KEYS[9], h)
local have = {[h] = tonumber(redis.call('HGET', KEYS[2], h) or '0')} -- read once
if have[h] >= qty then
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
end
local by = now and string.format('%d', now + pay)
local out = {1, tonumber(parts[1][1]), home, by or ''}
for _, p in ipairs(parts) do
  if p[1] ~= h then -- home's was folded and read above
    fold(KEYS[2], KEYS[9], p[1])
    have[p[1]] = tonumber(redis.call('HGET', KEYS[2], p[1]))
  end
  set_stock(KEYS[1], KEYS[2], KEYS[8], p[1], have[p[1]] - p[2], have[p[1]])
  out[#out + 1] = tonumber(p[1])
  out[#out + 1] = p[2]
end
record_order(t, KEYS[6], parts, qty, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], by,
             {KEYS[12], meta[7]})
tally_write(t, KEYS[10], KEYS[11], ARGV[5])
return out
