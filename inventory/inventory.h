/* inventory: SKUs split into segments, and the order critical section.
 *
 * A `struct inv` is the process-wide configuration (lock mode, wait, work,
 * fencing, order-id generator); each thread opens an `struct inv_session`
 * with its own data-Redis connection. The critical section is written once,
 * in inv_order_place(); the lock mode only changes the guard around it:
 *
 *   read the segment's stock -> check stock and the user's limit ->
 *   --work-us of business work -> write the new stock and record the order
 *
 * The write is one Lua script (the commit) that also refuses the write when
 * the SKU was reset since the order started (the SKU epoch: the shared side of
 * the SKU's read-write lock, for free) or, with fencing, when the segment's
 * lock was granted to someone else since (a stale holder). The `atomic` mode
 * has no lock: one script checks, decrements and records.
 *
 * Redis keys of SKU s (the {s} hash tag keeps them on one cluster slot):
 *   sk:{s}:meta    hash  initial segments limit epoch sold orders remaining
 *   sk:{s}:stock   hash  segment index -> remaining
 *   sk:{s}:avail   zset  segment index -> remaining, the segments holding any
 *                        (with meta's remaining: the index that spares every
 *                        order path a scan of the K segments)
 *   sk:{s}:init    hash  segment index -> initial
 *   sk:{s}:sold    hash  segment index -> units sold
 *   sk:{s}:buyers  hash  user id -> units bought
 *   sk:{s}:orders  list  "id user qty segment", one per order (the audit trail);
 *                        an order of several segments adds " seg:units,..."
 *   sk:{s}:idem    hash  Idempotency-Key -> "order-id qty user-id"
 *   sk:{s}:lock:i  the segment lock (and ...:fence its fencing counter)
 *   order:<id>     hash  sku user_id qty segment [segments "seg:units,..."]
 *
 * An order is served by one segment when one can: its home (user hash mod
 * K), else one chosen by the user hash among those holding enough, so that
 * the orders that leave an emptied home spread over what is left. When no
 * single segment holds qty but the SKU does, it takes units from several:
 * it locks them in ascending segment order (two such orders cannot each
 * hold what the other waits for) and one commit, fenced on each, writes
 * them all or nothing. */
#ifndef SECKILL_INVENTORY_H
#define SECKILL_INVENTORY_H

#include <stdint.h>

#include "clock.h"
#include "acluster.h"
#include "aconn.h"
#include "lock.h"
#include "orderid.h"
#include "segment.h"
#include "soldout.h"

#define INV_ID_MAX 64 /* SKU and user ids: 1..64 chars of [A-Za-z0-9_.:-] */
#define INV_IDEM_MAX 128
#define INV_MAX_STOCK 1000000000LL
#define INV_MAX_LIMIT 1000000

typedef enum {
    INV_PLACED = 0,    /* a new order was recorded */
    INV_REPLAYED,      /* Idempotency-Key seen before: *order is the first answer */
    INV_OK,            /* read or admin operation done */
    INV_CREATED,       /* PUT made a new SKU */
    INV_NOT_FOUND,     /* unknown SKU or order */
    INV_SOLD_OUT,      /* no segment holds the quantity */
    INV_LIMIT,         /* the user already bought per_user_limit units */
    INV_BAD_QTY,       /* qty outside 1..per_user_limit */
    INV_BUSY,          /* no segment lock within the wait, or the commit was fenced off */
    INV_UNAVAILABLE,   /* Redis unreachable or failing; nothing can have been written */
    INV_IDEM_MISMATCH, /* Idempotency-Key used before for another user or qty */
    INV_OUTCOME_UNKNOWN, /* the commit was sent but its answer never came: order->id
                            may exist (inv_order_get tells) */
} inv_status;

struct inv_config {
    struct lock *lock; /* NULL for the atomic mode */
    int wait_ms;       /* longest wait for a segment lock */
    int work_us;       /* simulated work inside the critical section */
    int fencing;       /* fenced commits (needs a fenced lock) */
    struct orderid_gen *ids;
    struct orderid_lease *lease; /* NULL: ids need no lease check */
    struct soldout *soldout;     /* NULL: every order asks Redis (soldout.h) */
    /* A placed order is answered only once this many replicas of the data
     * Redis acknowledged it (WAIT), else outcome unknown; 0: at once. */
    int min_replicas_acked;
    int acked_wait_ms; /* how long WAIT waits for them */
    /* A Redis Cluster (seeds[0..nseeds-1]) instead of one Redis: a session
     * then routes its work to the masters itself (the rconn it is given is
     * not used) and a SKU is kept in one shard per master. */
    int cluster;
    const struct rconn_addr *seeds;
    int nseeds;
    const char *password;
    int timeout_ms;
};

/* Units of an order taken from one segment. */
struct inv_part {
    int segment;
    int qty;
};

struct inv_order {
    uint64_t id;
    char sku[INV_ID_MAX + 1];
    char user_id[INV_ID_MAX + 1];
    int qty;
    int segment; /* the (first) segment it was served from */
    int nparts;  /* segments it drew from: 1, or more (parts lists them) */
    struct inv_part parts[INV_MAX_SEGMENTS];
};

struct inv_segment_report {
    long long initial, remaining, sold;
};

struct inv_sku_report {
    char sku[INV_ID_MAX + 1];
    long long initial, remaining, sold, oversold, orders;
    int limit;
    int nsegments;
    struct inv_segment_report segments[INV_MAX_SEGMENTS];
};

struct inv_audit {
    char sku[INV_ID_MAX + 1];
    long long initial, orders, sold, oversold, limit_breaches, duplicate_order_ids;
    long long remaining; /* the stock left in its segments */
    int consistent;      /* the records agree with the counters, segment by segment,
                            the stock index with the stock, sold + remaining with the
                            initial stock, and no invariant is broken */
};

/* Counters of the critical section, process-wide. */
struct inv_stats {
    uint64_t placed, replayed, sold_out, limit, busy, unavailable, fenced_off,
        epoch_changed, spilled, commits_after_lease, outcome_unknown, idem_mismatch,
        id_collisions,  /* an order id found issued before: a fresh one was drawn */
        sold_out_local, /* of sold_out: answered from memory, without Redis */
        unacked;        /* of outcome_unknown: placed, but the replicas did not
                           acknowledge it in time (min_replicas_acked) */
};

struct inv;
struct inv_session;

/* Validates an id (SKU or user): 1..64 chars of [A-Za-z0-9_.:-]. */
int inv_id_valid(const char *id);

struct inv *inv_new(const struct inv_config *cfg);
void inv_free(struct inv *inv); /* NULL is a no-op; sessions must be freed first */
void inv_stats(const struct inv *inv, struct inv_stats *out);

/* A session for the calling thread; rc (borrowed) is its data-Redis connection. */
struct inv_session *inv_session_new(struct inv *inv, struct rconn *rc);
void inv_session_free(struct inv_session *s); /* NULL is a no-op */

/* Places an order of qty units of sku for user_id. idem_key (may be NULL) makes
 * a retry by the same user for the same qty return the first order
 * (INV_REPLAYED); the key used before by another user or for another qty is
 * INV_IDEM_MISMATCH. On INV_PLACED/INV_REPLAYED *order is filled. On
 * INV_OUTCOME_UNKNOWN order->id names the order that may have been placed.
 * Any other status placed nothing and changed no state. An order id found
 * taken (issued twice) is never overwritten: the order draws another. */
inv_status inv_order_place(struct inv_session *s, const char *sku, const char *user_id,
                           int qty, const char *idem_key, struct inv_order *order);

/* ---- orders in batches (batch.h queues and runs them) ----------------------
 *
 * An order that waits for a group commit is a ticket. The HTTP side opens it
 * (inv_ticket_open: what memory can answer, the order id); a batch thread
 * runs the tickets of one SKU segment under one lock hold (inv_ticket_batch)
 * and places by itself each ticket the batch left undecided
 * (inv_ticket_single), then calls its done(). */
struct inv_ticket {
    char sku[INV_ID_MAX + 1];
    char user_id[INV_ID_MAX + 1];
    char idem_key[INV_IDEM_MAX + 1]; /* "" for none */
    int qty;
    int home;         /* home segment; -1 while the SKU's segment count is unknown */
    int gene;         /* on a cluster, the gene of the home segment's shard, which
                         holds the order (-1 while unknown, and on one Redis) */
    int seg;          /* the segment whose queue it waits in: home, unless home
                         is known empty or a batch sent it on; -1 as home */
    int hops;         /* batches that sent it on to another segment */
    int64_t start_us; /* when it was opened (clock_now_us): its wait counts from here */
    inv_status st;    /* the outcome; INV_OK while undecided */
    struct inv_order order;
    void (*done)(struct inv_ticket *t); /* called once when st is final */
    void *owner;                        /* the caller's */
    struct inv_ticket *next;            /* the batcher's queue */
    /* the event-driven path's (engine.c) */
    void *engine;
    uint64_t link; /* the link (rconn.h) that carried its commit; 0: none known */
    uint64_t seen; /* inv_atomic_send's */
    int tries;     /* sends so far */
};

/* Fills t for an order as inv_order_place takes it. Returns INV_OK when the
 * ticket must go to Redis (t->home set, -1 when unknown), else the final
 * status (sold out from memory, no order id without the worker lease), which
 * is counted as an answer already. */
inv_status inv_ticket_open(struct inv *inv, struct inv_ticket *t, const char *sku,
                           const char *user_id, int qty, const char *idem_key);
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
 * status or stays INV_OK: a ticket the segment could not serve has t->seg set
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

/* Creates (INV_CREATED) or resets (INV_OK) sku: stock split over segments,
 * orders, buyers and idempotency keys cleared, in one atomic step. In-flight
 * orders of the previous epoch are refused at commit. */
inv_status inv_sku_put(struct inv_session *s, const char *sku, long long stock,
                       int segments, int limit);

inv_status inv_sku_get(struct inv_session *s, const char *sku,
                       struct inv_sku_report *out);
inv_status inv_order_get(struct inv_session *s, uint64_t id, struct inv_order *out);
/* Recomputes the SKU's figures from its order records, not from the counters. */
inv_status inv_audit(struct inv_session *s, const char *sku, struct inv_audit *out);

/* True when Redis answers PING. */
int inv_ping(struct inv_session *s);

#endif
