#include "rcluster.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "xalloc.h"

#define RCLUSTER_MAX_NODES (2 * CLUSTER_MAX_MASTERS)

/* A node heard of: a seed or a master of some map. */
struct rnode {
    char host[64];
    int port;
    struct rconn *conn;
};

struct rcluster {
    struct rconn_addr *seeds;
    int nseeds;
    char *password;
    int timeout_ms;
    struct rnode nodes[RCLUSTER_MAX_NODES];
    int nnodes;
    struct cluster_map map;
    int master_node[CLUSTER_MAX_MASTERS]; /* the map's masters in nodes[] */
    int known;                            /* a map was learnt */
    int64_t learnt_ms;                    /* when (monotonic) */
};

struct rcluster *rcluster_new(const struct rconn_addr *seeds, int nseeds,
                              const char *password, int timeout_ms)
{
    struct rcluster *c = xcalloc(1, sizeof(*c));
    c->seeds = xmalloc(sizeof(*seeds) * (size_t)(nseeds > 0 ? nseeds : 1));
    memcpy(c->seeds, seeds, sizeof(*seeds) * (size_t)nseeds);
    c->nseeds = nseeds;
    c->password = password && *password ? xstrdup(password) : NULL;
    c->timeout_ms = timeout_ms;
    return c;
}

void rcluster_free(struct rcluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nnodes; i++)
        rconn_free(c->nodes[i].conn);
    free(c->seeds);
    free(c->password);
    free(c);
}

/* The node at host:port, added when new; -1 when the table is full. */
static int node_index(struct rcluster *c, const char *host, int port)
{
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strcmp(c->nodes[i].host, host) == 0)
            return i;
    if (c->nnodes == RCLUSTER_MAX_NODES || strlen(host) >= sizeof(c->nodes[0].host))
        return -1;
    struct rnode *n = &c->nodes[c->nnodes];
    strcpy(n->host, host);
    n->port = port;
    n->conn = rconn_new(host, port, c->password, c->timeout_ms);
    return c->nnodes++;
}

/* Asks node i for the map; 0 when it gave one that serves every slot. */
static int learn_from(struct rcluster *c, int i)
{
    struct cluster_map *m = xmalloc(sizeof(*m));
    int ok = -1;
    redisReply *r = rconn_command(c->nodes[i].conn, "CLUSTER SHARDS");
    if (r && cluster_map_from_shards(m, r) != RCONN_OK) {
        freeReplyObject(r);
        r = rconn_command(c->nodes[i].conn, "CLUSTER SLOTS");
        if (r && cluster_map_from_slots(m, r) != RCONN_OK)
            m->nmasters = 0;
    }
    if (r && m->nmasters > 0 && cluster_map_unserved(m) == 0) {
        int nodes[CLUSTER_MAX_MASTERS];
        ok = 0;
        for (int k = 0; k < m->nmasters && ok == 0; k++)
            if ((nodes[k] = node_index(c, m->masters[k].host, m->masters[k].port)) < 0)
                ok = -1;
        if (ok == 0) {
            c->map = *m;
            memcpy(c->master_node, nodes, sizeof(int) * (size_t)m->nmasters);
            c->known = 1;
            c->learnt_ms = (clock_now_us() / 1000);
        }
    }
    if (r)
        freeReplyObject(r);
    free(m);
    return ok;
}

rconn_status rcluster_refresh(struct rcluster *c)
{
    if (c->known && (clock_now_us() / 1000) - c->learnt_ms < RCLUSTER_REFRESH_MS)
        return RCONN_OK;
    /* the masters first (they know the newest map), then the seeds */
    for (int k = 0; c->known && k < c->map.nmasters; k++)
        if (learn_from(c, c->master_node[k]) == 0)
            return RCONN_OK;
    for (int s = 0; s < c->nseeds; s++) {
        int i = node_index(c, c->seeds[s].host, c->seeds[s].port);
        if (i >= 0 && learn_from(c, i) == 0)
            return RCONN_OK;
    }
    return RCONN_ERR;
}

const struct cluster_map *rcluster_map(struct rcluster *c)
{
    if (!c->known)
        rcluster_refresh(c);
    return &c->map;
}

struct rconn *rcluster_conn(struct rcluster *c, int slot)
{
    if (!c->known && rcluster_refresh(c) != RCONN_OK)
        return NULL;
    int m = slot >= 0 && slot < CLUSTER_SLOTS ? c->map.owner[slot] : CLUSTER_NO_MASTER;
    return m == CLUSTER_NO_MASTER ? NULL : c->nodes[c->master_node[m]].conn;
}

struct rconn *rcluster_master(struct rcluster *c, int i)
{
    if (!c->known && rcluster_refresh(c) != RCONN_OK)
        return NULL;
    return i >= 0 && i < c->map.nmasters ? c->nodes[c->master_node[i]].conn : NULL;
}

int rcluster_stale(const redisReply *r)
{
    int slot, port;
    char host[64];
    return !r ||
           cluster_redirection(r, &slot, host, sizeof(host), &port) != CLUSTER_ANSWER;
}
