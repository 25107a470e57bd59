/* pg_steps: the pg lock's steps for an event loop (lock.h: st->async), done
 * on the caller's own loop: a lock_session's first step gives it two
 * asynchronous connections on that loop's base (pg/apg.h), one for the
 * queries, one that LISTENs on PG_CHANNEL. An acquire is a job, a state
 * machine driven by the answers to its queries, the notifications and a
 * timer, never blocking (the statements are lock_pg.c's):
 *
 *   phase    in flight                       then
 *   LISTEN   nothing: the loop's listener,   TRY (it LISTENs; or it did not
 *            new, is not LISTENing yet         within the query timeout)
 *   TRY      the conditional UPDATE          DONE (granted; busy at the
 *            (behind the INSERT of the row     wait's end; failed), TRY again
 *            when it had none)                 (no row yet; notified meanwhile),
 *                                              WAIT
 *   WAIT     nothing: asleep until the key   TRY (notified; the holder's lease
 *            is notified, or the timer         ran out; the listener LISTENs
 *                                              again), DONE (busy at the wait's end)
 *   RELEASE  the owner-checked UPDATE that   DONE (released, not held, failed)
 *            NOTIFYs
 *   DONE     an answer may still come: a grant nobody takes is let go
 *
 * Once over, an event of the caller's base is made active (never from inside
 * lock_step_start), and the caller takes the outcome in lock_try_done or
 * lock_release_done. A notification that comes while the attempt is in
 * flight is remembered: a "taken" answer then tries again at once, as the
 * release may have come after the attempt's snapshot. The first attempts on
 * a loop wait for its listener (LISTEN): one before it could miss a release,
 * and would be made again once it LISTENs.
 *
 * Lifetime: a job is freed by its last reference: the caller's (until
 * lock_try_done, lock_release_done or lock_step_cancel), one per query in
 * flight. Everything here runs on the session's loop thread. */
#include "pg_impl.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apg.h"
#include "clock.h"
#include "xalloc.h"

enum pg_phase { PJ_LISTEN, PJ_TRY, PJ_WAIT, PJ_RELEASE, PJ_DONE };

struct pg_job {
    struct pg_loop *loop;
    struct pg_job *next; /* loop->jobs, while an acquire is not DONE */
    int refs;
    int cancelled; /* the caller took it or gave up: nothing is delivered */
    int finished;
    lock_status res;
    enum pg_phase phase;
    char *key;
    char token[33];
    char version[24]; /* a release's */
    uint64_t granted; /* the version an acquire got */
    int64_t sent_us;  /* when the last attempt left: the lease counts from it */
    int64_t deadline_us;
    int release; /* a release, not an acquire */
    int contended, inserted;
    int notified; /* the key was notified while the attempt was in flight */
    int asleep;   /* counted in watch_waiters */
    struct event *timer;
    struct event *deliver;
    lock_step_cb *done;
    void *arg;
};

#define PHASE_REENTER 1
#define PHASE_RELEASE 2
#define PHASE_MEMORY 3 /* a release decided in memory */

static void job_put(struct pg_job *j)
{
    if (--j->refs > 0)
        return;
    if (j->timer)
        event_free(j->timer);
    free(j->key);
    free(j);
}

static void unlink_job(struct pg_job *j)
{
    for (struct pg_job **p = &j->loop->jobs; *p; p = &(*p)->next) {
        if (*p == j) {
            *p = j->next;
            break;
        }
    }
}

static void ignore(void *arg, apg_outcome res, PGresult *r)
{
    (void)arg, (void)res, (void)r;
}

int pg_steps_let_go(struct pg_loop *loop, const char *key, const char *token)
{
    if (!loop || loop->closing)
        return 0;
    const char *params[] = {key, token};
    return apg_query(loop->aconn, ignore, NULL, pg_sql_let_go, 2, params) == APG_OK;
}

static void asleep_end(struct pg_job *j)
{
    if (j->asleep) {
        j->asleep = 0;
        lock_count_watch_waiter(j->loop->st->counters, -1);
    }
}

/* The job is over with res: the caller is told, unless it gave up; then a
 * grant is let go. */
static void finish(struct pg_job *j, lock_status res)
{
    if (j->phase == PJ_DONE)
        return;
    int release = j->release;
    if (!release)
        unlink_job(j);
    asleep_end(j);
    evtimer_del(j->timer);
    j->phase = PJ_DONE;
    j->res = res;
    j->finished = 1;
    if (!j->cancelled)
        event_active(j->deliver, EV_TIMEOUT, 0);
    else if (!release && res == LOCK_ACQUIRED)
        pg_steps_let_go(j->loop, j->key, j->token);
}

static void on_table(void *arg, apg_outcome res, PGresult *r)
{
    struct pg_state *st = arg;
    if (res == APG_RESULT && PQresultStatus(r) == PGRES_COMMAND_OK)
        atomic_store(&st->table_ready, 1);
}

static void on_try(void *arg, apg_outcome res, PGresult *r);

/* One attempt: the conditional UPDATE (behind the table's and the row's
 * making when needed). */
static void attempt(struct pg_job *j)
{
    struct pg_loop *lp = j->loop;
    struct pg_state *st = lp->st;
    j->phase = PJ_TRY;
    j->notified = 0;
    if (!atomic_load(&st->table_ready))
        apg_query(lp->aconn, on_table, st, pg_sql_table, 0, NULL);
    const char *params[] = {j->key, j->token, st->ttl_text};
    if (j->inserted == 1) {
        apg_query(lp->aconn, ignore, NULL, pg_sql_insert, 1, params);
        j->inserted = 2;
    }
    j->sent_us = clock_now_us();
    j->refs++;
    if (apg_query(lp->aconn, on_try, j, pg_sql_acquire, 3, params) != APG_OK) {
        j->refs--;
        finish(j, LOCK_ERROR); /* the database is down */
    }
}

/* Asleep until the key is notified, or until the holder's lease (left_ms,
 * -1: unknown, a ttl) or the wait runs out. */
static void sleep_job(struct pg_job *j, long long left_ms)
{
    struct pg_state *st = j->loop->st;
    int64_t now = clock_now_us();
    int64_t until = now + (left_ms >= 0 ? left_ms : st->ttl_ms) * 1000 + 1000;
    if (until > j->deadline_us)
        until = j->deadline_us;
    int64_t in = until - now;
    struct timeval tv = {.tv_sec = in / 1000000, .tv_usec = in % 1000000};
    j->phase = PJ_WAIT;
    j->asleep = 1;
    lock_count_watch_waiter(st->counters, 1);
    evtimer_add(j->timer, &tv);
}

static void on_try(void *arg, apg_outcome res, PGresult *r)
{
    struct pg_job *j = arg;
    uint64_t version = 0;
    long long left_ms = -1;
    enum pg_try t = res == APG_RESULT ? pg_try_read(j->loop->st, r, &version, &left_ms)
                                      : PG_TRY_FAILED;
    if (j->phase != PJ_TRY) { /* over meanwhile (given up): nobody takes it */
        if (t == PG_TRY_GRANTED || res == APG_LOST)
            pg_steps_let_go(j->loop, j->key, j->token);
    } else if (t == PG_TRY_GRANTED) {
        j->granted = version;
        finish(j, LOCK_ACQUIRED);
    } else if (res == APG_LOST) { /* it may have taken the row: let go */
        finish(j, LOCK_ERROR);
        pg_steps_let_go(j->loop, j->key, j->token);
    } else if (t == PG_TRY_NO_ROW && !j->inserted) {
        j->inserted = 1;
        attempt(j);
    } else if (t != PG_TRY_TAKEN) {
        finish(j, LOCK_ERROR);
    } else {
        j->contended = 1;
        if (clock_now_us() >= j->deadline_us) {
            finish(j, LOCK_BUSY);
        } else if (j->notified) { /* released after our snapshot, maybe */
            lock_count_wakeup(j->loop->st->counters);
            attempt(j);
        } else {
            sleep_job(j, left_ms);
        }
    }
    job_put(j);
}

/* The first attempts on a loop wait for its listener to LISTEN (on_notify
 * ends the wait), at most the query timeout. */
static void listen_wait(struct pg_job *j)
{
    int64_t in = (int64_t)j->loop->st->timeout_ms * 1000;
    struct timeval tv = {.tv_sec = in / 1000000, .tv_usec = in % 1000000};
    j->phase = PJ_LISTEN;
    evtimer_add(j->timer, &tv);
}

/* The holder's lease or the wait ran out: the fallback when no notification
 * came. Or the listener did not LISTEN in time: no later attempt waits for it. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct pg_job *j = arg;
    if (j->phase == PJ_LISTEN) {
        j->loop->heard = 1;
        attempt(j);
        return;
    }
    if (j->phase != PJ_WAIT)
        return;
    asleep_end(j);
    if (clock_now_us() >= j->deadline_us)
        finish(j, LOCK_BUSY);
    else
        attempt(j);
}

/* A notification (key: its payload), or the listener LISTENing again or lost
 * (key NULL): the key's waiters try again, those in flight once more after
 * a "taken"; those that waited for the listener make their first attempt. */
static void on_notify(void *arg, const char *channel, const char *payload)
{
    struct pg_loop *lp = arg;
    const char *key = channel ? payload : NULL;
    if (!key)
        lp->heard = 1;
    int n = 0;
    for (struct pg_job *j = lp->jobs; j; j = j->next)
        n++;
    if (n == 0)
        return;
    struct pg_job **woken = xcalloc((size_t)n, sizeof(*woken));
    n = 0;
    for (struct pg_job *j = lp->jobs; j; j = j->next) {
        if (key && strcmp(j->key, key) != 0)
            continue;
        j->refs++;
        woken[n++] = j;
    }
    for (int i = 0; i < n; i++) {
        struct pg_job *j = woken[i];
        if (j->phase == PJ_TRY) {
            j->notified = 1;
        } else if (j->phase == PJ_LISTEN && !key) {
            evtimer_del(j->timer);
            attempt(j);
        } else if (j->phase == PJ_WAIT) {
            asleep_end(j);
            evtimer_del(j->timer);
            if (key)
                lock_count_wakeup(lp->st->counters);
            attempt(j);
        }
        job_put(j);
    }
    free(woken);
}

/* s on base's loop, whose connections (made by its first session) it
 * shares from its first step on. 0 when s is on another loop already (a
 * session belongs to one thread). */
static int conns_on(struct pg_session *s, struct event_base *base)
{
    if (s->loop)
        return s->loop->base == base && !s->loop->closing;
    struct pg_state *st = s->st;
    pthread_mutex_lock(&st->mu);
    struct pg_loop *lp = st->loops;
    while (lp && lp->base != base)
        lp = lp->next;
    int made = !lp;
    if (made) {
        lp = xcalloc(1, sizeof(*lp));
        lp->st = st;
        lp->base = base;
        lp->next = st->loops;
        st->loops = lp;
    }
    lp->refs++;
    pthread_mutex_unlock(&st->mu);
    if (made) { /* on base's thread: nobody else finds it before a step of its own */
        lp->aconn = apg_new(base, st->conninfo, st->timeout_ms);
        lp->listener = apg_new(base, st->conninfo, st->timeout_ms);
        apg_listen(lp->listener, PG_CHANNEL, on_notify, lp);
    }
    s->loop = lp;
    return 1;
}

static void on_deliver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct pg_job *j = arg;
    j->done(j->arg);
}

/* ---- the caller's side --------------------------------------------------- */

void pg_try_cmd(void *session, const char *key, struct lock_step *st)
{
    struct pg_session *s = session;
    struct pg_hold *h = pg_hold_find(s, key);
    if (h && pg_hold_alive(s->st, h)) {
        st->phase = PHASE_REENTER; /* decided at once, in try_done */
        return;
    }
    if (h) /* lost: its grants release as NOT_HELD; this one is new */
        h->detached = 1;
    st->async = 1;
}

static void released(void *arg, apg_outcome res, PGresult *r)
{
    struct pg_job *j = arg;
    lock_status out = LOCK_ERROR; /* unknown: the lease runs out */
    if (res == APG_RESULT && PQresultStatus(r) == PGRES_TUPLES_OK)
        out = PQntuples(r) == 1 ? LOCK_RELEASED : LOCK_NOT_HELD;
    if (j->phase == PJ_RELEASE)
        finish(j, out);
    job_put(j);
}

void pg_step_start(void *session, const char *key, struct lock_step *st,
                   struct event_base *base, lock_step_cb *done, void *arg)
{
    struct pg_session *s = session;
    struct pg_job *j = xcalloc(1, sizeof(*j));
    j->refs = 1; /* the caller's */
    j->key = xstrdup(key);
    j->done = done;
    j->arg = arg;
    j->deadline_us = st->deadline_us;
    j->deliver = event_new(base, -1, 0, on_deliver, j);
    j->timer = evtimer_new(base, on_timer, j);
    st->job = j;
    j->release = st->phase == PHASE_RELEASE;
    int on = conns_on(s, base);
    j->loop = s->loop; /* on a failure another loop's: only finish() and take() use it */
    if (!on) {
        j->phase = j->release ? PJ_RELEASE : PJ_TRY;
        finish(j, LOCK_ERROR);
        return;
    }
    if (st->phase == PHASE_RELEASE) {
        struct pg_hold *h = st->g->holder;
        j->phase = PJ_RELEASE;
        snprintf(j->token, sizeof(j->token), "%s", h->token);
        snprintf(j->version, sizeof(j->version), "%" PRIu64, h->version);
        pg_hold_releasing(s->st, h);
        const char *params[] = {j->key, j->token, j->version};
        j->refs++;
        if (apg_query(j->loop->aconn, released, j, pg_sql_release, 3, params) != APG_OK) {
            j->refs--;
            finish(j, LOCK_ERROR);
        }
        return;
    }
    lock_token_new(j->token);
    j->next = j->loop->jobs;
    j->loop->jobs = j;
    if (j->loop->heard)
        attempt(j);
    else
        listen_wait(j);
}

/* The caller's end of j: nothing is delivered any more. Its outcome. */
static lock_status take(struct pg_job *j)
{
    j->cancelled = 1;
    event_free(j->deliver);
    j->deliver = NULL;
    if (!j->finished)
        finish(j, LOCK_ERROR);
    return j->res;
}

lock_status pg_try_done(void *session, const char *key, struct lock_step *st,
                        struct lock_grant *g)
{
    struct pg_session *s = session;
    struct pg_job *j = st->job;
    if (!j) { /* a re-entry (or nothing started) */
        struct pg_hold *h = pg_hold_find(s, key);
        if (st->phase != PHASE_REENTER || !h || !pg_hold_alive(s->st, h))
            return LOCK_ERROR;
        h->depth++;
        pg_grant_fill(s->st, h, 0, g);
        return LOCK_ACQUIRED;
    }
    st->job = NULL;
    int finished = j->finished;
    lock_status res = take(j);
    if (finished && res == LOCK_ACQUIRED) {
        struct pg_hold *h = pg_hold_new(s, key, j->token, j->granted, j->sent_us);
        pg_grant_fill(s->st, h, j->contended, g);
    }
    st->contended |= j->contended;
    job_put(j);
    return res;
}

void pg_step_cancel(void *session, struct lock_step *st)
{
    (void)session;
    struct pg_job *j = st->job;
    st->job = NULL;
    int granted =
        j->finished && j->res == LOCK_ACQUIRED && j->phase == PJ_DONE && j->granted > 0;
    take(j); /* an answer still to come is let go when it grants */
    if (granted)
        pg_steps_let_go(j->loop, j->key, j->token);
    job_put(j);
}

void pg_release_cmd(void *session, const char *key, struct lock_grant *g,
                    struct lock_step *st)
{
    struct pg_session *s = session;
    struct pg_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0 || h->depth > 1 || !pg_hold_alive(s->st, h)) {
        st->phase = PHASE_MEMORY; /* nothing to send: release_done decides */
        return;
    }
    st->async = 1;
    st->phase = PHASE_RELEASE;
    st->after = 1; /* the UPDATE goes once the commit answered */
}

lock_status pg_release_done(void *session, const char *key, struct lock_grant *g,
                            struct lock_step *st)
{
    struct pg_session *s = session;
    struct pg_job *j = st ? st->job : NULL;
    if (!j || !j->release) { /* never sent, or nothing to send: let go unwaited */
        if (j)
            pg_step_cancel(session, st);
        return pg_release_in_memory(s, key, g, 1);
    }
    st->job = NULL;
    lock_status res = take(j);
    job_put(j);
    struct pg_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    pg_hold_free(h);
    return res;
}

void pg_steps_close(struct pg_session *s)
{
    struct pg_loop *lp = s->loop;
    if (!lp)
        return;
    s->loop = NULL;
    struct pg_state *st = lp->st;
    pthread_mutex_lock(&st->mu);
    int last = --lp->refs == 0;
    if (last) {
        for (struct pg_loop **p = &st->loops; *p; p = &(*p)->next) {
            if (*p == lp) {
                *p = lp->next;
                break;
            }
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (!last)
        return;
    lp->closing = 1;
    while (lp->jobs) { /* their callers gave them up: none should be left */
        lp->jobs->cancelled = 1;
        finish(lp->jobs, LOCK_ERROR);
    }
    apg_free(lp->aconn); /* answers what is in flight (lost): jobs let go */
    apg_free(lp->listener);
    free(lp);
}
