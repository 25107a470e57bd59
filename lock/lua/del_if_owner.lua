-- Owner-checked delete: redlock's release on every node (lock/lock_redlock.c)
-- and the order-id worker lease's drop (inventory/orderid.c).
-- KEYS[1] the key.
-- ARGV[1] the owner's token.
-- Returns 1 when deleted, 0 when the key is not ARGV[1]'s (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
