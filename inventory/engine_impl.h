/* engine_impl.h: what the event loop's runner shares between its files:
 * engine.c (tickets in, queues, group commits, the atomic mode, the
 * connections) and engine_single.c (orders by themselves, the order
 * machine's driver). Private to inventory/. */
#ifndef SECKILL_ENGINE_IMPL_H
#define SECKILL_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "aconn.h"
#include "engine.h"
#include "hold.h"
#include "path.h"
#include "squeue.h"

struct ehold;
struct esingle;

/* A connection for blocking commands, to one node. */
struct blocking_conn {
    struct aconn *c;
    char host[64];
    int port;
};

struct inv_engine {
    struct inv *inv;
    struct event_base *base;
    inv_path path;
    int batch;
    struct aconn *conn;       /* one Redis */
    struct acluster *cluster; /* or a Redis Cluster's masters */
    struct inv_conns conns;   /* conn or cluster, and one per lock node */
    int nnodes;
    struct rconn *idle; /* the session's: never connected, nothing on the
                           loop runs a blocking command */
    struct inv_session *s;
    _Atomic int inflight;
    struct event *kick; /* starts the ready queues' holds, once per turn */
    /* Each SKU segment is served by one loop of the process (its owner), so
     * that the loops never contend with each other for a segment lock; a
     * ticket for a segment of another loop goes to that loop's inbox. */
    struct inv_engine **loops; /* all of them, this one included */
    struct inv_engine *self;   /* loops before inv_engine_link */
    int nloops, index;
    int closing; /* inv_engine_free began: nothing goes to another loop */
    pthread_mutex_t inbox_mu;
    struct inv_ticket *inbox; /* from other loops, newest first */
    struct event *inbox_ev;
    struct squeues queues;
    /* Contention: while a hold of this loop
     * holds its lock, another hold only tries its own (no wait for it); a
     * queue whose lock was taken backs off until a hold of this loop ends
     * (progress), and waits for the lock (in its queue, or polling) only
     * when the loop holds nothing. Fewer, fuller holds than one waiting hold
     * per segment. */
    int open_holds;
    struct squeue *backed_off;
    struct ehold *holds, *free_holds;
    struct esingle *singles, *free_singles;
    /* Placed orders wait for their replicas (--min-replicas-acked): acks,
     * given the connection whose reply is being handled (answering). */
    int acked;
    struct inv_acks *acks;
    struct aconn *answering;
    /* Connections for the waits for a hand-off (BLPOP), one per wait in
     * flight, kept for the next: all of them, and the idle ones. */
    struct blocking_conn *blocking, *idle_blocking;
    int nblocking, nidle;
    struct inv_engine_config cfg;
};

/* engine.c */

/* t is final: answered (a placed order first waits for its replicas when
 * asked to; its commit came back on e->answering). */
void eng_ticket_done(struct inv_engine *e, struct inv_ticket *t);
/* Sends t on its way: the atomic script, its segment's queue, or, its SKU's
 * layout unknown, the order machine (one Redis: its peek learns it) or the
 * directory's read (a cluster: eng_learn). */
void eng_dispatch(struct inv_engine *e, struct inv_ticket *t);
/* On a cluster: learns the shards of t's SKU, then sends t on (engine.c). */
void eng_learn(struct inv_engine *e, struct inv_ticket *t);
/* On a cluster: t is short in its shard; units are brought there from the
 * others, then t is sent on again, or answered sold out (engine_refill.c). */
void eng_refill(struct inv_engine *e, struct inv_ticket *t);
/* Runs a transfer's step x on ticket t (inflight counted) by the order
 * machine; t->done once final (engine_single.c). */
struct inv_xfer;
void eng_single_xfer(struct inv_engine *e, struct inv_ticket *t, const struct inv_xfer *x);
/* Queues t at its segment, on the loop that owns the segment. */
void eng_enqueue(struct inv_engine *e, struct inv_ticket *t);
/* The connection that carried the reply being handled (NULL when none). */
struct aconn *eng_answered_by(const struct inv_engine *e, aconn_result res);
/* An idle connection for a blocking command (a hand-off wait) on hold h's
 * data Redis, and its return. */
struct aconn *eng_blocking_get(struct inv_engine *e, const struct inv_hold *h);
void eng_blocking_put(struct inv_engine *e, struct aconn *c);

/* engine_single.c */

/* Places t by itself on this loop, from its peek on; queue_ok: a segment
 * that holds its qty may serve it in a group commit. */
void eng_single_start(struct inv_engine *e, struct inv_ticket *t, int queue_ok);
/* Answers replay t with its first order (t->order.id). */
void eng_single_load(struct inv_engine *e, struct inv_ticket *t);
/* The engine is going: the machines in flight are given up, their tickets
 * answered unavailable if not yet; then the kept ones are freed. */
void eng_singles_stop(struct inv_engine *e);
void eng_singles_free(struct inv_engine *e);

#endif
