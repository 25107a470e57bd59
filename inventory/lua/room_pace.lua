-- One tick of a room's pacer (inventory/roompace.c), run by the lease holder
-- on one Redis. It admits the next places of the queue, at most rate_per_s a
-- second (one second's worth banked at most), never more unused passes than
-- max_active nor than the units that remain, and publishes what it did.
-- KEYS[1] the pacer's lease (INV_ROOM_LEASE_KEY), [2] the SKU's meta, [3] the
-- room's queue (room_join.lua), [4] the room's hash, [5] its live passes (a
-- sorted set: user -> the pass's expiry, Redis ms), [6] the SKU's buyers
-- (user -> units bought), [7] the room's news (a stream: one entry per
-- change and a heartbeat a second, which every instance reads), [8] the
-- rooms' registry, [9] the room's ranks (room_join.lua), [10] the room's
-- seen set (place -> the last time its owner joined or polled, Redis ms:
-- room_join.lua, and every instance's polls of a tick in one ZADD).
-- ARGV[1] this instance's owner token, [2] the SKU, [3] the abandon window
-- (ms): a place not admitted whose owner has not polled for that long is
-- taken out of the queue (skipped: never admitted, never counted as waiting).
-- The room's hash: epoch (the SKU's; a reset empties the room), joined,
-- admitted (places admitted so far), cursor (the last place admitted, '' for
-- none), tokens, last_ms (the last tick), orders_seen, state, news_ms,
-- skipped (places taken out as abandoned so far).
-- A pass is live from its admission until it expires or its user has bought
-- (the buyers hash, looked at when the SKU's order count moved).
-- state: 'before' (the sale has not started), 'open', 'paused' (no unit left,
-- reservations pending that may come back), 'sold_out' (none left for good).
-- A news entry: e epoch, n admitted, c cursor, b the cursor before this tick
-- ('' for none), at (Redis ms of this tick: the admission time of the places
-- in (b, c] when b ~= c), s state,
-- w waiting, p pre-queue joiners, l live passes, r rate_per_s, t pass_ttl_ms,
-- x skipped so far, u the units that could still be sold beyond the live
-- passes (remaining - live, at least 0: the admissions left before the room can
-- admit no more) and o the whole tokens banked after this tick (admissions the
-- room may make at once), f the sale's start (Redis ms, 0 for none), from
-- which the instances bound how soon a sell-out
-- can come (service/room_routes.c: a waiting buyer then polls sooner), and k
-- the places skipped in this tick (space-separated; absent when none), which
-- the instances keep to answer their polls expired.
-- u only falls through an admission (a pass holder's order takes one unit and
-- one live pass), which publishes an entry: the last entry's u is never above
-- the truth by an admission the instances have not read.
-- Returns {0} when the lease is not ours (nothing done), {-1} when the SKU or
-- its room is gone (taken off the registry), else {1, places admitted now}.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local m = redis.call('HMGET', KEYS[2], 'epoch', 'room_rate', 'room_max', 'room_ttl',
                     'remaining', 'pending', 'orders', 'starts_ms')
if not m[1] or not m[2] or m[2] == '0' then
  redis.call('HDEL', KEYS[8], ARGV[2])
  return {-1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = m[1]
local rate, most, ttl = tonumber(m[2]), tonumber(m[3]), tonumber(m[4])
local remaining, pending = tonumber(m[5]) or 0, tonumber(m[6]) or 0
local g = redis.call('HMGET', KEYS[4], 'epoch', 'admitted', 'cursor', 'tokens', 'last_ms',
                     'orders_seen', 'state', 'news_ms', 'skipped')
if g[1] ~= epoch then -- a reset: an empty room (room_join.lua does the same)
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[7], KEYS[9], KEYS[10])
  redis.call('HSET', KEYS[4], 'epoch', epoch, 'joined', 0)
  g = {epoch, false, false, false, false, false, false, false, false}
end
local admitted = tonumber(g[2] or '0')
local cursor = g[3] or ''
local tokens = tonumber(g[4] or '0')
local last = tonumber(g[5] or now)
local skipped = tonumber(g[9] or '0')
-- abandoned places (their owners stopped polling): out of the queue, a
-- thousand a tick at most (the rest the next ticks); an admitted place only
-- leaves the seen set
local gone = {}
local stale = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', now - tonumber(ARGV[3]),
                         'LIMIT', 0, 1000)
for _, p in ipairs(stale) do
  if cursor == '' or tonumber(p) > tonumber(cursor) then
    local u = redis.call('ZRANGEBYSCORE', KEYS[3], p, p, 'LIMIT', 0, 1)
    if #u > 0 then
      redis.call('ZREM', KEYS[3], u[1])
      gone[#gone + 1] = p
    end
  end
  redis.call('ZREM', KEYS[10], p)
end
skipped = skipped + #gone
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
if (m[7] or '0') ~= g[6] then
  local users = redis.call('ZRANGE', KEYS[5], 0, -1)
  for i = 1, #users, 500 do
    local part = {unpack(users, i, math.min(i + 499, #users))}
    local got = redis.call('HMGET', KEYS[6], unpack(part))
    for j, u in ipairs(part) do
      if (tonumber(got[j] or '0') or 0) > 0 then redis.call('ZREM', KEYS[5], u) end
    end
  end
end
local live = redis.call('ZCARD', KEYS[5])
local state = 'open'
if remaining <= 0 then state = pending > 0 and 'paused' or 'sold_out' end
local starts = tonumber(m[8] or '0') or 0
if state == 'open' and starts > 0 and now < starts then state = 'before' end
if now > last then tokens = math.min(rate, tokens + rate * (now - last) / 1000) end
local n = 0
if state == 'open' then n = math.min(math.floor(tokens), most - live, remaining - live) end
local before = cursor
if n > 0 then
  local lo = cursor == '' and '-inf' or '(' .. cursor
  local got = redis.call('ZRANGEBYSCORE', KEYS[3], lo, '+inf', 'WITHSCORES', 'LIMIT', 0, n)
  for i = 1, #got, 2 do
    redis.call('ZADD', KEYS[5], now + ttl, got[i])
    cursor = string.format('%d', tonumber(got[i + 1]))
  end
  n = #got / 2
  admitted = admitted + n
  tokens = tokens - n
  live = live + n
end
local waiting = redis.call('ZCARD', KEYS[3]) - admitted
local news_ms = tonumber(g[8] or '0')
if n > 0 or #gone > 0 or state ~= g[7] or now - news_ms >= 1000 then
  local pre = redis.call('ZCOUNT', KEYS[3], '-inf', '(1000000000000000')
  local entry = {'e', epoch, 'n', admitted, 'b', n > 0 and before or cursor, 'c', cursor,
                 'at', string.format('%d', now), 's', state, 'w', waiting, 'p', pre,
                 'l', live, 'r', rate, 't', ttl, 'x', skipped,
                 'u', math.max(0, remaining - live), 'o', math.floor(tokens),
                 'f', string.format('%d', starts)}
  if #gone > 0 then
    entry[#entry + 1] = 'k'
    entry[#entry + 1] = table.concat(gone, ' ')
  end
  redis.call('XADD', KEYS[7], 'MINID', string.format('%d', now - ttl - 10000), '*',
             unpack(entry))
  news_ms = now
  for i = 3, 10 do
    if i ~= 6 and i ~= 8 then redis.call('PEXPIRE', KEYS[i], 172800000) end
  end
end
redis.call('HSET', KEYS[4], 'admitted', admitted, 'cursor', cursor, 'tokens', tostring(tokens),
           'last_ms', string.format('%d', now), 'orders_seen', m[7] or '0', 'state', state,
           'news_ms', string.format('%d', news_ms), 'skipped', skipped)
return {1, n}
