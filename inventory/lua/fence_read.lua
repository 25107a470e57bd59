-- The first step under a lock whose fencing tokens come from outside the data
-- Redis (zk's czxid; inventory/inventory.c, lock.h lock_fence_external): raise
-- the segment's high-water token to the holder's, and read the segment's
-- stock. A holder whose token is below the mark was already succeeded by a
-- later holder (its lock is gone, whatever it believes): refused, nothing
-- changed. The commit scripts then check the mark as for tokens the data
-- Redis hands out itself: still the holder's token, or refused.
-- KEYS[1] the segment lock's fence key, [2] stock.
-- ARGV[1] the holder's token (a decimal integer, no leading zero), [2] segment.
-- Returns the segment's stock as HGET does (a string, or nil), or {-2} when
-- fenced off. Tokens are compared as decimal strings (length, then text): a
-- czxid may pass 2^53, where Lua's numbers stop being exact.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local mark = redis.call('GET', KEYS[1])
if mark and below(ARGV[1], mark) then return {-2} end
if mark ~= ARGV[1] then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('HGET', KEYS[2], ARGV[2])
