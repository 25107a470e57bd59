/* hold: a group commit. One hold of a segment's lock serves a batch of
 * tickets of one SKU: the lock, the read of the stock under it, the orders'
 * work (--work-us, side by side), one commit (inventory/lua/batch.lua) with
 * the release. A ticket whose home is another segment counts as spilled when
 * placed. After the commit every ticket is final, or still INV_PENDING with
 * its way on (t->way, path.h): one the segment could not serve queues at
 * t->seg (QUEUE: chosen by the commit among those holding enough), else it
 * goes by itself to the order machine (ALONE, single.h: no single segment
 * holds its qty, the SKU was reset, its id was taken, a replay).
 *
 * An event loop (engine.c) drives it: it sends and is answered, the hold is
 * the state machine below, and each entry tells the driver what to do next
 * (inv_do); the driver keeps only scheduling (queues, timers,
 * connections). The order machine (single.h) takes its parts' locks with
 * holds too.
 *
 *   state         in flight                     when nothing more is owed
 *   ------------  ----------------------------  ---------------------------------
 *   LOCKING       a step of the lock, the read  pending: LOCKING (the next step)
 *                 behind the step that grants   granted: READING, or WORKING
 *                                               taken: TAKEN (try only),
 *                                               WAITING (a queue), PAUSED (polls),
 *                                               ENDED (busy); failed: ENDED
 *   READING       the read alone, once granted  WORKING, or ENDED (not read)
 *   WAITING       a hand-off wait (blocking)    handed over: READING; else LOCKING
 *   PAUSED        nothing: a timer              LOCKING (inv_hold_on_timer)
 *   WORKING       nothing: the work's timer     COMMITTING (inv_hold_on_timer)
 *   COMMITTING    the commit, the release       the commit's answer decides the
 *                 behind it where it may go     tickets: RELEASING
 *   RELEASING     the release                   ENDED
 *   TAKEN, ENDED  nothing: the hold is over
 *
 * Thread safety: a hold belongs to one thread (its session's). */
#ifndef SECKILL_HOLD_H
#define SECKILL_HOLD_H

#include "path.h"

/* Where a hold is (h->state): see the table above. */
typedef enum {
    HOLD_LOCKING = 0,
    HOLD_READING,
    HOLD_WAITING,
    HOLD_PAUSED,
    HOLD_WORKING,
    HOLD_COMMITTING,
    HOLD_RELEASING,
    HOLD_TAKEN,
    HOLD_ENDED,
} inv_hold_state;

struct inv_hold {
    inv_hold_state state;
    struct inv_ticket **t;
    int n, seg;
    int gene; /* the segment's shard (a cluster's), or -1 */
    char lkey[128];
    char rwkey[128]; /* the SKU's read-write lock, whose read side a grant of
                        lkey takes (lock_step_read_of); "" on a cluster */
    int reading;     /* the caller holds another segment of the SKU (an order of
                        several: single.c), so a waiting writer does not refuse it */
    struct lock_grant g;
    long long stock; /* the segment's stock hash, read under the lock */
    long long back;  /* its units given back meanwhile, not folded yet (back.lua) */
    char epoch[24];
    /* a transfer's step: its refill's copy of the SKU's layout, which the
     * shared cache (a slot per name hash) may have given to another SKU since;
     * NULL: the cache's */
    const struct sku_layout *layout;
    uint64_t seen;  /* the sold-out memory's generation before the read */
    long long left; /* once open: an upper bound of the segment's stock, after
                       the commit what it left */
    int64_t due_us; /* clock_now_us() when the work is done, or the pause ends */
    int placed;     /* tickets the commit placed */
    /* the event-driven hold's */
    struct lock_step step;
    int64_t deadline_us; /* the oldest ticket's wait ends */
    int try_only;        /* its attempt does not wait */
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
    int reread;    /* the read found Redis without its script: read again */
};

/* ---- on an event loop: the state machine -------------------------------- */

/* Starts a hold of tickets t[0..n-1] on segment seg: its lock's first step
 * on cs (the data Redis, the lock's nodes). Every answer of a command the
 * hold sends goes to cb(arg, ...), which hands it to inv_hold_on_reply. */
inv_do inv_hold_start(struct inv_session *s, struct inv_hold *h,
                           struct inv_ticket **t, int n, int seg, int try_only,
                           const struct inv_conns *cs, aconn_cb *cb, void *arg);
/* An answer (res, r: aconn_cb's) to one of h's commands. */
inv_do inv_hold_on_reply(struct inv_session *s, struct inv_hold *h, aconn_result res,
                              const redisReply *r);
/* h->due_us came (INV_DO_DUE): the commit (WORKING), or the next attempt
 * (PAUSED). */
inv_do inv_hold_on_timer(struct inv_session *s, struct inv_hold *h);
/* WAITING: sends the wait for a hand-off on blocking, answered to cb(arg).
 * False when it could not be sent: then inv_hold_attempt. */
int inv_hold_wait_send(struct inv_session *s, struct inv_hold *h, struct aconn *blocking,
                       aconn_cb *cb, void *arg);
/* The wait's answer: the lock handed over (the read goes out), or another
 * attempt. */
inv_do inv_hold_on_handoff(struct inv_session *s, struct inv_hold *h,
                                aconn_result res, const redisReply *r);
/* Another attempt at the lock now (a hand-off wait could not be sent). */
inv_do inv_hold_attempt(struct inv_session *s, struct inv_hold *h);
/* An open hold (WORKING: h->stock read under its lock) whose commit is not
 * its own: an order of several segments (single.h) commits over it with
 * commit.lua, which the caller queued just before. Its release goes behind
 * that commit where it may share its pipeline (as commit_send does); 1 when
 * it went. Then, once the commit answered, inv_hold_release. */
int inv_hold_release_behind(struct inv_session *s, struct inv_hold *h);
/* Releases open hold h (or, after inv_hold_release_behind, goes on with its
 * release): RELEASING, INV_DO_AWAIT while its answers are owed (to
 * inv_hold_on_reply), then INV_DO_OVER. Touches none of its tickets. */
inv_do inv_hold_release(struct inv_session *s, struct inv_hold *h);
/* A hold of segment seg that holds nothing (ENDED), not started. */
void inv_hold_init(struct inv_hold *h, int seg);
/* Lets go of what h holds while nothing is owed (the loop is stopping): a
 * lease held runs out in Redis; ENDED, its tickets untouched. */
void inv_hold_drop(struct inv_session *s, struct inv_hold *h);
/* Gives up h while nothing is owed (the loop is stopping): its tickets are
 * final (unavailable), nothing was written, and a lease held runs out in
 * Redis. A hold that is over (ENDED, TAKEN) is left as it is. */
void inv_hold_abandon(struct inv_session *s, struct inv_hold *h);

#endif
