-- The atomic mode (inventory/inventory.c): check and decrement in one step,
-- no lock.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/atomic.lua.
-- KEYS as commit.lua's first seven: [1] meta, [2] stock, [3] sold, [4]
-- buyers, [5] orders, [6] order:<id>, [7] idem.
-- ARGV[1] the user's routing number (seg_route; the home segment is it modulo
-- the segment count), [2] qty, [3] user id, [4] order id, [5] sku, [6]
-- Idempotency-Key or ''.
-- Returns {1, segment, home} placed, {-3, first id} replay, {-4} limit,
-- {-5, per-user limit} sold out, {-6} unknown SKU, {-7} qty above the limit,
-- {-8} Idempotency-Key used for another user or qty, {-9} order:<id> exists
-- already.
--#include "idem.lua"
--#include "limit.lua"
--#include "record.lua"
local meta = redis.call('HMGET', KEYS[1], 'segments', 'limit')
if not meta[1] then return {-6} end
local k, limit, qty = tonumber(meta[1]), tonumber(meta[2]), tonumber(ARGV[2])
if qty > limit then return {-7} end
local seen = idem_seen(KEYS[7], ARGV[6], ARGV[3], ARGV[2])
if seen then return seen end
if over_limit(KEYS[4], ARGV[3], qty, limit) then return {-4} end
if redis.call('EXISTS', KEYS[6]) == 1 then return {-9} end
local home = tonumber(ARGV[1]) % k
for j = 0, k - 1 do
  local seg = tostring((home + j) % k)
  if tonumber(redis.call('HGET', KEYS[2], seg) or '0') >= qty then
    redis.call('HINCRBY', KEYS[2], seg, -qty)
    record_order(KEYS[6], seg, qty, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
    return {1, tonumber(seg), home}
  end
end
return {-5, limit}
