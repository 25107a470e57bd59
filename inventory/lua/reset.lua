-- Create or reset a SKU (inventory/sku.c). Includes pieces, so it needs the
-- build: `redis-cli --eval` the assembled copy, build/gen/inventory/lua/reset.lua.
-- KEYS[1] meta, [2] stock, [3] init, [4] sold, [5] buyers, [6] orders, [7]
-- idem, [8] avail, [9] xout, [10] xin (a cluster's transfers, xfer_out.lua),
-- [11] back, [12] due, [13] life (reservations: life.c), [14] the deadline
-- index of the SKU's shard (record.lua: the SKU leaves it with its due set).
-- ARGV[1] initial stock, [2] segments k, [3] per-user limit, [4 .. 3+k] stock
-- of each segment, [4+k] the reset channel (SOLDOUT_CHANNEL), [5+k] the SKU,
-- [6+k] the prefix of its order records' keys ('order:', or on a cluster
-- the shard's 'o:{<gene tag>}:'), [7+k] the new epoch, or '' for one more
-- (a new SKU's first: the clock's microseconds, so that a SKU made again
-- after its retirement never repeats an epoch of its retired life),
-- [8+k] and [9+k] the sale window's starts_ms and ends_ms (window.lua), ''
-- for an open end, [10+k] the payment window pay_ms (0: orders final at once),
-- [11+k] '1' when the orders' changes go to the outbox (outbox.lua: meta's
-- outbox field is the new epoch then) and the stream is listed in KEYS[15],
-- the sink's registry; 'c' the outbox on a cluster, where the registry has a
-- slot of its own and the caller lists the stream (KEYS[15] a key of the
-- shard's, untouched); else ''.
-- KEYS[16] the SKU's events stream (kept: events of the old epoch still go).
-- KEYS[17] the rooms' registry (INV_ROOMS_KEY, inventory/roompace.h: SKU ->
-- "<rate_per_s> <max_active> <pass_ttl_ms>"), where the SKU is listed while it
-- has a room; on a cluster a key of the shard's, untouched (shards.c lists it).
-- KEYS[18..] the fencing marks of its segment locks (of the segments it had
-- and has: "<lock key>:fence", lock/lock.h), deleted: a mark belongs to the
-- SKU's epoch. No write can pass the fence by it: every commit and transfer
-- also checks the epoch it was routed in, before its lock was granted, and
-- the epoch moves on here, in the same step (docs/design.md, "Fencing").
-- ARGV[12+k] the check before the first write: 'new' refuses a SKU that
-- has orders (PUT without ?reset=true), 'reset' one whose events have not all
-- reached PostgreSQL (sku_lag.lua: the sink's group is ARGV[13+k]), '' none
-- (a shard a cluster's SKU no longer uses, emptied: its directory's check
-- came first). [14+k] '1': the check only, nothing written (a cluster asks
-- every shard before it writes to any).
-- [15+k], [16+k], [17+k] the waiting room's rate_per_s, max_active and
-- pass_ttl_ms (meta's room_rate, room_max, room_ttl), '' for no room.
-- Returns 1 when the SKU was new, 0 when it was reset, 2 when the check
-- alone passed, -1 refused: the SKU has orders, -3 refused: its events have
-- not reached PostgreSQL. A refusal writes nothing.
-- Sets the stock index (inventory/lua/stock.lua) with the stock.
-- Deletes the SKU's order records (rec.lua's rec_drop), bumps the epoch (in-flight commits of the
-- old epoch are refused) and publishes the SKU on the channel in the same
-- step, so that no instance keeps answering sold out from memory
-- (inventory/soldout.h).
--#include "group.lua"
--#include "sku_lag.lua"
--#include "rec.lua"
local existed = redis.call('EXISTS', KEYS[1])
local k = tonumber(ARGV[2])
local check = ARGV[12 + k]
if check ~= '' and existed == 1 then
  -- an unreadable count counts as orders: refused rather than wiped
  local had = tonumber(redis.call('HGET', KEYS[1], 'orders') or '0') or 1
  if had > 0 or redis.call('LLEN', KEYS[6]) > 0 then
    if check == 'new' then return -1 end
    if sku_lag(KEYS[16], ARGV[13 + k], ARGV[5 + k], true) > 0 then return -3 end
  end
end
if ARGV[14 + k] == '1' then return 2 end
local n = redis.call('LLEN', KEYS[6])
local open = existed == 1 and redis.call('HGET', KEYS[1], 'outbox')
for i = 0, n - 1, 1000 do
  local keys, ids = {}, {}
  for _, rec in ipairs(redis.call('LRANGE', KEYS[6], i, i + 999)) do
    local id = string.match(rec, '^(%d+)')
    keys[#keys + 1], ids[#ids + 1] = rec_key(ARGV[6 + k], id), id
  end
  rec_drop(keys, ids, open and true)
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
           KEYS[10], KEYS[11], KEYS[12], KEYS[13])
for i = 18, #KEYS do redis.call('DEL', KEYS[i]) end
for i = 0, k - 1 do
  redis.call('HSET', KEYS[2], i, ARGV[4 + i])
  redis.call('HSET', KEYS[3], i, ARGV[4 + i])
  if tonumber(ARGV[4 + i]) > 0 then redis.call('ZADD', KEYS[8], ARGV[4 + i], i) end
end
redis.call('HSET', KEYS[1], 'initial', ARGV[1], 'segments', k, 'limit', ARGV[3],
           'sold', 0, 'orders', 0, 'remaining', ARGV[1], 'pay_ms', ARGV[10 + k],
           'pending', 0, 'paid', 0, 'returned', 0, 'cancelled', 0, 'expired', 0)
redis.call('HDEL', KEYS[1], 'paused', 'added', 'withdrawn') -- PATCH's (patch.lua)
redis.call('ZREM', KEYS[14], ARGV[5 + k])
for i, field in ipairs({'starts_ms', 'ends_ms'}) do
  if ARGV[7 + k + i] == '' then
    redis.call('HDEL', KEYS[1], field)
  else
    redis.call('HSET', KEYS[1], field, ARGV[7 + k + i])
  end
end
local listed = KEYS[17] ~= KEYS[15] -- on a cluster the caller lists it
if ARGV[15 + k] == '' then
  redis.call('HDEL', KEYS[1], 'room_rate', 'room_max', 'room_ttl')
  if listed then redis.call('HDEL', KEYS[17], ARGV[5 + k]) end
else
  redis.call('HSET', KEYS[1], 'room_rate', ARGV[15 + k], 'room_max', ARGV[16 + k],
             'room_ttl', ARGV[17 + k])
  if listed then
    redis.call('HSET', KEYS[17], ARGV[5 + k],
               ARGV[15 + k] .. ' ' .. ARGV[16 + k] .. ' ' .. ARGV[17 + k])
  end
end
if ARGV[7 + k] == '' and existed == 1 then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
elseif ARGV[7 + k] == '' then
  -- a new SKU (or one made again after DELETE): its first epoch is this Redis's
  -- clock in microseconds, never one a retired life of the same name had
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'epoch', string.format('%d', t[1] * 1000000 + t[2]))
else
  redis.call('HSET', KEYS[1], 'epoch', ARGV[7 + k])
end
if ARGV[11 + k] ~= '' then
  redis.call('HSET', KEYS[1], 'outbox', redis.call('HGET', KEYS[1], 'epoch'))
  if ARGV[11 + k] == '1' then redis.call('SADD', KEYS[15], KEYS[16]) end
else
  redis.call('HDEL', KEYS[1], 'outbox')
end
redis.call('PUBLISH', ARGV[4 + k], ARGV[5 + k])
return existed == 1 and 0 or 1
