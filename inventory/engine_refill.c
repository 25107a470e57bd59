/* engine_refill.c: on a Redis Cluster, units brought to the shard of an
 * order that is short there, on the event loop: what shards.c does with
 * blocking calls (its comment tells why and how transfers are safe), as a
 * machine driven by answers. Each transfer's step is a ticket of its own
 * (t->xfer) that the order machine runs under its segment's lock
 * (single.h: inv_single_xfer; the atomic mode, which takes no lock, sends
 * the script itself), and whose placing waits for the replicas as an
 * order's does (--min-replicas-acked): a step taken by a master that a
 * failover then loses must not let the next one run.
 *
 *   state     in flight                          then
 *   SETTLE    each shard's remaining units, and  APPLY (transfers recorded and
 *             (pass 0) its transfers recorded    not deleted), else PLAN
 *   APPLY     one record's xfer_in.lua, then     the next record; after the
 *             its HDEL (not waited for)          last, SETTLE pass 1, then PLAN
 *   PLAN      nothing: the units left decide     the order sent on again (its
 *                                                shard holds qty), FULLEST, or
 *                                                sold out (none read twice)
 *   FULLEST   the giving shard's fullest         OUT, or (none left) PLAN
 *             segment (ZREVRANGE)
 *   OUT       xfer_out.lua there                 IN, or (none taken) PLAN
 *   IN        xfer_in.lua on the order's home    PLAN, after its record's HDEL
 *             segment
 *
 * Anything that fails answers the order unavailable (busy when a lock was
 * not had): nothing is half done, since a record left behind is applied by
 * the next settle, here or in another process. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine_impl.h"
#include "orderid.h"
#include "single.h"
#include "xalloc.h"

/* Most transfer records one settle applies (more wait for the next). */
#define REFILL_RECORDS 32

enum refill_state { RF_SETTLE, RF_APPLY, RF_FULLEST, RF_OUT, RF_IN };

struct erefill;

/* A read's answer says which shard, and what, it is for. */
struct rslot {
    struct erefill *r;
    int shard; /* index in the layout */
    int xout;  /* the transfers recorded there (HGETALL), else remaining (HGET) */
};

struct xrecord {
    int from, to, seg; /* genes, and the receiving segment */
    long long units;
    char id[24];
};

struct erefill {
    struct inv_engine *e;
    struct inv_ticket *t; /* the order */
    struct sku_layout l;
    enum refill_state state;
    int pass;     /* SETTLE: 0 reads the records too, 1 remaining only */
    int owed;     /* reads owed */
    int failed;   /* a read had no answer, or not one */
    int zero;     /* settles that found no unit anywhere */
    uint64_t seen; /* the sold-out memory's generation before the reads */
    long long left[CLUSTER_MAX_MASTERS];
    struct rslot slot[2 * CLUSTER_MAX_MASTERS];
    struct xrecord rec[REFILL_RECORDS];
    int nrec, cur;
    int home, giver; /* layout indexes: the order's shard, the one giving */
    long long need, want;
    struct inv_ticket step; /* the transfer's step in flight */
    int noscripts;          /* steps answered NOSCRIPT (run again, 4 at most) */
    struct inv_xfer x;
    char arg[6][24];
};

static void settle(struct erefill *r, int pass);
static void plan(struct erefill *r);

static void refill_end(struct erefill *r, inv_status st)
{
    struct inv_engine *e = r->e;
    struct inv_ticket *t = r->t;
    free(r);
    if (st == INV_PENDING) { /* its shard holds its qty now: again */
        t->refills++;
        t->tries = 0;
        eng_dispatch(e, t);
        return;
    }
    inv_ticket_fail(e->inv, t, st);
    eng_ticket_done(e, t);
}

static int slot_of(const struct erefill *r, int shard)
{
    return cluster_gene_slot(r->l.genes[shard]);
}

static void on_ignored(void *arg, aconn_result res, redisReply *reply)
{
    (void)arg, (void)res, (void)reply;
}

/* Deletes the record of transfer id on the shard of gene `from`, without
 * waiting: a record left behind is applied again (a repeat changes nothing)
 * and deleted by a later settle. */
static void record_delete(struct erefill *r, int from, const char *id)
{
    struct sku_keys k;
    inv_keys_init(&k, r->t->sku, from);
    const char *argv[] = {"HDEL", k.xout, id};
    acluster_command(r->e->cluster, cluster_gene_slot(from), on_ignored, NULL, 3, argv);
}

/* ---- a transfer's step ----------------------------------------------------- */

static void step_done(struct inv_ticket *step);

static void on_step_reply(void *arg, aconn_result res, redisReply *reply)
{
    struct erefill *r = arg;
    struct inv_engine *e = r->e;
    long long got = 0;
    inv_status st = res == ACONN_REPLY && rconn_is_noscript(reply)
                        ? INV_OK /* nothing ran: again (step_done) */
                        : inv_xfer_outcome(res, reply, &got);
    r->step.order.qty = (int)got;
    inv_ticket_finish(e->inv, &r->step, st);
    e->answering = eng_answered_by(e, res);
    eng_ticket_done(e, &r->step); /* the replicas first, when placed */
    e->answering = NULL;
}

/* Runs a transfer's step on segment seg of the shard of gene `gene`: under
 * its lock by the order machine, or (atomic mode) the script alone. */
static void step_run(struct erefill *r, int gene, int seg, int xin, int nargs)
{
    struct inv_engine *e = r->e;
    struct inv_ticket *s = &r->step;
    memset(s, 0, sizeof(*s));
    snprintf(s->sku, sizeof(s->sku), "%s", r->t->sku);
    s->gene = gene;
    s->home = s->seg = seg;
    s->start_us = clock_now_us();
    s->st = INV_PENDING;
    s->xfer = 1;
    s->engine = e;
    s->owner = r;
    s->done = step_done;
    r->x.xin = xin;
    r->x.nargs = nargs;
    for (int i = 0; i < nargs; i++)
        r->x.args[i] = r->arg[i];
    atomic_fetch_add(&e->inflight, 1);
    if (e->path == INV_PATH_HOLDS) {
        eng_single_xfer(e, s, &r->x);
        return;
    }
    struct inv_xfer_call xc;
    inv_xfer_call_init(&xc, e->inv, s->sku, gene, seg, xin, nargs, r->x.args, NULL);
    if (acluster_eval(e->cluster, cluster_gene_slot(gene), on_step_reply, r,
                      xc.cmd.script, xc.cmd.nkeys, xc.cmd.argc,
                      xc.cmd.argv) != RCONN_OK) {
        inv_ticket_finish(e->inv, s, INV_UNAVAILABLE);
        eng_ticket_done(e, s);
    }
}

/* The step failed with st: the order's answer. */
static inv_status step_failure(inv_status st)
{
    return st == INV_BUSY ? INV_BUSY : INV_UNAVAILABLE;
}

static void apply_next(struct erefill *r);
static void give_next(struct erefill *r);

static void step_done(struct inv_ticket *step)
{
    struct erefill *r = step->owner;
    inv_status st = step->st;
    long long got = step->order.qty;
    if (r->e->closing) {
        refill_end(r, INV_UNAVAILABLE);
        return;
    }
    /* INV_OK: the master had not seen the script (its connection loaded the
     * ones this process knew then): nothing ran, and the connection loads it
     * before what follows, so the step runs again (its lock taken anew). */
    if (st == INV_OK && r->noscripts++ < 4) {
        step_run(r, step->gene, step->seg, r->x.xin, r->x.nargs);
        return;
    }
    if (st == INV_NOT_FOUND) { /* the SKU was reset since */
        inv_layout_forget(r->e->inv, r->t->sku);
        refill_end(r, INV_UNAVAILABLE);
        return;
    }
    if (st != INV_PLACED && st != INV_SOLD_OUT) {
        refill_end(r, step_failure(st));
        return;
    }
    switch (r->state) {
    case RF_APPLY: /* applied now, or before */
        record_delete(r, r->rec[r->cur].from, r->rec[r->cur].id);
        r->cur++;
        apply_next(r);
        return;
    case RF_OUT:
        if (st == INV_SOLD_OUT) { /* taken meanwhile */
            r->left[r->giver] = 0;
            give_next(r);
            return;
        }
        inv_crash_point(r->e->inv, "transfer-out");
        r->want = got; /* now on its way */
        snprintf(r->arg[2], sizeof(r->arg[2]), "%lld", got);
        snprintf(r->arg[3], sizeof(r->arg[3]), "%d", r->t->home);
        /* args: epoch, id (kept), units, segment */
        r->state = RF_IN;
        step_run(r, r->l.genes[r->home], r->t->home, 1, 4);
        return;
    case RF_IN:
        inv_crash_point(r->e->inv, "transfer-in");
        record_delete(r, r->l.genes[r->giver], r->arg[1]);
        r->left[r->giver] -= r->want;
        r->need -= r->want;
        give_next(r);
        return;
    default:
        refill_end(r, INV_UNAVAILABLE);
        return;
    }
}

/* ---- settling: what each shard holds ---------------------------------------- */

static void settled(struct erefill *r)
{
    if (r->e->closing || r->failed) {
        refill_end(r, INV_UNAVAILABLE);
        return;
    }
    if (r->pass == 0 && r->nrec > 0) {
        r->state = RF_APPLY;
        r->cur = 0;
        apply_next(r);
        return;
    }
    plan(r);
}

static void on_read(void *arg, aconn_result res, redisReply *reply)
{
    struct rslot *sl = arg;
    struct erefill *r = sl->r;
    int i = sl->shard;
    if (res != ACONN_REPLY) {
        r->failed = 1;
    } else if (!sl->xout) {
        if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_NIL)
            r->left[i] = inv_reply_ll(reply, 0);
        else
            r->failed = 1;
    } else if (reply->type != REDIS_REPLY_ARRAY) {
        r->failed = 1;
    } else {
        for (size_t j = 0; j + 1 < reply->elements && r->nrec < REFILL_RECORDS; j += 2) {
            struct xrecord *x = &r->rec[r->nrec];
            if (reply->element[j]->type != REDIS_REPLY_STRING ||
                inv_xfer_record_read(&r->l, reply->element[j + 1], &x->to, &x->seg,
                                     &x->units) != 0)
                continue;
            x->from = r->l.genes[i];
            snprintf(x->id, sizeof(x->id), "%s", reply->element[j]->str);
            r->nrec++;
        }
    }
    if (--r->owed == 0)
        settled(r);
}

/* SETTLE: every shard's remaining units, and with pass 0 its records. */
static void settle(struct erefill *r, int pass)
{
    r->state = RF_SETTLE;
    r->pass = pass;
    r->failed = 0;
    r->nrec = 0;
    r->owed = 1; /* until every read is queued */
    r->seen = soldout_generation(r->e->inv->cfg.soldout);
    for (int i = 0; i < r->l.nshards; i++) {
        struct sku_keys k;
        inv_keys_init(&k, r->t->sku, r->l.genes[i]);
        for (int xout = 0; xout <= (pass == 0); xout++) {
            struct rslot *sl = &r->slot[2 * i + xout];
            *sl = (struct rslot){.r = r, .shard = i, .xout = xout};
            const char *get[] = {"HGET", k.meta, "remaining"};
            const char *all[] = {"HGETALL", k.xout};
            r->owed++;
            if (acluster_command(r->e->cluster, slot_of(r, i), on_read, sl, xout ? 2 : 3,
                                 xout ? all : get) != RCONN_OK) {
                r->owed--;
                r->failed = 1;
            }
        }
    }
    if (--r->owed == 0)
        settled(r);
}

/* APPLY: the next record's units to where it sends them; after the last,
 * what each shard holds is read again. */
static void apply_next(struct erefill *r)
{
    if (r->cur == r->nrec) {
        settle(r, 1);
        return;
    }
    struct xrecord *x = &r->rec[r->cur];
    snprintf(r->arg[0], sizeof(r->arg[0]), "%s", r->l.epoch);
    snprintf(r->arg[1], sizeof(r->arg[1]), "%s", x->id);
    snprintf(r->arg[2], sizeof(r->arg[2]), "%lld", x->units);
    snprintf(r->arg[3], sizeof(r->arg[3]), "%d", x->seg);
    step_run(r, x->to, x->seg, 1, 4);
}

/* ---- moving units ---------------------------------------------------------- */

static void plan(struct erefill *r)
{
    struct inv *inv = r->e->inv;
    struct inv_ticket *t = r->t;
    long long total = 0;
    for (int i = 0; i < r->l.nshards; i++)
        total += r->left[i];
    if (total == 0 && r->zero++ == 0) {
        /* None left, read twice: a unit moved between the reads of two
         * shards shows in the second (soldout.h trusts "none" for a while) */
        settle(r, 0);
        return;
    }
    if (total < t->qty) {
        if (total == 0)
            soldout_note(inv->cfg.soldout, t->sku, 0, r->seen);
        refill_end(r, INV_SOLD_OUT);
        return;
    }
    r->home = t->home % r->l.nshards;
    r->need = t->qty - r->left[r->home];
    give_next(r);
}

static void on_fullest(void *arg, aconn_result res, redisReply *reply)
{
    struct erefill *r = arg;
    if (r->e->closing || res != ACONN_REPLY || reply->type != REDIS_REPLY_ARRAY) {
        refill_end(r, INV_UNAVAILABLE);
        return;
    }
    int from = reply->elements == 1 ? (int)inv_reply_ll(reply->element[0], -1) : -1;
    if (from < 0) { /* none left there */
        r->left[r->giver] = 0;
        give_next(r);
        return;
    }
    uint64_t id = orderid_next(r->e->inv->cfg.ids); /* unique, as an order's */
    if (!id) {
        refill_end(r, INV_UNAVAILABLE);
        return;
    }
    /* args: epoch, id, units wanted, receiving gene, receiving segment, giving segment */
    snprintf(r->arg[0], sizeof(r->arg[0]), "%s", r->l.epoch);
    snprintf(r->arg[1], sizeof(r->arg[1]), "%" PRIu64, id);
    snprintf(r->arg[2], sizeof(r->arg[2]), "%lld", r->want);
    snprintf(r->arg[3], sizeof(r->arg[3]), "%d", r->l.genes[r->home]);
    snprintf(r->arg[4], sizeof(r->arg[4]), "%d", r->t->home);
    snprintf(r->arg[5], sizeof(r->arg[5]), "%d", from);
    r->state = RF_OUT;
    step_run(r, r->l.genes[r->giver], from, 0, 6);
}

/* Units from the fullest other shard, half of what it holds at least, until
 * the order's shard holds its qty: then the order again. */
static void give_next(struct erefill *r)
{
    if (r->need <= 0) {
        refill_end(r, INV_PENDING);
        return;
    }
    int d = -1;
    for (int i = 0; i < r->l.nshards; i++)
        if (i != r->home && r->left[i] > 0 && (d < 0 || r->left[i] > r->left[d]))
            d = i;
    if (d < 0) {
        refill_end(r, INV_SOLD_OUT); /* taken meanwhile */
        return;
    }
    r->giver = d;
    r->want = r->left[d] / 2 > r->need ? r->left[d] / 2 : r->need;
    r->state = RF_FULLEST;
    struct sku_keys k;
    inv_keys_init(&k, r->t->sku, r->l.genes[d]);
    const char *argv[] = {"ZREVRANGE", k.avail, "0", "0"};
    if (acluster_command(r->e->cluster, slot_of(r, d), on_fullest, r, 4, argv) != RCONN_OK)
        refill_end(r, INV_UNAVAILABLE);
}

void eng_refill(struct inv_engine *e, struct inv_ticket *t)
{
    struct sku_layout l;
    if (t->refills >= INV_REFILL_ROUNDS) { /* others took what was brought */
        inv_ticket_fail(e->inv, t, INV_SOLD_OUT);
        eng_ticket_done(e, t);
        return;
    }
    if (inv_layout_get(e->inv, t->sku, &l) != 0 || l.nshards < 1 || !e->cluster ||
        e->closing) {
        inv_ticket_fail(e->inv, t, INV_UNAVAILABLE);
        eng_ticket_done(e, t);
        return;
    }
    struct erefill *r = xcalloc(1, sizeof(*r));
    r->e = e;
    r->t = t;
    r->l = l;
    settle(r, 0);
}
