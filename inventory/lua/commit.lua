-- Commit of one order of the lock-guarded modes (inventory/inventory.c),
-- from one segment or from several, all or nothing.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/commit.lua.
-- KEYS[1] meta, [2] stock, [3] sold, [4] buyers, [5] orders, [6] the hash of the
-- order's record (rec.lua),
-- [7] idem, [8] avail, [9..8+n] the fence counter of each part's segment lock,
-- then back (back.lua), due and the deadline index (record.lua), and events
-- (outbox.lua).
-- ARGV[1] SKU epoch seen at the start, [2] qty, [3] user id, [4] order id,
-- [5] sku, [6] Idempotency-Key or '', [7] n, the number of parts, then four
-- per part, the first the segment the order is answered with: segment,
-- units taken from it, its stock as read under its lock, fencing token or
-- '0' (unfenced).
-- The new stock of a part is what the holder read minus what it takes, not
-- what Redis holds now: under a lock that excludes nobody (modes none,
-- local) a stale read oversells, as it must be seen to.
-- Each part's returned units (back.lua) are folded into its stock first.
-- Returns {1, pay_by or ''} placed (pay_by with a payment window), {-1} SKU reset since, {-2} fenced off (any part's lock
-- was granted to someone else since), {-3, first order id} idempotent replay,
-- {-4} per-user limit reached, {-8} Idempotency-Key used for another user or
-- qty, {-9} the order's record exists already (the id was issued twice: draw
-- another), the sale window's {-10, ...}, {-11, ''} or {-12, ''} paused (window.lua), {-17,
-- '<key> <field>'} a value it computes with is malformed (malformed.lua:
-- meta's numbers, the user's count in buyers, the Idempotency-Key's record,
-- a part's stock, units given back or sold). Writes nothing unless {1}:
-- every check comes before the first write.
--#include "malformed.lua"
--#include "idem.lua"
--#include "limit.lua"
--#include "stock.lua"
--#include "outbox.lua"
--#include "rec.lua"
--#include "record.lua"
--#include "window.lua"
--#include "back.lua"
--#include "fence.lua"
local meta, bad = meta_get(KEYS[1], 'epoch', 'limit', 'starts_ms', 'ends_ms', 'pay_ms',
                           'outbox', 'remaining', 'sold', 'orders', 'pending', 'paused')
if not meta then return bad end
if meta[1] ~= ARGV[1] then return {-1} end
local n = tonumber(ARGV[7])
for i = 0, n - 1 do
  local fence = ARGV[11 + 4 * i]
  if fence ~= '0' and not fence_holds(KEYS[9 + i], fence) then return {-2} end
end
if not meta[2] then return malformed(KEYS[1], 'limit') end
local seen = idem_seen(KEYS[7], ARGV[6], ARGV[3], ARGV[2])
if seen then return seen end
local pay = tonumber(meta[5] or '0')
local now = pay > 0 and now_ms() or nil
local shut = window_shut(meta[3], meta[4], now, meta[11])
if shut then return shut end
local qty = tonumber(ARGV[2])
local limit = tonumber(meta[2])
local t = tally()
t.bought[ARGV[3]] = bought(KEYS[4], ARGV[3])
if not t.bought[ARGV[3]] then return malformed(KEYS[4], ARGV[3]) end
if over_limit(t.bought[ARGV[3]], qty, limit) then return {-4} end
if redis.call('HEXISTS', KEYS[6], ARGV[4]) == 1 then return {-9} end
local parts, segs = {}, {}
for i = 0, n - 1 do
  parts[i + 1] = {ARGV[8 + 4 * i], tonumber(ARGV[9 + 4 * i])}
  segs[i + 1] = ARGV[8 + 4 * i]
end
local back, due, dues = KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1]
local h
h, bad = held_all(KEYS[2], back, segs)
if not h then return bad end
-- Every value is checked: the writes, the sold counts first (sold_first).
bad = sold_first(KEYS[3], parts)
if bad then return bad end
for i = 0, n - 1 do
  local seg, folded = segs[i + 1], h[i + 1][2]
  local read = tonumber(ARGV[10 + 4 * i]) + folded
  fold(back, seg, folded)
  set_stock(KEYS[1], KEYS[2], KEYS[8], seg, read - parts[i + 1][2], h[i + 1][1] + folded,
            t)
end
local by = now and string.format('%d', now + pay)
record_order(t, KEYS[6], parts, qty, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], by,
             {KEYS[#KEYS], meta[6]})
tally_write(t, due, dues, ARGV[5], {meta[7], meta[8], meta[9], meta[10]})
return {1, by or ''}
