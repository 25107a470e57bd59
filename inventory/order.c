/* order.c: the calls of one order placed by itself, in the lock-guarded
 * modes, and the reading of their answers: what it learns before any lock
 * (peek.lua) and one commit over its segments (commit.lua). The order
 * machine (single.c) sends them. */
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

inv_status order_view_read(struct order_view *v, const redisReply *r, struct inv_order *o)
{
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->elements <= 2) {
        long long code = inv_reply_ll(r->element[0], 0);
        if (code == -17)
            return inv_malformed(o, r->elements > 1 ? r->element[1] : NULL);
        inv_status window =
            inv_window_refusal(code, r->elements > 1 ? r->element[1] : NULL, &v->window);
        if (window != INV_PENDING)
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

/* The stock a segment's HGET answered; -1 when Redis did not answer one. */
long long inv_stock_of(const redisReply *r, long long *back)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return -1;
    *back = inv_reply_ll(r->element[1], 0);
    return inv_reply_ll(r->element[0], 0);
}

/* commit.lua's KEYS and ARGV for an order over p[0..n-1]. */
void commit_call_init(struct commit_call *cc, struct order_ctx *c,
                      const struct part_hold *p, int n)
{
    cc->text = cc->inline_text;
    cc->argv = cc->inline_argv;
    if (n > PARTS_INLINE) {
        cc->text = xmalloc(sizeof(*cc->text) * (size_t)n);
        cc->argv = xmalloc(sizeof(*cc->argv) * (size_t)(19 + 5 * n));
    }
    const char **argv = cc->argv;
    int nkeys = 12 + n;
    snprintf(cc->qty, sizeof(cc->qty), "%d", c->qty);
    snprintf(cc->id, sizeof(cc->id), "%" PRIu64, c->order->id);
    inv_record_key(cc->okey, sizeof(cc->okey), c->k.order, cc->id);
    snprintf(cc->nparts, sizeof(cc->nparts), "%d", n);
    const char *head[] = {c->k.meta,   c->k.stock, c->k.sold, c->k.buyers,
                          c->k.orders, cc->okey,   c->k.idem, c->k.avail};
    memcpy(argv, head, sizeof(head));
    argv[8 + n] = c->k.back;
    argv[9 + n] = c->k.due;
    argv[10 + n] = c->k.dues;
    argv[11 + n] = c->k.events;
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
        inv_order_placed(inv, c->gene, o, r->elements > 1 ? r->element[1] : NULL);
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
        *again = inv_order_id_taken(s->inv, o) == INV_PENDING;
        return INV_UNAVAILABLE;
    default:
        return inv_commit_refusal(r, o);
    }
}

