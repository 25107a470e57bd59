/* order.c: one order placed by itself, in the lock-guarded modes: what it
 * learns before any lock (peek.lua), its segments' locks each with the read
 * of the stock (in ascending order when it needs several), the work, and
 * one commit over them all (commit.lua) with the last release. The path of
 * tests (inv_order_place), and of the tickets a group commit leaves
 * undecided (inv_ticket_single). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"
#include "xalloc.h"

/* The scripts: KEYS, ARGV and replies are described at the top of each file.
 * commit.lua, batch.lua and atomic.lua share idem.lua (the Idempotency-Key
 * check), limit.lua (the per-user limit), stock.lua (writing stock with its
 * index, choosing segments) and record.lua (recording a placed order);
 * peek.lua shares the first three. */
extern const struct rscript_source lua_inventory_commit, lua_inventory_peek,
    lua_inventory_fence_read, lua_inventory_read;
/* inventory/lua/commit.lua: commit of one order of the lock-guarded modes. */
static struct rscript commit_script = RSCRIPT_INIT("inv_commit", lua_inventory_commit);
/* inventory/lua/peek.lua: what an order learns before taking any lock. */
static struct rscript peek_script = RSCRIPT_INIT("inv_peek", lua_inventory_peek);
/* inventory/lua/fence_read.lua: the read under a lock whose tokens come from
 * outside the data Redis (zk), which raises the segment's high-water token. */
struct rscript inv_fence_read_script =
    RSCRIPT_INIT("inv_fence_read", lua_inventory_fence_read);
/* inventory/lua/read.lua: the read under a lock of the other modes. */
struct rscript inv_read_script = RSCRIPT_INIT("inv_read", lua_inventory_read);

void order_peek_call(const struct order_ctx *c, struct peek_call *p)
{
    snprintf(p->route, sizeof(p->route), "%u", seg_route(c->user_id));
    snprintf(p->qty, sizeof(p->qty), "%d", c->qty);
    snprintf(p->most, sizeof(p->most), "%d", PEEK_CANDIDATES);
    const char *argv[] = {c->k.meta,  c->k.stock,  c->k.buyers, c->k.idem,
                          c->k.avail, c->k.back,   p->route,    p->qty,
                          c->user_id, c->idem_key, p->most};
    memcpy(p->argv, argv, sizeof(argv));
    p->cmd =
        (struct rcmd){.script = &peek_script, .nkeys = 6, .argc = 11, .argv = p->argv};
}

inv_status order_view_read(struct order_view *v, const redisReply *r)
{
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->elements <= 2) {
        long long code = inv_reply_ll(r->element[0], 0);
        inv_status window =
            inv_window_refusal(code, r->elements > 1 ? r->element[1] : NULL, &v->window);
        if (window != INV_OK)
            return window;
        return code == -8 ? INV_IDEM_MISMATCH : INV_NOT_FOUND;
    }
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 9)
        return INV_UNAVAILABLE;
    redisReply **e = r->element;
    v->segments = (int)inv_reply_ll(e[0], 0);
    v->limit = (int)inv_reply_ll(e[1], 1);
    snprintf(v->epoch, sizeof(v->epoch), "%s",
             e[2]->type == REDIS_REPLY_STRING ? e[2]->str : "0");
    v->bought = inv_reply_ll(e[3], 0);
    snprintf(v->first_id, sizeof(v->first_id), "%s",
             e[4]->type == REDIS_REPLY_STRING ? e[4]->str : "");
    v->home = (int)inv_reply_ll(e[5], 0);
    v->remaining = inv_reply_ll(e[6], 0);
    v->initial = inv_reply_ll(e[7], 0);
    v->ncand = v->nplan = 0;
    if (inv_reply_ll(e[8], 0) == 0)
        for (size_t i = 9; i < r->elements && v->ncand < PEEK_CANDIDATES; i++)
            v->cand[v->ncand++] = (int)inv_reply_ll(e[i], 0);
    else
        for (size_t i = 9; i + 1 < r->elements && v->nplan < INV_MAX_SEGMENTS; i += 2)
            v->plan[v->nplan++] = (int)inv_reply_ll(e[i], 0);
    return v->segments >= 1 && v->segments <= INV_MAX_SEGMENTS ? INV_OK : INV_UNAVAILABLE;
}

static inv_status order_peek(struct order_ctx *c)
{
    struct peek_call p;
    order_peek_call(c, &p);
    redisReply *r = rconn_eval(c->s->rc, p.cmd.script, p.cmd.nkeys,
                               p.cmd.argc - p.cmd.nkeys, p.argv, NULL);
    inv_status st = order_view_read(&c->v, r);
    if (st == INV_NOT_STARTED)
        c->order->window = c->v.window;
    if (r)
        freeReplyObject(r);
    return st;
}

/* The stock a segment's HGET answered; -1 when Redis did not answer one. */
long long inv_stock_of(const redisReply *r, long long *back)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return -1;
    *back = inv_reply_ll(r->element[1], 0);
    return inv_reply_ll(r->element[0], 0);
}

/* Takes the lock lkey of segment seg (waiting wait_ms at most) together with
 * the read of the segment's stock: in the same round trip where the mode
 * allows. With tokens from outside the data Redis (zk) the read raises the
 * segment's high-water token to the grant's first (fence_read.lua); a grant
 * already succeeded by a later holder is released and answered LOCK_BUSY
 * (counted fenced off). On LOCK_ACQUIRED *stock is the stock read, -1 when
 * the read got no answer (the lock is held either way), *back the units given
 * back to it and not folded yet. */
lock_status inv_lock_and_read(struct inv_session *s, const struct sku_keys *k,
                              const char *lkey, int seg, int wait_ms,
                              struct lock_grant *g, long long *stock, long long *back)
{
    *back = 0;
    char segtext[12];
    snprintf(segtext, sizeof(segtext), "%d", seg);
    redisReply *rr = NULL;
    lock_status ls;
    if (!lock_fence_external(s->inv->cfg.lock)) {
        const char *argv[] = {k->stock, k->back, segtext};
        struct rcmd read = {
            .script = &inv_read_script, .nkeys = 2, .argc = 3, .argv = argv};
        ls = lock_acquire_then(s->lock, lkey, wait_ms, g, &read, &rr);
    } else if ((ls = lock_acquire(s->lock, lkey, wait_ms, g)) == LOCK_ACQUIRED) {
        char fkey[160], token[LOCK_FENCE_TEXT];
        lock_fence_key(lkey, fkey, sizeof(fkey));
        lock_fence_text(g, token, sizeof(token));
        const char *argv[] = {fkey, k->stock, k->back, token, segtext};
        rr = rconn_eval(s->rc, &inv_fence_read_script, 3, 2, argv, NULL);
        if (rr && rr->type == REDIS_REPLY_ARRAY &&
            rr->elements == 1) { /* {-2}: a later holder's mark */
            freeReplyObject(rr);
            lock_release(s->lock, lkey, g);
            count(&s->inv->counters.fenced_off);
            return LOCK_BUSY;
        }
    }
    if (ls == LOCK_ACQUIRED)
        *stock = inv_stock_of(rr, back);
    if (rr)
        freeReplyObject(rr);
    return ls;
}

static void part_init(struct part_hold *p, const struct sku_keys *k, int seg)
{
    p->seg = seg;
    p->take = 0;
    snprintf(p->lkey, sizeof(p->lkey), "%s%d", k->lock, seg);
}

/* Releases the locks of p[0..n-1]; LOCK_NOT_HELD when any lease was gone. */
static lock_status parts_release(struct inv_session *s, struct part_hold *p, int n)
{
    lock_status worst = LOCK_RELEASED;
    for (int i = n - 1; i >= 0; i--)
        if (lock_release(s->lock, p[i].lkey, &p[i].g) == LOCK_NOT_HELD)
            worst = LOCK_NOT_HELD;
    return worst;
}

/* Takes the locks of p[0..n-1] in turn (ascending segments: two orders that
 * need the same segments cannot each hold what the other waits for), each
 * with the read of its stock in the same round trip where the mode allows,
 * waiting until c->deadline at most. INV_OK: all held, stocks read. Else
 * nothing is held: INV_BUSY (a lock not within the wait) or INV_UNAVAILABLE. */
static inv_status parts_acquire(struct order_ctx *c, struct part_hold *p, int n)
{
    for (int i = 0; i < n; i++) {
        int wait_ms = (int)((c->deadline - clock_now_us()) / 1000);
        lock_status ls =
            inv_lock_and_read(c->s, &c->k, p[i].lkey, p[i].seg, wait_ms > 0 ? wait_ms : 0,
                              &p[i].g, &p[i].stock, &p[i].back);
        if (ls == LOCK_ACQUIRED) {
            if (p[i].stock >= 0)
                continue;
            i++; /* held, but its read failed */
        }
        parts_release(c->s, p, i);
        return ls == LOCK_BUSY ? INV_BUSY : INV_UNAVAILABLE;
    }
    return INV_OK;
}

/* commit.lua's KEYS and ARGV for an order over p[0..n-1]. */
void commit_call_init(struct commit_call *cc, struct order_ctx *c,
                      const struct part_hold *p, int n)
{
    cc->text = cc->inline_text;
    cc->argv = cc->inline_argv;
    if (n > PARTS_INLINE) {
        cc->text = xmalloc(sizeof(*cc->text) * (size_t)n);
        cc->argv = xmalloc(sizeof(*cc->argv) * (size_t)(18 + 5 * n));
    }
    const char **argv = cc->argv;
    int nkeys = 11 + n;
    snprintf(cc->qty, sizeof(cc->qty), "%d", c->qty);
    snprintf(cc->id, sizeof(cc->id), "%" PRIu64, c->order->id);
    snprintf(cc->okey, sizeof(cc->okey), "%s%s", c->k.order, cc->id);
    snprintf(cc->nparts, sizeof(cc->nparts), "%d", n);
    const char *head[] = {c->k.meta,   c->k.stock, c->k.sold, c->k.buyers,
                          c->k.orders, cc->okey,   c->k.idem, c->k.avail};
    memcpy(argv, head, sizeof(head));
    argv[8 + n] = c->k.back;
    argv[9 + n] = c->k.due;
    argv[10 + n] = c->k.events;
    const char **a = argv + nkeys;
    const char *args[] = {c->v.epoch, cc->qty,     c->user_id, cc->id,
                          c->sku,     c->idem_key, cc->nparts};
    memcpy(a, args, sizeof(args));
    a += 7;
    for (int i = 0; i < n; i++) {
        struct part_text *t = &cc->text[i];
        lock_fence_key(p[i].lkey, t->fkey, sizeof(t->fkey));
        snprintf(t->seg, sizeof(t->seg), "%d", p[i].seg);
        snprintf(t->take, sizeof(t->take), "%d", p[i].take);
        snprintf(t->stock, sizeof(t->stock), "%lld", p[i].stock);
        inv_fence_text(c->s->inv, &p[i].g, t->fence, sizeof(t->fence));
        argv[8 + i] = t->fkey;
        *a++ = t->seg;
        *a++ = t->take;
        *a++ = t->stock;
        *a++ = t->fence;
    }
    cc->cmd = (struct rcmd){
        .script = &commit_script, .nkeys = nkeys, .argc = (int)(a - argv), .argv = argv};
}

void commit_call_free(struct commit_call *cc)
{
    if (cc->text != cc->inline_text) {
        free(cc->text);
        free(cc->argv);
    }
}

int commit_replay_id(const redisReply *r, char *buf, size_t len)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        inv_reply_ll(r->element[0], 0) != -3 || r->element[1]->type != REDIS_REPLY_STRING)
        return -1;
    snprintf(buf, len, "%s", r->element[1]->str);
    return 0;
}

inv_status commit_read(struct order_ctx *c, const struct part_hold *p, int n,
                       const redisReply *r, lock_status rs, int *again)
{
    struct inv_session *s = c->s;
    struct inv *inv = s->inv;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return INV_UNAVAILABLE;
    struct inv_order *o = c->order;
    switch (inv_reply_ll(r->element[0], 0)) {
    case 1:
        inv_order_placed(o, r->elements > 1 ? r->element[1] : NULL);
        o->segment = p[0].seg;
        o->nparts = n;
        for (int i = 0; i < n; i++)
            o->parts[i] = (struct inv_part){.segment = p[i].seg, .qty = p[i].take};
        if (rs == LOCK_NOT_HELD)
            count(&inv->counters.commits_after_lease);
        if (n > 1 || p[0].seg != c->v.home)
            count(&inv->counters.spilled);
        return INV_PLACED;
    case -1:
        count(&inv->counters.epoch_changed);
        return INV_BUSY;
    case -2:
        count(&inv->counters.fenced_off);
        return INV_BUSY;
    case -9:
        *again = inv_order_id_taken(s->inv, o) == INV_OK;
        return INV_UNAVAILABLE;
    default:
        return inv_commit_refusal(s, r, o);
    }
}

/* The last step of an order's critical section, every lock of p[0..n-1] held
 * and each p[i].take set: one commit over all of them, fenced on each, sent
 * in one round trip with the release of the last lock; then the others are
 * released. Returns INV_PLACED or a final status. Sets *again when nothing
 * was written and the same parts are worth another try: the commit met a
 * Redis that had lost its script cache, or found the order's id taken (the
 * order has a fresh one now). */
static inv_status parts_commit(struct order_ctx *c, struct part_hold *p, int n,
                               int *again)
{
    struct inv_session *s = c->s;
    struct commit_call cc;
    commit_call_init(&cc, c, p, n);
    redisReply *r;
    uint64_t lost = rconn_unanswered(s->rc);
    lock_status rs = lock_release_after(s->lock, p[n - 1].lkey, &p[n - 1].g, &cc.cmd, &r);
    if (n > 1 && parts_release(s, p, n - 1) == LOCK_NOT_HELD)
        rs = LOCK_NOT_HELD;
    commit_call_free(&cc);
    if (!r)
        return inv_no_answer(s, lost);
    inv_status st;
    if (rconn_is_noscript(r)) {
        *again = rconn_script_reload(s->rc, cc.cmd.script) == RCONN_OK;
        st = INV_UNAVAILABLE;
    } else {
        st = commit_read(c, p, n, r, rs, again);
    }
    freeReplyObject(r);
    return st;
}

/* The critical section on one segment: acquire the segment lock together
 * with the read of its stock, check, work, then commit together with the
 * release. Returns INV_PLACED, INV_SOLD_OUT (this segment is short: try
 * another), or a final status; *again as parts_commit. */
static inv_status critical_section(struct order_ctx *c, int seg, int *again)
{
    struct part_hold p;
    part_init(&p, &c->k, seg);
    inv_status st = parts_acquire(c, &p, 1);
    if (st != INV_OK)
        return st;
    if (p.stock + p.back < c->qty) {
        parts_release(c->s, &p, 1);
        return INV_SOLD_OUT;
    }
    p.take = c->qty;
    if (c->s->inv->cfg.work_us > 0)
        clock_sleep_us(c->s->inv->cfg.work_us);
    return parts_commit(c, &p, 1, again);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

/* The part of p[0..n-1] (ascending segments) on segment seg. */
static struct part_hold *part_find(struct part_hold *p, int n, int seg)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (p[mid].seg == seg)
            return &p[mid];
        if (p[mid].seg < seg)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

/* The critical section of an order that no single segment can serve: the
 * plan's segments locked in ascending order, units taken from each in the
 * plan's order (home first) as the stock read under its lock allows, one
 * commit over them all. Returns as critical_section: INV_SOLD_OUT when they
 * no longer hold qty together (peek again). */
static inv_status multi_section(struct order_ctx *c, int *again)
{
    int n = c->v.nplan;
    struct part_hold *p = xmalloc(sizeof(*p) * (size_t)n);
    int *sorted = xmalloc(sizeof(*sorted) * (size_t)n);
    memcpy(sorted, c->v.plan, sizeof(*sorted) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(*sorted), cmp_int);
    for (int i = 0; i < n; i++)
        part_init(&p[i], &c->k, sorted[i]);
    free(sorted);
    inv_status st = parts_acquire(c, p, n);
    if (st != INV_OK) {
        free(p);
        return st;
    }
    int need = c->qty;
    for (int i = 0; i < n && need > 0; i++) {
        struct part_hold *x = part_find(p, n, c->v.plan[i]);
        x->take = (int)(x->stock + x->back < need ? x->stock + x->back : need);
        need -= x->take;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (p[i].take > 0)
            p[m++] = p[i];
        else /* nothing wanted from it: let it go now */
            parts_release(c->s, &p[i], 1);
    }
    if (need > 0) {
        parts_release(c->s, p, m);
        st = INV_SOLD_OUT;
    } else {
        if (c->s->inv->cfg.work_us > 0)
            clock_sleep_us(c->s->inv->cfg.work_us);
        st = parts_commit(c, p, m, again);
    }
    free(p);
    return st;
}

static inv_status place_locked(struct order_ctx *c)
{
    struct inv_session *s = c->s;
    struct inv *inv = s->inv;
    struct order_view *v = &c->v;
    c->deadline = clock_now_us() + (int64_t)inv->cfg.wait_ms * 1000;
    int tries_left = INV_ID_TRIES; /* of a section whose commit wrote nothing (again) */
    /* Each round tries the segments the peek saw with stock. A candidate found
     * short under its lock was emptied meanwhile; once all are, peek again: the
     * next peek no longer lists them, so the rounds end. An order of several
     * segments whose plan fell short under the locks peeks again too. */
    for (;;) {
        uint64_t seen = soldout_generation(inv->cfg.soldout);
        inv_status st = order_peek(c);
        if (st != INV_OK)
            return st;
        if (s->gene < 0) /* a shard's figures are not its SKU's */
            inv_layout_put(inv, c->sku, v->segments, v->initial, v->epoch, NULL, 0);
        if (c->qty > v->limit)
            return INV_BAD_QTY;
        if (v->first_id[0]) {
            st = inv_order_load(s, v->first_id, c->order);
            return st == INV_OK ? INV_REPLAYED : st;
        }
        if (v->bought + c->qty > v->limit)
            return INV_LIMIT;
        if (v->ncand == 0 && v->nplan == 0) {
            if (v->remaining == 0) /* not a unit left */
                inv_note_sold_out(inv, c->sku, v->limit, seen);
            return INV_SOLD_OUT;
        }
        if (v->nplan > 0) {
            if (clock_now_us() >= c->deadline)
                return INV_BUSY;
            int again = 0;
            st = multi_section(c, &again);
            if (again && --tries_left > 0)
                continue;
            if (st != INV_SOLD_OUT)
                return st;
            continue;
        }
        for (int i = 0; i < v->ncand; i++) {
            int again = 0;
            st = critical_section(c, v->cand[i], &again);
            if (again && --tries_left > 0)
                i--; /* nothing was written: the same segment again, once */
            else if (st != INV_SOLD_OUT)
                return st;
        }
    }
}

/* Places one order of the lock-guarded modes, its id drawn. */
static inv_status place_one_locked(struct inv_session *s, const char *sku,
                                   const char *user_id, int qty, const char *idem_key,
                                   struct inv_order *order)
{
    struct order_ctx c = {.s = s,
                          .sku = sku,
                          .user_id = user_id,
                          .idem_key = idem_key,
                          .qty = qty,
                          .order = order};
    inv_keys_init(&c.k, sku, s->gene);
    return place_locked(&c);
}

/* Draws the order's id and places it the way the lock mode does. */
static inv_status place(struct inv_session *s, const char *sku, const char *user_id,
                        int qty, const char *idem_key, struct inv_order *order)
{
    rconn_check(s->rc);
    if (inv_order_new_id(s->inv, order) != 0)
        return INV_UNAVAILABLE; /* no id is unique without the worker lease */
    snprintf(order->sku, sizeof(order->sku), "%s", sku);
    snprintf(order->user_id, sizeof(order->user_id), "%s", user_id);
    order->qty = qty;
    struct sku_keys k;
    inv_keys_init(&k, sku, s->gene);
    const char *idem = idem_key ? idem_key : "";
    return s->inv->cfg.lock ? place_one_locked(s, sku, user_id, qty, idem, order)
                            : inv_place_atomic(s, &k, sku, user_id, qty, idem, order);
}

inv_status inv_order_place(struct inv_session *s, const char *sku, const char *user_id,
                           int qty, const char *idem_key, struct inv_order *order)
{
    struct inv *inv = s->inv;
    if (s->cl) { /* as a ticket: routed to its shard, spilling over as those do */
        struct inv_ticket *t = xmalloc(sizeof(*t));
        inv_status st = inv_ticket_open(inv, t, sku, user_id, qty, idem_key);
        if (st == INV_PENDING) {
            inv_ticket_single(s, t);
            st = t->st;
        }
        *order = t->order;
        free(t);
        return st;
    }
    inv_order_clear(order);
    /* Sold out in this epoch, as this instance saw: no id, no Redis. */
    inv_status st = inv_soldout_answer(inv, sku, qty, idem_key);
    if (st == INV_OK)
        st = place(s, sku, user_id, qty, idem_key, order);
    inv_count_outcome(inv, st);
    return st;
}

/* Places t by itself on s (one Redis, or the session of t's shard), as the
 * lock mode does. */
inv_status inv_ticket_place(struct inv_session *s, struct inv_ticket *t)
{
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, t->sku, s->gene);
    uint64_t link = inv_link_before(s->rc);
    inv_status st =
        s->inv->cfg.lock
            ? place_one_locked(s, t->sku, t->user_id, t->qty, t->idem_key, &t->order)
            : inv_place_atomic(s, &k, t->sku, t->user_id, t->qty, t->idem_key, &t->order);
    t->link = inv_link_after(s->rc, link);
    return st;
}

void inv_ticket_single(struct inv_session *s, struct inv_ticket *t)
{
    inv_ticket_finish(s->inv, t,
                      s->cl ? inv_ticket_place_shards(s, t) : inv_ticket_place(s, t));
}
