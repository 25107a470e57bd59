/* health: the data Redis's answers kept fresh on a loop (health.h). */
#include "health.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "aconn.h"
#include "clock.h"
#include "duty.h"
#include "durability.h"
#include "log.h"
#include "roompace.h"
#include "reach.h"
#include "xalloc.h"

#define HEALTH_EVERY_MS 250
#define HEALTH_TIMEOUT_MS 1000
#define HEALTH_FRESH_MS (HEALTH_EVERY_MS + HEALTH_TIMEOUT_MS)
/* Data Redis nodes whose reachability is remembered: a cluster's masters,
 * also those a failover replaced. */
#define HEALTH_MAX_NODES (2 * CLUSTER_MAX_MASTERS)

/* One command of the round in flight: the node it asks (an index into
 * nodes[], -1 for none: a command sent only to learn a cluster's map). */
struct health_probe {
    struct svc_health *h;
    int node;
    int answered;
};

/* A node PINGed each round on a connection of its own, for the log only: a
 * redlock lock node, or a node of the data Redis noted down that the
 * cluster's map no longer names as a master (a failover replaced it): its
 * return is news too. */
struct health_ping {
    struct svc_health *h;
    struct svc_reach *reach; /* what its answers are noted in */
    char host[64];
    int port;
    struct aconn *conn; /* NULL: not asked now */
    int owed;           /* its PING is not answered yet */
    int closing;        /* its connection is being closed: the answers are ours */
    int64_t sent_us;    /* when the PING went out */
};

struct svc_health {
    const struct svc_config *cfg;
    int cluster;
    void (*on_ready)(void); /* once, at the first healthy round */
    const struct svc_durability *settings; /* refused settings hold on_ready back */
    struct inv_rooms *rooms; /* not read yet: on_ready held back (as /readyz is) */
    struct duty duty;       /* every HEALTH_EVERY_MS; its connection to the one Redis
                               (duty.conn) or to a cluster's masters (duty.cluster) */
    int reset;              /* an answer was an error (NOAUTH after a password change,
                               ...): the connection is made again before the next round */
    int owed;               /* answers of the round in flight still to come */
    int failed;             /* the round in flight had an answer that was not one */
    int detaching;          /* the answers now are ours (connections closed): not news */
    int ready_told;
    int64_t sent_us;                /* when the round in flight went out */
    _Atomic int64_t fresh_until_us; /* healthy until then (0: not) */
    struct health_probe probes[CLUSTER_MAX_MASTERS];
    struct svc_reach nodes[HEALTH_MAX_NODES];
    int nnodes;
    struct health_ping
        strays[HEALTH_MAX_NODES]; /* nodes[i]'s, while down and no master */
    struct svc_reach *lock_reach; /* redlock's nodes, nlocks of them */
    struct health_ping *locks;
    int nlocks;
};

static void unhealthy(struct svc_health *h)
{
    atomic_store(&h->fresh_until_us, 0);
}

/* The data Redis node at host:port: its index in nodes[] (added, up, when
 * new), -1 when the table is full. */
static int node_index(struct svc_health *h, const char *host, int port)
{
    char addr[sizeof(h->nodes[0].addr)];
    snprintf(addr, sizeof(addr), "%s:%d", host, port);
    for (int i = 0; i < h->nnodes; i++)
        if (strcmp(h->nodes[i].addr, addr) == 0)
            return i;
    if (h->nnodes == HEALTH_MAX_NODES)
        return -1;
    svc_reach_init(&h->nodes[h->nnodes], "redis", addr);
    return h->nnodes++;
}

static void probe_note(struct health_probe *p, int ok, const char *reason)
{
    p->answered = 1;
    if (p->node < 0 || p->h->detaching)
        return;
    if (ok)
        svc_reach_ok(&p->h->nodes[p->node]);
    else
        svc_reach_failed(&p->h->nodes[p->node], reason);
}

/* Why an answer is not one, in a short phrase, into why. */
static const char *answer_why(aconn_result res, const redisReply *r, char *why,
                              size_t len)
{
    if (res == ACONN_NOT_SENT)
        return "not connected";
    if (res == ACONN_LOST)
        return "connection lost or no answer";
    char text[128];
    snprintf(text, sizeof(text), "error answer: %.100s",
             r->type == REDIS_REPLY_ERROR ? r->str : "not PONG");
    return log_quote(why, len, text);
}

/* One answer of the round in flight in (or, while it is sent, the send's own
 * count): the round answered whole, none failed, makes Redis healthy until
 * HEALTH_FRESH_MS after it went out. */
static void round_settle(struct svc_health *h)
{
    if (--h->owed == 0 && !h->failed) {
        atomic_store(&h->fresh_until_us, h->sent_us + (int64_t)HEALTH_FRESH_MS * 1000);
        if (!h->ready_told && !h->detaching &&
            !svc_durability_refused(h->settings, NULL, 0) &&
            (!h->rooms || inv_rooms_ready(h->rooms))) {
            h->ready_told = 1;
            if (h->on_ready)
                h->on_ready();
        }
    }
}

static void on_answer(void *arg, aconn_result res, redisReply *r)
{
    struct health_probe *p = arg;
    struct svc_health *h = p->h;
    int ok = res == ACONN_REPLY && (h->cluster ? r->type == REDIS_REPLY_STRING &&
                                                     strstr(r->str, "cluster_state:ok")
                                               : r->type == REDIS_REPLY_STATUS);
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ERROR)
        h->reset = 1; /* not from inside its callback: at the next tick */
    /* For the log the node answered, whatever it said of the cluster's state
     * (cluster_state:fail while a failover runs is the cluster's, not the
     * node's); an error answer (LOADING, NOAUTH) is a node not to be used. An
     * answer that came from another node after a redirection says nothing of
     * the one asked. */
    int answered = res == ACONN_REPLY && r->type != REDIS_REPLY_ERROR;
    char why[160];
    if (h->cluster && res == ACONN_REPLY && acluster_redirected(h->duty.cluster))
        p->answered = 1;
    else
        probe_note(p, answered, answered ? NULL : answer_why(res, r, why, sizeof(why)));
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

static void on_ping_answer(void *arg, aconn_result res, redisReply *r)
{
    struct health_ping *p = arg;
    p->owed = 0;
    if (p->closing || p->h->detaching)
        return;
    char why[160];
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_STATUS)
        svc_reach_ok(p->reach);
    else
        svc_reach_failed(p->reach, answer_why(res, r, why, sizeof(why)));
}

/* p's PING answered late noted down, else the next one sent (the connection
 * made first when p has none). */
static void ping_check(struct health_ping *p)
{
    const char *ping[] = {"PING"};
    if (!p->conn)
        p->conn = aconn_new(p->h->duty.base, p->host, p->port, p->h->cfg->redis_password,
                            HEALTH_TIMEOUT_MS);
    if (p->owed) {
        if (clock_now_us() - p->sent_us > (int64_t)HEALTH_TIMEOUT_MS * 1000)
            svc_reach_failed(p->reach, "no answer in time");
        return;
    }
    p->sent_us = clock_now_us();
    if (aconn_command(p->conn, on_ping_answer, p, 1, ping, NULL) == RCONN_OK)
        p->owed = 1;
    else
        svc_reach_failed(p->reach, "not connected");
}

/* Stops asking p (its PING in flight is dropped unnoted). */
static void ping_close(struct health_ping *p)
{
    if (!p->conn)
        return;
    p->closing = 1;
    aconn_free(p->conn);
    p->conn = NULL;
    p->owed = 0;
    p->closing = 0;
}

/* A cluster's nodes noted down that its map does not name as masters now
 * (is_master[i] for nodes[i]): PINGed until they answer; the others not. */
static void strays_check(struct svc_health *h, const int *is_master)
{
    for (int i = 0; i < h->nnodes; i++) {
        struct health_ping *p = &h->strays[i];
        if (h->nodes[i].down && !is_master[i]) {
            p->h = h;
            p->reach = &h->nodes[i];
            if (!p->conn) { /* host:port, from the address noted */
                const char *colon = strrchr(h->nodes[i].addr, ':');
                snprintf(p->host, sizeof(p->host), "%.*s",
                         (int)(colon - h->nodes[i].addr), h->nodes[i].addr);
                p->port = atoi(colon + 1);
            }
            ping_check(p);
        } else {
            ping_close(p);
        }
    }
}

/* Counts probe p's command queued (rc RCONN_OK), or the round failed. */
static void round_queued(struct health_probe *p, rconn_status rc)
{
    if (rc == RCONN_OK) {
        p->h->owed++;
    } else {
        p->h->failed = 1;
        probe_note(p, 0, "not connected");
    }
}

/* Sends a round: 0 when it failed at once (not healthy then). */
static int round_send(struct svc_health *h)
{
    h->owed = 1; /* until every command is queued */
    h->failed = 0;
    h->sent_us = clock_now_us();
    if (!h->cluster) {
        const char *ping[] = {"PING"};
        struct health_probe *p = &h->probes[0];
        *p = (struct health_probe){
            h, node_index(h, h->cfg->redis.host, h->cfg->redis.port), 0};
        round_queued(p, aconn_command(h->duty.conn, on_answer, p, 1, ping, NULL));
    } else {
        const struct cluster_map *m = acluster_map(h->duty.cluster);
        const char *info[] = {"CLUSTER", "INFO"};
        int slot[CLUSTER_MAX_MASTERS], node[CLUSTER_MAX_MASTERS];
        int n = master_slots(m, slot);
        int is_master[HEALTH_MAX_NODES] = {0};
        for (int i = 0; i < m->nmasters; i++) {
            node[i] = node_index(h, m->masters[i].host, m->masters[i].port);
            if (node[i] >= 0)
                is_master[node[i]] = 1;
        }
        strays_check(h, is_master);
        if (n == 0 || n < m->nmasters) { /* no map yet, or a master serves nothing */
            h->failed = 1;
            slot[0] = 0, node[0] = -1,
            n = 1; /* a command still goes: it learns the map */
        }
        for (int i = 0; i < n; i++) {
            struct health_probe *p = &h->probes[i];
            *p = (struct health_probe){h, node[i], 0};
            round_queued(
                p, acluster_command(h->duty.cluster, slot[i], on_answer, p, 2, info));
        }
    }
    round_settle(h); /* every command is queued */
    return !h->failed;
}

/* The round in flight got no whole answer in time: each node that did not
 * answer is noted down. */
static void round_late(struct svc_health *h)
{
    int n = h->cluster ? CLUSTER_MAX_MASTERS : 1;
    for (int i = 0; i < n; i++)
        if (h->probes[i].h == h && !h->probes[i].answered)
            probe_note(&h->probes[i], 0, "no answer in time");
}

/* The connection (or router), made anew. */
static void connect_new(struct svc_health *h)
{
    h->owed = 0;
    memset(h->probes, 0, sizeof(h->probes));
    duty_reconnect(&h->duty);
}

static void on_tick(void *arg)
{
    struct svc_health *h = arg;
    for (int i = 0; i < h->nlocks; i++)
        ping_check(&h->locks[i]);
    if (h->owed > 0) { /* the round before is not answered whole yet */
        if (clock_now_us() - h->sent_us > (int64_t)HEALTH_TIMEOUT_MS * 1000) {
            unhealthy(h);
            round_late(h);
        }
        return;
    }
    if (h->reset) {
        h->reset = 0;
        connect_new(h);
    }
    if (!round_send(h))
        unhealthy(h);
}

struct svc_health *svc_health_new(const struct svc_config *cfg, int cluster,
                                  void (*on_ready)(void),
                                  const struct svc_durability *settings,
                                  struct inv_rooms *rooms)
{
    struct svc_health *h = xcalloc(1, sizeof(*h));
    h->cfg = cfg;
    h->cluster = cluster;
    h->on_ready = on_ready;
    h->settings = settings;
    h->rooms = rooms;
    if (strcmp(cfg->lock_mode, "redlock") == 0) {
        h->nlocks = cfg->nlock_nodes;
        h->locks = xcalloc((size_t)h->nlocks, sizeof(*h->locks));
        h->lock_reach = xcalloc((size_t)h->nlocks, sizeof(*h->lock_reach));
        for (int i = 0; i < h->nlocks; i++) {
            struct health_ping *p = &h->locks[i];
            char addr[sizeof(h->lock_reach[i].addr)];
            snprintf(addr, sizeof(addr), "%s:%d", cfg->lock_nodes[i].host,
                     cfg->lock_nodes[i].port);
            svc_reach_init(&h->lock_reach[i], "lock_node", addr);
            p->h = h;
            p->reach = &h->lock_reach[i];
            snprintf(p->host, sizeof(p->host), "%s", cfg->lock_nodes[i].host);
            p->port = cfg->lock_nodes[i].port;
        }
    }
    return h;
}

void svc_health_attach(struct svc_health *h, struct event_base *base)
{
    if (!h || duty_running(&h->duty))
        return;
    const struct svc_config *cfg = h->cfg;
    h->detaching = 0;
    h->owed = 0;
    memset(h->probes, 0, sizeof(h->probes));
    struct duty_target to = {.password = cfg->redis_password,
                             .timeout_ms = HEALTH_TIMEOUT_MS};
    if (h->cluster) {
        to.seeds = cfg->redis_seed;
        to.nseeds = cfg->redis_seeds;
    } else {
        to.host = cfg->redis.host;
        to.port = cfg->redis.port;
    }
    duty_start(&h->duty, base, &to, HEALTH_EVERY_MS, on_tick, h);
    on_tick(h); /* the first round now */
}

void svc_health_detach(struct svc_health *h)
{
    if (!h || !duty_running(&h->duty))
        return;
    /* a round in flight is answered, as failed: our doing, not Redis's */
    h->detaching = 1;
    duty_stop(&h->duty);
    h->owed = 0;
    for (int i = 0; i < h->nlocks; i++)
        ping_close(&h->locks[i]);
    for (int i = 0; i < h->nnodes; i++)
        ping_close(&h->strays[i]);
    unhealthy(h);
}

void svc_health_free(struct svc_health *h)
{
    if (!h)
        return;
    svc_health_detach(h);
    free(h->locks);
    free(h->lock_reach);
    free(h);
}

int svc_health_ok(const struct svc_health *h)
{
    return h && clock_now_us() < atomic_load(&h->fresh_until_us);
}
