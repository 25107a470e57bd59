/* engine.c: the event loop's driver, the one that runs every machine of
 * the order path (path.h). Tickets come in (inv_engine_submit, the inbox
 * from other loops) and go on their way (dispatch): the atomic mode's
 * machine of one ticket (atomic.c) and a pay's or cancel's (life.c); the
 * other modes queue at their segment (squeue.h) and a hold (hold.h) serves
 * each queue's group commit; an order by itself runs as the order machine
 * (single.h); on a cluster, a SKU's shards are learnt, and units are
 * brought to a short shard (engine_refill.h). Each machine sends its
 * commands and answers this driver what to do next (inv_do, drive); a
 * ticket still pending when its machine is over goes its way on (t->way,
 * ticket_on). The driver keeps the scheduling: queues, timers, connections
 * for the hand-off waits (blocking.h), the replicas' acknowledgements
 * (ack.h). It is the top of inventory/'s order path: the files it calls
 * reach it only through the callbacks it gives them. */
#include "engine.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "ack.h"
#include "blocking.h"
#include "clock.h"
#include "engine_refill.h"
#include "hold.h"
#include "path.h"
#include "single.h"
#include "squeue.h"
#include "xalloc.h"

/* Most times a batch sends a ticket on to another segment's queue. */
#define ENGINE_HOPS 4
/* Most holds of a loop with a round trip in flight (see on_kick). */
#define ENGINE_HOLDS_IN_FLIGHT 2

/* The machines the driver keeps (a machine of one ticket keeps nothing but
 * its ticket). */
enum machine_kind { M_HOLD = 0, M_SINGLE, M_REFILL, M_KINDS };

struct machine;

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
    /* The machines in flight, and those kept for the next, of each kind. */
    struct machine *live[M_KINDS], *spare[M_KINDS];
    /* Placed orders wait for their replicas (--min-replicas-acked): acks,
     * given the connection whose reply is being handled (answering). */
    int acked;
    struct inv_acks *acks;
    struct aconn *answering;
    struct blocking_pool *blocking; /* for the waits for a hand-off (BLPOP) */
    struct inv_engine_config cfg;
};

/* A machine in flight on the loop and the driver's part of it. */
struct machine {
    struct inv_engine *e;
    enum machine_kind kind;
    struct event *timer;          /* its due_us came */
    struct aconn *blocking;       /* the connection of its wait for a hand-off */
    struct machine *prev, *next;  /* in use, or (next) kept: its kind's lists */
    union {
        struct {                    /* M_HOLD, a group commit: */
            struct squeue *q;       /* its queue */
            struct inv_ticket **t;  /* its tickets, [batch] */
            int open;               /* it held its lock (counted in open_holds) */
            struct inv_hold h;
        };
        struct {                   /* M_SINGLE, an order by itself: */
            struct inv_session *s; /* its locks' owner: of its own, or the redis
                                      mode's re-entry would let it and a hold of
                                      this loop (or another machine) both hold
                                      one segment */
            struct inv_single m;
            int answered; /* its ticket was answered, or sent its way on */
        };
        struct inv_refill r; /* M_REFILL, units brought to a short shard */
    };
};

static void dispatch(struct inv_engine *e, struct inv_ticket *t);
static void ticket_start(struct inv_engine *e, struct inv_ticket *t);
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
 * otherwise (its record came back on e->answering, from the order's node).
 * A pay or a cancel changed by its script waits too; a join does not (a
 * place is no sale: room.h). */
static void ticket_done(struct inv_engine *e, struct inv_ticket *t)
{
    int acks = t->st == INV_PLACED || t->st == INV_REPLAYED ||
               (t->end && t->end != INV_END_JOIN && t->st == INV_OK);
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

/* The atomic mode on one Redis: t's SKU's layout is read from its meta
 * (segments, initial, epoch), so that its orders queue at their segments for
 * the group commit; t then goes on: queued, or by itself (atomic.lua, which
 * answers for a SKU that does not exist). */
static void on_meta_learnt(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *t = arg;
    struct inv_engine *e = t->engine;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
        long long segments = inv_reply_ll(r->element[0], 0);
        if (segments > 0 && segments <= INV_MAX_SEGMENTS)
            inv_layout_put(e->inv, t->sku, (int)segments, inv_reply_ll(r->element[1], 0),
                           r->element[2]->str, NULL, 0);
    }
    if (!e->conns.closing && inv_ticket_route(e->inv, t) >= 0)
        enqueue(e, t);
    else
        ticket_start(e, t);
}

static void learn_meta(struct inv_engine *e, struct inv_ticket *t)
{
    struct sku_keys k;
    inv_keys_init(&k, t->sku, -1);
    const char *argv[] = {"HMGET", k.meta, "segments", "initial", "epoch"};
    if (aconn_command(e->conn, on_meta_learnt, t, 5, argv, NULL) != RCONN_OK)
        ticket_start(e, t);
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
    if (++t->tries > INV_TRIES || !e->cluster ||
        acluster_command(e->cluster, cluster_keyslot(key, strlen(key)), on_learnt, t, 6,
                         argv) != RCONN_OK) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        ticket_done(e, t);
    }
}

/* ---- a ticket's way on ----------------------------------------------------- */

/* t's machine is over: t is answered when final (a transfer's step goes back
 * to its refill); else it goes its way on (t->way). */
static void ticket_on(struct inv_engine *e, struct inv_ticket *t)
{
    inv_way way = (inv_way)t->way;
    t->way = INV_WAY_NONE;
    if (t->st != INV_PENDING || t->xfer) {
        ticket_done(e, t);
        return;
    }
    switch (way) {
    case INV_WAY_SEND:
        t->tries = 0;
        dispatch(e, t);
        return;
    case INV_WAY_QUEUE:
        if (++t->hops <= ENGINE_HOPS) {
            enqueue(e, t);
            return;
        }
        if (e->path == INV_PATH_ATOMIC)
            ticket_start(e, t); /* hopped too often: atomic.lua picks for it */
        else
            single_start(e, t, 0); /* hopped too often */
        return;
    case INV_WAY_ALONE:
        if (e->path == INV_PATH_ATOMIC)
            ticket_start(e, t); /* by itself: atomic.lua, which takes no lock */
        else
            single_start(e, t, t->hops < ENGINE_HOPS);
        return;
    case INV_WAY_LOAD:
        single_load(e, t);
        return;
    case INV_WAY_SHORT: {
        struct sku_layout l;
        if (inv_layout_get(e->inv, t->sku, &l) != 0)
            learn(e, t); /* its shards are not known (any more) */
        else
            refill_start(e, t); /* its shard is short */
        return;
    }
    default: /* not expected: never left unanswered */
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        ticket_done(e, t);
        return;
    }
}

/* ---- machines of one ticket: the atomic mode, a pay, a cancel, a join ------ */

/* Every answer of a command of ticket t's own machine: nothing for the driver
 * to do while it waits; over, t goes on (the reply's connection is the
 * commit's, for the acknowledgement). */
static void on_ticket(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *t = arg;
    struct inv_engine *e = t->engine;
    inv_do next = t->end == INV_END_JOIN
                      ? inv_join_on_reply(e->inv, t, &e->conns, on_ticket, t, res, r)
                  : t->end
                      ? inv_end_on_reply(e->inv, t, &e->conns, on_ticket, t, res, r)
                      : inv_atomic_on_reply(e->inv, t, &e->conns, on_ticket, t, res, r);
    if (next != INV_DO_OVER)
        return;
    e->answering = answered_by(e, res);
    ticket_on(e, t);
    e->answering = NULL;
}

static void ticket_start(struct inv_engine *e, struct inv_ticket *t)
{
    inv_do next = t->end == INV_END_JOIN
                      ? inv_join_start(e->inv, t, &e->conns, on_ticket, t)
                  : t->end ? inv_end_start(e->inv, t, &e->conns, on_ticket, t)
                           : inv_atomic_start(e->inv, t, &e->conns, on_ticket, t);
    if (next == INV_DO_OVER)
        ticket_on(e, t);
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

/* ---- machines: kept, driven ----------------------------------------------- */

static void on_timer(evutil_socket_t fd, short what, void *arg);

/* A machine of kind k, kept from before or made (its timer, a hold's batch,
 * an order machine's session), put in flight. */
static struct machine *machine_new(struct inv_engine *e, enum machine_kind k)
{
    struct machine *x = e->spare[k];
    if (x) {
        e->spare[k] = x->next;
    } else {
        x = xcalloc(1, sizeof(*x));
        x->e = e;
        x->kind = k;
        if (!(x->timer = evtimer_new(e->base, on_timer, x)))
            abort();
        if (k == M_HOLD)
            x->t = xcalloc((size_t)e->batch, sizeof(*x->t));
        if (k == M_SINGLE) /* the atomic mode takes no lock: its machines only load */
            x->s = e->path == INV_PATH_HOLDS ? inv_session_new(e->inv, e->idle) : e->s;
    }
    x->blocking = NULL;
    x->prev = NULL;
    x->next = e->live[k];
    if (e->live[k])
        e->live[k]->prev = x;
    e->live[k] = x;
    return x;
}

/* x is over: kept for the next of its kind. */
static void machine_keep(struct machine *x)
{
    struct inv_engine *e = x->e;
    if (x->prev)
        x->prev->next = x->next;
    else
        e->live[x->kind] = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = e->spare[x->kind];
    e->spare[x->kind] = x;
}

static void machine_free(struct inv_engine *e, struct machine *x)
{
    event_free(x->timer);
    if (x->kind == M_HOLD)
        free(x->t);
    if (x->kind == M_SINGLE) {
        if (x->s != e->s)
            inv_session_free(x->s);
        inv_single_clear(&x->m);
    }
    free(x);
}

/* The entries of x's machine (path.h: each answers what to do next). */
static inv_do on_reply_of(struct machine *x, aconn_result res, const redisReply *r)
{
    switch (x->kind) {
    case M_HOLD:
        return inv_hold_on_reply(x->e->s, &x->h, res, r);
    case M_SINGLE:
        return inv_single_on_reply(&x->m, res, r);
    default:
        return inv_refill_on_reply(&x->r, res, r);
    }
}

static inv_do on_timer_of(struct machine *x)
{
    return x->kind == M_HOLD ? inv_hold_on_timer(x->e->s, &x->h)
                             : inv_single_on_timer(&x->m);
}

static inv_do on_handoff_of(struct machine *x, aconn_result res, const redisReply *r)
{
    return x->kind == M_HOLD ? inv_hold_on_handoff(x->e->s, &x->h, res, r)
                             : inv_single_on_handoff(&x->m, res, r);
}

static inv_do attempt_of(struct machine *x)
{
    return x->kind == M_HOLD ? inv_hold_attempt(x->e->s, &x->h) : inv_single_attempt(&x->m);
}

static void drive(struct machine *x, inv_do next);

/* Every answer of a command of x's machine. */
static void on_reply(void *arg, aconn_result res, redisReply *r)
{
    struct machine *x = arg;
    struct inv_engine *e = x->e;
    e->answering = answered_by(e, res); /* the commit's, for the acknowledgement */
    drive(x, on_reply_of(x, res, r));
    e->answering = NULL;
}

/* x's due_us came. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct machine *x = arg;
    drive(x, on_timer_of(x));
}

static void on_handoff(void *arg, aconn_result res, redisReply *r)
{
    struct machine *x = arg;
    blocking_put(x->e->blocking, x->blocking);
    x->blocking = NULL;
    drive(x, on_handoff_of(x, res, r));
}

static void hold_top_up(struct machine *x);

/* DUE: x's timer is armed for its due_us. A hold that holds its lock now
 * counts as open and takes in what queued meanwhile; its work done already
 * (none asked for), its commit goes at once. */
static void machine_due(struct machine *x)
{
    struct inv_engine *e = x->e;
    int64_t due = x->kind == M_HOLD ? x->h.due_us : x->m.due_us;
    int working = x->kind == M_HOLD && x->h.state == HOLD_WORKING;
    if (working && !x->open) {
        x->open = 1;
        e->open_holds++;
        hold_top_up(x);
    }
    int64_t left = due - clock_now_us();
    if (left <= 0 && working) {
        drive(x, on_timer_of(x));
        return;
    }
    if (left < 0)
        left = 0;
    struct timeval tv = {.tv_sec = left / 1000000, .tv_usec = left % 1000000};
    evtimer_add(x->timer, &tv);
    engine_kick(e); /* it waits: room for another hold */
}

/* The connection of a blocking command for hold h's lock: its data Redis
 * (on a cluster, the master of its shard). NULL when that master is not
 * known. */
static struct aconn *blocking_for(struct inv_engine *e, const struct inv_hold *h)
{
    if (!e->cluster)
        return blocking_get(e->blocking, e->cfg.redis_host, e->cfg.redis_port);
    const struct cluster_map *m = acluster_map(e->cluster);
    int i = m->owner[cluster_gene_slot(h->gene)];
    if (m->nmasters == 0 || i == CLUSTER_NO_MASTER)
        return NULL;
    return blocking_get(e->blocking, m->masters[i].host, m->masters[i].port);
}

/* HANDOFF: x waits, on a connection of its own, for a release to hand the
 * lock it wants over; when the wait cannot be sent, the next attempt tells
 * what is wrong. */
static void machine_wait(struct machine *x)
{
    struct inv_engine *e = x->e;
    engine_kick(e); /* it waits: room for another hold */
    int hold = x->kind == M_HOLD;
    x->blocking = blocking_for(e, hold ? &x->h : inv_single_waiting(&x->m));
    if (x->blocking &&
        (hold ? inv_hold_wait_send(e->s, &x->h, x->blocking, on_handoff, x)
              : inv_single_wait_send(&x->m, x->blocking, on_handoff, x)))
        return;
    if (x->blocking)
        blocking_put(e->blocking, x->blocking);
    x->blocking = NULL;
    drive(x, attempt_of(x));
}

static void refill_step(struct machine *x);
static void hold_decided(struct machine *x);
static void machine_over(struct machine *x);

/* Does what x's machine asks next (path.h's inv_do): the machine is the
 * state machine, the driver its scheduler. An order machine's ticket is
 * answered as soon as it is final (the commit's answer in hand). */
static void drive(struct machine *x, inv_do next)
{
    if (x->kind == M_SINGLE && !x->answered && x->m.t->st != INV_PENDING) {
        x->answered = 1;
        ticket_on(x->e, x->m.t);
    }
    switch (next) {
    case INV_DO_AWAIT:
        return;
    case INV_DO_DUE:
        machine_due(x);
        return;
    case INV_DO_HANDOFF:
        machine_wait(x);
        return;
    case INV_DO_STEP:
        refill_step(x);
        return;
    case INV_DO_DECIDED:
        hold_decided(x);
        if (x->h.owed == 0)
            machine_over(x);
        return;
    case INV_DO_OVER:
        machine_over(x);
        return;
    }
}

/* ---- group commits: a hold per queue -------------------------------------- */

/* Fills hold x's batch from its queue, then, with room left, from the
 * SKU's other queues on this loop (ready ones, and those that backed off
 * from a taken lock), so that a crowd spread over K segments still fills
 * holds; the commit places them here while the segment has stock (counted
 * as spilled) and sends the rest on. No more units than limit (the
 * segment's stock, or an upper bound of it; an empty segment takes a full
 * batch of its own only: the commit sends them all on). */
static void batch_fill(struct machine *x, long long limit)
{
    struct inv_engine *e = x->e;
    squeue_fill(&e->queues, x->q, e->backed_off, x->t, &x->h.n, e->batch, limit);
}

/* The lock is held and the stock read: the orders that queued meanwhile (a
 * hold that waited for the lock waited for them too) join the batch, as
 * many as the segment holds, so that a contended segment serves everything
 * that piled up in one hold instead of one hold each. */
static void hold_top_up(struct machine *x)
{
    batch_fill(x, x->h.stock + x->h.back);
}

/* Each ticket of x after its batch: answered when final, else on its way
 * (ticket_on: another segment's queue, or by itself). */
static void hold_settle(struct machine *x)
{
    for (int i = 0; i < x->h.n; i++)
        ticket_on(x->e, x->t[i]);
    x->h.n = 0;
}

/* The commit answered: the tickets go on; the segment's bound is what the
 * commit left. */
static void hold_decided(struct machine *x)
{
    inv_count_batch(x->e->inv, x->h.n);
    if (x->h.left >= 0)
        x->q->bound = x->h.left;
    hold_settle(x);
}

/* The hold is over: its queue is free for the next batch. */
static void hold_free(struct machine *x)
{
    struct inv_engine *e = x->e;
    struct squeue *q = x->q;
    machine_keep(x);
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

/* x's try found its lock taken (TAKEN): its tickets go back to the head of
 * their queue, which waits for a hold of this loop to end (or, when none is
 * open, is served at once by a hold that waits for the lock). */
static void hold_back_off(struct machine *x)
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

static void hold_start(struct inv_engine *e, struct squeue *q)
{
    struct machine *x = machine_new(e, M_HOLD);
    x->q = q;
    q->busy = 1;
    x->h.n = 0;
    x->h.seg = q->seg;
    batch_fill(x, q->bound);
    drive(x, inv_hold_start(e->s, &x->h, x->t, x->h.n, q->seg, e->open_holds > 0,
                            &e->conns, on_reply, x));
}

/* OVER: what the machine leaves goes on, and the machine is kept. */
static void machine_over(struct machine *x)
{
    struct inv_engine *e = x->e;
    struct inv_ticket *t = NULL;
    switch (x->kind) {
    case M_HOLD:
        if (x->h.state == HOLD_TAKEN) { /* and this loop holds other locks */
            hold_back_off(x);
            return;
        }
        hold_settle(x);
        hold_free(x);
        return;
    case M_SINGLE:
        t = x->answered ? NULL : x->m.t;
        break;
    case M_REFILL:
        t = x->r.t;
        break;
    default:
        break;
    }
    machine_keep(x);
    if (t)
        ticket_on(e, t);
}

/* Holds of this loop with a round trip in flight (not those waiting for
 * their work's end or for a hand-off). */
static int holds_in_flight(const struct inv_engine *e)
{
    int n = 0;
    for (const struct machine *x = e->live[M_HOLD]; x; x = x->next)
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

static struct machine *single_new(struct inv_engine *e)
{
    struct machine *x = machine_new(e, M_SINGLE);
    x->answered = 0;
    return x;
}

static void single_start(struct inv_engine *e, struct inv_ticket *t, int queue_ok)
{
    struct machine *x = single_new(e);
    drive(x, inv_single_start(&x->m, x->s, t, queue_ok, &e->conns, on_reply, x));
}

static void single_xfer(struct inv_engine *e, struct inv_ticket *t,
                        const struct inv_xfer *xf)
{
    struct machine *x = single_new(e);
    drive(x, inv_single_xfer(&x->m, x->s, t, xf, &e->conns, on_reply, x));
}

static void single_load(struct inv_engine *e, struct inv_ticket *t)
{
    struct machine *x = single_new(e);
    drive(x, inv_single_load(&x->m, x->s, t, &e->conns, on_reply, x));
}

/* ---- a Redis Cluster: units brought to a short shard (engine_refill.h) ---- */

/* The refill's step is final (placed: its replicas heard, ticket_done). */
static void on_refill_step(struct inv_ticket *step)
{
    struct machine *x = step->owner;
    drive(x, inv_refill_on_step(&x->r));
}

/* The answer of a step run by its script alone (the atomic mode). */
static void on_step_reply(void *arg, aconn_result res, redisReply *r)
{
    struct inv_ticket *s = arg;
    struct inv_engine *e = s->engine;
    long long got = 0;
    inv_status st = res == ACONN_REPLY && rconn_is_noscript(r)
                        ? INV_PENDING /* nothing ran: again (inv_refill_on_step) */
                        : inv_xfer_outcome(res, r, &got, &s->order);
    s->order.qty = (int)got;
    inv_ticket_finish(e->inv, s, st);
    e->answering = answered_by(e, res);
    ticket_done(e, s); /* the replicas first, when placed */
    e->answering = NULL;
}

/* STEP: runs x's transfer step (inflight counted): under its segment's lock
 * by the order machine, or (atomic mode) the script alone. */
static void refill_step(struct machine *x)
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

/* On a cluster: t is short in its shard; units are brought there from the
 * others, then t is sent on again, or answered sold out. */
static void refill_start(struct inv_engine *e, struct inv_ticket *t)
{
    struct sku_layout l;
    if (inv_refill_check(e->inv, t, &e->conns, &l) != 0) {
        ticket_done(e, t);
        return;
    }
    struct machine *x = machine_new(e, M_REFILL);
    memset(&x->r, 0, sizeof(x->r));
    drive(x, inv_refill_start(&x->r, e->inv, t, &l, &e->conns, on_reply, x));
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
    /* A wait lasts at most --wait-ms: its answer may take that long. */
    e->blocking =
        blocking_pool_new(base, cfg->redis_password, cfg->wait_ms + cfg->timeout_ms);
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
        ticket_start(e, t);
    else if (e->path == INV_PATH_HOLDS && t->seg >= 0)
        enqueue(e, t);
    else if (e->path == INV_PATH_ATOMIC && t->seg >= 0 && !e->cluster)
        enqueue(e, t); /* the atomic mode's group commit: no lock, one script */
    else if (e->path == INV_PATH_ATOMIC && !e->cluster && t->hops == 0)
        learn_meta(e, t); /* its segments first, then queued */
    else if (e->path == INV_PATH_ATOMIC && !(e->cluster && t->gene < 0))
        ticket_start(e, t);
    else if (!e->cluster)
        single_start(e, t, 1);
    else
        learn(e, t); /* its SKU's shards are not known yet */
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
    blocking_pool_free(e->blocking);
    e->blocking = NULL;
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
    /* Machines waiting for a timer (nothing was committed): holds for their
     * work's end or their next attempt, orders by themselves likewise */
    for (int k = M_HOLD; k <= M_SINGLE; k++)
        while (e->live[k]) {
            struct machine *x = e->live[k];
            evtimer_del(x->timer);
            if (k == M_HOLD)
                inv_hold_abandon(e->s, &x->h);
            else
                inv_single_abandon(&x->m);
            machine_over(x); /* its tickets answered unavailable */
        }
    squeues_free(&e->queues, ticket_unserved, e);
    for (int k = 0; k < M_KINDS; k++)
        for (struct machine *x = e->spare[k], *next; x; x = next) {
            next = x->next;
            machine_free(e, x);
        }
    event_free(e->kick);
    event_free(e->inbox_ev);
    pthread_mutex_destroy(&e->inbox_mu);
    inv_session_free(e->s);
    rconn_free(e->idle);
    free(e->conns.node);
    free(e);
}
