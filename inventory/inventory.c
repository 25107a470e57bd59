#include "inventory.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The scripts: KEYS, ARGV and replies are described at the top of each file.
 * commit.lua and atomic.lua share idem.lua (the Idempotency-Key check),
 * limit.lua (the per-user limit) and record.lua (recording a placed order);
 * peek.lua shares the first two. */
extern const struct rscript_source lua_inventory_commit, lua_inventory_atomic,
    lua_inventory_peek, lua_inventory_reset, lua_inventory_batch;
/* inventory/lua/commit.lua: commit of the lock-guarded modes. */
static struct rscript commit_script = RSCRIPT_INIT("inv_commit", lua_inventory_commit);
/* inventory/lua/atomic.lua: the atomic mode, check and decrement, no lock. */
static struct rscript atomic_script = RSCRIPT_INIT("inv_atomic", lua_inventory_atomic);
/* inventory/lua/peek.lua: what an order learns before taking any lock. */
static struct rscript peek_script = RSCRIPT_INIT("inv_peek", lua_inventory_peek);
/* inventory/lua/batch.lua: group commit of the lock-guarded modes. */
static struct rscript batch_script = RSCRIPT_INIT("inv_batch", lua_inventory_batch);
/* inventory/lua/reset.lua: create or reset a SKU. */
static struct rscript reset_script = RSCRIPT_INIT("inv_reset", lua_inventory_reset);

struct inv_counters {
    _Atomic uint64_t placed, replayed, sold_out, limit, busy, unavailable, fenced_off,
        epoch_changed, spilled, commits_after_lease, outcome_unknown, idem_mismatch,
        id_collisions, sold_out_local;
};

/* What a peek taught about a SKU, so that a ticket finds its home segment and
 * a batch its epoch without asking Redis: a direct-mapped cache, an entry
 * overwritten by another SKU of the same slot. A reset forgets the entry here
 * at once; a reset by another instance shows as a batch refused for its epoch,
 * which forgets it too. */
#define LAYOUT_SLOTS 256

struct sku_layout {
    char sku[INV_ID_MAX + 1]; /* "" for an empty slot */
    int segments;
    char epoch[24];
};

struct inv {
    struct inv_config cfg;
    struct inv_counters counters;
    pthread_mutex_t layout_mu;
    struct sku_layout layouts[LAYOUT_SLOTS];
};

struct inv_session {
    struct inv *inv;
    struct rconn *rc;
    struct lock_session *lock;
};

/* The Redis keys of one SKU. */
struct sku_keys {
    char meta[96], stock[96], init[96], sold[96], buyers[96], orders[96], idem[96];
};

static void sku_keys_init(struct sku_keys *k, const char *sku)
{
    snprintf(k->meta, sizeof(k->meta), "sk:{%s}:meta", sku);
    snprintf(k->stock, sizeof(k->stock), "sk:{%s}:stock", sku);
    snprintf(k->init, sizeof(k->init), "sk:{%s}:init", sku);
    snprintf(k->sold, sizeof(k->sold), "sk:{%s}:sold", sku);
    snprintf(k->buyers, sizeof(k->buyers), "sk:{%s}:buyers", sku);
    snprintf(k->orders, sizeof(k->orders), "sk:{%s}:orders", sku);
    snprintf(k->idem, sizeof(k->idem), "sk:{%s}:idem", sku);
}

static void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
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
static int layout_get(struct inv *inv, const char *sku, struct sku_layout *out)
{
    struct sku_layout *l = layout_slot(inv, sku);
    pthread_mutex_lock(&inv->layout_mu);
    int found = strcmp(l->sku, sku) == 0;
    if (found)
        *out = *l;
    pthread_mutex_unlock(&inv->layout_mu);
    return found ? 0 : -1;
}

static void layout_put(struct inv *inv, const char *sku, int segments, const char *epoch)
{
    struct sku_layout *l = layout_slot(inv, sku);
    pthread_mutex_lock(&inv->layout_mu);
    snprintf(l->sku, sizeof(l->sku), "%s", sku);
    l->segments = segments;
    snprintf(l->epoch, sizeof(l->epoch), "%s", epoch);
    pthread_mutex_unlock(&inv->layout_mu);
}

static void layout_forget(struct inv *inv, const char *sku)
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
}

struct inv_session *inv_session_new(struct inv *inv, struct rconn *rc)
{
    struct inv_session *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->inv = inv;
    s->rc = rc;
    if (inv->cfg.lock)
        s->lock = lock_session_new(inv->cfg.lock, rc);
    return s;
}

void inv_session_free(struct inv_session *s)
{
    if (!s)
        return;
    lock_session_free(s->lock);
    free(s);
}

int inv_ping(struct inv_session *s)
{
    rconn_check(s->rc);
    redisReply *r = rconn_command(s->rc, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* ---- small reply helpers ------------------------------------------------ */

static long long reply_ll(const redisReply *r, long long dflt)
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

/* Collects n pipelined replies; 0 when all arrived and none is an error. */
static int collect(struct rconn *rc, redisReply **r, int n)
{
    int ok = 1;
    for (int i = 0; i < n; i++) {
        r[i] = ok ? rconn_reply(rc) : NULL;
        if (!r[i] || r[i]->type == REDIS_REPLY_ERROR)
            ok = 0;
    }
    return ok ? 0 : -1;
}

/* Collects the answers of a transaction the caller appended: MULTI, n
 * commands, EXEC. Returns the EXEC answer (an array of n replies, caller
 * frees), or NULL when Redis failed or the transaction did not run. */
static redisReply *multi_exec_reply(struct rconn *rc, int n)
{
    redisReply *r[16];
    int total = n + 2;
    if (total > 16)
        abort();
    redisReply *exec = NULL;
    if (collect(rc, r, total) == 0 && r[total - 1]->type == REDIS_REPLY_ARRAY &&
        r[total - 1]->elements == (size_t)n) {
        exec = r[total - 1];
        r[total - 1] = NULL;
    }
    free_replies(r, total);
    return exec;
}

static void sleep_us(int us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
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
static int order_new_id(struct inv *inv, struct inv_order *order)
{
    const struct inv_config *cfg = &inv->cfg;
    if (cfg->lease && !orderid_lease_valid(cfg->lease))
        return -1;
    order->id = orderid_next(cfg->ids);
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
    switch (reply_ll(r->element[0], 0)) {
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
    const char *argv[13];
};

static void atomic_call_init(struct atomic_call *c, const struct sku_keys *k,
                             const char *sku, const char *user_id, int qty,
                             const char *idem_key, uint64_t id)
{
    snprintf(c->home, sizeof(c->home), "%u", seg_route(user_id));
    snprintf(c->qtys, sizeof(c->qtys), "%d", qty);
    snprintf(c->idtext, sizeof(c->idtext), "%" PRIu64, id);
    snprintf(c->okey, sizeof(c->okey), "order:%s", c->idtext);
    const char *argv[] = {k->meta,   k->stock, k->sold, k->buyers, k->orders,
                          c->okey,   k->idem,  c->home, c->qtys,   user_id,
                          c->idtext, sku,      idem_key};
    memcpy(c->argv, argv, sizeof(argv));
}

/* The outcome of the atomic script's answer r for an order of qty units of
 * sku; INV_OK when the order's id was found taken and it drew a fresh one
 * (nothing was written: again). seen: the sold-out memory's generation when
 * the call was sent. */
static inv_status atomic_outcome(struct inv_session *s, const char *sku, int qty,
                                 const redisReply *r, struct inv_order *order,
                                 uint64_t seen)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return INV_UNAVAILABLE;
    switch (reply_ll(r->element[0], 0)) {
    case 1:
        order->segment = (int)reply_ll(r->elements > 1 ? r->element[1] : NULL, 0);
        if (r->elements > 2 && reply_ll(r->element[2], 0) != order->segment)
            count(&s->inv->counters.spilled);
        return INV_PLACED;
    case -5:
        if (qty == 1) /* no segment holds a unit */
            soldout_note(s->inv->cfg.soldout, sku,
                         (int)reply_ll(r->elements > 1 ? r->element[1] : NULL, 0), seen);
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
        redisReply *r = rconn_eval(s->rc, &atomic_script, 7, 6, c.argv, NULL);
        if (!r)
            return no_answer(s, lost);
        inv_status st = atomic_outcome(s, sku, qty, r, order, seen);
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
    long long bought;
    char first_id[24]; /* idempotent replay: the first order's id, or "" */
    int cand[PEEK_CANDIDATES];
    int ncand;
};

static inv_status order_peek(struct inv_session *s, const struct sku_keys *k,
                             const char *user_id, int qty, const char *idem_key,
                             struct order_view *v)
{
    char route[12], qtys[12], most[12];
    snprintf(route, sizeof(route), "%u", seg_route(user_id));
    snprintf(qtys, sizeof(qtys), "%d", qty);
    snprintf(most, sizeof(most), "%d", PEEK_CANDIDATES);
    const char *argv[] = {k->meta, k->stock, k->buyers, k->idem, route,
                          qtys,    user_id,  idem_key,  most};
    redisReply *r = rconn_eval(s->rc, &peek_script, 4, 5, argv, NULL);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        st = reply_ll(r->element[0], 0) == -8 ? INV_IDEM_MISMATCH : INV_NOT_FOUND;
    } else if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 6) {
        redisReply **e = r->element;
        v->segments = (int)reply_ll(e[0], 0);
        v->limit = (int)reply_ll(e[1], 1);
        snprintf(v->epoch, sizeof(v->epoch), "%s",
                 e[2]->type == REDIS_REPLY_STRING ? e[2]->str : "0");
        v->bought = reply_ll(e[3], 0);
        snprintf(v->first_id, sizeof(v->first_id), "%s",
                 e[4]->type == REDIS_REPLY_STRING ? e[4]->str : "");
        v->home = (int)reply_ll(e[5], 0);
        v->ncand = 0;
        for (size_t i = 6; i < r->elements && v->ncand < PEEK_CANDIDATES; i++)
            v->cand[v->ncand++] = (int)reply_ll(e[i], 0);
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
               ? reply_ll(r, 0)
               : -1;
}

/* The critical section on one segment: acquire the segment lock together
 * with the read of its stock, check, work, then commit together with the
 * release (each pair one round trip where the lock mode can pipeline it
 * with its own commands, as `redis` does). Returns INV_PLACED, INV_SOLD_OUT (this segment
 * is short: try another), or a final status. Sets *again when nothing was written and the
 * segment is worth another try: the commit met a Redis that had lost its
 * script cache (the lock was already released when that showed), or found
 * the order's id taken (the order has a fresh one now). */
static inv_status critical_section(struct inv_session *s, const struct sku_keys *k,
                                   const char *sku, const char *user_id, int qty,
                                   const char *idem_key, const struct order_view *v,
                                   int seg, int64_t deadline, struct inv_order *order,
                                   int *again)
{
    struct inv *inv = s->inv;
    char lkey[128], segtext[12];
    snprintf(lkey, sizeof(lkey), "sk:{%s}:lock:%d", sku, seg);
    snprintf(segtext, sizeof(segtext), "%d", seg);
    int wait_ms = (int)((deadline - lock_now_us()) / 1000);
    const char *read_argv[] = {"HGET", k->stock, segtext};
    struct rcmd read = {.argc = 3, .argv = read_argv};
    struct lock_grant g;
    redisReply *rr;
    lock_status ls =
        lock_acquire_then(s->lock, lkey, wait_ms > 0 ? wait_ms : 0, &g, &read, &rr);
    if (ls == LOCK_BUSY)
        return INV_BUSY;
    if (ls != LOCK_ACQUIRED)
        return INV_UNAVAILABLE;
    long long stock = stock_of(rr);
    if (rr)
        freeReplyObject(rr);
    if (stock < qty) {
        lock_release(s->lock, lkey, &g);
        return stock < 0 ? INV_UNAVAILABLE : INV_SOLD_OUT;
    }
    if (inv->cfg.work_us > 0)
        sleep_us(inv->cfg.work_us);

    char newstock[24], qtys[12], idtext[24], okey[40], fkey[160], fence[24];
    snprintf(newstock, sizeof(newstock), "%lld", stock - qty);
    snprintf(qtys, sizeof(qtys), "%d", qty);
    snprintf(idtext, sizeof(idtext), "%" PRIu64, order->id);
    snprintf(okey, sizeof(okey), "order:%s", idtext);
    lock_fence_key(lkey, fkey, sizeof(fkey));
    snprintf(fence, sizeof(fence), "%" PRIu64, inv->cfg.fencing ? g.fence : 0);
    const char *argv[] = {k->meta, k->stock, k->sold,  k->buyers, k->orders, okey,
                          k->idem, fkey,     v->epoch, segtext,   newstock,  qtys,
                          user_id, idtext,   sku,      idem_key,  fence};
    struct rcmd commit = {.script = &commit_script, .nkeys = 8, .argc = 17, .argv = argv};
    redisReply *r;
    uint64_t lost = rconn_unanswered(s->rc);
    lock_status rs = lock_release_after(s->lock, lkey, &g, &commit, &r);
    if (!r)
        return no_answer(s, lost);
    if (rconn_is_noscript(r)) {
        freeReplyObject(r);
        *again = rconn_script_reload(s->rc, &commit_script) == 0;
        return INV_UNAVAILABLE;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        freeReplyObject(r);
        return INV_UNAVAILABLE;
    }
    inv_status st;
    switch (reply_ll(r->element[0], 0)) {
    case 1:
        order->segment = seg;
        st = INV_PLACED;
        if (rs == LOCK_NOT_HELD)
            count(&inv->counters.commits_after_lease);
        if (seg != v->home)
            count(&inv->counters.spilled);
        break;
    case -1:
        count(&inv->counters.epoch_changed);
        st = INV_BUSY;
        break;
    case -2:
        count(&inv->counters.fenced_off);
        st = INV_BUSY;
        break;
    case -9:
        *again = order_id_taken(s->inv, order) == INV_OK;
        st = INV_UNAVAILABLE;
        break;
    default:
        st = commit_refusal(s, r, order);
        break;
    }
    freeReplyObject(r);
    return st;
}

static inv_status place_locked(struct inv_session *s, const struct sku_keys *k,
                               const char *sku, const char *user_id, int qty,
                               const char *idem_key, struct inv_order *order)
{
    struct inv *inv = s->inv;
    int64_t deadline = lock_now_us() + (int64_t)inv->cfg.wait_ms * 1000;
    int tries_left = ID_TRIES; /* of a segment whose commit wrote nothing (again) */
    /* Each round tries the segments the peek saw with stock. A candidate found
     * short under its lock was emptied meanwhile; once all are, peek again: the
     * next peek no longer lists them, so the rounds end. */
    for (;;) {
        struct order_view v;
        uint64_t seen = soldout_generation(s->inv->cfg.soldout);
        inv_status st = order_peek(s, k, user_id, qty, idem_key, &v);
        if (st != INV_OK)
            return st;
        layout_put(inv, sku, v.segments, v.epoch);
        if (qty > v.limit)
            return INV_BAD_QTY;
        if (v.first_id[0]) {
            st = load_order(s, v.first_id, order);
            return st == INV_OK ? INV_REPLAYED : st;
        }
        if (v.bought + qty > v.limit)
            return INV_LIMIT;
        if (v.ncand == 0) {
            if (qty == 1) /* no segment holds a unit */
                soldout_note(s->inv->cfg.soldout, sku, v.limit, seen);
            return INV_SOLD_OUT;
        }
        for (int c = 0; c < v.ncand; c++) {
            int again = 0;
            st = critical_section(s, k, sku, user_id, qty, idem_key, &v, v.cand[c],
                                  deadline, order, &again);
            if (again && --tries_left > 0)
                c--; /* nothing was written: the same segment again, once */
            else if (st != INV_SOLD_OUT)
                return st;
        }
    }
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
    sku_keys_init(&k, sku);
    const char *idem = idem_key ? idem_key : "";
    return s->inv->cfg.lock ? place_locked(s, &k, sku, user_id, qty, idem, order)
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
    memset(order, 0, sizeof(*order));
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
    memset(&t->order, 0, sizeof(t->order));
    snprintf(t->sku, sizeof(t->sku), "%s", sku);
    snprintf(t->user_id, sizeof(t->user_id), "%s", user_id);
    snprintf(t->idem_key, sizeof(t->idem_key), "%s", idem_key ? idem_key : "");
    t->qty = qty;
    t->start_us = lock_now_us();
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
    t->home = inv->cfg.lock ? inv_ticket_route(inv, t) : 0; /* atomic: one queue */
    return INV_OK;
}

int inv_ticket_route(struct inv *inv, const struct inv_ticket *t)
{
    struct sku_layout l;
    if (layout_get(inv, t->sku, &l) != 0)
        return -1;
    return (int)(seg_route(t->user_id) % (uint32_t)l.segments);
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

static void tickets_finish(struct inv *inv, struct inv_ticket **t, int n, inv_status st)
{
    for (int i = 0; i < n; i++)
        ticket_finish(inv, t[i], st);
}

void inv_ticket_single(struct inv_session *s, struct inv_ticket *t)
{
    rconn_check(s->rc);
    struct sku_keys k;
    sku_keys_init(&k, t->sku);
    inv_status st =
        s->inv->cfg.lock
            ? place_locked(s, &k, t->sku, t->user_id, t->qty, t->idem_key, &t->order)
            : place_atomic(s, &k, t->sku, t->user_id, t->qty, t->idem_key, &t->order);
    ticket_finish(s->inv, t, st);
}

/* One order's part of the batch commit: its text arguments. */
struct batch_slot {
    char okey[40], id[24], qty[12];
};

/* Reads the batch script's answer for tickets t[0..n-1] (two entries each);
 * a ticket whose segment could not serve it, or whose id was taken, stays
 * undecided. */
static void batch_outcomes(struct inv_session *s, struct inv_ticket **t, int n,
                           const redisReply *r, int seg, lock_status released)
{
    struct inv *inv = s->inv;
    for (int i = 0; i < n; i++) {
        const redisReply *first = r->element[2 * i + 1];
        struct inv_order *o = &t[i]->order;
        inv_status st = INV_UNAVAILABLE;
        switch (reply_ll(r->element[2 * i], 99)) {
        case 1:
            o->segment = seg;
            st = INV_PLACED;
            if (released == LOCK_NOT_HELD)
                count(&inv->counters.commits_after_lease);
            if (seg != t[i]->home)
                count(&inv->counters.spilled);
            break;
        case 0: /* short here: the ticket goes its own way */
            continue;
        case -3:
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
    if (rconn_script_load(s->rc, &atomic_script) != 0)
        return; /* each by itself, which reports why */
    struct sku_keys k;
    sku_keys_init(&k, t[0]->sku);
    struct atomic_call *c = malloc(sizeof(*c) * (size_t)n);
    if (!c)
        abort();
    uint64_t lost = rconn_unanswered(s->rc);
    uint64_t seen = soldout_generation(inv->cfg.soldout);
    int sent = 0;
    for (; sent < n; sent++) {
        struct inv_ticket *x = t[sent];
        atomic_call_init(&c[sent], &k, x->sku, x->user_id, x->qty, x->idem_key,
                         x->order.id);
        if (rconn_append_eval(s->rc, &atomic_script, 7, 6, c[sent].argv, NULL) != 0)
            break; /* the rest go by themselves */
    }
    /* Every answer is read before any is acted on: a replay loads its first
     * order with a command of its own, which may only follow the pipeline. */
    redisReply **r = calloc((size_t)n, sizeof(*r));
    if (!r)
        abort();
    int got = 0;
    while (got < sent && (r[got] = rconn_reply(s->rc)) != NULL)
        got++;
    for (int i = 0; i < sent; i++) {
        if (i >= got) /* sent, and the connection failed before its answer */
            ticket_finish(inv, t[i], no_answer(s, lost));
        else if (!rconn_is_noscript(r[i])) { /* NOSCRIPT: by itself, which runs EVAL */
            inv_status st =
                atomic_outcome(s, t[i]->sku, t[i]->qty, r[i], &t[i]->order, seen);
            if (st != INV_OK)
                ticket_finish(inv, t[i], st);
        }
    }
    free_replies(r, got);
    free(r);
    free(c);
}

int inv_hold_open(struct inv_session *s, struct inv_ticket **t, int n, int seg,
                  int try_only, struct inv_hold *h)
{
    if (!s->inv->cfg.lock) {
        atomic_pipeline(s, t, n);
        return 0;
    }
    struct inv *inv = s->inv;
    const char *sku = t[0]->sku;
    struct sku_layout layout;
    if (layout_get(inv, sku, &layout) != 0 || seg < 0 || seg >= layout.segments)
        return 0; /* forgotten since it was routed: each by itself */
    rconn_check(s->rc);
    struct sku_keys k;
    sku_keys_init(&k, sku);
    char *lkey = h->lkey, segtext[12];
    snprintf(lkey, sizeof(h->lkey), "sk:{%s}:lock:%d", sku, seg);
    snprintf(segtext, sizeof(segtext), "%d", seg);
    /* The oldest ticket's wait decides: none waits much past --wait-ms. */
    int64_t oldest = t[0]->start_us;
    for (int i = 1; i < n; i++)
        oldest = t[i]->start_us < oldest ? t[i]->start_us : oldest;
    int64_t left_ms = (oldest + (int64_t)inv->cfg.wait_ms * 1000 - lock_now_us()) / 1000;
    const char *read_argv[] = {"HGET", k.stock, segtext};
    struct rcmd read = {.argc = 3, .argv = read_argv};
    int wait_ms = try_only || left_ms <= 0 ? 0 : (int)left_ms;
    redisReply *rr;
    lock_status ls = lock_acquire_then(s->lock, lkey, wait_ms, &h->g, &read, &rr);
    if (ls == LOCK_BUSY && try_only)
        return -1; /* taken: nothing decided, the caller tries later */
    if (ls != LOCK_ACQUIRED) {
        tickets_finish(inv, t, n, ls == LOCK_BUSY ? INV_BUSY : INV_UNAVAILABLE);
        return 0;
    }
    long long stock = stock_of(rr);
    if (rr)
        freeReplyObject(rr);
    if (stock <= 0) {
        lock_release(s->lock, lkey, &h->g);
        if (stock < 0)
            tickets_finish(inv, t, n, INV_UNAVAILABLE);
        return 0; /* empty: each ticket looks for another segment */
    }
    h->t = t;
    h->n = n;
    h->seg = seg;
    h->stock = stock;
    snprintf(h->epoch, sizeof(h->epoch), "%s", layout.epoch);
    h->due_us = lock_now_us() + inv->cfg.work_us; /* the orders' work, side by side */
    return 1;
}

void inv_hold_commit(struct inv_session *s, struct inv_hold *h)
{
    struct inv *inv = s->inv;
    struct inv_ticket **t = h->t;
    int n = h->n, seg = h->seg;
    const char *sku = t[0]->sku, *lkey = h->lkey;
    struct sku_keys k;
    sku_keys_init(&k, sku);
    char segtext[12];
    snprintf(segtext, sizeof(segtext), "%d", seg);

    char fkey[160], stocktext[24], fence[24];
    lock_fence_key(lkey, fkey, sizeof(fkey));
    snprintf(stocktext, sizeof(stocktext), "%lld", h->stock);
    snprintf(fence, sizeof(fence), "%" PRIu64, inv->cfg.fencing ? h->g.fence : 0);
    int nkeys = 7 + n, argc = nkeys + 5 + 4 * n;
    const char **argv = malloc(sizeof(*argv) * (size_t)argc);
    struct batch_slot *slot = malloc(sizeof(*slot) * (size_t)n);
    if (!argv || !slot)
        abort();
    const char *head[] = {k.meta, k.stock, k.sold, k.buyers, k.orders, fkey, k.idem};
    memcpy(argv, head, sizeof(head));
    const char **a = argv + nkeys;
    *a++ = h->epoch;
    *a++ = segtext;
    *a++ = stocktext;
    *a++ = fence;
    *a++ = sku;
    for (int i = 0; i < n; i++) {
        snprintf(slot[i].id, sizeof(slot[i].id), "%" PRIu64, t[i]->order.id);
        snprintf(slot[i].okey, sizeof(slot[i].okey), "order:%s", slot[i].id);
        snprintf(slot[i].qty, sizeof(slot[i].qty), "%d", t[i]->qty);
        argv[7 + i] = slot[i].okey;
        *a++ = slot[i].qty;
        *a++ = t[i]->user_id;
        *a++ = slot[i].id;
        *a++ = t[i]->idem_key;
    }
    struct rcmd commit = {
        .script = &batch_script, .nkeys = nkeys, .argc = argc, .argv = argv};
    redisReply *r;
    uint64_t lost = rconn_unanswered(s->rc);
    lock_status released = lock_release_after(s->lock, lkey, &h->g, &commit, &r);
    free(argv);
    free(slot);
    if (!r) {
        tickets_finish(inv, t, n, no_answer(s, lost));
        return;
    }
    if (rconn_is_noscript(r)) {
        rconn_script_reload(s->rc, &batch_script); /* nothing written: each by itself */
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)(2 * n)) {
        batch_outcomes(s, t, n, r, seg, released);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               reply_ll(r->element[0], 0) == -1) {
        count(&inv->counters.epoch_changed); /* a reset: each by itself, anew */
        layout_forget(inv, sku);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               reply_ll(r->element[0], 0) == -2) {
        count(&inv->counters.fenced_off);
        tickets_finish(inv, t, n, INV_BUSY);
    } else {
        tickets_finish(inv, t, n, INV_UNAVAILABLE);
    }
    freeReplyObject(r);
}

void inv_ticket_batch(struct inv_session *s, struct inv_ticket **t, int n, int seg)
{
    struct inv_hold h;
    if (!inv_hold_open(s, t, n, seg, 0, &h))
        return;
    int64_t left = h.due_us - lock_now_us();
    if (left > 0)
        sleep_us((int)left);
    inv_hold_commit(s, &h);
}

/* ---- SKUs, orders, audit ------------------------------------------------ */

inv_status inv_sku_put(struct inv_session *s, const char *sku, long long stock,
                       int segments, int limit)
{
    rconn_check(s->rc);
    struct sku_keys k;
    sku_keys_init(&k, sku);
    int n = 12 + segments;
    const char **argv = malloc(sizeof(*argv) * (size_t)n);
    char(*vals)[24] = malloc(sizeof(*vals) * (size_t)(segments + 3));
    if (!argv || !vals)
        abort();
    const char *keys[] = {k.meta, k.stock, k.init, k.sold, k.buyers, k.orders, k.idem};
    memcpy(argv, keys, sizeof(keys));
    snprintf(vals[0], 24, "%lld", stock);
    snprintf(vals[1], 24, "%d", segments);
    snprintf(vals[2], 24, "%d", limit);
    for (int i = 0; i < segments; i++)
        snprintf(vals[3 + i], 24, "%lld", seg_initial(stock, segments, i));
    for (int i = 0; i < segments + 3; i++)
        argv[7 + i] = vals[i];
    argv[10 + segments] = SOLDOUT_CHANNEL;
    argv[11 + segments] = sku;
    redisReply *r = rconn_eval(s->rc, &reset_script, 7, 5 + segments, argv, NULL);
    free(argv);
    free(vals);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_INTEGER)
        st = r->integer == 1 ? INV_CREATED : INV_OK;
    soldout_forget(s->inv->cfg.soldout); /* at once here; others by the message */
    layout_forget(s->inv, sku);
    if (r)
        freeReplyObject(r);
    return st;
}

/* Fills per-segment values from an HGETALL reply (index -> number). */
static void segment_values(const redisReply *r, int nseg, struct inv_sku_report *out,
                           size_t offset)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        long long seg = reply_ll(r->element[i], -1);
        if (seg >= 0 && seg < nseg)
            *(long long *)((char *)&out->segments[seg] + offset) =
                reply_ll(r->element[i + 1], 0);
    }
}

inv_status inv_sku_get(struct inv_session *s, const char *sku, struct inv_sku_report *out)
{
    rconn_check(s->rc);
    struct sku_keys k;
    sku_keys_init(&k, sku);
    redisContext *c = rconn_ctx(s->rc);
    if (!c)
        return INV_UNAVAILABLE;
    redisAppendCommand(c, "MULTI");
    redisAppendCommand(c, "HMGET %s initial segments limit sold orders", k.meta);
    redisAppendCommand(c, "HGETALL %s", k.stock);
    redisAppendCommand(c, "HGETALL %s", k.init);
    redisAppendCommand(c, "HGETALL %s", k.sold);
    redisAppendCommand(c, "EXEC");
    redisReply *snap = multi_exec_reply(s->rc, 4);
    if (!snap)
        return INV_UNAVAILABLE;
    redisReply **e = snap->element;
    redisReply *m = e[0];
    inv_status st = INV_OK;
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 5 ||
        m->element[0]->type != REDIS_REPLY_STRING) {
        st = INV_NOT_FOUND;
    } else {
        memset(out, 0, offsetof(struct inv_sku_report, segments));
        snprintf(out->sku, sizeof(out->sku), "%s", sku);
        out->initial = reply_ll(m->element[0], 0);
        out->nsegments = (int)reply_ll(m->element[1], 0);
        if (out->nsegments < 1 || out->nsegments > INV_MAX_SEGMENTS)
            out->nsegments = 0;
        out->limit = (int)reply_ll(m->element[2], 1);
        out->sold = reply_ll(m->element[3], 0);
        out->orders = reply_ll(m->element[4], 0);
        out->oversold = out->sold > out->initial ? out->sold - out->initial : 0;
        memset(out->segments, 0, sizeof(out->segments[0]) * (size_t)out->nsegments);
        segment_values(e[1], out->nsegments, out,
                       offsetof(struct inv_segment_report, remaining));
        segment_values(e[2], out->nsegments, out,
                       offsetof(struct inv_segment_report, initial));
        segment_values(e[3], out->nsegments, out,
                       offsetof(struct inv_segment_report, sold));
        for (int i = 0; i < out->nsegments; i++)
            out->remaining += out->segments[i].remaining;
    }
    freeReplyObject(snap);
    return st;
}

inv_status inv_order_get(struct inv_session *s, uint64_t id, struct inv_order *out)
{
    rconn_check(s->rc);
    redisReply *r =
        rconn_command(s->rc, "HMGET order:%" PRIu64 " sku user_id qty segment", id);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
        if (r)
            freeReplyObject(r);
        return INV_UNAVAILABLE;
    }
    inv_status st = INV_NOT_FOUND;
    if (r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        memset(out, 0, sizeof(*out));
        out->id = id;
        snprintf(out->sku, sizeof(out->sku), "%s", r->element[0]->str);
        snprintf(out->user_id, sizeof(out->user_id), "%s", r->element[1]->str);
        out->qty = (int)reply_ll(r->element[2], 0);
        out->segment = (int)reply_ll(r->element[3], 0);
        st = INV_OK;
    }
    freeReplyObject(r);
    return st;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define AUDIT_CHUNK 2000

inv_status inv_audit(struct inv_session *s, const char *sku, struct inv_audit *out)
{
    rconn_check(s->rc);
    struct sku_keys k;
    sku_keys_init(&k, sku);
    redisContext *c = rconn_ctx(s->rc);
    if (!c)
        return INV_UNAVAILABLE;
    /* One snapshot of the counters and the list length: the list only grows
     * within an epoch, so its first n records are stable afterwards. */
    redisAppendCommand(c, "MULTI");
    redisAppendCommand(c, "HMGET %s initial limit sold orders", k.meta);
    redisAppendCommand(c, "LLEN %s", k.orders);
    redisAppendCommand(c, "EXEC");
    redisReply *snap = multi_exec_reply(s->rc, 2);
    if (!snap)
        return INV_UNAVAILABLE;
    redisReply *m = snap->element[0];
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 4 ||
        m->element[0]->type != REDIS_REPLY_STRING) {
        freeReplyObject(snap);
        return INV_NOT_FOUND;
    }
    memset(out, 0, sizeof(*out));
    snprintf(out->sku, sizeof(out->sku), "%s", sku);
    out->initial = reply_ll(m->element[0], 0);
    long long limit = reply_ll(m->element[1], 1);
    long long counted_sold = reply_ll(m->element[2], 0);
    long long counted_orders = reply_ll(m->element[3], 0);
    long long n = reply_ll(snap->element[1], 0);
    freeReplyObject(snap);

    uint64_t *ids = malloc(sizeof(*ids) * (size_t)(n > 0 ? n : 1));
    json_t *bought = json_object(); /* user id -> units */
    if (!ids || !bought)
        abort();
    inv_status st = INV_OK;
    for (long long from = 0; from < n && st == INV_OK; from += AUDIT_CHUNK) {
        long long to = from + AUDIT_CHUNK - 1 < n - 1 ? from + AUDIT_CHUNK - 1 : n - 1;
        redisReply *l = rconn_command(s->rc, "LRANGE %s %lld %lld", k.orders, from, to);
        if (!l || l->type != REDIS_REPLY_ARRAY) {
            st = INV_UNAVAILABLE;
        } else {
            for (size_t i = 0; i < l->elements; i++) {
                unsigned long long id;
                char user[INV_ID_MAX + 1];
                long long qty;
                int seg;
                if (l->element[i]->type != REDIS_REPLY_STRING ||
                    sscanf(l->element[i]->str, "%llu %64s %lld %d", &id, user, &qty,
                           &seg) != 4)
                    continue;
                ids[out->orders++] = id;
                out->sold += qty;
                json_t *u = json_object_get(bought, user);
                json_object_set_new(bought, user,
                                    json_integer((u ? json_integer_value(u) : 0) + qty));
            }
        }
        if (l)
            freeReplyObject(l);
    }
    if (st == INV_OK) {
        qsort(ids, (size_t)out->orders, sizeof(*ids), cmp_u64);
        for (long long i = 1; i < out->orders; i++)
            if (ids[i] == ids[i - 1])
                out->duplicate_order_ids++;
        const char *user;
        json_t *units;
        json_object_foreach(bought, user, units)
        {
            if (json_integer_value(units) > limit)
                out->limit_breaches++;
        }
        out->oversold = out->sold > out->initial ? out->sold - out->initial : 0;
        out->consistent = out->oversold == 0 && out->limit_breaches == 0 &&
                          out->duplicate_order_ids == 0 && out->sold == counted_sold &&
                          out->orders == counted_orders;
    }
    free(ids);
    json_decref(bought);
    return st;
}
