-- The read of a segment under its lock (inventory/hold.c), sent in the same
-- round trip as the lock's own command where the mode allows: it writes
-- nothing, so it may run even when the lock turns out not granted.
-- KEYS[1] stock, [2] back (units given back, not yet folded: back.lua).
-- ARGV[1] segment.
-- Returns {stock, back}, each a number (0 for none).
return {tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0'),
        tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')}
