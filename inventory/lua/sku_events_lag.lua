-- The audit's store block (inventory/sku.c): how many of one SKU's events
-- are not in PostgreSQL yet (sku_lag.lua). Reads only.
-- Includes pieces, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/sku_events_lag.lua.
-- KEYS[1] the shard's events stream. ARGV[1] the sink's group, [2] the SKU.
-- Returns the count.
--#include "group.lua"
--#include "sku_lag.lua"
return sku_lag(KEYS[1], ARGV[1], ARGV[2], false)
