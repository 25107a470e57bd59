-- Renewal of the order-id worker lease (inventory/orderid.c).
-- KEYS[1] lease key, KEYS[2] high-water mark key.
-- ARGV[1] token (empty for a fixed id: no lease to check), ARGV[2] ttl ms,
-- ARGV[3] high-water mark (unix ms).
-- Returns 1 when renewed, 0 when the lease is no longer ours.
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local old = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[3]) > old then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
