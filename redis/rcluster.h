/* rcluster: one thread's blocking connections to a Redis Cluster.
 *
 * The counterpart of acluster for threads that wait on their answers (the
 * routes that wait on Redis, on the main thread): one rconn per master, made on first
 * need and kept, and the slot map (cluster.h) learnt from CLUSTER SHARDS of
 * a seed or of any node known. The caller sends its commands, or a pipeline
 * of one slot, on the connection of the slot's master; an answer that shows
 * the map stale (MOVED, ASK, CLUSTERDOWN, no answer) is the caller's cue to
 * rcluster_refresh and try again.
 *
 * Thread safety: none; an rcluster belongs to one thread. */
#ifndef SECKILL_RCLUSTER_H
#define SECKILL_RCLUSTER_H

#include "cluster.h"
#include "rconn.h"

/* A refresh asked within this long of the last is skipped (the map the last
 * one learnt is as new as the cluster can tell). */
#define RCLUSTER_REFRESH_MS 100

struct rcluster;

/* A router over the cluster whose seeds are seeds[0..nseeds-1] (copied).
 * password may be NULL. Never returns NULL; nothing is connected yet. */
struct rcluster *rcluster_new(const struct rconn_addr *seeds, int nseeds,
                              const char *password, int timeout_ms);
void rcluster_free(struct rcluster *c); /* NULL is a no-op */

/* The connection to the master that serves slot, learning the map first
 * when none is known. NULL when no map could be learnt or no master serves
 * the slot. The rconn stays the router's. */
struct rconn *rcluster_conn(struct rcluster *c, int slot);

/* The connection to the i-th master of the map (0..masters-1). */
struct rconn *rcluster_master(struct rcluster *c, int i);

/* Learns the map again, unless one was learnt within RCLUSTER_REFRESH_MS.
 * RCONN_OK, or RCONN_ERR when no node answered with one (the old map stays). */
rconn_status rcluster_refresh(struct rcluster *c);

/* The map as last learnt (nmasters 0 before the first); learns one first
 * when none is known. */
const struct cluster_map *rcluster_map(struct rcluster *c);

/* True when r asks for a refresh: a redirection or a retry
 * (cluster_redirection), or no answer at all. */
int rcluster_stale(const redisReply *r);

#endif
