/* path.h: the order path's steps, as the runner calls them: engine.c (the
 * event loops). Private to inventory/ (and its unit tests): the service sees
 * inventory.h and engine.h only.
 *
 *   a ticket's route and bound ....... layout.c
 *   a ticket by itself, its finish .... order.c, ticket.c
 *   replicas' acknowledgement ......... ticket.c (what it means), ack.c (the WAIT)
 *   the group commit (the hold) ....... hold.h
 *   the atomic mode's steps ........... atomic.c */
#ifndef SECKILL_PATH_H
#define SECKILL_PATH_H

#include "acluster.h"
#include "aconn.h"
#include "inventory.h"

/* Routes t as far as this process knows its SKU: sets t->home, and t->seg to
 * home, or, when home is known empty in this epoch, to a segment chosen by
 * the user hash among those not known empty. Returns t->seg, -1 when the
 * SKU's layout is not known. */
int inv_ticket_route(struct inv *inv, struct inv_ticket *t);
/* An upper bound of segment seg's stock as far as this process knows its SKU
 * (its share of the initial stock, 0 once seen empty), or -1 when unknown.
 * Stock only goes down within an epoch; after a reset the bound may be low
 * until the next hold reads the segment, so use it to size batches, never to
 * answer an order. */
long long inv_segment_bound(struct inv *inv, const char *sku, int seg);
/* On a Redis Cluster: the command that reads sku's directory (its shards'
 * genes, segments, initial stock, epoch) into argv, with key (keylen >= 96)
 * its key, whose slot is the master to ask; and the reading of its answer
 * into the layout cache: INV_OK, INV_NOT_FOUND (no such SKU), else
 * INV_UNAVAILABLE (no answer, or not one). */
void inv_dir_learn_cmd(const char *sku, char *key, size_t keylen, const char *argv[6]);
/* Reads a directory's "g,g,..." into genes (CLUSTER_MAX_MASTERS); the count,
 * or -1 when malformed. */
int inv_genes_parse(const char *text, int *genes);
inv_status inv_dir_learnt(struct inv *inv, const char *sku, const redisReply *r);
/* Gives t the final status st without running it (counted as an answer). */
void inv_ticket_fail(struct inv *inv, struct inv_ticket *t, inv_status st);

/* Replicas' acknowledgement (inv_config's min_replicas_acked): a placed
 * ticket is answered placed only when WAIT, on the link that carried its
 * commit, says that many replicas have every write of that link; else
 * outcome unknown (the order exists on the master, and GET /orders/{id}
 * tells whether it survived). The loop's acknowledgement is ack.c. The WAIT
 * of that check: argv[0..2], 3 strings, into buf. 0 when none is asked
 * for. */
int inv_durable_argv(const struct inv *inv, const char *argv[3], char buf[2][16]);
/* The key the writes of an acknowledgement round go to (ack.c): in gene's
 * slot on a cluster (gene >= 0), else one key for all. */
void inv_ack_key(int gene, char *buf, size_t len);
/* Its answer r (NULL: none came) for ticket t, placed or replayed (the
 * order its Idempotency-Key placed before, which may never have reached a
 * replica), or a pay or cancel that changed its order now or found it so:
 * unacknowledged turns it outcome unknown. */
void inv_ticket_acked(struct inv *inv, struct inv_ticket *t, const redisReply *r);

/* ---- the event-driven path (engine.c) ----------------------------------- */

/* The connections of one event loop: the data Redis, and the lock's nodes
 * (lock_nodes: node[i] is its i-th, for redlock). */
struct inv_conns {
    struct aconn *data;
    struct aconn **node;
    struct acluster *cluster; /* a Redis Cluster's masters instead of data */
    struct event_base *base;  /* the loop's: a lock step done elsewhere (zk) ends there */
    int closing; /* the loop is going (inv_engine_free): nothing more is sent */
};

/* What the event-driven path does next with a ticket after an answer. */
typedef enum {
    INV_STEP_DONE = 0, /* t->st is final */
    INV_STEP_AGAIN,    /* nothing was written: send it again (a fresh id, or a
                          script Redis had to load again) */
    INV_STEP_LOAD,     /* an idempotent replay, nothing written: t->order.id is
                          its first order's, whose record is the answer
                          (single.h, LOADING) */
    INV_STEP_ALONE,    /* nothing was written, and the rest needs what this
                          path does not do: on a cluster, units brought from
                          other shards (engine_refill.c) */
} inv_step;

/* Where an order's Redis work runs (engine.c). */
typedef enum {
    INV_PATH_ATOMIC = 0,  /* on the loop, one atomic script per order */
    INV_PATH_HOLDS,       /* on the loop, group commits (hold.h) */
} inv_path;
inv_path inv_loop_path(const struct inv *inv);
/* Counts a group commit of n tickets (inv_batch_stats). Any thread. */
void inv_count_batch(struct inv *inv, int n);
/* inv's lock (inv_config's), NULL for the atomic mode. */
struct lock *inv_lock(const struct inv *inv);
/* Queues the atomic script's call for ticket t on c (as aconn_eval:
 * RCONN_ERR refused, when nothing was queued). *seen is set to what inv_atomic_answer
 * needs back. */
rconn_status inv_atomic_send(struct inv *inv, struct inv_ticket *t,
                             const struct inv_conns *cs, aconn_cb *cb, void *arg,
                             uint64_t *seen);
/* What the atomic script's answer (res, r: aconn_cb's) means for t. */
inv_step inv_atomic_answer(struct inv *inv, struct inv_ticket *t, aconn_result res,
                           const redisReply *r, uint64_t seen);

/* Queues the step of pay or cancel ticket t (inv_end_open) that is next on cs
 * (as aconn_eval: RCONN_ERR refused, when nothing was queued). */
rconn_status inv_end_send(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                          aconn_cb *cb, void *arg);
/* What its answer (res, r: aconn_cb's) means for t: INV_STEP_AGAIN, send the
 * next step (or the same again: a script Redis had to load); INV_STEP_DONE,
 * t->st is final (INV_OK still waits for the replicas: ack.h). */
inv_step inv_end_answer(struct inv *inv, struct inv_ticket *t, aconn_result res,
                        const redisReply *r);

#endif
