/* redis_watchdog: renews the leases of the redis lock (see redis_watchdog.h). */
#include "redis_watchdog.h"

#include "clock.h"
#include "lock_impl.h"
#include "xalloc.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aconn.h"

#define RENEW_BATCH 64

/* KEYS, ARGV and replies are described at the top of the file. */
extern const struct rscript_source lua_lock_redis_renew;
static struct rscript renew_script = /* lock/lua/redis_renew.lua */
    RSCRIPT_INIT("redis_renew", lua_lock_redis_renew);

struct redis_watchdog {
    int ttl_ms;
    int max_lease_ms;
    char *password;
    struct lock_counters *counters;

    pthread_mutex_t mu; /* the leases, node, tick and armed_us */
    struct lease *leases;
    char host[256]; /* the node renewals go to ("" before the first lease) */
    int port;
    struct event *tick; /* on the attached base; NULL when not attached */
    int64_t armed_us;   /* when tick fires (INT64_MAX: not armed) */
    struct aconn *conn; /* the attached base's thread only */
};

/* One renewal on its way: what to apply its answer to. */
struct renewal {
    struct redis_watchdog *wd;
    struct lease *l;
    int64_t sent_us;
    int64_t lease_ms;
};

static int64_t renew_period_us(const struct redis_watchdog *wd)
{
    return (int64_t)wd->ttl_ms * 1000 / 3;
}

struct redis_watchdog *redis_watchdog_new(int ttl_ms, int max_lease_ms,
                                          const char *password,
                                          struct lock_counters *counters)
{
    struct redis_watchdog *wd = xcalloc(1, sizeof(*wd));
    wd->ttl_ms = ttl_ms;
    wd->max_lease_ms = max_lease_ms > ttl_ms ? max_lease_ms : ttl_ms;
    wd->password = password && *password ? xstrdup(password) : NULL;
    wd->counters = counters;
    wd->armed_us = INT64_MAX;
    pthread_mutex_init(&wd->mu, NULL);
    return wd;
}

/* Arms the tick for `at` (monotonic) unless it fires earlier already. With
 * wd->mu held; any thread. */
static void tick_arm(struct redis_watchdog *wd, int64_t at)
{
    if (!wd->tick || at >= wd->armed_us)
        return;
    int64_t in_us = at - clock_now_us();
    if (in_us < 0)
        in_us = 0;
    struct timeval tv = {.tv_sec = in_us / 1000000, .tv_usec = in_us % 1000000};
    wd->armed_us = at;
    evtimer_add(wd->tick, &tv);
}

static void on_tick(evutil_socket_t fd, short what, void *arg);

void redis_watchdog_attach(struct redis_watchdog *wd, struct event_base *base)
{
    pthread_mutex_lock(&wd->mu);
    if (!wd->tick) {
        wd->tick = evtimer_new(base, on_tick, wd);
        if (!wd->tick)
            abort();
        wd->armed_us = INT64_MAX;
        for (struct lease *l = wd->leases; l; l = l->next)
            if (!l->in_flight)
                tick_arm(wd, l->renew_at_us);
    }
    pthread_mutex_unlock(&wd->mu);
}

void redis_watchdog_detach(struct redis_watchdog *wd)
{
    pthread_mutex_lock(&wd->mu);
    struct event *tick = wd->tick;
    wd->tick = NULL;
    wd->armed_us = INT64_MAX;
    pthread_mutex_unlock(&wd->mu);
    if (tick)
        event_free(tick);
    /* Renewals in flight are answered ACONN_LOST (under wd->mu, taken there). */
    aconn_free(wd->conn);
    wd->conn = NULL;
}

void redis_watchdog_free(struct redis_watchdog *wd)
{
    if (!wd)
        return;
    redis_watchdog_detach(wd);
    while (wd->leases) { /* held by sessions freed without releasing */
        struct lease *l = wd->leases;
        wd->leases = l->next;
        free(l);
    }
    pthread_mutex_destroy(&wd->mu);
    free(wd->password);
    free(wd);
}

static void lease_unlink(struct redis_watchdog *wd, struct lease *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else if (wd->leases == l)
        wd->leases = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

/* Applies a renewal's answer (result: 1 renewed, 0 lost, -1 no answer).
 * With wd->mu held. */
static void renewal_apply(struct renewal *rn, long long result)
{
    struct redis_watchdog *wd = rn->wd;
    struct lease *l = rn->l;
    l->in_flight = 0;
    if (l->orphan) {
        free(l);
        return;
    }
    if (result == 1) {
        int64_t until = rn->sent_us + rn->lease_ms * 1000;
        if (until > l->valid_until_us)
            l->valid_until_us = until;
        l->renew_at_us = rn->sent_us + renew_period_us(wd);
        lock_count_renewal(wd->counters);
    } else if (result == 0) {
        l->lost = 1;
        l->valid_until_us = 0;
        l->renew_at_us = INT64_MAX;
        lock_count_lost(wd->counters);
    } else {
        /* Redis unreachable (or its script cache lost: the next call goes by
         * EVAL): try again soon, while the lease may still live. */
        l->renew_at_us = rn->sent_us + renew_period_us(wd) / 4;
    }
    tick_arm(wd, l->renew_at_us);
}

static void on_renewed(void *arg, aconn_result res, redisReply *r)
{
    struct renewal *rn = arg;
    struct redis_watchdog *wd = rn->wd;
    long long result =
        res == ACONN_REPLY && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    pthread_mutex_lock(&wd->mu);
    renewal_apply(rn, result);
    pthread_mutex_unlock(&wd->mu);
    free(rn);
}

/* Takes up to RENEW_BATCH due leases into batch (in flight from now on) and
 * arms the tick for the next one due. With wd->mu held. */
static int due_take(struct redis_watchdog *wd, int64_t now, struct renewal **batch)
{
    int n = 0;
    int64_t next = INT64_MAX;
    for (struct lease *l = wd->leases; l; l = l->next) {
        if (l->in_flight)
            continue;
        if (l->renew_at_us > now || n == RENEW_BATCH) {
            if (l->renew_at_us < next)
                next = l->renew_at_us;
            continue;
        }
        int64_t ms = (l->max_until_us - now) / 1000;
        if (ms > wd->ttl_ms)
            ms = wd->ttl_ms;
        if (ms <= 0) {
            l->renew_at_us = INT64_MAX; /* max lease reached: let it run out */
            continue;
        }
        l->in_flight = 1;
        struct renewal *rn = xmalloc(sizeof(*rn));
        *rn = (struct renewal){.wd = wd, .l = l, .sent_us = now, .lease_ms = ms};
        batch[n++] = rn;
    }
    wd->armed_us = INT64_MAX;
    tick_arm(wd, next);
    return n;
}

/* The tick, on the attached base's thread: sends the due renewals, which go
 * out in one write (aconn pipelines what one turn of the loop queues). */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct redis_watchdog *wd = arg;
    struct renewal *batch[RENEW_BATCH];
    pthread_mutex_lock(&wd->mu);
    int n = due_take(wd, clock_now_us(), batch);
    if (n > 0 && !wd->conn)
        wd->conn = aconn_new(event_get_base(wd->tick), wd->host, wd->port, wd->password,
                             wd->ttl_ms / 3 > 0 ? wd->ttl_ms / 3 : 1);
    pthread_mutex_unlock(&wd->mu);
    /* key and owner never change while the lease exists, and in_flight keeps
     * it alive, so they are read without the mutex. */
    for (int i = 0; i < n; i++) {
        char lease_ms[24];
        snprintf(lease_ms, sizeof(lease_ms), "%lld", (long long)batch[i]->lease_ms);
        const char *argv[] = {batch[i]->l->key, batch[i]->l->owner, lease_ms};
        if (aconn_eval(wd->conn, on_renewed, batch[i], &renew_script, 1, 3, argv) !=
            RCONN_OK)
            on_renewed(batch[i], ACONN_NOT_SENT, NULL);
    }
}

void redis_watchdog_add(struct redis_watchdog *wd, struct lease *l, int64_t start,
                        struct rconn *data)
{
    l->valid_until_us = start + (int64_t)wd->ttl_ms * 1000;
    l->max_until_us = start + (int64_t)wd->max_lease_ms * 1000;
    l->renew_at_us =
        l->max_until_us > l->valid_until_us ? start + renew_period_us(wd) : INT64_MAX;
    pthread_mutex_lock(&wd->mu);
    if (!wd->host[0]) {
        snprintf(wd->host, sizeof(wd->host), "%s", rconn_host(data));
        wd->port = rconn_port(data);
    }
    l->next = wd->leases;
    if (l->next)
        l->next->prev = l;
    wd->leases = l;
    tick_arm(wd, l->renew_at_us);
    pthread_mutex_unlock(&wd->mu);
}

void redis_watchdog_drop(struct redis_watchdog *wd, struct lease *l)
{
    pthread_mutex_lock(&wd->mu);
    lease_unlink(wd, l);
    int in_flight = l->in_flight;
    if (in_flight)
        l->orphan = 1;
    pthread_mutex_unlock(&wd->mu);
    if (!in_flight)
        free(l);
}

void redis_watchdog_extend(struct redis_watchdog *wd, struct lease *l, int64_t until)
{
    pthread_mutex_lock(&wd->mu);
    if (!l->lost && until > l->valid_until_us)
        l->valid_until_us = until;
    pthread_mutex_unlock(&wd->mu);
}

void redis_watchdog_lose(struct redis_watchdog *wd, struct lease *l)
{
    pthread_mutex_lock(&wd->mu);
    if (!l->lost) {
        l->lost = 1;
        l->valid_until_us = 0;
        l->renew_at_us = INT64_MAX;
        lock_count_lost(wd->counters);
    }
    pthread_mutex_unlock(&wd->mu);
}

int64_t redis_watchdog_valid_until(struct redis_watchdog *wd, const struct lease *l)
{
    pthread_mutex_lock(&wd->mu);
    int64_t until = l->lost ? 0 : l->valid_until_us;
    pthread_mutex_unlock(&wd->mu);
    return until;
}
