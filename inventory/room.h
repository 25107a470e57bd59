/* room: a SKU's waiting room in Redis (issue 48; docs/api.md, "Waiting
 * room"): a buyer's join, on the loop's engine (path.h's machines), and the
 * room key shared through Redis (blocking, at start).
 *
 * A room's keys are in the slot of {sku}: on one Redis beside the SKU's own,
 * on a Redis Cluster on the master of the SKU's directory (sk:{sku}:dir),
 * where its shards' other keys are not. A room lives on that one master
 * whatever the SKU's shards; its settings, the sale's start and the epoch
 * are read there (the SKU's meta on one Redis, the directory on a cluster):
 *   sk:{sku}:room:q   the queue: user ids scored by their place
 *   sk:{sku}:room     epoch (the SKU's, whose queue this is), joined, and the
 *                     pacer's (roompace.h)
 *   sk:{sku}:room:rank  user -> its rank when it joined
 *   sk:{sku}:room:seen  place -> when its owner last joined or polled (Redis
 *                     ms), for the pacer to skip abandoned places (roompace.h)
 * They expire two days after the last join (the pacer's keys, after its last
 * news). */
#ifndef SECKILL_ROOM_H
#define SECKILL_ROOM_H

#include <stddef.h>

#include "inventory.h"

/* The shared room key when no --room-key-file is given: 64 hex digits (32
 * random bytes), set once by the first instance (SET NX), read by the others. */
#define INV_ROOM_KEY "seckill:room:key"
/* A pre-queue joiner's place is drawn uniformly in [0, INV_ROOM_DRAWS);
 * every later place (Redis's clock in microseconds) is above it. */
#define INV_ROOM_DRAWS 1000000000000000LL

/* Fills t for a join of user to sku's room, or for finding the place it
 * has, to hand to a loop's engine like an order (inv_engine_submit): one
 * command (room_join.lua), pipelined with the loop's others. draw: a uniform
 * random integer in [0, INV_ROOM_DRAWS), the place when the sale has not
 * started. t->done once t->st is final: INV_OK with t->room; INV_NOT_FOUND
 * for no such SKU; INV_NO_ROOM for a SKU without a room; INV_UNAVAILABLE
 * (nothing written, or the join is unknown: joining again is safe). */
void inv_join_open(struct inv_ticket *t, const char *sku, const char *user,
                   long long draw);

/* The shared room key (INV_ROOM_KEY) into key (cap >= 32): set to 32 bytes
 * of getrandom's when absent, then read, so that every instance reads the
 * same. Its length, or -1 when Redis failed or holds something else. */
int inv_room_key_shared(struct inv_session *s, unsigned char *key, size_t cap);

#endif
