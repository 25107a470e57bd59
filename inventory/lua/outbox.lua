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
-- An event is the fields o=id s=state k=sku u=user q=qty g=gen e=seg (the
-- segment the order is answered with), m=spread for an order of several
-- segments ("<seg>:<units>,...", as its record's segments; absent: one
-- segment), then name=value when name is given (pay_by b, payment id p, paid_at
-- t), and name2=value2 likewise.
-- Every event carries the order's segments, so that PostgreSQL can answer GET
-- /orders/{id} once the record has left Redis (--order-retention), whichever
-- of its events it got first. A stream entry carries one event or several:
-- the events of one script go as one entry (one XADD per commit, not one per
-- order), and the sink reads a new event at each field named o.
-- outbox_event(f, gen, id, state, sku, user, qty, seg, spread, name, value,
-- name2, value2):
-- adds the event to f (a table, {} at first), when gen is set; nothing is
-- written yet.
-- outbox_write(stream, f): appends f's events to stream, as one entry of at
-- most OUTBOX_FIELDS fields each (a sweep expires up to 500 orders in a call:
-- Lua's unpack has a stack of 8,000).
-- outbox_add(stream, gen, id, state, sku, user, qty, seg, spread, name,
-- value, name2, value2): one event, written at once.
-- outbox_stock(stream, gen, sku, added, withdrawn, paused, ends_ms): a
-- merchant's change of the SKU's stock or sale (patch.lua), one entry of its
-- own whose first field is c (not o: the sink tells the two kinds by it):
-- c=stock k=sku g=gen a=units added w=units withdrawn, then z=paused ('1' or
-- '0') and n=ends_ms when the change set them. Its identity in the database
-- is the entry's (stream, id), as an order's event's: applied twice, it
-- changes nothing. When gen is set; else nothing.
local OUTBOX_FIELDS = 1024
local function outbox_event(f, gen, id, state, sku, user, qty, seg, spread, name, value,
                            name2, value2)
  if not gen then return end
  local n = #f
  f.starts = f.starts or {}
  f.starts[#f.starts + 1] = n + 1
  f[n + 1], f[n + 2], f[n + 3], f[n + 4], f[n + 5], f[n + 6] = 'o', id, 's', state, 'k', sku
  f[n + 7], f[n + 8], f[n + 9], f[n + 10], f[n + 11], f[n + 12] = 'u', user, 'q', qty, 'g', gen
  f[n + 13], f[n + 14] = 'e', seg
  n = n + 14
  if spread then
    f[n + 1], f[n + 2] = 'm', spread
    n = n + 2
  end
  if name then
    f[n + 1], f[n + 2] = name, value
    n = n + 2
  end
  if name2 then f[n + 1], f[n + 2] = name2, value2 end
end
local function outbox_write(stream, f)
  local starts, n = f.starts, #f
  if not starts then return end
  local from = 1
  for i = 2, #starts do
    if starts[i] - from > OUTBOX_FIELDS then
      redis.call('XADD', stream, '*', unpack(f, from, starts[i] - 1))
      from = starts[i]
    end
  end
  redis.call('XADD', stream, '*', unpack(f, from, n))
end
local function outbox_add(stream, gen, id, state, sku, user, qty, seg, spread, name, value,
                          name2, value2)
  local f = {}
  outbox_event(f, gen, id, state, sku, user, qty, seg, spread, name, value, name2, value2)
  outbox_write(stream, f)
end
local function outbox_stock(stream, gen, sku, added, withdrawn, paused, ends_ms)
  if not gen then return end
  local f = {'c', 'stock', 'k', sku, 'g', gen, 'a', added, 'w', withdrawn}
  if paused ~= '' then f[#f + 1], f[#f + 2] = 'z', paused end
  if ends_ms ~= '' then f[#f + 1], f[#f + 2] = 'n', ends_ms end
  redis.call('XADD', stream, '*', unpack(f))
end
