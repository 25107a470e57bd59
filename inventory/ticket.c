/* ticket.c: a ticket's life outside the runners: opened (what memory can
 * answer, its order id, its route), finished (its status counted once), and
 * what its replicas' acknowledgement means (the loop's WAIT is ack.c). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "acluster.h"
#include "aconn.h"
#include "cluster.h"
#include "inv_impl.h"
#include "path.h"
#include "text.h"

/* ---- opening a ticket --------------------------------------------------- */

void inv_ticket_clear(struct inv_ticket *t)
{
    inv_order_clear(&t->order);
    t->gene = -1;
    t->start_us = clock_now_us();
    t->st = INV_PENDING;
    t->next = NULL;
    t->refills = t->hops = t->xfer = 0;
    t->link = 0;
    t->end = INV_END_NONE;
    t->way = INV_WAY_NONE;
}

inv_status inv_ticket_open(struct inv *inv, struct inv_ticket *t, const char *sku,
                           const char *user_id, int qty, const char *idem_key)
{
    inv_ticket_clear(t);
    text_copy(t->sku, sizeof(t->sku), sku);
    text_copy(t->user_id, sizeof(t->user_id), user_id);
    text_copy(t->idem_key, sizeof(t->idem_key), idem_key ? idem_key : "");
    t->qty = qty;
    inv_status st = inv_soldout_answer(inv, sku, qty, idem_key);
    if (st == INV_PENDING && inv_order_new_id(inv, &t->order) != 0)
        st = INV_UNAVAILABLE; /* no id is unique without the worker lease */
    if (st != INV_PENDING) {
        inv_count_outcome(inv, st);
        return st;
    }
    text_copy(t->order.sku, sizeof(t->order.sku), sku);
    text_copy(t->order.user_id, sizeof(t->order.user_id), user_id);
    t->order.qty = qty;
    inv_ticket_route(inv, t); /* -1 while its SKU's layout is not known here */
    return INV_PENDING;
}

void inv_ticket_finish(struct inv *inv, struct inv_ticket *t, inv_status st)
{
    t->st = st;
    if (!t->xfer)
        inv_count_outcome(inv, st);
}

void inv_ticket_fail(struct inv *inv, struct inv_ticket *t, inv_status st)
{
    inv_ticket_finish(inv, t, st);
}

int inv_durable_argv(const struct inv *inv, const char *argv[3], char buf[2][16])
{
    if (inv->cfg.min_replicas_acked <= 0)
        return 0;
    snprintf(buf[0], 16, "%d", inv->cfg.min_replicas_acked);
    snprintf(buf[1], 16, "%d", inv->cfg.acked_wait_ms > 0 ? inv->cfg.acked_wait_ms : 500);
    argv[0] = "WAIT";
    argv[1] = buf[0];
    argv[2] = buf[1];
    return 3;
}

void inv_ack_key(int gene, char *buf, size_t len)
{
    if (gene >= 0)
        snprintf(buf, len, "sk:{%s}:ack", cluster_gene_tag(gene));
    else
        snprintf(buf, len, "sk:ack");
}

void inv_ticket_acked(struct inv *inv, struct inv_ticket *t, const redisReply *r)
{
    int acking = t->st == INV_PLACED || t->st == INV_REPLAYED || (t->end && t->st == INV_OK);
    if (!acking ||
        (r && r->type == REDIS_REPLY_INTEGER && r->integer >= inv->cfg.min_replicas_acked))
        return;
    if (t->end) { /* a pay or a cancel: counted by what it did, not as an order */
        count(&inv->counters.unacked);
        t->st = INV_OUTCOME_UNKNOWN;
        return;
    }
    /* counted as placed, or replayed, when decided */
    atomic_fetch_sub(
        t->st == INV_PLACED ? &inv->counters.placed : &inv->counters.replayed, 1);
    count(&inv->counters.unacked);
    inv_ticket_finish(inv, t, INV_OUTCOME_UNKNOWN);
}

void inv_tickets_finish(struct inv *inv, struct inv_ticket **t, int n, inv_status st)
{
    for (int i = 0; i < n; i++)
        inv_ticket_finish(inv, t[i], st);
}

rconn_status inv_ticket_eval(const struct inv_conns *cs, int slot, aconn_cb *cb,
                             void *arg, struct rscript *script, int nkeys, int argc,
                             const char **argv)
{
    return cs->cluster
               ? acluster_eval(cs->cluster, slot, cb, arg, script, nkeys, argc, argv)
               : aconn_eval(cs->data, cb, arg, script, nkeys, argc, argv);
}
