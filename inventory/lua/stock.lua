-- Piece, not a script: `--#include "stock.lua"` in the scripts that read or
-- write a SKU's stock (the build resolves it, after malformed.lua). No KEYS
-- or ARGV of its own.
-- Besides the stock hash (segment -> remaining), a SKU keeps an index that
-- every write maintains, so that no order path scans the K segments:
--   meta's `remaining`  the sum of the stock hash
--   the avail zset      segment -> stock, for the segments holding any
-- held(stock, back, seg): segment seg's stock (the stock hash's, 0 for
-- none) and its units given back, not folded yet (back.lua), read before the
-- script's first write: two numbers; or nil and malformed's answer when one
-- is not a number (malformed.lua: nothing may be written).
-- held_all(stock, back, segs): the same for each of the list segs (strings),
-- with one HMGET of each hash: {{stock, back}, ...} in their order, or nil
-- and malformed's answer.
-- set_stock(meta, stock, avail, seg, new, old, t): writes segment seg's stock
-- (seg a string) and keeps the index with it; old is what the stock hash
-- holds, read in this same script (held's, plus the units it folds in).
-- Returns new - old, the change of meta's remaining, which it adds to meta's
-- remaining, or to t.remaining when t is given (a tally, record.lua, whose
-- tally_write writes meta's sums at once).
-- candidates(avail, qty, route, most): up to `most` segments holding at
-- least qty, chosen by the user's routing number among all that do, so that
-- orders that leave their home spread over what is left (O(log K)).
-- plan(avail, qty, home): for an order that no single segment can serve, the
-- segments to draw from as {segment, stock} pairs: home first when it holds
-- any (its units are the user's own share), then the fullest, until they
-- hold qty between them. An empty table when the SKU holds fewer.
local function held(stock, back, seg)
  local n = int_of(redis.call('HGET', stock, seg) or '0')
  if not n then return nil, malformed(stock, seg) end
  local u = int_of(redis.call('HGET', back, seg) or '0')
  if not u then return nil, malformed(back, seg) end
  return n, u
end
local function held_all(stock, back, segs)
  local s = redis.call('HMGET', stock, unpack(segs))
  local b = redis.call('HMGET', back, unpack(segs))
  local out = {}
  for i, seg in ipairs(segs) do
    local n, u = int_of(s[i] or '0'), int_of(b[i] or '0')
    if not n then return nil, malformed(stock, seg) end
    if not u then return nil, malformed(back, seg) end
    out[i] = {n, u}
  end
  return out
end
local function set_stock(meta, stock, avail, seg, new, old, t)
  redis.call('HSET', stock, seg, new)
  if t then
    t.remaining = t.remaining + new - old
  elseif new ~= old then
    redis.call('HINCRBY', meta, 'remaining', new - old)
  end
  if new > 0 then
    redis.call('ZADD', avail, new, seg)
  else
    redis.call('ZREM', avail, seg)
  end
  return new - old
end
local function candidates(avail, qty, route, most)
  local n = redis.call('ZCOUNT', avail, qty, '+inf')
  if n == 0 then return {} end
  local base = redis.call('ZCARD', avail) - n
  local first = route % n
  local last = math.min(first + most, n) - 1
  local out = redis.call('ZRANGE', avail, base + first, base + last)
  if #out < most and first > 0 then
    for _, seg in ipairs(redis.call('ZRANGE', avail, base,
                         base + math.min(first, most - #out) - 1)) do
      out[#out + 1] = seg
    end
  end
  return out
end
local function plan(avail, qty, home)
  local out, got = {}, 0
  local own = redis.call('ZSCORE', avail, home)
  if own then
    out[1], got = {home, tonumber(own)}, tonumber(own)
  end
  local top = redis.call('ZREVRANGE', avail, 0, qty, 'WITHSCORES')
  for i = 1, #top, 2 do
    if got >= qty then return out end
    if top[i] ~= home then
      out[#out + 1] = {top[i], tonumber(top[i + 1])}
      got = got + tonumber(top[i + 1])
    end
  end
  return got >= qty and out or {}
end
