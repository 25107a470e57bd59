/* hold.c: group commits. One lock hold of a segment serves a batch of
 * tickets: the lock with the read of the stock, the orders' work, one commit
 * (inventory/lua/batch.lua) with the release, as the state machine of
 * hold.h that an event loop drives. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv_impl.h"
#include "text.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_batch;
/* inventory/lua/batch.lua: group commit of the lock-guarded modes. */
static struct rscript batch_script = RSCRIPT_INIT("inv_batch", lua_inventory_batch);

/* One order's part of the batch commit: its text arguments. */
struct batch_slot {
    char okey[40], id[24], qty[12], route[12];
};

/* Reads the batch script's answer for the tickets of hold h (two entries
 * each); a ticket whose segment could not serve it is sent on (t->seg) or
 * left to go by itself, as one whose id was taken, or an idempotent replay
 * (t->seg -1: the order machine finds it again and loads its first order). */
static void batch_outcomes(struct inv *inv, struct inv_hold *h, const redisReply *r,
                           lock_status released)
{
    struct inv_ticket **t = h->t;
    h->placed = 0;
    int seg = h->seg;
    for (int i = 0; i < h->n; i++) {
        const redisReply *first = r->element[2 * i + 1];
        struct inv_order *o = &t[i]->order;
        inv_status st = INV_UNAVAILABLE;
        switch (inv_reply_ll(r->element[2 * i], 99)) {
        case 1:
            inv_order_one_part(o, seg);
            inv_order_placed(inv, h->gene, o, first);
            h->left -= t[i]->qty;
            h->placed++;
            st = INV_PLACED;
            if (released == LOCK_NOT_HELD)
                count(&inv->counters.commits_after_lease);
            if (seg != t[i]->home)
                count(&inv->counters.spilled);
            break;
        case 0: /* short here: on to the segment named, or by itself (-1) */
            t[i]->seg = (int)inv_reply_ll(first, -1);
            t[i]->way = t[i]->seg >= 0 && t[i]->seg != seg ? INV_WAY_QUEUE : INV_WAY_ALONE;
            continue;
        case -5:
            if (inv->cfg.cluster) { /* short in its shard: by itself, which
                                       brings units from the others */
                t[i]->seg = -1;
                t[i]->way = INV_WAY_ALONE;
                continue;
            }
            if (t[i]->qty == 1) /* not a unit left */
                inv_note_sold_out(inv, t[i]->sku, (int)inv_reply_ll(first, 0), h->seen);
            st = INV_SOLD_OUT;
            break;
        case -3:
            t[i]->seg = -1;
            t[i]->way = INV_WAY_ALONE;
            continue;
        case -4:
            st = INV_LIMIT;
            break;
        case -7:
            st = INV_BAD_QTY;
            break;
        case -8:
            st = INV_IDEM_MISMATCH;
            break;
        case -9:
            if (inv_order_id_taken(inv, o) == INV_PENDING) {
                t[i]->way = INV_WAY_ALONE; /* a fresh id: again by itself */
                continue;
            }
            break;
        case -10:
        case -11:
        case -12:
            st =
                inv_window_refusal(inv_reply_ll(r->element[2 * i], 0), first, &o->window);
            break;
        case -17: /* its user's count or its key's record: nothing of it written */
            st = inv_malformed(o, first);
            break;
        }
        inv_ticket_finish(inv, t[i], st);
    }
}

/* Sets h up for tickets t[0..n-1] on segment seg: its lock key, the epoch
 * the commit checks, the sold-out memory's generation. False when the SKU's
 * layout is forgotten since they were routed (each goes by itself). */
static int hold_prepare(struct inv *inv, struct inv_hold *h, struct inv_ticket **t, int n,
                        int seg)
{
    struct sku_layout known;
    const struct sku_layout *layout = h->layout;
    if (!layout && inv_layout_get(inv, t[0]->sku, &known) == 0)
        layout = &known;
    if (!layout || seg < 0 || seg >= layout->segments)
        return 0;
    struct sku_keys k;
    inv_keys_init(&k, t[0]->sku, t[0]->gene);
    h->t = t;
    h->n = n;
    h->seg = seg;
    h->gene = t[0]->gene;
    snprintf(h->lkey, sizeof(h->lkey), "%s%d", k.lock, seg);
    /* The read side of the SKU's lock goes with the segment's grant: a
     * merchant's change (patch.c) waits for the holds in progress. Not on a
     * cluster, whose changes are refused (the keys are in the shards' slots). */
    h->rwkey[0] = '\0';
    if (!inv->cfg.cluster)
        snprintf(h->rwkey, sizeof(h->rwkey), "%srw", k.lock);
    text_copy(h->epoch, sizeof(h->epoch), layout->epoch);
    h->seen = soldout_generation(inv->cfg.soldout);
    return 1;
}

/* h holds its lock and read stock (with the units given back): open until
 * its orders' work is done (at once when the segment is empty: the commit
 * only routes them). */
static void hold_opened(struct inv *inv, struct inv_hold *h, long long stock)
{
    h->state = HOLD_WORKING;
    h->left = stock;
    h->due_us = clock_now_us();
    if (stock == 0)
        inv_layout_mark_empty(inv, h->t[0]->sku, h->epoch, h->seg);
    else
        h->due_us += inv->cfg.work_us; /* the orders' work, side by side */
}

/* The batch script's call for open hold h: KEYS and ARGV as
 * inventory/lua/batch.lua reads them. */
struct batch_call {
    struct sku_keys k;
    char seg[12], fkey[160], stock[24], fence[LOCK_FENCE_TEXT];
    struct batch_slot *slot;
    struct rcmd cmd;
};

static void batch_call_init(struct batch_call *c, struct inv *inv,
                            const struct inv_hold *h)
{
    struct inv_ticket **t = h->t;
    int n = h->n;
    inv_keys_init(&c->k, t[0]->sku, h->gene);
    snprintf(c->seg, sizeof(c->seg), "%d", h->seg);
    lock_fence_key(h->lkey, c->fkey, sizeof(c->fkey));
    if (inv->cfg.lock) {
        snprintf(c->stock, sizeof(c->stock), "%lld", h->stock);
        inv_fence_text(inv, &h->g, c->fence, sizeof(c->fence));
    } else { /* the atomic mode: the script reads the stock itself, no lock */
        c->stock[0] = '\0';
        snprintf(c->fence, sizeof(c->fence), "0");
    }
    int nkeys = 12 + n, argc = nkeys + 5 + 5 * n;
    const char **argv = xmalloc(sizeof(*argv) * (size_t)argc);
    c->slot = xmalloc(sizeof(*c->slot) * (size_t)n);
    const struct sku_keys *k = &c->k;
    const char *head[] = {k->meta,   k->stock, k->sold, k->buyers,
                          k->orders, c->fkey,  k->idem, k->avail};
    memcpy(argv, head, sizeof(head));
    const char **a = argv + nkeys;
    *a++ = h->epoch;
    *a++ = c->seg;
    *a++ = c->stock;
    *a++ = c->fence;
    *a++ = t[0]->sku;
    for (int i = 0; i < n; i++) {
        struct batch_slot *x = &c->slot[i];
        snprintf(x->id, sizeof(x->id), "%" PRIu64, t[i]->order.id);
        inv_record_key(x->okey, sizeof(x->okey), k->order, x->id);
        snprintf(x->qty, sizeof(x->qty), "%d", t[i]->qty);
        snprintf(x->route, sizeof(x->route), "%u", seg_route(t[i]->user_id));
        argv[8 + i] = x->okey;
        *a++ = x->qty;
        *a++ = t[i]->user_id;
        *a++ = x->id;
        *a++ = t[i]->idem_key;
        *a++ = x->route;
    }
    argv[8 + n] = k->back;
    argv[9 + n] = k->due;
    argv[10 + n] = k->dues;
    argv[11 + n] = k->events;
    c->cmd = (struct rcmd){
        .script = &batch_script, .nkeys = nkeys, .argc = argc, .argv = argv};
}

static void batch_call_free(struct batch_call *c)
{
    free(c->cmd.argv);
    free(c->slot);
}

/* h's tickets go by themselves (nothing was written for them). */
static void hold_alone(struct inv_hold *h)
{
    for (int i = 0; i < h->n; i++)
        h->t[i]->way = INV_WAY_ALONE;
}

/* What the batch script's answer r means for h's tickets; r is an answer,
 * not NULL. Returns 1 when Redis had lost the script (nothing written: each
 * by itself, once it is loaded again). */
static int batch_answer(struct inv *inv, struct inv_hold *h, const redisReply *r,
                        lock_status released)
{
    struct inv_ticket **t = h->t;
    int n = h->n;
    if (rconn_is_noscript(r)) {
        hold_alone(h);
        return 1;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)(2 * n)) {
        batch_outcomes(inv, h, r, released);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               inv_reply_ll(r->element[0], 0) == -1) {
        count(&inv->counters.epoch_changed); /* a reset: each by itself, anew */
        inv_layout_forget(inv, t[0]->sku);
        hold_alone(h);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               inv_reply_ll(r->element[0], 0) == -2) {
        count(&inv->counters.fenced_off);
        inv_tickets_finish(inv, t, n, INV_BUSY);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               inv_reply_ll(r->element[0], 0) == -17) {
        /* a value of the SKU or the segment: nothing written (for one
         * ticket the same answer is its own, read above) */
        for (int i = 0; i < n; i++)
            inv_ticket_finish(inv, t[i], inv_malformed(&t[i]->order, r->element[1]));
    } else {
        inv_tickets_finish(inv, t, n, INV_UNAVAILABLE);
    }
    return 0;
}

/* ---- the event-driven hold: the state machine of hold.h ------------------ */

/* The status of tickets whose command got no answer (res not ACONN_REPLY). */
static inv_status lost_answer(aconn_result res)
{
    return res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE;
}

/* The index of the hold's own command (the read, the commit) among its slots. */
#define HOLD_OWN LOCK_STEP_CMDS

/* Every answer of a hold comes through here: it says which command it is
 * for (the slot), then goes to the hold's callback. */
static void on_slot(void *arg, aconn_result res, redisReply *r)
{
    struct inv_slot *sl = arg;
    struct inv_hold *h = sl->h;
    h->index = sl->i;
    h->owed--;
    h->cb(h->arg, res, r);
}

/* Queues cmd on c as h's command number i (HOLD_OWN: the hold's own). 1, or
 * 0 when refused. */
static int hold_queue(struct inv_hold *h, int node, int i, const struct rcmd *cmd)
{
    struct inv_slot *sl = &h->slot[i];
    sl->h = h;
    sl->i = i;
    const struct inv_conns *cs = h->cs;
    rconn_status rc;
    if (node < 0 && cs->cluster) { /* the master of the segment's shard */
        int slot = cluster_gene_slot(h->gene);
        rc = cmd->script
                 ? acluster_eval(cs->cluster, slot, on_slot, sl, cmd->script, cmd->nkeys,
                                 cmd->argc, cmd->argv)
                 : acluster_command(cs->cluster, slot, on_slot, sl, cmd->argc, cmd->argv);
    } else {
        struct aconn *c = node < 0 ? cs->data : cs->node[node];
        if (!c)
            return 0; /* the loop is closing */
        rc = cmd->script ? aconn_eval(c, on_slot, sl, cmd->script, cmd->nkeys, cmd->argc,
                                      cmd->argv)
                         : aconn_command(c, on_slot, sl, cmd->argc, cmd->argv, NULL);
    }
    h->owed += rc == RCONN_OK;
    return rc == RCONN_OK;
}

/* Ends the hold's tickets with st: nothing more is sent for them. */
static inv_do hold_end(struct inv *inv, struct inv_hold *h, inv_status st)
{
    inv_tickets_finish(inv, h->t, h->n, st);
    h->state = HOLD_ENDED;
    return INV_DO_OVER;
}

/* The stock fence_read.lua's {-2} stands for: a later holder's token is
 * there (the grant was succeeded already). */
#define STOCK_FENCED (-2)
/* The stock read.lua's or fence_read.lua's {-17, '<key> <segment>'} stands
 * for: the segment's stock or its units given back are malformed (its
 * tickets' order->malformed say which); the commit would refuse them. */
#define STOCK_MALFORMED (-3)

/* Queues the read of h's stock: with tokens from outside the data Redis
 * (zk), one that raises the segment's fence to the grant's first
 * (fence_read.lua, as inv_lock_and_read). 1, or 0 when refused. */
static int read_queue(struct inv_session *s, struct inv_hold *h)
{
    struct sku_keys k;
    inv_keys_init(&k, h->t[0]->sku, h->gene);
    char segtext[12], fkey[160], token[LOCK_FENCE_TEXT];
    snprintf(segtext, sizeof(segtext), "%d", h->seg);
    if (lock_fence_external(s->inv->cfg.lock)) {
        lock_fence_key(h->lkey, fkey, sizeof(fkey));
        lock_fence_text(&h->g, token, sizeof(token));
        const char *argv[] = {fkey, k.stock, k.back, token, segtext};
        struct rcmd fenced = {
            .script = &inv_fence_read_script, .nkeys = 3, .argc = 5, .argv = argv};
        return hold_queue(h, -1, HOLD_OWN, &fenced);
    }
    const char *read[] = {k.stock, k.back, segtext};
    struct rcmd cmd = {.script = &inv_read_script, .nkeys = 2, .argc = 3, .argv = read};
    return hold_queue(h, -1, HOLD_OWN, &cmd);
}

/* The stock answered to h by read_queue's command (*back: the units given
 * back to the segment, not folded yet). */
static long long read_answer(struct inv_hold *h, aconn_result res, const redisReply *r,
                             long long *back)
{
    *back = 0;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 1)
        return STOCK_FENCED;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        for (int i = 0; i < h->n; i++)
            inv_malformed(&h->t[i]->order, r->element[1]);
        return STOCK_MALFORMED;
    }
    return res == ACONN_REPLY ? inv_stock_of(r, back) : -1;
}

static inv_do commit_unlocked(struct inv_session *s, struct inv_hold *h);

/* The index of a lock step done elsewhere, once it is over. */
#define HOLD_ELSEWHERE (-1)

/* A lock step done elsewhere (zk) is over: an answer to the hold, on its
 * loop (lock_step_start), whose outcome lock_try_done reads. */
static void step_over(void *arg)
{
    struct inv_hold *h = arg;
    h->index = HOLD_ELSEWHERE;
    h->owed--;
    h->cb(h->arg, ACONN_NOT_SENT, NULL);
}

/* Sends h->step's commands: on the data Redis and the lock's nodes. A
 * refused one is answered (none) at once. With `read`, the read of the
 * stock goes right behind those on the data Redis. A step done elsewhere
 * (zk) is started instead. */
static void step_queue(struct inv_session *s, struct inv_hold *h, int read)
{
    struct lock_step *st = &h->step;
    h->with_read = 0;
    if (st->async) { /* done elsewhere: its end comes as an answer (step_over) */
        h->owed++;
        lock_step_start(s->lock, h->lkey, st, h->cs->base, step_over, h);
        return;
    }
    for (int i = 0; i < st->ncmd; i++) {
        if (!hold_queue(h, st->node[i], i, &st->cmd[i]))
            lock_step_answer(s->lock, h->lkey, st, NULL);
    }
    if (read)
        h->with_read = read_queue(s, h);
}

static inv_do hold_settled(struct inv_session *s, struct inv_hold *h);

/* What h does once its answers are in: nothing more while some are owed. */
static inv_do hold_next(struct inv_session *s, struct inv_hold *h)
{
    return h->owed > 0 ? INV_DO_AWAIT : hold_settled(s, h);
}

/* LOCKING: the lock's step in h->step goes out, with the read behind it when
 * a grant by it is complete and it runs on the data Redis. */
static inv_do lock_send(struct inv_session *s, struct inv_hold *h)
{
    const struct lock_step *st = &h->step;
    int on_data = 0;
    for (int i = 0; i < st->ncmd; i++)
        on_data |= st->node[i] < 0;
    h->state = HOLD_LOCKING;
    h->stock = -1;
    h->back = 0;
    h->reread = 0;
    step_queue(s, h, st->last && on_data);
    return hold_next(s, h);
}

inv_do inv_hold_attempt(struct inv_session *s, struct inv_hold *h)
{
    /* waiting (in the lock's queue, or by polling) for what is left of the wait */
    int64_t left_ms = h->try_only ? 0 : (h->deadline_us - clock_now_us()) / 1000;
    lock_try_step(s->lock, h->lkey, left_ms > 0 ? (int)left_ms : 0, &h->step);
    return lock_send(s, h);
}

inv_do inv_hold_start(struct inv_session *s, struct inv_hold *h,
                           struct inv_ticket **t, int n, int seg, int try_only,
                           const struct inv_conns *cs, aconn_cb *cb, void *arg)
{
    struct inv *inv = s->inv;
    h->cs = cs;
    h->cb = cb;
    h->arg = arg;
    h->owed = 0;
    h->t = t;
    h->n = n;
    h->state = HOLD_ENDED;
    if (!hold_prepare(inv, h, t, n, seg)) {
        hold_alone(h); /* each by itself, which learns the layout */
        return INV_DO_OVER;
    }
    /* The oldest ticket's wait decides: none waits much past --wait-ms. */
    int64_t oldest = t[0]->start_us;
    for (int i = 1; i < n; i++)
        oldest = t[i]->start_us < oldest ? t[i]->start_us : oldest;
    h->deadline_us = oldest + (int64_t)inv->cfg.wait_ms * 1000;
    h->noscripts = 0;
    h->try_only = try_only;
    memset(&h->g, 0, sizeof(h->g)); /* nothing held yet */
    if (!s->lock)
        return commit_unlocked(s, h);
    lock_step_init(&h->step);
    lock_step_read_of(&h->step, h->rwkey[0] ? h->rwkey : NULL, h->reading);
    return inv_hold_attempt(s, h);
}

/* Command i of h found its script lost (Redis restarted): once more, behind
 * the connection's reload of it (a few times per hold). 1 when sent. */
static int resend(struct inv_hold *h, int i)
{
    if (h->noscripts++ >= 4)
        return 0;
    const struct lock_step *st = &h->step;
    h->with_read = 0; /* the read went ahead of the grant: read again */
    return hold_queue(h, st->node[i], i, &st->cmd[i]);
}

/* Answer r (res) to h's lock command h->index. */
static void lock_answer(struct inv_session *s, struct inv_hold *h, aconn_result res,
                        const redisReply *r)
{
    if (res == ACONN_REPLY && rconn_is_noscript(r) && resend(h, h->index))
        return;
    if (h->cs->cluster && acluster_redirected(h->cs->cluster))
        h->with_read = 0; /* the read may have run before it: read again */
    lock_step_answer(s->lock, h->lkey, &h->step, res == ACONN_REPLY ? r : NULL);
}

static inv_do hold_released(struct inv_session *s, struct inv_hold *h);

/* h holds its lock: WORKING once its stock is read (with the grant, or now,
 * READING). */
static inv_do hold_granted(struct inv_session *s, struct inv_hold *h)
{
    if ((!h->with_read || h->reread) && read_queue(s, h)) {
        h->reread = 0;
        h->state = HOLD_READING;
        return INV_DO_AWAIT;
    }
    if (h->stock == STOCK_FENCED) { /* a later holder's: ours is gone */
        count(&s->inv->counters.fenced_off);
        lock_release_done(s->lock, h->lkey, &h->g, NULL);
        return hold_end(s->inv, h, INV_BUSY);
    }
    if (h->stock == STOCK_MALFORMED) { /* nothing to commit: let the lock go now */
        h->state = HOLD_RELEASING;
        lock_release_step(s->lock, h->lkey, &h->g, &h->step);
        step_queue(s, h, 0);
        inv_tickets_finish(s->inv, h->t, h->n, INV_MALFORMED);
        return h->owed == 0 ? hold_released(s, h) : INV_DO_DECIDED;
    }
    if (h->stock >= 0) {
        hold_opened(s->inv, h, h->stock + h->back);
        return INV_DO_DUE;
    }
    lock_release_done(s->lock, h->lkey, &h->g, NULL); /* unread: the lease runs out */
    return hold_end(s->inv, h, INV_UNAVAILABLE);
}

/* RELEASING, its answers in: the hold is over. A commit placed after the
 * lease was gone is counted. */
static inv_do hold_released(struct inv_session *s, struct inv_hold *h)
{
    if (lock_release_done(s->lock, h->lkey, &h->g, &h->step) == LOCK_NOT_HELD)
        for (int i = 0; i < h->placed; i++)
            count(&s->inv->counters.commits_after_lease);
    h->state = HOLD_ENDED;
    return INV_DO_OVER;
}

/* Every answer owed came: the step h is in is complete. */
static inv_do hold_settled(struct inv_session *s, struct inv_hold *h)
{
    switch (h->state) {
    case HOLD_LOCKING:
        break;
    case HOLD_READING:
        h->with_read = 1; /* read */
        return hold_granted(s, h);
    case HOLD_RELEASING:
        return hold_released(s, h);
    case HOLD_ENDED:
    case HOLD_TAKEN:
        return INV_DO_OVER;
    default: /* WAITING, PAUSED, WORKING, COMMITTING: an answer decides them */
        return INV_DO_AWAIT;
    }
    switch (lock_try_done(s->lock, h->lkey, &h->step, &h->g)) {
    case LOCK_PENDING:
        return lock_send(s, h);
    case LOCK_ACQUIRED:
        return hold_granted(s, h);
    case LOCK_BUSY:
        if (h->try_only) {
            h->state = HOLD_TAKEN;
            return INV_DO_OVER;
        }
        if (h->step.entry[0]) {
            h->state = HOLD_WAITING;
            return INV_DO_HANDOFF;
        }
        if (h->step.retry_us > 0) {
            h->state = HOLD_PAUSED;
            h->due_us = clock_now_us() + h->step.retry_us;
            return INV_DO_DUE;
        }
        return hold_end(s->inv, h, INV_BUSY);
    default:
        return hold_end(s->inv, h, INV_UNAVAILABLE);
    }
}

/* True when the release in h->step goes to the data Redis only. */
static int release_on_data(const struct lock_step *st)
{
    for (int i = 0; i < st->ncmd; i++)
        if (st->node[i] >= 0)
            return 0;
    return 1;
}

/* WORKING -> COMMITTING: the commit, and the release behind it where it may
 * go in the same pipeline. */
static inv_do commit_send(struct inv_session *s, struct inv_hold *h)
{
    struct inv *inv = s->inv;
    struct batch_call call;
    h->owed = 0;
    h->noscripts = 0;
    h->placed = 0; /* batch_outcomes counts them: none unless the commit placed */
    batch_call_init(&call, inv, h);
    lock_release_step(s->lock, h->lkey, &h->g, &h->step);
    int sent = hold_queue(h, -1, HOLD_OWN, &call.cmd);
    batch_call_free(&call);
    if (!sent) {
        lock_release_done(s->lock, h->lkey, &h->g, NULL);
        return hold_end(inv, h, INV_UNAVAILABLE);
    }
    h->state = HOLD_COMMITTING;
    /* A release on the data Redis goes in one pipeline with the commit; one
     * on the lock's nodes once the commit answered (it may not overtake it),
     * and so does one that must be made after the commit (setnx), or on a
     * cluster (a commit redirected may run after what follows it). */
    h->releasing = release_on_data(&h->step) && !h->step.after && !h->cs->cluster;
    if (h->releasing)
        step_queue(s, h, 0);
    return INV_DO_AWAIT;
}

/* The atomic mode's group commit (no lock: s->lock is NULL): the batch
 * script at once, reading the segment's stock itself -> COMMITTING. */
static inv_do commit_unlocked(struct inv_session *s, struct inv_hold *h)
{
    struct inv *inv = s->inv;
    struct batch_call call;
    h->owed = 0;
    h->noscripts = 0;
    h->placed = 0;
    h->left = -1; /* not read: the script knows */
    h->releasing = 0;
    batch_call_init(&call, inv, h);
    int sent = hold_queue(h, -1, HOLD_OWN, &call.cmd);
    batch_call_free(&call);
    if (!sent)
        return hold_end(inv, h, INV_UNAVAILABLE);
    h->state = HOLD_COMMITTING;
    return INV_DO_AWAIT;
}

/* COMMITTING: the commit's answer decides the tickets -> RELEASING. */
static inv_do committed(struct inv_session *s, struct inv_hold *h, aconn_result res,
                             const redisReply *r)
{
    struct inv *inv = s->inv;
    if (res != ACONN_REPLY)
        inv_tickets_finish(inv, h->t, h->n, lost_answer(res));
    else
        batch_answer(inv, h, r, LOCK_RELEASED);
    if (!s->lock) { /* nothing held */
        h->state = HOLD_ENDED;
        return INV_DO_DECIDED;
    }
    h->state = HOLD_RELEASING;
    if (!h->releasing) { /* made now: it may decide on the time */
        lock_release_step(s->lock, h->lkey, &h->g, &h->step);
        step_queue(s, h, 0);
    }
    if (h->owed == 0)
        hold_released(s, h);
    return INV_DO_DECIDED;
}

inv_do inv_hold_on_reply(struct inv_session *s, struct inv_hold *h, aconn_result res,
                              const redisReply *r)
{
    int own = h->index == HOLD_OWN;
    switch (h->state) {
    case HOLD_LOCKING:
    case HOLD_READING:
        if (h->index == HOLD_ELSEWHERE)
            break; /* lock_try_done reads it */
        if (!own)
            lock_answer(s, h, res, r);
        else if ((h->with_read || h->state == HOLD_READING) && res == ACONN_REPLY &&
                 rconn_is_noscript(r) && h->noscripts++ < 4)
            h->reread = 1; /* nothing ran: read again, the script sent whole */
        else if (h->with_read || h->state == HOLD_READING)
            h->stock = read_answer(h, res, r, &h->back);
        /* else the read of a grant that a resend overtook: read again */
        break;
    case HOLD_COMMITTING:
        if (own)
            return committed(s, h, res, r);
        lock_answer(s, h, res, r); /* the release, behind the commit */
        break;
    case HOLD_RELEASING:
        if (h->index != HOLD_ELSEWHERE) /* else lock_release_done reads it */
            lock_answer(s, h, res, r);
        break;
    default: /* nothing of theirs is in flight */
        break;
    }
    return hold_next(s, h);
}

inv_do inv_hold_on_timer(struct inv_session *s, struct inv_hold *h)
{
    switch (h->state) {
    case HOLD_WORKING:
        return commit_send(s, h);
    case HOLD_PAUSED:
        return inv_hold_attempt(s, h);
    default:
        return hold_next(s, h);
    }
}

int inv_hold_wait_send(struct inv_session *s, struct inv_hold *h, struct aconn *blocking,
                       aconn_cb *cb, void *arg)
{
    int64_t left = h->deadline_us - clock_now_us();
    lock_handoff_step(s->lock, h->lkey, left > 1000 ? left : 1000, &h->step);
    const struct rcmd *w = &h->step.cmd[0];
    return aconn_command(blocking, cb, arg, w->argc, w->argv, NULL) == RCONN_OK;
}

inv_do inv_hold_on_handoff(struct inv_session *s, struct inv_hold *h,
                                aconn_result res, const redisReply *r)
{
    if (lock_handoff_done(s->lock, h->lkey, &h->step, res == ACONN_REPLY ? r : NULL,
                          &h->g) != LOCK_ACQUIRED)
        return inv_hold_attempt(s,
                                h); /* the next leaves the queue once the wait is over */
    h->stock = -1;
    h->back = 0;
    h->with_read = 0;
    return hold_granted(s, h); /* the read, now that the lock is ours */
}

int inv_hold_release_behind(struct inv_session *s, struct inv_hold *h)
{
    h->owed = 0;
    h->noscripts = 0;
    h->placed = 0;
    lock_release_step(s->lock, h->lkey, &h->g, &h->step);
    h->state = HOLD_COMMITTING;
    /* as commit_send: in the commit's pipeline only where it cannot overtake it */
    h->releasing = release_on_data(&h->step) && !h->step.after && !h->cs->cluster;
    if (h->releasing)
        step_queue(s, h, 0);
    return h->releasing;
}

inv_do inv_hold_release(struct inv_session *s, struct inv_hold *h)
{
    if (h->state != HOLD_COMMITTING || !h->releasing) { /* made now */
        h->owed = 0;
        h->noscripts = 0;
        lock_release_step(s->lock, h->lkey, &h->g, &h->step);
        step_queue(s, h, 0);
    }
    h->state = HOLD_RELEASING;
    return hold_next(s, h);
}

void inv_hold_init(struct inv_hold *h, int seg)
{
    h->state = HOLD_ENDED;
    h->placed = 0;
    h->n = 0;
    h->seg = seg;
    h->layout = NULL;
    h->reading = 0;
}

void inv_hold_drop(struct inv_session *s, struct inv_hold *h)
{
    if (h->state == HOLD_ENDED || h->state == HOLD_TAKEN)
        return; /* over: nothing held */
    lock_step_cancel(s->lock, &h->step); /* a step done elsewhere: dropped */
    if (h->state != HOLD_PAUSED && h->state != HOLD_WAITING) /* else nothing held */
        lock_release_done(s->lock, h->lkey, &h->g, NULL);
    h->state = HOLD_ENDED;
}

void inv_hold_abandon(struct inv_session *s, struct inv_hold *h)
{
    if (h->state == HOLD_ENDED || h->state == HOLD_TAKEN)
        return; /* its tickets untouched, or final */
    inv_hold_drop(s, h);
    hold_end(s->inv, h, INV_UNAVAILABLE);
}
