-- Piece, not a script: `--#include "record.lua"` in commit.lua, atomic.lua
-- and batch.lua (the build resolves it, after outbox.lua), run after the
-- stock was written.
-- KEYS as theirs: [1] meta, [3] sold, [4] buyers, [5] orders, [7] idem. No
-- ARGV of its own.
-- record_order(okey, parts, qty, user, id, sku, idem_key, pay_by, due, box): parts lists the
-- segments the order draws from as {segment (a string), units} pairs, first
-- the one it is answered with. Counts the units sold of each segment and to
-- user, appends the audit record "<id> <user> <qty> <segment>" (an order of
-- several segments adds " <seg>:<units>,<seg>:<units>...") to the orders
-- list, writes the order's hash okey (order:<id>; `segments` holds the same
-- list for an order of several), and the Idempotency-Key's record "<id>
-- <qty> <user>" unless idem_key is ''. With a payment window, pay_by (a
-- number: milliseconds by the SKU's clock) makes the order pending: its record
-- says state pending and pay_by, the due zset (its key: due) holds it by
-- pay_by for the sweep (due.lua), meta counts its units as pending; nil for
-- an order final at once (no state field: placed). box: the outbox, {stream,
-- gen} (outbox.lua; gen nil: none): the order's event, placed or pending.
-- Returns nothing.
local function record_order(okey, parts, qty, user, id, sku, idem_key, pay_by, due, box)
  for _, p in ipairs(parts) do redis.call('HINCRBY', KEYS[3], p[1], p[2]) end
  redis.call('HINCRBY', KEYS[1], 'sold', qty)
  redis.call('HINCRBY', KEYS[1], 'orders', 1)
  redis.call('HINCRBY', KEYS[4], user, qty)
  local seg = parts[1][1]
  local rec = table.concat({id, user, qty, seg}, ' ')
  redis.call('HSET', okey, 'sku', sku, 'user_id', user, 'qty', qty,
             'segment', seg)
  if #parts > 1 then
    local spread = {}
    for _, p in ipairs(parts) do spread[#spread + 1] = p[1] .. ':' .. p[2] end
    spread = table.concat(spread, ',')
    rec = rec .. ' ' .. spread
    redis.call('HSET', okey, 'segments', spread)
  end
  if pay_by then
    local by = string.format('%d', pay_by)
    redis.call('HSET', okey, 'state', 'pending', 'pay_by', by)
    redis.call('ZADD', due, by, id)
    redis.call('HINCRBY', KEYS[1], 'pending', qty)
    outbox_add(box[1], box[2], id, 'pending', sku, user, qty, {'b', by})
  else
    outbox_add(box[1], box[2], id, 'placed', sku, user, qty)
  end
  redis.call('RPUSH', KEYS[5], rec)
  if idem_key ~= '' then
    redis.call('HSET', KEYS[7], idem_key, table.concat({id, qty, user}, ' '))
  end
end
