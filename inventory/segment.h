/* segment: how a SKU's stock is split and how a user is routed. Pure functions. */
#ifndef SECKILL_SEGMENT_H
#define SECKILL_SEGMENT_H

#include <stdint.h>

#define INV_MAX_SEGMENTS 1024

/* Stock of segment i when `stock` units are split over k segments: every
 * segment gets stock / k and the first stock % k get one more, so the
 * segments add up to stock exactly and differ by at most one. */
long long seg_initial(long long stock, int k, int i);

/* A stable 64-bit hash of a user id (FNV-1a), the same in every instance and
 * every run, so a user always has the same home segment. */
uint64_t seg_user_hash(const char *user_id);

/* The user's routing number, 0..2^31-1 (exact in a Lua number, so a script
 * can route as C does). The home segment among k is seg_route() % k. */
uint32_t seg_route(const char *user_id);

/* The home segment of user_id among k segments: 0..k-1. */
int seg_home(const char *user_id, int k);

/* A hash of a SKU's segment (FNV-1a), to find its queue in a table or the
 * loop that serves it. */
uint32_t seg_queue_hash(const char *sku, int seg);

#endif
