-- The sweep of a SKU's reservations (inventory/life.c): every pending order
-- named here whose pay_by has come by this Redis's clock expires, and its
-- units go back. Any instance may run it at any time: an order is expired
-- once only (its state is checked here, in the same step), never after it
-- was paid or cancelled.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/due.lua.
-- KEYS[1] meta, [2] stock, [3] sold, [4] buyers, [5] back, [6] due, [7] life,
-- [8] avail, [9] events, [10] the deadline index of the SKU's shard,
-- [11..10+n] the hash of the record of each order named (rec.lua; read with
-- one HMGET per hash; every key it touches is declared: on a cluster, one a
-- slot move carried away is asked for again before anything runs).
-- ARGV[1] the reset channel, [2] the SKU, [3..2+n] the orders' ids (the
-- sweep read them from the due set, up to its pay_by now).
-- All or nothing: every record is read and checked before the first write.
-- A malformed one (give_read: no user, no whole qty, segments that do not add
-- up) is left as it is, still due, and counted; the others expire. A
-- malformed value of the SKU they compute with (give_write) leaves every one
-- as it is, each counted.
-- Then the SKU's score in the deadline index is its earliest due order's
-- pay_by, or it leaves the index when none is due any more.
-- Returns {orders expired, units given back, malformed records seen, orders
-- still due now besides those, the SKU's score in the index now (0: none)}.
--#include "malformed.lua"
--#include "window.lua"
--#include "back.lua"
--#include "outbox.lua"
--#include "rec.lua"
--#include "give.lua"
local now = now_ms()
local k = life_keys(1, ARGV[2])
local take, gone, bad = {}, {}, 0
local recs -- every record at once: one HMGET per hash
do
  local keys, ids = {}, {}
  for i = 3, #ARGV do keys[#keys + 1], ids[#ids + 1] = KEYS[8 + i], ARGV[i] end
  recs = rec_get_all(keys, ids)
end
for i = 3, #ARGV do
  local id, okey = ARGV[i], KEYS[8 + i]
  local o = give_of(recs[id])
  if o.state ~= 'pending' then
    gone[#gone + 1] = id -- paid, cancelled or expired meanwhile, or gone with a reset
  elseif not o.by then
    bad = bad + 1
  elseif o.by <= now then
    if o.ok then take[#take + 1] = {okey, id, o} else bad = bad + 1 end
  end
end
local g = give_tally()
local units = 0
for _, x in ipairs(take) do
  units = units + give_order(g, k, x[1], x[2], 'expired', x[3])
end
if give_write(g, k) then -- a value of the SKU malformed: nothing written,
  return {0, 0, bad + #take, 0, 0} -- the SKU still due (counted again each second)
end
if #gone > 0 then redis.call('ZREM', KEYS[6], unpack(gone)) end
local first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
if first[2] then
  redis.call('ZADD', KEYS[10], first[2], ARGV[2])
else
  redis.call('ZREM', KEYS[10], ARGV[2])
end
if #take > 0 then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return {#take, units, bad, redis.call('ZCOUNT', KEYS[6], '-inf', now) - bad,
        first[2] or 0}
