/* engine: the order path of one event loop, the event-driven core.
 *
 * Each loop thread (service/server.c) owns an engine: its asynchronous Redis
 * connection (aconn) and the orders in flight on it. An order placed on the
 * loop is a ticket (inventory.h); its Redis work is queued on the loop's
 * connection and the loop goes on serving other requests while it is in
 * flight: no thread waits on Redis for it. Commands queued in one turn of the
 * loop leave in one write.
 *
 * Every order of every mode runs on the loops (inv_loop_path): the atomic
 * mode, a group commit per segment without a lock (the batch script reads
 * the stock itself; on a cluster, and for an order no single segment serves,
 * one script per order); and the group commits of the lock modes (none,
 * local, setnx, redis, redlock, zk): per SKU segment, tickets queue on the
 * loop, and one lock hold (hold.h) serves up to --batch of them: the lock's
 * steps (on the data Redis, and for redlock on one
 * connection per lock node, all nodes asked at once) with the stock read
 * behind the step that grants, the orders' work as a timer, the commit
 * pipelined with the release (redlock's: on the nodes, once the commit
 * answered). A taken lock is waited for as its mode does: in the lock's
 * queue (redis: a BLPOP on a connection of its own), or by polling with a
 * timer (local, setnx, redlock). zk's steps are done elsewhere: the lock's
 * ZooKeeper requests, and the wait for the predecessor's watch, run on the
 * zk loop's thread (lock.h, lock_step_start), whose end comes back to this
 * loop as an event; the read under a zk grant raises the segment's fence
 * (fence_read.lua). Orders arriving while a hold is in flight form the next
 * batch.
 *
 * One order by itself also runs on the loop, as the order machine of
 * single.h: a ticket that needs more than one segment, an idempotent replay
 * (its first order is loaded), one that hopped too often, the first orders
 * of a SKU whose layout this process has not learnt yet. On a Redis
 * Cluster, the loop also reads a SKU's directory to learn its shards, and
 * brings units to a shard that is short of an order's (engine_refill.c).
 *
 * Thread safety: an engine belongs to its loop's thread; t->done() is called
 * on that thread. */
#ifndef SECKILL_ENGINE_H
#define SECKILL_ENGINE_H

#include "inventory.h"

struct event_base;

/* The lock's nodes (redlock) come from the inv's lock (lock_nodes). */
struct inv_engine_config {
    const char *redis_host;
    int redis_port;
    const char *redis_password; /* NULL for none */
    int timeout_ms;             /* a command's answer, at most */
    int batch;                  /* most tickets one lock hold serves */
    int wait_ms;                /* longest wait for a segment lock */
    /* A Redis Cluster whose seeds are seeds[0..nseeds-1] instead of the one
     * Redis at redis_host:redis_port (used then for nothing but defaults) */
    int cluster;
    const struct rconn_addr *seeds;
    int nseeds;
};

struct inv_engine;

/* An engine on base (the caller's loop, which must outlive it). Never
 * returns NULL. */
struct inv_engine *inv_engine_new(struct inv *inv, struct event_base *base,
                                  const struct inv_engine_config *cfg);
/* Closes the connection: every ticket still in flight is answered first
 * (outcome unknown, or unavailable when it was never sent). NULL is a no-op.
 * On the loop's thread, or after it stopped. */
void inv_engine_free(struct inv_engine *e);

/* Makes the n engines of one process's loops share their SKU segments:
 * each segment is served by one of them (a hash of SKU and segment), so that
 * the loops never contend with each other for a segment lock; an order that
 * arrives on another loop is handed over through the owner's inbox (its
 * done() is then called on the owner's thread). Before any submit. */
void inv_engine_link(struct inv_engine **all, int n);

/* Places t, opened with inv_ticket_open; t->done(t) is called once when
 * t->st is final, and t must stay valid until then. On the loop's thread. */
void inv_engine_submit(struct inv_engine *e, struct inv_ticket *t);

/* Tickets in flight on the loop now. */
int inv_engine_inflight(const struct inv_engine *e);

#endif
