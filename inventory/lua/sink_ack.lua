-- The sink's acknowledgement (inventory/sink.c): events that reached
-- PostgreSQL (committed) leave the group's pending list, and the stream is
-- trimmed below the oldest event not yet in the database: the oldest one
-- still pending (delivered, not acknowledged), or, with none pending, the
-- one after the last delivered (every event up to it was delivered, so
-- acknowledged: an idle stream keeps no entry, only its last id and group).
-- With a retention (--order-retention), the records of the orders these
-- events settled (their final state, now in the database) no longer count
-- open in their hashes (rec.lua), and a hash with none open left expires
-- after the retention: GET /orders/{id} answers from PostgreSQL once it is
-- gone. An entry's settled orders are counted once, when it is acknowledged
-- (an acknowledgement sent again after a lost answer counts nothing). A hash
-- is in the stream's slot (its key has the stream's hash tag on a cluster).
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/sink_ack.lua.
-- KEYS[1] the events stream, [2..] the hashes of the records of the orders
-- settled (none without a retention). ARGV[1] the group, [2] the retention in
-- milliseconds, then two per entry applied: its id, and the orders it
-- settled, "<i>:<n>[,<i>:<n>...]" (n records in KEYS[i]), or ''.
-- Returns the number of entries acknowledged now.
--#include "group.lua"
local plain, settled, acked = {}, {}, 0
for i = 3, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    plain[#plain + 1] = ARGV[i]
  elseif redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
    acked = acked + 1
    for k, n in string.gmatch(ARGV[i + 1], '(%d+):(%d+)') do
      settled[k] = (settled[k] or 0) + tonumber(n)
    end
  end
end
if #plain > 0 then acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(plain)) end
local p = redis.call('XPENDING', KEYS[1], ARGV[1])
local floor = p[2]
if tonumber(p[1]) == 0 then
  local g = group_info(KEYS[1], ARGV[1])
  local ms, seq = string.match(g and g['last-delivered-id'] or '', '^(%d+)-(%d+)$')
  -- (a sequence too long to add 1 to exactly keeps the last entry)
  floor = ms and (#seq < 15 and ms .. '-' .. (tonumber(seq) + 1) or ms .. '-' .. seq)
end
if floor then redis.call('XTRIM', KEYS[1], 'MINID', floor) end
for k, n in pairs(settled) do
  local key = KEYS[tonumber(k)]
  if redis.call('HINCRBY', key, '#open', -n) <= 0 then redis.call('PEXPIRE', key, ARGV[2]) end
end
return acked
