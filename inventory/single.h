/* single: one order by itself on an event loop, the order machine. What a
 * group commit (hold.h) cannot serve goes here: an order no single segment holds (peek.lua's plan: a part
 * on each of several segments), an idempotent replay (its first order is
 * loaded), a ticket that hopped too often between segments, the first
 * orders of a SKU whose layout this process has not learnt. Its calls are
 * order.c's (peek.lua, commit.lua), each a command sent and answered:
 *
 *   state        in flight                      when nothing more is owed
 *   -----------  -----------------------------  ------------------------------
 *   PEEKING      peek.lua                       a replay: LOADING; a plan: a
 *                                               part's LOCKING; a segment that
 *                                               holds qty: DONE, the ticket
 *                                               queued there (way QUEUE), or
 *                                               its part's LOCKING; else DONE
 *                                               (refused), or on a cluster
 *                                               DONE, way SHORT (the shard is
 *                                               short)
 *   LOADING      the first order's record       RELEASING (t final)
 *   LOCKING      part i's hold (hold.h: its     held with its stock read: part
 *                LOCKING, READING, WAITING,     i + 1's LOCKING, or WORKING;
 *                PAUSED), the earlier parts     short (one segment): RELEASING,
 *                held                           then the next candidate; not
 *                                               held: RELEASING (t final)
 *   WORKING      nothing: the --work-us timer   COMMITTING
 *   COMMITTING   commit.lua over the parts      RELEASING, or LOADING (the key
 *                taking units, every part's     was a replay's)
 *                release behind it where it
 *                may share its pipeline
 *   RELEASING    the parts' releases            DONE, or PEEKING again (the
 *                                               plan fell short, nothing was
 *                                               written), or the next candidate
 *   DONE         nothing: t final, or pending with its way on
 *
 * Parts lock in ascending segment order, each waiting for its lock at most
 * until the ticket's --wait-ms (as the blocking path): two orders that need
 * the same segments cannot each hold what the other waits for, and a group
 * commit holds one segment and waits for nothing while it holds it. A
 * machine's locks are its own (inv_single_start's session), never a re-entry
 * of a lock the loop's holds have.
 *
 * Thread safety: a machine belongs to its loop's thread. */
#ifndef SECKILL_SINGLE_H
#define SECKILL_SINGLE_H

#include "hold.h"
#include "order.h"

typedef enum {
    SINGLE_PEEKING = 0,
    SINGLE_LOADING,
    SINGLE_LOCKING,
    SINGLE_WORKING,
    SINGLE_COMMITTING,
    SINGLE_RELEASING,
    SINGLE_DONE,
} inv_single_state;

/* The machine answers its driver with path.h's inv_do: AWAIT, DUE (its
 * work, or a part's pause, until m->due_us), HANDOFF (a part waits for a
 * hand-off: inv_single_wait_send on a connection for blocking commands, its
 * answer to inv_single_on_handoff), OVER (nothing held or owed). After any of
 * them, a ticket whose t->st is final is answered (once; its commit's answer
 * is the one in hand); one still pending at OVER has its way on (t->way):
 * QUEUE, t->seg holds its qty and a group commit serves it; SHORT, on a Redis
 * Cluster its shard is short or its SKU's shards are no longer known
 * (nothing written). */

/* A step of a transfer of units between the shards of a Redis Cluster
 * (engine_refill.c): xfer_out.lua or xfer_in.lua (xin) with args (see
 * inv_xfer_call_init) on segment t->seg of the shard of t->gene, under that
 * segment's lock, fenced. */
struct inv_xfer {
    int xin;
    int nargs;
    const char *args[6];
    const struct sku_layout *layout; /* its refill's (inv_hold's layout) */
};

struct inv_single_part {
    struct inv_hold h; /* its lock, its stock read (h.stock) */
    struct inv_single *m;
    int take; /* units the order takes from it */
};

struct inv_single {
    inv_single_state state;
    struct inv_ticket *t;
    struct inv_ticket *tv[1]; /* t, as the parts' holds take tickets */
    struct inv_session *s;
    const struct inv_conns *cs;
    aconn_cb *cb; /* each answer, with arg */
    void *arg;
    struct order_ctx c;
    struct inv_single_part *part; /* [cap]; nparts in use, ascending segments */
    int nparts, cap, cur;
    int cand;   /* the peek's candidate being tried, or -1 (a plan) */
    int rounds; /* peeks */
    int queue_ok;
    int own;       /* the machine's own command is owed */
    int index;     /* the answer in hand: part index, or -1 (the machine's own) */
    int noscripts; /* commands sent again after Redis lost their script */
    int after;     /* what follows RELEASING (single.c) */
    uint64_t seen; /* the sold-out memory's generation before the peek */
    int64_t due_us;
    const struct inv_xfer *xfer; /* a transfer's step, not an order */
};

/* Starts machine m for ticket t (its SKU's layout known or not) with peek.lua
 * on cs; its locks are taken on session s (a lock owner of its own). queue_ok:
 * when one segment holds qty, t may go to that segment's queue (OVER, way
 * QUEUE), else the machine places it there itself. Every answer of a
 * command of m goes to cb(arg, ...), which hands it to inv_single_on_reply. */
inv_do inv_single_start(struct inv_single *m, struct inv_session *s,
                               struct inv_ticket *t, int queue_ok,
                               const struct inv_conns *cs, aconn_cb *cb, void *arg);
/* Starts m for an idempotent replay whose first order's id is t->order.id:
 * LOADING. */
inv_do inv_single_load(struct inv_single *m, struct inv_session *s,
                              struct inv_ticket *t, const struct inv_conns *cs,
                              aconn_cb *cb, void *arg);
inv_do inv_single_on_reply(struct inv_single *m, aconn_result res,
                                  const redisReply *r);
inv_do inv_single_on_timer(struct inv_single *m);
/* Starts m for a transfer's step x (borrowed until over) on ticket t (t->xfer
 * set; its sku, gene, seg and start_us): LOCKING its one part, then the
 * script instead of the commit, the release behind it. t ends INV_PLACED
 * (units moved now: t->order.qty of them, or 1 applied), INV_SOLD_OUT
 * (none: the segment holds none, or applied before), INV_NOT_FOUND (the SKU
 * was reset since), INV_PENDING (Redis had lost the script: nothing ran, the
 * step runs again), INV_BUSY (its lock not had, or fenced off: nothing
 * written), INV_UNAVAILABLE, or INV_OUTCOME_UNKNOWN (no answer: it may have
 * run). */
inv_do inv_single_xfer(struct inv_single *m, struct inv_session *s,
                              struct inv_ticket *t, const struct inv_xfer *x,
                              const struct inv_conns *cs, aconn_cb *cb, void *arg);
/* HANDOFF: the hold that waits (for the driver's connection), and its wait
 * sent on blocking (false: not sent, then inv_single_attempt). */
const struct inv_hold *inv_single_waiting(const struct inv_single *m);
int inv_single_wait_send(struct inv_single *m, struct aconn *blocking, aconn_cb *cb,
                         void *arg);
inv_do inv_single_on_handoff(struct inv_single *m, aconn_result res,
                                    const redisReply *r);
inv_do inv_single_attempt(struct inv_single *m);
/* Gives m up while nothing is owed (the loop is stopping): t, when still
 * pending, is final (unavailable); the locks held run out in Redis. */
void inv_single_abandon(struct inv_single *m);
/* Frees what m allocated (not m). */
void inv_single_clear(struct inv_single *m);

#endif
