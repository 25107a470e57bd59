-- The sink's acknowledgement (inventory/sink.c): events that reached
-- PostgreSQL (committed) leave the group's pending list, and the stream is
-- trimmed below the oldest event not yet in the database: the oldest one
-- still pending (delivered, not acknowledged), or, with none pending, the
-- one after the last delivered (every event up to it was delivered, so
-- acknowledged: an idle stream keeps no entry, only its last id and group).
-- The records of the orders these events settled (their final state, now in
-- the database) expire after the retention (--order-retention): GET
-- /orders/{id} answers from PostgreSQL once they are gone. A record is in the
-- stream's slot (its key has the stream's hash tag on a cluster).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/sink_ack.lua.
-- KEYS[1] the events stream, [2..] the records of the orders settled (none
-- without a retention). ARGV[1] the group, [2] the retention in milliseconds
-- (> 0 when KEYS[2..] are given), [3..] the ids applied.
-- Returns the number of ids acknowledged now.
--#include "group.lua"
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 3))
local p = redis.call('XPENDING', KEYS[1], ARGV[1])
local floor = p[2]
if tonumber(p[1]) == 0 then
  local g = group_info(KEYS[1], ARGV[1])
  local ms, seq = string.match(g and g['last-delivered-id'] or '', '^(%d+)-(%d+)$')
  -- (a sequence too long to add 1 to exactly keeps the last entry)
  floor = ms and (#seq < 15 and ms .. '-' .. (tonumber(seq) + 1) or ms .. '-' .. seq)
end
if floor then redis.call('XTRIM', KEYS[1], 'MINID', floor) end
for i = 2, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return acked
