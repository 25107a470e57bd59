-- Piece, not a script: `--#include "back.lua"` in the scripts that place
-- orders and in those that give units back (the build resolves it). No KEYS
-- or ARGV of its own.
-- Units given back by a cancelled or expired order (give_back, give.lua) wait
-- in the SKU's back hash (segment -> units), counted in meta's remaining and
-- in the avail index (score: stock + back) at once, but not in the stock hash:
-- a lock holder writes its segment's stock as what it read under the lock
-- minus what it took, so a return written into the stock meanwhile would be
-- overwritten. The next script that writes the segment's stock (a commit,
-- under the lock and its fence, or the atomic script) first folds them in.
-- fold(stock, back, seg): moves back's units of seg (a string) into the stock
-- hash; returns them (0 for none).
local function fold(stock, back, seg)
  local b = redis.call('HGET', back, seg)
  if not b then return 0 end
  redis.call('HDEL', back, seg)
  redis.call('HINCRBY', stock, seg, b)
  return tonumber(b)
end
