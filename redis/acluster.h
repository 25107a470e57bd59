/* acluster: one event loop's connections to a Redis Cluster.
 *
 * One aconn per master (made on first need), each command sent to the master
 * that serves its slot, so commands of one slot keep their order and are
 * auto-pipelined as on a single Redis. The slot map (cluster.h) comes from
 * CLUSTER SHARDS asked of a seed, or of any node known, when the first
 * command comes, and again after a MOVED; commands that arrive meanwhile
 * wait for it. An answer that redirects is not handed back:
 *   - MOVED: the slot's master is updated at once (a full refresh follows)
 *     and the command sent again there;
 *   - ASK: sent again once, to the node named, behind an ASKING;
 *   - TRYAGAIN, CLUSTERDOWN: sent again after a pause (10 ms, doubling);
 * at most ACLUSTER_REDIRECTS times, after which the last answer is handed
 * back as it is. A command keeps a copy of its arguments for that.
 *
 * A command that could not be sent (its master's connection down: a master
 * that died, before the map says who took over) is sent again as for
 * TRYAGAIN, the map learnt anew meanwhile.
 *
 * Callbacks are aconn's (aconn_cb), with the same results; a command that
 * could not be sent at all (no topology, its master's connection down all
 * along) is answered ACONN_NOT_SENT on the loop, never inside the call that
 * queued it.
 *
 * Thread safety: none; an acluster belongs to the thread of its base. */
#ifndef SECKILL_ACLUSTER_H
#define SECKILL_ACLUSTER_H

#include "aconn.h"
#include "cluster.h"

#define ACLUSTER_REDIRECTS 5

struct acluster;

/* A router over the cluster whose seeds are seeds[0..nseeds-1] (copied).
 * password may be NULL. Never returns NULL; nothing is connected yet. */
struct acluster *acluster_new(struct event_base *base, const struct rconn_addr *seeds,
                              int nseeds, const char *password, int timeout_ms);
/* Closes every connection: the callbacks of commands still owed run first
 * (ACONN_LOST or ACONN_NOT_SENT). NULL is a no-op. */
void acluster_free(struct acluster *c);

/* Queues argv, whose keys are in slot `slot` (cluster_keyslot of a key):
 * RCONN_OK, or RCONN_ERR when refused at once (the router is closing). */
rconn_status acluster_command(struct acluster *c, int slot, aconn_cb *cb, void *arg,
                              int argc, const char **argv);
/* Queues a call of script s (as aconn_eval) on the master of slot `slot`. */
rconn_status acluster_eval(struct acluster *c, int slot, aconn_cb *cb, void *arg,
                           struct rscript *s, int nkeys, int argc, const char **argv);

/* In a callback: true when its command was sent again after a redirection
 * (ASK, TRYAGAIN, ...). Commands queued behind it for the same slot may then
 * have run before it: on one Redis they run in the order queued, here only
 * while nothing is redirected. */
int acluster_redirected(const struct acluster *c);

/* In a callback with ACONN_REPLY: the connection (to one master) whose reply
 * it is, when the command was not redirected; else NULL. Owned by the
 * router: valid until acluster_free. */
struct aconn *acluster_answered_by(const struct acluster *c);

/* The slot map as last learnt (nmasters 0 before the first). */
const struct cluster_map *acluster_map(const struct acluster *c);
/* Redirections followed so far (MOVED, ASK, retries). */
struct acluster_stats {
    unsigned long moved, ask, retries, refreshes;
};
void acluster_stats(const struct acluster *c, struct acluster_stats *out);

#endif
