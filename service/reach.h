/* reach: what the log says about a dependency's reachability. One line when a
 * dependency that answered stops answering (level warn, event=<kind>_down),
 * one when it answers again (level info, event=<kind>_up, with how long it was
 * gone): once per transition, however many checks or requests fail between.
 *
 * Kinds, and who notes them:
 * - "redis": the data Redis, or on a Redis Cluster each master the map names
 *   (health.c, the round every HEALTH_EVERY_MS on loop 0);
 * - "lock_node": each of redlock's --lock-nodes (health.c, a PING each round);
 * - "zk": the ZooKeeper session of --lock zk (the session watcher, through
 *   lock_config's on_link; main.c).
 * A node starts up: start-up already waited for Redis (the worker-id lease),
 * so a node that never answered logs its first down, and nothing is logged
 * while all is well.
 *
 * Thread safety: none. A struct svc_reach is noted by one thread (its loop). */
#ifndef SECKILL_REACH_H
#define SECKILL_REACH_H

#include <stdint.h>

struct svc_reach {
    const char *kind; /* "redis", "lock_node", "zk" (static) */
    char addr[272];   /* host:port, or a ZooKeeper ensemble's list */
    int down;         /* its last word was a down line */
    int64_t down_us;  /* when (clock_now_us) */
};

/* r for the dependency kind at addr, up. */
void svc_reach_init(struct svc_reach *r, const char *kind, const char *addr);
/* It answered: logs <kind>_up when it was down. */
void svc_reach_ok(struct svc_reach *r);
/* It did not (reason says how, one short phrase): logs <kind>_down when it
 * was up. */
void svc_reach_failed(struct svc_reach *r, const char *reason);

#endif
