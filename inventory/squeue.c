#include "squeue.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv_impl.h"
#include "segment.h"
#include "xalloc.h"

void squeues_init(struct squeues *qs, struct inv *inv)
{
    memset(qs, 0, sizeof(*qs));
    qs->inv = inv;
}

void squeues_free(struct squeues *qs, void (*left)(struct inv_ticket *t, void *arg),
                  void *arg)
{
    for (int i = 0; i < SQUEUE_BUCKETS; i++)
        for (struct squeue *q = qs->buckets[i], *next; q; q = next) {
            next = q->hnext;
            for (struct inv_ticket *t = q->head, *tn; t; t = tn) {
                tn = t->next;
                atomic_fetch_sub_explicit(&qs->inv->queued, 1, memory_order_relaxed);
                if (left)
                    left(t, arg);
            }
            atomic_fetch_sub_explicit(&qs->inv->queues, 1, memory_order_relaxed);
            free(q);
        }
    memset(qs->buckets, 0, sizeof(qs->buckets));
    qs->ready_head = qs->ready_tail = NULL;
    qs->count = 0;
}

static struct squeue **bucket(struct squeues *qs, const char *sku, int seg)
{
    return &qs->buckets[seg_queue_hash(sku, seg) % SQUEUE_BUCKETS];
}

struct squeue *squeue_get(struct squeues *qs, const char *sku, int seg, int *made)
{
    struct squeue **slot = bucket(qs, sku, seg);
    *made = 0;
    for (struct squeue *q = *slot; q; q = q->hnext)
        if (q->seg == seg && strcmp(q->sku, sku) == 0)
            return q;
    struct squeue *q = xcalloc(1, sizeof(*q));
    snprintf(q->sku, sizeof(q->sku), "%s", sku);
    q->seg = seg;
    q->bound = inv_segment_bound(qs->inv, sku, seg);
    q->qs = qs;
    q->hnext = *slot;
    *slot = q;
    qs->count++;
    atomic_fetch_add_explicit(&qs->inv->queues, 1, memory_order_relaxed);
    *made = 1;
    return q;
}

void squeue_drop(struct squeues *qs, struct squeue *q)
{
    struct squeue **p = bucket(qs, q->sku, q->seg);
    while (*p != q)
        p = &(*p)->hnext;
    *p = q->hnext;
    qs->count--;
    atomic_fetch_sub_explicit(&qs->inv->queues, 1, memory_order_relaxed);
    free(q);
}

void squeue_push(struct squeue *q, struct inv_ticket *t)
{
    atomic_fetch_add_explicit(&q->qs->inv->queued, 1, memory_order_relaxed);
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
}

void squeue_push_front(struct squeue *q, struct inv_ticket **t, int n)
{
    atomic_fetch_add_explicit(&q->qs->inv->queued, n, memory_order_relaxed);
    for (int i = n - 1; i >= 0; i--) {
        t[i]->next = q->head;
        q->head = t[i];
        if (!q->tail)
            q->tail = t[i];
    }
}

struct inv_ticket *squeue_pop(struct squeue *q)
{
    struct inv_ticket *t = q->head;
    atomic_fetch_sub_explicit(&q->qs->inv->queued, 1, memory_order_relaxed);
    q->head = t->next;
    if (!q->head)
        q->tail = NULL;
    return t;
}

void squeue_ready_add(struct squeues *qs, struct squeue *q)
{
    q->ready = 1;
    q->rnext = NULL;
    if (qs->ready_tail)
        qs->ready_tail->rnext = q;
    else
        qs->ready_head = q;
    qs->ready_tail = q;
}

void squeue_ready_remove(struct squeues *qs, struct squeue *q, struct squeue *prev)
{
    if (prev)
        prev->rnext = q->rnext;
    else
        qs->ready_head = q->rnext;
    if (qs->ready_tail == q)
        qs->ready_tail = prev;
    q->ready = 0;
}

/* Moves tickets from queue o's head into t[*n..] while there is room: fewer
 * than `most`, and their units within limit (< 0: none; one ticket always). */
static void take_from(struct squeue *o, struct inv_ticket **t, int *n, int most,
                      long long *units, long long limit)
{
    while (o->head && *n < most &&
           (*n == 0 || limit < 0 || *units + o->head->qty <= limit)) {
        struct inv_ticket *x = squeue_pop(o);
        *units += x->qty;
        t[(*n)++] = x;
    }
}

void squeue_fill(struct squeues *qs, struct squeue *q, struct squeue *backed_off,
                 struct inv_ticket **t, int *n, int most, long long limit)
{
    long long units = 0;
    for (int i = 0; i < *n; i++)
        units += t[i]->qty;
    take_from(q, t, n, most, &units, limit == 0 ? -1 : limit);
    if (limit == 0 || *n == 0)
        return;
    int gene = t[0]->gene;
    for (int pass = 0; pass < 2; pass++)
        for (struct squeue *o = pass ? backed_off : qs->ready_head; o && *n < most;
             o = pass ? o->bnext : o->rnext)
            if (o != q && !o->busy && strcmp(o->sku, q->sku) == 0 &&
                (!o->head || o->head->gene == gene)) /* one shard */
                take_from(o, t, n, most, &units, limit);
}
