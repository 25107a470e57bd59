#include "durability.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "rconn.h"
#include "xalloc.h"

#define DURABILITY_TICK_MS 1000
#define DURABILITY_TIMEOUT_MS 1000

/* What the last reading of the settings found. */
typedef enum {
    DUR_UNREAD = 0,  /* nothing read yet: Redis has not been reachable */
    DUR_DURABLE,     /* AOF with appendfsync always */
    DUR_NOT_DURABLE, /* read, and something else */
    DUR_UNKNOWN,     /* could not be read: CONFIG refused or renamed */
} dur_verdict;

struct svc_durability {
    struct rconn *rc;
    char addr[300];                /* host:port, for the log */
    dur_verdict verdict;           /* the reading thread's only */
    int retry;                     /* the last reading failed on the way: read again */
    unsigned long seen_reconnects; /* rconn_reconnects() before the last reading */
    _Atomic int durable;           /* the gauge */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int stop; /* under mu */
};

/* Copies text into buf for a quoted log value: no '"', '\' or control
 * characters, which would break the one-line key=value format. */
static void log_quote(char *buf, size_t len, const char *text)
{
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < len; p++)
        buf[n++] = *p == '"' || *p == '\\' ? '\'' : (unsigned char)*p < 32 ? ' ' : *p;
    buf[n] = '\0';
}

/* What a crash of Redis can take with it under these settings. */
static const char *loss_detail(const char *appendonly, const char *appendfsync)
{
    if (strcmp(appendonly, "yes") != 0)
        return "without AOF, orders acknowledged since the last RDB snapshot (all of "
               "them when there is none) can be lost if Redis crashes";
    if (strcmp(appendfsync, "everysec") == 0)
        return "orders acknowledged since the last fsync of the AOF (up to about a "
               "second of them) can be lost if Redis or its machine crashes";
    return "orders acknowledged since the operating system last flushed the AOF can be "
           "lost if Redis or its machine crashes";
}

/* An error answer that says "not now" rather than "not allowed": the settings
 * are read again at the next tick instead of being taken as unknown. */
static int transient_error(const char *msg)
{
    return strncmp(msg, "LOADING", 7) == 0 || strncmp(msg, "BUSY", 4) == 0 ||
           strncmp(msg, "TRYAGAIN", 8) == 0;
}

/* Logs the new verdict when it differs from the last one: a warn line on each
 * turn to not durable (from durable or from not read yet), an info line on each
 * turn to durable; nothing while it stays on one side. */
static void verdict_set(struct svc_durability *d, dur_verdict v, const char *appendonly,
                        const char *appendfsync, const char *error)
{
    dur_verdict was = d->verdict;
    d->verdict = v;
    atomic_store(&d->durable, v == DUR_DURABLE);
    if (v == DUR_DURABLE) {
        if (was != DUR_DURABLE)
            log_event(LOG_INFO, "redis_durable", "redis=%s appendonly=%s appendfsync=%s",
                      d->addr, appendonly, appendfsync);
        return;
    }
    if (was == DUR_NOT_DURABLE || was == DUR_UNKNOWN)
        return; /* still not durable: said so already */
    if (v == DUR_UNKNOWN) {
        char quoted[200];
        log_quote(quoted, sizeof(quoted), error);
        log_event(LOG_WARN, "redis_not_durable",
                  "redis=%s appendonly=unknown appendfsync=unknown error=\"%s\" "
                  "detail=\"the persistence settings could not be read, so acknowledged "
                  "orders may not survive a crash of Redis\"",
                  d->addr, quoted);
        return;
    }
    log_event(LOG_WARN, "redis_not_durable",
              "redis=%s appendonly=%s appendfsync=%s detail=\"%s\"", d->addr, appendonly,
              appendfsync, loss_detail(appendonly, appendfsync));
}

/* Reads appendonly and appendfsync and sets the verdict. A connection error or
 * a "not now" answer leaves the verdict as it was and asks for another
 * reading at the next tick. */
static void durability_read(struct svc_durability *d)
{
    /* Taken before the reading: a reconnect during it brings one more. */
    d->seen_reconnects = rconn_reconnects();
    redisReply *r = rconn_command(d->rc, "CONFIG GET append*");
    if (!r || (r->type == REDIS_REPLY_ERROR && transient_error(r->str))) {
        if (r)
            freeReplyObject(r);
        d->retry = 1;
        return;
    }
    char appendonly[16] = "", appendfsync[16] = "", error[200] = "";
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *k = r->element[i], *v = r->element[i + 1];
            if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(k->str, "appendonly") == 0)
                log_quote(appendonly, sizeof(appendonly), v->str);
            else if (strcmp(k->str, "appendfsync") == 0)
                log_quote(appendfsync, sizeof(appendfsync), v->str);
        }
        if (!appendonly[0] || !appendfsync[0])
            snprintf(error, sizeof(error),
                     "CONFIG GET append* did not list appendonly and appendfsync");
    } else {
        snprintf(error, sizeof(error), "CONFIG GET: %s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    dur_verdict v = error[0] ? DUR_UNKNOWN
                    : strcmp(appendonly, "yes") == 0 && strcmp(appendfsync, "always") == 0
                        ? DUR_DURABLE
                        : DUR_NOT_DURABLE;
    verdict_set(d, v, appendonly, appendfsync, error);
    d->retry = 0;
}

static void *durability_main(void *arg)
{
    struct svc_durability *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        int64_t until = clock_now_us() + (int64_t)DURABILITY_TICK_MS * 1000;
        while (!d->stop && clock_cond_wait_until(&d->wake, &d->mu, until) != ETIMEDOUT)
            ;
        if (d->stop)
            break;
        pthread_mutex_unlock(&d->mu);
        /* A restarted Redis has closed this idle connection: the peek notices,
         * and connecting again moves the reconnect counter. No Redis command
         * unless something moved. */
        rconn_check(d->rc);
        rconn_ctx(d->rc);
        if (d->retry || rconn_reconnects() != d->seen_reconnects)
            durability_read(d);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

struct svc_durability *svc_durability_start(const char *host, int port,
                                            const char *password)
{
    struct svc_durability *d = xcalloc(1, sizeof(*d));
    d->rc = rconn_new(host, port, password, DURABILITY_TIMEOUT_MS);
    snprintf(d->addr, sizeof(d->addr), "%s:%d", host, port);
    pthread_mutex_init(&d->mu, NULL);
    clock_cond_init(&d->wake);
    durability_read(d);
    if (pthread_create(&d->thread, NULL, durability_main, d) != 0)
        abort();
    return d;
}

void svc_durability_stop(struct svc_durability *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    rconn_free(d->rc);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

int svc_durability_durable(const struct svc_durability *d)
{
    return d ? atomic_load(&d->durable) : 0;
}
