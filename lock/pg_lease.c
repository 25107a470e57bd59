/* pg_lease: the leases of the pg lock (see pg_lease.h). */
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

/* ---- holds ------------------------------------------------------------- */

struct pg_hold *pg_hold_find(struct pg_session *s, const char *key, lock_side side)
{
    for (struct pg_hold *h = s->holds; h; h = h->snext)
        if (!h->detached && h->side == side && strcmp(h->key, key) == 0)
            return h;
    return NULL;
}

struct pg_hold *pg_hold_reentered(struct pg_session *s, const char *key, lock_side side)
{
    struct pg_hold *w = side == LOCK_READ ? pg_hold_find(s, key, LOCK_WRITE) : NULL;
    if (w && pg_hold_alive(s->st, w))
        return w;
    struct pg_hold *h = pg_hold_find(s, key, side);
    if (h && pg_hold_alive(s->st, h))
        return h;
    if (h)
        h->detached = 1;
    return NULL;
}

void pg_hold_enter(struct pg_hold *h, lock_side side)
{
    if (side == LOCK_READ && h->side == LOCK_WRITE)
        h->reads++;
    else
        h->depth++;
}

int pg_hold_leave(struct pg_hold *h, lock_side side)
{
    if (side == LOCK_READ && h->side == LOCK_WRITE)
        h->reads--;
    else
        h->depth--;
    return pg_hold_grants(h);
}

int pg_hold_grants(const struct pg_hold *h)
{
    return h->depth + h->reads;
}

struct pg_hold *pg_hold_new(struct pg_session *s, const char *key, lock_side side,
                            const char *token, uint64_t version, int64_t sent_us)
{
    struct pg_state *st = s->st;
    struct pg_hold *h = xcalloc(1, sizeof(*h));
    h->key = xstrdup(key);
    h->side = side;
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

void pg_hold_readers(struct pg_hold *h, const char *prefix, const char *n)
{
    h->readers = xstrdup(prefix);
    snprintf(h->nreaders, sizeof(h->nreaders), "%s", n);
}

const struct pg_sql *pg_hold_sql(const struct pg_hold *h)
{
    return h->readers ? pg_sql_over() : pg_sql_of(h->side);
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
    free(h->readers);
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

void pg_grant_fill(struct pg_state *st, struct pg_hold *h, lock_side side, int contended,
                   struct lock_grant *g)
{
    memcpy(g->token, h->token, sizeof(g->token));
    g->fence_owner[0] = '\0'; /* unique by itself in its namespace: "<n>@pg" */
    if (side == LOCK_READ) {  /* a reader writes nothing: no token */
        g->fence = 0;
        g->fence_ns[0] = '\0';
    } else {
        g->fence = h->version;
        snprintf(g->fence_ns, sizeof(g->fence_ns), "pg");
    }
    g->acquired_us = clock_now_us();
    pthread_mutex_lock(&st->mu);
    g->valid_until_us = h->valid_until_us;
    pthread_mutex_unlock(&st->mu);
    g->contended = contended;
    g->holder = h;
}

int64_t pg_hold_valid_until(struct pg_state *st, const struct pg_hold *h)
{
    pthread_mutex_lock(&st->mu);
    int64_t until = h->valid_until_us;
    pthread_mutex_unlock(&st->mu);
    return until;
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
        char key[256], token[33], version[24], readers[256], nreaders[12];
        const struct pg_sql *sql;
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
            strlen(h->key) >= sizeof(due[n].key) ||
            (h->readers && strlen(h->readers) >= sizeof(due[n].readers)))
            continue;
        h->renewing = 1;
        h->renewed_us = now;
        snprintf(due[n].key, sizeof(due[n].key), "%s", h->key);
        snprintf(due[n].token, sizeof(due[n].token), "%s", h->token);
        snprintf(due[n].version, sizeof(due[n].version), "%" PRIu64, h->version);
        due[n].sql = pg_hold_sql(h);
        snprintf(due[n].readers, sizeof(due[n].readers), "%s",
                 h->readers ? h->readers : "");
        snprintf(due[n].nreaders, sizeof(due[n].nreaders), "%s", h->nreaders);
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
        const char *params[] = {due[i].key,   due[i].token,   due[i].version,
                                st->ttl_text, due[i].readers, due[i].nreaders};
        /* an owner- and version-checked extension of a lease not run out
         * (and of its readers' marks): a row answered, renewed; none, lost */
        const struct pg_sql *sql = due[i].sql;
        if (apg_query(st->wd_conn, on_renewed, rns[i], sql->renew, 4 + 2 * sql->segs,
                      params) != APG_OK)
            on_renewed(rns[i], APG_NOT_SENT, NULL); /* again at the next tick */
    }
}

void pg_watchdog_attach(struct pg_state *st, struct event_base *base)
{
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

void pg_watchdog_detach(struct pg_state *st)
{
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
