-- The buyer cancels a reservation (inventory/life.c): a pending order
-- becomes cancelled and its units go back, unless its pay_by has come by this
-- Redis's clock (then it expires here, its units go back all the same).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/cancel.lua.
-- KEYS as pay.lua's. ARGV[1] order id, [2] the buyer's user id, [3] the
-- reset channel, [4] as pay.lua's (the SKU is the record's). Its answers carry the
-- record as pay.lua's do, but {-15}'s (nothing said of another user's order).
-- Returns {1, units} cancelled now (units given back), {2, 0} cancelled
-- before, {-1} no such order, {-15} another user's order (nothing said of
-- it), {-12} not pending (placed: final), {-16} paid, {-14, units} expired
-- (units: given back just now, else 0), {-17, the order's key} its record is
-- malformed, or {-17, '<key> <field>'} a value of the SKU (as pay.lua's):
-- nothing written. Every check comes before the
-- first write.
--#include "malformed.lua"
--#include "window.lua"
--#include "back.lua"
--#include "outbox.lua"
--#include "rec.lua"
--#include "give.lua"
local o = give_read(KEYS[1], ARGV[1])
if not o.qtext then return {-1} end
if o.user ~= ARGV[2] then return {-15} end
local sku = o.rec.sku
if not sku or sku == '' then return {-17, KEYS[1]} end
local answer = give_answer(o.rec)
local state = o.state or 'placed'
if state == 'cancelled' then return answer({2, 0}) end
if state == 'placed' then return answer({-12}) end
if state == 'paid' then return answer({-16}) end
if state == 'expired' then return answer({-14, 0}) end
local k = life_keys_of(sku, ARGV[4], KEYS[2])
if not o.by or not o.ok then return answer({-17, KEYS[1]}) end
local late = now_ms() >= o.by
local units, bad = give_back(k, KEYS[1], ARGV[1], late and 'expired' or 'cancelled', o)
if not units then return answer(bad) end
redis.call('PUBLISH', ARGV[3], sku)
return answer({late and -14 or 1, units})
