-- Commit of one order of the lock-guarded modes (inventory/inventory.c),
-- from one segment or from several, all or nothing.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/commit.lua.
-- KEYS[1] meta, [2] stock, [3] sold, [4] buyers, [5] orders, [6] order:<id>,
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
-- qty, {-9} order:<id> exists already (the id was issued twice: draw
-- another), the sale window's {-10, ...} or {-11, ''} (window.lua). Writes
-- nothing unless {1}.
--#include "idem.lua"
--#include "limit.lua"
--#include "stock.lua"
--#include "outbox.lua"
--#include "record.lua"
--#include "window.lua"
--#include "back.lua"
--#include "fence.lua"
local meta = redis.call('HMGET', KEYS[1], 'epoch', 'limit', 'starts_ms', 'ends_ms',
                        'pay_ms', 'outbox')
if meta[1] ~= ARGV[1] then return {-1} end
local n = tonumber(ARGV[7])
for i = 0, n - 1 do
  local fence = ARGV[11 + 4 * i]
  if fence ~= '0' and not fence_holds(KEYS[9 + i], fence) then return {-2} end
end
local seen = idem_seen(KEYS[7], ARGV[6], ARGV[3], ARGV[2])
if seen then return seen end
local pay = tonumber(meta[5] or '0')
local now = pay > 0 and now_ms() or nil
local shut = window_shut(meta[3], meta[4], now)
if shut then return shut end
local qty = tonumber(ARGV[2])
local limit = tonumber(meta[2])
local t = tally()
t.bought[ARGV[3]] = bought(KEYS[4], ARGV[3])
if over_limit(t.bought[ARGV[3]], qty, limit) then return {-4} end
if redis.call('EXISTS', KEYS[6]) == 1 then return {-9} end
local parts = {}
local back, due, dues = KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1]
for i = 0, n - 1 do
  local seg, take = ARGV[8 + 4 * i], tonumber(ARGV[9 + 4 * i])
  local read = tonumber(ARGV[10 + 4 * i]) + fold(KEYS[2], back, seg)
  set_stock(KEYS[1], KEYS[2], KEYS[8], seg, read - take)
  parts[#parts + 1] = {seg, take}
end
local by = now and string.format('%d', now + pay)
record_order(t, KEYS[6], parts, qty, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], by,
             {KEYS[#KEYS], meta[6]})
tally_write(t, due, dues, ARGV[5])
return {1, by or ''}
