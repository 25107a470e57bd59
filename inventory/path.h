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

/* ---- the machines and their driver --------------------------------------
 *
 * The order path's work on a loop is done by machines, each a state table
 * beside its enum: the group commit (hold.h), the order by itself
 * (single.h), units brought to a short shard (engine_refill.h), and the
 * machines of one ticket: the atomic mode's script (atomic.c), a pay or a
 * cancel (life.c). A machine sends its own commands; each of its entries
 * answers the one driver (engine.c) what to do next: */
typedef enum {
    INV_DO_AWAIT = 0, /* commands are in flight: each answer to its on_reply */
    INV_DO_DUE,       /* nothing in flight until its due_us: then its on_timer */
    INV_DO_HANDOFF,   /* a lock's hand-off to wait for: its wait sent on a
                         connection for blocking commands (the driver's), the
                         answer to its on_handoff */
    INV_DO_STEP,      /* a ticket of its own to run (a transfer's step): once
                         final, its on_step */
    INV_DO_DECIDED,   /* its tickets are final, or pending with their way on
                         (t->way); the answers of its release are still owed */
    INV_DO_OVER,      /* nothing held or owed: its tickets are final, or
                         pending with their way on */
} inv_do;

/* Where a ticket still pending goes when its machine is over (t->way). */
typedef enum {
    INV_WAY_NONE = 0, /* nowhere: not expected, answered unavailable */
    INV_WAY_SEND,     /* its mode's way again, as when submitted */
    INV_WAY_QUEUE,    /* the group commit of segment t->seg (a hop) */
    INV_WAY_ALONE,    /* by itself: the order machine (single.h) */
    INV_WAY_LOAD,     /* an idempotent replay: its first order t->order.id is
                         loaded (single.h, LOADING) */
    INV_WAY_SHORT,    /* on a Redis Cluster, its shard is short or its SKU's
                         shards are not known: units brought from the others
                         (engine_refill.h), or its shards learnt first */
} inv_way;

/* Most sends of one ticket's command on the loop (a fresh id, a script
 * loaded again). */
#define INV_TRIES 4

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
/* The atomic mode's machine of one ticket t: the script that checks,
 * decrements and records its order, sent again (a fresh id, a script
 * loaded again) up to INV_TRIES times. Its answers go to cb(arg, ...), which
 * hands them to inv_atomic_on_reply. AWAIT or OVER. */
inv_do inv_atomic_start(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                        aconn_cb *cb, void *arg);
inv_do inv_atomic_on_reply(struct inv *inv, struct inv_ticket *t,
                           const struct inv_conns *cs, aconn_cb *cb, void *arg,
                           aconn_result res, const redisReply *r);

/* Sends a one-ticket machine's script (ticket.c): on a Redis Cluster to the
 * master of slot, else to the data Redis; cb(arg, ...) gets its answer. */
rconn_status inv_ticket_eval(const struct inv_conns *cs, int slot, aconn_cb *cb,
                             void *arg, struct rscript *script, int nkeys, int argc,
                             const char **argv);

/* The machine of a pay or cancel ticket t (inv_end_open), on the loop: the
 * order's record read, then the script; each answer (res, r: aconn_cb's) to
 * inv_end_on_reply, which sends the next step (AWAIT) or ends t (OVER: t->st
 * final; INV_OK still waits for the replicas: ack.h). */
inv_do inv_end_start(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                     aconn_cb *cb, void *arg);
inv_do inv_end_on_reply(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                        aconn_cb *cb, void *arg, aconn_result res, const redisReply *r);

/* The machine of a join ticket t (room.h inv_join_open), on the loop:
 * room_join.lua on the master of the room's slot, sent again when its script
 * was not loaded; OVER once it answered (t->st final, t->room its place). */
inv_do inv_join_start(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                      aconn_cb *cb, void *arg);
inv_do inv_join_on_reply(struct inv *inv, struct inv_ticket *t,
                         const struct inv_conns *cs, aconn_cb *cb, void *arg,
                         aconn_result res, const redisReply *r);

#endif
