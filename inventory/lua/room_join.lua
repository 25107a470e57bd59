-- A buyer joins a SKU's waiting room (inventory/room.c): one command a join.
-- KEYS[1] the hash that holds the SKU's room, sale start and epoch (its meta
-- on one Redis; on a Redis Cluster its directory, sk:{sku}:dir, which the PUT
-- writes last), [2] the room's queue (a sorted set of user ids), [3] the
-- room's hash (epoch: the SKU's epoch the queue belongs to; joined), [4] the
-- ranks (user -> its rank when it joined, so that a join again answers the same),
-- [5] the room's seen set (place -> when its owner last joined or polled, Redis
-- ms: room_pace.lua skips the places abandoned).
-- Every key in the slot of {sku}.
-- ARGV[1] the user id, [2] a random draw, an integer in [0, 10^15), the
-- place of a user who joins before the sale starts (the pre-queue).
-- The place (the score) of a user who joins after the start is Redis's
-- clock in microseconds (> 10^15 since 2001): the pre-queue comes first, in
-- the uniformly random order of its draws, then every later joiner in the
-- order Redis saw them (first in, first out); no two users share a place.
-- Joining again changes nothing.
-- A SKU reset (a new epoch) starts an empty queue.
-- Returns {-2} for no SKU, {-1} for a SKU without a room, else
-- {1, place, rank when it joined (0: first), epoch, 1 when new (0: joined
-- before)}; place
-- and epoch as decimal strings.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'room_rate', 'starts_ms')
if not m[1] then return {-2} end
if not m[2] or m[2] == '0' then return {-1} end
local epoch = m[1]
if redis.call('HGET', KEYS[3], 'epoch') ~= epoch then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  redis.call('HSET', KEYS[3], 'epoch', epoch, 'joined', 0)
end
local place = redis.call('ZSCORE', KEYS[2], ARGV[1])
local new = 0
local t = redis.call('TIME')
if not place then
  local starts = tonumber(m[3] or '0') or 0
  if starts > 0 and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) < starts then
    place = ARGV[2]
  else
    place = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
  end
  -- places are unique (a tie would let the pacer's cursor, the last place
  -- admitted, stand for two users): a taken one is moved on by one
  while #redis.call('ZRANGEBYSCORE', KEYS[2], place, place, 'LIMIT', 0, 1) > 0 do
    place = string.format('%d', tonumber(place) + 1)
  end
  redis.call('ZADD', KEYS[2], 'NX', place, ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'joined', 1)
  redis.call('HSET', KEYS[4], ARGV[1], redis.call('ZRANK', KEYS[2], ARGV[1]))
  new = 1
end
redis.call('ZADD', KEYS[5], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
           string.format('%d', tonumber(place)))
-- a room nobody joins for two days goes (a SKU retired leaves nothing for long)
for i = 2, 5 do redis.call('PEXPIRE', KEYS[i], 172800000) end
return {1, string.format('%d', tonumber(place)),
        tonumber(redis.call('HGET', KEYS[4], ARGV[1]) or '0'), epoch, new}
