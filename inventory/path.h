/* path.h: the order path's steps, as the runners call them: engine.c (the
 * event loops) and batch.c (the batch threads). Private to inventory/ (and
 * its unit tests): the service sees inventory.h and engine.h only.
 *
 *   a ticket's route and bound ....... layout.c
 *   a ticket by itself, its finish .... order.c, ticket.c
 *   replicas' acknowledgement ......... ticket.c (a thread's), ack.c (a loop's)
 *   the group commit (the hold) ....... hold.c, blocking and event-driven
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
/* Runs n (>= 1) tickets of one SKU on segment seg in one critical section:
 * one lock hold, one stock read, one commit. A ticket whose home is another
 * segment counts as spilled when placed. Every ticket either gets its final
 * status or stays INV_PENDING: a ticket the segment could not serve has t->seg set
 * to the segment to queue at next (another one, chosen by the commit among
 * those holding enough), else it needs inv_ticket_single (no single segment
 * holds its qty, the SKU was reset, the id was taken). */
void inv_ticket_batch(struct inv_session *s, struct inv_ticket **t, int n, int seg);
/* The same in two steps, so that a thread does other work during the orders'
 * --work-us instead of sleeping. inv_hold_open takes the lock (with try_only,
 * without waiting: a thread that holds other locks must not wait for one, or
 * two instances can each hold what the other waits for) and reads the stock.
 * It returns INV_HOLD_OPEN when h is open: inv_hold_commit must follow, from
 * the same session, at or after h->due_us. INV_HOLD_ENDED: the batch ended
 * there, every ticket final or undecided as above. INV_HOLD_TAKEN (try_only):
 * the lock is taken, nothing done. The atomic mode has no hold: its pipeline
 * runs in inv_hold_open. */
struct inv_hold {
    struct inv_ticket **t;
    int n, seg;
    int gene; /* the segment's shard (a cluster's), or -1 */
    char lkey[128];
    struct lock_grant g;
    long long stock;
    char epoch[24];
    uint64_t seen;  /* the sold-out memory's generation before the read */
    long long left; /* once open: an upper bound of the segment's stock, after
                       inv_hold_commit what the commit left */
    int64_t due_us; /* clock_now_us() when the orders' work is done */
    /* the event-driven hold's (inv_hold_send) */
    struct lock_step step;
    int64_t deadline_us; /* the oldest ticket's wait ends */
    int try_only;        /* its attempt does not wait (inv_hold_send) */
    int placed;          /* tickets the commit placed */
    int state;           /* what is in flight (inventory.c) */
    const struct inv_conns *cs;
    aconn_cb *cb; /* each answer, with arg */
    void *arg;
    struct inv_slot {
        struct inv_hold *h;
        int i;
    } slot[LOCK_STEP_CMDS + 1]; /* a command's answer says which it is for */
    int index;     /* the answer in hand: a lock step's command, or LOCK_STEP_CMDS
                      (the hold's own: the read, the commit) */
    int owed;      /* answers still to come */
    int with_read; /* the read went behind the lock's step */
    int releasing; /* the release went with the commit */
    int noscripts; /* commands sent again after Redis lost their script */
};
/* What a hold does next (inv_hold_open, inv_hold_ready). */
typedef enum {
    INV_HOLD_OWED,   /* more answers are owed: it sent the next step */
    INV_HOLD_OPEN,   /* the lock is held and the stock read: inv_hold_commit_send
                        at or after h->due_us */
    INV_HOLD_TAKEN,  /* try_only (an attempt that does not wait): the lock is
                        taken; nothing is held and no ticket touched */
    INV_HOLD_QUEUED, /* the lock is taken and h queued for it: inv_hold_wait_send
                        on a connection for blocking commands, its answer to
                        inv_hold_waited, which sends the read (handed over) or
                        the next attempt */
    INV_HOLD_POLL,   /* the lock is taken and its mode polls: inv_hold_retry_send
                        after h->step.retry_us */
    INV_HOLD_ENDED,  /* the batch ended there: every ticket final (Redis
                        unreachable: unavailable; busy) or undecided, to go by
                        itself (inv_ticket_single; t->seg -1 when it must not be
                        sent on: the SKU's layout forgotten) */
} inv_hold_next;
inv_hold_next inv_hold_open(struct inv_session *s, struct inv_ticket **t, int n, int seg,
                            int try_only, struct inv_hold *h);
void inv_hold_commit(struct inv_session *s, struct inv_hold *h);

/* Places one ticket by itself: peek, then the candidate segments in turn. */
void inv_ticket_single(struct inv_session *s, struct inv_ticket *t);
/* Gives t the final status st without running it (counted as an answer). */
void inv_ticket_fail(struct inv *inv, struct inv_ticket *t, inv_status st);

/* Replicas' acknowledgement (inv_config's min_replicas_acked): the tickets
 * among t[0..n-1] that were placed on s's connection are answered placed
 * only when WAIT says that many replicas have every write of that
 * connection; else outcome unknown (the order exists on the master, and
 * GET /orders/{id} tells whether it survived). Blocking; a no-op when none
 * is asked for. */
void inv_tickets_durable(struct inv_session *s, struct inv_ticket **t, int n);
/* The WAIT of that check, for a caller that sends it itself (an event
 * loop): argv[0..2], 3 strings, into buf. 0 when none is asked for. */
int inv_durable_argv(const struct inv *inv, const char *argv[3], char buf[2][16]);
/* Its answer r (NULL: none came) for placed ticket t: unacknowledged turns
 * it outcome unknown. */
void inv_ticket_acked(struct inv *inv, struct inv_ticket *t, const redisReply *r);

/* ---- the event-driven path (engine.c) ----------------------------------- */

/* The connections of one event loop: the data Redis, and the lock's nodes
 * (lock_nodes: node[i] is its i-th, for redlock). */
struct inv_conns {
    struct aconn *data;
    struct aconn **node;
    struct acluster *cluster; /* a Redis Cluster's masters instead of data */
};

/* What the event-driven path does next with a ticket after an answer. */
typedef enum {
    INV_STEP_DONE = 0, /* t->st is final */
    INV_STEP_AGAIN,    /* nothing was written: send it again (a fresh id, or a
                          script Redis had to load again) */
    INV_STEP_ALONE,    /* nothing was written, and the rest needs more round
                          trips than this path takes (a replay loads its first
                          order): inv_ticket_single, on a batch thread */
} inv_step;

/* Where an order's Redis work runs (engine.c). */
typedef enum {
    INV_PATH_THREADS = 0, /* on the batch threads: modes without lock steps (zk) */
    INV_PATH_ATOMIC,      /* on the loop, one atomic script per order */
    INV_PATH_HOLDS,       /* on the loop, group commits (inv_hold_send) */
} inv_path;
inv_path inv_loop_path(const struct inv *inv);
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

/* The event-driven form of a hold (engine.c), for modes with lock steps
 * (lock_try_step): the lock's steps on the data Redis and the lock's nodes
 * (cs), the read of the stock behind the step that grants, and after the
 * orders' work the batch commit with the release. The caller sends nothing
 * itself: every answer goes to cb(arg, ...), which hands it to
 * inv_hold_answer (or, once committing, inv_hold_committed), and while
 * h->owed is 0 nothing more is coming: then inv_hold_ready says what next
 * (inv_hold_next).
 * inv_hold_commit_send: the commit and the release; inv_hold_committed
 * returns 1 for the commit's answer, after which every ticket is final or
 * undecided as after inv_ticket_batch; the hold is over when h->owed is 0
 * after that. */
void inv_hold_send(struct inv_session *s, struct inv_hold *h, struct inv_ticket **t,
                   int n, int seg, int try_only, const struct inv_conns *cs, aconn_cb *cb,
                   void *arg);
void inv_hold_retry_send(struct inv_session *s, struct inv_hold *h);
void inv_hold_answer(struct inv_session *s, struct inv_hold *h, aconn_result res,
                     const redisReply *r);
inv_hold_next inv_hold_ready(struct inv_session *s, struct inv_hold *h);
int inv_hold_wait_send(struct inv_session *s, struct inv_hold *h, struct aconn *blocking,
                       aconn_cb *cb, void *arg);
void inv_hold_waited(struct inv_session *s, struct inv_hold *h, aconn_result res,
                     const redisReply *r);
void inv_hold_commit_send(struct inv_session *s, struct inv_hold *h, aconn_cb *cb,
                          void *arg);
int inv_hold_committed(struct inv_session *s, struct inv_hold *h, aconn_result res,
                       const redisReply *r);
/* Gives up open hold h without its commit (the loop is stopping): the
 * tickets are final (unavailable), nothing was written, and the lease runs
 * out in Redis. */
void inv_hold_abandon(struct inv_session *s, struct inv_hold *h);

#endif
