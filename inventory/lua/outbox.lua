-- Piece, not a script: `--#include "outbox.lua"` in every script that changes
-- an order's state (the build resolves it). No KEYS or ARGV of its own.
-- The transactional outbox: a change of an order's state is appended to the
-- events stream of its SKU's shard (seckill:events on one Redis; on a cluster
-- one per gene, in the slot of that gene's SKU shards, so the same script
-- writes it; every SKU of the shard shares it, the event names its SKU) by
-- the script that makes the change, so that the change and its event exist
-- together or not at all.
-- The sink (inventory/sink.c) carries them to PostgreSQL.
-- Only for a SKU whose meta field outbox is set (PUT by an instance with
-- --postgres: the value is the SKU's epoch then, the orders' generation in
-- the database); else nothing is appended.
-- outbox_add(stream, gen, id, state, sku, user, qty, seg, spread, name, value,
-- name2, value2):
-- appends the event o=id s=state k=sku u=user q=qty g=gen e=seg (the segment the
-- order is answered with), m=spread for an order of several segments
-- ("<seg>:<units>,...", as its record's segments; nil: one segment), then
-- name=value when name is given (pay_by b, payment id p, paid_at t), and
-- name2=value2 likewise, when gen is set. Every
-- event carries the order's segments, so that PostgreSQL can answer GET
-- /orders/{id} once the record has left Redis (--order-retention), whichever of
-- its events it got first. (The call is written out, not built in a table: it runs
-- once per order; only an order of several segments, rare, builds one.)
local function outbox_add(stream, gen, id, state, sku, user, qty, seg, spread, name, value,
                          name2, value2)
  if not gen then return end
  if spread or name2 then
    local f = {'o', id, 's', state, 'k', sku, 'u', user, 'q', qty, 'g', gen, 'e', seg}
    if spread then f[#f + 1], f[#f + 2] = 'm', spread end
    if name then f[#f + 1], f[#f + 2] = name, value end
    if name2 then f[#f + 1], f[#f + 2] = name2, value2 end
    redis.call('XADD', stream, '*', unpack(f))
  elseif name then
    redis.call('XADD', stream, '*', 'o', id, 's', state, 'k', sku, 'u', user, 'q', qty,
               'g', gen, 'e', seg, name, value)
  else
    redis.call('XADD', stream, '*', 'o', id, 's', state, 'k', sku, 'u', user, 'q', qty,
               'g', gen, 'e', seg)
  end
end
