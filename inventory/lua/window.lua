-- Piece, not a script: `--#include "window.lua"` in peek.lua, commit.lua,
-- batch.lua and atomic.lua (the build resolves it). No KEYS or ARGV of its own.
-- window_shut(starts, ends): the SKU's sale window, its meta fields starts_ms
-- and ends_ms (milliseconds since the Unix epoch; nil or false: that end is
-- open), against this Redis's clock: TIME, one clock for every instance,
-- asked only when the SKU has a window. Returns nil while the sale is open;
-- {-10, '<starts_ms> <wait_ms>'} before starts_ms (wait_ms until it);
-- {-11, ''} at or after ends_ms.
local function window_shut(starts, ends)
  if not starts and not ends then return nil end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if starts and now < tonumber(starts) then
    return {-10, starts .. ' ' .. string.format('%d', tonumber(starts) - now)}
  end
  if ends and now >= tonumber(ends) then return {-11, ''} end
  return nil
end
