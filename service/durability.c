#include "durability.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aconn.h"
#include "duty.h"
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
    char host[256];
    int port;
    char *password;
    char addr[300];                /* host:port, for the log */
    dur_verdict verdict;           /* start-up's, then the attached loop's only */
    int retry;                     /* the last reading failed on the way: read again */
    unsigned long seen_reconnects; /* rconn_reconnects() before the last reading */
    uint64_t seen_link;            /* the link that carried the last reading */
    int reading;                   /* a CONFIG GET is on its way */
    struct duty duty;              /* on the attached loop: every DURABILITY_TICK_MS */
    _Atomic int durable;           /* the gauge */
};

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

/* Sets the verdict from r, the answer to CONFIG GET append* (NULL: none
 * came). A connection error or a "not now" answer leaves the verdict as it
 * was and asks for another reading at the next tick. */
static void durability_take(struct svc_durability *d, const redisReply *r)
{
    if (!r || (r->type == REDIS_REPLY_ERROR && transient_error(r->str))) {
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
    dur_verdict v = error[0] ? DUR_UNKNOWN
                    : strcmp(appendonly, "yes") == 0 && strcmp(appendfsync, "always") == 0
                        ? DUR_DURABLE
                        : DUR_NOT_DURABLE;
    verdict_set(d, v, appendonly, appendfsync, error);
    d->retry = 0;
}

static const char *config_get[] = {"CONFIG", "GET", "append*"};

static void on_read(void *arg, aconn_result res, redisReply *r)
{
    struct svc_durability *d = arg;
    d->reading = 0;
    if (res == ACONN_REPLY)
        d->seen_link = aconn_link(d->duty.conn);
    durability_take(d, res == ACONN_REPLY ? r : NULL);
}

/* Once a second on the attached loop: reads the settings again when the last
 * reading failed, when a connection of this process was made again since
 * (rconn_reconnects moved), or when its own connection is no longer the one
 * that carried the last reading (aconn noticed the close of a restarted
 * Redis on the loop, or is down). No Redis command unless something moved. */
static void on_tick(void *arg)
{
    struct svc_durability *d = arg;
    if (d->reading || (!d->retry && rconn_reconnects() == d->seen_reconnects &&
                       aconn_link(d->duty.conn) == d->seen_link))
        return;
    /* Taken before the reading: a reconnect during it brings one more. */
    d->seen_reconnects = rconn_reconnects();
    if (aconn_command(d->duty.conn, on_read, d, 3, config_get, NULL) == RCONN_OK)
        d->reading = 1;
    else
        d->retry = 1;
}

struct svc_durability *svc_durability_start(const char *host, int port,
                                            const char *password)
{
    struct svc_durability *d = xcalloc(1, sizeof(*d));
    snprintf(d->host, sizeof(d->host), "%s", host);
    d->port = port;
    d->password = password && *password ? xstrdup(password) : NULL;
    snprintf(d->addr, sizeof(d->addr), "%s:%d", host, port);
    /* The first reading, at start-up, before the loops run. */
    struct rconn *rc = rconn_new(host, port, password, DURABILITY_TIMEOUT_MS);
    d->seen_reconnects = rconn_reconnects();
    redisReply *r = rconn_command_argv(rc, 3, config_get, NULL);
    durability_take(d, r);
    if (r)
        freeReplyObject(r);
    rconn_free(rc);
    d->seen_reconnects = rconn_reconnects();
    return d;
}

void svc_durability_attach(struct svc_durability *d, struct event_base *base)
{
    if (!d || duty_running(&d->duty))
        return;
    d->retry = 1; /* its own connection has carried no reading yet */
    struct duty_target to = {.host = d->host,
                             .port = d->port,
                             .password = d->password,
                             .timeout_ms = DURABILITY_TIMEOUT_MS};
    duty_start(&d->duty, base, &to, DURABILITY_TICK_MS, on_tick, d);
}

void svc_durability_detach(struct svc_durability *d)
{
    if (d)
        duty_stop(&d->duty); /* a reading in flight is answered, as failed */
}

void svc_durability_stop(struct svc_durability *d)
{
    if (!d)
        return;
    svc_durability_detach(d);
    free(d->password);
    free(d);
}

int svc_durability_durable(const struct svc_durability *d)
{
    return d ? atomic_load(&d->durable) : 0;
}
