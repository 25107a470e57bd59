-- Commit of the lock-guarded modes (inventory/inventory.c).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/commit.lua.
-- KEYS[1] meta, [2] stock, [3] sold, [4] buyers, [5] orders, [6] order:<id>,
-- [7] idem, [8] the segment lock's fence counter.
-- ARGV[1] SKU epoch seen at the start, [2] segment, [3] new stock of the
-- segment (computed by the caller from what it read under the lock), [4] qty,
-- [5] user id, [6] order id, [7] sku, [8] Idempotency-Key or '', [9] fencing
-- token or '0' (unfenced).
-- Returns {1} placed, {-1} SKU reset since, {-2} fenced off, {-3, first order
-- id} idempotent replay, {-4} per-user limit reached, {-8} Idempotency-Key
-- used for another user or qty, {-9} order:<id> exists already (the id was
-- issued twice: draw another). Writes nothing unless {1}.
--#include "idem.lua"
--#include "limit.lua"
--#include "record.lua"
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return {-1} end
if ARGV[9] ~= '0' and redis.call('GET', KEYS[8]) ~= ARGV[9] then return {-2} end
local seen = idem_seen(KEYS[7], ARGV[8], ARGV[5], ARGV[4])
if seen then return seen end
local qty = tonumber(ARGV[4])
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if over_limit(KEYS[4], ARGV[5], qty, limit) then return {-4} end
if redis.call('EXISTS', KEYS[6]) == 1 then return {-9} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
record_order(KEYS[6], ARGV[2], qty, ARGV[5], ARGV[6], ARGV[7], ARGV[8])
return {1}
