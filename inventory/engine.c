/* engine.c: the event loop's runner. Tickets come in (inv_engine_submit,
 * the inbox from other loops), the atomic mode sends its script, the other
 * modes queue at their segment and a hold (hold.h) serves each queue's group
 * commit; orders by themselves go to engine_single.c. What the two files
 * share is engine_impl.h. */
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
#include "engine_impl.h"
#include "xalloc.h"

/* Most sends of one ticket on the loop (a fresh id, a script loaded again). */
#define ENGINE_TRIES 4
/* Most times a batch sends a ticket on to another segment's queue. */
#define ENGINE_HOPS 4
/* Most holds of a loop with a round trip in flight (see on_kick). */
#define ENGINE_HOLDS_IN_FLIGHT 2

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
struct aconn *eng_answered_by(const struct inv_engine *e, aconn_result res)
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
void eng_ticket_done(struct inv_engine *e, struct inv_ticket *t)
{
    int acks = t->st == INV_PLACED || t->st == INV_REPLAYED || (t->end && t->st == INV_OK);
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
    inv_status st = res == ACONN_REPLY ? inv_dir_learnt(e->inv, t->sku, r) : INV_UNAVAILABLE;
    if (st == INV_OK && !e->closing && inv_ticket_route(e->inv, t) >= 0) {
        eng_dispatch(e, t);
        return;
    }
    inv_ticket_fail(e->inv, t, st == INV_OK ? INV_UNAVAILABLE : st);
    eng_ticket_done(e, t);
}

/* t's SKU has no layout this process knows (its first orders here, or since
 * a reset): its directory is read from the master of its own slot, then t
 * goes on as any ticket (dispatch). Each ticket asks for itself: the answer
 * to the first teaches the rest as they come. */
void eng_learn(struct inv_engine *e, struct inv_ticket *t)
{
    char key[96];
    const char *argv[6];
    inv_dir_learn_cmd(t->sku, key, sizeof(key), argv);
    if (++t->tries > ENGINE_TRIES || !e->cluster ||
        acluster_command(e->cluster, cluster_keyslot(key, strlen(key)), on_learnt, t, 6,
                         argv) != RCONN_OK) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        eng_ticket_done(e, t);
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
        e->answering = eng_answered_by(e, res);
        eng_ticket_done(e, t);
        e->answering = NULL;
        break;
    case INV_STEP_AGAIN:
        atomic_send(e, t);
        break;
    case INV_STEP_LOAD:
        eng_single_load(e, t);
        break;
    case INV_STEP_ALONE:
        eng_refill(e, t); /* short in its shard */
        break;
    }
}

static void atomic_send(struct inv_engine *e, struct inv_ticket *t)
{
    if (e->cluster && t->gene < 0) {
        eng_learn(e, t); /* its SKU's shards are not known yet (a try counted there) */
    } else if (++t->tries > ENGINE_TRIES) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        eng_ticket_done(e, t);
    } else if (inv_atomic_send(e->inv, t, &e->conns, on_atomic, t, &t->seen) !=
               RCONN_OK) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE); /* Redis is down: at once */
        eng_ticket_done(e, t);
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
    e->answering = eng_answered_by(e, res);
    eng_ticket_done(e, t);
    e->answering = NULL;
}

static void end_send(struct inv_engine *e, struct inv_ticket *t)
{
    if (++t->tries > ENGINE_TRIES ||
        inv_end_send(e->inv, t, &e->conns, on_end, t) != RCONN_OK) {
        t->st = INV_UNAVAILABLE; /* nothing sent this step: the last one's stands */
        eng_ticket_done(e, t);
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
void eng_enqueue(struct inv_engine *e, struct inv_ticket *t)
{
    struct inv_engine *owner =
        e->loops[seg_queue_hash(t->sku, t->seg) % (uint32_t)e->nloops];
    if (owner == e || e->closing) {
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
 * (single.h; on a cluster, a shard short has units brought: eng_refill). */
static void hold_settle(struct ehold *x)
{
    struct inv_engine *e = x->e;
    for (int i = 0; i < x->h.n; i++) {
        struct inv_ticket *t = x->t[i];
        if (t->st != INV_PENDING)
            eng_ticket_done(e, t);
        else if (t->seg >= 0 && t->seg != x->h.seg && ++t->hops <= ENGINE_HOPS)
            eng_enqueue(e, t);
        else /* several segments, a replay, a reset, too many hops, a shard short */
            eng_single_start(e, t, t->hops < ENGINE_HOPS);
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
    e->answering = eng_answered_by(e, res); /* the commit's, for the acknowledgement */
    hold_do(x, inv_hold_on_reply(e->s, &x->h, res, r));
    e->answering = NULL;
}

/* An idle connection for a blocking command on the data Redis of hold h
 * (on a cluster, the master of its shard), made on first need. NULL when
 * that master is not known. */
struct aconn *eng_blocking_get(struct inv_engine *e, const struct inv_hold *h)
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

void eng_blocking_put(struct inv_engine *e, struct aconn *c)
{
    if (e->closing)
        return;
    for (int i = 0; i < e->nblocking; i++)
        if (e->blocking[i].c == c)
            e->idle_blocking[e->nidle++] = e->blocking[i];
}

static void on_handoff(void *arg, aconn_result res, redisReply *r)
{
    struct ehold *x = arg;
    eng_blocking_put(x->e, x->blocking);
    x->blocking = NULL;
    hold_do(x, inv_hold_on_handoff(x->e->s, &x->h, res, r));
}

/* Waits, on a connection of its own, for a release to hand the lock over. */
static void hold_wait(struct ehold *x)
{
    struct inv_engine *e = x->e;
    engine_kick(e); /* it waits: room for another hold */
    x->blocking = eng_blocking_get(e, &x->h);
    if (x->blocking && inv_hold_wait_send(e->s, &x->h, x->blocking, on_handoff, x))
        return;
    if (x->blocking)
        eng_blocking_put(e, x->blocking);
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

void eng_dispatch(struct inv_engine *e, struct inv_ticket *t)
{
    if (t->end)
        end_send(e, t);
    else if (e->path == INV_PATH_ATOMIC)
        atomic_send(e, t);
    else if (e->path == INV_PATH_HOLDS && t->seg >= 0)
        eng_enqueue(e, t);
    else if (!e->cluster)
        eng_single_start(e, t, 1);
    else
        eng_learn(e, t);
}

void inv_engine_submit(struct inv_engine *e, struct inv_ticket *t)
{
    t->engine = e;
    t->tries = 0;
    atomic_fetch_add(&e->inflight, 1);
    eng_dispatch(e, t);
}

/* A ticket still queued when the engine goes: answered unavailable. */
static void ticket_unserved(struct inv_ticket *t, void *arg)
{
    struct inv_engine *e = arg;
    inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
    eng_ticket_done(e, t);
}

void inv_engine_free(struct inv_engine *e)
{
    if (!e)
        return;
    e->closing = 1;
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
    eng_singles_stop(e);
    squeues_free(&e->queues, ticket_unserved, e);
    eng_singles_free(e);
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
