#include "batch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hold.h"
#include "squeue.h"
#include "xalloc.h"

/* The tickets of one SKU segment (seg -1: the SKU's layout is unknown). */

/* Most holds one thread keeps open during their orders' --work-us. */
#define PARK_MAX 8
/* Most times a batch sends a ticket on to another segment's queue. */
#define MAX_HOPS 4

/* A batch of one thread: its queue, its tickets, its open hold. */
struct slot {
    struct squeue *q;
    struct inv_ticket **held;
    int n;
    struct inv_hold h;
};

/* A batch thread. While its orders work (--work-us) a hold stays open and the
 * thread serves other segments' batches instead of sleeping. Two rules keep
 * that safe:
 *   - holding a lock, it only tries the next one (no wait): waiting while
 *     holding lets two instances each hold what the other waits for; a batch
 *     whose lock is taken goes back to its queue, and the thread takes no new
 *     batch until it holds nothing;
 *   - holding a lock, it places no order by itself (the peek path): such an
 *     order could enter a segment one of its holds has open (the redis lock is
 *     reentrant per session), and that hold's commit, which writes the stock
 *     it read before, would overwrite it. Those orders wait in `alone`. */
struct worker {
    struct inv_batcher *b;
    pthread_t tid;
    struct rconn *rc;
    struct inv_session *s;
    struct slot slot[PARK_MAX + 1]; /* [0..nparked-1] open holds, the rest free */
    int nparked;
    int no_batch; /* a try found a lock taken: no new batch until nparked is 0 */
    struct inv_ticket **alone; /* undecided tickets, placed once nothing is held */
    int nalone;
};

struct inv_batcher {
    struct inv *inv;
    struct inv_batcher_config cfg;
    pthread_mutex_t mu;    /* guards everything below but the atomics */
    pthread_cond_t cv;     /* a queue became ready, or stopping */
    struct squeues queues; /* ready: queues with tickets, not served */
    int stopping;
    int started; /* the threads run: from the first ticket handed over */
    uint64_t queued;
    _Atomic uint64_t batches, orders;
    _Atomic uint64_t handed; /* tickets submitted to the threads */
    struct worker *workers;
};

/* The queue of sku's segment seg, made on first use. Queues live until the
 * batcher stops: one per SKU segment this process sold from. */
static struct squeue *queue_get(struct inv_batcher *b, const char *sku, int seg)
{
    int made;
    struct squeue *q = squeue_get(&b->queues, sku, seg, &made);
    if (made && seg >= 0) { /* listed on the SKU's layout-unknown queue */
        struct squeue *anchor = queue_get(b, sku, -1);
        q->snext = anchor->snext;
        anchor->snext = q;
    }
    return q;
}

/* Puts q on the ready list when it has tickets and nobody serves it. */
static void queue_wake(struct inv_batcher *b, struct squeue *q)
{
    if (!q->head || q->busy || q->ready)
        return;
    squeue_ready_add(&b->queues, q);
    pthread_cond_signal(&b->cv);
}

static void enqueue(struct inv_batcher *b, struct inv_ticket *t)
{
    struct squeue *q = queue_get(b, t->sku, t->seg);
    squeue_push(q, t);
    queue_wake(b, q);
}

/* Frees layout-unknown queue q when it is empty and its SKU has no segment
 * queues: a SKU that was never found (orders for made-up names) leaves no
 * memory behind. */
static void queue_drop_unknown(struct inv_batcher *b, struct squeue *q)
{
    if (q->seg >= 0 || q->head || q->snext || q->busy || q->ready)
        return;
    squeue_drop(&b->queues, q);
}

/* Moves the tickets of a layout-unknown queue whose layout is known now. */
static void queue_reroute(struct inv_batcher *b, struct squeue *q)
{
    struct inv_ticket *keep = NULL, **tail = &keep;
    while (q->head) {
        struct inv_ticket *t = squeue_pop(q);
        if (inv_ticket_route(b->inv, t) >= 0) {
            enqueue(b, t);
        } else {
            t->next = NULL;
            *tail = t;
            tail = &t->next;
        }
    }
    for (struct inv_ticket *t = keep, *next; t; t = next) {
        next = t->next;
        squeue_push(q, t);
    }
}

/* The first ready queue this thread may serve; while it holds locks, not a
 * layout-unknown one (placed one by one: see struct worker). b->mu held. */
static struct squeue *ready_take(struct inv_batcher *b, int holding)
{
    for (struct squeue *q = b->queues.ready_head, *prev = NULL; q;
         prev = q, q = q->rnext) {
        if (holding && q->seg < 0)
            continue;
        squeue_ready_remove(&b->queues, q, prev);
        return q;
    }
    return NULL;
}

/* True when slot x, batching for q, has room for o's next ticket: fewer
 * than `most` tickets, and their units within q's bound (one ticket always).
 * An empty segment (bound 0) takes a full batch of its own queue: the commit
 * sends them all on at once. */
static int batch_room(const struct slot *x, const struct squeue *q,
                      const struct squeue *o, int most, long long units)
{
    if (!o->head || x->n >= most)
        return 0;
    if (q->bound == 0)
        return o == q;
    return x->n == 0 || q->bound < 0 || units + o->head->qty <= q->bound;
}

/* Takes q's batch into slot x (b->mu held): its own orders first; with room
 * left, the orders waiting in the SKU's other segment queues too, so that a
 * thin crowd spread over K segments still fills batches. No more units than
 * the segment may hold: orders it surely cannot serve wait for their own
 * segment's hold instead of bouncing off this one. What this segment cannot
 * serve goes its own way afterwards, as any spill. */
static void batch_take(struct worker *w, struct slot *x, struct squeue *q)
{
    struct inv_batcher *b = w->b;
    q->busy = 1;
    x->q = q;
    x->n = 0;
    x->h.left = -1;
    int most = q->seg >= 0 ? b->cfg.batch : 1;
    long long units = 0;
    while (batch_room(x, q, q, most, units)) {
        units += q->head->qty;
        x->held[x->n++] = squeue_pop(q);
    }
    /* Stealing walks the ready list, the queues that hold tickets, rather
     * than all of the SKU's queues: K of them, mostly empty, at K=1024. A
     * queue emptied here stays on the list; ready_take's taker skips it. */
    for (struct squeue *o = b->queues.ready_head; q->seg >= 0 && o && x->n < most;
         o = o->rnext)
        while (o->seg >= 0 && !o->busy && strcmp(o->sku, q->sku) == 0 &&
               batch_room(x, q, o, most, units) &&
               (x->n == 0 || o->head->gene == x->held[0]->gene)) { /* one shard */
            units += o->head->qty;
            x->held[x->n++] = squeue_pop(o);
        }
    b->queued -= (uint64_t)x->n;
}

/* Hands q on (b->mu held): nobody serves it now. */
static void queue_done(struct inv_batcher *b, struct squeue *q)
{
    q->busy = 0;
    if (q->seg < 0)
        queue_reroute(b, q);
    queue_wake(b, q);
    queue_drop_unknown(b, q);
}

/* True when undecided ticket t, just out of a batch on segment seg, queues
 * at the segment the batch named for it (t->seg): a few hops at most, then
 * it goes by itself, which also takes several segments when it needs them. */
static int ticket_sent_on(struct inv_ticket *t, int seg)
{
    return t->seg >= 0 && t->seg != seg && ++t->hops <= MAX_HOPS;
}

/* Ends slot x's batch (b->mu not held): undecided tickets go on to the queue
 * of the segment the batch named for them, or are placed by themselves now,
 * or kept for when this thread holds nothing; the queue is handed on; the
 * decided tickets are answered. A ticket sent on is not touched after it is
 * queued: another thread may answer it at once. */
static void batch_end(struct worker *w, struct slot *x)
{
    struct inv_batcher *b = w->b;
    int seg = x->q->seg, ndone = 0;
    if (seg >= 0) {
        atomic_fetch_add_explicit(&b->batches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->orders, (uint64_t)x->n, memory_order_relaxed);
    }
    struct inv_ticket *sent = NULL, **tail = &sent;
    for (int i = 0; i < x->n; i++) {
        struct inv_ticket *t = x->held[i];
        if (t->st == INV_PENDING && ticket_sent_on(t, seg)) {
            *tail = t;
            tail = &t->next;
            continue;
        }
        if (t->st == INV_PENDING && w->nparked > 0) {
            w->alone[w->nalone++] = t;
            continue;
        }
        if (t->st == INV_PENDING)
            inv_ticket_single(w->s, t);
        x->held[ndone++] = t;
    }
    *tail = NULL;
    pthread_mutex_lock(&b->mu);
    if (x->h.left >= 0) /* the hold read the segment: what it left is the bound */
        x->q->bound = x->h.left;
    for (struct inv_ticket *t = sent, *next; t; t = next) {
        next = t->next;
        b->queued++;
        enqueue(b, t);
    }
    queue_done(b, x->q);
    pthread_mutex_unlock(&b->mu);
    inv_tickets_durable(w->s, x->held, ndone);
    for (int i = 0; i < ndone; i++)
        x->held[i]->done(x->held[i]); /* the ticket may be gone after this */
}

/* Runs the batch taken into the first free slot up to its hold, which stays
 * open during the orders' work (b->mu not held). */
static void batch_start(struct worker *w)
{
    struct inv_batcher *b = w->b;
    struct slot *x = &w->slot[w->nparked];
    inv_hold_do open = x->q->seg >= 0 ? inv_hold_open(w->s, x->held, x->n, x->q->seg,
                                                      w->nparked > 0, &x->h)
                                      : INV_HOLD_OVER;
    if (open == INV_HOLD_DUE) {
        w->nparked++;
    } else if (open == INV_HOLD_TAKEN) {
        /* the lock is taken: the batch goes back, whole */
        pthread_mutex_lock(&b->mu);
        squeue_push_front(x->q, x->held, x->n);
        b->queued += (uint64_t)x->n;
        queue_done(b, x->q);
        w->no_batch = 1;
        pthread_mutex_unlock(&b->mu);
    } else {
        batch_end(w, x);
    }
}

/* Commits open hold i and ends its batch (b->mu not held). */
static void hold_close(struct worker *w, int i)
{
    struct slot x = w->slot[i];
    w->nparked--;
    w->slot[i] = w->slot[w->nparked];
    w->slot[w->nparked] = x;
    inv_hold_commit(w->s, &w->slot[w->nparked].h);
    batch_end(w, &w->slot[w->nparked]);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct inv_batcher *b = w->b;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        /* 1. a hold whose orders' work is done */
        int due = -1;
        for (int i = 0; i < w->nparked; i++)
            if (due < 0 || w->slot[i].h.due_us < w->slot[due].h.due_us)
                due = i;
        if (due >= 0 && w->slot[due].h.due_us <= clock_now_us()) {
            pthread_mutex_unlock(&b->mu);
            hold_close(w, due);
            pthread_mutex_lock(&b->mu);
            continue;
        }
        /* 2. holding nothing: the orders kept to go alone */
        if (w->nparked == 0) {
            w->no_batch = 0;
            if (w->nalone > 0) {
                pthread_mutex_unlock(&b->mu);
                for (int i = 0; i < w->nalone; i++)
                    inv_ticket_single(w->s, w->alone[i]);
                inv_tickets_durable(w->s, w->alone, w->nalone);
                for (int i = 0; i < w->nalone; i++)
                    w->alone[i]->done(w->alone[i]);
                w->nalone = 0;
                pthread_mutex_lock(&b->mu);
                continue;
            }
        }
        /* 3. a new batch, when this thread may open one more hold */
        struct squeue *q = w->nparked < PARK_MAX && !w->no_batch && w->nalone == 0
                               ? ready_take(b, w->nparked > 0)
                               : NULL;
        if (q) {
            if (q->head) { /* else another hold took its orders meanwhile */
                batch_take(w, &w->slot[w->nparked], q);
                pthread_mutex_unlock(&b->mu);
                batch_start(w);
                pthread_mutex_lock(&b->mu);
            }
            continue;
        }
        if (b->stopping && w->nparked == 0 && !b->queues.ready_head)
            break; /* stopping, and nothing left to serve */
        if (due >= 0)
            clock_cond_wait_until(&b->cv, &b->mu, w->slot[due].h.due_us);
        else
            pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

struct inv_batcher *inv_batcher_start(struct inv *inv,
                                      const struct inv_batcher_config *cfg)
{
    struct inv_batcher *b = xcalloc(1, sizeof(*b));
    b->inv = inv;
    squeues_init(&b->queues, inv);
    b->cfg = *cfg;
    if (b->cfg.batch < 1)
        b->cfg.batch = 1;
    pthread_mutex_init(&b->mu, NULL);
    clock_cond_init(&b->cv); /* timed waits on clock_now_us's clock */
    b->workers = xcalloc((size_t)cfg->threads, sizeof(*b->workers));
    return b;
}

/* Starts the threads (under b->mu): once, when the first ticket is handed
 * over. The event loops serve every order of most configurations
 * themselves, and then none is ever started. */
static void workers_start(struct inv_batcher *b)
{
    const struct inv_batcher_config *cfg = &b->cfg;
    b->started = 1;
    for (int i = 0; i < cfg->threads; i++) {
        struct worker *w = &b->workers[i];
        w->b = b;
        w->rc = rconn_new(cfg->redis_host, cfg->redis_port, cfg->redis_password, 1000);
        w->s = inv_session_new(b->inv, w->rc);
        for (int j = 0; j <= PARK_MAX; j++) {
            w->slot[j].held = xcalloc((size_t)b->cfg.batch, sizeof(*w->slot[j].held));
        }
        w->alone =
            xcalloc((size_t)(PARK_MAX + 1) * (size_t)b->cfg.batch, sizeof(*w->alone));
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0)
            abort();
    }
}

void inv_batcher_submit(struct inv_batcher *b, struct inv_ticket *t)
{
    atomic_fetch_add_explicit(&b->handed, 1, memory_order_relaxed);
    pthread_mutex_lock(&b->mu);
    int stopping = b->stopping;
    if (!stopping) {
        if (!b->started)
            workers_start(b);
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
    int stopped = b->stopping || !b->started;
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
        for (int j = 0; j <= PARK_MAX; j++)
            free(w->slot[j].held);
        free(w->alone);
    }
}

void inv_batcher_free(struct inv_batcher *b)
{
    if (!b)
        return;
    inv_batcher_stop(b);
    squeues_free(&b->queues, NULL, NULL);
    free(b->workers);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void inv_batcher_stats(struct inv_batcher *b, struct inv_batch_stats *out)
{
    out->batches = atomic_load(&b->batches);
    out->orders = atomic_load(&b->orders);
    out->handed = atomic_load(&b->handed);
    pthread_mutex_lock(&b->mu);
    out->queued = b->queued;
    out->queues = b->queues.count;
    pthread_mutex_unlock(&b->mu);
}

void inv_batcher_note(struct inv_batcher *b, int n)
{
    atomic_fetch_add_explicit(&b->batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->orders, (uint64_t)n, memory_order_relaxed);
}
