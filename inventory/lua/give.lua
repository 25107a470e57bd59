-- Piece, not a script: `--#include "give.lua"` (after back.lua, window.lua
-- and outbox.lua) in pay.lua, cancel.lua and due.lua. No KEYS or ARGV of its own.
-- give_back(k, okey, id, state): a pending order's end without payment: its
-- record okey says `state` ('cancelled' or 'expired'), its units go back to
-- the segments they came from (the back hash, see back.lua; meta's
-- remaining, the avail index), they no longer count as sold, pending or to
-- the buyer's per-user limit; the order leaves the due set and the life list
-- records "<id> <state>", the outbox (outbox.lua) its event. k names the
-- SKU's keys: meta, stock, sold, buyers, back, due, life, avail, events, and
-- its sku. The caller checked that the order is pending; it
-- publishes on the reset channel once (so that no instance answers sold_out
-- from memory). Returns the units given back.
-- life_keys(first, sku): such a k from KEYS[first .. first + 8], named in
-- that order (each script that gives back passes them so).
local function life_keys(first, sku)
  local k = {sku = sku}
  for i, name in ipairs({'meta', 'stock', 'sold', 'buyers', 'back', 'due', 'life', 'avail',
                         'events'}) do
    k[name] = KEYS[first + i - 1]
  end
  return k
end
local function give_back(k, okey, id, state)
  local o = redis.call('HMGET', okey, 'user_id', 'qty', 'segment', 'segments')
  local qty = tonumber(o[2])
  local parts = {}
  if o[4] then
    for seg, units in string.gmatch(o[4], '(%d+):(%d+)') do
      parts[#parts + 1] = {seg, tonumber(units)}
    end
  else
    parts[1] = {o[3], qty}
  end
  for _, p in ipairs(parts) do
    local b = redis.call('HINCRBY', k.back, p[1], p[2])
    local s = tonumber(redis.call('HGET', k.stock, p[1]) or '0')
    redis.call('ZADD', k.avail, s + b, p[1])
    redis.call('HINCRBY', k.sold, p[1], -p[2])
  end
  redis.call('HINCRBY', k.meta, 'remaining', qty)
  redis.call('HINCRBY', k.meta, 'sold', -qty)
  redis.call('HINCRBY', k.meta, 'pending', -qty)
  redis.call('HINCRBY', k.meta, 'returned', qty)
  redis.call('HINCRBY', k.meta, state, 1)
  if redis.call('HINCRBY', k.buyers, o[1], -qty) <= 0 then
    redis.call('HDEL', k.buyers, o[1])
  end
  redis.call('HSET', okey, 'state', state)
  redis.call('ZREM', k.due, id)
  redis.call('RPUSH', k.life, id .. ' ' .. state)
  outbox_add(k.events, redis.call('HGET', k.meta, 'outbox'), id, state, k.sku, o[1], o[2])
  return qty
end
