#include "batch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_BUCKETS 1024

/* The tickets of one SKU segment (seg -1: the SKU's layout is unknown). */
struct queue {
    char sku[INV_ID_MAX + 1];
    int seg;
    struct inv_ticket *head, *tail;
    int busy;  /* a thread is serving it */
    int ready; /* on the ready list */
    struct queue *hnext, *rnext;
    struct queue *snext; /* seg -1: the SKU's segment queues; else the next of them */
};

struct worker {
    struct inv_batcher *b;
    pthread_t tid;
    struct rconn *rc;
    struct inv_session *s;
    struct inv_ticket **held; /* the batch being served */
};

struct inv_batcher {
    struct inv *inv;
    struct inv_batcher_config cfg;
    pthread_mutex_t mu; /* guards everything below but the atomics */
    pthread_cond_t cv;  /* a queue became ready, or stopping */
    struct queue *buckets[QUEUE_BUCKETS];
    struct queue *ready_head, *ready_tail; /* queues with tickets, not served */
    int stopping;
    uint64_t queued;
    uint64_t queues; /* allocated */
    _Atomic uint64_t batches, orders;
    struct worker *workers;
};

static uint32_t queue_hash(const char *sku, int seg)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = sku; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return (h ^ (uint32_t)seg) * 16777619u;
}

/* The queue of sku's segment seg, made on first use. Queues live until the
 * batcher stops: one per SKU segment this process sold from. */
static struct queue *queue_get(struct inv_batcher *b, const char *sku, int seg)
{
    struct queue **slot = &b->buckets[queue_hash(sku, seg) % QUEUE_BUCKETS];
    for (struct queue *q = *slot; q; q = q->hnext)
        if (q->seg == seg && strcmp(q->sku, sku) == 0)
            return q;
    struct queue *q = calloc(1, sizeof(*q));
    if (!q)
        abort();
    snprintf(q->sku, sizeof(q->sku), "%s", sku);
    q->seg = seg;
    q->hnext = *slot;
    *slot = q;
    b->queues++;
    if (seg >= 0) { /* listed on the SKU's layout-unknown queue */
        struct queue *anchor = queue_get(b, sku, -1);
        q->snext = anchor->snext;
        anchor->snext = q;
    }
    return q;
}

static void queue_push(struct queue *q, struct inv_ticket *t)
{
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
}

static struct inv_ticket *queue_pop(struct queue *q)
{
    struct inv_ticket *t = q->head;
    q->head = t->next;
    if (!q->head)
        q->tail = NULL;
    return t;
}

/* Puts q on the ready list when it has tickets and nobody serves it. */
static void queue_wake(struct inv_batcher *b, struct queue *q)
{
    if (!q->head || q->busy || q->ready)
        return;
    q->ready = 1;
    q->rnext = NULL;
    if (b->ready_tail)
        b->ready_tail->rnext = q;
    else
        b->ready_head = q;
    b->ready_tail = q;
    pthread_cond_signal(&b->cv);
}

static void enqueue(struct inv_batcher *b, struct inv_ticket *t)
{
    struct queue *q = queue_get(b, t->sku, t->home);
    queue_push(q, t);
    queue_wake(b, q);
}

/* Frees layout-unknown queue q when it is empty and its SKU has no segment
 * queues: a SKU that was never found (orders for made-up names) leaves no
 * memory behind. */
static void queue_drop_unknown(struct inv_batcher *b, struct queue *q)
{
    if (q->seg >= 0 || q->head || q->snext || q->busy || q->ready)
        return;
    struct queue **p = &b->buckets[queue_hash(q->sku, q->seg) % QUEUE_BUCKETS];
    while (*p != q)
        p = &(*p)->hnext;
    *p = q->hnext;
    b->queues--;
    free(q);
}

/* Moves the tickets of a layout-unknown queue whose layout is known now. */
static void queue_reroute(struct inv_batcher *b, struct queue *q)
{
    struct inv_ticket *keep = NULL, **tail = &keep;
    while (q->head) {
        struct inv_ticket *t = queue_pop(q);
        t->home = inv_ticket_route(b->inv, t);
        if (t->home >= 0) {
            enqueue(b, t);
        } else {
            t->next = NULL;
            *tail = t;
            tail = &t->next;
        }
    }
    for (struct inv_ticket *t = keep, *next; t; t = next) {
        next = t->next;
        queue_push(q, t);
    }
}

/* Serves one ready queue: takes its batch, runs it, hands the queue on.
 * Called and returns with b->mu held. */
static void serve(struct worker *w, struct queue *q)
{
    struct inv_batcher *b = w->b;
    q->busy = 1;
    int most = q->seg >= 0 ? b->cfg.batch : 1, n = 0;
    while (q->head && n < most)
        w->held[n++] = queue_pop(q);
    /* Room left: the hold also serves orders of the SKU's other segments
     * that wait for a hold of their own, so that a thin crowd spread over K
     * segments still fills batches. What this segment cannot serve goes its
     * own way afterwards, as any spill. */
    if (q->seg >= 0 && n < most)
        for (struct queue *o = queue_get(b, q->sku, -1)->snext; o && n < most;
             o = o->snext)
            while (o != q && o->head && n < most)
                w->held[n++] = queue_pop(o);
    b->queued -= (uint64_t)n;
    pthread_mutex_unlock(&b->mu);

    if (q->seg >= 0) {
        inv_ticket_batch(w->s, w->held, n, q->seg);
        atomic_fetch_add_explicit(&b->batches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->orders, (uint64_t)n, memory_order_relaxed);
    }
    for (int i = 0; i < n; i++)
        if (w->held[i]->st == INV_OK)
            inv_ticket_single(w->s, w->held[i]);

    pthread_mutex_lock(&b->mu);
    q->busy = 0;
    if (q->seg < 0)
        queue_reroute(b, q);
    queue_wake(b, q);
    queue_drop_unknown(b, q);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < n; i++)
        w->held[i]->done(w->held[i]); /* the ticket may be gone after this */
    pthread_mutex_lock(&b->mu);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct inv_batcher *b = w->b;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->ready_head && !b->stopping)
            pthread_cond_wait(&b->cv, &b->mu);
        struct queue *q = b->ready_head;
        if (!q)
            break; /* stopping, and nothing left to serve */
        b->ready_head = q->rnext;
        if (!b->ready_head)
            b->ready_tail = NULL;
        q->ready = 0;
        if (q->head) /* else another hold took its orders meanwhile */
            serve(w, q);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

struct inv_batcher *inv_batcher_start(struct inv *inv,
                                      const struct inv_batcher_config *cfg)
{
    struct inv_batcher *b = calloc(1, sizeof(*b));
    if (!b)
        abort();
    b->inv = inv;
    b->cfg = *cfg;
    if (b->cfg.batch < 1)
        b->cfg.batch = 1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->workers = calloc((size_t)cfg->threads, sizeof(*b->workers));
    if (!b->workers)
        abort();
    for (int i = 0; i < cfg->threads; i++) {
        struct worker *w = &b->workers[i];
        w->b = b;
        w->rc = rconn_new(cfg->redis_host, cfg->redis_port, cfg->redis_password, 1000);
        w->s = inv_session_new(inv, w->rc);
        w->held = calloc((size_t)b->cfg.batch, sizeof(*w->held));
        if (!w->held || pthread_create(&w->tid, NULL, worker_main, w) != 0)
            abort();
    }
    return b;
}

void inv_batcher_submit(struct inv_batcher *b, struct inv_ticket *t)
{
    pthread_mutex_lock(&b->mu);
    int stopping = b->stopping;
    if (!stopping) {
        b->queued++;
        enqueue(b, t);
    }
    pthread_mutex_unlock(&b->mu);
    if (stopping) {
        inv_ticket_fail(b->inv, t, INV_UNAVAILABLE);
        t->done(t);
    }
}

void inv_batcher_stop(struct inv_batcher *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    int stopped = b->stopping;
    b->stopping = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (stopped)
        return;
    for (int i = 0; i < b->cfg.threads; i++) {
        struct worker *w = &b->workers[i];
        pthread_join(w->tid, NULL);
        inv_session_free(w->s);
        rconn_free(w->rc);
        free(w->held);
    }
}

void inv_batcher_free(struct inv_batcher *b)
{
    if (!b)
        return;
    inv_batcher_stop(b);
    for (int i = 0; i < QUEUE_BUCKETS; i++)
        for (struct queue *q = b->buckets[i], *next; q; q = next) {
            next = q->hnext;
            free(q);
        }
    free(b->workers);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void inv_batcher_stats(struct inv_batcher *b, struct inv_batch_stats *out)
{
    out->batches = atomic_load(&b->batches);
    out->orders = atomic_load(&b->orders);
    pthread_mutex_lock(&b->mu);
    out->queued = b->queued;
    out->queues = b->queues;
    pthread_mutex_unlock(&b->mu);
}
