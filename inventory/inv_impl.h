/* inv_impl.h: what inventory.c (a SKU on one Redis, orders, the hold, the
 * audit) and shards.c (a SKU over the shards of a Redis Cluster) share.
 * Internal to inventory/: the rest of the tree sees inventory.h only. */
#ifndef SECKILL_INV_IMPL_H
#define SECKILL_INV_IMPL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cluster.h"
#include "inventory.h"
#include "lock.h"
#include "rcluster.h"
#include "rconn.h"

struct inv_counters {
    _Atomic uint64_t placed, replayed, sold_out, limit, busy, unavailable, fenced_off,
        epoch_changed, spilled, commits_after_lease, outcome_unknown, idem_mismatch,
        id_collisions, sold_out_local, unacked;
};

/* What a peek taught about a SKU, so that a ticket finds its home segment and
 * a batch its epoch without asking Redis: a direct-mapped cache, an entry
 * overwritten by another SKU of the same slot. A reset forgets the entry here
 * at once; a reset by another instance shows as a batch refused for its epoch,
 * which forgets it too. Segments a hold found empty stay empty in the epoch
 * (stock only goes down), so tickets whose home is one of them are routed
 * elsewhere without asking. */
#define LAYOUT_SLOTS 256

struct sku_layout {
    char sku[INV_ID_MAX + 1]; /* "" for an empty slot */
    int segments;
    long long initial;
    char epoch[24];
    int nempty;
    uint64_t empty[INV_MAX_SEGMENTS / 64]; /* bit i: segment i seen empty */
    int nshards; /* on a cluster: segment i lives in shard i % nshards, */
    uint8_t genes[CLUSTER_MAX_MASTERS]; /* whose gene is genes[i % nshards] */
};

struct inv {
    struct inv_config cfg;
    char crash_after[32]; /* a test's SECKILL_TEST_CRASH: the step to die after */
    struct inv_counters counters;
    pthread_mutex_t layout_mu;
    struct sku_layout layouts[LAYOUT_SLOTS];
};

/* Most masters' connections one session keeps on a cluster: the masters of
 * a map and those of the one before a failover. */
#define INV_SHARD_SESSIONS (2 * CLUSTER_MAX_MASTERS)

struct inv_session {
    struct inv *inv;
    struct rconn *rc;
    struct lock_session *lock;
    /* On a cluster, the thread's session routes (cl) and does nothing on rc
     * itself: each piece of work runs on the session of the master that
     * serves its shard (inv_shard_session), whose rc is that master's and whose
     * gene names the shard. On one Redis gene is -1. */
    int gene;
    struct rcluster *cl;
    struct inv_session *shard[INV_SHARD_SESSIONS];
    int nshards;
};

/* The Redis keys of one SKU, or on a cluster of one shard of it: the
 * SKU's own keys, where its order records go (the prefix of order:<id>) and
 * its segments' locks (the prefix of ...:lock:<segment>). */
struct sku_keys {
    char meta[96], stock[96], init[96], sold[96], buyers[96], orders[96], idem[96],
        avail[96], xout[96], xin[96], order[24], lock[96];
};

/* On a cluster, a read that found the map stale (a failover, a slot moved)
 * is asked once more, of the map learnt meanwhile (inv_shard_outcome). */
#define READ_TRIES 2

static inline void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* The keys of sku: on one Redis (gene -1) under the tag {sku}; on a cluster
 * those of its shard of gene `gene`, under the gene's tag. */
void inv_keys_init(struct sku_keys *k, const char *sku, int gene);

/* Copies sku's layout to *out; 0, or -1 when not known. */
int inv_layout_get(struct inv *inv, const char *sku, struct sku_layout *out);

/* Learns sku's layout; what was known of its empty segments stays while the
 * epoch does. */
void inv_layout_put(struct inv *inv, const char *sku, int segments, long long initial,
                    const char *epoch, const int *genes, int nshards);

void inv_layout_forget(struct inv *inv, const char *sku);

long long inv_reply_ll(const redisReply *r, long long dflt);

/* The session for the shard of gene `gene`: s itself on one Redis; on a
 * cluster the session on the connection to the master that serves the
 * shard now, made on first need. NULL when no master is known for it. */
struct inv_session *inv_shard_session(struct inv_session *s, int gene);

/* After work on a cluster that failed for want of Redis: the map may be
 * stale (a failover, slots moved), so learn it again for the next. */
inv_status inv_shard_outcome(struct inv_session *s, inv_status st);

/* The fencing token of grant g as the commit scripts take it: '0' without
 * fencing. */
void inv_fence_text(const struct inv *inv, const struct lock_grant *g, char *buf,
                    size_t len);

/* The report of sku as its shard on s holds it (on one Redis: whole). */
inv_status inv_sku_get_shard(struct inv_session *s, const char *sku,
                             struct inv_sku_report *out);

/* Creates or resets sku's shard `shard` of nshards (on one Redis the only
 * one, 0 of 1): the stock of its segments (those i with i % nshards ==
 * shard; the others 0 here), its order records cleared, its epoch `epoch`
 * ("" for one more). */
inv_status inv_sku_put_shard(struct inv_session *s, const char *sku, long long stock,
                             int segments, int limit, int shard, int nshards,
                             const char *epoch);

/* The audit of sku's shard on s (on one Redis: of the SKU). */
inv_status inv_audit_shard(struct inv_session *s, const char *sku, struct inv_audit *out);

/* Places t by itself on s (one Redis, or the session of t's shard), as the
 * lock mode does. */
inv_status inv_ticket_place(struct inv_session *s, struct inv_ticket *t);

/* Routes t (its gene, segment and id's gene), learning its SKU's layout
 * first when t has none, and gives the session of its shard. */
inv_status inv_ticket_shard(struct inv_session *s, struct inv_ticket *t,
                            struct inv_session **shard);

/* Places t on a cluster: in its home shard, and when that is short, again
 * after units were brought there (a few rounds). */
inv_status inv_ticket_place_shards(struct inv_session *s, struct inv_ticket *t);

/* Every master answers and says the cluster is whole. */
int inv_ping_shards(struct inv_session *s);

/* Empties o; its parts are not touched (nparts says how many hold anything). */
void inv_order_clear(struct inv_order *o);
/* Sets o's segment and parts: the order took all its units from seg. */
void inv_order_one_part(struct inv_order *o, int seg);

#endif
