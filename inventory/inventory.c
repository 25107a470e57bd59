#include "inventory.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "clock.h"
#include "inv_impl.h"

/* The scripts: KEYS, ARGV and replies are described at the top of each file.
 * commit.lua, batch.lua and atomic.lua share idem.lua (the Idempotency-Key
 * check), limit.lua (the per-user limit), stock.lua (writing stock with its
 * index, choosing segments) and record.lua (recording a placed order);
 * peek.lua shares the first three. */
extern const struct rscript_source lua_inventory_commit, lua_inventory_atomic,
    lua_inventory_peek, lua_inventory_batch, lua_inventory_fence_read;
/* inventory/lua/commit.lua: commit of one order of the lock-guarded modes. */
static struct rscript commit_script = RSCRIPT_INIT("inv_commit", lua_inventory_commit);
/* inventory/lua/atomic.lua: the atomic mode, check and decrement, no lock. */
static struct rscript atomic_script = RSCRIPT_INIT("inv_atomic", lua_inventory_atomic);
/* inventory/lua/peek.lua: what an order learns before taking any lock. */
static struct rscript peek_script = RSCRIPT_INIT("inv_peek", lua_inventory_peek);
/* inventory/lua/batch.lua: group commit of the lock-guarded modes. */
static struct rscript batch_script = RSCRIPT_INIT("inv_batch", lua_inventory_batch);
/* inventory/lua/fence_read.lua: the read under a lock whose tokens come from
 * outside the data Redis (zk), which raises the segment's high-water token. */
static struct rscript fence_read_script =
    RSCRIPT_INIT("inv_fence_read", lua_inventory_fence_read);

/* The keys of sku: on one Redis (gene -1) under the tag {sku}; on a cluster
 * those of its shard of gene `gene`, under the gene's tag. */
void inv_keys_init(struct sku_keys *k, const char *sku, int gene)
{
    char tag[INV_ID_MAX + 24];
    if (gene < 0) {
        snprintf(tag, sizeof(tag), "{%s}", sku);
        snprintf(k->order, sizeof(k->order), "order:");
    } else {
        snprintf(tag, sizeof(tag), "{%s}:%s", cluster_gene_tag(gene), sku);
        snprintf(k->order, sizeof(k->order), "o:{%s}:", cluster_gene_tag(gene));
    }
    snprintf(k->meta, sizeof(k->meta), "sk:%s:meta", tag);
    snprintf(k->stock, sizeof(k->stock), "sk:%s:stock", tag);
    snprintf(k->init, sizeof(k->init), "sk:%s:init", tag);
    snprintf(k->sold, sizeof(k->sold), "sk:%s:sold", tag);
    snprintf(k->buyers, sizeof(k->buyers), "sk:%s:buyers", tag);
    snprintf(k->orders, sizeof(k->orders), "sk:%s:orders", tag);
    snprintf(k->idem, sizeof(k->idem), "sk:%s:idem", tag);
    snprintf(k->avail, sizeof(k->avail), "sk:%s:avail", tag);
    snprintf(k->xout, sizeof(k->xout), "sk:%s:xout", tag);
    snprintf(k->xin, sizeof(k->xin), "sk:%s:xin", tag);
    snprintf(k->lock, sizeof(k->lock), "sk:%s:lock:", tag);
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
    struct inv *inv = calloc(1, sizeof(*inv));
    if (!inv)
        abort();
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

static struct sku_layout *layout_slot(struct inv *inv, const char *sku)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = sku; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return &inv->layouts[h % LAYOUT_SLOTS];
}

/* Copies sku's layout to *out; 0, or -1 when not known. */
int inv_layout_get(struct inv *inv, const char *sku, struct sku_layout *out)
{
    struct sku_layout *l = layout_slot(inv, sku);
    pthread_mutex_lock(&inv->layout_mu);
    int found = strcmp(l->sku, sku) == 0;
    if (found)
        *out = *l;
    pthread_mutex_unlock(&inv->layout_mu);
    return found ? 0 : -1;
}

/* Learns sku's layout; what was known of its empty segments stays while the
 * epoch does. */
void inv_layout_put(struct inv *inv, const char *sku, int segments, long long initial,
                    const char *epoch, const int *genes, int nshards)
{
    struct sku_layout *l = layout_slot(inv, sku);
    pthread_mutex_lock(&inv->layout_mu);
    if (strcmp(l->sku, sku) != 0 || strcmp(l->epoch, epoch) != 0 ||
        l->segments != segments || l->nshards != nshards) {
        snprintf(l->sku, sizeof(l->sku), "%s", sku);
        l->segments = segments;
        l->initial = initial;
        snprintf(l->epoch, sizeof(l->epoch), "%s", epoch);
        l->nempty = 0;
        memset(l->empty, 0, sizeof(l->empty));
        l->nshards = nshards;
        for (int i = 0; i < nshards; i++)
            l->genes[i] = (uint8_t)genes[i];
    }
    pthread_mutex_unlock(&inv->layout_mu);
}

/* Notes segment seg of sku as found empty in epoch (ignored if the layout
 * moved on). */
static void layout_mark_empty(struct inv *inv, const char *sku, const char *epoch,
                              int seg)
{
    struct sku_layout *l = layout_slot(inv, sku);
    pthread_mutex_lock(&inv->layout_mu);
    uint64_t bit = UINT64_C(1) << (seg % 64);
    if (strcmp(l->sku, sku) == 0 && strcmp(l->epoch, epoch) == 0 && seg < l->segments &&
        !(l->empty[seg / 64] & bit)) {
        l->empty[seg / 64] |= bit;
        l->nempty++;
    }
    pthread_mutex_unlock(&inv->layout_mu);
}

/* The n-th (from 0) segment of l not known empty; l has more than n. */
static int layout_nth_stocked(const struct sku_layout *l, int n)
{
    for (int w = 0;; w++) {
        uint64_t stocked = ~l->empty[w];
        if (w == l->segments / 64)
            stocked &= (UINT64_C(1) << (l->segments % 64)) - 1;
        int c = __builtin_popcountll(stocked);
        if (n < c) {
            for (;; stocked &= stocked - 1)
                if (n-- == 0)
                    return w * 64 + __builtin_ctzll(stocked);
        }
        n -= c;
    }
}

void inv_layout_forget(struct inv *inv, const char *sku)
{
    struct sku_layout *l = layout_slot(inv, sku);
    pthread_mutex_lock(&inv->layout_mu);
    if (strcmp(l->sku, sku) == 0)
        l->sku[0] = '\0';
    pthread_mutex_unlock(&inv->layout_mu);
}

void inv_stats(const struct inv *inv, struct inv_stats *out)
{
    const struct inv_counters *c = &inv->counters;
    out->placed = atomic_load(&c->placed);
    out->replayed = atomic_load(&c->replayed);
    out->sold_out = atomic_load(&c->sold_out);
    out->limit = atomic_load(&c->limit);
    out->busy = atomic_load(&c->busy);
    out->unavailable = atomic_load(&c->unavailable);
    out->fenced_off = atomic_load(&c->fenced_off);
    out->epoch_changed = atomic_load(&c->epoch_changed);
    out->spilled = atomic_load(&c->spilled);
    out->commits_after_lease = atomic_load(&c->commits_after_lease);
    out->outcome_unknown = atomic_load(&c->outcome_unknown);
    out->idem_mismatch = atomic_load(&c->idem_mismatch);
    out->id_collisions = atomic_load(&c->id_collisions);
    out->sold_out_local = atomic_load(&c->sold_out_local);
    out->unacked = atomic_load(&c->unacked);
}

struct inv_session *inv_session_new(struct inv *inv, struct rconn *rc)
{
    struct inv_session *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
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
        sub = calloc(1, sizeof(*sub));
        if (!sub)
            abort();
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

int inv_ping(struct inv_session *s)
{
    if (s->cl)
        return inv_ping_shards(s);
    rconn_check(s->rc);
    redisReply *r = rconn_command(s->rc, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok;
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

static void free_replies(redisReply **r, int n)
{
    for (int i = 0; i < n; i++)
        if (r[i])
            freeReplyObject(r[i]);
}

static inv_status load_order(struct inv_session *s, const char *id_text,
                             struct inv_order *out)
{
    char *end;
    errno = 0;
    unsigned long long id = strtoull(id_text, &end, 10);
    if (errno || *end)
        return INV_UNAVAILABLE;
    return inv_order_get(s, (uint64_t)id, out);
}

/* ---- placing an order --------------------------------------------------- */

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
static void note_sold_out(struct inv *inv, const char *sku, int limit, uint64_t seen)
{
    if (!inv->cfg.cluster)
        soldout_note(inv->cfg.soldout, sku, limit, seen);
}

/* Answers from memory an order for a SKU this instance saw sold out in its
 * current epoch: INV_SOLD_OUT (or INV_BAD_QTY above a known limit), or INV_OK
 * when Redis must be asked. A keyed order always asks: its key may name an
 * order placed before the sell-out, whose replay is the answer. */
static inv_status soldout_answer(struct inv *inv, const char *sku, int qty,
                                 const char *idem_key)
{
    int limit;
    if (idem_key || !soldout_known(inv->cfg.soldout, sku, &limit))
        return INV_OK;
    count(&inv->counters.sold_out_local);
    return limit > 0 && qty > limit ? INV_BAD_QTY : INV_SOLD_OUT;
}

/* Draws the order's id: 0, or -1 when none can be issued now (the worker
 * lease is not held, or its high-water mark does not cover another id). */
/* Draws order's id; on a cluster it keeps the gene its last id had (the
 * shard it is routed to). */
static int order_new_id(struct inv *inv, struct inv_order *order)
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
 * lease was lost early): the order takes a fresh one. Nothing was written. */
static inv_status order_id_taken(struct inv *inv, struct inv_order *order)
{
    count(&inv->counters.id_collisions);
    return order_new_id(inv, order) == 0 ? INV_OK : INV_UNAVAILABLE;
}

/* The status of a commit that got no answer: unknown when the connection
 * failed after taking it (lost_before: rconn_unanswered before the call),
 * else it was never sent. */
static inv_status no_answer(struct inv_session *s, uint64_t lost_before)
{
    return rconn_unanswered(s->rc) != lost_before ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE;
}

/* The refusals the commit scripts share: {-3, first id} an idempotent replay
 * (*order becomes the first order), {-4} the per-user limit, {-8} the key was
 * used for another user or qty. Anything else is a failure. */
static inv_status commit_refusal(struct inv_session *s, const redisReply *r,
                                 struct inv_order *order)
{
    switch (inv_reply_ll(r->element[0], 0)) {
    case -3: {
        if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_STRING)
            return INV_UNAVAILABLE;
        inv_status st = load_order(s, r->element[1]->str, order);
        return st == INV_OK ? INV_REPLAYED : st;
    }
    case -4:
        return INV_LIMIT;
    case -8:
        return INV_IDEM_MISMATCH;
    default:
        return INV_UNAVAILABLE;
    }
}

/* Most fresh ids an order draws when it finds its id taken. */
#define ID_TRIES 4

/* The atomic script's arguments for one order. */
struct atomic_call {
    char home[12], qtys[12], idtext[24], okey[40];
    const char *argv[14];
};

static void atomic_call_init(struct atomic_call *c, const struct sku_keys *k,
                             const char *sku, const char *user_id, int qty,
                             const char *idem_key, uint64_t id)
{
    snprintf(c->home, sizeof(c->home), "%u", seg_route(user_id));
    snprintf(c->qtys, sizeof(c->qtys), "%d", qty);
    snprintf(c->idtext, sizeof(c->idtext), "%" PRIu64, id);
    snprintf(c->okey, sizeof(c->okey), "%s%s", k->order, c->idtext);
    const char *argv[] = {k->meta, k->stock,  k->sold,  k->buyers, k->orders,
                          c->okey, k->idem,   k->avail, c->home,   c->qtys,
                          user_id, c->idtext, sku,      idem_key};
    memcpy(c->argv, argv, sizeof(argv));
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

/* The outcome of the atomic script's answer r for an order of sku; INV_OK when the
 * order's id was found taken and it drew a fresh one (nothing was written: again). seen:
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
        order->nparts = 0;
        for (size_t i = 3; i + 1 < r->elements && order->nparts < INV_MAX_SEGMENTS;
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
            note_sold_out(s->inv, sku, (int)inv_reply_ll(e1, 0), seen);
        return INV_SOLD_OUT;
    case -6:
        return INV_NOT_FOUND;
    case -7:
        return INV_BAD_QTY;
    case -9:
        return order_id_taken(s->inv, order);
    default:
        return commit_refusal(s, r, order);
    }
}

static inv_status place_atomic(struct inv_session *s, const struct sku_keys *k,
                               const char *sku, const char *user_id, int qty,
                               const char *idem_key, struct inv_order *order)
{
    for (int tries = 1;; tries++) {
        struct atomic_call c;
        atomic_call_init(&c, k, sku, user_id, qty, idem_key, order->id);
        uint64_t lost = rconn_unanswered(s->rc);
        uint64_t seen = soldout_generation(s->inv->cfg.soldout);
        redisReply *r = rconn_eval(s->rc, &atomic_script, 8, 6, c.argv, NULL);
        if (!r)
            return no_answer(s, lost);
        inv_status st = atomic_outcome(s, sku, r, order, seen);
        freeReplyObject(r);
        if (st != INV_OK)
            return st;
        if (tries == ID_TRIES)
            return INV_UNAVAILABLE;
    }
}

#define PEEK_CANDIDATES 4

/* What the order learned before taking any lock (peek_script). */
struct order_view {
    int segments, limit, home;
    char epoch[24];
    long long bought, remaining, initial;
    char first_id[24]; /* idempotent replay: the first order's id, or "" */
    int cand[PEEK_CANDIDATES];
    int ncand;
    int nplan; /* > 0: no segment held qty alone; plan[] hold it together */
    int plan[INV_MAX_SEGMENTS];
};

/* One order on its way through the lock-guarded path. */
struct order_ctx {
    struct inv_session *s;
    struct sku_keys k;
    const char *sku, *user_id, *idem_key; /* idem_key "" for none */
    int qty;
    int64_t deadline; /* for the segment locks: --wait-ms from the start */
    struct inv_order *order;
    struct order_view v;
};

static inv_status order_peek(struct order_ctx *c)
{
    struct order_view *v = &c->v;
    char route[12], qtys[12], most[12];
    snprintf(route, sizeof(route), "%u", seg_route(c->user_id));
    snprintf(qtys, sizeof(qtys), "%d", c->qty);
    snprintf(most, sizeof(most), "%d", PEEK_CANDIDATES);
    const char *argv[] = {c->k.meta, c->k.stock, c->k.buyers, c->k.idem,   c->k.avail,
                          route,     qtys,       c->user_id,  c->idem_key, most};
    redisReply *r = rconn_eval(c->s->rc, &peek_script, 5, 5, argv, NULL);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        st = inv_reply_ll(r->element[0], 0) == -8 ? INV_IDEM_MISMATCH : INV_NOT_FOUND;
    } else if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 9) {
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
        st = v->segments >= 1 && v->segments <= INV_MAX_SEGMENTS ? INV_OK
                                                                 : INV_UNAVAILABLE;
    }
    if (r)
        freeReplyObject(r);
    return st;
}

/* The stock a segment's HGET answered; -1 when Redis did not answer one. */
static long long stock_of(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL)
               ? inv_reply_ll(r, 0)
               : -1;
}

/* Takes the lock lkey of segment seg (waiting wait_ms at most) together with
 * the read of the segment's stock: in the same round trip where the mode
 * allows. With tokens from outside the data Redis (zk) the read raises the
 * segment's high-water token to the grant's first (fence_read.lua); a grant
 * already succeeded by a later holder is released and answered LOCK_BUSY
 * (counted fenced off). On LOCK_ACQUIRED *stock is the stock read, -1 when
 * the read got no answer (the lock is held either way). */
static lock_status lock_and_read(struct inv_session *s, const struct sku_keys *k,
                                 const char *lkey, int seg, int wait_ms,
                                 struct lock_grant *g, long long *stock)
{
    char segtext[12];
    snprintf(segtext, sizeof(segtext), "%d", seg);
    redisReply *rr = NULL;
    lock_status ls;
    if (!lock_fence_external(s->inv->cfg.lock)) {
        const char *argv[] = {"HGET", k->stock, segtext};
        struct rcmd read = {.argc = 3, .argv = argv};
        ls = lock_acquire_then(s->lock, lkey, wait_ms, g, &read, &rr);
    } else if ((ls = lock_acquire(s->lock, lkey, wait_ms, g)) == LOCK_ACQUIRED) {
        char fkey[160], token[LOCK_FENCE_TEXT];
        lock_fence_key(lkey, fkey, sizeof(fkey));
        lock_fence_text(g, token, sizeof(token));
        const char *argv[] = {fkey, k->stock, token, segtext};
        rr = rconn_eval(s->rc, &fence_read_script, 2, 2, argv, NULL);
        if (rr && rr->type == REDIS_REPLY_ARRAY) { /* {-2}: a later holder's mark */
            freeReplyObject(rr);
            lock_release(s->lock, lkey, g);
            count(&s->inv->counters.fenced_off);
            return LOCK_BUSY;
        }
    }
    if (ls == LOCK_ACQUIRED)
        *stock = stock_of(rr);
    if (rr)
        freeReplyObject(rr);
    return ls;
}

/* One segment of an order's critical section: its lock, the stock read under
 * it, and the units the order takes from it. */
struct part_hold {
    int seg;
    char lkey[128];
    struct lock_grant g;
    long long stock;
    int take;
};

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
        lock_status ls = lock_and_read(c->s, &c->k, p[i].lkey, p[i].seg,
                                       wait_ms > 0 ? wait_ms : 0, &p[i].g, &p[i].stock);
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

/* Most parts whose commit arguments live on the stack. */
#define PARTS_INLINE 4

/* The commit arguments of one part. */
struct part_text {
    char fkey[160], seg[12], take[12], stock[24], fence[LOCK_FENCE_TEXT];
};
/* The order's own arguments as text. */
struct commit_text {
    char qty[12], id[24], okey[40], nparts[12];
};

/* commit.lua's KEYS and ARGV for an order over p[0..n-1] into argv (room
 * for 15 + 5 * n), their text into text (room for n). Returns argc. */
static int commit_argv(struct order_ctx *c, const struct part_hold *p, int n,
                       struct commit_text *ct, struct part_text *text, const char **argv)
{
    int nkeys = 8 + n;
    snprintf(ct->qty, sizeof(ct->qty), "%d", c->qty);
    snprintf(ct->id, sizeof(ct->id), "%" PRIu64, c->order->id);
    snprintf(ct->okey, sizeof(ct->okey), "%s%s", c->k.order, ct->id);
    snprintf(ct->nparts, sizeof(ct->nparts), "%d", n);
    const char *head[] = {c->k.meta,   c->k.stock, c->k.sold, c->k.buyers,
                          c->k.orders, ct->okey,   c->k.idem, c->k.avail};
    memcpy(argv, head, sizeof(head));
    const char **a = argv + nkeys;
    const char *args[] = {c->v.epoch, ct->qty,     c->user_id, ct->id,
                          c->sku,     c->idem_key, ct->nparts};
    memcpy(a, args, sizeof(args));
    a += 7;
    for (int i = 0; i < n; i++) {
        struct part_text *t = &text[i];
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
    return (int)(a - argv);
}

/* What commit.lua's answer r (not NULL) means for the order over p[0..n-1];
 * rs is the release's status. As parts_commit. */
static inv_status commit_outcome(struct order_ctx *c, const struct part_hold *p, int n,
                                 const redisReply *r, lock_status rs, int *again)
{
    struct inv_session *s = c->s;
    struct inv *inv = s->inv;
    if (rconn_is_noscript(r)) {
        *again = rconn_script_reload(s->rc, &commit_script) == RCONN_OK;
        return INV_UNAVAILABLE;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return INV_UNAVAILABLE;
    struct inv_order *o = c->order;
    switch (inv_reply_ll(r->element[0], 0)) {
    case 1:
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
        *again = order_id_taken(s->inv, o) == INV_OK;
        return INV_UNAVAILABLE;
    default:
        return commit_refusal(s, r, o);
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
    struct part_text inline_text[PARTS_INLINE], *text = inline_text;
    const char *inline_argv[15 + 5 * PARTS_INLINE], **argv = inline_argv;
    if (n > PARTS_INLINE) {
        text = malloc(sizeof(*text) * (size_t)n);
        argv = malloc(sizeof(*argv) * (size_t)(15 + 5 * n));
        if (!text || !argv)
            abort();
    }
    struct commit_text ct;
    struct rcmd commit = {.script = &commit_script, .nkeys = 8 + n};
    commit.argc = commit_argv(c, p, n, &ct, text, argv);
    commit.argv = argv;
    redisReply *r;
    uint64_t lost = rconn_unanswered(s->rc);
    lock_status rs = lock_release_after(s->lock, p[n - 1].lkey, &p[n - 1].g, &commit, &r);
    if (n > 1 && parts_release(s, p, n - 1) == LOCK_NOT_HELD)
        rs = LOCK_NOT_HELD;
    if (text != inline_text) {
        free(text);
        free(argv);
    }
    if (!r)
        return no_answer(s, lost);
    inv_status st = commit_outcome(c, p, n, r, rs, again);
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
    if (p.stock < c->qty) {
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
    struct part_hold *p = malloc(sizeof(*p) * (size_t)n);
    int *sorted = malloc(sizeof(*sorted) * (size_t)n);
    if (!p || !sorted)
        abort();
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
        x->take = (int)(x->stock < need ? x->stock : need);
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
    int tries_left = ID_TRIES; /* of a section whose commit wrote nothing (again) */
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
            st = load_order(s, v->first_id, c->order);
            return st == INV_OK ? INV_REPLAYED : st;
        }
        if (v->bought + c->qty > v->limit)
            return INV_LIMIT;
        if (v->ncand == 0 && v->nplan == 0) {
            if (v->remaining == 0) /* not a unit left */
                note_sold_out(inv, c->sku, v->limit, seen);
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
    if (order_new_id(s->inv, order) != 0)
        return INV_UNAVAILABLE; /* no id is unique without the worker lease */
    snprintf(order->sku, sizeof(order->sku), "%s", sku);
    snprintf(order->user_id, sizeof(order->user_id), "%s", user_id);
    order->qty = qty;
    struct sku_keys k;
    inv_keys_init(&k, sku, s->gene);
    const char *idem = idem_key ? idem_key : "";
    return s->inv->cfg.lock ? place_one_locked(s, sku, user_id, qty, idem, order)
                            : place_atomic(s, &k, sku, user_id, qty, idem, order);
}

/* Counts an order's answer. */
static void count_outcome(struct inv *inv, inv_status st)
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
    case INV_OUTCOME_UNKNOWN:
        count(&c->outcome_unknown);
        break;
    case INV_IDEM_MISMATCH:
        count(&c->idem_mismatch);
        break;
    default:
        break;
    }
}

inv_status inv_order_place(struct inv_session *s, const char *sku, const char *user_id,
                           int qty, const char *idem_key, struct inv_order *order)
{
    struct inv *inv = s->inv;
    if (s->cl) { /* as a ticket: routed to its shard, spilling over as those do */
        struct inv_ticket *t = malloc(sizeof(*t));
        if (!t)
            abort();
        inv_status st = inv_ticket_open(inv, t, sku, user_id, qty, idem_key);
        if (st == INV_OK) {
            inv_ticket_single(s, t);
            st = t->st;
        }
        *order = t->order;
        free(t);
        return st;
    }
    inv_order_clear(order);
    /* Sold out in this epoch, as this instance saw: no id, no Redis. */
    inv_status st = soldout_answer(inv, sku, qty, idem_key);
    if (st == INV_OK)
        st = place(s, sku, user_id, qty, idem_key, order);
    count_outcome(inv, st);
    return st;
}

/* ---- orders in batches -------------------------------------------------- */

inv_status inv_ticket_open(struct inv *inv, struct inv_ticket *t, const char *sku,
                           const char *user_id, int qty, const char *idem_key)
{
    inv_order_clear(&t->order);
    snprintf(t->sku, sizeof(t->sku), "%s", sku);
    snprintf(t->user_id, sizeof(t->user_id), "%s", user_id);
    snprintf(t->idem_key, sizeof(t->idem_key), "%s", idem_key ? idem_key : "");
    t->qty = qty;
    t->gene = -1;
    t->start_us = clock_now_us();
    t->st = INV_OK;
    t->next = NULL;
    inv_status st = soldout_answer(inv, sku, qty, idem_key);
    if (st == INV_OK && order_new_id(inv, &t->order) != 0)
        st = INV_UNAVAILABLE; /* no id is unique without the worker lease */
    if (st != INV_OK) {
        count_outcome(inv, st);
        return st;
    }
    snprintf(t->order.sku, sizeof(t->order.sku), "%s", sku);
    snprintf(t->order.user_id, sizeof(t->order.user_id), "%s", user_id);
    t->order.qty = qty;
    t->hops = 0;
    t->link = 0;
    if (inv->cfg.lock || inv->cfg.cluster) /* atomic on a cluster: for the shard */
        inv_ticket_route(inv, t);
    else
        t->home = t->seg = 0; /* atomic: one queue */
    return INV_OK;
}

long long inv_segment_bound(struct inv *inv, const char *sku, int seg)
{
    struct sku_layout l;
    if (inv_layout_get(inv, sku, &l) != 0 || seg < 0 || seg >= l.segments)
        return -1;
    if (l.empty[seg / 64] & (UINT64_C(1) << (seg % 64)))
        return 0;
    return seg_initial(l.initial, l.segments, seg);
}

/* Routes t within its home segment's shard (a cluster's): segment i is in
 * shard i % l->nshards. When home is known empty, another segment of the
 * shard not known empty, chosen by the routing number; home when there is
 * none (the shard's commit answers then). */
static void route_in_shard(const struct sku_layout *l, struct inv_ticket *t,
                           uint32_t route)
{
    int shard = t->home % l->nshards, stocked = 0;
    t->gene = l->genes[shard];
    t->order.id = orderid_with_gene(t->order.id, t->gene);
    for (int i = shard; i < l->segments; i += l->nshards)
        stocked += !(l->empty[i / 64] & (UINT64_C(1) << (i % 64)));
    if (!(l->empty[t->home / 64] & (UINT64_C(1) << (t->home % 64))) || stocked == 0)
        return;
    int n = (int)(route % (uint32_t)stocked);
    for (int i = shard; i < l->segments; i += l->nshards)
        if (!(l->empty[i / 64] & (UINT64_C(1) << (i % 64))) && n-- == 0)
            t->seg = i;
}

int inv_ticket_route(struct inv *inv, struct inv_ticket *t)
{
    struct sku_layout l;
    if (inv_layout_get(inv, t->sku, &l) != 0)
        return t->home = t->seg = -1;
    uint32_t route = seg_route(t->user_id);
    t->home = t->seg = (int)(route % (uint32_t)l.segments);
    if (l.nshards > 0)
        route_in_shard(&l, t, route);
    else if (l.empty[t->home / 64] & (UINT64_C(1) << (t->home % 64)) &&
             l.nempty < l.segments)
        t->seg = layout_nth_stocked(&l, (int)(route % (uint32_t)(l.segments - l.nempty)));
    return t->seg;
}

static void ticket_finish(struct inv *inv, struct inv_ticket *t, inv_status st)
{
    t->st = st;
    count_outcome(inv, st);
}

void inv_ticket_fail(struct inv *inv, struct inv_ticket *t, inv_status st)
{
    ticket_finish(inv, t, st);
}

/* The link of rc, connecting it first: what a call on rc is about to use. */
static uint64_t link_before(struct rconn *rc)
{
    rconn_ctx(rc); /* when it cannot, the call fails too */
    return rconn_link(rc);
}

/* The link that carried a call on rc that began on `before`: that link when
 * rc is still on it, else 0 (it failed or was made anew meanwhile: what the
 * call wrote may have gone on either). */
static uint64_t link_after(const struct rconn *rc, uint64_t before)
{
    return rconn_link(rc) == before ? before : 0;
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

void inv_ticket_acked(struct inv *inv, struct inv_ticket *t, const redisReply *r)
{
    if (t->st != INV_PLACED || (r && r->type == REDIS_REPLY_INTEGER &&
                                r->integer >= inv->cfg.min_replicas_acked))
        return;
    atomic_fetch_sub(&inv->counters.placed, 1); /* counted as placed when decided */
    count(&inv->counters.unacked);
    ticket_finish(inv, t, INV_OUTCOME_UNKNOWN);
}

void inv_tickets_durable(struct inv_session *s, struct inv_ticket **t, int n)
{
    const char *argv[3];
    char buf[2][16];
    int placed = 0;
    for (int i = 0; i < n; i++)
        placed += t[i]->st == INV_PLACED;
    if (!placed || !inv_durable_argv(s->inv, argv, buf))
        return;
    /* One WAIT per link that carried commits (on a cluster the tickets may
     * come from several shards), sent on that link: on another it would
     * count that link's writes, not the commits. A ticket whose link is gone
     * is not known to be on a replica. Decided tickets are passed over. */
    for (int i = 0; i < n; i++) {
        if (t[i]->st != INV_PLACED || (s->cl && t[i]->gene < 0))
            continue;
        int gene = t[i]->gene, seen = 0;
        uint64_t link = t[i]->link;
        for (int j = 0; j < i && !seen; j++)
            seen = t[j]->st == INV_PLACED && t[j]->gene == gene && t[j]->link == link;
        if (seen)
            continue; /* waited for already (or answered) with t[j] */
        struct inv_session *shard = inv_shard_session(s, gene);
        struct rconn *rc = shard ? shard->rc : NULL;
        redisReply *r = link && rc && rconn_link(rc) == link
                            ? rconn_command_argv(rc, 3, argv, NULL)
                            : NULL;
        for (int j = i; j < n; j++)
            if (t[j]->gene == gene && t[j]->link == link)
                inv_ticket_acked(s->inv, t[j], r);
        if (r)
            freeReplyObject(r);
    }
}

static void tickets_finish(struct inv *inv, struct inv_ticket **t, int n, inv_status st)
{
    for (int i = 0; i < n; i++)
        ticket_finish(inv, t[i], st);
}

/* Places t by itself on s (one Redis, or the session of t's shard), as the
 * lock mode does. */
inv_status inv_ticket_place(struct inv_session *s, struct inv_ticket *t)
{
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, t->sku, s->gene);
    uint64_t link = link_before(s->rc);
    inv_status st =
        s->inv->cfg.lock
            ? place_one_locked(s, t->sku, t->user_id, t->qty, t->idem_key, &t->order)
            : place_atomic(s, &k, t->sku, t->user_id, t->qty, t->idem_key, &t->order);
    t->link = link_after(s->rc, link);
    return st;
}

void inv_ticket_single(struct inv_session *s, struct inv_ticket *t)
{
    ticket_finish(s->inv, t,
                  s->cl ? inv_ticket_place_shards(s, t) : inv_ticket_place(s, t));
}

/* One order's part of the batch commit: its text arguments. */
struct batch_slot {
    char okey[40], id[24], qty[12], route[12];
};

/* Reads the batch script's answer for the tickets of hold h (two entries
 * each); a ticket whose segment could not serve it is sent on (t->seg) or
 * left to go by itself, as one whose id was taken. s loads an idempotent
 * replay's first order; without one (NULL) the replay is left to go by
 * itself (t->seg -1), which finds it again. */
static void batch_outcomes(struct inv *inv, struct inv_session *s, struct inv_hold *h,
                           const redisReply *r, lock_status released)
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
            continue;
        case -5:
            if (inv->cfg.cluster) { /* short in its shard: by itself, which
                                       brings units from the others */
                t[i]->seg = -1;
                continue;
            }
            if (t[i]->qty == 1) /* not a unit left */
                note_sold_out(inv, t[i]->sku, (int)inv_reply_ll(first, 0), h->seen);
            st = INV_SOLD_OUT;
            break;
        case -3:
            if (!s) {
                t[i]->seg = -1;
                continue;
            }
            if (first->type == REDIS_REPLY_STRING) {
                st = load_order(s, first->str, o);
                st = st == INV_OK ? INV_REPLAYED : st;
            }
            break;
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
            if (order_id_taken(inv, o) == INV_OK)
                continue; /* a fresh id: again by itself */
            break;
        }
        ticket_finish(inv, t[i], st);
    }
}

/* The atomic mode's batch: no lock and no group commit, one script per order,
 * but the n calls go out in one write and their answers come back in one
 * read (pipelining: transport, not batching). */
static void atomic_pipeline(struct inv_session *s, struct inv_ticket **t, int n)
{
    struct inv *inv = s->inv;
    rconn_check(s->rc);
    struct rcmd call = {.script = &atomic_script, .nkeys = 8, .argc = 14};
    if (rconn_prepare(s->rc, &call) != RCONN_OK)
        return; /* each by itself, which reports why */
    struct atomic_call *c = malloc(sizeof(*c) * (size_t)n);
    if (!c)
        abort();
    uint64_t lost = rconn_unanswered(s->rc);
    uint64_t seen = soldout_generation(inv->cfg.soldout);
    struct rpipe p;
    int sent = rpipe_begin(&p, s->rc) == RCONN_OK ? n : 0;
    for (int i = 0; i < sent; i++) {
        struct inv_ticket *x = t[i];
        struct sku_keys k;
        inv_keys_init(&k, x->sku, x->gene);
        atomic_call_init(&c[i], &k, x->sku, x->user_id, x->qty, x->idem_key, x->order.id);
        call.argv = c[i].argv;
        if (rpipe_append(&p, &call) != RCONN_OK)
            sent = 0; /* none went out: each by itself */
    }
    /* Every answer is read before any is acted on: a replay loads its first
     * order with a command of its own, which may only follow the pipeline. */
    redisReply **r = calloc((size_t)n, sizeof(*r));
    if (!r)
        abort();
    int got = 0;
    while (got < sent && (r[got] = rpipe_collect(&p)) != NULL)
        got++;
    rpipe_end(&p);
    for (int i = 0; i < sent; i++) {
        if (i >= got) /* sent, and the connection failed before its answer */
            ticket_finish(inv, t[i], no_answer(s, lost));
        else if (!rconn_is_noscript(r[i])) { /* NOSCRIPT: by itself, which runs EVAL */
            inv_status st = atomic_outcome(s, t[i]->sku, r[i], &t[i]->order, seen);
            /* a shard short on a cluster: by itself, which brings units */
            if (st != INV_OK && !(st == INV_SOLD_OUT && inv->cfg.cluster))
                ticket_finish(inv, t[i], st);
        }
    }
    free_replies(r, got);
    free(r);
    free(c);
}

inv_path inv_loop_path(const struct inv *inv)
{
    if (!inv->cfg.lock)
        return INV_PATH_ATOMIC;
    return lock_has_steps(inv->cfg.lock) ? INV_PATH_HOLDS : INV_PATH_THREADS;
}

struct lock *inv_lock(const struct inv *inv)
{
    return inv->cfg.lock;
}

rconn_status inv_atomic_send(struct inv *inv, struct inv_ticket *t,
                             const struct inv_conns *cs, aconn_cb *cb, void *arg,
                             uint64_t *seen)
{
    struct sku_keys k;
    inv_keys_init(&k, t->sku, t->gene);
    struct atomic_call call;
    atomic_call_init(&call, &k, t->sku, t->user_id, t->qty, t->idem_key, t->order.id);
    *seen = soldout_generation(inv->cfg.soldout);
    if (cs->cluster)
        return acluster_eval(cs->cluster, cluster_gene_slot(t->gene), cb, arg,
                             &atomic_script, 8, 14, call.argv);
    return aconn_eval(cs->data, cb, arg, &atomic_script, 8, 14, call.argv);
}

inv_step inv_atomic_answer(struct inv *inv, struct inv_ticket *t, aconn_result res,
                           const redisReply *r, uint64_t seen)
{
    if (res != ACONN_REPLY) {
        ticket_finish(inv, t, res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE);
        return INV_STEP_DONE;
    }
    if (rconn_is_noscript(r))
        return INV_STEP_AGAIN; /* the connection loads it again first */
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        inv_reply_ll(r->element[0], 0) == -3)
        return INV_STEP_ALONE; /* a replay: its first order is loaded by itself */
    /* Every other answer is read without a round trip: no connection needed. */
    struct inv_session view = {.inv = inv};
    inv_status st = atomic_outcome(&view, t->sku, r, &t->order, seen);
    if (st == INV_OK)
        return INV_STEP_AGAIN; /* the id was taken: it has a fresh one */
    if (st == INV_SOLD_OUT && inv->cfg.cluster)
        return INV_STEP_ALONE; /* short in its shard: units from the others */
    ticket_finish(inv, t, st);
    return INV_STEP_DONE;
}

/* Sets h up for tickets t[0..n-1] on segment seg: its lock key, the epoch
 * the commit checks, the sold-out memory's generation. False when the SKU's
 * layout is forgotten since they were routed (each goes by itself). */
static int hold_prepare(struct inv *inv, struct inv_hold *h, struct inv_ticket **t, int n,
                        int seg)
{
    struct sku_layout layout;
    if (inv_layout_get(inv, t[0]->sku, &layout) != 0 || seg < 0 || seg >= layout.segments)
        return 0;
    struct sku_keys k;
    inv_keys_init(&k, t[0]->sku, t[0]->gene);
    h->t = t;
    h->n = n;
    h->seg = seg;
    h->gene = t[0]->gene;
    snprintf(h->lkey, sizeof(h->lkey), "%s%d", k.lock, seg);
    snprintf(h->epoch, sizeof(h->epoch), "%s", layout.epoch);
    h->seen = soldout_generation(inv->cfg.soldout);
    return 1;
}

/* h holds its lock and read stock: open until its orders' work is done (at
 * once when the segment is empty: the commit only routes them). */
static void hold_opened(struct inv *inv, struct inv_hold *h, long long stock)
{
    h->stock = h->left = stock;
    h->due_us = clock_now_us();
    if (stock == 0)
        layout_mark_empty(inv, h->t[0]->sku, h->epoch, h->seg);
    else
        h->due_us += inv->cfg.work_us; /* the orders' work, side by side */
}

inv_hold_next inv_hold_open(struct inv_session *s, struct inv_ticket **t, int n, int seg,
                            int try_only, struct inv_hold *h)
{
    struct inv_session *top = s; /* on a cluster: the router, for inv_shard_outcome */
    if (s->cl && !(s = inv_shard_session(s, t[0]->gene)))
        return INV_HOLD_ENDED; /* each by itself, which learns where */
    if (!s->inv->cfg.lock) {
        atomic_pipeline(s, t, n);
        return INV_HOLD_ENDED;
    }
    struct inv *inv = s->inv;
    if (!hold_prepare(inv, h, t, n, seg))
        return INV_HOLD_ENDED; /* each by itself */
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, t[0]->sku, h->gene);
    /* The oldest ticket's wait decides: none waits much past --wait-ms. */
    int64_t oldest = t[0]->start_us;
    for (int i = 1; i < n; i++)
        oldest = t[i]->start_us < oldest ? t[i]->start_us : oldest;
    int64_t left_ms = (oldest + (int64_t)inv->cfg.wait_ms * 1000 - clock_now_us()) / 1000;
    int wait_ms = try_only || left_ms <= 0 ? 0 : (int)left_ms;
    long long stock;
    lock_status ls = lock_and_read(s, &k, h->lkey, seg, wait_ms, &h->g, &stock);
    if (ls == LOCK_BUSY && try_only)
        return INV_HOLD_TAKEN; /* taken: nothing decided, the caller tries later */
    /* Unavailable on a cluster (the lock step's or the read's answer a MOVED, no
     * answer from a master that died): the map is learnt again, or every later
     * hold of the shard would go to the same old master. */
    if (ls != LOCK_ACQUIRED) {
        tickets_finish(inv, t, n,
                       ls == LOCK_BUSY ? INV_BUSY
                                       : inv_shard_outcome(top, INV_UNAVAILABLE));
        return INV_HOLD_ENDED;
    }
    if (stock < 0) {
        lock_release(s->lock, h->lkey, &h->g);
        tickets_finish(inv, t, n, inv_shard_outcome(top, INV_UNAVAILABLE));
        return INV_HOLD_ENDED;
    }
    hold_opened(inv, h, stock);
    return INV_HOLD_OPEN;
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
    snprintf(c->stock, sizeof(c->stock), "%lld", h->stock);
    inv_fence_text(inv, &h->g, c->fence, sizeof(c->fence));
    int nkeys = 8 + n, argc = nkeys + 5 + 5 * n;
    const char **argv = malloc(sizeof(*argv) * (size_t)argc);
    c->slot = malloc(sizeof(*c->slot) * (size_t)n);
    if (!argv || !c->slot)
        abort();
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
        snprintf(x->okey, sizeof(x->okey), "%s%s", k->order, x->id);
        snprintf(x->qty, sizeof(x->qty), "%d", t[i]->qty);
        snprintf(x->route, sizeof(x->route), "%u", seg_route(t[i]->user_id));
        argv[8 + i] = x->okey;
        *a++ = x->qty;
        *a++ = t[i]->user_id;
        *a++ = x->id;
        *a++ = t[i]->idem_key;
        *a++ = x->route;
    }
    c->cmd = (struct rcmd){
        .script = &batch_script, .nkeys = nkeys, .argc = argc, .argv = argv};
}

static void batch_call_free(struct batch_call *c)
{
    free(c->cmd.argv);
    free(c->slot);
}

/* What the batch script's answer r means for h's tickets (s as for
 * batch_outcomes); r is an answer, not NULL. Returns 1 when Redis had lost
 * the script (nothing written: each by itself, once it is loaded again). */
static int batch_answer(struct inv *inv, struct inv_session *s, struct inv_hold *h,
                        const redisReply *r, lock_status released)
{
    struct inv_ticket **t = h->t;
    int n = h->n;
    if (rconn_is_noscript(r))
        return 1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)(2 * n)) {
        batch_outcomes(inv, s, h, r, released);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               inv_reply_ll(r->element[0], 0) == -1) {
        count(&inv->counters.epoch_changed); /* a reset: each by itself, anew */
        inv_layout_forget(inv, t[0]->sku);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               inv_reply_ll(r->element[0], 0) == -2) {
        count(&inv->counters.fenced_off);
        tickets_finish(inv, t, n, INV_BUSY);
    } else {
        tickets_finish(inv, t, n, INV_UNAVAILABLE);
    }
    return 0;
}

void inv_hold_commit(struct inv_session *s, struct inv_hold *h)
{
    struct inv *inv = s->inv;
    struct inv_session *top = s;
    if (s->cl && !(s = inv_shard_session(s, h->gene))) {
        tickets_finish(inv, h->t, h->n, INV_UNAVAILABLE); /* the lease runs out */
        return;
    }
    struct batch_call c;
    batch_call_init(&c, inv, h);
    redisReply *r;
    uint64_t lost = rconn_unanswered(s->rc), link = link_before(s->rc);
    lock_status released = lock_release_after(s->lock, h->lkey, &h->g, &c.cmd, &r);
    batch_call_free(&c);
    link = link_after(s->rc, link);
    for (int i = 0; i < h->n; i++)
        h->t[i]->link = link;
    if (!r) { /* on a cluster the map is learnt again, as after a failed open */
        tickets_finish(inv, h->t, h->n, inv_shard_outcome(top, no_answer(s, lost)));
        return;
    }
    if (batch_answer(inv, s, h, r, released)) /* nothing written: each by itself */
        rconn_script_reload(s->rc, &batch_script);
    else if (top->cl && rcluster_stale(r)) /* MOVED, ASK: nothing written */
        inv_shard_outcome(top, INV_UNAVAILABLE);
    freeReplyObject(r);
}

void inv_ticket_batch(struct inv_session *s, struct inv_ticket **t, int n, int seg)
{
    struct inv_hold h;
    if (inv_hold_open(s, t, n, seg, 0, &h) != INV_HOLD_OPEN)
        return;
    int64_t left = h.due_us - clock_now_us();
    if (left > 0)
        clock_sleep_us(left);
    inv_hold_commit(s, &h);
}

/* ---- the event-driven hold ---------------------------------------------- */

/* The status of tickets whose command got no answer (res not ACONN_REPLY). */
static inv_status lost_answer(aconn_result res)
{
    return res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE;
}

/* The index of the hold's own command (the read, the commit) among its slots. */
#define HOLD_OWN LOCK_STEP_CMDS

/* What an event-driven hold has in flight (h->state). */
enum {
    HOLD_LOCKING = 0, /* a step of its lock (with the read behind it) */
    HOLD_READING,     /* the read alone, once granted */
    HOLD_COMMITTING,  /* the commit (with the release behind it) */
    HOLD_RELEASING,   /* the release, after the commit's answer */
    HOLD_ENDED,       /* nothing: every ticket final or undecided */
};

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
static void hold_end(struct inv *inv, struct inv_hold *h, inv_status st)
{
    tickets_finish(inv, h->t, h->n, st);
    h->state = HOLD_ENDED;
}

/* Queues the read of h's stock. 1, or 0 when refused. */
static int read_queue(struct inv_hold *h)
{
    struct sku_keys k;
    inv_keys_init(&k, h->t[0]->sku, h->gene);
    char segtext[12];
    snprintf(segtext, sizeof(segtext), "%d", h->seg);
    const char *read[] = {"HGET", k.stock, segtext};
    struct rcmd cmd = {.argc = 3, .argv = read};
    return hold_queue(h, -1, HOLD_OWN, &cmd);
}

/* Sends h->step's commands: on the data Redis and the lock's nodes. A
 * refused one is answered (none) at once. With `read`, the read of the
 * stock goes right behind those on the data Redis. */
static void step_queue(struct inv_session *s, struct inv_hold *h, int read)
{
    struct lock_step *st = &h->step;
    h->with_read = 0;
    for (int i = 0; i < st->ncmd; i++) {
        if (!hold_queue(h, st->node[i], i, &st->cmd[i]))
            lock_step_answer(s->lock, h->lkey, st, NULL);
    }
    if (read)
        h->with_read = read_queue(h);
}

/* The lock's step in h->step goes out, with the read behind it when a
 * grant by it is complete and it runs on the data Redis; else decided at
 * once when it has nothing to send. */
static void lock_send(struct inv_session *s, struct inv_hold *h)
{
    const struct lock_step *st = &h->step;
    int on_data = 0;
    for (int i = 0; i < st->ncmd; i++)
        on_data |= st->node[i] < 0;
    h->state = HOLD_LOCKING;
    h->stock = -1;
    step_queue(s, h, st->last && on_data);
}

/* An attempt at h's lock, waiting (in the lock's queue, or by polling) for
 * what is left of h's wait. */
static void hold_attempt(struct inv_session *s, struct inv_hold *h)
{
    int64_t left_ms = h->try_only ? 0 : (h->deadline_us - clock_now_us()) / 1000;
    lock_try_step(s->lock, h->lkey, left_ms > 0 ? (int)left_ms : 0, &h->step);
    lock_send(s, h);
}

void inv_hold_send(struct inv_session *s, struct inv_hold *h, struct inv_ticket **t,
                   int n, int seg, int try_only, const struct inv_conns *cs, aconn_cb *cb,
                   void *arg)
{
    struct inv *inv = s->inv;
    h->cs = cs;
    h->cb = cb;
    h->arg = arg;
    h->owed = 0;
    h->t = t;
    h->n = n;
    if (!hold_prepare(inv, h, t, n, seg)) {
        h->state = HOLD_ENDED; /* each by itself */
        return;
    }
    /* The oldest ticket's wait decides: none waits much past --wait-ms. */
    int64_t oldest = t[0]->start_us;
    for (int i = 1; i < n; i++)
        oldest = t[i]->start_us < oldest ? t[i]->start_us : oldest;
    h->deadline_us = oldest + (int64_t)inv->cfg.wait_ms * 1000;
    h->noscripts = 0;
    h->try_only = try_only;
    lock_step_init(&h->step);
    hold_attempt(s, h);
}

void inv_hold_retry_send(struct inv_session *s, struct inv_hold *h)
{
    hold_attempt(s, h);
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

void inv_hold_answer(struct inv_session *s, struct inv_hold *h, aconn_result res,
                     const redisReply *r)
{
    if (h->index == HOLD_OWN) { /* the read; not one that went ahead of a resend */
        if (h->with_read || h->state == HOLD_READING)
            h->stock = res == ACONN_REPLY ? stock_of(r) : -1;
    } else
        lock_answer(s, h, res, r);
}

/* h holds its lock: open once its stock is read (with the grant, or now). */
static inv_hold_next hold_granted(struct inv_session *s, struct inv_hold *h)
{
    if (!h->with_read && read_queue(h)) {
        h->state = HOLD_READING;
        return INV_HOLD_OWED;
    }
    if (h->stock >= 0) {
        hold_opened(s->inv, h, h->stock);
        return INV_HOLD_OPEN;
    }
    lock_release_done(s->lock, h->lkey, &h->g, NULL); /* unread: the lease runs out */
    hold_end(s->inv, h, INV_UNAVAILABLE);
    return INV_HOLD_ENDED;
}

inv_hold_next inv_hold_ready(struct inv_session *s, struct inv_hold *h)
{
    struct inv *inv = s->inv;
    if (h->owed > 0)
        return INV_HOLD_OWED;
    if (h->state == HOLD_ENDED)
        return INV_HOLD_ENDED;
    if (h->state == HOLD_READING) {
        h->with_read = 1; /* read */
        return hold_granted(s, h);
    }
    switch (lock_try_done(s->lock, h->lkey, &h->step, &h->g)) {
    case LOCK_PENDING:
        lock_send(s, h);
        return inv_hold_ready(s, h);
    case LOCK_ACQUIRED:
        return hold_granted(s, h);
    case LOCK_BUSY:
        if (h->try_only)
            return INV_HOLD_TAKEN;
        if (h->step.entry[0])
            return INV_HOLD_QUEUED;
        if (h->step.retry_us > 0)
            return INV_HOLD_POLL;
        hold_end(inv, h, INV_BUSY);
        return INV_HOLD_ENDED;
    default:
        hold_end(inv, h, INV_UNAVAILABLE);
        return INV_HOLD_ENDED;
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

void inv_hold_waited(struct inv_session *s, struct inv_hold *h, aconn_result res,
                     const redisReply *r)
{
    if (lock_handoff_done(s->lock, h->lkey, &h->step, res == ACONN_REPLY ? r : NULL,
                          &h->g) != LOCK_ACQUIRED) {
        hold_attempt(s, h); /* the next, which leaves the queue once the wait is over */
        return;
    }
    h->stock = -1;
    h->with_read = 0;
    hold_granted(s, h); /* the read, now that the lock is ours */
}

/* True when the release in h->step goes to the data Redis only. */
static int release_on_data(const struct lock_step *st)
{
    for (int i = 0; i < st->ncmd; i++)
        if (st->node[i] >= 0)
            return 0;
    return 1;
}

void inv_hold_commit_send(struct inv_session *s, struct inv_hold *h, aconn_cb *cb,
                          void *arg)
{
    struct inv *inv = s->inv;
    struct batch_call call;
    h->cb = cb;
    h->arg = arg;
    h->owed = 0;
    h->noscripts = 0;
    h->placed = 0; /* batch_outcomes counts them: none unless the commit placed */
    batch_call_init(&call, inv, h);
    lock_release_step(s->lock, h->lkey, &h->g, &h->step);
    int sent = hold_queue(h, -1, HOLD_OWN, &call.cmd);
    batch_call_free(&call);
    if (!sent) {
        lock_release_done(s->lock, h->lkey, &h->g, NULL);
        hold_end(inv, h, INV_UNAVAILABLE);
        return;
    }
    h->state = HOLD_COMMITTING;
    /* A release on the data Redis goes in one pipeline with the commit; one
     * on the lock's nodes once the commit answered (it may not overtake it),
     * and so does one that must be made after the commit (setnx), or on a
     * cluster (a commit redirected may run after what follows it). */
    h->releasing = release_on_data(&h->step) && !h->step.after && !h->cs->cluster;
    if (h->releasing)
        step_queue(s, h, 0);
}

int inv_hold_committed(struct inv_session *s, struct inv_hold *h, aconn_result res,
                       const redisReply *r)
{
    struct inv *inv = s->inv;
    int decided = h->index == HOLD_OWN;
    if (decided) { /* the commit's */
        if (res != ACONN_REPLY)
            tickets_finish(inv, h->t, h->n, lost_answer(res));
        else
            batch_answer(inv, NULL, h, r, LOCK_RELEASED);
        h->state = HOLD_RELEASING;
        if (!h->releasing) { /* made now: it may decide on the time */
            lock_release_step(s->lock, h->lkey, &h->g, &h->step);
            step_queue(s, h, 0);
        }
    } else {
        lock_answer(s, h, res, r);
    }
    if (h->owed == 0 && h->state == HOLD_RELEASING) {
        /* a commit placed after the lease was gone is counted */
        if (lock_release_done(s->lock, h->lkey, &h->g, &h->step) == LOCK_NOT_HELD)
            for (int i = 0; i < h->placed; i++)
                count(&inv->counters.commits_after_lease);
        h->state = HOLD_ENDED;
    }
    return decided;
}

void inv_hold_abandon(struct inv_session *s, struct inv_hold *h)
{
    lock_release_done(s->lock, h->lkey, &h->g, NULL);
    hold_end(s->inv, h, INV_UNAVAILABLE);
}
