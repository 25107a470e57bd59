-- A cluster SKU's next epoch, in its directory (inventory/shards.c, PUT): one
-- more than the last; for a directory that does not exist (a new SKU, or one
-- made again after its retirement) this Redis's clock in microseconds, never
-- an epoch a retired life of the same name had.
-- KEYS[1] sk:{sku}:dir. Returns the new epoch.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HINCRBY', KEYS[1], 'epoch', 1)
end
local t = redis.call('TIME')
local epoch = t[1] * 1000000 + t[2]
redis.call('HSET', KEYS[1], 'epoch', string.format('%d', epoch))
return epoch
