/* app: what every handler can reach, process-wide. Its own header so that
 * routes (which serves requests with it) and metrics (which renders its
 * counters) both see it without seeing each other. */
#ifndef SECKILL_APP_H
#define SECKILL_APP_H

#include <stdatomic.h>

#include "config.h"
#include "durability.h"
#include "health.h"
#include "inventory.h"
#include "lock.h"
#include "sink.h"

struct event_base;

/* Read-only after start but for the atomics. */
struct svc_app {
    const struct svc_config *cfg;
    struct inv *inv;
    struct lock *lock; /* NULL in atomic mode */
    struct orderid_lease *lease;
    struct orderid_gen *ids;           /* its worker id is this instance's id */
    struct svc_durability *durability; /* NULL: not watched (gauge 0) */
    struct svc_health *health;         /* the data Redis answers (/readyz) */
    struct svc_sink *sink;             /* --postgres; NULL without */
    int replicas_acked;                /* --min-replicas-acked, resolved */
    int cluster;                       /* the data Redis is a Redis Cluster */
    /* The process's background duties (lock watchdog, sold-out listener,
     * durability check, worker-id lease) run on loop 0 (server.c): attach
     * hands them its base before any loop thread runs; detach takes them off
     * once every loop thread has stopped, before any engine or base goes.
     * Either may be NULL. */
    void (*duties_attach)(struct svc_app *app, struct event_base *base);
    void (*duties_detach)(struct svc_app *app);
    void *duties; /* theirs */
    _Atomic int draining;
    _Atomic int inflight;
};

#endif
