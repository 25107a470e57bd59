-- A SKU retired (DELETE /skus/{sku}, inventory/sku.c): on one Redis the whole
-- SKU, on a cluster one shard of it. Refused while anything is unsettled;
-- else every key of the SKU (of the shard) goes, its order records, its
-- segments' lock keys and fence marks, and its entry in the deadline index,
-- in one step (its events stay in the shard's stream, which every SKU of the
-- shard shares, until the sink has carried them and trimmed it), with the SKU published on the reset channel
-- (no instance answers from memory for it any more).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/retire.lua.
-- KEYS[1] meta, [2] stock, [3] init, [4] sold, [5] buyers, [6] orders, [7]
-- idem, [8] avail, [9] xout, [10] xin, [11] back, [12] due, [13] life, [14]
-- the deadline index, [15] the shard's events stream, [16] the summary it leaves (a hash:
-- initial, sold, orders, paid, returned, cancelled, expired) when ARGV[6] is
-- '1' (one Redis without --postgres; on a cluster the caller sums the shards'
-- answers into one, and with --postgres the database keeps the orders).
-- ARGV[1] the SKU, [2] the prefix of its order records' keys, [3] the prefix
-- of its segments' lock keys ('...:lock:'), [4] the sink's group, [5] the
-- reset channel, [6] '1' to leave the summary in KEYS[16].
-- Returns {1, initial, sold, orders, paid, returned, cancelled, expired}
-- retired (the sums it had), {0} no such SKU (or this shard retired before),
-- {-1, n} n units still pending (reservations), {-2} units on their way
-- between shards (a transfer out recorded here, xout, not yet applied where
-- it goes; xin only lists the transfers applied), {-3} events the sink has
-- not carried to PostgreSQL yet. Every check comes before the first write.
--#include "group.lua"
--#include "sku_lag.lua"
--#include "rec.lua"
local meta = redis.call('HMGET', KEYS[1], 'segments', 'pending', 'initial', 'sold',
                        'orders', 'paid', 'returned', 'cancelled', 'expired')
if not meta[1] then return {0} end
local pending = tonumber(meta[2] or '0')
if pending > 0 then return {-1, pending} end
if redis.call('EXISTS', KEYS[9]) == 1 then return {-2} end -- xout: taken out, not yet in
if sku_lag(KEYS[15], ARGV[4], ARGV[1], true) > 0 then return {-3} end
local n = redis.call('LLEN', KEYS[6])
for i = 0, n - 1, 1000 do
  local keys, ids = {}, {} -- none pending (above): none counts open
  for _, rec in ipairs(redis.call('LRANGE', KEYS[6], i, i + 999)) do
    local id = string.match(rec, '^(%d+)')
    keys[#keys + 1], ids[#ids + 1] = rec_key(ARGV[2], id), id
  end
  rec_drop(keys, ids, false)
end
local locks = {}
for i = 0, tonumber(meta[1]) - 1 do
  locks[#locks + 1] = ARGV[3] .. i
  locks[#locks + 1] = ARGV[3] .. i .. ':queue'
  locks[#locks + 1] = ARGV[3] .. i .. ':fence'
end
locks[#locks + 1] = ARGV[3] .. 'streams' -- a stand-in for the registry that builds
                                          -- before 2026-11-29 wrote on a cluster
redis.call('DEL', unpack(locks))
local sums, out = {}, {1}
for i, f in ipairs({'initial', 'sold', 'orders', 'paid', 'returned', 'cancelled',
                    'expired'}) do
  sums[#sums + 1] = f
  sums[#sums + 1] = meta[2 + i] or '0'
  out[#out + 1] = tonumber(meta[2 + i] or '0')
end
if ARGV[6] == '1' then redis.call('HSET', KEYS[16], unpack(sums)) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8],
           KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13])
redis.call('ZREM', KEYS[14], ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[1])
return out
