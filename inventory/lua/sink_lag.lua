-- The sink's lag on one events stream (inventory/sink.c, the audit; the sink
-- calls it only for a stream its XINFO GROUPS did not find idle): the
-- events not yet in PostgreSQL (not delivered to the group, or delivered
-- and not acknowledged) and the time of the oldest of them.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/sink_lag.lua.
-- KEYS[1] the events stream. ARGV[1] the group.
-- Returns {events, the oldest one's milliseconds (0: none), events pending
-- (delivered, not acknowledged)}.
--#include "group.lua"
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, 0} end
local g = group_info(KEYS[1], ARGV[1])
if not g then
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  return {redis.call('XLEN', KEYS[1]), first[1] and id_ms(first[1][1]) or 0, 0}
end
local last = g['last-delivered-id']
local lag = g.lag
if not lag then lag = #redis.call('XRANGE', KEYS[1], '(' .. last, '+') end
local p = redis.call('XPENDING', KEYS[1], ARGV[1])
local oldest = 0
if tonumber(p[1]) > 0 then
  oldest = id_ms(p[2])
else
  local nxt = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', 1)
  if nxt[1] then oldest = id_ms(nxt[1][1]) end
end
return {lag + tonumber(p[1]), oldest, tonumber(p[1])}
