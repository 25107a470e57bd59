/* engine_single.c: the event loop's driver of the order machine (single.h):
 * one order by itself (several segments, a replay, a ticket past its hops, a
 * SKU whose layout is not known yet). engine.c hands such a ticket over with
 * eng_single_start or eng_single_load; the machine's answers come back here,
 * and a ticket it finishes goes back through eng_ticket_done. */
#include <event2/event.h>
#include <stdlib.h>

#include "clock.h"
#include "engine_impl.h"
#include "single.h"
#include "xalloc.h"

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
        eng_ticket_done(e, x->t);
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
        eng_enqueue(e, t);
        return;
    }
    case INV_SINGLE_ALONE: {
        struct inv_ticket *t = x->t;
        x->answered = 1;
        single_free(x);
        struct sku_layout l;
        if (inv_layout_get(e->inv, t->sku, &l) != 0)
            eng_learn(e, t); /* its shards are not known (any more) */
        else
            eng_refill(e, t); /* its shard is short */
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
    e->answering = eng_answered_by(e, res); /* the commit's, for the acknowledgement */
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
    eng_blocking_put(x->e, x->blocking);
    x->blocking = NULL;
    single_do(x, inv_single_on_handoff(&x->m, res, r));
}

/* Waits, on a connection of its own, for a release to hand the lock of the
 * part that x's machine locks over. */
static void single_wait(struct esingle *x)
{
    struct inv_engine *e = x->e;
    x->blocking = eng_blocking_get(e, inv_single_waiting(&x->m));
    if (x->blocking && inv_single_wait_send(&x->m, x->blocking, on_single_handoff, x))
        return;
    if (x->blocking)
        eng_blocking_put(e, x->blocking);
    x->blocking = NULL;
    single_do(x, inv_single_attempt(&x->m));
}

void eng_single_start(struct inv_engine *e, struct inv_ticket *t, int queue_ok)
{
    struct esingle *x = single_new(e, t);
    single_do(x,
              inv_single_start(&x->m, x->s, t, queue_ok, &e->conns, on_single_reply, x));
}

void eng_single_xfer(struct inv_engine *e, struct inv_ticket *t, const struct inv_xfer *x)
{
    struct esingle *s = single_new(e, t);
    single_do(s, inv_single_xfer(&s->m, s->s, t, x, &e->conns, on_single_reply, s));
}

void eng_single_load(struct inv_engine *e, struct inv_ticket *t)
{
    struct esingle *x = single_new(e, t);
    single_do(x, inv_single_load(&x->m, x->s, t, &e->conns, on_single_reply, x));
}

void eng_singles_stop(struct inv_engine *e)
{
    /* Orders by themselves waiting for a timer (nothing was committed) */
    while (e->singles) {
        struct esingle *x = e->singles;
        evtimer_del(x->timer);
        inv_single_abandon(&x->m);
        single_do(x, INV_SINGLE_OVER); /* answered unavailable if not yet */
    }
}

void eng_singles_free(struct inv_engine *e)
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
