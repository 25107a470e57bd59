-- Piece, not a script: `--#include "group.lua"` in the sink's scripts. No
-- KEYS or ARGV of its own.
-- group_info(stream, group): the group's XINFO GROUPS fields as a table
-- (name, pending, last-delivered-id, lag...), nil when the stream has no
-- such group.
-- id_ms(id): the milliseconds part of a stream id.
local function group_info(stream, group)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local t = {}
    for i = 1, #g, 2 do t[g[i]] = g[i + 1] end
    if t.name == group then return t end
  end
  return nil
end
local function id_ms(id)
  return tonumber(string.match(id, '^(%d+)'))
end
