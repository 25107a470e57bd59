-- What an order of the lock-guarded modes learns before taking any lock, in
-- one round trip (inventory/inventory.c).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/peek.lua.
-- KEYS[1] meta, [2] stock, [3] buyers, [4] idem.
-- ARGV[1] the user's routing number (seg_route), [2] qty, [3] user id, [4]
-- Idempotency-Key or '', [5] most candidates to return.
-- Returns {-1} for an unknown SKU, {-8} when the Idempotency-Key was used for
-- another user or qty, else {segments, limit, epoch, bought, first order id
-- or '', home, candidate segments...}: the segments that held at least qty,
-- home first, then in routing order. Stock only goes down within an epoch, so
-- a segment seen short is short: skipping it strands nothing, and no
-- candidates means sold out without taking a lock.
--#include "idem.lua"
--#include "limit.lua"
local meta = redis.call('HMGET', KEYS[1], 'segments', 'limit', 'epoch')
if not meta[1] then return {-1} end
local seen = idem_seen(KEYS[4], ARGV[4], ARGV[3], ARGV[2])
if seen and seen[1] == -8 then return seen end
local k, qty, most = tonumber(meta[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local home = tonumber(ARGV[1]) % k
local out = {k, tonumber(meta[2]), meta[3], bought(KEYS[3], ARGV[3]),
             seen and seen[2] or '', home}
for j = 0, k - 1 do
  local seg = (home + j) % k
  if tonumber(redis.call('HGET', KEYS[2], seg) or '0') >= qty then
    out[#out + 1] = seg
    if #out - 6 >= most then break end
  end
end
return out
