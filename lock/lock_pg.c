/* pg: the database lock. One row per lock key in a PostgreSQL table,
 *
 *   seckill_locks (key text PRIMARY KEY, owner text, expires_at timestamptz,
 *                  version bigint NOT NULL DEFAULT 0)
 *
 * made if missing (at the start, and again whenever a statement finds it
 * gone); a key's row is made on demand by the first acquire that finds none.
 *
 * Acquire: one conditional UPDATE, which takes the row when it is free or its
 * lease ran out, on the database's clock, and bumps its version:
 *   UPDATE ... SET owner = $me, expires_at = now() + ttl, version = version + 1
 *   WHERE key = $k AND (owner IS NULL OR expires_at < now() OR owner = $me)
 *   RETURNING version
 * The version is the fencing token: strictly increasing per key, unique by
 * itself ("<n>", lock_fence_text), from outside the data Redis (as zk's czxid:
 * fence_external, the holder's first step raises the segment's fence to it,
 * fence_read.lua). The owner ($me) is a fresh random token per acquire, so
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
 * Two forms: blocking (here: a libpq connection per session, LISTENing; an
 * acquire that finds the row taken waits on that socket for the key's
 * notification, within the wait), and steps for an event loop (pg_steps.c:
 * asynchronous connections on the loop's own base, pg/apg.h). Every query is
 * bounded by lock_config.timeout_ms; a database that is down or hung costs an
 * acquire LOCK_ERROR, not a wait. */
#include "pg_impl.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apg.h"
#include "clock.h"
#include "xalloc.h"

const char pg_sql_table[] =
    "CREATE TABLE IF NOT EXISTS seckill_locks (key text PRIMARY KEY, owner text, "
    "expires_at timestamptz, version bigint NOT NULL DEFAULT 0)";
const char pg_sql_insert[] =
    "INSERT INTO seckill_locks (key) VALUES ($1) ON CONFLICT DO NOTHING";
/* The conditional UPDATE, and what the row was in the statement's snapshot:
 * the version granted (NULL: not granted), whether the row exists, the
 * holder's lease left in ms (NULL: none seen). */
const char pg_sql_acquire[] =
    "WITH prev AS (SELECT owner, expires_at FROM seckill_locks WHERE key = $1), "
    "got AS (UPDATE seckill_locks SET owner = $2, "
    "expires_at = now() + $3::int * interval '1 millisecond', version = version + 1 "
    "WHERE key = $1 AND (owner IS NULL OR expires_at < now() OR owner = $2) "
    "RETURNING version) "
    "SELECT (SELECT version FROM got), (SELECT count(*) FROM prev), "
    "(SELECT ceil(extract(epoch FROM expires_at - now()) * 1000)::bigint FROM prev "
    "WHERE owner IS NOT NULL)";
const char pg_sql_release[] = "UPDATE seckill_locks SET owner = NULL, expires_at = NULL "
                              "WHERE key = $1 AND owner = $2 AND version = $3::bigint "
                              "RETURNING pg_notify('" PG_CHANNEL "', key)";
const char pg_sql_let_go[] = "UPDATE seckill_locks SET owner = NULL, expires_at = NULL "
                             "WHERE key = $1 AND owner = $2 "
                             "RETURNING pg_notify('" PG_CHANNEL "', key)";
const char pg_sql_renew[] =
    "UPDATE seckill_locks SET expires_at = now() + $4::int * interval '1 millisecond' "
    "WHERE key = $1 AND owner = $2 AND version = $3::bigint AND expires_at >= now() "
    "RETURNING version";

enum pg_try pg_try_read(struct pg_state *st, const PGresult *r, uint64_t *version,
                        long long *left_ms)
{
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) != 3) {
        const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (code && strcmp(code, "42P01") == 0) /* undefined_table */
            atomic_store(&st->table_ready, 0);
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

/* ---- holds ------------------------------------------------------------- */

struct pg_hold *pg_hold_find(struct pg_session *s, const char *key)
{
    for (struct pg_hold *h = s->holds; h; h = h->snext)
        if (!h->detached && strcmp(h->key, key) == 0)
            return h;
    return NULL;
}

struct pg_hold *pg_hold_new(struct pg_session *s, const char *key, const char *token,
                            uint64_t version, int64_t sent_us)
{
    struct pg_state *st = s->st;
    struct pg_hold *h = xcalloc(1, sizeof(*h));
    h->key = xstrdup(key);
    snprintf(h->token, sizeof(h->token), "%s", token);
    h->version = version;
    h->depth = 1;
    h->owner = s;
    h->snext = s->holds;
    s->holds = h;
    h->acquired_us = h->renewed_us = sent_us;
    h->valid_until_us = sent_us + (int64_t)st->ttl_ms * 1000;
    pthread_mutex_lock(&st->mu);
    h->next = st->holds;
    st->holds = h;
    pthread_mutex_unlock(&st->mu);
    return h;
}

void pg_hold_free(struct pg_hold *h)
{
    struct pg_state *st = h->owner->st;
    for (struct pg_hold **p = &h->owner->holds; *p; p = &(*p)->snext) {
        if (*p == h) {
            *p = h->snext;
            break;
        }
    }
    pthread_mutex_lock(&st->mu);
    for (struct pg_hold **p = &st->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&st->mu);
    free(h->key);
    free(h);
}

/* With st->mu held: a lease that ran out while held, with no renewal or
 * release on its way to say more, is lost from now on; 1 the first time, to
 * be counted (once, by whoever finds it first: the tick, or a release). */
static int hold_ran_out(struct pg_hold *h, int64_t now)
{
    if (h->renewing || h->releasing || h->valid_until_us <= 0 || h->valid_until_us > now)
        return 0;
    h->valid_until_us = 0;
    return 1;
}

int pg_hold_alive(struct pg_state *st, struct pg_hold *h)
{
    int64_t now = clock_now_us();
    pthread_mutex_lock(&st->mu);
    int lost = hold_ran_out(h, now);
    int alive = h->valid_until_us > now;
    pthread_mutex_unlock(&st->mu);
    if (lost)
        lock_count_lost(st->counters);
    return alive;
}

void pg_hold_releasing(struct pg_state *st, struct pg_hold *h)
{
    pthread_mutex_lock(&st->mu);
    h->releasing = 1;
    pthread_mutex_unlock(&st->mu);
}

void pg_grant_fill(struct pg_state *st, struct pg_hold *h, int contended,
                   struct lock_grant *g)
{
    memcpy(g->token, h->token, sizeof(g->token));
    g->fence = h->version;
    g->fence_owner[0] = '\0'; /* unique by itself: "<n>" */
    g->acquired_us = clock_now_us();
    pthread_mutex_lock(&st->mu);
    g->valid_until_us = h->valid_until_us;
    pthread_mutex_unlock(&st->mu);
    g->contended = contended;
    g->holder = h;
}

lock_status pg_release_in_memory(struct pg_session *s, const char *key,
                                 struct lock_grant *g, int let_go)
{
    struct pg_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    int alive = pg_hold_alive(s->st, h);
    if (--h->depth > 0)
        return alive ? LOCK_RELEASED : LOCK_NOT_HELD;
    lock_status res = LOCK_NOT_HELD;
    if (alive && let_go && pg_steps_let_go(s->loop, h->key, h->token))
        res = LOCK_RELEASED;
    pg_hold_free(h); /* else its lease runs out, not renewed any more */
    return res;
}

/* ---- the watchdog -------------------------------------------------------- */

/* One renewal on its way: its hold is found again by its token. */
struct pg_renewal {
    struct pg_state *st;
    char token[33];
    int64_t sent_us;
};

static struct pg_hold *hold_by_token(struct pg_state *st, const char *token)
{
    for (struct pg_hold *h = st->holds; h; h = h->next)
        if (strcmp(h->token, token) == 0)
            return h;
    return NULL;
}

static void on_renewed(void *arg, apg_outcome res, PGresult *r)
{
    struct pg_renewal *rn = arg;
    struct pg_state *st = rn->st;
    int renewed = 0, lost = 0;
    pthread_mutex_lock(&st->mu);
    struct pg_hold *h = hold_by_token(st, rn->token);
    if (h) {
        h->renewing = 0;
        if (res == APG_RESULT && PQresultStatus(r) == PGRES_TUPLES_OK) {
            if (PQntuples(r) == 1) {
                int64_t until = rn->sent_us + (int64_t)st->ttl_ms * 1000;
                if (h->valid_until_us > 0 && until > h->valid_until_us)
                    h->valid_until_us = until;
                renewed = 1;
            } else if (!h->releasing && h->valid_until_us > 0) {
                h->valid_until_us = 0; /* taken by another, or run out */
                lost = 1;
            }
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (renewed)
        lock_count_renewal(st->counters);
    if (lost)
        lock_count_lost(st->counters);
    free(rn);
}

#define PG_RENEW_MAX 64 /* renewals sent per tick at most */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct pg_state *st = arg;
    struct {
        char key[256], token[33], version[24];
    } due[PG_RENEW_MAX];
    struct pg_renewal *rns[PG_RENEW_MAX];
    int n = 0, lost = 0;
    int64_t now = clock_now_us(), period = (int64_t)st->ttl_ms * 1000 / 3;
    pthread_mutex_lock(&st->mu);
    for (struct pg_hold *h = st->holds; h && n < PG_RENEW_MAX; h = h->next) {
        lost += hold_ran_out(h, now); /* its process paused, or renewals unanswered */
        if (h->renewing || h->releasing || h->valid_until_us <= now ||
            now - h->renewed_us < period ||
            now - h->acquired_us >= (int64_t)st->max_lease_ms * 1000 ||
            strlen(h->key) >= sizeof(due[n].key))
            continue;
        h->renewing = 1;
        h->renewed_us = now;
        snprintf(due[n].key, sizeof(due[n].key), "%s", h->key);
        snprintf(due[n].token, sizeof(due[n].token), "%s", h->token);
        snprintf(due[n].version, sizeof(due[n].version), "%" PRIu64, h->version);
        rns[n] = xcalloc(1, sizeof(*rns[n]));
        rns[n]->st = st;
        rns[n]->sent_us = now;
        memcpy(rns[n]->token, h->token, sizeof(h->token));
        n++;
    }
    pthread_mutex_unlock(&st->mu);
    while (lost-- > 0)
        lock_count_lost(st->counters);
    for (int i = 0; i < n; i++) {
        const char *params[] = {due[i].key, due[i].token, due[i].version, st->ttl_text};
        if (apg_query(st->wd_conn, on_renewed, rns[i], pg_sql_renew, 4, params) != APG_OK)
            on_renewed(rns[i], APG_NOT_SENT, NULL); /* again at the next tick */
    }
}

static void pg_attach(void *state, struct event_base *base)
{
    struct pg_state *st = state;
    int64_t every_us = (int64_t)st->ttl_ms * 1000 / 6;
    if (every_us < 5000)
        every_us = 5000;
    int timeout = st->ttl_ms / 3 < st->timeout_ms ? st->ttl_ms / 3 : st->timeout_ms;
    struct apg *conn = apg_new(base, st->conninfo, timeout > 50 ? timeout : 50);
    struct event *tick = event_new(base, -1, EV_PERSIST, on_tick, st);
    pthread_mutex_lock(&st->mu);
    st->wd_conn = conn;
    st->tick = tick;
    pthread_mutex_unlock(&st->mu);
    struct timeval tv = {.tv_sec = every_us / 1000000, .tv_usec = every_us % 1000000};
    evtimer_add(tick, &tv);
}

static void pg_detach(void *state)
{
    struct pg_state *st = state;
    pthread_mutex_lock(&st->mu);
    struct event *tick = st->tick;
    struct apg *conn = st->wd_conn;
    st->tick = NULL;
    st->wd_conn = NULL;
    pthread_mutex_unlock(&st->mu);
    if (tick)
        event_free(tick);
    apg_free(conn); /* its renewals are answered (lost), outside st->mu */
}

/* ---- blocking connections ------------------------------------------------- */

static void conn_drop(struct pg_session *s)
{
    if (s->conn)
        PQfinish(s->conn);
    s->conn = NULL;
}

/* Waits for s->conn's socket to be readable until until_us: 1, or 0 when
 * the time ran out. */
static int readable(struct pg_session *s, int64_t until_us)
{
    for (;;) {
        int64_t left = until_us - clock_now_us();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = PQsocket(s->conn), .events = POLLIN};
        int rc = poll(&p, 1, (int)((left + 999) / 1000));
        if (rc > 0)
            return 1;
        if (rc == 0 || errno != EINTR)
            return 0;
    }
}

/* Runs sql on s->conn, waiting at most until until_us: its first result
 * (caller clears), or NULL with the connection dropped. */
static PGresult *bexec_on(struct pg_session *s, const char *sql, int n,
                          const char *const *params, int64_t until_us)
{
    if (!PQsendQueryParams(s->conn, sql, n, NULL, params, NULL, NULL, 0)) {
        conn_drop(s);
        return NULL;
    }
    PGresult *first = NULL;
    for (;;) {
        while (PQisBusy(s->conn)) {
            if (!readable(s, until_us) || !PQconsumeInput(s->conn)) {
                if (first)
                    PQclear(first);
                conn_drop(s);
                return NULL;
            }
        }
        PGresult *r = PQgetResult(s->conn);
        if (!r)
            break;
        if (first)
            PQclear(r);
        else
            first = r;
    }
    if (!first || PQstatus(s->conn) == CONNECTION_BAD) {
        if (first)
            PQclear(first);
        conn_drop(s);
        return NULL;
    }
    return first;
}

/* A notice ("already exists, skipping") is no error: not written to stderr,
 * outside the log. */
static void quiet(void *arg, const char *message)
{
    (void)arg, (void)message;
}

/* s->conn connected and LISTENing (and the table made, once): 1, or 0. */
static int bconnect(struct pg_session *s, int64_t until_us)
{
    if (s->conn && PQstatus(s->conn) == CONNECTION_OK)
        return 1;
    conn_drop(s);
    struct pg_state *st = s->st;
    char timeout[16];
    snprintf(timeout, sizeof(timeout), "%d", (st->timeout_ms + 999) / 1000 + 1);
    const char *keys[] = {"dbname", "connect_timeout", NULL};
    const char *values[] = {st->conninfo, timeout, NULL};
    s->conn = PQconnectdbParams(keys, values, 1);
    if (!s->conn || PQstatus(s->conn) != CONNECTION_OK) {
        conn_drop(s);
        return 0;
    }
    PQsetNoticeProcessor(s->conn, quiet, NULL);
    PGresult *r = bexec_on(s, "LISTEN " PG_CHANNEL, 0, NULL, until_us);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    if (r)
        PQclear(r);
    if (ok && !atomic_load(&st->table_ready)) {
        r = bexec_on(s, pg_sql_table, 0, NULL, until_us);
        if (r && PQresultStatus(r) == PGRES_COMMAND_OK)
            atomic_store(&st->table_ready, 1);
        if (r)
            PQclear(r);
    }
    if (!ok)
        conn_drop(s);
    return s->conn != NULL;
}

/* sql on the session's blocking connection, connected if need be, bounded by
 * the command timeout: its result (caller clears), or NULL. */
static PGresult *bexec(struct pg_session *s, const char *sql, int n,
                       const char *const *params)
{
    int64_t until = clock_now_us() + (int64_t)s->st->timeout_ms * 1000;
    if (!bconnect(s, until))
        return NULL;
    return bexec_on(s, sql, n, params, until);
}

/* Takes the notifications that came: 1 when one was of key. */
static int notified(struct pg_session *s, const char *key)
{
    int hit = 0;
    PGnotify *n;
    while (s->conn && (n = PQnotifies(s->conn)) != NULL) {
        hit |= strcmp(n->extra, key) == 0;
        PQfreemem(n);
    }
    return hit;
}

/* Sleeps until key is notified (1) or until_us (0; -1: the connection
 * failed). */
static int bwait(struct pg_session *s, const char *key, int64_t until_us)
{
    for (;;) {
        if (!s->conn)
            return -1;
        if (notified(s, key))
            return 1;
        if (!readable(s, until_us))
            return 0;
        if (!PQconsumeInput(s->conn)) {
            conn_drop(s);
            return -1;
        }
    }
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
    /* The table now if the database is there; else by the first acquire. */
    struct pg_session probe = {.st = st};
    bconnect(&probe, clock_now_us() + (int64_t)st->timeout_ms * 1000);
    conn_drop(&probe);
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
    pg_steps_close(s);
    while (s->holds)
        pg_hold_free(s->holds);
    conn_drop(s);
    free(s);
}

static lock_status pg_acquire(void *session, const char *key, int64_t deadline_us,
                              struct lock_grant *g)
{
    struct pg_session *s = session;
    struct pg_state *st = s->st;
    struct pg_hold *h = pg_hold_find(s, key);
    if (h && pg_hold_alive(st, h)) {
        h->depth++;
        pg_grant_fill(st, h, 0, g);
        return LOCK_ACQUIRED;
    }
    if (h) /* lost: its grants release as NOT_HELD; this one is new */
        h->detached = 1;
    char token[33];
    lock_token_new(token);
    int contended = 0, inserted = 0;
    for (;;) {
        notified(s, key); /* what came before this attempt is seen by it */
        int64_t sent = clock_now_us();
        const char *params[] = {key, token, st->ttl_text};
        PGresult *r = bexec(s, pg_sql_acquire, 3, params);
        if (!r)
            return LOCK_ERROR; /* an answer lost: the lease runs out */
        uint64_t version = 0;
        long long left_ms = -1;
        enum pg_try t = pg_try_read(st, r, &version, &left_ms);
        PQclear(r);
        if (t == PG_TRY_GRANTED) {
            pg_grant_fill(st, pg_hold_new(s, key, token, version, sent), contended, g);
            return LOCK_ACQUIRED;
        }
        if (t == PG_TRY_NO_ROW && !inserted++) {
            r = bexec(s, pg_sql_insert, 1, params);
            if (r)
                PQclear(r);
            continue;
        }
        if (t != PG_TRY_TAKEN)
            return LOCK_ERROR;
        contended = 1;
        int64_t now = clock_now_us();
        if (now >= deadline_us)
            return LOCK_BUSY;
        int64_t until = now + (left_ms >= 0 ? left_ms : st->ttl_ms) * 1000 + 1000;
        lock_count_watch_waiter(st->counters, 1);
        int woken = bwait(s, key, until < deadline_us ? until : deadline_us);
        lock_count_watch_waiter(st->counters, -1);
        if (woken == 1)
            lock_count_wakeup(st->counters);
        else if (woken < 0 && clock_now_us() >= deadline_us)
            return LOCK_ERROR;
    }
}

static lock_status pg_release(void *session, const char *key, struct lock_grant *g)
{
    struct pg_session *s = session;
    struct pg_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0 || h->depth > 1 || !pg_hold_alive(s->st, h))
        return pg_release_in_memory(s, key, g, 0);
    char version[24];
    snprintf(version, sizeof(version), "%" PRIu64, h->version);
    const char *params[] = {key, h->token, version};
    pg_hold_releasing(s->st, h);
    PGresult *r = bexec(s, pg_sql_release, 3, params);
    lock_status res = LOCK_ERROR; /* unknown: the lease runs out */
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
        res = PQntuples(r) == 1 ? LOCK_RELEASED : LOCK_NOT_HELD;
    if (r)
        PQclear(r);
    g->holder = NULL;
    pg_hold_free(h);
    return res;
}

static int64_t pg_valid_until(void *session, const struct lock_grant *g)
{
    struct pg_session *s = session;
    const struct pg_hold *h = g->holder;
    if (!h)
        return g->valid_until_us;
    pthread_mutex_lock(&s->st->mu);
    int64_t until = h->valid_until_us;
    pthread_mutex_unlock(&s->st->mu);
    return until;
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
    .acquire = pg_acquire,
    .release = pg_release,
    .valid_until = pg_valid_until,
    /* steps done on the caller's loop (pg_steps.c) */
    .try_cmd = pg_try_cmd,
    .step_answer = lock_answer_nothing,
    .try_done = pg_try_done,
    .release_cmd = pg_release_cmd,
    .release_done = pg_release_done,
    .step_start = pg_step_start,
    .step_cancel = pg_step_cancel,
    .fences = 1, /* the version */
};
