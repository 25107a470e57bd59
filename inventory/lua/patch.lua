-- A merchant's change of a live sale, PATCH /skus/{sku} (inventory/patch.c):
-- in one script, all or nothing. In the lock-guarded modes the caller holds
-- the write side of the SKU's read-write lock (every segment hold takes the
-- read side), so no hold has read a segment's stock that this changes; in
-- the atomic mode the script is the critical section (docs/design.md, "The
-- merchant's change").
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/patch.lua.
-- KEYS[1] meta, [2] stock, [3] init (each segment's units put on sale: PUT's,
-- plus added, minus withdrawn), [4] avail (stock.lua's index), [5] back
-- (back.lua), [6] the write lock's fence mark ("<lock key>:fence").
-- ARGV[1] units to add ('' none), [2] units to withdraw ('' none), [3]
-- paused: '1', '0' or '' (unchanged), [4] ends_ms ('' unchanged), [5] the
-- reset channel (SOLDOUT_CHANNEL: an add makes every instance forget the SKU
-- sold out), [6] the SKU, [7] the write grant's fencing token, '0' unfenced
-- (atomic mode), [8] '1': the units go straight into the stock hash (tests
-- only, SECKILL_TEST_PATCH_DIRECT: what a change without the back hash
-- does, it_patch_load), else ''.
-- Added units are spread over the segments as PUT spreads its stock (segment
-- i gets n / K, the first n % K one more); withdrawn ones come from the
-- segments' unsold units (stock plus given back), the fullest first, never
-- from units sold or pending.
-- The units go through the back hash (back.lua), as a cancel's do, never
-- into the stock hash: a segment's lock holder writes its stock as what it
-- read minus what it took, so a change written into the stock meanwhile
-- would be overwritten; the next writer of the segment folds the back hash
-- in (its value then, read in its commit). A withdrawal is a negative entry
-- there: at most stock + back, so no fold makes a segment negative.
-- meta's added and withdrawn count what every change did: the books balance
-- against initial + added - withdrawn (invariant 11).
-- With an outbox (meta's outbox field, the SKU's generation in PostgreSQL),
-- the change is one event in the SKU's stream, written here with it
-- (outbox_stock: the units added and withdrawn, the pause, the end), so that
-- PostgreSQL keeps the stock's history; a change that changed nothing (a
-- withdrawal that found no unsold unit, and nothing else) writes none.
-- Returns {1, withdrawn} done; {-1} unknown SKU; {-2} fenced off (a writer
-- whose lease ran out; nothing written); {-13, starts_ms} ends_ms not after
-- the sale's starts_at; {-17, '<key> <field>'} a value it reads is malformed.
-- Nothing is written unless {1}.
--#include "malformed.lua"
--#include "fence.lua"
--#include "outbox.lua"
local meta, bad = meta_get(KEYS[1], 'segments', 'remaining', 'added', 'withdrawn',
                           'starts_ms', 'outbox')
if not meta then return bad end
if not meta[1] then return {-1} end
local k = tonumber(meta[1])
if k < 1 then return malformed(KEYS[1], 'segments') end
if ARGV[7] ~= '0' and fenced(KEYS[6], ARGV[7]) then return {-2} end
if ARGV[4] ~= '' and meta[5] and tonumber(ARGV[4]) <= tonumber(meta[5]) then
  return {-13, meta[5]}
end
local add, want = tonumber(ARGV[1] ~= '' and ARGV[1] or '0'),
    tonumber(ARGV[2] ~= '' and ARGV[2] or '0')
-- every segment's stock and init read and checked before the first write
local stock, back, init = {}, {}, {}
if add > 0 or want > 0 then
  local segs = {}
  for i = 0, k - 1 do segs[i + 1] = tostring(i) end
  local s = redis.call('HMGET', KEYS[2], unpack(segs))
  local b = redis.call('HMGET', KEYS[5], unpack(segs))
  local n = redis.call('HMGET', KEYS[3], unpack(segs))
  for i = 1, k do
    stock[i], back[i], init[i] = int_of(s[i] or '0'), int_of(b[i] or '0'),
        int_of(n[i] or '0')
    if not stock[i] then return malformed(KEYS[2], segs[i]) end
    if not back[i] then return malformed(KEYS[5], segs[i]) end
    if not init[i] then return malformed(KEYS[3], segs[i]) end
    stock[i] = stock[i] + back[i] -- unsold: what the segment holds
  end
end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
elseif ARGV[3] == '0' then
  redis.call('HDEL', KEYS[1], 'paused')
end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'ends_ms', ARGV[4]) end
local remaining = tonumber(meta[2] or '0')
local function put(i, units)
  stock[i], init[i] = stock[i] + units, init[i] + units
  if ARGV[8] == '1' then
    redis.call('HSET', KEYS[2], i - 1, stock[i] - back[i])
  else
    back[i] = back[i] + units
    if back[i] == 0 then
      redis.call('HDEL', KEYS[5], i - 1)
    else
      redis.call('HSET', KEYS[5], i - 1, back[i])
    end
  end
  redis.call('HSET', KEYS[3], i - 1, init[i])
  if stock[i] > 0 then
    redis.call('ZADD', KEYS[4], stock[i], i - 1)
  else
    redis.call('ZREM', KEYS[4], i - 1)
  end
  remaining = remaining + units
end
if add > 0 then
  for i = 1, k do
    local units = math.floor(add / k) + ((i - 1) < add % k and 1 or 0)
    if units > 0 then put(i, units) end
  end
  redis.call('HINCRBY', KEYS[1], 'added', add)
  redis.call('PUBLISH', ARGV[5], ARGV[6])
end
local took = 0
while took < want do
  local best = 0
  for i = 1, k do
    if stock[i] > 0 and (best == 0 or stock[i] > stock[best]) then best = i end
  end
  if best == 0 then break end
  local units = math.min(stock[best], want - took)
  put(best, -units)
  took = took + units
end
if took > 0 then redis.call('HINCRBY', KEYS[1], 'withdrawn', took) end
if add > 0 or took > 0 then redis.call('HSET', KEYS[1], 'remaining', remaining) end
if add > 0 or took > 0 or ARGV[3] ~= '' or ARGV[4] ~= '' then
  outbox_stock(KEYS[7], meta[6], ARGV[6], add, took, ARGV[3], ARGV[4])
end
return {1, took}
