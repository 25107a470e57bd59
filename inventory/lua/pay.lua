-- A payment for a reservation (inventory/life.c): a pending order becomes
-- paid, unless its pay_by has come by this Redis's clock (the deadline
-- decides, not the sweep: then it expires here, its units go back).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/pay.lua.
-- KEYS[1] the hash of the order's record (rec.lua), [2] its shard's outbox stream.
-- ARGV[1] order id, [2] payment id or '', [3] the reset channel
-- (SOLDOUT_CHANNEL), [4] '' on one Redis, else the tag of the gene of the
-- order's id: the SKU's keys are named from the record's SKU (give.lua's
-- life_keys_of), so a pay is one call.
-- Every answer but {-1} (and {-17, key} of a record without its SKU) has the record as it was read (rec.lua's
-- rec_seen) for its fifth element, what comes before it padded with false.
-- Returns {1, 0, payment id, paid_at} paid now, {2, 0, payment id, paid_at}
-- paid before, by this payment id or by a pay that names none (a pay names
-- the order's payment, or none: a repeat), {-16, 0, payment id} paid before
-- by another payment id ('' when the pay that paid it named none; paid_at:
-- ms by this Redis's clock, '' for an order paid before it was kept), {-1} no such order, {-12}
-- not pending (an order of a SKU without a payment window), {-13} cancelled,
-- {-14, units} expired (units: given back just now, else 0), {-17, the
-- order's key} its record is malformed, or {-17, '<key> <field>'} a value of
-- the SKU it computes with (malformed.lua, give.lua's give_write) (no pay_by, user or whole qty, or segments that do not
-- add up to it): nothing written. Every check comes before the first write.
--#include "malformed.lua"
--#include "window.lua"
--#include "back.lua"
--#include "outbox.lua"
--#include "rec.lua"
--#include "give.lua"
local o = give_read(KEYS[1], ARGV[1])
if not o.qtext then return {-1} end
local sku = o.rec.sku
if not sku or sku == '' then return {-17, KEYS[1]} end
local answer = give_answer(o.rec)
local state = o.state or 'placed'
if state == 'paid' then
  local id = o.rec.payment_id or ''
  if ARGV[2] ~= '' and ARGV[2] ~= id then return answer({-16, 0, id}) end
  return answer({2, 0, id, o.rec.paid_at or ''})
end
if state == 'placed' then return answer({-12}) end
if state == 'cancelled' then return answer({-13}) end
if state == 'expired' then return answer({-14, 0}) end
local k = life_keys_of(sku, ARGV[4], KEYS[2])
local qty = o.qty
if not o.by or not o.ok then return answer({-17, KEYS[1]}) end
if now_ms() >= o.by then
  local units, bad = give_back(k, KEYS[1], ARGV[1], 'expired', o)
  if not units then return answer(bad) end
  redis.call('PUBLISH', ARGV[3], sku)
  return answer({-14, units})
end
local meta, bad = meta_get(k.meta, 'pending', 'paid', 'outbox')
if not meta then return answer(bad) end
local at = string.format('%d', now_ms())
o.rec.state, o.rec.paid_at, o.rec.payment_id = 'paid', at, ARGV[2] ~= '' and ARGV[2] or nil
local w = {}
rec_put(w, KEYS[1], ARGV[1], rec_text(o.rec), o.rec.old and meta[3] and true, o.rec.old)
rec_write(w)
redis.call('ZREM', k.due, ARGV[1])
redis.call('HSET', k.meta, 'pending', plus(meta[1], -qty), 'paid', plus(meta[2], qty))
redis.call('RPUSH', k.life, ARGV[1] .. ' paid')
outbox_add(k.events, meta[3], ARGV[1], 'paid', sku, o.user, o.qtext, o.seg, o.spread,
           't', at, ARGV[2] ~= '' and 'p' or nil, ARGV[2])
return answer({1, 0, ARGV[2], at})
