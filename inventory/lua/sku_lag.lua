-- Piece, not a script: `--#include "sku_lag.lua"` (after group.lua) in the
-- scripts that ask how far one SKU's events are from PostgreSQL: the audit
-- (sku_events_lag.lua) and the retirement (retire.lua). No KEYS or ARGV of its
-- own.
-- sku_lag(stream, group, sku, first_only): the events of sku in the shard's
-- stream (outbox.lua) not yet in PostgreSQL: those not yet delivered to the
-- sink's group, and those delivered and not acknowledged. Reads what lies
-- beyond what the sink acknowledged (normally a few events: the sink keeps up),
-- not the SKU's history. first_only: stop at the first (1 or 0).
local function sku_lag(stream, group, sku, first_only)
  if redis.call('EXISTS', stream) == 0 then return 0 end
  local n = 0
  local function count(entries)
    for _, e in ipairs(entries) do
      local f = e[2]
      for i = 1, #f, 2 do
        if f[i] == 'k' then
          if f[i + 1] == sku then n = n + 1 end
          break
        end
      end
      if first_only and n > 0 then return true end
    end
    return false
  end
  local g = group_info(stream, group)
  local from = g and ('(' .. g['last-delivered-id']) or '-'
  local at = from
  while true do -- undelivered, in pages
    local page = redis.call('XRANGE', stream, at, '+', 'COUNT', 1000)
    if #page == 0 or count(page) then break end
    at = '(' .. page[#page][1]
  end
  if first_only and n > 0 then return n end
  if g and tonumber(g.pending) > 0 then -- delivered, not acknowledged
    local at2 = '-'
    while true do
      local p = redis.call('XPENDING', stream, group, at2, '+', 1000)
      if #p == 0 then break end
      for _, x in ipairs(p) do
        if count(redis.call('XRANGE', stream, x[1], x[1])) then return n end
      end
      at2 = '(' .. p[#p][1]
    end
  end
  return n
end
