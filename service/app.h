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
#include "roompace.h"
#include "roomtoken.h"
#include "sink.h"
#include "store.h"

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
    struct svc_store *store;           /* --postgres; NULL without */
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
    /* The waiting rooms (issue 48): the key that signs tickets and passes
     * (--room-key-file, or shared through Redis), the rooms known here and
     * their pacer (a duty on loop 0), and the passes an order was refused
     * for, by reason (room_pass_status). */
    const struct room_key *room_key;
    struct inv_rooms *rooms;
    _Atomic uint64_t passes_refused[ROOM_PASS_NSTATUS];
    _Atomic int draining; /* 0 serving, else where the drain is (SVC_DRAIN_*) */
    _Atomic int inflight;
};

/* The drain's steps (svc_server_stop), in app->draining: GRACE, /readyz 503
 * and connections still accepted, so that a balancer that asks /readyz leaves
 * first; CLOSED, none accepted any more and each answer closes its connection
 * (Connection: close), so that a balancer stops sending on its kept-alive
 * ones before they are closed. Not earlier: while the instance still
 * accepts, closing every connection would only bring new ones, each of which
 * can be caught in the listen queue when it closes. */
enum { SVC_DRAIN_GRACE = 1, SVC_DRAIN_CLOSED = 2 };

#endif
