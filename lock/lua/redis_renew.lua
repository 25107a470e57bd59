-- Lease renewal of the redis lock mode (lock/redis_watchdog.c).
-- KEYS[1] lock hash.
-- ARGV[1] owner, ARGV[2] lease ms.
-- Returns 1 when renewed, 0 when ARGV[1] no longer holds it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
