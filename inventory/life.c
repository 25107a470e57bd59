/* life.c: a reservation after it was placed: paid, cancelled by its buyer, or
 * expired at its pay_by, the last two giving its units back to the segments
 * they came from (inventory/lua/back.lua says how, give.lua does it). Each
 * change is one script that checks the order's state and changes it in the
 * same step, so that no unit comes back twice and a paid order's never. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "aconn.h"
#include "cluster.h"
#include "duty.h"
#include "inv_impl.h"
#include "orderid.h"
#include "path.h"
#include "soldout.h"
#include "text.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_pay, lua_inventory_cancel,
    lua_inventory_due;
/* inventory/lua/pay.lua: a pending order becomes paid, or expires. */
static struct rscript pay_script = RSCRIPT_INIT("inv_pay", lua_inventory_pay);
/* inventory/lua/cancel.lua: a pending order is cancelled, or expires. */
static struct rscript cancel_script = RSCRIPT_INIT("inv_cancel", lua_inventory_cancel);
/* inventory/lua/due.lua: a SKU's pending orders past pay_by expire. */
static struct rscript due_script = RSCRIPT_INIT("inv_due", lua_inventory_due);

/* The status of a pay or cancel script's refusal code. */
static inv_status life_refusal(long long code)
{
    switch (code) {
    case -12:
        return INV_NOT_PENDING;
    case -13:
        return INV_CANCELLED;
    case -14:
        return INV_EXPIRED;
    case -15:
        return INV_FORBIDDEN;
    case -16:
        return INV_PAID;
    default:
        return INV_UNAVAILABLE;
    }
}

/* Counts what a pay or cancel did: code 1 changed the order (2 found it so
 * already), units came back (an expiry found on the way counts too). */
static void life_count(struct inv *inv, long long code, long long units,
                       _Atomic uint64_t *changed)
{
    if (code == 1)
        count(changed);
    if (code == -14 && units > 0)
        count(&inv->counters.expired);
    if (units > 0)
        atomic_fetch_add_explicit(&inv->counters.units_returned, (uint64_t)units,
                                  memory_order_relaxed);
}

/* ---- a pay or a cancel on an event loop ------------------------------------
 *
 * One call, driven by the loop's engine like the atomic mode's (path.h):
 * pay.lua or cancel.lua, on the shard the order's id names, reads the order's
 * record, learns its SKU from it (whose keys it names itself: give.lua's
 * life_keys_of), checks its state and changes it in one step, and answers
 * with the record as it read it. Over when it answers: t final (its INV_OK
 * once the engine has the replicas' acknowledgement, ack.h); the script lost:
 * sent again. */

void inv_end_open(struct inv_ticket *t, inv_end end, uint64_t id, const char *arg)
{
    inv_ticket_clear(t);
    t->order.id = id;
    t->end = end;
    t->sku[0] = '\0';
    text_copy(end == INV_END_CANCEL ? t->user_id : t->idem_key,
              end == INV_END_CANCEL ? sizeof(t->user_id) : sizeof(t->idem_key), arg);
    t->qty = 0;
    t->home = t->seg = -1;
}

/* Sends t's script (a try counted). */
static inv_do end_send(struct inv_ticket *t, const struct inv_conns *cs, aconn_cb *cb,
                       void *arg)
{
    if (++t->tries > INV_TRIES) {
        t->st = INV_UNAVAILABLE; /* nothing sent this step: the last one's stands */
        return INV_DO_OVER;
    }
    uint64_t id = t->order.id;
    t->gene = cs->cluster ? orderid_gene_of(id) : -1;
    struct sku_keys k;
    inv_keys_init(&k, "", t->gene);
    char idt[24], okey[64];
    snprintf(idt, sizeof(idt), "%" PRIu64, id);
    inv_record_key(okey, sizeof(okey), k.order, idt);
    struct rscript *script = t->end == INV_END_PAY ? &pay_script : &cancel_script;
    const char *argv[] = {okey,
                          k.events,
                          idt,
                          t->end == INV_END_PAY ? t->idem_key : t->user_id,
                          SOLDOUT_CHANNEL,
                          cs->cluster ? cluster_gene_tag(t->gene) : ""};
    int argc = (int)(sizeof(argv) / sizeof(argv[0]));
    rconn_status rc =
        inv_ticket_eval(cs, cluster_gene_slot(t->gene), cb, arg, script, 2, argc, argv);
    if (rc != RCONN_OK) {
        t->st = INV_UNAVAILABLE; /* nothing sent this step: the last one's stands */
        return INV_DO_OVER;
    }
    return INV_DO_AWAIT;
}

/* SCRIPT answered r: counted, and t->st final. */
static void end_scripted(struct inv *inv, struct inv_ticket *t, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        t->st = INV_UNAVAILABLE;
        return;
    }
    long long code = inv_reply_ll(r->element[0], 0);
    long long units = r->elements > 1 ? inv_reply_ll(r->element[1], 0) : 0;
    if (code == -1) { /* gone meanwhile: a reset, or its retention */
        t->st = INV_GONE;
        return;
    }
    /* the record as the script read it: the order the answer shows (and a
       malformed value's log names its SKU) */
    inv_status st =
        r->elements > 4 ? inv_order_read(r->element[4], t->order.id, &t->order) : INV_OK;
    if (code == -17) { /* its record, or a value of its SKU: nothing written */
        count(&inv->counters.malformed);
        t->st = inv_malformed(&t->order, r->elements > 1 ? r->element[1] : NULL);
        return;
    }
    if (st != INV_OK) {
        t->st = st == INV_NOT_FOUND ? INV_GONE : st;
        return;
    }
    if (units > 0) /* this instance at once; the others by the message */
        soldout_forget(inv->cfg.soldout);
    life_count(inv, code, units,
               t->end == INV_END_PAY ? &inv->counters.paid : &inv->counters.cancelled);
    /* a pay's: the payment that paid the order, and when (pay.lua) */
    if (t->end == INV_END_PAY && r->elements > 2 &&
        r->element[2]->type == REDIS_REPLY_STRING)
        snprintf(t->order.payment_id, sizeof(t->order.payment_id), "%s",
                 r->element[2]->str);
    if (t->end == INV_END_PAY && r->elements > 3)
        t->order.paid_at_ms = inv_reply_ll(r->element[3], 0);
    if (code != 1 && code != 2) {
        t->st = life_refusal(code);
        return;
    }
    t->order.state = t->end == INV_END_PAY ? INV_STATE_PAID : INV_STATE_CANCELLED;
    t->st = INV_OK; /* once acknowledged (the engine's acks) */
}

inv_do inv_end_start(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                     aconn_cb *cb, void *arg)
{
    (void)inv;
    return end_send(t, cs, cb, arg);
}

inv_do inv_end_on_reply(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                        aconn_cb *cb, void *arg, aconn_result res, const redisReply *r)
{
    if (res != ACONN_REPLY) { /* the script may have run when it was lost */
        t->st = res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE;
        return INV_DO_OVER;
    }
    if (rconn_is_noscript(r)) /* the connection loads it again first */
        return end_send(t, cs, cb, arg);
    end_scripted(inv, t, r);
    return INV_DO_OVER;
}

/* ---- the sweep ----------------------------------------------------------- */

/* Every INV_SWEEP_MS (a cluster: INV_SWEEP_CLUSTER_MS), on one event loop, in
 * five sends: Redis's clock (TIME);
 * each deadline index (INV_DUE_INDEX; on a Redis Cluster one per gene) that
 * may hold something due, its earliest entry (ZRANGE 0 0); one that has
 * something due names the SKUs with a reservation due by that clock,
 * earliest first (ZRANGEBYSCORE), and its earliest deadline after it;
 * for each SKU, the due orders' ids are read from its due set up to that
 * clock; then due.lua expires them, every record declared, and sets the
 * SKU's score in the index anew (and says it). The next round only once every
 * answer is in.
 * An index is read when its earliest deadline has come: the one learned at
 * its last read (the next one, and the SKUs' new scores), or a reservation
 * this instance placed since (inv->due_hint, set as the commit answers); and
 * at least every SWEEP_RECHECK_MS, for those another instance placed and
 * died before it swept them (that instance, alive, sweeps its own on time).
 * So an idle shop costs TIME a round and one read per index a second (64
 * genes' indexes read at every round were 770 reads a second for 3
 * instances).
 * A round serves SWEEP_SKUS SKUs at most; the rest (the earliest first next
 * round) are counted (sweep_deferred, at least those seen), and they, or a
 * SKU with more due orders than one call expires, make the next round start
 * at once, reading their index again. */
#define SWEEP_MOST 500        /* orders one call expires at most */
#define SWEEP_SKUS 256        /* SKUs one round serves at most, over every index */
#define SWEEP_RECHECK_MS 1000 /* every index read at least this often */

struct inv_sweep {
    struct inv *inv;
    char host[256]; /* one Redis */
    int port;
    struct rconn_addr *seeds; /* a Redis Cluster: its seeds (nseeds > 0) */
    int nseeds;
    char *password;
    struct duty duty; /* attached: every INV_SWEEP_MS, its connection */
    int owed;         /* answers still to come this round */
    int again;        /* a SKU had more due than one call expired */
    int ncalls;       /* calls[] used this round */
    char until[24];   /* Redis's clock when the round began, ms */
    struct sweep_index {
        struct inv_sweep *sw;
        int gene; /* its gene's (-1 on one Redis) */
        char key[40];
        _Atomic int64_t *hint; /* inv->due_hint's for it */
        long long next_ms;     /* its earliest deadline learned since its last
                                  read (Redis's clock); 0: none */
        long long read_ms;     /* Redis's clock at its last read; 0: never */
        int again;             /* read it next round whatever the clock */
    } index[CLUSTER_GENES];
    struct sweep_call {
        struct inv_sweep *sw;
        struct sweep_index *ix; /* its SKU's shard's index */
        char sku[INV_ID_MAX + 1];
        int gene; /* its shard's (-1 on one Redis) */
        struct sku_keys k;
    } calls[SWEEP_SKUS];
};

static void sweep_round(struct inv_sweep *sw);

static int sweep_attached(const struct inv_sweep *sw)
{
    return duty_connected(&sw->duty);
}

/* t (ms, Redis's clock) is a deadline of ix: learned as its earliest so far. */
static void sweep_learn(struct sweep_index *ix, long long t)
{
    if (t > 0 && (ix->next_ms == 0 || t < ix->next_ms))
        ix->next_ms = t;
}

/* One answer of the round in: the round ends with the last. */
static void sweep_answered(struct inv_sweep *sw)
{
    if (--sw->owed == 0 && sw->again)
        sweep_round(sw);
}

/* Sends argv (a call of script when not NULL) to the Redis, or the master of
 * gene's slot on a cluster; counted as owed when sent. */
static void sweep_send(struct inv_sweep *sw, int gene, aconn_cb *cb, void *arg,
                       struct rscript *script, int nkeys, int argc, const char **argv)
{
    sw->owed++; /* first: an answer may come before the call returns */
    rconn_status st = duty_send(&sw->duty, sw->duty.cluster ? cluster_gene_slot(gene) : 0,
                                cb, arg, script, nkeys, argc, argv);
    if (st != RCONN_OK)
        sw->owed--;
}

static void on_swept(void *arg, aconn_result res, redisReply *r)
{
    struct sweep_call *x = arg;
    struct inv_sweep *sw = x->sw;
    if (!sweep_attached(sw)) /* detached: answered as failed */
        return;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 5) {
        struct inv_counters *c = &sw->inv->counters;
        long long orders = inv_reply_ll(r->element[0], 0);
        long long units = inv_reply_ll(r->element[1], 0);
        long long bad = inv_reply_ll(r->element[2], 0);
        atomic_fetch_add_explicit(&c->expired, (uint64_t)orders, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->units_returned, (uint64_t)units,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&c->sweep_malformed, (uint64_t)bad,
                                  memory_order_relaxed);
        if (orders > 0)
            soldout_forget(sw->inv->cfg.soldout);
        if (inv_reply_ll(r->element[3], 0) > 0)
            x->ix->again = sw->again = 1;
        sweep_learn(x->ix, inv_reply_ll(r->element[4], 0));
    } else {
        x->ix->again = 1; /* read again next round */
    }
    sweep_answered(sw);
}

/* The due orders' ids of x's SKU: due.lua over them, each record declared
 * (none: due.lua only sets the SKU's score in the index anew). */
static void on_ids(void *arg, aconn_result res, redisReply *r)
{
    struct sweep_call *x = arg;
    struct inv_sweep *sw = x->sw;
    if (!sweep_attached(sw))
        return;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY) {
        size_t n = r->elements;
        const char **argv = xmalloc(sizeof(*argv) * (2 * n + 12));
        char(*okeys)[64] = xmalloc(sizeof(*okeys) * (n ? n : 1));
        const struct sku_keys *k = &x->k;
        const char *head[] = {k->meta, k->stock, k->sold,  k->buyers, k->back,
                              k->due,  k->life,  k->avail, k->events, k->dues};
        memcpy(argv, head, sizeof(head));
        size_t nkeys = 10, m = 0;
        for (size_t i = 0; i < n; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_STRING || e->len > 24)
                continue;
            inv_record_key(okeys[m], sizeof(okeys[m]), k->order, e->str);
            argv[nkeys + m] = okeys[m];
            m++;
        }
        nkeys += m;
        argv[nkeys] = SOLDOUT_CHANNEL;
        argv[nkeys + 1] = x->sku;
        for (size_t i = 0, j = 0; i < n; i++) {
            const redisReply *e = r->element[i];
            if (e->type == REDIS_REPLY_STRING && e->len <= 24)
                argv[nkeys + 2 + j++] = e->str;
        }
        sweep_send(sw, x->gene, on_swept, x, &due_script, (int)nkeys, (int)(nkeys + 2 + m),
                   argv);
        free(okeys);
        free(argv);
    }
    sweep_answered(sw);
}

/* An index's answer: the SKUs due, earliest first, one more than a round
 * serves at most; each SKU's due ids are read, as many SKUs as the round has
 * room for. */
static void on_due_skus(void *arg, aconn_result res, redisReply *r)
{
    struct sweep_index *ix = arg;
    struct inv_sweep *sw = ix->sw;
    if (!sweep_attached(sw))
        return;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY) {
        char most[12];
        snprintf(most, sizeof(most), "%d", SWEEP_MOST);
        size_t i = 0;
        for (; i < r->elements && sw->ncalls < SWEEP_SKUS; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_STRING || !inv_id_valid(e->str))
                continue;
            struct sweep_call *x = &sw->calls[sw->ncalls++];
            x->sw = sw;
            x->ix = ix;
            text_copy(x->sku, sizeof(x->sku), e->str);
            x->gene = ix->gene;
            inv_keys_init(&x->k, x->sku, ix->gene);
            const char *argv[] = {"ZRANGEBYSCORE", x->k.due, "-inf", sw->until,
                                  "LIMIT",         "0",      most};
            sweep_send(sw, ix->gene, on_ids, x, NULL, 0, 7, argv);
        }
        if (i < r->elements) { /* left for the next round, which starts at once */
            atomic_fetch_add_explicit(&sw->inv->counters.sweep_deferred,
                                      (uint64_t)(r->elements - i), memory_order_relaxed);
            ix->again = sw->again = 1;
        }
    } else {
        ix->again = 1;
    }
    sweep_answered(sw);
}

/* An index's earliest deadline after the round's clock: [sku, score], or none. */
static void on_next(void *arg, aconn_result res, redisReply *r)
{
    struct sweep_index *ix = arg;
    struct inv_sweep *sw = ix->sw;
    if (!sweep_attached(sw))
        return;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        sweep_learn(ix, inv_reply_ll(r->element[1], 0));
    else if (res != ACONN_REPLY || r->type != REDIS_REPLY_ARRAY)
        ix->again = 1;
    sweep_answered(sw);
}

/* An index's earliest entry, [sku, score] or none: nothing more when that is
 * not due yet (its deadline learned); else the SKUs due and the earliest
 * deadline after them. */
static void on_first(void *arg, aconn_result res, redisReply *r)
{
    struct sweep_index *ix = arg;
    struct inv_sweep *sw = ix->sw;
    if (!sweep_attached(sw))
        return;
    if (res != ACONN_REPLY || r->type != REDIS_REPLY_ARRAY) {
        ix->again = 1;
    } else if (r->elements == 2) {
        long long first = inv_reply_ll(r->element[1], 0);
        if (first > strtoll(sw->until, NULL, 10)) {
            sweep_learn(ix, first);
        } else {
            char most[12], after[26];
            snprintf(most, sizeof(most), "%d", SWEEP_SKUS + 1);
            snprintf(after, sizeof(after), "(%s", sw->until);
            const char *argv[] = {"ZRANGEBYSCORE", ix->key, "-inf", sw->until,
                                  "LIMIT",         "0",     most};
            sweep_send(sw, ix->gene, on_due_skus, ix, NULL, 0, 7, argv);
            const char *next[] = {"ZRANGEBYSCORE", ix->key, after, "+inf",
                                  "WITHSCORES",    "LIMIT", "0",   "1"};
            sweep_send(sw, ix->gene, on_next, ix, NULL, 0, 8, next);
        }
    }
    sweep_answered(sw);
}

/* True when ix may hold something due by now (ms, Redis's clock): a deadline
 * learned or hinted has come, it is to be read again, or it was not read for
 * SWEEP_RECHECK_MS. */
static int sweep_index_due(const struct sweep_index *ix, long long now)
{
    long long hint = atomic_load_explicit(ix->hint, memory_order_relaxed);
    return ix->again || (hint > 0 && hint <= now) ||
           (ix->next_ms > 0 && ix->next_ms <= now) ||
           now - ix->read_ms >= SWEEP_RECHECK_MS || now < ix->read_ms;
}

/* Redis's clock: every index read up to it. */
static void on_time(void *arg, aconn_result res, redisReply *r)
{
    struct inv_sweep *sw = arg;
    if (!sweep_attached(sw))
        return;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        long long ms = inv_reply_ll(r->element[0], 0) * 1000 +
                       inv_reply_ll(r->element[1], 0) / 1000;
        snprintf(sw->until, sizeof(sw->until), "%lld", ms);
        int n = sw->duty.cluster ? CLUSTER_GENES : 1;
        for (int i = 0; i < n; i++) {
            struct sweep_index *ix = &sw->index[i];
            if (!sweep_index_due(ix, ms))
                continue;
            /* what is learned from here on replaces what was: a hint of a
             * reservation placed later stays (it is also in the index) */
            atomic_store_explicit(ix->hint, 0, memory_order_relaxed);
            ix->next_ms = 0;
            ix->read_ms = ms;
            ix->again = 0;
            const char *argv[] = {"ZRANGE", ix->key, "0", "0", "WITHSCORES"};
            sweep_send(sw, ix->gene, on_first, ix, NULL, 0, 5, argv);
        }
    }
    sweep_answered(sw);
}

static void sweep_round(struct inv_sweep *sw)
{
    sw->again = 0;
    sw->owed = 0;
    sw->ncalls = 0;
    const char *argv[] = {"TIME"};
    sweep_send(sw, sw->duty.cluster ? 0 : -1, on_time, sw, NULL, 0, 1, argv);
}

static void on_sweep_tick(void *arg)
{
    struct inv_sweep *sw = arg;
    if (sw->owed == 0) /* else the last round is still on its way */
        sweep_round(sw);
}

struct inv_sweep *inv_sweep_new(struct inv *inv, const char *host, int port,
                                const char *password)
{
    struct inv_sweep *sw = xcalloc(1, sizeof(*sw));
    sw->inv = inv;
    snprintf(sw->host, sizeof(sw->host), "%s", host);
    sw->port = port;
    sw->password = password && *password ? xstrdup(password) : NULL;
    sw->index[0] = (struct sweep_index){.sw = sw, .gene = -1, .hint = &inv->due_hint[0]};
    snprintf(sw->index[0].key, sizeof(sw->index[0].key), "%s", INV_DUE_INDEX);
    return sw;
}

struct inv_sweep *inv_sweep_new_cluster(struct inv *inv, const struct rconn_addr *seeds,
                                        int nseeds, const char *password)
{
    struct inv_sweep *sw = inv_sweep_new(inv, "", 0, password);
    sw->seeds = xmalloc(sizeof(*seeds) * (size_t)nseeds);
    memcpy(sw->seeds, seeds, sizeof(*seeds) * (size_t)nseeds);
    sw->nseeds = nseeds;
    for (int g = 0; g < CLUSTER_GENES; g++) {
        struct sweep_index *ix = &sw->index[g];
        *ix = (struct sweep_index){.sw = sw, .gene = g, .hint = &inv->due_hint[1 + g]};
        snprintf(ix->key, sizeof(ix->key), INV_DUE_INDEX ":{%s}", cluster_gene_tag(g));
    }
    return sw;
}

void inv_sweep_attach(struct inv_sweep *sw, struct event_base *base)
{
    if (!sw)
        return;
    struct duty_target to = {.host = sw->host,
                             .port = sw->port,
                             .seeds = sw->seeds,
                             .nseeds = sw->nseeds,
                             .password = sw->password,
                             .timeout_ms = 1000};
    duty_start(&sw->duty, base, &to, sw->nseeds > 0 ? INV_SWEEP_CLUSTER_MS : INV_SWEEP_MS,
               on_sweep_tick, sw);
}

void inv_sweep_detach(struct inv_sweep *sw)
{
    if (!sw)
        return;
    duty_stop(&sw->duty); /* answers what is on its way, as failed */
    sw->owed = 0;
}

void inv_sweep_free(struct inv_sweep *sw)
{
    if (!sw)
        return;
    inv_sweep_detach(sw);
    free(sw->seeds);
    free(sw->password);
    free(sw);
}
