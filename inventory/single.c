/* single.c: one order by itself on an event loop, the order machine of
 * single.h: peek.lua, then a replay's load, or its parts' locks (each a
 * hold's locking states, hold.c), the work as a timer, commit.lua with the
 * releases behind it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "orderid.h"
#include "single.h"
#include "xalloc.h"

/* Most peeks of one order (a plan or the candidates found short under their
 * locks, a commit that wrote nothing). */
#define SINGLE_ROUNDS 8

/* What follows RELEASING once every part is released. */
enum { AFTER_OVER = 0, AFTER_PEEK, AFTER_NEXT, AFTER_ALONE };

static inv_do peek_send(struct inv_single *m);
static inv_do release_next(struct inv_single *m);

/* Ends t with st (counted once). */
static void finish(struct inv_single *m, inv_status st)
{
    inv_ticket_finish(m->s->inv, m->t, st);
}

static void on_own(void *arg, aconn_result res, redisReply *r)
{
    struct inv_single *m = arg;
    m->index = -1;
    m->own = 0;
    m->cb(m->arg, res, r);
}

static void on_part(void *arg, aconn_result res, redisReply *r)
{
    struct inv_single_part *p = arg;
    struct inv_single *m = p->m;
    m->index = (int)(p - m->part);
    m->cb(m->arg, res, r);
}

/* Queues the machine's own command cmd for the shard of gene (on one Redis:
 * the data Redis). 1, or 0 when refused. */
static int own_send(struct inv_single *m, int gene, const struct rcmd *cmd)
{
    const struct inv_conns *cs = m->cs;
    rconn_status rc;
    if (cs->cluster) {
        int slot = cluster_gene_slot(gene);
        rc = cmd->script
                 ? acluster_eval(cs->cluster, slot, on_own, m, cmd->script, cmd->nkeys,
                                 cmd->argc, cmd->argv)
                 : acluster_command(cs->cluster, slot, on_own, m, cmd->argc, cmd->argv);
    } else if (cs->data) {
        rc = cmd->script ? aconn_eval(cs->data, on_own, m, cmd->script, cmd->nkeys,
                                      cmd->argc, cmd->argv)
                         : aconn_command(cs->data, on_own, m, cmd->argc, cmd->argv, NULL);
    } else {
        rc = RCONN_ERR; /* the loop is closing */
    }
    m->own = rc == RCONN_OK;
    return m->own;
}

static void machine_init(struct inv_single *m, struct inv_session *s,
                         struct inv_ticket *t, const struct inv_conns *cs, aconn_cb *cb,
                         void *arg)
{
    m->t = t;
    m->tv[0] = t;
    m->s = s;
    m->cs = cs;
    m->cb = cb;
    m->arg = arg;
    m->nparts = m->cur = 0;
    m->cand = -1;
    m->rounds = m->own = m->noscripts = 0;
    m->after = AFTER_OVER;
    m->xfer = NULL;
    t->way = INV_WAY_NONE;
    struct order_ctx *c = &m->c;
    c->s = s;
    inv_keys_init(&c->k, t->sku, t->gene);
    c->gene = t->gene;
    c->sku = t->sku;
    c->user_id = t->user_id;
    c->idem_key = t->idem_key;
    c->qty = t->qty;
    c->order = &t->order;
}

/* ---- a replay: its first order ------------------------------------------ */

/* LOADING: the record of t->order.id, the first order of t's key. */
static inv_do load_send(struct inv_single *m)
{
    uint64_t id = m->t->order.id;
    struct sku_keys k;
    inv_keys_init(&k, "", m->cs->cluster ? orderid_gene_of(id) : -1);
    char idt[24], okey[64];
    snprintf(idt, sizeof(idt), "%" PRIu64, id);
    inv_record_key(okey, sizeof(okey), k.order, idt);
    const char *argv[] = {okey,      idt,        "sku",   "user_id", "qty",
                          "segment", "segments", "state", "pay_by"};
    struct rcmd cmd = {
        .script = &inv_rec_read_script, .nkeys = 1, .argc = 9, .argv = argv};
    m->state = SINGLE_LOADING;
    if (!own_send(m, orderid_gene_of(id), &cmd)) {
        finish(m, INV_UNAVAILABLE);
        m->state = SINGLE_RELEASING; /* parts may still be releasing */
        m->after = AFTER_OVER;
        return release_next(m);
    }
    return INV_DO_AWAIT;
}

/* A first order's id as the scripts answer it, into t->order.id: 0, or -1. */
static int first_id_set(struct inv_single *m, const char *text)
{
    char *end;
    errno = 0;
    unsigned long long id = strtoull(text, &end, 10);
    if (errno || *end || end == text)
        return -1;
    m->t->order.id = (uint64_t)id;
    return 0;
}

/* ---- the parts' locks ---------------------------------------------------- */

static int part_busy(const struct inv_single_part *p)
{
    return p->h.state != HOLD_ENDED;
}

/* What RELEASING does once its answers are in. */
static inv_do released(struct inv_single *m);

/* Nothing more while the machine's own command or a part's are owed. */
static inv_do release_next(struct inv_single *m)
{
    if (m->own)
        return INV_DO_AWAIT;
    for (int i = 0; i < m->nparts; i++)
        if (part_busy(&m->part[i]))
            return INV_DO_AWAIT;
    return released(m);
}

/* RELEASING: the parts held let go; then `after`. */
static inv_do release_held(struct inv_single *m, int after)
{
    m->state = SINGLE_RELEASING;
    m->after = after;
    for (int i = 0; i < m->nparts; i++)
        if (m->part[i].h.state == HOLD_WORKING || m->part[i].h.state == HOLD_COMMITTING)
            inv_hold_release(m->s, &m->part[i].h);
    return release_next(m);
}

static inv_do part_do(struct inv_single *m, struct inv_single_part *p,
                             inv_do d);

/* LOCKING part i: its hold's first step. */
static inv_do part_lock(struct inv_single *m, int i)
{
    struct inv_single_part *p = &m->part[i];
    m->state = SINGLE_LOCKING;
    m->cur = i;
    p->take = 0;
    /* parts 0..i-1 held: a writer that waits for them must not hold i back */
    p->h.reading = i > 0;
    return part_do(m, p,
                   inv_hold_start(m->s, &p->h, m->tv, 1, p->h.seg, 0, m->cs, on_part, p));
}

/* Room for n parts, none busy: each a hold that holds nothing. */
static void parts_make(struct inv_single *m, const int *segs, int n)
{
    if (n > m->cap) {
        free(m->part);
        m->part = xcalloc((size_t)n, sizeof(*m->part));
        m->cap = n;
    }
    for (int i = 0; i < n; i++) {
        m->part[i].m = m;
        inv_hold_init(&m->part[i].h, segs[i]);
        m->part[i].take = 0;
    }
    m->nparts = n;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

/* The part on segment seg (parts ascending). */
static struct inv_single_part *part_on(struct inv_single *m, int seg)
{
    for (int i = 0; i < m->nparts; i++)
        if (m->part[i].h.seg == seg)
            return &m->part[i];
    return NULL;
}

static inv_do commit_send(struct inv_single *m);

/* WORKING: the orders' work as a timer (none: the commit at once). */
static inv_do work(struct inv_single *m)
{
    m->state = SINGLE_WORKING;
    int work_us = m->s->inv->cfg.work_us;
    if (work_us <= 0)
        return commit_send(m);
    m->due_us = clock_now_us() + work_us;
    return INV_DO_DUE;
}

static inv_do xfer_send(struct inv_single *m);

/* Part m->cur holds its lock with its stock read. */
static inv_do part_held(struct inv_single *m)
{
    struct inv_single_part *p = &m->part[m->cur];
    if (m->xfer)
        return xfer_send(m);
    if (m->cand >= 0) { /* one segment */
        if (p->h.stock + p->h.back < m->c.qty)
            return release_held(m, AFTER_NEXT); /* emptied meanwhile */
        p->take = m->c.qty;
        return work(m);
    }
    if (m->cur + 1 < m->nparts)
        return part_lock(m, m->cur + 1);
    /* every part held: units from each in the plan's order (home first) as
     * the stock read under its lock allows */
    int need = m->c.qty;
    for (int i = 0; i < m->c.v.nplan && need > 0; i++) {
        struct inv_single_part *x = part_on(m, m->c.v.plan[i]);
        long long has = x->h.stock + x->h.back;
        x->take = (int)(has < need ? has : need);
        need -= x->take;
    }
    if (need > 0) /* they no longer hold qty together: peek again */
        return release_held(m, AFTER_PEEK);
    return work(m);
}

/* What part p's hold asks (d) while the machine is in its state. */
static inv_do part_do(struct inv_single *m, struct inv_single_part *p,
                             inv_do d)
{
    if (m->state != SINGLE_LOCKING || p != &m->part[m->cur])
        return m->state == SINGLE_RELEASING ? release_next(m) : INV_DO_AWAIT;
    switch (d) {
    case INV_DO_AWAIT:
        return INV_DO_AWAIT;
    case INV_DO_DUE:
        if (p->h.state == HOLD_WORKING)
            return part_held(m);
        m->due_us = p->h.due_us; /* PAUSED: the next attempt then */
        return INV_DO_DUE;
    case INV_DO_HANDOFF:
        return INV_DO_HANDOFF;
    default: /* OVER, not held: busy, unavailable (t final), or the layout was
                forgotten */
        if (m->t->st == INV_PENDING && m->xfer) /* its segment not in the layout */
            finish(m, INV_UNAVAILABLE);
        if (m->t->st != INV_PENDING)
            return release_held(m, AFTER_OVER);
        /* one Redis: the next peek learns it; a cluster's shards, the driver */
        return release_held(m, m->s->inv->cfg.cluster ? AFTER_ALONE : AFTER_PEEK);
    }
}

/* ---- the commit ---------------------------------------------------------- */

/* The parts that take units, as the commit names them: into p (room for
 * m->nparts). Returns how many. */
static int parts_taking(const struct inv_single *m, struct part_hold *p)
{
    int n = 0;
    for (int i = 0; i < m->nparts; i++) {
        const struct inv_single_part *x = &m->part[i];
        if (x->take <= 0)
            continue;
        p[n].seg = x->h.seg;
        snprintf(p[n].lkey, sizeof(p[n].lkey), "%s", x->h.lkey);
        p[n].g = x->h.g;
        p[n].stock = x->h.stock;
        p[n].take = x->take;
        n++;
    }
    return n;
}

/* WORKING -> COMMITTING: commit.lua over the parts that take units, fenced
 * on each, every part's release behind it where it may share its pipeline. */
static inv_do commit_send(struct inv_single *m)
{
    struct part_hold inline_p[PARTS_INLINE], *p = inline_p;
    if (m->nparts > PARTS_INLINE)
        p = xmalloc(sizeof(*p) * (size_t)m->nparts);
    int n = parts_taking(m, p);
    struct commit_call cc;
    commit_call_init(&cc, &m->c, p, n);
    int sent = own_send(m, m->t->gene, &cc.cmd);
    commit_call_free(&cc);
    if (p != inline_p)
        free(p);
    if (!sent) {
        finish(m, INV_UNAVAILABLE);
        return release_held(m, AFTER_OVER);
    }
    m->state = SINGLE_COMMITTING;
    for (int i = 0; i < m->nparts; i++)
        if (m->part[i].h.state == HOLD_WORKING)
            inv_hold_release_behind(m->s, &m->part[i].h);
    return INV_DO_AWAIT;
}

/* ---- a transfer's step ---------------------------------------------------- */

/* WORKING -> COMMITTING: the transfer's script, fenced by the part's grant,
 * its release behind it. */
static inv_do xfer_send(struct inv_single *m)
{
    struct inv_single_part *p = &m->part[0];
    struct inv_xfer_call xc;
    inv_xfer_call_init(&xc, m->s->inv, m->t->sku, m->t->gene, p->h.seg, m->xfer->xin,
                       m->xfer->nargs, m->xfer->args, &p->h.g);
    if (!own_send(m, m->t->gene, &xc.cmd)) {
        finish(m, INV_UNAVAILABLE);
        return release_held(m, AFTER_OVER);
    }
    m->state = SINGLE_COMMITTING;
    if (p->h.state == HOLD_WORKING)
        inv_hold_release_behind(m->s, &p->h);
    return INV_DO_AWAIT;
}

static inv_do xfer_answered(struct inv_single *m, aconn_result res,
                                   const redisReply *r)
{
    long long got = 0;
    inv_status st = res == ACONN_REPLY && rconn_is_noscript(r)
                        ? INV_PENDING /* nothing ran: the step runs again */
                        : inv_xfer_outcome(res, r, &got, &m->t->order);
    m->t->order.qty = (int)got;
    finish(m, st);
    return release_held(m, AFTER_OVER);
}

/* The commit's answer decides t (or, nothing written, another round). */
static inv_do committed(struct inv_single *m, aconn_result res,
                               const redisReply *r)
{
    if (m->xfer)
        return xfer_answered(m, res, r);
    int after = AFTER_OVER;
    char first[24];
    if (res != ACONN_REPLY) {
        finish(m, res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE);
    } else if (rconn_is_noscript(r)) { /* nothing ran: sent whole next time */
        if (++m->noscripts <= 4)
            after = AFTER_PEEK;
        else
            finish(m, INV_UNAVAILABLE);
    } else if (commit_replay_id(r, first, sizeof(first)) == 0) {
        if (first_id_set(m, first) != 0)
            finish(m, INV_UNAVAILABLE);
        else
            after = -1; /* the first order's record, beside the releases */
    } else {
        struct part_hold inline_p[PARTS_INLINE], *p = inline_p;
        if (m->nparts > PARTS_INLINE)
            p = xmalloc(sizeof(*p) * (size_t)m->nparts);
        int n = parts_taking(m, p), again = 0;
        inv_status st = commit_read(&m->c, p, n, r, LOCK_RELEASED, &again);
        if (p != inline_p)
            free(p);
        if (again)
            after = AFTER_PEEK;
        else
            finish(m, st);
        if (st == INV_PLACED) /* a release that finds its lease gone counts it */
            for (int i = m->nparts - 1; i >= 0; i--)
                if (m->part[i].take > 0) {
                    m->part[i].h.placed = 1;
                    break;
                }
    }
    inv_do next = release_held(m, after < 0 ? AFTER_OVER : after);
    if (after < 0)
        return load_send(m); /* RELEASING goes on behind it */
    return next;
}

/* ---- the peek ------------------------------------------------------------ */

static inv_do peek_send(struct inv_single *m)
{
    if (++m->rounds > SINGLE_ROUNDS) {
        finish(m, INV_BUSY);
        m->state = SINGLE_DONE;
        return INV_DO_OVER;
    }
    struct peek_call pc;
    order_peek_call(&m->c, &pc);
    m->seen = soldout_generation(m->s->inv->cfg.soldout);
    m->state = SINGLE_PEEKING;
    m->nparts = 0;
    m->cand = -1;
    if (!own_send(m, m->t->gene, &pc.cmd)) {
        finish(m, INV_UNAVAILABLE);
        m->state = SINGLE_DONE;
        return INV_DO_OVER;
    }
    return INV_DO_AWAIT;
}

/* Ends t with st before any lock. */
static inv_do refused(struct inv_single *m, inv_status st)
{
    finish(m, st);
    m->state = SINGLE_DONE;
    return INV_DO_OVER;
}

/* t goes back to the driver, nothing written (a cluster's: its shards are
 * learnt, or units brought to its shard). */
static inv_do alone(struct inv_single *m)
{
    m->t->way = INV_WAY_SHORT;
    m->state = SINGLE_DONE;
    return INV_DO_OVER;
}

/* Tries the peek's candidate m->cand + 1, or peeks again. */
static inv_do next_candidate(struct inv_single *m)
{
    if (++m->cand >= m->c.v.ncand)
        return peek_send(m);
    parts_make(m, &m->c.v.cand[m->cand], 1);
    return part_lock(m, 0);
}

/* PEEKING: what the SKU looks like before any lock decides the way. */
static inv_do peeked(struct inv_single *m, aconn_result res, const redisReply *r)
{
    struct inv *inv = m->s->inv;
    struct order_view *v = &m->c.v;
    if (res == ACONN_REPLY && rconn_is_noscript(r) && ++m->noscripts <= 4) {
        m->rounds--;
        return peek_send(m);
    }
    inv_status st = order_view_read(v, res == ACONN_REPLY ? r : NULL, m->c.order);
    if (st == INV_NOT_STARTED)
        m->t->order.window = v->window;
    if (st != INV_OK)
        return refused(m, st); /* the peek writes nothing: a lost answer too */
    struct sku_layout layout;
    if (!inv->cfg.cluster) /* a shard's figures are not its SKU's */
        inv_layout_put(inv, m->c.sku, v->segments, v->initial, v->epoch, NULL, 0);
    else if (inv_layout_get(inv, m->c.sku, &layout) != 0)
        return alone(m); /* its shards are learnt first */
    if (m->c.qty > v->limit)
        return refused(m, INV_BAD_QTY);
    if (v->first_id[0]) {
        if (first_id_set(m, v->first_id) != 0)
            return refused(m, INV_UNAVAILABLE);
        return load_send(m);
    }
    if (v->bought + m->c.qty > v->limit)
        return refused(m, INV_LIMIT);
    if (v->ncand == 0 && v->nplan == 0) {
        if (inv->cfg.cluster) /* short in its shard: units from the others */
            return alone(m);
        if (v->remaining == 0) /* not a unit left */
            inv_note_sold_out(inv, m->c.sku, v->limit, m->seen);
        return refused(m, INV_SOLD_OUT);
    }
    if (v->nplan > 0) {
        int *segs = xmalloc(sizeof(*segs) * (size_t)v->nplan);
        memcpy(segs, v->plan, sizeof(*segs) * (size_t)v->nplan);
        qsort(segs, (size_t)v->nplan, sizeof(*segs), cmp_int);
        parts_make(m, segs, v->nplan);
        free(segs);
        return part_lock(m, 0);
    }
    if (m->queue_ok) { /* a group commit of that segment serves it */
        m->t->home = v->home;
        m->t->seg = v->cand[0];
        m->t->way = INV_WAY_QUEUE;
        m->state = SINGLE_DONE;
        return INV_DO_OVER;
    }
    m->cand = -1;
    return next_candidate(m);
}

/* The first order's record answered: t is its replay. */
static inv_do loaded(struct inv_single *m, aconn_result res, const redisReply *r)
{
    struct inv_ticket *t = m->t;
    uint64_t id = t->order.id;
    if (res == ACONN_REPLY && rconn_is_noscript(r) && ++m->noscripts <= 4)
        return load_send(m); /* nothing ran: sent whole next time */
    inv_status st = inv_order_read(res == ACONN_REPLY ? r : NULL, id, &t->order);
    t->order.id = id;
    finish(m, st == INV_OK ? INV_REPLAYED : st == INV_NOT_FOUND ? INV_GONE : st);
    m->state = SINGLE_RELEASING;
    m->after = AFTER_OVER;
    return release_next(m);
}

static inv_do released(struct inv_single *m)
{
    switch (m->after) {
    case AFTER_PEEK:
        return peek_send(m);
    case AFTER_NEXT:
        return next_candidate(m);
    case AFTER_ALONE:
        return alone(m);
    default:
        m->state = SINGLE_DONE;
        return INV_DO_OVER;
    }
}

/* ---- entries ------------------------------------------------------------- */

inv_do inv_single_start(struct inv_single *m, struct inv_session *s,
                               struct inv_ticket *t, int queue_ok,
                               const struct inv_conns *cs, aconn_cb *cb, void *arg)
{
    machine_init(m, s, t, cs, cb, arg);
    m->queue_ok = queue_ok;
    return peek_send(m);
}

inv_do inv_single_xfer(struct inv_single *m, struct inv_session *s,
                              struct inv_ticket *t, const struct inv_xfer *x,
                              const struct inv_conns *cs, aconn_cb *cb, void *arg)
{
    machine_init(m, s, t, cs, cb, arg);
    m->queue_ok = 0;
    m->xfer = x;
    parts_make(m, &t->seg, 1);
    m->part[0].h.layout = x->layout;
    return part_lock(m, 0);
}

inv_do inv_single_load(struct inv_single *m, struct inv_session *s,
                              struct inv_ticket *t, const struct inv_conns *cs,
                              aconn_cb *cb, void *arg)
{
    machine_init(m, s, t, cs, cb, arg);
    m->queue_ok = 0;
    return load_send(m);
}

inv_do inv_single_on_reply(struct inv_single *m, aconn_result res,
                                  const redisReply *r)
{
    if (m->index >= 0) {
        struct inv_single_part *p = &m->part[m->index];
        return part_do(m, p, inv_hold_on_reply(m->s, &p->h, res, r));
    }
    switch (m->state) {
    case SINGLE_PEEKING:
        return peeked(m, res, r);
    case SINGLE_LOADING:
        return loaded(m, res, r);
    case SINGLE_COMMITTING:
        return committed(m, res, r);
    default:
        return release_next(m);
    }
}

inv_do inv_single_on_timer(struct inv_single *m)
{
    if (m->state == SINGLE_WORKING)
        return commit_send(m);
    struct inv_single_part *p = &m->part[m->cur];
    return part_do(m, p, inv_hold_on_timer(m->s, &p->h));
}

const struct inv_hold *inv_single_waiting(const struct inv_single *m)
{
    return &m->part[m->cur].h;
}

int inv_single_wait_send(struct inv_single *m, struct aconn *blocking, aconn_cb *cb,
                         void *arg)
{
    return inv_hold_wait_send(m->s, &m->part[m->cur].h, blocking, cb, arg);
}

inv_do inv_single_on_handoff(struct inv_single *m, aconn_result res,
                                    const redisReply *r)
{
    struct inv_single_part *p = &m->part[m->cur];
    return part_do(m, p, inv_hold_on_handoff(m->s, &p->h, res, r));
}

inv_do inv_single_attempt(struct inv_single *m)
{
    struct inv_single_part *p = &m->part[m->cur];
    return part_do(m, p, inv_hold_attempt(m->s, &p->h));
}

void inv_single_abandon(struct inv_single *m)
{
    for (int i = 0; i < m->nparts; i++)
        inv_hold_drop(m->s, &m->part[i].h);
    if (m->t->st == INV_PENDING)
        finish(m, INV_UNAVAILABLE);
    m->state = SINGLE_DONE;
}

void inv_single_clear(struct inv_single *m)
{
    free(m->part);
    m->part = NULL;
    m->cap = m->nparts = 0;
}
