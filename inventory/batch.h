/* batch: the order queues of the lock-guarded modes and the threads that
 * serve them, a group commit per segment (the database "hot row" technique).
 *
 * Tickets (inventory.h) queue per SKU segment. A batch thread takes a segment
 * whose queue is not being served, up to `batch` of its tickets, and runs them
 * under one lock hold (inv_ticket_batch); what the segment could not serve it
 * places one by one (inv_ticket_single, which also spills to other segments).
 * One segment is served by at most one thread of the process at a time, so
 * the process never contends with itself for a segment lock, and orders
 * arriving while a batch is in flight form the next batch.
 *
 * Tickets of a SKU whose segment count this process does not know yet queue
 * apart and are placed one by one; the first such order teaches the layout,
 * and the rest of its queue then moves to the segments' queues. */
#ifndef SECKILL_BATCH_H
#define SECKILL_BATCH_H

#include "inventory.h"

struct inv_batcher_config {
    int threads; /* batch threads, each with its own Redis connection */
    int batch;   /* most tickets one lock hold serves (>= 1) */
    const char *redis_host;
    int redis_port;
    const char *redis_password; /* NULL for none */
};

struct inv_batch_stats {
    uint64_t batches, orders; /* critical sections run, and the tickets they held */
    uint64_t handed;          /* tickets submitted to the threads (an event
                                 loop's: what it does not serve itself) */
    uint64_t queued;          /* tickets waiting now */
    uint64_t queues;          /* queues kept: one per SKU segment sold from, and
                                 one per SKU whose layout is being learnt */
};

struct inv_batcher;

/* A batcher of cfg->threads threads, started when the first ticket is
 * handed over (inv_batcher_submit): a process whose loops serve everything
 * has none. */
struct inv_batcher *inv_batcher_start(struct inv *inv,
                                      const struct inv_batcher_config *cfg);
/* Queues t, opened with inv_ticket_open. t->done(t) is called once, from a
 * batch thread, when t->st is final; t must stay valid until then. After
 * inv_batcher_stop began, t is answered INV_UNAVAILABLE at once (done is
 * still called). */
void inv_batcher_submit(struct inv_batcher *b, struct inv_ticket *t);
/* Serves every queued ticket, then stops the threads; a ticket submitted
 * afterwards is answered at once. NULL is a no-op. */
void inv_batcher_stop(struct inv_batcher *b);
void inv_batcher_free(struct inv_batcher *b); /* stops it first; NULL is a no-op */
void inv_batcher_stats(struct inv_batcher *b, struct inv_batch_stats *out);
/* Counts a critical section of n tickets run elsewhere (an event loop's
 * group commit, engine.c) in these stats. Any thread. */
void inv_batcher_note(struct inv_batcher *b, int n);

#endif
