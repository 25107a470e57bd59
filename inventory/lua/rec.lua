-- Piece, not a script: `--#include "rec.lua"` in every script that reads or
-- writes an order's record (the build resolves it). No KEYS or ARGV of its
-- own.
-- Order records, many to a hash: an order's record is the field <id> of the
-- hash named by its records' prefix ('order:' on one Redis, 'o:{<gene tag>}:'
-- on a cluster, the shard's) and the id's digits but its last REC_DIGITS
-- (rec_key; '0' for an id of REC_DIGITS digits or fewer). With 9, one hash
-- holds the orders of ~238 ms (2^22 ids a millisecond: orderid.h), of every
-- instance, so that a commit writes its orders' records with one HSET (two
-- when its ids straddle a boundary), and the order id alone still names its
-- record: GET /orders/{id}, a pay, a cancel and the sweep find it in one
-- lookup (inventory.c's inv_record_key makes the same key).
-- The value is the record's fields in REC_FIELDS's order, one space between
-- two (no value holds one: ids, users and payment ids are [A-Za-z0-9_.:-]),
-- an absent one empty, the absent ones at the end left out: sku, user_id,
-- qty, segment (the one the order is answered with), segments (an order of
-- several: "<seg>:<units>,..."), state (absent: placed, final at once),
-- pay_by, payment_id, paid_at.
-- A hash also counts, in its field '#open', the records of SKUs with an
-- outbox whose final event has not reached PostgreSQL (rec_write): the sink
-- sets its expiry (--order-retention) when that count comes to 0
-- (sink_ack.lua), so that no record goes before the database has it.
-- rec_key(prefix, id): the key of id's hash.
-- rec_get(key, id): the record as a table of REC_FIELDS's names (absent:
-- nil), or nil when there is none. A record of the layout before (a hash of
-- its own, '<prefix><id>', its fields by name: builds before issue 47) is
-- read too, when the hash has none: r.old names its key then, which the
-- record's next write deletes (rec_put: the record moves into its hash, and
-- counts open there when its SKU has an outbox: its final event is on its way).
-- rec_get_all(keys, ids): id -> the record of ids[i] in hash keys[i] (as
-- rec_get's; absent: none), one HMGET per hash (and rec_get's own reads for
-- the records it did not find there: the layout before).
-- rec_text(r): the record's value.
-- rec_exist(keys, ids): the set of ids[i] whose record is in hash keys[i]
-- already, one HMGET per hash.
-- rec_put(w, key, id, text, open, old): adds a record's value to w ({} at
-- first), to write; open: it counts open in its hash from now on (a new
-- record of a SKU with an outbox); old: the key of its layout before, to
-- delete. rec_write(w) writes them, one HSET per hash, then adds each hash's
-- records that count open to its '#open' (a hash that had none left loses the
-- expiry the sink gave it), and deletes the old keys.
-- rec_drop(keys, ids, open): deletes the records ids[i] from hashes keys[i]
-- (a reset, a retirement); open: the SKU has an outbox, and its pending
-- orders' records no longer count open (rec_write counted them; their final
-- event will never come). A hash left with no record goes, and so do the
-- records of the layout before ('<prefix><id>').
local REC_DIGITS = 9
local REC_FIELDS = {'sku', 'user_id', 'qty', 'segment', 'segments', 'state', 'pay_by',
                    'payment_id', 'paid_at'}
local function rec_key(prefix, id)
  local n = #id - REC_DIGITS
  return prefix .. (n > 0 and string.sub(id, 1, n) or '0')
end
local function rec_parse(text)
  local r, i = {}, 1
  for v in string.gmatch(text .. ' ', '([^ ]*) ') do
    if v ~= '' and REC_FIELDS[i] then r[REC_FIELDS[i]] = v end
    i = i + 1
  end
  return r
end
-- the key of id's record in the layout before, from its hash's key
local function rec_old_key(key, id)
  local n = #id - REC_DIGITS
  return string.sub(key, 1, #key - (n > 0 and n or 1)) .. id
end
local function rec_get(key, id)
  local text = redis.call('HGET', key, id)
  if text then return rec_parse(text) end
  local old = rec_old_key(key, id)
  local f = redis.call('HGETALL', old)
  if #f == 0 then return nil end
  local r = {old = old}
  for i = 1, #f, 2 do r[f[i]] = f[i + 1] end
  return r
end
-- rec_seen(r): the first seven fields of r (sku .. pay_by) as a list, false for
-- a missing one: what rec_read.lua answers for them, so that C reads both alike
-- (inv_order_read).
local function rec_seen(r)
  local f = {}
  for i = 1, 7 do f[i] = r[REC_FIELDS[i]] or false end
  return f
end
local function rec_text(r)
  local f, last = {}, 0
  for i, name in ipairs(REC_FIELDS) do
    f[i] = r[name] or ''
    if r[name] then last = i end
  end
  return table.concat(f, ' ', 1, last)
end
-- (keys, ids) as lists of ids by hash: the hashes in the order met, each
-- hash -> its ids
local function rec_group(keys, ids)
  local by, order = {}, {}
  for i, key in ipairs(keys) do
    local l = by[key]
    if not l then
      l = {}
      by[key] = l
      order[#order + 1] = key
    end
    l[#l + 1] = ids[i]
  end
  return by, order
end
local function rec_exist(keys, ids)
  local by, order = rec_group(keys, ids)
  local found = {}
  for _, key in ipairs(order) do
    local l = by[key]
    local v = redis.call('HMGET', key, unpack(l))
    for j, id in ipairs(l) do
      if v[j] then found[id] = true end
    end
  end
  return found
end
local function rec_get_all(keys, ids)
  local by, order = rec_group(keys, ids)
  local out = {}
  for _, key in ipairs(order) do
    local l = by[key]
    for j, v in ipairs(redis.call('HMGET', key, unpack(l))) do
      if v then
        out[l[j]] = rec_parse(v)
      else
        out[l[j]] = rec_get(key, l[j]) -- not there: maybe of the layout before
      end
    end
  end
  return out
end
local function rec_put(w, key, id, text, open, old)
  local l = w[key]
  if not l then
    l = {open = 0}
    w[key] = l
    w[#w + 1] = key
  end
  l[#l + 1] = id
  l[#l + 1] = text
  if open then l.open = l.open + 1 end
  if old then
    w.old = w.old or {}
    w.old[#w.old + 1] = old
  end
end
local function rec_write(w)
  for _, key in ipairs(w) do
    local l = w[key]
    redis.call('HSET', key, unpack(l))
    local n = l.open
    if n > 0 and redis.call('HINCRBY', key, '#open', n) == n then
      redis.call('PERSIST', key)
    end
  end
  if w.old then redis.call('DEL', unpack(w.old)) end
end
local function rec_drop(keys, ids, open)
  local by, order = rec_group(keys, ids)
  for _, key in ipairs(order) do
    local l = by[key]
    if open then
      local n = 0
      for _, v in ipairs(redis.call('HMGET', key, unpack(l))) do
        if v and rec_parse(v).state == 'pending' then n = n + 1 end
      end
      if n > 0 then redis.call('HINCRBY', key, '#open', -n) end
    end
    redis.call('HDEL', key, unpack(l))
    local left = redis.call('HLEN', key)
    if left == 0 or (left == 1 and redis.call('HEXISTS', key, '#open') == 1) then
      redis.call('DEL', key)
    end
    local old = {}
    for i, id in ipairs(l) do old[i] = rec_old_key(key, id) end
    redis.call('DEL', unpack(old))
  end
end
