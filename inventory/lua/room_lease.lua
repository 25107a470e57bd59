-- The rooms' tick (inventory/roompace.c): the pacer's lease, taken or renewed,
-- and the rooms' registry, read; one command a tick on every instance.
-- KEYS[1] the pacer's lease (INV_ROOM_LEASE_KEY: the owner's token), [2] the
-- rooms' registry (INV_ROOMS_KEY).
-- ARGV[1] this instance's owner token, [2] the lease, ms; '' to read only
-- (an instance that does not pace: on a Redis Cluster).
-- The lease is on Redis's clock (PX): an instance that stops renewing it is
-- replaced by another within a lease.
-- Returns {1 when this instance holds the lease now, else 0, Redis's clock in
-- ms, sku, "<rate_per_s> <max_active> <pass_ttl_ms>", sku, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = 0
if ARGV[2] ~= '' then
  local owner = redis.call('GET', KEYS[1])
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    mine = 1
  elseif not owner then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    mine = 1
  end
end
local out = {mine, string.format('%d', now)}
for _, v in ipairs(redis.call('HGETALL', KEYS[2])) do out[#out + 1] = v end
return out
