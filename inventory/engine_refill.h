/* engine_refill: on a Redis Cluster, units brought to the shard of an order
 * that is short there, as a machine an event loop drives (engine.c), as it
 * drives a hold (hold.h) and the order machine (single.h). shards.c tells
 * why and how transfers are safe. Each transfer's step is a ticket of its
 * own (r->step, t->xfer) that the driver runs: under its segment's lock by
 * the order machine (single.h: inv_single_xfer), or, in the atomic mode,
 * which takes no lock, the script alone; its placing waits for the replicas
 * as an order's does (--min-replicas-acked): a step taken by a master that a
 * failover then loses must not let the next one run.
 *
 *   state     in flight                          when nothing more is owed
 *   --------  ---------------------------------  -------------------------------
 *   SETTLE    each shard's remaining units, and  APPLY (transfers recorded and
 *             (pass 0) its transfers recorded    not deleted), else PLAN
 *   APPLY     one record's xfer_in.lua (a step), the next record; after the
 *             then its HDEL (not waited for)     last, SETTLE pass 1, then PLAN
 *   PLAN      nothing: the units left decide     over: the order sent on again
 *                                                (its shard holds qty), or sold
 *                                                out (too few; none at all is
 *                                                read twice: SETTLE again
 *                                                first); else FULLEST
 *   FULLEST   the giving shard's fullest         OUT, or (none left) PLAN
 *             segment (ZREVRANGE)
 *   OUT       xfer_out.lua there (a step)        IN, or (none taken) PLAN
 *   IN        xfer_in.lua on the order's home    PLAN, after its record's HDEL
 *             segment (a step)
 *
 * Anything that fails answers the order unavailable (busy when a lock was
 * not had): nothing is half done, since a record left behind is applied by
 * the next settle, here or in another process. Once the loop is closing
 * (cs->closing) nothing more is sent: the order is answered unavailable.
 *
 * Thread safety: a refill belongs to its loop's thread. */
#ifndef SECKILL_ENGINE_REFILL_H
#define SECKILL_ENGINE_REFILL_H

#include "inv_impl.h"
#include "single.h"

/* Most transfer records one settle applies (more wait for the next). */
#define REFILL_RECORDS 32

/* Where a refill is (r->state): see the table above. */
typedef enum {
    REFILL_SETTLE = 0,
    REFILL_APPLY,
    REFILL_PLAN,
    REFILL_FULLEST,
    REFILL_OUT,
    REFILL_IN,
} inv_refill_state;

/* The refill answers its driver with path.h's inv_do: AWAIT (reads are
 * owed: their answers to inv_refill_on_reply), STEP (run the transfer's step
 * r->step, r->x; once it is final, its replicas heard, inv_refill_on_step),
 * OVER (nothing owed: r->t is final, or pending with its way on, SEND: its
 * shard holds its qty now). */

struct inv_refill {
    inv_refill_state state;
    struct inv *inv;
    struct inv_ticket *t; /* the order */
    struct sku_layout l;
    const struct inv_conns *cs;
    aconn_cb *cb; /* each answer of a read, with arg */
    void *arg;
    int pass;      /* SETTLE: 0 reads the records too, 1 remaining only */
    int owed;      /* reads owed */
    int failed;    /* a read had no answer, or not one */
    int zero;      /* settles that found no unit anywhere */
    uint64_t seen; /* the sold-out memory's generation before the reads */
    long long left[CLUSTER_MAX_MASTERS];
    /* A read's answer says which shard, and what, it is for. */
    struct inv_refill_slot {
        struct inv_refill *r;
        int shard; /* index in the layout */
        int xout;  /* the transfers recorded there (HGETALL), else remaining (HGET) */
    } slot[2 * CLUSTER_MAX_MASTERS], fullest, *answer;
    struct inv_refill_record {
        int from, to, seg; /* genes, and the receiving segment */
        long long units;
        char id[24];
    } rec[REFILL_RECORDS];
    int nrec, cur;
    int home, giver; /* layout indexes: the order's shard, the one giving */
    long long need, want;
    struct inv_ticket step; /* the transfer's step in flight */
    int noscripts;          /* steps answered NOSCRIPT (run again, 4 at most) */
    struct inv_xfer x;
    char text[6][24]; /* the step's arguments (r->x.args point here) */
};

/* Whether t, short in its shard, may have units brought: 0 with *l its
 * SKU's layout; else -1, and t has its final status (sold out after
 * INV_REFILL_ROUNDS rounds that others emptied first; unavailable when its
 * layout is not known, without a cluster, or the loop closing). */
int inv_refill_check(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                     struct sku_layout *l);
/* Starts refill r (zeroed) for order t, checked, of layout l: SETTLE on
 * cs's cluster. Every answer of a read r sends goes to cb(arg, ...), which
 * hands it to inv_refill_on_reply. */
inv_do inv_refill_start(struct inv_refill *r, struct inv *inv,
                               struct inv_ticket *t, const struct sku_layout *l,
                               const struct inv_conns *cs, aconn_cb *cb, void *arg);
/* An answer (res, reply: aconn_cb's) to one of r's reads. */
inv_do inv_refill_on_reply(struct inv_refill *r, aconn_result res,
                                  const redisReply *reply);
/* r->step is final: INV_PLACED (r->step.order.qty units moved now, or 1:
 * applied now), INV_SOLD_OUT (none), INV_PENDING (Redis had lost the script:
 * nothing ran, run again), or a failure (single.h, inv_single_xfer). */
inv_do inv_refill_on_step(struct inv_refill *r);

#endif
