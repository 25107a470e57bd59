/* orderid: snowflake order ids, unique across instances.
 *
 * An id is 41 bits of milliseconds since ORDERID_EPOCH_MS, 10 bits of worker
 * id (one per instance) and 12 bits of sequence within the millisecond. The
 * generator never goes back in time: when the clock jumps backwards it keeps
 * counting from the last millisecond it used (borrowing the next millisecond
 * when a sequence runs out), so ids stay unique and increasing.
 *
 * The worker id is leased in Redis (orderid_lease_*) unless given: a key per
 * worker id taken with SET NX PX (probing from a random point) and renewed
 * by a timer on the event loop it is attached to (orderid_lease_attach). Each renewal
 * also records a high-water mark a whole lease ahead of the generator's clock, and only
 * then lets the generator issue ids up to that mark (its ceiling), never beyond. An
 * instance that takes the id next starts above the mark, so it cannot issue an id this
 * one issued or still could, whatever the two clocks say; this one stops issuing at its
 * ceiling when renewals stop. */
#ifndef SECKILL_ORDERID_H
#define SECKILL_ORDERID_H

#include <pthread.h>
#include <stdint.h>

#include "rconn.h"

#define ORDERID_EPOCH_MS 1704067200000LL /* 2024-01-01T00:00:00Z */
#define ORDERID_MAX_WORKER 1023
#define ORDERID_SEQ_BITS 12
#define ORDERID_WORKER_BITS 10
/* On a Redis Cluster the low bits of the sequence are the order's gene (the
 * tag of the shard that holds it: cluster.h), set once the order is routed
 * (orderid_with_gene); the sequence proper keeps the rest. */
#define ORDERID_GENE_BITS 6

struct orderid_gen {
    pthread_mutex_t mu;
    int worker;
    int64_t last_ms; /* milliseconds since ORDERID_EPOCH_MS of the last id */
    int seq;
    int64_t ceiling_ms;       /* ids stay below this (ms since the epoch); 0: none */
    uint64_t clock_backwards; /* times the clock was seen going back */
    int64_t (*now_ms)(void);  /* wall clock in unix ms; injectable for tests */
    int gene_bits;            /* 0, or ORDERID_GENE_BITS (orderid_use_genes) */
};

/* Initialises gen for worker (0..1023). now_ms NULL means the real clock.
 * floor_ms (unix ms, 0 for none): no id is issued below this time. */
void orderid_init(struct orderid_gen *gen, int worker, int64_t (*now_ms)(void),
                  int64_t floor_ms);

/* Leaves the low ORDERID_GENE_BITS of every id's sequence 0 from now on,
 * for orderid_with_gene to fill: 64 ids per millisecond instead of 4096. */
void orderid_use_genes(struct orderid_gen *gen);

/* id with gene g (0..2^ORDERID_GENE_BITS-1) in its gene bits. */
uint64_t orderid_with_gene(uint64_t id, int g);

/* The gene of id. */
int orderid_gene_of(uint64_t id);

/* The next id, or 0 when it would reach the ceiling (the worker lease was
 * not renewed in time): no id is issued that the high-water mark does not
 * cover. Thread-safe. */
uint64_t orderid_next(struct orderid_gen *gen);

/* The worker id in use now (it changes when a lost lease is replaced). */
int orderid_worker(struct orderid_gen *gen);

/* Unix ms of the newest id issued so far (for the high-water mark). */
int64_t orderid_last_unix_ms(struct orderid_gen *gen);

int orderid_worker_of(uint64_t id);
int64_t orderid_unix_ms_of(uint64_t id);

/* Real wall clock in unix ms. */
int64_t orderid_wall_ms(void);

struct event_base;
struct orderid_lease;

#define ORDERID_LEASE_TTL_MS 10000

/* What happened to a lease, for the caller's log. */
typedef enum {
    ORDERID_LEASE_LOST,  /* a renewal found the id taken: no ids until a new one */
    ORDERID_LEASE_TAKEN, /* a new id was taken after a loss */
} orderid_lease_event;

struct orderid_lease_config {
    const char *host;
    int port;
    const char *password; /* NULL: none */
    int fixed;            /* >= 0: that worker id, no lease; -1: lease one */
    int ttl_ms;           /* 0: ORDERID_LEASE_TTL_MS; renewed every ttl/5 */
    /* A Redis Cluster (nseeds > 0): its seeds; host:port is one of them */
    const struct rconn_addr *seeds;
    int nseeds;
    /* Called on the attached loop's thread with the worker id concerned (the
     * new one for ORDERID_LEASE_TAKEN); NULL: not told. */
    void (*on_event)(orderid_lease_event ev, int worker);
};

/* Leases a worker id in Redis: cfg->fixed >= 0 takes that id without a lease
 * (the operator guarantees uniqueness, and no ceiling applies), otherwise the
 * first free id from a random point of 0..1023 is taken with SET NX PX.
 * Starts gen above the recorded high-water mark. Blocks (at start-up).
 * Renewals start with orderid_lease_attach. Returns NULL with err set when
 * Redis is unreachable or every id is taken. */
struct orderid_lease *orderid_lease_start(const struct orderid_lease_config *cfg,
                                          struct orderid_gen *gen, char *err,
                                          size_t errlen);
/* True while the lease is known to be held (renewed within its ttl). */
int orderid_lease_valid(struct orderid_lease *l);
/* Renews every ttl/5 on base from now on (a lease lost is replaced by a new
 * id, see orderid.c), on an async connection (on a cluster, a router) of
 * its own: before base runs, or on its thread. Without it the lease runs
 * out after its ttl and orderid_lease_valid turns false. */
void orderid_lease_attach(struct orderid_lease *l, struct event_base *base);
/* Stops renewing: on base's thread, or once it no longer runs. NULL or not
 * attached: a no-op. */
void orderid_lease_detach(struct orderid_lease *l);
/* Detaches (same rule), renews one last time, blocking (the mark stays for
 * the next holder of the id), and deletes the lease (if still ours). NULL is
 * a no-op. */
void orderid_lease_stop(struct orderid_lease *l);

#endif
