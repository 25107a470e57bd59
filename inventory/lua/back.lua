-- Piece, not a script: `--#include "back.lua"` in the scripts that place
-- orders and in those that give units back (the build resolves it). No KEYS
-- or ARGV of its own.
-- Units given back by a cancelled or expired order (give_back, give.lua) wait
-- in the SKU's back hash (segment -> units), counted in meta's remaining and
-- in the avail index (score: stock + back) at once, but not in the stock hash:
-- a lock holder writes its segment's stock as what it read under the lock
-- minus what it took, so a return written into the stock meanwhile would be
-- overwritten. The next script that writes the segment's stock (a commit,
-- under the lock and its fence, a transfer, or the atomic script) first
-- folds them in: it reads them with the stock before its first write (held,
-- stock.lua), then drops them from the back hash (fold) as it writes the
-- stock with them included (set_stock: its old value is the stock hash's
-- plus them).
-- fold(back, seg, units): drops back's entry of seg (a string), which held
-- units.
local function fold(back, seg, units)
  if units ~= 0 then redis.call('HDEL', back, seg) end
end
