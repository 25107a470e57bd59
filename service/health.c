/* health: the data Redis's answers kept fresh on a loop (health.h). */
#include "health.h"

#include <event2/event.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "aconn.h"
#include "clock.h"
#include "xalloc.h"

#define HEALTH_EVERY_MS 250
#define HEALTH_TIMEOUT_MS 1000
#define HEALTH_FRESH_MS (HEALTH_EVERY_MS + HEALTH_TIMEOUT_MS)

struct svc_health {
    const struct svc_config *cfg;
    int cluster;
    struct aconn *conn;       /* one Redis */
    struct acluster *masters; /* or a cluster's */
    struct event_base *base;
    struct event *tick;
    int reset;        /* an answer was an error (NOAUTH after a password change,
                         ...): the connection is made again before the next round */
    int owed;         /* answers of the round in flight still to come */
    int failed;       /* the round in flight had an answer that was not one */
    int64_t sent_us;  /* when the round in flight went out */
    _Atomic int64_t fresh_until_us; /* healthy until then (0: not) */
};

static void unhealthy(struct svc_health *h)
{
    atomic_store(&h->fresh_until_us, 0);
}

/* One answer of the round in flight in (or, while it is sent, the send's own
 * count): the round answered whole, none failed, makes Redis healthy until
 * HEALTH_FRESH_MS after it went out. */
static void round_settle(struct svc_health *h)
{
    if (--h->owed == 0 && !h->failed)
        atomic_store(&h->fresh_until_us, h->sent_us + (int64_t)HEALTH_FRESH_MS * 1000);
}

static void on_answer(void *arg, aconn_result res, redisReply *r)
{
    struct svc_health *h = arg;
    int ok = res == ACONN_REPLY &&
             (h->cluster ? r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok")
                         : r->type == REDIS_REPLY_STATUS);
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ERROR)
        h->reset = 1; /* not from inside its callback: at the next tick */
    if (!ok) {
        h->failed = 1;
        unhealthy(h); /* at once: no need to wait for the rest */
    }
    round_settle(h);
}

/* A slot of each master of the map into slot[] (the first it serves); how
 * many. */
static int master_slots(const struct cluster_map *m, int slot[CLUSTER_MAX_MASTERS])
{
    int n = 0;
    for (int i = 0; i < m->nmasters; i++)
        slot[i] = -1;
    for (int s = 0; s < CLUSTER_SLOTS && n < m->nmasters; s++) {
        int o = m->owner[s];
        if (o < m->nmasters && slot[o] < 0) {
            slot[o] = s;
            n++;
        }
    }
    return n;
}

/* Counts a command of the round queued (rc RCONN_OK), or the round failed. */
static void round_queued(struct svc_health *h, rconn_status rc)
{
    if (rc == RCONN_OK)
        h->owed++;
    else
        h->failed = 1;
}

/* Sends a round: 0 when it failed at once (not healthy then). */
static int round_send(struct svc_health *h)
{
    h->owed = 1; /* until every command is queued */
    h->failed = 0;
    h->sent_us = clock_now_us();
    if (!h->cluster) {
        const char *ping[] = {"PING"};
        round_queued(h, aconn_command(h->conn, on_answer, h, 1, ping, NULL));
    } else {
        const struct cluster_map *m = acluster_map(h->masters);
        const char *info[] = {"CLUSTER", "INFO"};
        int slot[CLUSTER_MAX_MASTERS];
        int n = master_slots(m, slot);
        if (n == 0 || n < m->nmasters) { /* no map yet, or a master serves nothing */
            h->failed = 1;
            slot[0] = 0, n = 1; /* a command still goes: it learns the map */
        }
        for (int i = 0; i < n; i++)
            round_queued(h, acluster_command(h->masters, slot[i], on_answer, h, 2, info));
    }
    round_settle(h); /* every command is queued */
    return !h->failed;
}

/* The connection (or router), made anew. */
static void connect_new(struct svc_health *h)
{
    const struct svc_config *cfg = h->cfg;
    aconn_free(h->conn);
    acluster_free(h->masters);
    h->conn = NULL;
    h->masters = NULL;
    h->owed = 0;
    if (h->cluster)
        h->masters = acluster_new(h->base, cfg->redis_seed, cfg->redis_seeds,
                                  cfg->redis_password, HEALTH_TIMEOUT_MS);
    else
        h->conn = aconn_new(h->base, cfg->redis.host, cfg->redis.port,
                            cfg->redis_password, HEALTH_TIMEOUT_MS);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct svc_health *h = arg;
    if (h->owed > 0) { /* the round before is not answered whole yet */
        if (clock_now_us() - h->sent_us > (int64_t)HEALTH_TIMEOUT_MS * 1000)
            unhealthy(h);
        return;
    }
    if (h->reset) {
        h->reset = 0;
        connect_new(h);
    }
    if (!round_send(h))
        unhealthy(h);
}

struct svc_health *svc_health_new(const struct svc_config *cfg, int cluster)
{
    struct svc_health *h = xcalloc(1, sizeof(*h));
    h->cfg = cfg;
    h->cluster = cluster;
    return h;
}

void svc_health_attach(struct svc_health *h, struct event_base *base)
{
    if (!h || h->tick)
        return;
    h->base = base;
    connect_new(h);
    h->tick = event_new(base, -1, EV_PERSIST, on_tick, h);
    struct timeval every = {.tv_usec = HEALTH_EVERY_MS * 1000};
    if (!h->tick || event_add(h->tick, &every) != 0)
        abort();
    on_tick(-1, 0, h); /* the first round now */
}

void svc_health_detach(struct svc_health *h)
{
    if (!h || !h->tick)
        return;
    event_free(h->tick);
    h->tick = NULL;
    /* a round in flight is answered, as failed */
    aconn_free(h->conn);
    acluster_free(h->masters);
    h->conn = NULL;
    h->masters = NULL;
    h->owed = 0;
    unhealthy(h);
}

void svc_health_free(struct svc_health *h)
{
    if (!h)
        return;
    svc_health_detach(h);
    free(h);
}

int svc_health_ok(const struct svc_health *h)
{
    return h && clock_now_us() < atomic_load(&h->fresh_until_us);
}
