/* engine.c: the event loop's driver. Tickets come in (inv_engine_submit,
 * the inbox from other loops) and go on their way (dispatch): the atomic
 * mode sends its script (atomic.c); the other modes queue at their segment
 * (squeue.h) and a hold (hold.h) serves each queue's group commit; an order
 * by itself runs as the order machine (single.h); on a cluster, a SKU's
 * shards are learnt, and units are brought to a short shard (engine_refill.h).
 * Each machine sends its commands and answers this driver what to do next;
 * the driver keeps the scheduling: queues, timers, connections for the
 * hand-off waits, the replicas' acknowledgements (ack.h). It is the top of
 * inventory/'s order path: the files it calls reach it only through the
 * callbacks it gives them. */
#include "engine.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "ack.h"
#include "clock.h"
#include "engine_refill.h"
#include "hold.h"
#include "path.h"
#include "single.h"
#include "squeue.h"
#include "xalloc.h"

/* Most sends of one ticket on the loop (a fresh id, a script loaded again). */
#define ENGINE_TRIES 4
/* Most times a batch sends a ticket on to another segment's queue. */
#define ENGINE_HOPS 4
/* Most holds of a loop with a round trip in flight (see on_kick). */
#define ENGINE_HOLDS_IN_FLIGHT 2

struct ehold;
struct esingle;

/* A connection for blocking commands, to one node. */
struct blocking_conn {
    struct aconn *c;
    char host[64];
    int port;
};

struct inv_engine {
    struct inv *inv;
    struct event_base *base;
    inv_path path;
    int batch;
    struct aconn *conn;       /* one Redis */
    struct acluster *cluster; /* or a Redis Cluster's masters */
    struct inv_conns conns;   /* conn or cluster, and one per lock node; its closing:
                                 inv_engine_free began, nothing goes to another loop */
    int nnodes;
    struct rconn *idle; /* the session's: never connected, nothing on the
                           loop runs a blocking command */
    struct inv_session *s;
    _Atomic int inflight;
    struct event *kick; /* starts the ready queues' holds, once per turn */
    /* Each SKU segment is served by one loop of the process (its owner), so
     * that the loops never contend with each other for a segment lock; a
     * ticket for a segment of another loop goes to that loop's inbox. */
    struct inv_engine **loops; /* all of them, this one included */
    struct inv_engine *self;   /* loops before inv_engine_link */
    int nloops, index;
    pthread_mutex_t inbox_mu;
    struct inv_ticket *inbox; /* from other loops, newest first */
    struct event *inbox_ev;
    struct squeues queues;
    /* Contention: while a hold of this loop
     * holds its lock, another hold only tries its own (no wait for it); a
     * queue whose lock was taken backs off until a hold of this loop ends
     * (progress), and waits for the lock (in its queue, or polling) only
     * when the loop holds nothing. Fewer, fuller holds than one waiting hold
     * per segment. */
    int open_holds;
    struct squeue *backed_off;
    struct ehold *holds, *free_holds;
    struct esingle *singles, *free_singles;
    /* Placed orders wait for their replicas (--min-replicas-acked): acks,
     * given the connection whose reply is being handled (answering). */
    int acked;
    struct inv_acks *acks;
    struct aconn *answering;
    /* Connections for the waits for a hand-off (BLPOP), one per wait in
     * flight, kept for the next: all of them, and the idle ones. */
    struct blocking_conn *blocking, *idle_blocking;
    int nblocking, nidle;
    struct inv_engine_config cfg;
};

/* A group commit in flight: its queue, its tickets, its hold. */
struct ehold {
    struct inv_engine *e;
    struct squeue *q;
    struct inv_ticket **t;  /* [batch] */
    int open;               /* it held its lock (counted in open_holds) */
    struct aconn *blocking; /* the connection of its wait for a hand-off */
    struct inv_hold h;
    struct event *timer;       /* h.due_us: its work is done, or its pause over */
    struct ehold *prev, *next; /* in use, or (next) free */
};

/* One order by itself in flight (single.h): its machine, its ticket. */
struct esingle {
    struct inv_engine *e;
    struct inv_session *s; /* its locks' owner: of its own, or the redis mode's
                              re-entry would let it and a hold of this loop (or
                              another machine) both hold one segment */
    struct inv_single m;
    struct inv_ticket *t;
    int answered;                /* t was answered, or handed on */
    struct aconn *blocking;      /* the connection of its wait for a hand-off */
    struct event *timer;         /* m.due_us: its work is done, or its pause over */
    struct esingle *prev, *next; /* in use, or (next) free */
};

/* Units brought to a short shard (engine_refill.h): its machine; allocated
 * when it starts, freed when it is over. */
struct erefill {
    struct inv_engine *e;
    struct inv_refill r;
};

static void dispatch(struct inv_engine *e, struct inv_ticket *t);
static void enqueue(struct inv_engine *e, struct inv_ticket *t);
static void single_start(struct inv_engine *e, struct inv_ticket *t, int queue_ok);
static void single_load(struct inv_engine *e, struct inv_ticket *t);
static void refill_start(struct inv_engine *e, struct inv_ticket *t);

int inv_engine_inflight(const struct inv_engine *e)
{
    return atomic_load(&e->inflight);
}

static void ticket_answer(struct inv_engine *e, struct inv_ticket *t)
{
    atomic_fetch_sub(&e->inflight, 1);
    t->done(t); /* the ticket may be gone after this */
}

/* The connection that carried the reply being handled: the data Redis, or
 * on a cluster the master that answered (NULL when redirected). */
static struct aconn *answered_by(const struct inv_engine *e, aconn_result res)
{
    if (res != ACONN_REPLY)
        return NULL;
    return e->cluster ? acluster_answered_by(e->cluster) : e->conn;
}

static void on_acked(void *arg, struct inv_ticket *t)
{
    ticket_answer(arg, t);
}

/* t is final. A placed order waits for its replicas first when asked to
 * (--min-replicas-acked): its commit came back on e->answering. So does a
 * replay: the first try of its Idempotency-Key may have been answered 503
 * outcome_unknown because no replica had it, and a 201 now must not say
 * otherwise (its record came back on e->answering, from the order's node). */
static void ticket_done(struct inv_engine *e, struct inv_ticket *t)
{
    int acks =
        t->st == INV_PLACED || t->st == INV_REPLAYED || (t->end && t->st == INV_OK);
    if (!acks || !e->acked) {
        ticket_answer(e, t);
    } else if (e->acks) {
        inv_acks_add(e->acks, t, e->answering);
    } else { /* the engine is closing */
        inv_ticket_acked(e->inv, t, NULL);
        ticket_answer(e, t);
    }
}

/* ---- a Redis Cluster: a SKU's shards learnt on the loop ------------------- */

static void on_learnt(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *t = arg;
    struct inv_engine *e = t->engine;
    inv_status st =
        res == ACONN_REPLY ? inv_dir_learnt(e->inv, t->sku, r) : INV_UNAVAILABLE;
    if (st == INV_OK && !e->conns.closing && inv_ticket_route(e->inv, t) >= 0) {
        dispatch(e, t);
        return;
    }
    inv_ticket_fail(e->inv, t, st == INV_OK ? INV_UNAVAILABLE : st);
    ticket_done(e, t);
}

/* t's SKU has no layout this process knows (its first orders here, or since
 * a reset): its directory is read from the master of its own slot, then t
 * goes on as any ticket (dispatch). Each ticket asks for itself: the answer
 * to the first teaches the rest as they come. */
static void learn(struct inv_engine *e, struct inv_ticket *t)
{
    char key[96];
    const char *argv[6];
    inv_dir_learn_cmd(t->sku, key, sizeof(key), argv);
    if (++t->tries > ENGINE_TRIES || !e->cluster ||
        acluster_command(e->cluster, cluster_keyslot(key, strlen(key)), on_learnt, t, 6,
                         argv) != RCONN_OK) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        ticket_done(e, t);
    }
}

/* ---- the atomic mode: one script per order ------------------------------ */

static void atomic_send(struct inv_engine *e, struct inv_ticket *t);

static void on_atomic(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *t = arg;
    struct inv_engine *e = t->engine;
    switch (inv_atomic_answer(e->inv, t, res, r, t->seen)) {
    case INV_STEP_DONE:
        e->answering = answered_by(e, res);
        ticket_done(e, t);
        e->answering = NULL;
        break;
    case INV_STEP_AGAIN:
        atomic_send(e, t);
        break;
    case INV_STEP_LOAD:
        single_load(e, t);
        break;
    case INV_STEP_ALONE:
        refill_start(e, t); /* short in its shard */
        break;
    }
}

static void atomic_send(struct inv_engine *e, struct inv_ticket *t)
{
    if (e->cluster && t->gene < 0) {
        learn(e, t); /* its SKU's shards are not known yet (a try counted there) */
    } else if (++t->tries > ENGINE_TRIES) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        ticket_done(e, t);
    } else if (inv_atomic_send(e->inv, t, &e->conns, on_atomic, t, &t->seen) !=
               RCONN_OK) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE); /* Redis is down: at once */
        ticket_done(e, t);
    }
}

/* ---- a pay or a cancel: two steps on the order's shard ------------------- */

static void end_send(struct inv_engine *e, struct inv_ticket *t);

static void on_end(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *t = arg;
    struct inv_engine *e = t->engine;
    if (inv_end_answer(e->inv, t, res, r) == INV_STEP_AGAIN) {
        end_send(e, t);
        return;
    }
    e->answering = answered_by(e, res);
    ticket_done(e, t);
    e->answering = NULL;
}

static void end_send(struct inv_engine *e, struct inv_ticket *t)
{
    if (++t->tries > ENGINE_TRIES ||
        inv_end_send(e->inv, t, &e->conns, on_end, t) != RCONN_OK) {
        t->st = INV_UNAVAILABLE; /* nothing sent this step: the last one's stands */
        ticket_done(e, t);
    }
}

/* ---- group commits: queues per segment ---------------------------------- */

/* Puts q on the ready list when it has tickets and no hold serves it. */
static void queue_wake(struct inv_engine *e, struct squeue *q)
{
    if (!q->head || q->busy || q->ready || q->backed_off)
        return;
    squeue_ready_add(&e->queues, q);
    event_active(e->kick, EV_TIMEOUT, 0);
}

/* Starts the ready queues' holds at the end of this turn of the loop. */
static void engine_kick(struct inv_engine *e)
{
    if (e->queues.ready_head)
        event_active(e->kick, EV_TIMEOUT, 0);
}

/* Queues t at its segment on this loop. */
static void enqueue_here(struct inv_engine *e, struct inv_ticket *t)
{
    int made;
    struct squeue *q = squeue_get(&e->queues, t->sku, t->seg, &made);
    squeue_push(q, t);
    queue_wake(e, q);
}

static void on_timer(evutil_socket_t fd, short what, void *arg);

/* Queues t at its segment, on the loop that owns the segment. */
static void enqueue(struct inv_engine *e, struct inv_ticket *t)
{
    struct inv_engine *owner =
        e->loops[seg_queue_hash(t->sku, t->seg) % (uint32_t)e->nloops];
    if (owner == e || e->conns.closing) {
        enqueue_here(e, t);
        return;
    }
    atomic_fetch_sub(&e->inflight, 1);
    atomic_fetch_add(&owner->inflight, 1);
    pthread_mutex_lock(&owner->inbox_mu);
    t->next = owner->inbox;
    owner->inbox = t;
    pthread_mutex_unlock(&owner->inbox_mu);
    event_active(owner->inbox_ev, EV_TIMEOUT, 0);
}

/* Takes the tickets other loops handed over (newest first in the inbox:
 * queued oldest first). */
static struct inv_ticket *inbox_take(struct inv_engine *e)
{
    pthread_mutex_lock(&e->inbox_mu);
    struct inv_ticket *t = e->inbox, *rev = NULL;
    e->inbox = NULL;
    pthread_mutex_unlock(&e->inbox_mu);
    while (t) {
        struct inv_ticket *next = t->next;
        t->next = rev;
        rev = t;
        t = next;
    }
    return rev;
}

static void on_inbox(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct inv_engine *e = arg;
    for (struct inv_ticket *t = inbox_take(e), *next; t; t = next) {
        next = t->next;
        t->engine = e;
        enqueue_here(e, t);
    }
}

static struct ehold *hold_new(struct inv_engine *e, struct squeue *q)
{
    struct ehold *x = e->free_holds;
    if (x) {
        e->free_holds = x->next;
    } else {
        x = xcalloc(1, sizeof(*x));
        x->t = xcalloc((size_t)e->batch, sizeof(*x->t));
        x->e = e;
        if (!(x->timer = evtimer_new(e->base, on_timer, x)))
            abort();
    }
    x->q = q;
    x->prev = NULL;
    x->next = e->holds;
    if (e->holds)
        e->holds->prev = x;
    e->holds = x;
    return x;
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

/* Fills hold x's batch from q: its own tickets first, then, with room left,
 * those waiting in the queues of the SKU's other segments on this loop (ready
 * ones, and those that backed off from a taken lock), so that a crowd spread
 * over K segments still fills holds (on a cluster,
 * those of the same shard: one commit writes one shard); the commit
 * places them here while the segment has stock (counted as spilled) and
 * sends the rest on. No more units than limit (the segment's stock, or an
 * upper bound of it; an empty segment takes a full batch of its own only:
 * the commit sends them all on). */
static void batch_fill(struct ehold *x, long long limit)
{
    struct inv_engine *e = x->e;
    struct squeue *q = x->q;
    int most = e->batch;
    long long units = 0;
    for (int i = 0; i < x->h.n; i++)
        units += x->t[i]->qty;
    take_from(q, x->t, &x->h.n, most, &units, limit == 0 ? -1 : limit);
    if (limit == 0 || x->h.n == 0)
        return;
    for (int pass = 0; pass < 2; pass++)
        for (struct squeue *o = pass ? e->backed_off : e->queues.ready_head;
             o && x->h.n < most; o = pass ? o->bnext : o->rnext)
            if (o != q && !o->busy && strcmp(o->sku, q->sku) == 0 &&
                (!o->head || o->head->gene == x->t[0]->gene)) /* one shard */
                take_from(o, x->t, &x->h.n, most, &units, limit);
}

/* Each ticket of x after its batch: answered when final, else sent on to
 * the segment its commit named (a few hops), else by itself on this loop
 * (single.h; on a cluster, a shard short has units brought: refill_start). */
static void hold_settle(struct ehold *x)
{
    struct inv_engine *e = x->e;
    for (int i = 0; i < x->h.n; i++) {
        struct inv_ticket *t = x->t[i];
        if (t->st != INV_PENDING)
            ticket_done(e, t);
        else if (t->seg >= 0 && t->seg != x->h.seg && ++t->hops <= ENGINE_HOPS)
            enqueue(e, t);
        else /* several segments, a replay, a reset, too many hops, a shard short */
            single_start(e, t, t->hops < ENGINE_HOPS);
    }
    x->h.n = 0;
}

/* The hold is over: its queue is free for the next batch. */
static void hold_free(struct ehold *x)
{
    struct inv_engine *e = x->e;
    struct squeue *q = x->q;
    if (x->prev)
        x->prev->next = x->next;
    else
        e->holds = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = e->free_holds;
    e->free_holds = x;
    q->busy = 0;
    engine_kick(e);
    if (x->open) { /* progress: the queues that backed off try again */
        x->open = 0;
        e->open_holds--;
        while (e->backed_off) {
            struct squeue *b = e->backed_off;
            e->backed_off = b->bnext;
            b->backed_off = 0;
            queue_wake(e, b);
        }
    }
    queue_wake(e, q);
}

static void hold_do(struct ehold *x, inv_hold_do next);

/* The timer of x: h.due_us came. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct ehold *x = arg;
    hold_do(x, inv_hold_on_timer(x->e->s, &x->h));
}

/* The lock is held and the stock read: the orders that queued meanwhile (a
 * hold that waited for the lock waited for them too) join the batch, as
 * many as the segment holds, so that a contended segment serves everything
 * that piled up in one hold instead of one hold each. */
static void hold_top_up(struct ehold *x)
{
    batch_fill(x, x->h.stock + x->h.back);
}

/* x's try found its lock taken: its tickets go back to the head of their
 * queue, which waits for a hold of this loop to end (or, when none is open,
 * is served at once by a hold that waits for the lock). */
static void hold_back_off(struct ehold *x)
{
    struct inv_engine *e = x->e;
    struct squeue *q = x->q;
    squeue_push_front(q, x->t, x->h.n);
    x->h.n = 0;
    if (e->open_holds > 0) {
        q->backed_off = 1;
        q->bnext = e->backed_off;
        e->backed_off = q;
    }
    hold_free(x);
}

static void hold_wait(struct ehold *x);

/* The commit answered: the tickets go on (hold_settle); the segment's bound
 * is what the commit left. */
static void hold_decided(struct ehold *x)
{
    struct inv_engine *e = x->e;
    inv_count_batch(e->inv, x->h.n);
    if (x->h.left >= 0)
        x->q->bound = x->h.left;
    hold_settle(x);
}

/* Does what x's hold asks next (hold.h: the hold is the state machine, the
 * engine its scheduler). */
static void hold_do(struct ehold *x, inv_hold_do next)
{
    struct inv_engine *e = x->e;
    switch (next) {
    case INV_HOLD_AWAIT:
        return;
    case INV_HOLD_DUE: {
        if (x->h.state == HOLD_WORKING && !x->open) { /* it holds its lock now */
            x->open = 1;
            e->open_holds++;
            hold_top_up(x);
        }
        int64_t left = x->h.due_us - clock_now_us();
        if (left <= 0 && x->h.state == HOLD_WORKING) {
            hold_do(x, inv_hold_on_timer(e->s, &x->h));
            return;
        }
        struct timeval tv = {.tv_sec = left / 1000000, .tv_usec = left % 1000000};
        if (left < 0)
            tv = (struct timeval){0, 0};
        evtimer_add(x->timer, &tv);
        engine_kick(e); /* it waits: room for another hold */
        return;
    }
    case INV_HOLD_HANDOFF:
        hold_wait(x);
        return;
    case INV_HOLD_DECIDED:
        hold_decided(x);
        if (x->h.owed == 0)
            hold_free(x);
        return;
    case INV_HOLD_TAKEN: /* and this loop holds other locks: back off */
        hold_back_off(x);
        return;
    case INV_HOLD_OVER:
        hold_settle(x);
        hold_free(x);
        return;
    }
}

/* Every answer of a command of x's hold. */
static void on_reply(void *arg, aconn_result res, redisReply *r)
{
    struct ehold *x = arg;
    struct inv_engine *e = x->e;
    e->answering = answered_by(e, res); /* the commit's, for the acknowledgement */
    hold_do(x, inv_hold_on_reply(e->s, &x->h, res, r));
    e->answering = NULL;
}

/* An idle connection for a blocking command on the data Redis of hold h
 * (on a cluster, the master of its shard), made on first need. NULL when
 * that master is not known. */
static struct aconn *blocking_get(struct inv_engine *e, const struct inv_hold *h)
{
    const char *host = e->cfg.redis_host;
    int port = e->cfg.redis_port;
    if (e->cluster) {
        const struct cluster_map *m = acluster_map(e->cluster);
        int i = m->owner[cluster_gene_slot(h->gene)];
        if (m->nmasters == 0 || i == CLUSTER_NO_MASTER)
            return NULL;
        host = m->masters[i].host;
        port = m->masters[i].port;
    }
    for (int i = 0; i < e->nidle; i++)
        if (e->idle_blocking[i].port == port &&
            strcmp(e->idle_blocking[i].host, host) == 0) {
            struct aconn *c = e->idle_blocking[i].c;
            e->idle_blocking[i] = e->idle_blocking[--e->nidle];
            return c;
        }
    struct blocking_conn *all =
        xrealloc(e->blocking, sizeof(*all) * (size_t)(e->nblocking + 1));
    struct blocking_conn *idle =
        xrealloc(e->idle_blocking, sizeof(*idle) * (size_t)(e->nblocking + 1));
    e->blocking = all;
    e->idle_blocking = idle;
    /* A wait lasts at most --wait-ms: its answer may take that long. */
    struct blocking_conn *b = &all[e->nblocking++];
    b->c = aconn_new(e->base, host, port, e->cfg.redis_password,
                     e->cfg.wait_ms + e->cfg.timeout_ms);
    snprintf(b->host, sizeof(b->host), "%s", host);
    b->port = port;
    return b->c;
}

static void blocking_put(struct inv_engine *e, struct aconn *c)
{
    if (e->conns.closing)
        return;
    for (int i = 0; i < e->nblocking; i++)
        if (e->blocking[i].c == c)
            e->idle_blocking[e->nidle++] = e->blocking[i];
}

static void on_handoff(void *arg, aconn_result res, redisReply *r)
{
    struct ehold *x = arg;
    blocking_put(x->e, x->blocking);
    x->blocking = NULL;
    hold_do(x, inv_hold_on_handoff(x->e->s, &x->h, res, r));
}

/* Waits, on a connection of its own, for a release to hand the lock over. */
static void hold_wait(struct ehold *x)
{
    struct inv_engine *e = x->e;
    engine_kick(e); /* it waits: room for another hold */
    x->blocking = blocking_get(e, &x->h);
    if (x->blocking && inv_hold_wait_send(e->s, &x->h, x->blocking, on_handoff, x))
        return;
    if (x->blocking)
        blocking_put(e, x->blocking);
    x->blocking = NULL;
    hold_do(x, inv_hold_attempt(e->s, &x->h)); /* the next attempt tells what is wrong */
}

static void hold_start(struct inv_engine *e, struct squeue *q)
{
    struct ehold *x = hold_new(e, q);
    q->busy = 1;
    x->h.n = 0;
    x->h.seg = q->seg;
    batch_fill(x, q->bound);
    hold_do(x, inv_hold_start(e->s, &x->h, x->t, x->h.n, q->seg, e->open_holds > 0,
                              &e->conns, on_reply, x));
}

/* Holds of this loop with a round trip in flight (not those waiting for
 * their work's end or for a hand-off). */
static int holds_in_flight(const struct inv_engine *e)
{
    int n = 0;
    for (const struct ehold *x = e->holds; x; x = x->next)
        n += !x->blocking && !evtimer_pending(x->timer, NULL);
    return n;
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct inv_engine *e = arg;
    /* A few holds in flight at a time: orders that arrive meanwhile wait for
     * one to end and then share a hold, instead of each starting its own
     * (which, at a thin crowd over many segments, means a lock and two round
     * trips per order and contention with every other instance). */
    while (e->queues.ready_head && holds_in_flight(e) < ENGINE_HOLDS_IN_FLIGHT) {
        struct squeue *q = e->queues.ready_head;
        squeue_ready_remove(&e->queues, q, NULL);
        if (q->head && !q->busy)
            hold_start(e, q);
    }
}

/* ---- one order by itself: the order machine (single.h) -------------------- */

static void on_single_timer(evutil_socket_t fd, short what, void *arg);

static struct esingle *single_new(struct inv_engine *e, struct inv_ticket *t)
{
    struct esingle *x = e->free_singles;
    if (x) {
        e->free_singles = x->next;
    } else {
        x = xcalloc(1, sizeof(*x));
        x->e = e;
        if (!(x->timer = evtimer_new(e->base, on_single_timer, x)))
            abort();
        /* the atomic mode takes no lock: its machines only load */
        x->s = e->path == INV_PATH_HOLDS ? inv_session_new(e->inv, e->idle) : e->s;
    }
    x->t = t;
    x->answered = 0;
    x->blocking = NULL;
    x->prev = NULL;
    x->next = e->singles;
    if (e->singles)
        e->singles->prev = x;
    e->singles = x;
    return x;
}

/* The machine is over: kept for the next (its session, its timer). */
static void single_free(struct esingle *x)
{
    struct inv_engine *e = x->e;
    if (x->prev)
        x->prev->next = x->next;
    else
        e->singles = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = e->free_singles;
    e->free_singles = x;
}

static void single_wait(struct esingle *x);

/* Does what x's machine asks next; its ticket is answered once final. */
static void single_do(struct esingle *x, inv_single_do next)
{
    struct inv_engine *e = x->e;
    if (!x->answered && (x->t->st != INV_PENDING || next == INV_SINGLE_OVER)) {
        x->answered = 1;
        if (x->t->st == INV_PENDING) /* not expected: never left unanswered */
            inv_ticket_fail(e->inv, x->t, INV_UNAVAILABLE);
        ticket_done(e, x->t);
    }
    switch (next) {
    case INV_SINGLE_AWAIT:
        return;
    case INV_SINGLE_DUE: {
        int64_t left = x->m.due_us - clock_now_us();
        if (left < 0)
            left = 0;
        struct timeval tv = {.tv_sec = left / 1000000, .tv_usec = left % 1000000};
        evtimer_add(x->timer, &tv);
        return;
    }
    case INV_SINGLE_HANDOFF:
        single_wait(x);
        return;
    case INV_SINGLE_QUEUE: {
        struct inv_ticket *t = x->t;
        x->answered = 1;
        single_free(x);
        t->hops++; /* a group commit that sends it back counts too */
        enqueue(e, t);
        return;
    }
    case INV_SINGLE_ALONE: {
        struct inv_ticket *t = x->t;
        x->answered = 1;
        single_free(x);
        struct sku_layout l;
        if (inv_layout_get(e->inv, t->sku, &l) != 0)
            learn(e, t); /* its shards are not known (any more) */
        else
            refill_start(e, t); /* its shard is short */
        return;
    }
    case INV_SINGLE_OVER:
        single_free(x);
        return;
    }
}

static void on_single_reply(void *arg, aconn_result res, redisReply *r)
{
    struct esingle *x = arg;
    struct inv_engine *e = x->e;
    e->answering = answered_by(e, res); /* the commit's, for the acknowledgement */
    single_do(x, inv_single_on_reply(&x->m, res, r));
    e->answering = NULL;
}

static void on_single_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct esingle *x = arg;
    single_do(x, inv_single_on_timer(&x->m));
}

static void on_single_handoff(void *arg, aconn_result res, redisReply *r)
{
    struct esingle *x = arg;
    blocking_put(x->e, x->blocking);
    x->blocking = NULL;
    single_do(x, inv_single_on_handoff(&x->m, res, r));
}

/* Waits, on a connection of its own, for a release to hand the lock of the
 * part that x's machine locks over. */
static void single_wait(struct esingle *x)
{
    struct inv_engine *e = x->e;
    x->blocking = blocking_get(e, inv_single_waiting(&x->m));
    if (x->blocking && inv_single_wait_send(&x->m, x->blocking, on_single_handoff, x))
        return;
    if (x->blocking)
        blocking_put(e, x->blocking);
    x->blocking = NULL;
    single_do(x, inv_single_attempt(&x->m));
}

static void single_start(struct inv_engine *e, struct inv_ticket *t, int queue_ok)
{
    struct esingle *x = single_new(e, t);
    single_do(x,
              inv_single_start(&x->m, x->s, t, queue_ok, &e->conns, on_single_reply, x));
}

static void single_xfer(struct inv_engine *e, struct inv_ticket *t,
                        const struct inv_xfer *x)
{
    struct esingle *s = single_new(e, t);
    single_do(s, inv_single_xfer(&s->m, s->s, t, x, &e->conns, on_single_reply, s));
}

static void single_load(struct inv_engine *e, struct inv_ticket *t)
{
    struct esingle *x = single_new(e, t);
    single_do(x, inv_single_load(&x->m, x->s, t, &e->conns, on_single_reply, x));
}

static void singles_stop(struct inv_engine *e)
{
    /* Orders by themselves waiting for a timer (nothing was committed) */
    while (e->singles) {
        struct esingle *x = e->singles;
        evtimer_del(x->timer);
        inv_single_abandon(&x->m);
        single_do(x, INV_SINGLE_OVER); /* answered unavailable if not yet */
    }
}

static void singles_free(struct inv_engine *e)
{
    for (struct esingle *x = e->free_singles, *next; x; x = next) {
        next = x->next;
        event_free(x->timer);
        if (x->s != e->s)
            inv_session_free(x->s);
        inv_single_clear(&x->m);
        free(x);
    }
}

/* ---- a Redis Cluster: units brought to a short shard (engine_refill.h) ---- */

static void refill_do(struct erefill *x, inv_refill_do next);

/* Every answer of a read of x's refill. */
static void on_refill_reply(void *arg, aconn_result res, redisReply *r)
{
    struct erefill *x = arg;
    refill_do(x, inv_refill_on_reply(&x->r, res, r));
}

/* The refill's step is final (placed: its replicas heard, ticket_done). */
static void on_refill_step(struct inv_ticket *step)
{
    struct erefill *x = step->owner;
    refill_do(x, inv_refill_on_step(&x->r));
}

/* The answer of a step run by its script alone (the atomic mode). */
static void on_step_reply(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *s = arg;
    struct inv_engine *e = s->engine;
    long long got = 0;
    inv_status st = res == ACONN_REPLY && rconn_is_noscript(r)
                        ? INV_OK /* nothing ran: again (inv_refill_on_step) */
                        : inv_xfer_outcome(res, r, &got);
    s->order.qty = (int)got;
    inv_ticket_finish(e->inv, s, st);
    e->answering = answered_by(e, res);
    ticket_done(e, s); /* the replicas first, when placed */
    e->answering = NULL;
}

/* Runs x's transfer step (inflight counted): under its segment's lock by
 * the order machine, or (atomic mode) the script alone. */
static void refill_step(struct erefill *x)
{
    struct inv_engine *e = x->e;
    struct inv_ticket *s = &x->r.step;
    const struct inv_xfer *xf = &x->r.x;
    s->engine = e;
    s->owner = x;
    s->done = on_refill_step;
    atomic_fetch_add(&e->inflight, 1);
    if (e->path == INV_PATH_HOLDS) {
        single_xfer(e, s, xf);
        return;
    }
    struct inv_xfer_call xc;
    inv_xfer_call_init(&xc, e->inv, s->sku, s->gene, s->seg, xf->xin, xf->nargs, xf->args,
                       NULL);
    if (acluster_eval(e->cluster, cluster_gene_slot(s->gene), on_step_reply, s,
                      xc.cmd.script, xc.cmd.nkeys, xc.cmd.argc,
                      xc.cmd.argv) != RCONN_OK) {
        inv_ticket_finish(e->inv, s, INV_UNAVAILABLE);
        ticket_done(e, s);
    }
}

/* Does what x's refill asks next; over, its order is sent on again (its
 * shard holds its qty now) or answered. */
static void refill_do(struct erefill *x, inv_refill_do next)
{
    struct inv_engine *e = x->e;
    switch (next) {
    case INV_REFILL_AWAIT:
        return;
    case INV_REFILL_STEP:
        refill_step(x);
        return;
    case INV_REFILL_OVER: {
        struct inv_ticket *t = x->r.t;
        free(x);
        if (t->st == INV_PENDING) {
            t->tries = 0;
            dispatch(e, t);
        } else {
            ticket_done(e, t);
        }
        return;
    }
    }
}

/* On a cluster: t is short in its shard; units are brought there from the
 * others, then t is sent on again, or answered sold out. */
static void refill_start(struct inv_engine *e, struct inv_ticket *t)
{
    struct sku_layout l;
    if (inv_refill_check(e->inv, t, &e->conns, &l) != 0) {
        ticket_done(e, t);
        return;
    }
    struct erefill *x = xcalloc(1, sizeof(*x));
    x->e = e;
    refill_do(x, inv_refill_start(&x->r, e->inv, t, &l, &e->conns, on_refill_reply, x));
}

/* ---- the engine ---------------------------------------------------------- */

struct inv_engine *inv_engine_new(struct inv *inv, struct event_base *base,
                                  const struct inv_engine_config *cfg)
{
    struct inv_engine *e = xcalloc(1, sizeof(*e));
    e->inv = inv;
    squeues_init(&e->queues, inv);
    e->base = base;
    e->path = inv_loop_path(inv);
    e->batch = cfg->batch > 0 ? cfg->batch : 1;
    e->cfg = *cfg; /* its strings outlive the engine */
    if (cfg->cluster)
        e->cluster = acluster_new(base, cfg->seeds, cfg->nseeds, cfg->redis_password,
                                  cfg->timeout_ms);
    else
        e->conn = aconn_new(base, cfg->redis_host, cfg->redis_port, cfg->redis_password,
                            cfg->timeout_ms);
    e->conns.data = e->conn;
    e->conns.cluster = e->cluster;
    e->conns.base = base;
    const char *wait_argv[3];
    char wait_buf[2][16];
    e->acked = inv_durable_argv(inv, wait_argv, wait_buf) > 0;
    if (e->acked)
        e->acks =
            inv_acks_new(inv, base, cfg->redis_password, cfg->timeout_ms, on_acked, e);
    const struct rconn_addr *nodes;
    const char *password;
    int node_ms;
    struct lock *l = inv_lock(inv);
    e->nnodes = l ? lock_nodes(l, &nodes, &password, &node_ms) : 0;
    if (e->nnodes > 0)
        e->conns.node = xcalloc((size_t)e->nnodes, sizeof(struct aconn *));
    for (int i = 0; i < e->nnodes; i++)
        e->conns.node[i] =
            aconn_new(base, nodes[i].host, nodes[i].port, password, node_ms);
    e->idle =
        rconn_new(cfg->redis_host, cfg->redis_port, cfg->redis_password, cfg->timeout_ms);
    e->s = inv_session_new(inv, e->idle);
    e->kick = event_new(base, -1, 0, on_kick, e);
    e->inbox_ev = event_new(base, -1, 0, on_inbox, e);
    if (!e->kick || !e->inbox_ev)
        abort();
    pthread_mutex_init(&e->inbox_mu, NULL);
    e->loops = &e->self;
    e->self = e;
    e->nloops = 1;
    return e;
}

void inv_engine_link(struct inv_engine **all, int n)
{
    for (int i = 0; i < n; i++) {
        all[i]->loops = all;
        all[i]->nloops = n;
        all[i]->index = i;
    }
}

static void dispatch(struct inv_engine *e, struct inv_ticket *t)
{
    if (t->end)
        end_send(e, t);
    else if (e->path == INV_PATH_ATOMIC)
        atomic_send(e, t);
    else if (e->path == INV_PATH_HOLDS && t->seg >= 0)
        enqueue(e, t);
    else if (!e->cluster)
        single_start(e, t, 1);
    else
        learn(e, t);
}

void inv_engine_submit(struct inv_engine *e, struct inv_ticket *t)
{
    t->engine = e;
    t->tries = 0;
    atomic_fetch_add(&e->inflight, 1);
    dispatch(e, t);
}

/* A ticket still queued when the engine goes: answered unavailable. */
static void ticket_unserved(struct inv_ticket *t, void *arg)
{
    struct inv_engine *e = arg;
    inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
    ticket_done(e, t);
}

void inv_engine_free(struct inv_engine *e)
{
    if (!e)
        return;
    e->conns.closing = 1;
    /* The acknowledgements first: they answer the orders waiting for them
     * (outcome unknown), and no commit is placed while its connection closes. */
    inv_acks_free(e->acks);
    e->acks = NULL;
    /* The waits: each goes on to an attempt, which the main connection
     * answers as it closes. */
    for (int i = 0; i < e->nblocking; i++)
        aconn_free(e->blocking[i].c);
    free(e->blocking);
    free(e->idle_blocking);
    /* The lock's nodes, then the data Redis: each answers what is in flight,
     * and nothing is sent to one once it is gone. */
    for (int i = 0; i < e->nnodes; i++) {
        struct aconn *c = e->conns.node[i];
        aconn_free(c);
        e->conns.node[i] = NULL;
    }
    aconn_free(e->conn);
    e->conn = e->conns.data = NULL;
    acluster_free(e->cluster);
    e->cluster = e->conns.cluster = NULL;
    on_inbox(-1, 0, e);
    /* Holds waiting for their work's end (nothing was committed) or for
     * their next attempt */
    while (e->holds) {
        struct ehold *x = e->holds;
        evtimer_del(x->timer);
        if (x->h.state == HOLD_PAUSED) /* holds nothing */
            for (int i = 0; i < x->h.n; i++)
                inv_ticket_fail(e->inv, x->t[i], INV_UNAVAILABLE);
        else
            inv_hold_abandon(e->s, &x->h);
        hold_settle(x);
        hold_free(x);
    }
    singles_stop(e);
    squeues_free(&e->queues, ticket_unserved, e);
    singles_free(e);
    for (struct ehold *x = e->free_holds, *next; x; x = next) {
        next = x->next;
        event_free(x->timer);
        free(x->t);
        free(x);
    }
    event_free(e->kick);
    event_free(e->inbox_ev);
    pthread_mutex_destroy(&e->inbox_mu);
    inv_session_free(e->s);
    rconn_free(e->idle);
    free(e->conns.node);
    free(e);
}
