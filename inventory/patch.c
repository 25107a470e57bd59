/* patch.c: a merchant's change of a live sale (PATCH /skus/{sku}): units
 * added or withdrawn, the sale paused or resumed, its ends_at moved, in one
 * script (inventory/lua/patch.lua). Units go through the segments' back hash,
 * which every commit folds in its own step, so no commit writes over them (a
 * holder's stock read stays its own). In the lock-guarded modes that have a
 * read-write lock the change takes the SKU's write side, which excludes other
 * changes and, in the redis mode, waits for the segment holds in progress
 * (each takes the read side with its segment's lock: hold.c) while keeping
 * new ones out (docs/design.md, "Which side each path takes"). The atomic
 * mode takes no lock. Callers: the
 * admin route (service/sku_patch.c), on a thread that may block, as PUT's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inv_impl.h"

extern const struct rscript_source lua_inventory_patch;
/* inventory/lua/patch.lua: the change itself. */
static struct rscript patch_script = RSCRIPT_INIT("inv_patch", lua_inventory_patch);

/* How long a change waits for the write side: the holds in progress end
 * within a commit's time; the bound is for a lock service in trouble. */
#define PATCH_WAIT_MS 5000

void inv_patch_lock_key(const char *sku, char *buf, size_t len)
{
    struct sku_keys k;
    inv_keys_init(&k, sku, -1);
    snprintf(buf, len, "%srw", k.lock);
}

/* SECKILL_TEST_PATCH_DIRECT=1 (tests only, docs/testing.md): the change
 * writes the stock hash itself, not the back hash, and takes no write lock:
 * what it_patch_load shows the books do then. */
static int direct_for_tests(void)
{
    const char *v = getenv("SECKILL_TEST_PATCH_DIRECT");
    return v && strcmp(v, "1") == 0;
}

/* The write side granted (tests only, docs/testing.md): SECKILL_TEST_CRASH
 * "patch-locked" kills the process here, holding it; SECKILL_TEST_PATCH_HOLD_MS
 * keeps it that long before the script, so that a test can freeze the
 * process while it holds it (loadtest/chaos.sh, the midsale cell). The
 * caller's thread may block (as PUT's). */
static void granted_for_tests(const struct inv *inv)
{
    inv_crash_point(inv, "patch-locked");
    const char *v = getenv("SECKILL_TEST_PATCH_HOLD_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms > 0 && ms <= 60000) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
}

static inv_status patch_run(struct inv_session *s, const char *sku,
                            const struct inv_patch *p, const char *fence_key,
                            const char *token, long long *withdrawn)
{
    struct sku_keys k;
    inv_keys_init(&k, sku, -1);
    char add[24] = "", take[24] = "", ends[24] = "";
    if (p->add > 0)
        snprintf(add, sizeof(add), "%lld", p->add);
    if (p->withdraw > 0)
        snprintf(take, sizeof(take), "%lld", p->withdraw);
    if (p->ends_ms > 0)
        snprintf(ends, sizeof(ends), "%lld", p->ends_ms);
    const char *paused = p->paused < 0 ? "" : p->paused ? "1" : "0";
    const char *argv[] = {
        k.meta,    k.stock,         k.init, k.avail, k.back,
        fence_key, k.events,        add,    take,    paused,
        ends,      SOLDOUT_CHANNEL, sku,    token,   direct_for_tests() ? "1" : ""};
    redisReply *r = rconn_eval(s->rc, &patch_script, 7, 8, argv, NULL);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1) {
        switch (inv_reply_ll(r->element[0], 0)) {
        case 1:
            *withdrawn = r->elements > 1 ? inv_reply_ll(r->element[1], 0) : 0;
            st = INV_OK;
            break;
        case -1:
            st = INV_NOT_FOUND;
            break;
        case -2:
            st = INV_BUSY;
            break;
        case -13:
            st = INV_BAD_WINDOW;
            break;
        case -17:
            st = INV_MALFORMED;
            break;
        }
    }
    if (r)
        freeReplyObject(r);
    return st;
}

/* The SKU's segments as meta says now (0: no such SKU, the change finds
 * none; -1: Redis did not answer): their locks are the readers of its
 * read-write lock (hold.c takes the read side with each). Not the layout
 * cache's: an instance keeps a layout until a commit of its own sees the SKU
 * reset, and a count too small would leave holds on the other segments out. */
static int segments_of(struct inv_session *s, const struct sku_keys *k)
{
    redisReply *r = rconn_command(s->rc, "HGET %s segments", k->meta);
    int n = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        long long v = strtoll(r->str, NULL, 10);
        n = v > 0 && v <= INV_MAX_SEGMENTS ? (int)v : 0;
    } else if (r && r->type == REDIS_REPLY_NIL) {
        n = 0;
    }
    if (r)
        freeReplyObject(r);
    return n;
}

inv_status inv_sku_patch(struct inv_session *s, const char *sku,
                         const struct inv_patch *p, long long *withdrawn)
{
    *withdrawn = 0;
    if (s->cl)
        return INV_UNSUPPORTED; /* a cluster's shards: not in this slice */
    rconn_check(s->rc);
    struct lock *l = s->inv->cfg.lock;
    char key[128], fence_key[160], token[LOCK_FENCE_TEXT] = "0";
    inv_patch_lock_key(sku, key, sizeof(key));
    lock_fence_key(key, fence_key, sizeof(fence_key));
    if (!l || direct_for_tests()) {
        inv_status st = patch_run(s, sku, p, fence_key, "0", withdrawn);
        if (st == INV_OK && p->add > 0)
            soldout_forget(s->inv->cfg.soldout);
        return st;
    }
    if (!lock_rw_supported(l))
        return INV_UNSUPPORTED;
    struct sku_keys k;
    inv_keys_init(&k, sku, -1);
    int segments = segments_of(s, &k);
    if (segments < 0)
        return INV_UNAVAILABLE; /* nothing taken, nothing changed */
    struct lock_grant g;
    lock_status ls =
        lock_rw_write_over(s->lock, key, k.lock, segments, PATCH_WAIT_MS, &g);
    if (ls == LOCK_BUSY)
        return INV_BUSY;
    if (ls != LOCK_ACQUIRED)
        return INV_UNAVAILABLE;
    inv_fence_text(s->inv, &g, token, sizeof(token));
    granted_for_tests(s->inv);
    inv_status st = patch_run(s, sku, p, fence_key, token, withdrawn);
    inv_crash_point(s->inv, "patch-written"); /* done, the write side still held */
    lock_release(s->lock, key, &g);
    if (st == INV_OK && p->add > 0)
        soldout_forget(s->inv->cfg.soldout); /* at once here; others by the message */
    return st;
}
