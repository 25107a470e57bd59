/* store: the system of record read back, with --postgres: what the orders'
 * rows in PostgreSQL (written by the sink, sink.h) say. The audit's store
 * block compares them with the records in Redis; GET /orders/{id} answers
 * from them once an order's record has left Redis (--order-retention, or its
 * SKU retired).
 *
 * Blocking, on a connection of its own, made on demand and kept: its callers
 * are the routes that wait (ROUTE_WAITS), on the main thread, never an event
 * loop. A connection that cannot be made is not tried again for STORE_BACKOFF_MS,
 * so that a database away costs the main thread one connect timeout a second at
 * most, not one per request. Any thread, one at a time (a mutex). */
#ifndef SECKILL_STORE_H
#define SECKILL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "inventory.h"

#define STORE_BACKOFF_MS 1000

struct svc_store;

/* A reader of the database conninfo names (copied); connects on first use. */
struct svc_store *svc_store_new(const char *conninfo);
void svc_store_free(struct svc_store *st); /* NULL is a no-op */

typedef enum {
    STORE_FOUND = 0,
    STORE_NOT_FOUND,   /* the database has no such order */
    STORE_UNAVAILABLE, /* the database could not be read: err says why */
} store_status;

/* What the database has of sku's generation: the count of the merchants'
 * changes of its stock (seckill_stock_events) and the units they added and
 * withdrew. */
struct store_stock {
    long long changes, added, withdrawn;
};

/* The orders of sku's generation in the database by state (inv_state), and
 * its stock's changes (stock; NULL: not asked), in one statement (one
 * snapshot): what the audit's store block compares with the records in Redis.
 * 0, or -1 with why in err when the database could not be read. */
int svc_store_counts(struct svc_store *st, const char *sku, const char *generation,
                     long long orders[INV_NSTATES], long long units[INV_NSTATES],
                     struct store_stock *stock, char *err, size_t errlen);

/* Order id as its row says, into out (as inv_order_fill: segment -1 for a row
 * whose every event came before schema 3, which had no segments). */
store_status svc_store_order(struct svc_store *st, uint64_t id, struct inv_order *out,
                             char *err, size_t errlen);

#endif
