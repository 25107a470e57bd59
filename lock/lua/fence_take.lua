-- The fencing token of a grant whose mode hands out none itself (lock/lock.c,
-- after a setnx or redlock grant): take_fence (fence.lua) on the data Redis.
-- Includes a piece, so it needs the build: `redis-cli --eval` the assembled
-- copy, build/gen/lock/lua/fence_take.lua.
-- KEYS[1] the lock's fence key ("<key>:fence").
-- ARGV[1] the grant's owner (128 random bits in hex).
-- Returns the token's number.
--#include "fence.lua"
return take_fence(KEYS[1], ARGV[1])
