-- Piece, not a script: `--#include "xfer.lua"` in xfer_out.lua and xfer_in.lua
-- (the build resolves it, after malformed.lua, stock.lua and fence.lua).
-- KEYS as theirs: [1] meta, [2] stock, [3] init, [6] the segment lock's fence
-- key, [7] back. No ARGV of its own.
-- xfer_check(epoch, seg, token): what both steps of a transfer check before
-- their first write: the SKU's epoch, every value they compute with (meta's
-- initial and remaining, segment seg's stock, initial share and units given
-- back: malformed.lua), then the fence (which may write the mark: fence.lua).
-- Returns seg's stock (the stock hash's) and its units given back; or nil
-- and the script's answer: -1 the SKU was reset since, {-17, '<key>
-- <field>'}, -2 fenced off.
local function xfer_check(epoch, seg, token)
  local meta, bad = meta_get(KEYS[1], 'epoch', 'initial', 'remaining')
  if not meta then return nil, bad end
  if meta[1] ~= epoch then return nil, -1 end
  local was, folded = held(KEYS[2], KEYS[7], seg)
  if not was then return nil, folded end
  if not int_of(redis.call('HGET', KEYS[3], seg) or '0') then
    return nil, malformed(KEYS[3], seg)
  end
  if fenced(KEYS[6], token) then return nil, -2 end
  return was, folded
end
