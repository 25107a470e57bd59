-- A SKU on a Redis Cluster (inventory/inventory.c): the second step of a
-- transfer of units between shards (xfer_out.lua took them): under the lock
-- of segment ARGV[4], this shard gets them there, once; a repeat (the
-- transfer finished by another instance after its maker died) changes
-- nothing.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/xfer_in.lua.
-- KEYS[1] meta, [2] stock, [3] init, [4] avail, [5] xin (set: the transfer
-- ids applied here), [6] the segment lock's fence key, [7] back (units given
-- back to this segment, back.lua: folded in first).
-- ARGV[1] the SKU epoch, [2] transfer id, [3] units, [4] segment, [5] the
-- lock holder's fencing token, or '0' (unfenced).
-- Returns 1 applied, 0 applied before, -1 the SKU was reset since, -2
-- fenced off, {-17, '<key> <field>'} a value it computes with is malformed
-- (malformed.lua, as xfer_out.lua's): nothing written, the transfer not
-- marked applied; every check comes before the first write.
--#include "malformed.lua"
--#include "stock.lua"
--#include "fence.lua"
--#include "back.lua"
--#include "xfer.lua"
local seg = ARGV[4]
local was, folded = xfer_check(ARGV[1], seg, ARGV[5])
if not was then return folded end
if redis.call('SADD', KEYS[5], ARGV[2]) == 0 then return 0 end
local units = tonumber(ARGV[3])
local have = was + folded
fold(KEYS[7], seg, folded)
set_stock(KEYS[1], KEYS[2], KEYS[4], seg, have + units, have)
redis.call('HINCRBY', KEYS[3], seg, units)
redis.call('HINCRBY', KEYS[1], 'initial', units)
return 1
