-- Group commit of the lock-guarded modes (inventory/inventory.c): the orders
-- of one segment that one lock hold serves, decided in turn and written in
-- one step. Orders the segment cannot serve learn where to go next.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/batch.lua.
-- KEYS[1] meta, [2] stock, [3] sold, [4] buyers, [5] orders, [6] the segment
-- lock's fence counter, [7] idem, [8] avail, [9..8+n] the hash of each
-- order's record in turn (rec.lua: a key may come several times), then back (back.lua), due and the deadline index
-- (record.lua), and events (outbox.lua).
-- ARGV[1] SKU epoch the batch was routed in, [2] segment, [3] the segment's
-- stock as read under the lock, [4] fencing token or '0' (unfenced), [5] sku,
-- then five per order: qty, user id, order id, Idempotency-Key or '', the
-- user's routing number (seg_route).
-- The stock decision starts from ARGV[3], what the holder read, not from what
-- Redis holds now: under a lock that excludes nobody (modes none, local) a
-- stale read oversells, as the single-order commit does. ARGV[3] '': what
-- Redis holds now (the atomic mode's group commit, which takes no lock: the
-- script is the critical section), with ARGV[4] '0'.
-- The segment's returned units (back.lua) are folded into its stock first.
-- Returns {-1} SKU reset since, {-2} fenced off (nothing written for either),
-- else two entries per order: {code, detail} with code 1 placed, detail its
-- pay_by when the SKU has a payment window (else ''); 0 short
-- here, detail the segment to try next (chosen by the routing number among
-- those holding qty, after this batch's writes) or -1 when no single segment
-- holds qty but the SKU does (an order of several segments); -5 sold out,
-- fewer than qty remain in the SKU, detail the per-user limit; -3 idempotent
-- replay, detail the first id; -4 per-user limit reached; -7 qty above the
-- limit; -8 Idempotency-Key used for another user or qty; -9 the order's
-- record exists already (the id was issued twice: draw another); -10, -11 and
-- -12 (paused) the sale window (window.lua) refused every order but replays; -17 the user's
-- count in buyers or the Idempotency-Key's record is malformed, detail
-- '<key> <field>' (malformed.lua). Only placed orders write. {-17, '<key>
-- <field>'} for the whole batch: a value of the SKU or the segment that it
-- computes with is malformed (meta's numbers, the segment's stock, units
-- given back or sold), and nothing was written: every check comes before the
-- first write.
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
if ARGV[4] ~= '0' and not fence_holds(KEYS[6], ARGV[4]) then return {-2} end
if not meta[2] then return malformed(KEYS[1], 'limit') end
local seg, sku = ARGV[2], ARGV[5]
local back, due, dues = KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1]
local box = {KEYS[#KEYS], meta[6]}
local was, folded = held(KEYS[2], back, seg)
if not was then return folded end
local stock = (ARGV[3] == '' and was or tonumber(ARGV[3])) + folded
local limit = tonumber(meta[2])
local pay = tonumber(meta[5] or '0')
local now = pay > 0 and now_ms() or nil
local by = now and string.format('%d', now + pay)
local shut = window_shut(meta[3], meta[4], now, meta[11])
local n = (#ARGV - 5) / 5
local t = tally()
local users, have = {}, t.bought
for i = 0, n - 1 do
  local user = ARGV[7 + 5 * i]
  if not have[user] then
    have[user] = true
    users[#users + 1] = user
  end
end
bought_by(KEYS[4], users, have)
-- An order's record exists already only when its id was issued twice (one
-- HMGET per hash of the batch's records says which), or the batch itself
-- placed it.
-- The batch's Idempotency-Keys are read at once too.
local taken, known
do
  local keys, ids, idem = {}, {}, {}
  for i = 0, n - 1 do
    keys[i + 1], ids[i + 1] = KEYS[9 + i], ARGV[8 + 5 * i]
    if ARGV[9 + 5 * i] ~= '' then idem[#idem + 1] = ARGV[9 + 5 * i] end
  end
  taken, known = rec_exist(keys, ids), idem_known(KEYS[7], idem)
end
-- Each order is decided first, nothing written: placed lists those placed,
-- more the units each user takes in this batch, fresh the keys it records.
local out, short, mine, placed, more, fresh, units = {}, {}, {}, {}, {}, {}, 0
for i = 0, n - 1 do
  local qtext, user, id, key = ARGV[6 + 5 * i], ARGV[7 + 5 * i],
      ARGV[8 + 5 * i], ARGV[9 + 5 * i]
  local qty = tonumber(qtext)
  local seen = idem_seen(KEYS[7], key, user, qtext, fresh, known)
  local code, detail = 1, ''
  if seen then
    code, detail = seen[1], seen[2] or ''
  elseif shut then
    code, detail = shut[1], shut[2]
  elseif qty > limit then
    code = -7
  elseif have[user] == false then
    code, detail = -17, KEYS[4] .. ' ' .. user
  elseif over_limit(have[user] + (more[user] or 0), qty, limit) then
    code = -4
  elseif qty > stock then
    code = 0
    short[#short + 1] = i
  elseif mine[id] or taken[id] then
    code = -9
  else
    stock, units = stock - qty, units + qty
    mine[id], more[user] = true, (more[user] or 0) + qty
    placed[#placed + 1] = i
    if key ~= '' then fresh[key] = id .. ' ' .. qtext .. ' ' .. user end
    detail = by or ''
  end
  out[#out + 1] = code
  out[#out + 1] = detail
end
-- Then written, the sold count first (sold_first: its refusal writes nothing).
local change = 0
if #placed > 0 then
  bad = sold_first(KEYS[3], {{seg, units}})
  if bad then return bad end
  fold(back, seg, folded)
  change = set_stock(KEYS[1], KEYS[2], KEYS[8], seg, stock, was + folded, t)
  for _, i in ipairs(placed) do
    local qtext = ARGV[6 + 5 * i]
    record_order(t, KEYS[9 + i], {{seg, tonumber(qtext)}}, tonumber(qtext), qtext,
                 ARGV[7 + 5 * i], ARGV[8 + 5 * i], sku, ARGV[9 + 5 * i], by, box)
  end
  tally_write(t, due, dues, sku, {meta[7], meta[8], meta[9], meta[10]})
end
-- (units given back without an order placed stay in the back hash, for the
-- next writer)
if #short == 0 then return out end
local left = tonumber(meta[7] or '0') + change
for _, i in ipairs(short) do
  local qty, route = tonumber(ARGV[6 + 5 * i]), tonumber(ARGV[10 + 5 * i])
  if left < qty then
    out[2 * i + 1], out[2 * i + 2] = -5, limit
  else
    local to = -1
    for _, c in ipairs(candidates(KEYS[8], qty, route, 2)) do
      if c ~= seg then
        to = tonumber(c)
        break
      end
    end
    out[2 * i + 2] = to
  end
end
return out
