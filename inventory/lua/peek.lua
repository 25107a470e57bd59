-- What an order of the lock-guarded modes learns before taking any lock, in
-- one round trip (inventory/inventory.c). Costs O(log K), whatever K is.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/peek.lua.
-- KEYS[1] meta, [2] stock, [3] buyers, [4] idem, [5] avail, [6] back (units
-- given back, not yet in the stock hash: back.lua).
-- ARGV[1] the user's routing number (seg_route), [2] qty, [3] user id, [4]
-- Idempotency-Key or '', [5] most candidates to return.
-- Returns {-1} for an unknown SKU, {-8} when the Idempotency-Key was used for
-- another user or qty, {-17, '<key> <field>'} when a value it reads is
-- malformed (malformed.lua: meta's numbers, the user's count in buyers, the
-- Idempotency-Key's record, home's stock or units given back), the sale window's {-10, ...}, {-11, ''} or {-12, ''} paused (window.lua)
-- unless the order is a replay, else {segments, limit, epoch, bought, first order id
-- or '', home, remaining, initial stock, form, ...}: with form 0, the candidate segments
-- that held at least qty, home first, then others chosen by the routing
-- number (none: sold out, fewer than qty remain); with form 1, no segment
-- held qty alone, and {segment, stock} pairs follow, the fullest segments
-- that hold qty between them. Stock only goes down within an epoch, so a
-- segment seen short is short: skipping it strands nothing.
--#include "malformed.lua"
--#include "idem.lua"
--#include "limit.lua"
--#include "stock.lua"
--#include "window.lua"
local meta, bad = meta_get(KEYS[1], 'segments', 'limit', 'epoch', 'remaining', 'initial',
                           'starts_ms', 'ends_ms', 'paused')
if not meta then return bad end
if not meta[1] then return {-1} end
if tonumber(meta[1]) < 1 then return malformed(KEYS[1], 'segments') end
if not meta[2] then return malformed(KEYS[1], 'limit') end
local seen = idem_seen(KEYS[4], ARGV[4], ARGV[3], ARGV[2])
if seen and seen[1] ~= -3 then return seen end
if not seen then
  local shut = window_shut(meta[6], meta[7], nil, meta[8])
  if shut then return shut end
end
local k, qty, most = tonumber(meta[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local route = tonumber(ARGV[1])
local home, left = route % k, tonumber(meta[4] or '0')
local had = bought(KEYS[3], ARGV[3])
if not had then return malformed(KEYS[3], ARGV[3]) end
local out = {k, tonumber(meta[2]), meta[3], had, seen and seen[2] or '', home, left,
             tonumber(meta[5]), 0}
if left < qty then return out end
local s, b = held(KEYS[2], KEYS[6], tostring(home))
if not s then return b end
if s + b >= qty then
  out[#out + 1] = home
end
for _, seg in ipairs(candidates(KEYS[5], qty, route, most)) do
  if #out - 9 >= most then break end
  if tonumber(seg) ~= home then out[#out + 1] = tonumber(seg) end
end
if #out > 9 then return out end
out[9] = 1
for _, p in ipairs(plan(KEYS[5], qty, tostring(home))) do
  out[#out + 1] = tonumber(p[1])
  out[#out + 1] = p[2]
end
return out
