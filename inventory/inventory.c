/* inventory.c: the core of inventory/, the lowest file but the pure ones
 * (orderid.c, soldout.c, segment.c): the process-wide handle and its
 * counters, sessions (one Redis, or a cluster's shards), the SKU's keys,
 * order ids, and what the commit scripts' shared refusals mean. It calls no
 * other file of the folder but those three (docs/ARCHITECTURE.md, §1). */
#include "inventory.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv_impl.h"
#include "text.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_rec_read;
struct rscript inv_rec_read_script = RSCRIPT_INIT("rec_read", lua_inventory_rec_read);

/* dst (cap bytes) = "sk:" tag ":" name, cut as snprintf would cut it. */
static void sku_key(char *dst, size_t cap, const char *tag, size_t tlen, const char *name)
{
    size_t nlen = strlen(name);
    if (3 + tlen + 1 + nlen >= cap) {
        snprintf(dst, cap, "sk:%s:%s", tag, name);
        return;
    }
    memcpy(dst, "sk:", 3);
    memcpy(dst + 3, tag, tlen);
    dst[3 + tlen] = ':';
    memcpy(dst + 4 + tlen, name, nlen + 1);
}

/* The keys of sku: on one Redis (gene -1) under the tag {sku}; on a cluster
 * those of its shard of gene `gene`, under the gene's tag. Made by every
 * hold and atomic order: copies, no formatting. */
void inv_keys_init(struct sku_keys *k, const char *sku, int gene)
{
    char tag[INV_ID_MAX + 24];
    if (gene < 0) {
        tag[0] = '{';
        size_t n = text_copy(tag + 1, sizeof(tag) - 2, sku);
        memcpy(tag + 1 + n, "}", 2);
        memcpy(k->order, "order:", sizeof("order:"));
        memcpy(k->dues, INV_DUE_INDEX, sizeof(INV_DUE_INDEX));
        memcpy(k->events, INV_EVENTS_KEY, sizeof(INV_EVENTS_KEY));
    } else {
        snprintf(tag, sizeof(tag), "{%s}:%s", cluster_gene_tag(gene), sku);
        snprintf(k->order, sizeof(k->order), "o:{%s}:", cluster_gene_tag(gene));
        snprintf(k->dues, sizeof(k->dues), INV_DUE_INDEX ":{%s}", cluster_gene_tag(gene));
        snprintf(k->events, sizeof(k->events), INV_EVENTS_KEY ":{%s}", cluster_gene_tag(gene));
    }
    size_t t = strlen(tag);
    sku_key(k->meta, sizeof(k->meta), tag, t, "meta");
    sku_key(k->stock, sizeof(k->stock), tag, t, "stock");
    sku_key(k->init, sizeof(k->init), tag, t, "init");
    sku_key(k->sold, sizeof(k->sold), tag, t, "sold");
    sku_key(k->buyers, sizeof(k->buyers), tag, t, "buyers");
    sku_key(k->orders, sizeof(k->orders), tag, t, "orders");
    sku_key(k->idem, sizeof(k->idem), tag, t, "idem");
    sku_key(k->avail, sizeof(k->avail), tag, t, "avail");
    sku_key(k->xout, sizeof(k->xout), tag, t, "xout");
    sku_key(k->xin, sizeof(k->xin), tag, t, "xin");
    sku_key(k->lock, sizeof(k->lock), tag, t, "lock:");
    sku_key(k->back, sizeof(k->back), tag, t, "back");
    sku_key(k->due, sizeof(k->due), tag, t, "due");
    sku_key(k->life, sizeof(k->life), tag, t, "life");
}

void inv_record_key(char *out, size_t len, const char *prefix, const char *id)
{
    size_t n = strlen(id);
    int digits = n > INV_REC_DIGITS ? (int)(n - INV_REC_DIGITS) : 0;
    if (digits > 0)
        snprintf(out, len, "%s%.*s", prefix, digits, id);
    else
        snprintf(out, len, "%s0", prefix);
}

int inv_order_key_of(const char *stream, const char *id, char *out, size_t len)
{
    size_t n = strlen(INV_EVENTS_KEY);
    const char *tag = stream + n;
    char prefix[64];
    int w = -1;
    if (strncmp(stream, INV_EVENTS_KEY, n) != 0)
        return -1;
    if (*tag == '\0')
        w = snprintf(prefix, sizeof(prefix), "order:");
    else if (strncmp(tag, ":{", 2) == 0 && tag[strlen(tag) - 1] == '}')
        w = snprintf(prefix, sizeof(prefix), "o:%s:", tag + 1); /* "{<gene tag>}" */
    if (w <= 0 || (size_t)w >= sizeof(prefix) || (size_t)w + strlen(id) >= len)
        return -1;
    inv_record_key(out, len, prefix, id);
    return 0;
}

int inv_id_valid(const char *id)
{
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok || n >= INV_ID_MAX)
            return 0;
    }
    return n > 0;
}

struct inv *inv_new(const struct inv_config *cfg)
{
    struct inv *inv = xcalloc(1, sizeof(*inv));
    inv->cfg = *cfg;
    const char *crash = getenv("SECKILL_TEST_CRASH");
    snprintf(inv->crash_after, sizeof(inv->crash_after), "%s", crash ? crash : "");
    pthread_mutex_init(&inv->layout_mu, NULL);
    return inv;
}

void inv_free(struct inv *inv)
{
    if (!inv)
        return;
    pthread_mutex_destroy(&inv->layout_mu);
    free(inv);
}

void inv_stats(const struct inv *inv, struct inv_stats *out)
{
    const struct inv_counters *c = &inv->counters;
#define INV_STATS_LOAD(field, key, metric, help) out->field = atomic_load(&c->field);
    INV_COUNTERS(INV_STATS_LOAD)
#undef INV_STATS_LOAD
}

struct inv_session *inv_session_new(struct inv *inv, struct rconn *rc)
{
    struct inv_session *s = xcalloc(1, sizeof(*s));
    s->inv = inv;
    s->rc = rc;
    s->gene = -1;
    if (inv->cfg.cluster)
        s->cl = rcluster_new(inv->cfg.seeds, inv->cfg.nseeds, inv->cfg.password,
                             inv->cfg.timeout_ms > 0 ? inv->cfg.timeout_ms : 1000);
    if (inv->cfg.lock) /* on a cluster, for the steps of an event loop's holds */
        s->lock = lock_session_new(inv->cfg.lock, rc);
    return s;
}

void inv_session_free(struct inv_session *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nshards; i++)
        inv_session_free(s->shard[i]);
    rcluster_free(s->cl);
    lock_session_free(s->lock);
    free(s);
}

/* The session for the shard of gene `gene`: s itself on one Redis; on a
 * cluster the session on the connection to the master that serves the
 * shard now, made on first need. NULL when no master is known for it. */
struct inv_session *inv_shard_session(struct inv_session *s, int gene)
{
    if (!s->cl)
        return s;
    if (gene < 0)
        return NULL;
    struct rconn *rc = rcluster_conn(s->cl, cluster_gene_slot(gene));
    if (!rc)
        return NULL;
    struct inv_session *sub = NULL;
    for (int i = 0; i < s->nshards && !sub; i++)
        if (s->shard[i]->rc == rc)
            sub = s->shard[i];
    if (!sub) {
        if (s->nshards == INV_SHARD_SESSIONS)
            return NULL;
        sub = xcalloc(1, sizeof(*sub));
        sub->inv = s->inv;
        sub->rc = rc;
        if (s->inv->cfg.lock)
            sub->lock = lock_session_new(s->inv->cfg.lock, rc);
        s->shard[s->nshards++] = sub;
    }
    sub->gene = gene;
    return sub;
}

/* After work on a cluster that failed for want of Redis: the map may be
 * stale (a failover, slots moved), so learn it again for the next. */
inv_status inv_shard_outcome(struct inv_session *s, inv_status st)
{
    if (s->cl && (st == INV_UNAVAILABLE || st == INV_OUTCOME_UNKNOWN))
        rcluster_refresh(s->cl);
    return st;
}

/* ---- small reply helpers ------------------------------------------------ */

long long inv_reply_ll(const redisReply *r, long long dflt)
{
    if (!r)
        return dflt;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return dflt;
}

/* ---- what an order's answers share ------------------------------------ */

/* The fencing token of grant g as the commit scripts take it: '0' without
 * fencing. */
void inv_fence_text(const struct inv *inv, const struct lock_grant *g, char *buf,
                    size_t len)
{
    if (inv->cfg.fencing)
        lock_fence_text(g, buf, len);
    else
        snprintf(buf, len, "0");
}

/* Remembers sku as sold out (soldout.h) when Redis said so after `seen` was
 * taken. Not from a shard of a cluster: its SKU may hold units elsewhere
 * (shards_refill notes a SKU whose shards are all empty). */
void inv_note_sold_out(struct inv *inv, const char *sku, int limit, uint64_t seen)
{
    if (!inv->cfg.cluster)
        soldout_note(inv->cfg.soldout, sku, limit, seen);
}

/* Answers from memory an order for a SKU this instance saw sold out in its
 * current epoch: INV_SOLD_OUT (or INV_BAD_QTY above a known limit), or
 * INV_PENDING when Redis must be asked (the order goes on). A keyed order always asks: its key may name an
 * order placed before the sell-out, whose replay is the answer. */
inv_status inv_soldout_answer(struct inv *inv, const char *sku, int qty,
                              const char *idem_key)
{
    int limit;
    if (idem_key || !soldout_known(inv->cfg.soldout, sku, &limit))
        return INV_PENDING;
    count(&inv->counters.sold_out_local);
    return limit > 0 && qty > limit ? INV_BAD_QTY : INV_SOLD_OUT;
}

/* Draws the order's id: 0, or -1 when none can be issued now (the worker
 * lease is not held, or its high-water mark does not cover another id). On a
 * cluster it keeps the gene its last id had (the shard it is routed to). */
int inv_order_new_id(struct inv *inv, struct inv_order *order)
{
    const struct inv_config *cfg = &inv->cfg;
    if (cfg->lease && !orderid_lease_valid(cfg->lease))
        return -1;
    int gene = orderid_gene_of(order->id);
    order->id = orderid_next(cfg->ids);
    if (order->id && cfg->cluster)
        order->id = orderid_with_gene(order->id, gene);
    return order->id ? 0 : -1;
}

/* The id the commit found taken was issued twice (a worker id shared after a
 * lease was lost early): the order takes a fresh one and is still on its way
 * (INV_PENDING), else INV_UNAVAILABLE. Nothing was written. */
inv_status inv_order_id_taken(struct inv *inv, struct inv_order *order)
{
    count(&inv->counters.id_collisions);
    return inv_order_new_id(inv, order) == 0 ? INV_PENDING : INV_UNAVAILABLE;
}

static const char *const state_names[] = {"placed", "pending", "paid", "cancelled",
                                          "expired"};

const char *inv_state_name(inv_state st)
{
    return st >= INV_STATE_PLACED && st <= INV_STATE_EXPIRED ? state_names[st] : "placed";
}

inv_state inv_state_parse(const char *text)
{
    for (int i = 0; i <= INV_STATE_EXPIRED; i++)
        if (strcmp(text, state_names[i]) == 0)
            return (inv_state)i;
    return INV_STATE_PLACED;
}

/* Sets o's state from a placing script's pay_by (a string; '' or none: no
 * payment window, placed); a reservation lowers its index's hint to its
 * pay_by (a compare-and-swap, once per order). */
void inv_order_placed(struct inv *inv, int gene, struct inv_order *o,
                      const redisReply *pay_by)
{
    o->pay_by_ms = inv_reply_ll(pay_by, 0);
    o->state = o->pay_by_ms > 0 ? INV_STATE_PENDING : INV_STATE_PLACED;
    if (o->pay_by_ms <= 0)
        return;
    _Atomic int64_t *hint = &inv->due_hint[gene + 1];
    int64_t was = atomic_load_explicit(hint, memory_order_relaxed);
    while ((was == 0 || o->pay_by_ms < was) &&
           !atomic_compare_exchange_weak_explicit(
               hint, &was, o->pay_by_ms, memory_order_relaxed, memory_order_relaxed))
        ;
}

inv_status inv_window_refusal(long long code, const redisReply *detail,
                              struct inv_window *w)
{
    if (code == -11)
        return INV_SALE_ENDED;
    if (code == -12)
        return INV_PAUSED;
    if (code != -10)
        return INV_PENDING;
    w->starts_ms = w->wait_ms = 0;
    if (detail && detail->type == REDIS_REPLY_STRING)
        sscanf(detail->str, "%lld %lld", &w->starts_ms, &w->wait_ms);
    return INV_NOT_STARTED;
}

inv_status inv_malformed(struct inv_order *o, const redisReply *detail)
{
    text_copy(o->malformed, sizeof(o->malformed),
              detail && detail->type == REDIS_REPLY_STRING ? detail->str : "?");
    return INV_MALFORMED;
}

/* The refusals the commit scripts share: {-4} the per-user limit, {-8} the
 * key was used for another user or qty, the sale window's, {-17, '<key>
 * <field>'} a value malformed (nothing written). Anything else is
 * a failure: an idempotent replay's {-3, first id} is read by the callers
 * before (its first order is loaded on the loop, single.h LOADING). */
inv_status inv_commit_refusal(const redisReply *r, struct inv_order *order)
{
    long long code = inv_reply_ll(r->element[0], 0);
    inv_status window =
        inv_window_refusal(code, r->elements > 1 ? r->element[1] : NULL, &order->window);
    if (window != INV_PENDING)
        return window;
    switch (code) {
    case -4:
        return INV_LIMIT;
    case -8:
        return INV_IDEM_MISMATCH;
    case -17:
        return inv_malformed(order, r->elements > 1 ? r->element[1] : NULL);
    default:
        return INV_UNAVAILABLE;
    }
}

/* Empties o; its parts are not touched (nparts says how many hold anything),
 * which spares every order a memset of INV_MAX_SEGMENTS of them. */
void inv_order_clear(struct inv_order *o)
{
    memset(o, 0, offsetof(struct inv_order, parts));
}

/* Sets o's segment and parts: the order took all its units from seg. */
void inv_order_one_part(struct inv_order *o, int seg)
{
    o->segment = seg;
    o->nparts = 1;
    o->parts[0] = (struct inv_part){.segment = seg, .qty = o->qty};
}

/* Counts an order's answer. */
void inv_count_outcome(struct inv *inv, inv_status st)
{
    struct inv_counters *c = &inv->counters;
    switch (st) {
    case INV_PLACED:
        count(&c->placed);
        break;
    case INV_REPLAYED:
        count(&c->replayed);
        break;
    case INV_SOLD_OUT:
        count(&c->sold_out);
        break;
    case INV_LIMIT:
        count(&c->limit);
        break;
    case INV_BUSY:
        count(&c->busy);
        break;
    case INV_UNAVAILABLE:
        count(&c->unavailable);
        break;
    case INV_MALFORMED: /* answered unavailable, and counted for what it is */
        count(&c->unavailable);
        count(&c->malformed);
        break;
    case INV_OUTCOME_UNKNOWN:
        count(&c->outcome_unknown);
        break;
    case INV_IDEM_MISMATCH:
        count(&c->idem_mismatch);
        break;
    case INV_NOT_STARTED:
        count(&c->not_started);
        break;
    case INV_SALE_ENDED:
        count(&c->sale_ended);
        break;
    case INV_PAUSED:
        count(&c->paused);
        break;
    default:
        break;
    }
}

inv_path inv_loop_path(const struct inv *inv)
{
    return inv->cfg.lock ? INV_PATH_HOLDS : INV_PATH_ATOMIC;
}

void inv_count_batch(struct inv *inv, int n)
{
    atomic_fetch_add_explicit(&inv->batch_holds, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&inv->batch_orders, (uint64_t)n, memory_order_relaxed);
}

void inv_batch_stats(const struct inv *inv, struct inv_batch_stats *out)
{
    out->holds = atomic_load(&inv->batch_holds);
    out->orders = atomic_load(&inv->batch_orders);
    out->queued = atomic_load(&inv->queued);
    out->queues = atomic_load(&inv->queues);
}

struct lock *inv_lock(const struct inv *inv)
{
    return inv->cfg.lock;
}
