/* atomic.c: the atomic mode, no lock: one script (inventory/lua/atomic.lua)
 * checks, decrements and records an order: a machine of one ticket on an
 * event loop (path.h: inv_atomic_start, inv_atomic_on_reply). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv_impl.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_atomic;
/* inventory/lua/atomic.lua: the atomic mode, check and decrement, no lock. */
static struct rscript atomic_script = RSCRIPT_INIT("inv_atomic", lua_inventory_atomic);

/* Most fresh ids an order draws when it finds its id taken. */
#define INV_ID_TRIES 4

/* The atomic script's arguments for one order. */
struct atomic_call {
    char home[12], qtys[12], idtext[24], okey[40];
    const char *argv[18];
};

static void atomic_call_init(struct atomic_call *c, const struct sku_keys *k,
                             const char *sku, const char *user_id, int qty,
                             const char *idem_key, uint64_t id)
{
    snprintf(c->home, sizeof(c->home), "%u", seg_route(user_id));
    snprintf(c->qtys, sizeof(c->qtys), "%d", qty);
    snprintf(c->idtext, sizeof(c->idtext), "%" PRIu64, id);
    inv_record_key(c->okey, sizeof(c->okey), k->order, c->idtext);
    const char *argv[] = {k->meta,  k->stock,  k->sold, k->buyers, k->orders, c->okey,
                          k->idem,  k->avail,  k->back, k->due,    k->dues,   k->events,
                          c->home,  c->qtys,   user_id, c->idtext, sku,       idem_key};
    memcpy(c->argv, argv, sizeof(argv));
}

/* The outcome of the atomic script's answer r for an order of sku; INV_PENDING
 * when the order's id was found taken and it drew a fresh one (nothing was
 * written: again). seen:
 * the sold-out memory's generation when the call was sent. */
static inv_status atomic_outcome(struct inv_session *s, const char *sku,
                                 const redisReply *r, struct inv_order *order,
                                 uint64_t seen)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return INV_UNAVAILABLE;
    const redisReply *e1 = r->elements > 1 ? r->element[1] : NULL;
    const redisReply *e2 = r->elements > 2 ? r->element[2] : NULL;
    switch (inv_reply_ll(r->element[0], 0)) {
    case 1:
        order->segment = (int)inv_reply_ll(e1, 0);
        inv_order_placed(s->inv, s->gene, order, r->elements > 3 ? r->element[3] : NULL);
        order->nparts = 0;
        for (size_t i = 4; i + 1 < r->elements && order->nparts < INV_MAX_SEGMENTS;
             i += 2)
            order->parts[order->nparts++] =
                (struct inv_part){.segment = (int)inv_reply_ll(r->element[i], 0),
                                  .qty = (int)inv_reply_ll(r->element[i + 1], 0)};
        if (order->nparts == 0)
            inv_order_one_part(order, order->segment);
        if (order->nparts > 1 || inv_reply_ll(e2, 0) != order->segment)
            count(&s->inv->counters.spilled);
        return INV_PLACED;
    case -5:
        if (inv_reply_ll(e2, -1) == 0) /* not a unit left */
            inv_note_sold_out(s->inv, sku, (int)inv_reply_ll(e1, 0), seen);
        return INV_SOLD_OUT;
    case -6:
        return INV_NOT_FOUND;
    case -7:
        return INV_BAD_QTY;
    case -9:
        return inv_order_id_taken(s->inv, order);
    default:
        return inv_commit_refusal(r, order);
    }
}

/* Sends t's script (a try counted). */
static inv_do atomic_send(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                          aconn_cb *cb, void *arg)
{
    if (++t->tries > INV_TRIES) {
        inv_ticket_finish(inv, t, INV_UNAVAILABLE);
        return INV_DO_OVER;
    }
    struct sku_keys k;
    inv_keys_init(&k, t->sku, t->gene);
    struct atomic_call call;
    atomic_call_init(&call, &k, t->sku, t->user_id, t->qty, t->idem_key, t->order.id);
    t->seen = soldout_generation(inv->cfg.soldout);
    rconn_status rc = inv_ticket_eval(cs, cluster_gene_slot(t->gene), cb, arg,
                                      &atomic_script, 12, 18, call.argv);
    if (rc != RCONN_OK) {
        inv_ticket_finish(inv, t, INV_UNAVAILABLE); /* Redis is down: at once */
        return INV_DO_OVER;
    }
    return INV_DO_AWAIT;
}

inv_do inv_atomic_start(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                        aconn_cb *cb, void *arg)
{
    return atomic_send(inv, t, cs, cb, arg);
}

inv_do inv_atomic_on_reply(struct inv *inv, struct inv_ticket *t,
                           const struct inv_conns *cs, aconn_cb *cb, void *arg,
                           aconn_result res, const redisReply *r)
{
    if (res != ACONN_REPLY) {
        inv_ticket_finish(inv, t,
                          res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE);
        return INV_DO_OVER;
    }
    if (rconn_is_noscript(r)) /* the connection loads it again first */
        return atomic_send(inv, t, cs, cb, arg);
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        inv_reply_ll(r->element[0], 0) == -3) { /* a replay: its first order */
        const redisReply *first = r->elements >= 2 ? r->element[1] : NULL;
        uint64_t id = first && first->type == REDIS_REPLY_STRING
                          ? strtoull(first->str, NULL, 10)
                          : 0;
        if (id == 0) {
            inv_ticket_finish(inv, t, INV_UNAVAILABLE);
        } else {
            t->order.id = id;
            t->way = INV_WAY_LOAD;
        }
        return INV_DO_OVER;
    }
    /* Every other answer is read without a round trip: no connection needed. */
    struct inv_session view = {.inv = inv, .gene = t->gene};
    inv_status st = atomic_outcome(&view, t->sku, r, &t->order, t->seen);
    if (st == INV_PENDING) /* the id was taken: it has a fresh one */
        return atomic_send(inv, t, cs, cb, arg);
    if (st == INV_SOLD_OUT && inv->cfg.cluster) {
        t->way = INV_WAY_SHORT; /* short in its shard: units from the others */
        return INV_DO_OVER;
    }
    inv_ticket_finish(inv, t, st);
    return INV_DO_OVER;
}
