-- A SKU on a Redis Cluster (inventory/inventory.c): the first step of moving
-- units from this shard to another whose users' orders ran short. Under
-- the lock of segment ARGV[6], takes up to ARGV[3] of its units (its stock
-- and initial share go down, as do the shard's) and records the transfer,
-- which the receiving shard applies once (xfer_in.lua).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/xfer_out.lua.
-- KEYS[1] meta, [2] stock, [3] init, [4] avail, [5] xout (hash: transfer id
-- -> "<receiving gene> <receiving segment> <units>", until it is applied),
-- [6] the segment lock's fence key, [7] back (units given back, back.lua:
-- folded into the segment's stock first, so that they can move too).
-- ARGV[1] the SKU epoch, [2] transfer id, [3] units wanted, [4] receiving
-- shard's gene, [5] receiving segment, [6] the segment giving them, [7] the
-- lock holder's fencing token, or '0' (unfenced).
-- Returns the units taken (0: the segment holds none), -1 when the SKU was
-- reset since, -2 when fenced off (nothing written for either), {-17, '<key>
-- <field>'} when a value it computes with is malformed (malformed.lua: meta's
-- initial or remaining, the segment's stock, initial share or units given
-- back): nothing written, every check comes before the first write.
--#include "malformed.lua"
--#include "stock.lua"
--#include "fence.lua"
--#include "back.lua"
--#include "xfer.lua"
local seg = ARGV[6]
local was, folded = xfer_check(ARGV[1], seg, ARGV[7])
if not was then return folded end
local have = was + folded
local got = math.min(have, tonumber(ARGV[3]))
if got > 0 then
  fold(KEYS[7], seg, folded)
  set_stock(KEYS[1], KEYS[2], KEYS[4], seg, have - got, have)
  redis.call('HINCRBY', KEYS[3], seg, -got)
  redis.call('HINCRBY', KEYS[1], 'initial', -got)
  redis.call('HSET', KEYS[5], ARGV[2], ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. got)
end
return got
