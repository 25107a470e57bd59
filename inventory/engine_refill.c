/* engine_refill.c: on a Redis Cluster, units brought to the shard of an
 * order that is short there: the machine of engine_refill.h. It sends its
 * reads on the loop's cluster and answers the driver (engine.c) what to do
 * next; it calls nothing of the driver. */
#include "engine_refill.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "orderid.h"

static inv_do settle(struct inv_refill *r, int pass);
static inv_do plan(struct inv_refill *r);
static inv_do apply_next(struct inv_refill *r);
static inv_do give_next(struct inv_refill *r);

/* The refill is over with st for its order: INV_PENDING, sent on again. */
static inv_do refill_end(struct inv_refill *r, inv_status st)
{
    if (st == INV_PENDING) { /* its shard holds its qty now: again */
        r->t->refills++;
        r->t->way = INV_WAY_SEND;
    } else {
        inv_ticket_fail(r->inv, r->t, st);
    }
    return INV_DO_OVER;
}

static int slot_of(const struct inv_refill *r, int shard)
{
    return cluster_gene_slot(r->l.genes[shard]);
}

/* Every answer of a read comes through here: it says which read it is for,
 * then goes to the driver's callback. */
static void on_slot(void *arg, aconn_result res, redisReply *reply)
{
    struct inv_refill_slot *sl = arg;
    struct inv_refill *r = sl->r;
    r->answer = sl;
    r->cb(r->arg, res, reply);
}

static void on_ignored(void *arg, aconn_result res, redisReply *reply)
{
    (void)arg, (void)res, (void)reply;
}

/* Deletes the record of transfer id on the shard of gene `from`, without
 * waiting: a record left behind is applied again (a repeat changes nothing)
 * and deleted by a later settle. */
static void record_delete(struct inv_refill *r, int from, const char *id)
{
    struct sku_keys k;
    inv_keys_init(&k, r->t->sku, from);
    const char *argv[] = {"HDEL", k.xout, id};
    acluster_command(r->cs->cluster, cluster_gene_slot(from), on_ignored, NULL, 3, argv);
}

/* ---- a transfer's step ----------------------------------------------------- */

/* A transfer's step on segment seg of the shard of gene `gene`, for the
 * driver to run. */
static inv_do step_run(struct inv_refill *r, int gene, int seg, int xin, int nargs)
{
    struct inv_ticket *s = &r->step;
    memset(s, 0, sizeof(*s));
    snprintf(s->sku, sizeof(s->sku), "%s", r->t->sku);
    s->gene = gene;
    s->home = s->seg = seg;
    s->start_us = clock_now_us();
    s->st = INV_PENDING;
    s->xfer = 1;
    r->x.xin = xin;
    r->x.nargs = nargs;
    r->x.layout = &r->l;
    for (int i = 0; i < nargs; i++)
        r->x.args[i] = r->text[i];
    return INV_DO_STEP;
}

/* The step failed with st: the order's answer (a malformed value named
 * in it too). */
static inv_status step_failure(struct inv_refill *r, inv_status st)
{
    if (st == INV_MALFORMED) {
        snprintf(r->t->order.malformed, sizeof(r->t->order.malformed), "%s",
                 r->step.order.malformed);
        return INV_MALFORMED;
    }
    return st == INV_BUSY ? INV_BUSY : INV_UNAVAILABLE;
}

inv_do inv_refill_on_step(struct inv_refill *r)
{
    struct inv_ticket *step = &r->step;
    inv_status st = step->st;
    long long got = step->order.qty;
    if (r->cs->closing)
        return refill_end(r, INV_UNAVAILABLE);
    /* INV_PENDING: the master had not seen the script (its connection loaded
     * the ones this process knew then): nothing ran, and the connection loads
     * it before what follows, so the step runs again (its lock taken anew). */
    if (st == INV_PENDING && r->noscripts++ < 4)
        return step_run(r, step->gene, step->seg, r->x.xin, r->x.nargs);
    if (st == INV_NOT_FOUND) { /* the SKU was reset since */
        inv_layout_forget(r->inv, r->t->sku);
        return refill_end(r, INV_UNAVAILABLE);
    }
    if (st != INV_PLACED && st != INV_SOLD_OUT)
        return refill_end(r, step_failure(r, st));
    switch (r->state) {
    case REFILL_APPLY: /* applied now, or before */
        record_delete(r, r->rec[r->cur].from, r->rec[r->cur].id);
        r->cur++;
        return apply_next(r);
    case REFILL_OUT:
        if (st == INV_SOLD_OUT) { /* taken meanwhile */
            r->left[r->giver] = 0;
            return give_next(r);
        }
        inv_crash_point(r->inv, "transfer-out");
        r->want = got; /* now on its way */
        snprintf(r->text[2], sizeof(r->text[2]), "%lld", got);
        snprintf(r->text[3], sizeof(r->text[3]), "%d", r->t->home);
        /* args: epoch, id (kept), units, segment */
        r->state = REFILL_IN;
        return step_run(r, r->l.genes[r->home], r->t->home, 1, 4);
    case REFILL_IN:
        inv_crash_point(r->inv, "transfer-in");
        record_delete(r, r->l.genes[r->giver], r->text[1]);
        r->left[r->giver] -= r->want;
        r->need -= r->want;
        return give_next(r);
    default:
        return refill_end(r, INV_UNAVAILABLE);
    }
}

/* ---- settling: what each shard holds ---------------------------------------- */

static inv_do settled(struct inv_refill *r)
{
    if (r->cs->closing || r->failed)
        return refill_end(r, INV_UNAVAILABLE);
    if (r->pass == 0 && r->nrec > 0) {
        r->state = REFILL_APPLY;
        r->cur = 0;
        return apply_next(r);
    }
    return plan(r);
}

/* SETTLE: a shard's remaining units, or its records. */
static inv_do read_answer(struct inv_refill *r, const struct inv_refill_slot *sl,
                                 aconn_result res, const redisReply *reply)
{
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
            struct inv_refill_record *x = &r->rec[r->nrec];
            if (reply->element[j]->type != REDIS_REPLY_STRING ||
                inv_xfer_record_read(&r->l, reply->element[j + 1], &x->to, &x->seg,
                                     &x->units) != 0)
                continue;
            x->from = r->l.genes[i];
            snprintf(x->id, sizeof(x->id), "%s", reply->element[j]->str);
            r->nrec++;
        }
    }
    return --r->owed == 0 ? settled(r) : INV_DO_AWAIT;
}

/* SETTLE: every shard's remaining units, and with pass 0 its records. */
static inv_do settle(struct inv_refill *r, int pass)
{
    r->state = REFILL_SETTLE;
    r->pass = pass;
    r->failed = 0;
    r->nrec = 0;
    r->owed = 1; /* until every read is queued */
    r->seen = soldout_generation(r->inv->cfg.soldout);
    for (int i = 0; i < r->l.nshards; i++) {
        struct sku_keys k;
        inv_keys_init(&k, r->t->sku, r->l.genes[i]);
        for (int xout = 0; xout <= (pass == 0); xout++) {
            struct inv_refill_slot *sl = &r->slot[2 * i + xout];
            *sl = (struct inv_refill_slot){.r = r, .shard = i, .xout = xout};
            const char *get[] = {"HGET", k.meta, "remaining"};
            const char *all[] = {"HGETALL", k.xout};
            r->owed++;
            if (acluster_command(r->cs->cluster, slot_of(r, i), on_slot, sl, xout ? 2 : 3,
                                 xout ? all : get) != RCONN_OK) {
                r->owed--;
                r->failed = 1;
            }
        }
    }
    return --r->owed == 0 ? settled(r) : INV_DO_AWAIT;
}

/* APPLY: the next record's units to where it sends them; after the last,
 * what each shard holds is read again. */
static inv_do apply_next(struct inv_refill *r)
{
    if (r->cur == r->nrec)
        return settle(r, 1);
    struct inv_refill_record *x = &r->rec[r->cur];
    snprintf(r->text[0], sizeof(r->text[0]), "%s", r->l.epoch);
    snprintf(r->text[1], sizeof(r->text[1]), "%s", x->id);
    snprintf(r->text[2], sizeof(r->text[2]), "%lld", x->units);
    snprintf(r->text[3], sizeof(r->text[3]), "%d", x->seg);
    return step_run(r, x->to, x->seg, 1, 4);
}

/* ---- moving units ---------------------------------------------------------- */

static inv_do plan(struct inv_refill *r)
{
    struct inv_ticket *t = r->t;
    r->state = REFILL_PLAN;
    long long total = 0;
    for (int i = 0; i < r->l.nshards; i++)
        total += r->left[i];
    if (total == 0 && r->zero++ == 0) {
        /* None left, read twice: a unit moved between the reads of two
         * shards shows in the second (soldout.h trusts "none" for a while) */
        return settle(r, 0);
    }
    if (total < t->qty) {
        if (total == 0)
            soldout_note(r->inv->cfg.soldout, t->sku, 0, r->seen);
        return refill_end(r, INV_SOLD_OUT);
    }
    r->home = t->home % r->l.nshards;
    r->need = t->qty - r->left[r->home];
    return give_next(r);
}

/* FULLEST: the giving shard's fullest segment, or none. */
static inv_do fullest_answer(struct inv_refill *r, aconn_result res,
                                    const redisReply *reply)
{
    if (r->cs->closing || res != ACONN_REPLY || reply->type != REDIS_REPLY_ARRAY)
        return refill_end(r, INV_UNAVAILABLE);
    int from = reply->elements == 1 ? (int)inv_reply_ll(reply->element[0], -1) : -1;
    if (from < 0) { /* none left there */
        r->left[r->giver] = 0;
        return give_next(r);
    }
    uint64_t id = orderid_next(r->inv->cfg.ids); /* unique, as an order's */
    if (!id)
        return refill_end(r, INV_UNAVAILABLE);
    /* args: epoch, id, units wanted, receiving gene, receiving segment, giving segment */
    snprintf(r->text[0], sizeof(r->text[0]), "%s", r->l.epoch);
    snprintf(r->text[1], sizeof(r->text[1]), "%" PRIu64, id);
    snprintf(r->text[2], sizeof(r->text[2]), "%lld", r->want);
    snprintf(r->text[3], sizeof(r->text[3]), "%d", r->l.genes[r->home]);
    snprintf(r->text[4], sizeof(r->text[4]), "%d", r->t->home);
    snprintf(r->text[5], sizeof(r->text[5]), "%d", from);
    r->state = REFILL_OUT;
    return step_run(r, r->l.genes[r->giver], from, 0, 6);
}

/* Units from the fullest other shard, half of what it holds at least, until
 * the order's shard holds its qty: then the order again. */
static inv_do give_next(struct inv_refill *r)
{
    if (r->need <= 0)
        return refill_end(r, INV_PENDING);
    int d = -1;
    for (int i = 0; i < r->l.nshards; i++)
        if (i != r->home && r->left[i] > 0 && (d < 0 || r->left[i] > r->left[d]))
            d = i;
    if (d < 0)
        return refill_end(r, INV_SOLD_OUT); /* taken meanwhile */
    r->giver = d;
    r->want = r->left[d] / 2 > r->need ? r->left[d] / 2 : r->need;
    r->state = REFILL_FULLEST;
    struct sku_keys k;
    inv_keys_init(&k, r->t->sku, r->l.genes[d]);
    const char *argv[] = {"ZREVRANGE", k.avail, "0", "0"};
    r->fullest = (struct inv_refill_slot){.r = r, .shard = d};
    if (acluster_command(r->cs->cluster, slot_of(r, d), on_slot, &r->fullest, 4, argv) !=
        RCONN_OK)
        return refill_end(r, INV_UNAVAILABLE);
    return INV_DO_AWAIT;
}

/* ---- the entries ----------------------------------------------------------- */

int inv_refill_check(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                     struct sku_layout *l)
{
    if (t->refills >= INV_REFILL_ROUNDS) { /* others took what was brought */
        inv_ticket_fail(inv, t, INV_SOLD_OUT);
        return -1;
    }
    if (inv_layout_get(inv, t->sku, l) != 0 || l->nshards < 1 || !cs->cluster ||
        cs->closing) {
        inv_ticket_fail(inv, t, INV_UNAVAILABLE);
        return -1;
    }
    return 0;
}

inv_do inv_refill_start(struct inv_refill *r, struct inv *inv,
                               struct inv_ticket *t, const struct sku_layout *l,
                               const struct inv_conns *cs, aconn_cb *cb, void *arg)
{
    r->inv = inv;
    r->t = t;
    r->l = *l;
    r->cs = cs;
    r->cb = cb;
    r->arg = arg;
    return settle(r, 0);
}

inv_do inv_refill_on_reply(struct inv_refill *r, aconn_result res,
                                  const redisReply *reply)
{
    if (r->answer == &r->fullest)
        return fullest_answer(r, res, reply);
    return read_answer(r, r->answer, res, reply);
}
