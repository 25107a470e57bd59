#include "acluster.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "xalloc.h"

#define ACLUSTER_MAX_NODES (2 * CLUSTER_MAX_MASTERS)
#define NO_NODE 0xffff

/* A node the router has heard of: from the map, or named by a redirection. */
struct cnode {
    char host[64];
    int port;
    struct aconn *conn; /* made on first need */
};

/* One command: its arguments (copied, for a resend), where it goes. */
struct creq {
    struct acluster *c;
    aconn_cb *cb;
    void *arg;
    int slot;
    struct rscript *script;
    int nkeys;
    int argc;
    const char **argv; /* into the same allocation */
    int redirects;
    int ask_node;             /* send once to this node, behind ASKING; -1: none */
    struct aconn *sent_on;    /* the connection it went out on last */
    aconn_result fail;        /* answered without sending, when the timer fires */
    struct event *timer;      /* a pause before resending, or that answer */
    struct creq *prev, *next; /* while waiting (parked or on its timer) */
};

struct acluster {
    struct event_base *base;
    struct rconn_addr *seeds;
    int nseeds;
    char *password;
    int timeout_ms;
    struct cnode nodes[ACLUSTER_MAX_NODES];
    int nnodes;
    uint16_t owner[CLUSTER_SLOTS]; /* node index, or NO_NODE */
    struct cluster_map map;        /* as last learnt */
    int known;                     /* a map was learnt */
    int refreshing;
    int next_addr;        /* the address the next refresh asks */
    struct aconn **seed;  /* [nseeds]: the refreshes' connections to seeds */
    struct aconn *topo;   /* the connection of the refresh in flight */
    struct event *unpark; /* a refresh could not be sent: answer the parked */
    struct creq *waiting, *waiting_tail; /* parked until a map, or on a timer,
                                            oldest first */
    int closing;
    int64_t last_due_us[CLUSTER_SLOTS]; /* per slot, of the last timer set (later;
                                           monotonic) */
    int redirected;                     /* the answer being handed back was redirected */
    struct aconn *answering; /* the connection that carried it (not redirected) */
    struct acluster_stats stats;
};

static void on_unpark(evutil_socket_t fd, short what, void *arg);

struct acluster *acluster_new(struct event_base *base, const struct rconn_addr *seeds,
                              int nseeds, const char *password, int timeout_ms)
{
    struct acluster *c = xcalloc(1, sizeof(*c));
    c->seeds = xmalloc(sizeof(*seeds) * (size_t)(nseeds > 0 ? nseeds : 1));
    c->seed = xcalloc((size_t)(nseeds > 0 ? nseeds : 1), sizeof(*c->seed));
    if (!(c->unpark = event_new(base, -1, 0, on_unpark, c)))
        abort();
    memcpy(c->seeds, seeds, sizeof(*seeds) * (size_t)nseeds);
    c->nseeds = nseeds;
    c->base = base;
    c->password = password && *password ? xstrdup(password) : NULL;
    c->timeout_ms = timeout_ms;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        c->owner[s] = NO_NODE;
    return c;
}

/* The node at host:port, added when new. NO_NODE when the table is full. */
static int node_index(struct acluster *c, const char *host, int port)
{
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strcmp(c->nodes[i].host, host) == 0)
            return i;
    if (c->nnodes == ACLUSTER_MAX_NODES)
        return NO_NODE;
    struct cnode *n = &c->nodes[c->nnodes];
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    n->conn = NULL;
    return c->nnodes++;
}

static struct aconn *node_conn(struct acluster *c, int i)
{
    struct cnode *n = &c->nodes[i];
    if (!n->conn)
        n->conn = aconn_new(c->base, n->host, n->port, c->password, c->timeout_ms);
    return n->conn;
}

/* Parks q behind those parked before it: commands of one slot parked for a
 * map leave in the order they came (a lock's step before the read that
 * must follow it). */
static void wait_add(struct acluster *c, struct creq *q)
{
    q->next = NULL;
    q->prev = c->waiting_tail;
    if (c->waiting_tail)
        c->waiting_tail->next = q;
    else
        c->waiting = q;
    c->waiting_tail = q;
}

static void wait_remove(struct acluster *c, struct creq *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        c->waiting = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        c->waiting_tail = q->prev;
    q->prev = q->next = NULL;
}

/* Hands the answer back and forgets q. */
static void finish(struct creq *q, aconn_result res, redisReply *r)
{
    struct acluster *c = q->c;
    aconn_cb *cb = q->cb;
    void *arg = q->arg;
    int redirected = q->redirects > 0;
    struct aconn *by = res == ACONN_REPLY && !redirected ? q->sent_on : NULL;
    if (q->timer)
        event_free(q->timer);
    free(q);
    c->redirected = redirected;
    c->answering = by;
    cb(arg, res, r);
    c->redirected = 0;
    c->answering = NULL;
}

static void send_req(struct creq *q);

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct creq *q = arg;
    wait_remove(q->c, q);
    if (q->fail != ACONN_REPLY)
        finish(q, q->fail, NULL);
    else
        send_req(q);
}

/* Runs q's timer after us: a resend, or (fail set) its answer. The timers
 * of one slot fire in the order they were set, also those set for the same
 * moment, so that commands of one slot retried together are sent again in
 * their order (a lock's step before the read behind it). */
static void later(struct creq *q, int64_t us, aconn_result fail)
{
    struct acluster *c = q->c;
    if (!q->timer && !(q->timer = evtimer_new(c->base, on_timer, q)))
        abort();
    q->fail = fail;
    wait_add(c, q);
    int64_t now = clock_now_us();
    int64_t due = now + us, *last = &c->last_due_us[q->slot];
    if (due <= *last) /* after the slot's last one */
        due = *last + 1;
    *last = due;
    us = due - now;
    struct timeval tv = {.tv_sec = us / 1000000, .tv_usec = us % 1000000};
    evtimer_add(q->timer, &tv);
}

static void refresh(struct acluster *c);

/* Learns the map from a CLUSTER SHARDS (or SLOTS) answer. 0, or -1. */
static int learn(struct acluster *c, const redisReply *r)
{
    if (cluster_map_from_shards(&c->map, r) != RCONN_OK &&
        cluster_map_from_slots(&c->map, r) != RCONN_OK)
        return -1;
    if (c->map.nmasters == 0)
        return -1;
    uint16_t idx[CLUSTER_MAX_MASTERS];
    for (int m = 0; m < c->map.nmasters; m++)
        idx[m] = (uint16_t)node_index(c, c->map.masters[m].host, c->map.masters[m].port);
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        c->owner[s] =
            c->map.owner[s] == CLUSTER_NO_MASTER ? NO_NODE : idx[c->map.owner[s]];
    c->known = 1;
    c->stats.refreshes++;
    return 0;
}

/* The commands parked for a map go now (or, with none, are answered). */
static void unpark(struct acluster *c)
{
    /* Those parked now, in order; any parked again meanwhile waits for the
     * next map. */
    struct creq *last = c->waiting_tail, *q = c->waiting, *next;
    for (int done = !q; !done; q = next) {
        next = q->next;
        done = q == last;
        if (q->timer && evtimer_pending(q->timer, NULL))
            continue; /* on its own timer */
        wait_remove(c, q);
        if (c->known)
            send_req(q);
        else
            later(q, 0, ACONN_NOT_SENT);
    }
}

static void on_topology(void *arg, aconn_result res, redisReply *r)
{
    struct acluster *c = arg;
    c->refreshing = 0;
    if (c->closing)
        return;
    int learnt = res == ACONN_REPLY && learn(c, r) == 0;
    if (!learnt && res == ACONN_REPLY && r->type == REDIS_REPLY_ERROR &&
        strstr(r->str, "unknown subcommand")) { /* before 7: CLUSTER SLOTS */
        const char *argv[] = {"CLUSTER", "SLOTS"};
        if (aconn_command(c->topo, on_topology, c, 2, argv, NULL) == RCONN_OK) {
            c->refreshing = 1;
            return;
        }
    }
    if (!learnt)
        c->next_addr++; /* the next refresh asks another node */
    unpark(c);
}

/* Asks a node for the map (one refresh at a time): the nodes known first,
 * then the seeds, a different one after each failure. */
static void refresh(struct acluster *c)
{
    if (c->refreshing || c->closing)
        return;
    int total = c->nnodes + c->nseeds;
    int i = c->next_addr % total;
    if (i < c->nnodes) {
        c->topo = node_conn(c, i);
    } else {
        struct rconn_addr *a = &c->seeds[i - c->nnodes];
        if (!c->seed[i - c->nnodes])
            c->seed[i - c->nnodes] =
                aconn_new(c->base, a->host, a->port, c->password, c->timeout_ms);
        c->topo = c->seed[i - c->nnodes];
    }
    const char *argv[] = {"CLUSTER", "SHARDS"};
    if (aconn_command(c->topo, on_topology, c, 2, argv, NULL) == RCONN_OK) {
        c->refreshing = 1;
        return;
    }
    c->next_addr++;
    event_active(c->unpark, EV_TIMEOUT, 0); /* no map to be had now */
}

static void on_unpark(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct acluster *c = arg;
    if (!c->refreshing)
        unpark(c);
}

static void on_asking(void *arg, aconn_result res, redisReply *r)
{
    (void)arg, (void)res, (void)r;
}

/* q could not be sent to its master (the connection is down: a master that
 * died, before the map says who took over): the map is learnt again and q
 * sent again after a pause, as for TRYAGAIN. 0 when its tries are spent. */
static int resend_later(struct creq *q)
{
    struct acluster *c = q->c;
    if (c->closing || q->redirects >= ACLUSTER_REDIRECTS)
        return 0;
    c->stats.retries++;
    refresh(c);
    later(q, (int64_t)10000 << q->redirects++, ACONN_REPLY);
    return 1;
}

static void on_reply(void *arg, aconn_result res, redisReply *r)
{
    struct creq *q = arg;
    struct acluster *c = q->c;
    if (res == ACONN_NOT_SENT && resend_later(q))
        return;
    if (res != ACONN_REPLY || c->closing || q->redirects >= ACLUSTER_REDIRECTS) {
        finish(q, res, r);
        return;
    }
    int slot, port;
    char host[64];
    switch (cluster_redirection(r, &slot, host, sizeof(host), &port)) {
    case CLUSTER_MOVED: {
        int n = node_index(c, host, port);
        if (n == NO_NODE)
            break;
        c->stats.moved++;
        q->redirects++;
        c->owner[slot] = (uint16_t)n; /* at once; the rest of the map follows */
        refresh(c);
        send_req(q);
        return;
    }
    case CLUSTER_ASK: {
        int n = node_index(c, host, port);
        if (n == NO_NODE)
            break;
        c->stats.ask++;
        q->redirects++;
        q->ask_node = n;
        send_req(q);
        return;
    }
    case CLUSTER_RETRY:
        c->stats.retries++;
        later(q, (int64_t)10000 << q->redirects++, ACONN_REPLY);
        return;
    case CLUSTER_ANSWER:
        break;
    }
    finish(q, res, r);
}

/* Sends q to the master of its slot (or the node it was ASKed to), parking
 * it while no map is known. */
static void send_req(struct creq *q)
{
    struct acluster *c = q->c;
    int n = q->ask_node >= 0 ? q->ask_node : c->owner[q->slot];
    if (n == NO_NODE) {
        if (c->known && q->redirects++ >= ACLUSTER_REDIRECTS) {
            later(q, 0, ACONN_NOT_SENT); /* the slot is served by no one */
            return;
        }
        wait_add(c, q);
        refresh(c);
        return;
    }
    struct aconn *conn = node_conn(c, n);
    if (q->ask_node >= 0) {
        const char *asking[] = {"ASKING"};
        aconn_command(conn, on_asking, NULL, 1, asking, NULL);
        q->ask_node = -1; /* once */
    }
    q->sent_on = conn;
    rconn_status rc =
        q->script ? aconn_eval(conn, on_reply, q, q->script, q->nkeys, q->argc, q->argv)
                  : aconn_command(conn, on_reply, q, q->argc, q->argv, NULL);
    if (rc != RCONN_OK && !resend_later(q))
        later(q, 0, ACONN_NOT_SENT);
}

/* A request for argv, with a copy of it. */
static struct creq *req_new(struct acluster *c, int slot, aconn_cb *cb, void *arg,
                            int argc, const char **argv)
{
    size_t bytes = 0;
    for (int i = 0; i < argc; i++)
        bytes += strlen(argv[i]) + 1;
    struct creq *q = xmalloc(sizeof(*q) + sizeof(char *) * (size_t)argc + bytes);
    *q = (struct creq){.c = c,
                       .cb = cb,
                       .arg = arg,
                       .slot = slot,
                       .argc = argc,
                       .ask_node = -1,
                       .fail = ACONN_REPLY};
    q->argv = (const char **)(q + 1);
    char *p = (char *)(q->argv + argc);
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]) + 1;
        memcpy(p, argv[i], n);
        q->argv[i] = p;
        p += n;
    }
    return q;
}

rconn_status acluster_command(struct acluster *c, int slot, aconn_cb *cb, void *arg,
                              int argc, const char **argv)
{
    if (c->closing || slot < 0 || slot >= CLUSTER_SLOTS)
        return RCONN_ERR;
    send_req(req_new(c, slot, cb, arg, argc, argv));
    return RCONN_OK;
}

rconn_status acluster_eval(struct acluster *c, int slot, aconn_cb *cb, void *arg,
                           struct rscript *s, int nkeys, int argc, const char **argv)
{
    if (c->closing || slot < 0 || slot >= CLUSTER_SLOTS)
        return RCONN_ERR;
    struct creq *q = req_new(c, slot, cb, arg, argc, argv);
    q->script = s;
    q->nkeys = nkeys;
    send_req(q);
    return RCONN_OK;
}

const struct cluster_map *acluster_map(const struct acluster *c)
{
    return &c->map;
}

struct aconn *acluster_answered_by(const struct acluster *c)
{
    return c->answering;
}

int acluster_redirected(const struct acluster *c)
{
    return c->redirected;
}

void acluster_stats(const struct acluster *c, struct acluster_stats *out)
{
    *out = c->stats;
}

void acluster_free(struct acluster *c)
{
    if (!c)
        return;
    c->closing = 1;
    for (int i = 0; i < c->nseeds; i++)
        aconn_free(c->seed[i]);
    for (int i = 0; i < c->nnodes; i++)
        aconn_free(c->nodes[i].conn); /* answers what is in flight */
    while (c->waiting) {
        struct creq *q = c->waiting;
        wait_remove(c, q);
        finish(q, ACONN_NOT_SENT, NULL);
    }
    event_free(c->unpark);
    free(c->seed);
    free(c->seeds);
    free(c->password);
    free(c);
}
