-- Piece, not a script: `--#include "record.lua"` in commit.lua, atomic.lua
-- and batch.lua (the build resolves it), run after the segment's stock was
-- written.
-- KEYS as theirs: [1] meta, [3] sold, [4] buyers, [5] orders, [7] idem. No
-- ARGV of its own.
-- record_order(okey, seg, qty, user, id, sku, idem_key): counts qty units of
-- segment seg (a string) sold to user, appends the audit record "<id> <user>
-- <qty> <seg>" to the orders list, writes the order's hash okey
-- (order:<id>), and the Idempotency-Key's record "<id> <qty> <user>" unless
-- idem_key is ''. Returns nothing.
local function record_order(okey, seg, qty, user, id, sku, idem_key)
  redis.call('HINCRBY', KEYS[3], seg, qty)
  redis.call('HINCRBY', KEYS[1], 'sold', qty)
  redis.call('HINCRBY', KEYS[1], 'orders', 1)
  redis.call('HINCRBY', KEYS[4], user, qty)
  local rec = table.concat({id, user, qty, seg}, ' ')
  redis.call('RPUSH', KEYS[5], rec)
  redis.call('HSET', okey, 'sku', sku, 'user_id', user, 'qty', qty,
             'segment', seg)
  if idem_key ~= '' then
    redis.call('HSET', KEYS[7], idem_key, table.concat({id, qty, user}, ' '))
  end
end
