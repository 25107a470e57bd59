/* room: a SKU's waiting room in Redis (issue 48; docs/api.md, "Waiting
 * room"): a buyer's join, and the room key shared through Redis. Blocking,
 * on the calling thread's session (the main thread's waiting routes, start).
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

/* Where a user stands in a room's queue. */
struct inv_room_place {
    long long epoch; /* the SKU's: a reset starts another queue */
    long long place; /* the score: a draw before the start, Redis's us after */
    long long rank;  /* 0: first, when it first joined */
    int joined;      /* 1: joined now; 0: had joined before */
};

/* user joins sku's room, or finds the place it has: one command (room_join.lua).
 * draw: a uniform random integer in [0, INV_ROOM_DRAWS), used when the sale
 * has not started. INV_OK with *out; INV_NOT_FOUND for no such SKU;
 * INV_NO_ROOM for a SKU without a room; INV_UNAVAILABLE (nothing written, or
 * the join is unknown: joining again is safe). */
inv_status inv_room_join(struct inv_session *s, const char *sku, const char *user,
                         long long draw, struct inv_room_place *out);

/* The shared room key (INV_ROOM_KEY) into key (cap >= 32): set to 32 bytes
 * of getrandom's when absent, then read, so that every instance reads the
 * same. Its length, or -1 when Redis failed or holds something else. */
int inv_room_key_shared(struct inv_session *s, unsigned char *key, size_t cap);

#endif
