/* redis_watchdog: renews the leases of the redis lock (see redis_watchdog.h). */
#include "redis_watchdog.h"

#include "clock.h"
#include "lock_impl.h"
#include "xalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define RENEW_BATCH 64

/* KEYS, ARGV and replies are described at the top of the file. */
extern const struct rscript_source lua_lock_redis_renew;
static struct rscript renew_script = /* lock/lua/redis_renew.lua */
    RSCRIPT_INIT("redis_renew", lua_lock_redis_renew);

struct redis_watchdog {
    int ttl_ms;
    int max_lease_ms;
    struct lock_counters *counters;

    pthread_mutex_t mu;
    pthread_cond_t changed; /* a lease added, or stop */
    struct lease *leases;
    int started, stop;
    pthread_t thread;
    struct rconn *conn; /* the watchdog's own connection */
};

static int64_t renew_period_us(const struct redis_watchdog *wd)
{
    return (int64_t)wd->ttl_ms * 1000 / 3;
}

struct redis_watchdog *redis_watchdog_new(int ttl_ms, int max_lease_ms,
                                          struct lock_counters *counters)
{
    struct redis_watchdog *wd = xcalloc(1, sizeof(*wd));
    wd->ttl_ms = ttl_ms;
    wd->max_lease_ms = max_lease_ms > ttl_ms ? max_lease_ms : ttl_ms;
    wd->counters = counters;
    clock_cond_init(&wd->changed);
    pthread_mutex_init(&wd->mu, NULL);
    return wd;
}

void redis_watchdog_free(struct redis_watchdog *wd)
{
    if (!wd)
        return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->changed);
    int started = wd->started;
    pthread_mutex_unlock(&wd->mu);
    if (started)
        pthread_join(wd->thread, NULL);
    while (wd->leases) { /* held by sessions freed without releasing */
        struct lease *l = wd->leases;
        wd->leases = l->next;
        free(l);
    }
    rconn_free(wd->conn);
    pthread_mutex_destroy(&wd->mu);
    pthread_cond_destroy(&wd->changed);
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

/* Sends one batch of due renewals; called with wd->mu held, drops it while on
 * the network. */
static void renew_due(struct redis_watchdog *wd, int64_t now)
{
    struct lease *batch[RENEW_BATCH];
    char lease_ms[RENEW_BATCH][16];
    int n = 0;
    for (struct lease *l = wd->leases; l && n < RENEW_BATCH; l = l->next) {
        if (l->renew_at_us > now || l->in_flight)
            continue;
        int64_t ms = (l->max_until_us - now) / 1000;
        if (ms > wd->ttl_ms)
            ms = wd->ttl_ms;
        if (ms <= 0) {
            l->renew_at_us = INT64_MAX; /* max lease reached: let it run out */
            continue;
        }
        snprintf(lease_ms[n], sizeof(lease_ms[n]), "%lld", (long long)ms);
        l->in_flight = 1;
        batch[n++] = l;
    }
    if (n == 0)
        return;
    pthread_mutex_unlock(&wd->mu);
    /* key and owner never change while the lease exists, and in_flight keeps
     * it alive, so they are read without the mutex. */
    struct rpipe p = {0};
    const char *argv[RENEW_BATCH][3];
    struct rcmd renew = {.script = &renew_script, .nkeys = 1, .argc = 3};
    int ok = rconn_prepare(wd->conn, &renew) == RCONN_OK &&
             rpipe_begin(&p, wd->conn) == RCONN_OK;
    for (int i = 0; ok && i < n; i++) {
        argv[i][0] = batch[i]->key;
        argv[i][1] = batch[i]->owner;
        argv[i][2] = lease_ms[i];
        renew.argv = argv[i];
        ok = rpipe_append(&p, &renew) == RCONN_OK;
    }
    long long result[RENEW_BATCH];
    int noscript = 0;
    for (int i = 0; i < n; i++) {
        redisReply *r = ok ? rpipe_collect(&p) : NULL;
        result[i] = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        if (rconn_is_noscript(r))
            noscript = 1;
        if (r)
            freeReplyObject(r);
    }
    rpipe_end(&p);
    if (noscript) {
        /* Redis lost its script cache: the next round's EVAL fallback reloads it. */
        redisReply *r = rconn_eval(wd->conn, &renew_script, 1, 2, argv[0], NULL);
        if (r)
            freeReplyObject(r);
    }
    pthread_mutex_lock(&wd->mu);
    for (int i = 0; i < n; i++) {
        struct lease *l = batch[i];
        l->in_flight = 0;
        if (l->orphan) {
            free(l);
            continue;
        }
        if (result[i] == 1) {
            int64_t until = now + atoll(lease_ms[i]) * 1000;
            if (until > l->valid_until_us)
                l->valid_until_us = until;
            l->renew_at_us = now + renew_period_us(wd);
            lock_count_renewal(wd->counters);
        } else if (result[i] == 0) {
            l->lost = 1;
            l->valid_until_us = 0;
            l->renew_at_us = INT64_MAX;
            lock_count_lost(wd->counters);
        } else {
            /* Redis unreachable: try again soon, while the lease may still live. */
            l->renew_at_us = now + renew_period_us(wd) / 4;
        }
    }
}

static void *watchdog_main(void *arg)
{
    struct redis_watchdog *wd = arg;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        int64_t now = clock_now_us();
        int64_t next = INT64_MAX;
        for (struct lease *l = wd->leases; l; l = l->next)
            if (!l->in_flight && l->renew_at_us < next)
                next = l->renew_at_us;
        if (next <= now) {
            renew_due(wd, now);
            continue;
        }
        if (next == INT64_MAX) {
            pthread_cond_wait(&wd->changed, &wd->mu);
        } else {
            clock_cond_wait_until(&wd->changed, &wd->mu, next);
        }
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

void redis_watchdog_add(struct redis_watchdog *wd, struct lease *l, int64_t start,
                        struct rconn *data)
{
    l->valid_until_us = start + (int64_t)wd->ttl_ms * 1000;
    l->max_until_us = start + (int64_t)wd->max_lease_ms * 1000;
    l->renew_at_us =
        l->max_until_us > l->valid_until_us ? start + renew_period_us(wd) : INT64_MAX;
    pthread_mutex_lock(&wd->mu);
    if (!wd->started) {
        wd->conn = rconn_clone(data);
        if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0)
            abort();
        wd->started = 1;
    }
    l->next = wd->leases;
    if (l->next)
        l->next->prev = l;
    wd->leases = l;
    if (l->renew_at_us != INT64_MAX)
        pthread_cond_signal(&wd->changed);
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
