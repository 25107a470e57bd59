-- Piece, not a script: `--#include "window.lua"` in the scripts that read the
-- sale's clock (the build resolves it). No KEYS or ARGV of its own.
-- now_ms(): this Redis's clock (TIME) in milliseconds since the Unix epoch:
-- one clock for every instance.
-- window_shut(starts, ends, now, paused): the SKU's sale window, its meta
-- fields starts_ms and ends_ms (milliseconds; nil or false: that end is
-- open), against now (nil: asked of TIME, only when the SKU has a window),
-- and meta's paused ('1': the merchant paused the sale, PATCH; patch.lua).
-- Returns nil while the sale is open; {-12, ''} while paused; {-10,
-- '<starts_ms> <wait_ms>'} before starts_ms (wait_ms until it); {-11, ''} at
-- or after ends_ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function window_shut(starts, ends, now, paused)
  if paused == '1' then return {-12, ''} end
  if not starts and not ends then return nil end
  now = now or now_ms()
  if starts and now < tonumber(starts) then
    return {-10, starts .. ' ' .. string.format('%d', tonumber(starts) - now)}
  end
  if ends and now >= tonumber(ends) then return {-11, ''} end
  return nil
end
