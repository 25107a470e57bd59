/* sink: the orders' changes carried from the outbox streams in Redis
 * (inventory/lua/outbox.lua) into PostgreSQL, their system of record.
 *
 * Every instance with --postgres runs one, on loop 0; together they are one
 * consumer group (INV_SINK_GROUP) on each stream the registry
 * (INV_STREAMS_KEY) lists. A round reads events (XREADGROUP), writes them in one
 * PostgreSQL statement (one transaction, libpq's asynchronous API: pg/apg.h), and only
 * once that committed acknowledges them (XACK) and trims the stream below
 * the oldest event not yet in the database (inventory/lua/sink_ack.lua); with
 * --order-retention, the same call gives the records of the orders the round
 * settled their expiry (the database has their final state: store.h reads
 * it back once they are gone).
 * Events a dead or stuck consumer left pending for SINK_CLAIM_IDLE_MS are
 * claimed (XAUTOCLAIM) by whichever sink looks next. Applying an event twice
 * changes nothing: events are keyed by (stream, id), orders by their id, and
 * an order's state only moves forward (placed or pending, then paid,
 * cancelled or expired). An event that cannot be stored (malformed, or
 * refused by the database for its data) goes to seckill_dead_letters with its
 * error and is acknowledged: it holds up nothing. The schema is created when
 * missing, versioned (seckill_schema). See docs/design.md, "The system of
 * record". */
#ifndef SECKILL_SINK_H
#define SECKILL_SINK_H

#include <stdint.h>

#include "inventory.h"
#include "rconn.h"

#define SINK_CLAIM_IDLE_MS 5000
#define SINK_BATCH 512

struct event_base;
struct svc_sink;

/* What /metrics shows. */
struct svc_sink_stats {
    uint64_t events;    /* events this sink wrote (new to the database or not) */
    uint64_t batches;   /* transactions committed */
    uint64_t claimed;   /* events claimed from other consumers */
    uint64_t errors;    /* transactions failed (retried) */
    uint64_t skipped;   /* events that were not the outbox scripts' (not written) */
    uint64_t dead_letters; /* events put in seckill_dead_letters (the skipped, and
                              those the database refused for their data) */
    int64_t lag_events; /* events not yet in the database, every stream, last seen */
    double lag_seconds; /* age of the oldest of them */
    int up;             /* the database answered the last transaction */
};

/* A sink for the database conninfo names, reading one Redis (host:port) or
 * a Redis Cluster (nseeds seeds, copied) as consumer `consumer`. With
 * retention_ms > 0 (--order-retention), the record of an order whose final
 * event (placed, paid, cancelled, expired) it committed expires that long
 * after, at the acknowledgement (sink_ack.lua); 0: records stay. Starts on
 * svc_sink_attach. */
struct svc_sink *svc_sink_new(const char *conninfo, const char *host, int port,
                              const struct rconn_addr *seeds, int nseeds,
                              const char *password, const char *consumer,
                              long long retention_ms);
void svc_sink_attach(struct svc_sink *k, struct event_base *base);
/* On its loop, or once it stopped; what is on its way is dropped (its events
 * stay pending, claimed later). */
void svc_sink_detach(struct svc_sink *k);
void svc_sink_free(struct svc_sink *k); /* NULL is a no-op */
/* Any thread. */
void svc_sink_stats(const struct svc_sink *k, struct svc_sink_stats *out);

/* The schema (idempotent, under an advisory lock): what the sink sends
 * before its first transaction on each connection; the audit's check too. */
extern const char SINK_SCHEMA_SQL[];

#endif
