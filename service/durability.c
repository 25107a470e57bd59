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

/* The data Redis's maxmemory-policy, as read: every policy but noeviction may
 * drop keys when memory runs out, an order record, a buyer's count or a lock
 * among them (volatile-* those with a TTL: the locks, the leases). */
static const char *const policies[] = {
    "noeviction",   "allkeys-lru",  "allkeys-lfu",     "allkeys-random",
    "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
};
#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))
#define POLICY_UNREAD -1 /* not read, or could not be */
#define POLICY_OTHER -2  /* a name this build does not know: taken as evicting */

/* What a crash of Redis can take with it, by the last reading. */
typedef enum {
    LOSS_NONE = 0, /* durable */
    LOSS_NO_AOF,   /* appendonly no */
    LOSS_EVERYSEC, /* appendfsync everysec */
    LOSS_OS_FLUSH, /* appendfsync no */
    LOSS_UNKNOWN,  /* not read, or could not be */
} dur_loss;

struct svc_durability {
    char host[256];
    int port;
    char *password;
    char addr[300];                /* host:port, for the log */
    dur_verdict verdict;           /* start-up's, then the attached loop's only */
    int reading;                   /* a CONFIG GET is on its way */
    struct duty duty;              /* on the attached loop: every DURABILITY_TICK_MS */
    _Atomic int durable; /* the gauge */
    _Atomic int loss;    /* dur_loss */
    _Atomic int policy;  /* index into policies[], or POLICY_UNREAD/POLICY_OTHER */
};

static const char *const loss_details[] = {
    [LOSS_NONE] = "",
    [LOSS_NO_AOF] =
        "without AOF, orders acknowledged since the last RDB snapshot (all of "
        "them when there is none) can be lost if Redis crashes",
    [LOSS_EVERYSEC] =
        "orders acknowledged since the last fsync of the AOF (up to about a "
        "second of them) can be lost if Redis or its machine crashes",
    [LOSS_OS_FLUSH] = "orders acknowledged since the operating system last flushed the "
                      "AOF can be lost if Redis or its machine crashes",
    [LOSS_UNKNOWN] = "the persistence settings could not be read, so acknowledged orders "
                     "may not survive a crash of Redis",
};

/* What a crash of Redis can take with it under these settings. */
static dur_loss loss_of(const char *appendonly, const char *appendfsync)
{
    if (strcmp(appendonly, "yes") != 0)
        return LOSS_NO_AOF;
    if (strcmp(appendfsync, "always") == 0)
        return LOSS_NONE;
    return strcmp(appendfsync, "everysec") == 0 ? LOSS_EVERYSEC : LOSS_OS_FLUSH;
}

static int policy_index(const char *name)
{
    for (size_t i = 0; i < NPOLICIES; i++)
        if (strcmp(policies[i], name) == 0)
            return (int)i;
    return POLICY_OTHER;
}

/* Notes the policy read (POLICY_UNREAD: none could be), logging each turn
 * to evicting (warn) and back to noeviction (info). */
static void policy_set(struct svc_durability *d, int policy, const char *name)
{
    int was = atomic_exchange(&d->policy, policy);
    int evicts = policy != 0 && policy != POLICY_UNREAD;
    int evicted = was != 0 && was != POLICY_UNREAD;
    if (evicts && !evicted)
        log_event(LOG_WARN, "redis_evicting",
                  "redis=%s maxmemory_policy=%s detail=\"Redis may evict order records, "
                  "buyers' counts and locks when its memory is full: acknowledged orders "
                  "lost, stock oversold. Not ready until maxmemory-policy is "
                  "noeviction\"",
                  d->addr, name);
    else if (!evicts && evicted && policy == 0)
        log_event(LOG_INFO, "redis_noeviction", "redis=%s maxmemory_policy=noeviction",
                  d->addr);
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
    atomic_store(&d->loss, v == DUR_DURABLE       ? LOSS_NONE
                           : v == DUR_NOT_DURABLE ? (int)loss_of(appendonly, appendfsync)
                                                  : LOSS_UNKNOWN);
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
                  "detail=\"%s\"",
                  d->addr, quoted, loss_details[LOSS_UNKNOWN]);
        return;
    }
    log_event(LOG_WARN, "redis_not_durable",
              "redis=%s appendonly=%s appendfsync=%s detail=\"%s\"", d->addr, appendonly,
              appendfsync, loss_details[loss_of(appendonly, appendfsync)]);
}

/* Sets the verdicts from r, the answer to CONFIG GET (NULL: none came). A
 * connection error or a "not now" answer leaves them as they were, until the
 * next tick's reading. */
static void durability_take(struct svc_durability *d, const redisReply *r)
{
    if (!r || (r->type == REDIS_REPLY_ERROR && transient_error(r->str)))
        return;
    char appendonly[16] = "", appendfsync[16] = "", policy[32] = "", error[200] = "";
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *k = r->element[i], *v = r->element[i + 1];
            if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(k->str, "appendonly") == 0)
                log_quote(appendonly, sizeof(appendonly), v->str);
            else if (strcmp(k->str, "appendfsync") == 0)
                log_quote(appendfsync, sizeof(appendfsync), v->str);
            else if (strcmp(k->str, "maxmemory-policy") == 0)
                log_quote(policy, sizeof(policy), v->str);
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
    policy_set(d, policy[0] ? policy_index(policy) : POLICY_UNREAD, policy);
}

/* Two patterns in one CONFIG GET: Redis 7.0 or later. */
static const char *config_get[] = {"CONFIG", "GET", "append*", "maxmemory-policy"};
#define CONFIG_GET_ARGS 4

static void on_read(void *arg, aconn_result res, redisReply *r)
{
    struct svc_durability *d = arg;
    d->reading = 0;
    durability_take(d, res == ACONN_REPLY ? r : NULL);
}

/* Once a second on the attached loop: reads the settings again, one CONFIG
 * GET, so that a CONFIG SET made on a running Redis (a policy that evicts, AOF
 * turned off) is seen within a second or two, also without a reconnect. */
static void on_tick(void *arg)
{
    struct svc_durability *d = arg;
    if (d->reading)
        return;
    if (aconn_command(d->duty.conn, on_read, d, CONFIG_GET_ARGS, config_get, NULL) == RCONN_OK)
        d->reading = 1;
}

struct svc_durability *svc_durability_start(const char *host, int port,
                                            const char *password)
{
    struct svc_durability *d = xcalloc(1, sizeof(*d));
    snprintf(d->host, sizeof(d->host), "%s", host);
    d->port = port;
    atomic_init(&d->policy, POLICY_UNREAD);
    atomic_init(&d->loss, LOSS_UNKNOWN);
    d->password = password && *password ? xstrdup(password) : NULL;
    snprintf(d->addr, sizeof(d->addr), "%s:%d", host, port);
    /* The first reading, at start-up, before the loops run. */
    struct rconn *rc = rconn_new(host, port, password, DURABILITY_TIMEOUT_MS);
    redisReply *r = rconn_command_argv(rc, CONFIG_GET_ARGS, config_get, NULL);
    durability_take(d, r);
    if (r)
        freeReplyObject(r);
    rconn_free(rc);
    return d;
}

void svc_durability_attach(struct svc_durability *d, struct event_base *base)
{
    if (!d || duty_running(&d->duty))
        return;
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

int svc_durability_refused(const struct svc_durability *d, char *why, size_t len)
{
    int policy = d ? atomic_load(&d->policy) : POLICY_UNREAD;
    if (policy == 0 || policy == POLICY_UNREAD)
        return 0;
    if (why)
        snprintf(
            why, len,
            "the data Redis's maxmemory-policy is %s: it may evict orders and locks; "
            "set it to noeviction",
            policy >= 0 ? policies[policy] : "one that evicts");
    return 1;
}

const char *svc_durability_loss(const struct svc_durability *d)
{
    int loss = d ? atomic_load(&d->loss) : LOSS_UNKNOWN;
    return loss == LOSS_NONE ? NULL : loss_details[loss];
}
