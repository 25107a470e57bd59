/* pg: the database lock. One row per lock key in a PostgreSQL table,
 *
 *   seckill_locks (key text PRIMARY KEY, owner text, expires_at timestamptz,
 *                  version bigint NOT NULL DEFAULT 0)
 *
 * made if missing (by the first attempt, and again whenever a statement finds
 * it gone); a key's row is made on demand by the first acquire that finds none.
 * The statements are pg_sql.c's; the read-write lock's rows are in a table of
 * their own, seckill_rwlocks, taken the same way (below).
 *
 * Acquire: one conditional UPDATE, which takes the row when it is free or its
 * lease ran out, on the database's clock, and moves its version on:
 *   UPDATE ... SET owner = $me, expires_at = now() + ttl,
 *     version = greatest(version + 1, <the database's clock in microseconds>)
 *   WHERE key = $k AND (owner IS NULL OR expires_at < now() OR owner = $me)
 *   RETURNING version
 * The version is the fencing token: strictly increasing per key, unique by
 * itself in its namespace ("<n>@pg", lock_fence_text), from outside the data
 * Redis (as zk's czxid: fence_external, the holder's first step raises the
 * segment's fence to it, fence_read.lua). The clock is its floor so that a
 * lock table made anew (dropped, restored from a backup) hands out versions
 * above every one handed out before, which the segments' marks in the data
 * Redis still hold: not 1 again, refused until it passed them. (Should the
 * database's clock go back, such versions are refused until it passed them
 * again: never let through.) The owner ($me) is a fresh random token per acquire, so
 * "owner = $me" only lets an attempt take again what its own earlier try of
 * the same acquire may have taken with its answer lost. The same statement
 * reads, from its snapshot, whether the row exists and the lease its holder
 * has left: a waiter sleeps at most that long.
 *
 * Release: an owner- and version-checked UPDATE that frees the row and, in
 * the same statement, NOTIFYs channel seckill_locks with the key. Waiters
 * LISTEN on that channel and try again when their key is notified; a waiter
 * that hears nothing tries again only when the holder's lease runs out or its
 * wait ends (never a poll). The notification comes at the release's commit to
 * every connection that LISTENs then; an acquire's connection LISTENs before
 * its attempt, so a release after the attempt's snapshot cannot be missed
 * (while the listening connection is down, waiters rely on the fallback; when
 * it LISTENs again they all try again).
 *
 * Renewal: the watchdog, a timer on the event loop the lock is attached to
 * (lock_attach) with a connection of its own, renews held leases at ttl/3 by
 * an owner- and version-checked UPDATE of expires_at (only while the lease
 * has not run out: a lease that did is lost, as in Redis); one that finds the
 * row no longer its holder's counts a lost lease, and so does a lease found
 * run out while held (its process paused past it, or its renewals
 * unanswered), by the tick or by its release, whichever comes first;
 * lock_valid_until_us answers 0 from then on. A lease is renewed up to
 * max_lease_ms in all.
 *
 * Reentrancy is per lock_session, in memory (as zk): a session that acquires
 * a key it holds gets the same grant again, and only its last release frees
 * the row.
 *
 * The read-write lock (lock.h): the same jobs with a side, each side's
 * attempt one conditional UPDATE of the key's row in seckill_rwlocks
 * (pg_sql.c: readers each a member with a lease of its own, the writer's
 * lease and version, a waiting writer's intent that keeps new readers out).
 * A writer that ends without the grant (busy, failed, given up) lets its
 * intent go at once, NOTIFYing the readers it kept out; asleep, it wakes to
 * renew the intent at half its lease. Holds are per side (pg_lease.c): a
 * session re-enters its read, or its write, in memory; a read while it
 * writes is counted on the write hold, whose row stays written until those
 * reads are released too (no downgrade); a write while it only reads waits
 * for its own read like any other (no upgrade). The writer's token is the
 * version; a read grant has none.
 *
 * Plain locks as readers (lock_step_read_of, lock_rw_write_over): a plain
 * lock that reads a read-write lock is refused while its own row carries a
 * writer's mark (writer_until), and the write side over such readers marks
 * their rows in its attempt, which it grants only when none of them is held
 * (pg_sql.c, over): both write the reader's row, so its row lock orders
 * them, with no statement more on the reader's path. The writer's job is
 * woken by its readers' releases (their keys' notifications) as well as its
 * own key's; a reader kept out sleeps until the writer's release NOTIFYs its
 * key, or its mark runs out. A reader that holds another reader of the same
 * lock already (held) is not refused: the writer waits for it anyway.
 *
 * Steps for an event loop (lock.h: st->async), done on the caller's own
 * loop: a lock_session's first step gives it the two asynchronous connections
 * of that loop's base (pg/apg.h), shared by every session on the loop, one for
 * the queries, one that LISTENs on PG_CHANNEL. Holds, leases and the
 * watchdog are pg_lease.c's. Every query is bounded by
 * lock_config.timeout_ms; a database that is down or hung costs an acquire
 * LOCK_ERROR, not a wait. An acquire is a job, a state machine driven by the
 * answers to its queries, the notifications and a timer, never blocking:
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
#include "pg_lease.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apg.h"
#include "clock.h"
#include "pg_sql.h"
#include "xalloc.h"

/* ---- answers ---------------------------------------------------------------- */

/* What an acquire's answer says. */
enum pg_try { PG_TRY_GRANTED, PG_TRY_TAKEN, PG_TRY_NO_ROW, PG_TRY_SCHEMA, PG_TRY_FAILED };

/* Reads the answer r of an attempt (pg_sql.h, acquire): GRANTED with
 * *version; TAKEN with *left_ms, the holder's lease left on the database's
 * clock (-1: unknown); NO_ROW (the key has no row yet); SCHEMA (a table or
 * a column is missing: to be made again); FAILED (any other error). */
static enum pg_try try_read(const PGresult *r, uint64_t *version, long long *left_ms)
{
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) != 3) {
        const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (code && (strcmp(code, "42P01") == 0 || strcmp(code, "42703") == 0))
            return PG_TRY_SCHEMA; /* undefined_table, undefined_column */
        return PG_TRY_FAILED;
    }
    if (!PQgetisnull(r, 0, 0)) {
        *version = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        return *version > 0 ? PG_TRY_GRANTED : PG_TRY_FAILED;
    }
    if (strcmp(PQgetvalue(r, 0, 1), "0") == 0)
        return PG_TRY_NO_ROW;
    *left_ms = PQgetisnull(r, 0, 2) ? -1 : strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    if (*left_ms < -1)
        *left_ms = 0;
    return PG_TRY_TAKEN;
}

/* ---- steps ------------------------------------------------------------------ */

enum pg_phase { PJ_LISTEN, PJ_TRY, PJ_WAIT, PJ_RELEASE, PJ_DONE };

struct pg_job;

/* One event loop's connections, shared by the sessions whose steps run on
 * it (its thread only, but for refs and next). */
struct pg_loop {
    struct pg_state *st;
    struct pg_loop *next; /* st->loops (under st->mu) */
    int refs;             /* sessions on it (under st->mu) */
    struct event_base *base;
    struct apg *aconn;    /* the queries */
    struct apg *listener; /* LISTEN PG_CHANNEL */
    int heard;            /* the listener LISTENed (or lost it, or was waited for) */
    struct pg_job *jobs;  /* acquires going on, for the notifications */
    int closing;
};

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
    lock_side side;   /* an acquire's, or the released hold's: its statements */
    int reads;        /* a plain lock that reads a read-write lock (pg_sql_reading) */
    char *readers;    /* a write side's readers' prefix (pg_sql_over), NULL: none */
    char nreaders[12]; /* and their count */
    char intent[16];  /* a write attempt's intent lease, ms (pg_sql.h) */
    uint64_t granted; /* the version an acquire got */
    int64_t sent_us;  /* when the last attempt left: the lease counts from it */
    int64_t deadline_us;
    int release; /* a release, not an acquire */
    int contended, inserted;
    int remade;   /* an attempt found a table or a column missing: made again */
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
    free(j->readers);
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

/* The statements of j's attempts and of its hold. */
static const struct pg_sql *job_sql(const struct pg_job *j)
{
    return j->reads ? pg_sql_reading() : j->readers ? pg_sql_over() : pg_sql_of(j->side);
}

/* Sends sql's owner-checked let_go of key's row held by token (and a
 * writer's intent; readers, n: its readers' marks), unwaited, on the loop's
 * connection (nothing when NULL, or closing). 1 when sent. */
static int let_go(struct pg_loop *loop, const struct pg_sql *sql, const char *key,
                  const char *token, const char *readers, const char *n)
{
    if (!loop || loop->closing)
        return 0;
    const char *params[] = {key, token, readers, n};
    return apg_query(loop->aconn, ignore, NULL, sql->let_go, 2 + 2 * sql->segs, params) ==
           APG_OK;
}

static int job_let_go(struct pg_job *j)
{
    return let_go(j->loop, job_sql(j), j->key, j->token, j->readers, j->nreaders);
}

/* The table flag of side's table. */
static _Atomic int *table_ready(struct pg_state *st, lock_side side)
{
    return side == LOCK_EXCLUSIVE ? &st->table_ready : &st->rw_table_ready;
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
    /* a grant nobody takes, and a writer's intent once it stops waiting */
    if (!release && j->token[0] &&
        ((j->cancelled && res == LOCK_ACQUIRED) ||
         (j->side == LOCK_WRITE && res != LOCK_ACQUIRED)))
        job_let_go(j);
}

static void on_table(void *arg, apg_outcome res, PGresult *r)
{
    _Atomic int *ready = arg;
    if (res == APG_RESULT && PQresultStatus(r) == PGRES_COMMAND_OK)
        atomic_store(ready, 1);
}

static void on_try(void *arg, apg_outcome res, PGresult *r);

/* How long a waiting writer's intent lives (pg_sql.h): a lease, or its wait
 * left and 100 ms when that is shorter; each attempt renews it, and a
 * writer asleep wakes for the next one at half of it (sleep_job). */
static int64_t intent_ms(const struct pg_job *j, int64_t now)
{
    int64_t left_ms = (j->deadline_us - now) / 1000;
    if (left_ms <= 0)
        return 0;
    int64_t ttl = j->loop->st->ttl_ms;
    return left_ms + 100 < ttl ? left_ms + 100 : ttl;
}

/* One attempt: the conditional UPDATE of the side's table (behind the
 * table's and the row's making when needed). */
static void attempt(struct pg_job *j)
{
    struct pg_loop *lp = j->loop;
    struct pg_state *st = lp->st;
    const struct pg_sql *sql = job_sql(j);
    j->phase = PJ_TRY;
    j->notified = 0;
    _Atomic int *ready = table_ready(st, j->side);
    if (!atomic_load(ready))
        apg_query(lp->aconn, on_table, ready, sql->table, 0, NULL);
    if (sql->segs && !atomic_load(&st->table_ready)) /* the readers' table too */
        apg_query(lp->aconn, on_table, &st->table_ready, pg_sql_of(LOCK_EXCLUSIVE)->table,
                  0, NULL);
    j->sent_us = clock_now_us();
    snprintf(j->intent, sizeof(j->intent), "%lld", (long long)intent_ms(j, j->sent_us));
    const char *params[] = {j->key,    j->token,   st->ttl_text,
                            j->intent, j->readers, j->nreaders};
    if (j->inserted == 1) {
        const char *row[] = {j->key, j->readers, j->nreaders};
        apg_query(lp->aconn, ignore, NULL, sql->row, 1 + 2 * sql->segs, row);
        j->inserted = 2;
    }
    j->refs++;
    if (apg_query(lp->aconn, on_try, j, sql->acquire, sql->nparams, params) != APG_OK) {
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
    int64_t intent_us = intent_ms(j, now) * 1000;
    if (j->side == LOCK_WRITE && until > now + intent_us / 2) /* renews its intent */
        until = now + intent_us / 2;
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
    struct pg_state *st = j->loop->st;
    enum pg_try t = res == APG_RESULT ? try_read(r, &version, &left_ms) : PG_TRY_FAILED;
    if (t == PG_TRY_SCHEMA) { /* both tables made again (each statement is idempotent) */
        atomic_store(&st->table_ready, 0);
        atomic_store(&st->rw_table_ready, 0);
    }
    if (j->phase != PJ_TRY) { /* over meanwhile (given up): nobody takes it */
        if (t == PG_TRY_GRANTED || res == APG_LOST || j->side == LOCK_WRITE)
            job_let_go(j);
    } else if (t == PG_TRY_GRANTED) {
        j->granted = version;
        finish(j, LOCK_ACQUIRED);
    } else if (res == APG_LOST) { /* it may have taken the row: let go */
        finish(j, LOCK_ERROR);
        job_let_go(j);
    } else if (t == PG_TRY_NO_ROW && !j->inserted) {
        j->inserted = 1;
        attempt(j);
    } else if (t == PG_TRY_SCHEMA && !j->remade) { /* once more, behind the tables */
        j->remade = 1;
        if (j->readers)
            j->inserted = 1; /* and the rows, in tables made anew */
        attempt(j);
    } else if (t != PG_TRY_TAKEN) {
        finish(j, LOCK_ERROR);
    } else {
        j->contended = 1;
        if (clock_now_us() >= j->deadline_us) {
            finish(j, LOCK_BUSY);
        } else if (j->notified) { /* released after our snapshot, maybe */
            lock_count_wakeup(st->counters);
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

/* key is one of the readers a write side j waits for: "<prefix><i>". */
static int reader_of(const struct pg_job *j, const char *key)
{
    if (!j->readers)
        return 0;
    size_t n = strlen(j->readers);
    if (strncmp(key, j->readers, n) != 0 || !key[n])
        return 0;
    char *end;
    long i = strtol(key + n, &end, 10);
    return !*end && i >= 0 && i < atol(j->nreaders);
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
        if (key && strcmp(j->key, key) != 0 && !reader_of(j, key))
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

/* A release of g that needs no statement, or whose statement is sent
 * unwaited (with send): a re-entered grant, a lost one, one never sent. */
static lock_status release_in_memory(struct pg_session *s, const char *key,
                                     struct lock_grant *g, int send)
{
    struct pg_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    int alive = pg_hold_alive(s->st, h);
    if (pg_hold_leave(h, g->side) > 0)
        return alive ? LOCK_RELEASED : LOCK_NOT_HELD;
    lock_status res = LOCK_NOT_HELD;
    if (alive && send &&
        let_go(s->loop, pg_hold_sql(h), h->key, h->token, h->readers, h->nreaders))
        res = LOCK_RELEASED;
    pg_hold_free(h); /* else its lease runs out, not renewed any more */
    return res;
}

/* ---- the caller's side --------------------------------------------------- */

static void pg_try_cmd(void *session, const char *key, struct lock_step *st)
{
    if (pg_hold_reentered(session, key, st->side))
        st->phase = PHASE_REENTER; /* decided at once, in try_done */
    else
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

static void pg_step_start(void *session, const char *key, struct lock_step *st,
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
    j->side = j->release ? ((struct pg_hold *)st->g->holder)->side : st->side;
    if (!j->release && st->side == LOCK_EXCLUSIVE)
        j->reads = st->rw && !st->rw_held; /* else held: the writer waits for it anyway */
    if (!j->release && st->side == LOCK_WRITE && st->readers) {
        j->readers = xstrdup(st->readers);
        snprintf(j->nreaders, sizeof(j->nreaders), "%s", st->nreaders);
        j->inserted = 1; /* the readers' rows first: a mark needs its row */
    }
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
        const char *params[] = {j->key, j->token, j->version, h->readers, h->nreaders};
        j->refs++;
        const struct pg_sql *sql = pg_hold_sql(h);
        if (apg_query(j->loop->aconn, released, j, sql->release, 3 + 2 * sql->segs,
                      params) != APG_OK) {
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

static lock_status pg_try_done(void *session, const char *key, struct lock_step *st,
                               struct lock_grant *g)
{
    struct pg_session *s = session;
    struct pg_job *j = st->job;
    if (!j) { /* a re-entry (or nothing started) */
        struct pg_hold *h =
            st->phase == PHASE_REENTER ? pg_hold_reentered(s, key, st->side) : NULL;
        if (!h)
            return LOCK_ERROR;
        pg_hold_enter(h, st->side);
        pg_grant_fill(s->st, h, st->side, 0, g);
        return LOCK_ACQUIRED;
    }
    st->job = NULL;
    int finished = j->finished;
    lock_status res = take(j);
    if (finished && res == LOCK_ACQUIRED) {
        struct pg_hold *h =
            pg_hold_new(s, key, st->side, j->token, j->granted, j->sent_us);
        if (j->readers)
            pg_hold_readers(h, j->readers, j->nreaders);
        pg_grant_fill(s->st, h, st->side, j->contended, g);
    }
    st->contended |= j->contended;
    job_put(j);
    return res;
}

static void pg_step_cancel(void *session, struct lock_step *st)
{
    (void)session;
    struct pg_job *j = st->job;
    st->job = NULL;
    int granted =
        j->finished && j->res == LOCK_ACQUIRED && j->phase == PJ_DONE && j->granted > 0;
    take(j); /* an answer still to come is let go when it grants */
    if (granted)
        job_let_go(j);
    job_put(j);
}

static void pg_release_cmd(void *session, const char *key, struct lock_grant *g,
                           struct lock_step *st)
{
    struct pg_session *s = session;
    struct pg_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0 || pg_hold_grants(h) > 1 ||
        !pg_hold_alive(s->st, h)) {
        st->phase = PHASE_MEMORY; /* nothing to send: release_done decides */
        return;
    }
    st->async = 1;
    st->phase = PHASE_RELEASE;
    st->after = 1; /* the UPDATE goes once the commit answered */
}

static lock_status pg_release_done(void *session, const char *key, struct lock_grant *g,
                                   struct lock_step *st)
{
    struct pg_session *s = session;
    struct pg_job *j = st ? st->job : NULL;
    if (!j || !j->release) { /* never sent, or nothing to send: let go unwaited */
        if (j)
            pg_step_cancel(session, st);
        return release_in_memory(s, key, g, 1);
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

/* s leaves its loop; the last session on it closes the loop's connections
 * (on its thread, or once it stopped). */
static void loop_leave(struct pg_session *s)
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

/* ---- the backend --------------------------------------------------------- */

static void *pg_create(const struct lock_config *cfg, struct lock_counters *counters,
                       char *err, size_t errlen)
{
    if (!cfg->postgres || !*cfg->postgres) {
        snprintf(err, errlen, "pg needs the database (--postgres URL)");
        return NULL;
    }
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(cfg->postgres, &why);
    if (!opts) {
        snprintf(err, errlen, "pg: bad --postgres: %s", why ? why : "out of memory");
        PQfreemem(why);
        return NULL;
    }
    PQconninfoFree(opts);
    struct pg_state *st = xcalloc(1, sizeof(*st));
    st->conninfo = xstrdup(cfg->postgres);
    st->ttl_ms = cfg->ttl_ms;
    st->max_lease_ms = cfg->max_lease_ms > cfg->ttl_ms ? cfg->max_lease_ms : cfg->ttl_ms;
    st->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 1000;
    snprintf(st->ttl_text, sizeof(st->ttl_text), "%d", cfg->ttl_ms);
    st->counters = counters;
    pthread_mutex_init(&st->mu, NULL);
    return st;
}

static void pg_destroy(void *state)
{
    struct pg_state *st = state;
    pthread_mutex_destroy(&st->mu);
    free(st->conninfo);
    free(st);
}

static void *pg_session_new(void *state, struct rconn *data)
{
    (void)data;
    struct pg_session *s = xcalloc(1, sizeof(*s));
    s->st = state;
    return s;
}

/* Holds not released are left to their leases (no longer renewed). */
static void pg_session_free(void *session)
{
    struct pg_session *s = session;
    loop_leave(s);
    while (s->holds)
        pg_hold_free(s->holds);
    free(s);
}

static int64_t pg_valid_until(void *session, const struct lock_grant *g)
{
    struct pg_session *s = session;
    const struct pg_hold *h = g->holder;
    return h ? pg_hold_valid_until(s->st, h) : g->valid_until_us;
}

static void pg_attach(void *state, struct event_base *base)
{
    pg_watchdog_attach(state, base);
}

static void pg_detach(void *state)
{
    pg_watchdog_detach(state);
}

const struct lock_backend lock_backend_pg = {
    .name = "pg",
    .fenced = 1,
    .fence_external = 1, /* the row's version */
    .create = pg_create,
    .destroy = pg_destroy,
    .attach = pg_attach,
    .detach = pg_detach,
    .session_new = pg_session_new,
    .session_free = pg_session_free,
    .valid_until = pg_valid_until,
    /* steps done on the caller's loop */
    .try_cmd = pg_try_cmd,
    .step_answer = lock_answer_nothing,
    .try_done = pg_try_done,
    .release_cmd = pg_release_cmd,
    .release_done = pg_release_done,
    .step_start = pg_step_start,
    .step_cancel = pg_step_cancel,
    .fences = 1, /* the version */
    .rw = 1,     /* rows of seckill_rwlocks (pg_sql.c) */
};
