-- The fields of one order's record (rec.lua), as HMGET would answer them of a
-- hash of its own: GET /orders/{id} (inventory/sku.c), a pay's or a cancel's
-- first read (inventory/life.c), a replay's first order (inventory/single.c).
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/inventory/lua/rec_read.lua.
-- KEYS[1] the hash of the order's record. ARGV[1] the order id, [2..] the
-- fields wanted (rec.lua's REC_FIELDS names).
-- Returns one value per field asked for, nil when absent (every one when
-- there is no such record). Writes nothing.
--#include "rec.lua"
local r = rec_get(KEYS[1], ARGV[1]) or {}
local out = {}
for i = 2, #ARGV do out[i - 1] = r[ARGV[i]] or false end
return out
