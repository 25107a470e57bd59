/* squeue: the ticket queues of one event loop's engine, one per SKU segment,
 * found by SKU and segment, and the list of those ready to be served, oldest
 * first. The tickets queued and the queues kept are counted in the
 * inventory's batch stats (inv_batch_stats).
 *
 * Not thread-safe: the owner (its loop) makes every call.
 * A queue lives until squeue_drop or squeues_free; tickets are linked through
 * t->next and stay the caller's. */
#ifndef SECKILL_SQUEUE_H
#define SECKILL_SQUEUE_H

#include <stdint.h>

#include "inventory.h"

#define SQUEUE_BUCKETS 1024

struct squeue {
    char sku[INV_ID_MAX + 1];
    int seg;
    struct inv_ticket *head, *tail;
    int busy;        /* a hold serves it */
    int ready;       /* on the ready list */
    long long bound; /* an upper bound of the segment's stock, -1 unknown: a
                        batch takes no more units than it (but one order) */
    struct squeues *qs; /* its set */
    struct squeue *hnext, *rnext;
    /* the engine's own list */
    int backed_off; /* its lock was taken: on the backed-off list */
    struct squeue *bnext;
};

struct squeues {
    struct inv *inv;
    struct squeue *buckets[SQUEUE_BUCKETS];
    struct squeue *ready_head, *ready_tail;
    uint64_t count; /* queues allocated */
};

/* An empty set of queues for inv's SKUs. */
void squeues_init(struct squeues *qs, struct inv *inv);
/* Frees every queue; left(t, arg) is called first for each ticket still in
 * one (NULL: none may be). */
void squeues_free(struct squeues *qs, void (*left)(struct inv_ticket *t, void *arg),
                  void *arg);

/* sku's segment seg's queue, made on first use (then *made is 1). */
struct squeue *squeue_get(struct squeues *qs, const char *sku, int seg, int *made);
/* Frees q, which holds no ticket and is not on the ready list. */
void squeue_drop(struct squeues *qs, struct squeue *q);

void squeue_push(struct squeue *q, struct inv_ticket *t);
/* Puts t[0..n-1] back at the head of q, in that order (a batch that could not
 * be served goes back whole, ahead of what queued meanwhile). */
void squeue_push_front(struct squeue *q, struct inv_ticket **t, int n);
/* The oldest ticket of q, which has one, taken off it. */
struct inv_ticket *squeue_pop(struct squeue *q);

/* Fills a batch t[*n..most-1] from q: its own tickets first, then, with room
 * left and limit not 0, those of the same SKU's other queues that wait (the
 * ready list, then the backed-off list from `backed_off` through bnext) and
 * whose head is of shard gene (on a cluster, one commit writes one shard).
 * No more units than limit (< 0: no bound; 0: q's own only, a full batch).
 * Every batch takes one ticket at least. */
void squeue_fill(struct squeues *qs, struct squeue *q, struct squeue *backed_off,
                 struct inv_ticket **t, int *n, int most, long long limit);

/* Appends q to the ready list (q->ready set). */
void squeue_ready_add(struct squeues *qs, struct squeue *q);
/* Takes q off the ready list (q->ready cleared); prev is the queue before it
 * there, NULL when q is the first. */
void squeue_ready_remove(struct squeues *qs, struct squeue *q, struct squeue *prev);

#endif
