-- The sweep's first read (inventory/life.c): the SKUs a deadline index
-- (record.lua) says have a reservation due by this Redis's clock, earliest
-- first. Reads only.
-- KEYS[1] the deadline index of one shard (seckill:due, or on a cluster one
-- gene's). ARGV[1] the most SKUs to name.
-- Returns {now in ms, SKUs due in all, sku, sku, ...}.
--#include "window.lua"
local now = now_ms()
local skus = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {now, redis.call('ZCOUNT', KEYS[1], '-inf', now)}
for _, sku in ipairs(skus) do out[#out + 1] = sku end
return out
