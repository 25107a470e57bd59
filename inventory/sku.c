/* sku.c: a SKU's creation and reset, its report, an order's record and the
 * audit, on one Redis or on one shard (inv_impl.h); shards.c gathers them over
 * a cluster's shards. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv_impl.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_reset, lua_inventory_retire;
/* inventory/lua/reset.lua: create or reset a SKU. */
static struct rscript reset_script = RSCRIPT_INIT("inv_reset", lua_inventory_reset);
/* inventory/lua/retire.lua: a SKU (a shard of it) retired. */
static struct rscript retire_script = RSCRIPT_INIT("inv_retire", lua_inventory_retire);

/* Collects the answers of a transaction appended to p: MULTI, n commands,
 * EXEC, and ends p. Returns the EXEC answer (an array of n replies, caller
 * frees), or NULL when Redis failed or the transaction did not run. An append
 * that failed failed the pipeline whole, so its appends need no check of
 * their own: this answers NULL. */
static redisReply *multi_exec_reply(struct rpipe *p, int n)
{
    redisReply *r[16];
    int total = n + 2, ok = 1;
    if (total > 16)
        abort();
    for (int i = 0; i < total; i++) {
        r[i] = ok ? rpipe_collect(p) : NULL;
        ok = r[i] && r[i]->type != REDIS_REPLY_ERROR;
    }
    rpipe_end(p);
    redisReply *exec = NULL;
    if (ok && r[total - 1]->type == REDIS_REPLY_ARRAY &&
        r[total - 1]->elements == (size_t)n) {
        exec = r[total - 1];
        r[total - 1] = NULL;
    }
    for (int i = 0; i < total; i++)
        if (r[i])
            freeReplyObject(r[i]);
    return exec;
}

/* ---- SKUs, orders, audit ------------------------------------------------ */

/* Creates or resets sku's shard `shard` of nshards (on one Redis the only
 * one, 0 of 1): the stock of its segments (those i with i % nshards ==
 * shard; the others 0 here), its order records cleared, its epoch `epoch`
 * ("" for one more), its sale window spec's, and its segment locks' fencing
 * marks gone (those of the segments it had and has: a mark belongs to the
 * SKU's epoch, see reset.lua). */
inv_status inv_sku_put_shard(struct inv_session *s, const char *sku,
                             const struct inv_sku_spec *spec, int shard, int nshards,
                             const char *epoch, enum inv_put_check check)
{
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, sku, s->gene);
    long long stock = spec->stock;
    int segments = spec->segments, limit = spec->limit;
    /* the marks of every segment it had, too (a reset may have fewer) */
    int marks = segments;
    redisReply *had = rconn_command(s->rc, "HGET %s segments", k.meta);
    if (had && had->type == REDIS_REPLY_STRING && atoi(had->str) > marks &&
        atoi(had->str) <= INV_MAX_SEGMENTS)
        marks = atoi(had->str);
    if (had)
        freeReplyObject(had);
    int nkeys = 17 + marks, n = nkeys + 17 + segments;
    const char **argv = xmalloc(sizeof(*argv) * (size_t)n);
    char(*vals)[24] = xmalloc(sizeof(*vals) * (size_t)(segments + 3));
    char(*fences)[160] = xmalloc(sizeof(*fences) * (size_t)marks);
    char starts[24] = "", ends[24] = "", pay[24], streams[128];
    char room[3][24] = {"", "", ""}; /* rate_per_s, max_active, pass_ttl_ms */
    if (spec->room.rate_per_s > 0) {
        snprintf(room[0], sizeof(room[0]), "%lld", spec->room.rate_per_s);
        snprintf(room[1], sizeof(room[1]), "%lld", spec->room.max_active);
        snprintf(room[2], sizeof(room[2]), "%lld", spec->room.pass_ttl_ms);
    }
    snprintf(pay, sizeof(pay), "%lld", spec->pay_ms);
    if (s->gene < 0) /* on a cluster, inv_sku_set lists the shards' streams */
        snprintf(streams, sizeof(streams), "%s", INV_STREAMS_KEY);
    else
        snprintf(streams, sizeof(streams), "%sstreams", k.lock);
    if (spec->starts_ms > 0)
        snprintf(starts, sizeof(starts), "%lld", spec->starts_ms);
    if (spec->ends_ms > 0)
        snprintf(ends, sizeof(ends), "%lld", spec->ends_ms);
    /* the rooms' registry: on a cluster sku_put_shards lists the SKU, and the
     * script is given the shard's streams key, a sign to leave it */
    const char *rooms = s->gene < 0 ? INV_ROOMS_KEY : streams;
    const char *keys[] = {k.meta, k.stock, k.init,  k.sold,   k.buyers, k.orders,
                          k.idem, k.avail, k.xout,  k.xin,    k.back,   k.due,
                          k.life, k.dues,  streams, k.events, rooms};
    memcpy(argv, keys, sizeof(keys));
    for (int i = 0; i < marks; i++) {
        char lkey[128];
        snprintf(lkey, sizeof(lkey), "%s%d", k.lock, i);
        lock_fence_key(lkey, fences[i], sizeof(fences[i]));
        argv[17 + i] = fences[i];
    }
    long long mine = 0;
    for (int i = 0; i < segments; i++) {
        long long units = i % nshards == shard ? seg_initial(stock, segments, i) : 0;
        snprintf(vals[3 + i], 24, "%lld", units);
        mine += units;
    }
    snprintf(vals[0], 24, "%lld", mine);
    snprintf(vals[1], 24, "%d", segments);
    snprintf(vals[2], 24, "%d", limit);
    const char **args = argv + nkeys;
    for (int i = 0; i < segments + 3; i++)
        args[i] = vals[i];
    args[3 + segments] = SOLDOUT_CHANNEL;
    args[4 + segments] = sku;
    args[5 + segments] = k.order;
    args[6 + segments] = epoch;
    args[7 + segments] = starts;
    args[8 + segments] = ends;
    args[9 + segments] = pay;
    args[10 + segments] = !s->inv->cfg.outbox ? "" : s->gene < 0 ? "1" : "c";
    args[11 + segments] = check == INV_PUT_UNCHECKED ? "" : spec->reset ? "reset" : "new";
    args[12 + segments] = INV_SINK_GROUP;
    args[13 + segments] = check == INV_PUT_CHECK_ONLY ? "1" : "";
    for (int i = 0; i < 3; i++)
        args[14 + segments + i] = room[i];
    redisReply *r = rconn_eval(s->rc, &reset_script, nkeys, 17 + segments, argv, NULL);
    free(argv);
    free(vals);
    free(fences);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_INTEGER) {
        switch (r->integer) {
        case 1:
            st = INV_CREATED;
            break;
        case 0:
        case 2: /* the check alone */
            st = INV_OK;
            break;
        case -1:
            st = INV_EXISTS;
            break;
        case -3:
            st = INV_NOT_SETTLED;
            break;
        }
    }
    if (r)
        freeReplyObject(r);
    /* unavailable too: the script may have run, its answer lost */
    if (st != INV_EXISTS && st != INV_NOT_SETTLED && check != INV_PUT_CHECK_ONLY) {
        soldout_forget(s->inv->cfg.soldout); /* at once here; others by the message */
        inv_layout_forget(s->inv, sku);
    }
    return st;
}

inv_status inv_sku_retire_shard(struct inv_session *s, const char *sku, int summary,
                                long long sums[INV_RETIRE_SUMS])
{
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, sku, s->gene);
    char retired[128];
    if (s->gene < 0)
        snprintf(retired, sizeof(retired), "sk:{%s}:retired", sku);
    else /* the caller leaves the cluster's summary: a key of the shard's, unused */
        snprintf(retired, sizeof(retired), "%sretired", k.lock);
    const char *argv[] = {k.meta,   k.stock,        k.init,          k.sold,
                          k.buyers, k.orders,       k.idem,          k.avail,
                          k.xout,   k.xin,          k.back,          k.due,
                          k.life,   k.dues,         k.events,        retired,
                          sku,      k.order,        k.lock,          INV_SINK_GROUP,
                          SOLDOUT_CHANNEL,          summary ? "1" : "0"};
    redisReply *r = rconn_eval(s->rc, &retire_script, 16, 6, argv, NULL);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1) {
        switch (inv_reply_ll(r->element[0], -9)) {
        case 1:
            st = INV_OK;
            for (size_t i = 0; i < INV_RETIRE_SUMS; i++)
                sums[i] = i + 1 < r->elements ? inv_reply_ll(r->element[i + 1], 0) : 0;
            break;
        case 0:
            st = INV_NOT_FOUND;
            break;
        case -1:
        case -2:
        case -3:
            st = INV_NOT_SETTLED;
            break;
        }
    }
    if (r)
        freeReplyObject(r);
    soldout_forget(s->inv->cfg.soldout); /* at once here; others by the message */
    inv_layout_forget(s->inv, sku);
    return st;
}

/* Fills per-segment values from the pairs {segment, number} of r (an
 * HGETALL, or a zset WITHSCORES): segment i's goes to the long long at
 * dst + i * stride bytes, for segments 0..n-1. */
static void segment_values(const redisReply *r, void *dst, size_t stride, int n)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        long long seg = inv_reply_ll(r->element[i], -1);
        if (seg >= 0 && seg < n)
            *(long long *)((char *)dst + (size_t)seg * stride) =
                inv_reply_ll(r->element[i + 1], 0);
    }
}

/* segment_values into one field (at offset) of a report's segments. */
static void report_values(const redisReply *r, struct inv_sku_report *out, size_t offset)
{
    segment_values(r, (char *)out->segments + offset, sizeof(out->segments[0]),
                   out->nsegments);
}

/* The report of sku as its shard on s holds it (on one Redis: whole). */
inv_status inv_sku_get_shard(struct inv_session *s, const char *sku,
                             struct inv_sku_report *out)
{
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, sku, s->gene);
    struct rpipe p;
    if (rpipe_begin(&p, s->rc) != RCONN_OK)
        return INV_UNAVAILABLE;
    rpipe_appendf(&p, "MULTI");
    rpipe_appendf(
        &p,
        "HMGET %s initial segments limit sold orders starts_ms ends_ms pay_ms "
        "pending paid returned room_rate room_max room_ttl added withdrawn paused",
        k.meta);
    rpipe_appendf(&p, "HGETALL %s", k.stock);
    rpipe_appendf(&p, "HGETALL %s", k.init);
    rpipe_appendf(&p, "HGETALL %s", k.sold);
    rpipe_appendf(&p, "HGETALL %s", k.back);
    rpipe_appendf(&p, "EXEC");
    redisReply *snap = multi_exec_reply(&p, 5);
    if (!snap)
        return INV_UNAVAILABLE;
    redisReply **e = snap->element;
    redisReply *m = e[0];
    inv_status st = INV_OK;
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 17 ||
        m->element[0]->type != REDIS_REPLY_STRING) {
        st = INV_NOT_FOUND;
    } else {
        memset(out, 0, offsetof(struct inv_sku_report, segments));
        snprintf(out->sku, sizeof(out->sku), "%s", sku);
        out->initial = inv_reply_ll(m->element[0], 0);
        out->nsegments = (int)inv_reply_ll(m->element[1], 0);
        if (out->nsegments < 1 || out->nsegments > INV_MAX_SEGMENTS)
            out->nsegments = 0;
        out->limit = (int)inv_reply_ll(m->element[2], 1);
        out->sold = inv_reply_ll(m->element[3], 0);
        out->orders = inv_reply_ll(m->element[4], 0);
        out->starts_ms = inv_reply_ll(m->element[5], 0);
        out->ends_ms = inv_reply_ll(m->element[6], 0);
        out->pay_ms = inv_reply_ll(m->element[7], 0);
        out->pending = inv_reply_ll(m->element[8], 0);
        out->paid = inv_reply_ll(m->element[9], 0);
        out->returned = inv_reply_ll(m->element[10], 0);
        out->room.rate_per_s = inv_reply_ll(m->element[11], 0);
        out->room.max_active = inv_reply_ll(m->element[12], 0);
        out->room.pass_ttl_ms = inv_reply_ll(m->element[13], 0);
        out->added = inv_reply_ll(m->element[14], 0);
        out->withdrawn = inv_reply_ll(m->element[15], 0);
        out->paused = inv_reply_ll(m->element[16], 0) == 1;
        long long books = out->initial + out->added - out->withdrawn;
        out->oversold = out->sold > books ? out->sold - books : 0;
        memset(out->segments, 0, sizeof(out->segments[0]) * (size_t)out->nsegments);
        report_values(e[1], out, offsetof(struct inv_segment_report, remaining));
        report_values(e[2], out, offsetof(struct inv_segment_report, initial));
        report_values(e[3], out, offsetof(struct inv_segment_report, sold));
        long long back[INV_MAX_SEGMENTS] = {0}; /* given back, not folded in yet */
        segment_values(e[4], back, sizeof(back[0]), out->nsegments);
        for (int i = 0; i < out->nsegments; i++) {
            out->segments[i].remaining += back[i];
            out->remaining += out->segments[i].remaining;
        }
    }
    freeReplyObject(snap);
    return st;
}

/* Reads an order's segments as recorded, "seg:units,seg:units...", into
 * parts[] (*n of them); returns the units they add up to. */
static long long parse_parts(const char *text, struct inv_part *parts, int *n)
{
    long long units = 0;
    *n = 0;
    for (const char *p = text; *p && *n < INV_MAX_SEGMENTS;) {
        char *end;
        long seg = strtol(p, &end, 10);
        if (*end != ':')
            break;
        long qty = strtol(end + 1, &end, 10);
        parts[(*n)++] = (struct inv_part){.segment = (int)seg, .qty = (int)qty};
        units += qty;
        p = *end == ',' ? end + 1 : end;
    }
    return units;
}

void inv_order_fill(struct inv_order *out, uint64_t id, const char *sku,
                    const char *user_id, int qty, int segment, const char *segments,
                    const char *state, long long pay_by_ms)
{
    inv_order_clear(out);
    out->id = id;
    snprintf(out->sku, sizeof(out->sku), "%s", sku);
    snprintf(out->user_id, sizeof(out->user_id), "%s", user_id);
    out->qty = qty;
    inv_order_one_part(out, segment);
    int n = 0;
    if (segments)
        parse_parts(segments, out->parts, &n);
    if (n > 0)
        out->nparts = n;
    out->state = state ? inv_state_parse(state) : INV_STATE_PLACED;
    out->pay_by_ms = pay_by_ms;
}

inv_status inv_order_read(const redisReply *r, uint64_t id, struct inv_order *out)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || (r->elements != 7 && r->elements != 9))
        return INV_UNAVAILABLE;
    redisReply *const *e = r->element;
    if (e[0]->type != REDIS_REPLY_STRING || e[1]->type != REDIS_REPLY_STRING)
        return INV_NOT_FOUND;
    const char *segments = e[4]->type == REDIS_REPLY_STRING ? e[4]->str : NULL;
    const char *state = e[5]->type == REDIS_REPLY_STRING ? e[5]->str : NULL;
    inv_order_fill(out, id, e[0]->str, e[1]->str, (int)inv_reply_ll(e[2], 0),
                   (int)inv_reply_ll(e[3], 0), segments, state, inv_reply_ll(e[6], 0));
    if (r->elements == 9) {
        if (e[7]->type == REDIS_REPLY_STRING)
            snprintf(out->payment_id, sizeof(out->payment_id), "%s", e[7]->str);
        out->paid_at_ms = inv_reply_ll(e[8], 0);
    }
    return INV_OK;
}

static inv_status order_get_once(struct inv_session *s, uint64_t id,
                                 struct inv_order *out);

inv_status inv_order_get(struct inv_session *s, uint64_t id, struct inv_order *out)
{
    inv_status st = order_get_once(s, id, out);
    for (int i = 1; i < READ_TRIES && s->cl && st == INV_UNAVAILABLE; i++)
        st = order_get_once(s, id, out);
    return st;
}

static inv_status order_get_once(struct inv_session *s, uint64_t id,
                                 struct inv_order *out)
{
    struct inv_session *top = s;
    if (s->cl && !(s = inv_shard_session(s, orderid_gene_of(id))))
        return inv_shard_outcome(top, INV_UNAVAILABLE);
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, "", s->gene);
    char idt[24], rkey[64];
    snprintf(idt, sizeof(idt), "%" PRIu64, id);
    inv_record_key(rkey, sizeof(rkey), k.order, idt);
    const char *argv[] = {rkey,     idt,          "sku",      "user_id",
                          "qty",    "segment",    "segments", "state",
                          "pay_by", "payment_id", "paid_at"};
    redisReply *r = rconn_eval(s->rc, &inv_rec_read_script, 1, 10, argv, NULL);
    inv_status st = inv_order_read(r, id, out);
    if (r)
        freeReplyObject(r);
    return st == INV_UNAVAILABLE ? inv_shard_outcome(top, st) : st;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define AUDIT_CHUNK 2000

/* The counters and per-segment figures the audit checks the records
 * against, read in one snapshot with the number of records: the list only
 * grows within an epoch, so its first `records` are stable afterwards. */
struct audit_snap {
    long long initial, limit, sold, orders, remaining, records, lives;
    long long added, withdrawn;                /* by PATCH */
    long long pay_ms, pending, paid, returned; /* meta's counters of reservations */
    int segments;
    long long *seg_sold, *seg_stock, *seg_indexed; /* [segments]; -1: not indexed */
};

static void audit_snap_free(struct audit_snap *a)
{
    free(a->seg_sold);
    free(a->seg_stock);
    free(a->seg_indexed);
}

static inv_status audit_snapshot(struct inv_session *s, const struct sku_keys *k,
                                 struct audit_snap *a)
{
    struct rpipe p;
    if (rpipe_begin(&p, s->rc) != RCONN_OK)
        return INV_UNAVAILABLE;
    rpipe_appendf(&p, "MULTI");
    rpipe_appendf(&p,
                  "HMGET %s initial limit sold orders remaining segments pay_ms pending "
                  "paid returned added withdrawn",
                  k->meta);
    rpipe_appendf(&p, "LLEN %s", k->orders);
    rpipe_appendf(&p, "HGETALL %s", k->sold);
    rpipe_appendf(&p, "HGETALL %s", k->stock);
    rpipe_appendf(&p, "ZRANGE %s 0 -1 WITHSCORES", k->avail);
    rpipe_appendf(&p, "LLEN %s", k->life);
    rpipe_appendf(&p, "HGETALL %s", k->back);
    rpipe_appendf(&p, "EXEC");
    redisReply *snap = multi_exec_reply(&p, 7);
    if (!snap)
        return INV_UNAVAILABLE;
    redisReply **e = snap->element, *m = e[0];
    inv_status st = INV_NOT_FOUND;
    if (m->type == REDIS_REPLY_ARRAY && m->elements == 12 &&
        m->element[0]->type == REDIS_REPLY_STRING) {
        a->initial = inv_reply_ll(m->element[0], 0);
        a->limit = inv_reply_ll(m->element[1], 1);
        a->sold = inv_reply_ll(m->element[2], 0);
        a->orders = inv_reply_ll(m->element[3], 0);
        a->remaining = inv_reply_ll(m->element[4], 0);
        a->segments = (int)inv_reply_ll(m->element[5], 0);
        if (a->segments < 1 || a->segments > INV_MAX_SEGMENTS)
            a->segments = 0;
        a->records = inv_reply_ll(e[1], 0);
        a->pay_ms = inv_reply_ll(m->element[6], 0);
        a->pending = inv_reply_ll(m->element[7], 0);
        a->paid = inv_reply_ll(m->element[8], 0);
        a->returned = inv_reply_ll(m->element[9], 0);
        a->added = inv_reply_ll(m->element[10], 0);
        a->withdrawn = inv_reply_ll(m->element[11], 0);
        a->lives = inv_reply_ll(e[5], 0);
        size_t n = (size_t)(a->segments > 0 ? a->segments : 1);
        a->seg_sold = xcalloc(n, sizeof(long long));
        a->seg_stock = xcalloc(n, sizeof(long long));
        a->seg_indexed = xmalloc(n * sizeof(long long));
        for (size_t i = 0; i < n; i++)
            a->seg_indexed[i] = -1;
        segment_values(e[2], a->seg_sold, sizeof(long long), a->segments);
        segment_values(e[3], a->seg_stock, sizeof(long long), a->segments);
        segment_values(e[4], a->seg_indexed, sizeof(long long), a->segments);
        long long *back = xcalloc(n, sizeof(long long)); /* given back, not folded */
        segment_values(e[6], back, sizeof(long long), a->segments);
        for (size_t i = 0; i < n; i++)
            a->seg_stock[i] += back[i];
        free(back);
        st = INV_OK;
    }
    freeReplyObject(snap);
    return st;
}

/* The end of each order whose life list has one: order id (decimal) ->
 * inv_state, as a JSON object; counts the conflicts into out. */
static inv_status audit_lives(struct inv_session *s, const struct sku_keys *k,
                              long long n, json_t *ends, struct inv_audit *out)
{
    for (long long from = 0; from < n; from += AUDIT_CHUNK) {
        long long to = from + AUDIT_CHUNK - 1 < n - 1 ? from + AUDIT_CHUNK - 1 : n - 1;
        redisReply *l = rconn_command(s->rc, "LRANGE %s %lld %lld", k->life, from, to);
        if (!l || l->type != REDIS_REPLY_ARRAY) {
            if (l)
                freeReplyObject(l);
            return INV_UNAVAILABLE;
        }
        for (size_t i = 0; i < l->elements; i++) {
            char id[24], name[16];
            if (l->element[i]->type != REDIS_REPLY_STRING ||
                sscanf(l->element[i]->str, "%23s %15s", id, name) != 2)
                continue;
            inv_state st = inv_state_parse(name);
            json_t *was = json_object_get(ends, id);
            if (was) {
                int back = st != INV_STATE_PAID,
                    was_back = json_integer_value(was) != INV_STATE_PAID;
                if (back && was_back)
                    out->returned_twice++;
                else
                    out->state_conflicts++;
                continue; /* the first end stands */
            }
            json_object_set_new(ends, id, json_integer(st));
        }
        freeReplyObject(l);
    }
    return INV_OK;
}

/* Adds one order record, "<id> <user> <qty> <segment>[ <seg>:<units>,...]",
 * to out (orders, sold, and the reservations' figures by its end in ends),
 * ids, bought (user id -> units) and seg_units; an order given back counts
 * neither as sold nor to its buyer or segments. False when it does not
 * parse. */
static int audit_record(const char *rec, struct inv_audit *out, uint64_t *ids,
                        json_t *bought, long long *seg_units, int nseg,
                        const json_t *ends, int reserved)
{
    unsigned long long id;
    char user[INV_ID_MAX + 1], idt[24];
    long long qty;
    int seg, end = 0;
    if (sscanf(rec, "%llu %64s %lld %d%n", &id, user, &qty, &seg, &end) != 4)
        return 0;
    ids[out->orders++] = id;
    snprintf(idt, sizeof(idt), "%llu", id);
    json_t *e = json_object_get(ends, idt);
    inv_state st = e          ? (inv_state)json_integer_value(e)
                   : reserved ? INV_STATE_PENDING
                              : INV_STATE_PLACED;
    if ((int)st >= 0 && st < INV_NSTATES) {
        out->state_orders[st]++;
        out->state_units[st] += qty;
    }
    if (st == INV_STATE_CANCELLED || st == INV_STATE_EXPIRED) {
        out->returned += qty;
        if (st == INV_STATE_CANCELLED)
            out->cancelled++;
        else
            out->expired++;
        return 1;
    }
    if (st == INV_STATE_PENDING)
        out->pending += qty;
    else if (st == INV_STATE_PAID)
        out->paid += qty;
    out->sold += qty;
    json_t *u = json_object_get(bought, user);
    json_object_set_new(bought, user,
                        json_integer((u ? json_integer_value(u) : 0) + qty));
    struct inv_part one = {.segment = seg, .qty = (int)qty}, *parts = &one;
    static _Thread_local struct inv_part many[INV_MAX_SEGMENTS];
    int n = 1;
    if (rec[end] == ' ') {
        if (parse_parts(rec + end + 1, many, &n) != qty || n == 0)
            return 0;
        parts = many;
    }
    for (int i = 0; i < n; i++)
        if (parts[i].segment >= 0 && parts[i].segment < nseg)
            seg_units[parts[i].segment] += parts[i].qty;
    return 1;
}

/* True when the SKU's figures agree with its records (seg_units) segment by
 * segment, and its stock index with its stock: each segment holding stock
 * listed with it, and meta's remaining equal to `stock`, their sum. */
static int audit_segments_agree(const struct audit_snap *a, const long long *seg_units,
                                long long stock)
{
    for (int i = 0; i < a->segments; i++) {
        long long left = a->seg_stock[i];
        if (seg_units[i] != a->seg_sold[i] ||
            (left > 0 ? a->seg_indexed[i] != left : a->seg_indexed[i] != -1))
            return 0;
    }
    return a->segments > 0 && stock == a->remaining;
}

/* The audit of sku's shard on s (on one Redis: of the SKU). */
extern const struct rscript_source lua_inventory_sink_lag, lua_inventory_sku_events_lag;
struct rscript inv_sink_lag_script = RSCRIPT_INIT("sink_lag", lua_inventory_sink_lag);
/* inventory/lua/sku_events_lag.lua: one SKU's events not in the database yet. */
static struct rscript sku_lag_script =
    RSCRIPT_INIT("sku_events_lag", lua_inventory_sku_events_lag);

/* The outbox's part of the audit: the SKU's generation (meta's outbox field)
 * and its events in the shard's stream not yet in the database
 * (sku_events_lag.lua). */
static inv_status audit_outbox(struct inv_session *s, const char *sku,
                               const struct sku_keys *k, struct inv_audit *out)
{
    redisReply *r = rconn_command(s->rc, "HGET %s outbox", k->meta);
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
        if (r)
            freeReplyObject(r);
        return INV_UNAVAILABLE;
    }
    if (r->type == REDIS_REPLY_STRING)
        snprintf(out->generation, sizeof(out->generation), "%s", r->str);
    freeReplyObject(r);
    const char *argv[] = {k->events, INV_SINK_GROUP, sku};
    r = rconn_eval(s->rc, &sku_lag_script, 1, 2, argv, NULL);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_INTEGER) {
        out->outbox_lag = r->integer;
        st = INV_OK;
    }
    if (r)
        freeReplyObject(r);
    return st;
}

inv_status inv_audit_shard(struct inv_session *s, const char *sku, struct inv_audit *out)
{
    rconn_check(s->rc);
    struct sku_keys k;
    inv_keys_init(&k, sku, s->gene);
    struct audit_snap a = {0};
    inv_status st = audit_snapshot(s, &k, &a);
    if (st != INV_OK)
        return st;
    memset(out, 0, sizeof(*out));
    snprintf(out->sku, sizeof(out->sku), "%s", sku);
    out->initial = a.initial;
    out->added = a.added;
    out->withdrawn = a.withdrawn;
    long long books = a.initial + a.added - a.withdrawn; /* invariant 11 */
    for (int i = 0; i < a.segments; i++)
        out->remaining += a.seg_stock[i];
    long long n = a.records;
    uint64_t *ids = xmalloc(sizeof(*ids) * (size_t)(n > 0 ? n : 1));
    long long *seg_units =
        xcalloc((size_t)(a.segments > 0 ? a.segments : 1), sizeof(long long));
    json_t *bought = json_object(); /* user id -> units */
    json_t *ends = json_object();   /* order id -> its end (life list) */
    if (!bought || !ends)
        abort();
    int unreadable = 0;
    st = audit_lives(s, &k, a.lives, ends, out);
    for (long long from = 0; from < n && st == INV_OK; from += AUDIT_CHUNK) {
        long long to = from + AUDIT_CHUNK - 1 < n - 1 ? from + AUDIT_CHUNK - 1 : n - 1;
        redisReply *l = rconn_command(s->rc, "LRANGE %s %lld %lld", k.orders, from, to);
        if (!l || l->type != REDIS_REPLY_ARRAY)
            st = INV_UNAVAILABLE;
        for (size_t i = 0; st == INV_OK && i < l->elements; i++)
            if (l->element[i]->type != REDIS_REPLY_STRING ||
                !audit_record(l->element[i]->str, out, ids, bought, seg_units, a.segments,
                              ends, a.pay_ms > 0))
                unreadable++;
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
            if (json_integer_value(units) > a.limit)
                out->limit_breaches++;
        }
        out->oversold = out->sold > books ? out->sold - books : 0;
        out->consistent = out->oversold == 0 && out->limit_breaches == 0 &&
                          out->duplicate_order_ids == 0 && unreadable == 0 &&
                          out->sold == a.sold && out->orders == a.orders &&
                          out->sold + out->remaining == books &&
                          audit_segments_agree(&a, seg_units, out->remaining) &&
                          out->state_conflicts == 0 && out->returned_twice == 0 &&
                          out->pending == a.pending && out->paid == a.paid &&
                          out->returned == a.returned;
    }
    if (st == INV_OK)
        st = audit_outbox(s, sku, &k, out);
    free(ids);
    free(seg_units);
    json_decref(bought);
    json_decref(ends);
    audit_snap_free(&a);
    return st;
}
