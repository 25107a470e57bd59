-- A payment for a reservation (inventory/life.c): a pending order becomes
-- paid, unless its pay_by has come by this Redis's clock (the deadline
-- decides, not the sweep: then it expires here, its units go back).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/pay.lua.
-- KEYS[1] the hash of the order's record (rec.lua), [2] meta, [3] stock, [4] sold, [5] buyers, [6] back,
-- [7] due, [8] life, [9] avail, [10] events (the order's SKU's).
-- ARGV[1] order id, [2] payment id or '', [3] the reset channel
-- (SOLDOUT_CHANNEL), [4] the SKU.
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
local state = o.state or 'placed'
if state == 'paid' then
  local id = o.rec.payment_id or ''
  if ARGV[2] ~= '' and ARGV[2] ~= id then return {-16, 0, id} end
  return {2, 0, id, o.rec.paid_at or ''}
end
if state == 'placed' then return {-12} end
if state == 'cancelled' then return {-13} end
if state == 'expired' then return {-14, 0} end
local k = life_keys(2, ARGV[4])
local qty = o.qty
if not o.by or not o.ok then return {-17, KEYS[1]} end
if now_ms() >= o.by then
  local units, bad = give_back(k, KEYS[1], ARGV[1], 'expired', o)
  if not units then return bad end
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  return {-14, units}
end
local meta, bad = meta_get(KEYS[2], 'pending', 'paid', 'outbox')
if not meta then return bad end
local at = string.format('%d', now_ms())
o.rec.state, o.rec.paid_at, o.rec.payment_id = 'paid', at, ARGV[2] ~= '' and ARGV[2] or nil
local w = {}
rec_put(w, KEYS[1], ARGV[1], rec_text(o.rec), o.rec.old and meta[3] and true, o.rec.old)
rec_write(w)
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'pending', -qty)
redis.call('HINCRBY', KEYS[2], 'paid', qty)
redis.call('RPUSH', KEYS[8], ARGV[1] .. ' paid')
outbox_add(KEYS[10], meta[3], ARGV[1], 'paid', ARGV[4], o.user, o.qtext, o.seg, o.spread,
           't', at, ARGV[2] ~= '' and 'p' or nil, ARGV[2])
return {1, 0, ARGV[2], at}
