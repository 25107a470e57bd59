-- The sweep of a SKU's reservations (inventory/life.c): every pending order
-- whose pay_by has come by this Redis's clock expires, and its units go back.
-- Any instance may run it at any time: an order is expired once only (its
-- state is checked here, in the same step), never after it was paid or
-- cancelled.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/due.lua.
-- KEYS[1] meta, [2] stock, [3] sold, [4] buyers, [5] back, [6] due, [7] life,
-- [8] avail, [9] events.
-- ARGV[1] the prefix of the order records' keys ('order:'), [2] the most
-- orders to expire in one call, [3] the reset channel, [4] the SKU.
-- Returns {orders expired, units given back, orders still due now}.
--#include "window.lua"
--#include "back.lua"
--#include "outbox.lua"
--#include "give.lua"
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local k = life_keys(1, ARGV[4])
local orders, units = 0, 0
local g = give_tally()
for _, id in ipairs(ids) do
  local okey = ARGV[1] .. id
  if redis.call('HGET', okey, 'state') == 'pending' then
    units = units + give_order(g, k, okey, id, 'expired')
    orders = orders + 1
  else
    redis.call('ZREM', KEYS[6], id) -- not pending (a record gone with a reset)
  end
end
give_write(g, k)
if orders > 0 then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return {orders, units, redis.call('ZCOUNT', KEYS[6], '-inf', now)}
