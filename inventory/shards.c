/* shards.c: a SKU over the shards of a Redis Cluster (inv_impl.h): its
 * directory, the transfers' scripts and records, and the blocking calls of
 * inventory.h that gather a SKU's shards (PUT, GET, the audit; sku.c does
 * each shard) or ask every master (inv_ping). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv_impl.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_xfer_out, lua_inventory_xfer_in;
/* inventory/lua/xfer_out.lua, xfer_in.lua: units of a SKU moved from one
 * shard of a cluster to another. */
struct rscript inv_xfer_out_script = RSCRIPT_INIT("inv_xfer_out", lua_inventory_xfer_out);
struct rscript inv_xfer_in_script = RSCRIPT_INIT("inv_xfer_in", lua_inventory_xfer_in);

/* ---- a SKU over the shards of a Redis Cluster -----------------------------
 *
 * On a cluster a SKU of K segments is kept in one shard per master (at
 * most K): segment i in shard i % shards. A shard holds the SKU's keys as
 * above, under its gene's tag (cluster.h), with its own segments' stock and
 * its own share of the initial stock, so every script runs on one shard as
 * it runs on one Redis. A user's purchases, keys and orders are accounted in
 * the shard of the user's home segment, where every order of the user is
 * placed: an order never spans two shards. The SKU's directory, under the
 * SKU's own tag, names the shards' genes for every instance:
 *   sk:{s}:dir  hash  genes "g,g,..." segments initial limit epoch
 * and an order id carries its shard's gene (orderid.h), which is how
 * GET /orders/{id} finds it. */

extern const struct rscript_source lua_inventory_dir_epoch;
/* inventory/lua/dir_epoch.lua: a cluster SKU's next epoch. */
static struct rscript dir_epoch_script = RSCRIPT_INIT("inv_dir_epoch", lua_inventory_dir_epoch);

static void dir_key(char *buf, size_t len, const char *sku)
{
    snprintf(buf, len, "sk:{%s}:dir", sku);
}

/* The connection to the master of sku's directory (NULL: none known). */
static struct rconn *dir_conn(struct inv_session *s, const char *key)
{
    return rcluster_conn(s->cl, cluster_keyslot(key, strlen(key)));
}

int inv_genes_parse(const char *text, int *genes)
{
    int n = 0;
    for (const char *p = text; *p;) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g >= CLUSTER_GENES || n == CLUSTER_MAX_MASTERS)
            return -1;
        genes[n++] = (int)g;
        if (*end != ',')
            return *end ? -1 : n;
        p = end + 1;
    }
    return -1;
}

void inv_dir_learn_cmd(const char *sku, char *key, size_t keylen, const char *argv[6])
{
    dir_key(key, keylen, sku);
    argv[0] = "HMGET";
    argv[1] = key;
    argv[2] = "genes";
    argv[3] = "segments";
    argv[4] = "initial";
    argv[5] = "epoch";
}

inv_status inv_dir_learnt(struct inv *inv, const char *sku, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 4)
        return INV_UNAVAILABLE;
    redisReply **e = r->element;
    int genes[CLUSTER_MAX_MASTERS], n;
    int segments = (int)inv_reply_ll(e[1], 0);
    if (e[0]->type != REDIS_REPLY_STRING)
        return INV_NOT_FOUND;
    if ((n = inv_genes_parse(e[0]->str, genes)) <= 0 || segments < n ||
        segments > INV_MAX_SEGMENTS || e[3]->type != REDIS_REPLY_STRING)
        return INV_UNAVAILABLE;
    inv_layout_put(inv, sku, segments, inv_reply_ll(e[2], 0), e[3]->str, genes, n);
    return INV_OK;
}

/* Learns sku's layout from its directory into the layout cache (and out). */
static inv_status layout_learn(struct inv_session *s, const char *sku,
                               struct sku_layout *out)
{
    char key[96];
    const char *argv[6];
    inv_dir_learn_cmd(sku, key, sizeof(key), argv);
    struct rconn *rc = dir_conn(s, key);
    redisReply *r = rc ? rconn_command_argv(rc, 6, argv, NULL) : NULL;
    inv_status st = inv_dir_learnt(s->inv, sku, r);
    if (st == INV_OK && inv_layout_get(s->inv, sku, out) != 0)
        st = INV_UNAVAILABLE;
    if (r)
        freeReplyObject(r);
    return inv_shard_outcome(s, st);
}

/* ---- units moved between shards ---------------------------------------------
 *
 * A user's orders are placed in the shard of the user's home segment, so the
 * shards sell at the pace of their users, and one runs short while others
 * still hold units. Then units move to it: xfer_out.lua takes them from the
 * fullest other shard and records the transfer there; xfer_in.lua adds them
 * to the short shard, once per transfer; the record is then deleted. A
 * process that dies between the steps leaves the record, and whoever next
 * looks for units (shards_settle) applies it: applying twice changes
 * nothing, so no unit is lost or made twice, and none stays in flight past
 * the next order that needs it. A unit is never moved back. */

void inv_crash_point(const struct inv *inv, const char *step)
{
    if (strcmp(inv->crash_after, step) == 0)
        raise(SIGKILL);
}

/* The shard of l whose gene is gene, or -1. */
static int shard_of_gene(const struct sku_layout *l, int gene)
{
    for (int i = 0; i < l->nshards; i++)
        if (l->genes[i] == gene)
            return i;
    return -1;
}

void inv_xfer_call_init(struct inv_xfer_call *c, const struct inv *inv, const char *sku,
                        int gene, int seg, int xin, int nargs, const char *const *args,
                        const struct lock_grant *g)
{
    inv_keys_init(&c->k, sku, gene);
    snprintf(c->lkey, sizeof(c->lkey), "%s%d", c->k.lock, seg);
    lock_fence_key(c->lkey, c->fkey, sizeof(c->fkey));
    snprintf(c->token, sizeof(c->token), "0");
    if (g)
        inv_fence_text(inv, g, c->token, sizeof(c->token));
    const char *keys[] = {
        c->k.meta, c->k.stock, c->k.init, c->k.avail, xin ? c->k.xin : c->k.xout,
        c->fkey,   c->k.back};
    memcpy(c->argv, keys, sizeof(keys));
    memcpy(c->argv + 7, args, sizeof(*args) * (size_t)nargs);
    c->argv[7 + nargs] = c->token;
    c->cmd = (struct rcmd){.script = xin ? &inv_xfer_in_script : &inv_xfer_out_script,
                           .nkeys = 7,
                           .argc = 7 + nargs + 1,
                           .argv = c->argv};
}

inv_status inv_xfer_answer(const redisReply *r, long long *got, struct inv_order *o)
{
    *got = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        inv_reply_ll(r->element[0], 0) == -17) /* nothing written */
        return o ? inv_malformed(o, r->element[1]) : INV_MALFORMED;
    if (!r || r->type != REDIS_REPLY_INTEGER)
        return INV_UNAVAILABLE;
    if (r->integer == -2)
        return INV_BUSY; /* the lease ran out: nothing written */
    *got = r->integer;
    return INV_OK;
}

inv_status inv_xfer_outcome(aconn_result res, const redisReply *r, long long *got,
                            struct inv_order *o)
{
    *got = 0;
    if (res != ACONN_REPLY)
        return res == ACONN_LOST ? INV_OUTCOME_UNKNOWN : INV_UNAVAILABLE;
    inv_status st = inv_xfer_answer(r, got, o);
    if (st != INV_OK)
        return st;
    return *got < 0 ? INV_NOT_FOUND : *got > 0 ? INV_PLACED : INV_SOLD_OUT;
}

int inv_xfer_record_read(const struct sku_layout *l, const redisReply *text, int *to,
                         int *seg, long long *units)
{
    return text->type == REDIS_REPLY_STRING &&
                   sscanf(text->str, "%d %d %lld", to, seg, units) == 3 &&
                   shard_of_gene(l, *to) >= 0
               ? 0
               : -1;
}

/* Every master answers and says the cluster is whole. */
static int ping_shards(struct inv_session *s)
{
    const struct cluster_map *m = rcluster_map(s->cl);
    int ok = m->nmasters > 0;
    for (int i = 0; ok && i < m->nmasters; i++) {
        struct rconn *rc = rcluster_master(s->cl, i);
        rconn_check(rc);
        redisReply *r = rc ? rconn_command(rc, "CLUSTER INFO") : NULL;
        ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        if (r)
            freeReplyObject(r);
    }
    if (!ok)
        rcluster_refresh(s->cl);
    return ok;
}

int inv_ping(struct inv_session *s)
{
    if (s->cl)
        return ping_shards(s);
    rconn_check(s->rc);
    redisReply *r = rconn_command(s->rc, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* The genes of sku's shards: those its directory names when they are as
 * many as the masters now (a SKU stays where it was put, also after its
 * slots moved), else chosen anew (cluster_sku_genes). The count, else -1;
 * *old gets the directory's, to clear those no longer used. */
static int put_genes(struct inv_session *s, const char *sku, int segments, int *genes,
                     int *old, int *nold)
{
    const struct cluster_map *m = rcluster_map(s->cl);
    int n = cluster_sku_genes(m, sku, genes);
    if (n < 1)
        return -1;
    if (n > segments)
        n = segments;
    char key[96];
    dir_key(key, sizeof(key), sku);
    struct rconn *rc = dir_conn(s, key);
    redisReply *r = rc ? rconn_command(rc, "HGET %s genes", key) : NULL;
    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    *nold = r->type == REDIS_REPLY_STRING ? inv_genes_parse(r->str, old) : 0;
    freeReplyObject(r);
    if (*nold == n)
        memcpy(genes, old, sizeof(int) * (size_t)n);
    return n;
}

/* With the outbox on, the sink's registry (INV_STREAMS_KEY, in its own slot)
 * lists the events stream of sku's shard of gene. 1, or 0 when Redis did not
 * answer. */
static int streams_list(struct inv_session *s, const char *sku, int gene)
{
    struct sku_keys k;
    inv_keys_init(&k, sku, gene);
    struct rconn *rc = dir_conn(s, INV_STREAMS_KEY);
    redisReply *r = rc ? rconn_command(rc, "SADD %s %s", INV_STREAMS_KEY, k.events) : NULL;
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* Lists sku in the rooms' registry (INV_ROOMS_KEY, in a slot of its own)
 * with its room, or takes it out when it has none: true when done. */
static int rooms_list(struct inv_session *s, const char *sku,
                      const struct inv_room_spec *room)
{
    struct rconn *rc = dir_conn(s, INV_ROOMS_KEY);
    char value[72]; /* one argument: %s, never split */
    snprintf(value, sizeof(value), "%lld %lld %lld", room->rate_per_s, room->max_active,
             room->pass_ttl_ms);
    redisReply *r = !rc ? NULL
                    : room->rate_per_s > 0
                        ? rconn_command(rc, "HSET %s %s %s", INV_ROOMS_KEY, sku, value)
                        : rconn_command(rc, "HDEL %s %s", INV_ROOMS_KEY, sku);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* PUT on a cluster: every shard the directory names asked first whether
 * the PUT may go on (INV_EXISTS, INV_NOT_SETTLED: nothing written anywhere),
 * then the epoch bumped in the directory, then every shard reset to it (each
 * checking again in its own step), then the directory names the shards. A
 * shard that failed leaves the PUT unavailable (to be repeated): its old
 * epoch refuses the commits of orders routed by the new directory, and the
 * reverse. The shards are not one step: an order placed between the first
 * asking and a shard's reset makes that shard refuse after others were
 * reset (answered as its refusal; a PUT with ?reset=true finishes it). */
static inv_status sku_put_shards(struct inv_session *s, const char *sku,
                                 const struct inv_sku_spec *spec)
{
    long long stock = spec->stock;
    int segments = spec->segments, limit = spec->limit;
    struct inv_sku_spec none = *spec; /* a shard no longer used: emptied */
    none.stock = 0;
    int genes[CLUSTER_MAX_MASTERS], old[CLUSTER_MAX_MASTERS], nold = 0;
    int n = put_genes(s, sku, segments, genes, old, &nold);
    if (n < 1)
        return inv_shard_outcome(s, INV_UNAVAILABLE);
    for (int i = 0; i < nold; i++) {
        struct inv_session *sh = inv_shard_session(s, old[i]);
        inv_status asked =
            sh ? inv_sku_put_shard(sh, sku, spec, 0, 1, "", INV_PUT_CHECK_ONLY)
               : INV_UNAVAILABLE;
        if (asked != INV_OK)
            return inv_shard_outcome(s, asked);
    }
    char key[96], epoch[24], list[CLUSTER_MAX_MASTERS * 4] = "";
    dir_key(key, sizeof(key), sku);
    struct rconn *rc = dir_conn(s, key);
    const char *argv[] = {key};
    redisReply *r = rc ? rconn_eval(rc, &dir_epoch_script, 1, 0, argv, NULL) : NULL;
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r)
            freeReplyObject(r);
        return inv_shard_outcome(s, INV_UNAVAILABLE);
    }
    snprintf(epoch, sizeof(epoch), "%lld", r->integer);
    freeReplyObject(r);
    inv_status st = nold > 0 ? INV_OK : INV_CREATED, one;
    for (int i = 0; i < nold && (st == INV_OK || st == INV_CREATED); i++) {
        int kept = 0;
        for (int j = 0; j < n; j++)
            kept |= genes[j] == old[i];
        struct inv_session *sh = kept ? s : inv_shard_session(s, old[i]);
        if (!sh)
            st = INV_UNAVAILABLE;
        else if (!kept &&
                 (one = inv_sku_put_shard(sh, sku, &none, 0, 1, epoch,
                                          INV_PUT_CHECKED)) != INV_OK &&
                 one != INV_CREATED)
            st = one;
    }
    for (int i = 0; i < n && (st == INV_OK || st == INV_CREATED); i++) {
        struct inv_session *sh = inv_shard_session(s, genes[i]);
        /* listed before the shard takes orders: none of its events unread */
        if (s->inv->cfg.outbox && !streams_list(s, sku, genes[i]))
            st = INV_UNAVAILABLE;
        else if (!sh)
            st = INV_UNAVAILABLE;
        else if ((one = inv_sku_put_shard(sh, sku, spec, i, n, epoch, INV_PUT_CHECKED)) !=
                     INV_OK &&
                 one != INV_CREATED)
            st = one;
        size_t len = strlen(list);
        snprintf(list + len, sizeof(list) - len, "%s%d", i ? "," : "", genes[i]);
    }
    if (st == INV_OK || st == INV_CREATED) {
        /* and what a join reads in the SKU's own slot (room_join.lua): the
         * sale's start and the room, 0 for none */
        r = rconn_command(
            rc,
            "HSET %s genes %s segments %d initial %lld limit %d starts_ms %lld "
            "room_rate %lld room_max %lld room_ttl %lld",
            key, list, segments, stock, limit, spec->starts_ms, spec->room.rate_per_s,
            spec->room.max_active, spec->room.pass_ttl_ms);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            st = INV_UNAVAILABLE;
        if (r)
            freeReplyObject(r);
    }
    if ((st == INV_OK || st == INV_CREATED) && !rooms_list(s, sku, &spec->room))
        st = INV_UNAVAILABLE;
    inv_layout_forget(s->inv, sku);
    return inv_shard_outcome(s, st);
}

inv_status inv_sku_set(struct inv_session *s, const char *sku,
                       const struct inv_sku_spec *spec)
{
    if (s->cl)
        return sku_put_shards(s, sku, spec);
    return inv_sku_put_shard(s, sku, spec, 0, 1, "", INV_PUT_CHECKED);
}

/* The transfers a shard of sku recorded (xout) and the receiving shard has
 * not applied: a process that died, or a step that failed, between the two
 * (the next order's refill would apply them, engine_refill.c; a SKU whose
 * sale is over has none). Each is applied now under its receiving segment's
 * lock, fenced (the atomic mode: the script alone), and its record deleted.
 * 0, or -1 when one could not be (the retirement is then unsettled). */
static int apply_transfers(struct inv_session *s, const char *sku, const char *epoch,
                           const int *genes, int n)
{
    struct sku_layout l = {.nshards = n};
    for (int i = 0; i < n; i++)
        l.genes[i] = (uint8_t)genes[i];
    int ok = 1;
    for (int i = 0; i < n; i++) {
        struct inv_session *from = inv_shard_session(s, genes[i]);
        struct sku_keys k;
        inv_keys_init(&k, sku, genes[i]);
        redisReply *r = from ? rconn_command(from->rc, "HGETALL %s", k.xout) : NULL;
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            if (r)
                freeReplyObject(r);
            return -1;
        }
        for (size_t j = 0; j + 1 < r->elements; j += 2) {
            const redisReply *id = r->element[j];
            int to, seg;
            long long units;
            struct inv_session *dst = NULL;
            if (id->type != REDIS_REPLY_STRING ||
                inv_xfer_record_read(&l, r->element[j + 1], &to, &seg, &units) != 0 ||
                !(dst = inv_shard_session(s, to))) {
                ok = 0;
                continue;
            }
            struct sku_keys dk;
            inv_keys_init(&dk, sku, to);
            char lkey[128], units_t[24], seg_t[12];
            snprintf(lkey, sizeof(lkey), "%s%d", dk.lock, seg);
            snprintf(units_t, sizeof(units_t), "%lld", units);
            snprintf(seg_t, sizeof(seg_t), "%d", seg);
            struct lock_grant g;
            if (dst->lock &&
                lock_acquire(dst->lock, lkey, s->inv->cfg.wait_ms, &g) != LOCK_ACQUIRED) {
                ok = 0;
                continue;
            }
            const char *args[] = {epoch, id->str, units_t, seg_t};
            struct inv_xfer_call xc;
            inv_xfer_call_init(&xc, s->inv, sku, to, seg, 1, 4, args, dst->lock ? &g : NULL);
            redisReply *x = rconn_eval(dst->rc, xc.cmd.script, xc.cmd.nkeys,
                                       xc.cmd.argc - xc.cmd.nkeys, xc.cmd.argv, NULL);
            long long got;
            inv_status st = inv_xfer_answer(x, &got, NULL);
            if (x)
                freeReplyObject(x);
            if (dst->lock)
                lock_release(dst->lock, lkey, &g);
            redisReply *d = st == INV_OK && got >= 0
                                ? rconn_command(from->rc, "HDEL %s %s", k.xout, id->str)
                                : NULL;
            ok &= d && d->type == REDIS_REPLY_INTEGER;
            if (d)
                freeReplyObject(d);
        }
        freeReplyObject(r);
    }
    return ok ? 0 : -1;
}

/* DELETE on a cluster: the transfers left half-way applied first
 * (apply_transfers), then each shard the directory names retired (every check
 * of a shard before its first write; a shard found unsettled leaves the
 * others retired, and a repeat finishes), then, with none unsettled, the
 * summary (without the outbox) and the directory. */
static inv_status sku_retire_shards(struct inv_session *s, const char *sku)
{
    char key[96];
    dir_key(key, sizeof(key), sku);
    struct rconn *rc = dir_conn(s, key);
    redisReply *r = rc ? rconn_command(rc, "HMGET %s genes epoch", key) : NULL;
    int genes[CLUSTER_MAX_MASTERS], n = -1;
    char epoch[24] = "";
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        const redisReply *g = r->element[0], *e = r->element[1];
        if (g->type == REDIS_REPLY_STRING)
            n = inv_genes_parse(g->str, genes);
        else if (g->type == REDIS_REPLY_NIL)
            n = 0;
        if (e->type == REDIS_REPLY_STRING)
            snprintf(epoch, sizeof(epoch), "%s", e->str);
    }
    if (r)
        freeReplyObject(r);
    if (n < 0)
        return inv_shard_outcome(s, INV_UNAVAILABLE);
    if (n == 0)
        return INV_NOT_FOUND;
    if (apply_transfers(s, sku, epoch, genes, n) != 0)
        return inv_shard_outcome(s, INV_NOT_SETTLED);
    long long total[INV_RETIRE_SUMS] = {0}, sums[INV_RETIRE_SUMS];
    inv_status st = INV_OK;
    for (int i = 0; i < n; i++) {
        struct inv_session *sh = inv_shard_session(s, genes[i]);
        inv_status one = sh ? inv_sku_retire_shard(sh, sku, 0, sums) : INV_UNAVAILABLE;
        if (one == INV_OK)
            for (int j = 0; j < INV_RETIRE_SUMS; j++)
                total[j] += sums[j];
        else if (one != INV_NOT_FOUND && st != INV_UNAVAILABLE)
            st = one;
    }
    if (st != INV_OK)
        return inv_shard_outcome(s, st);
    int ok = 1;
    if (ok && !s->inv->cfg.outbox) {
        r = rconn_command(rc,
                          "HSET sk:{%s}:retired initial %lld sold %lld orders %lld paid %lld "
                          "returned %lld cancelled %lld expired %lld",
                          sku, total[0], total[1], total[2], total[3], total[4], total[5],
                          total[6]);
        ok = r && r->type == REDIS_REPLY_INTEGER;
        if (r)
            freeReplyObject(r);
    }
    if (ok) {
        r = rconn_command(rc, "DEL %s", key);
        ok = r && r->type == REDIS_REPLY_INTEGER;
        if (r)
            freeReplyObject(r);
    }
    inv_layout_forget(s->inv, sku);
    return inv_shard_outcome(s, ok ? INV_OK : INV_UNAVAILABLE);
}

inv_status inv_sku_retire(struct inv_session *s, const char *sku)
{
    if (s->cl)
        return sku_retire_shards(s, sku);
    long long sums[INV_RETIRE_SUMS];
    return inv_sku_retire_shard(s, sku, !s->inv->cfg.outbox, sums);
}

inv_status inv_sku_put(struct inv_session *s, const char *sku, long long stock,
                       int segments, int limit)
{
    struct inv_sku_spec spec = {
        .stock = stock, .segments = segments, .limit = limit, .reset = 1};
    return inv_sku_set(s, sku, &spec);
}

/* A read of a SKU over its shards (into out), asked READ_TRIES times at
 * most while it finds the map stale. */
typedef inv_status shards_read(struct inv_session *s, const char *sku, void *out);

static inv_status read_retried(struct inv_session *s, shards_read *read, const char *sku,
                               void *out)
{
    inv_status st = read(s, sku, out);
    for (int i = 1; i < READ_TRIES && st == INV_UNAVAILABLE; i++)
        st = read(s, sku, out);
    return st;
}

static inv_status sku_get_shards(struct inv_session *s, const char *sku, void *report)
{
    struct inv_sku_report *out = report;
    struct sku_layout l;
    inv_status st = layout_learn(s, sku, &l);
    struct inv_sku_report *one = xmalloc(sizeof(*one));
    for (int i = 0; st == INV_OK && i < l.nshards; i++) {
        struct inv_session *sh = inv_shard_session(s, l.genes[i]);
        st = sh ? inv_sku_get_shard(sh, sku, one) : INV_UNAVAILABLE;
        if (st != INV_OK)
            break;
        if (i == 0) {
            memset(out, 0, offsetof(struct inv_sku_report, segments));
            snprintf(out->sku, sizeof(out->sku), "%s", sku);
            out->nsegments = l.segments;
            out->limit = one->limit;
            out->starts_ms = one->starts_ms; /* every shard holds the window */
            out->ends_ms = one->ends_ms;
            out->pay_ms = one->pay_ms;
            out->room = one->room; /* and the room */
        }
        out->initial += one->initial;
        out->sold += one->sold;
        out->orders += one->orders;
        out->remaining += one->remaining;
        out->pending += one->pending; /* an order's units live and return on its shard */
        out->paid += one->paid;
        out->returned += one->returned;
        for (int seg = i; seg < l.segments && seg < one->nsegments; seg += l.nshards)
            out->segments[seg] = one->segments[seg];
    }
    if (st == INV_OK) { /* units on their way between shards are not sold */
        out->remaining += l.initial - out->initial;
        out->initial = l.initial;
        out->oversold = out->sold > out->initial ? out->sold - out->initial : 0;
    }
    free(one);
    return inv_shard_outcome(s, st);
}

/* Units of sku whose transfer is recorded on the shard of gene `gene` and
 * not applied yet by the shard it goes to (*units); each transfer counted
 * once. */
static inv_status units_in_flight(struct inv_session *s, const char *sku,
                                  const struct sku_layout *l, int gene, long long *units)
{
    struct inv_session *sh = inv_shard_session(s, gene);
    struct sku_keys k;
    inv_keys_init(&k, sku, gene);
    redisReply *x = sh ? rconn_command(sh->rc, "HGETALL %s", k.xout) : NULL;
    inv_status st = x && x->type == REDIS_REPLY_ARRAY ? INV_OK : INV_UNAVAILABLE;
    for (size_t j = 0; st == INV_OK && j + 1 < x->elements; j += 2) {
        int to, seg;
        long long rec_units;
        if (inv_xfer_record_read(l, x->element[j + 1], &to, &seg, &rec_units) != 0)
            continue;
        struct inv_session *rh = inv_shard_session(s, to);
        struct sku_keys rk;
        inv_keys_init(&rk, sku, to);
        redisReply *m =
            rh ? rconn_command(rh->rc, "SISMEMBER %s %s", rk.xin, x->element[j]->str)
               : NULL;
        if (!m || m->type != REDIS_REPLY_INTEGER)
            st = INV_UNAVAILABLE;
        else if (m->integer == 0)
            *units += rec_units;
        if (m)
            freeReplyObject(m);
    }
    if (x)
        freeReplyObject(x);
    return st;
}

inv_status inv_sku_get(struct inv_session *s, const char *sku, struct inv_sku_report *out)
{
    return s->cl ? read_retried(s, sku_get_shards, sku, out)
                 : inv_sku_get_shard(s, sku, out);
}

static inv_status audit_shards(struct inv_session *s, const char *sku, void *audit)
{
    struct inv_audit *out = audit;
    struct sku_layout l;
    inv_status st = layout_learn(s, sku, &l);
    memset(out, 0, sizeof(*out));
    snprintf(out->sku, sizeof(out->sku), "%s", sku);
    out->consistent = 1;
    for (int i = 0; st == INV_OK && i < l.nshards; i++) {
        struct inv_audit one;
        struct inv_session *sh = inv_shard_session(s, l.genes[i]);
        st = sh ? inv_audit_shard(sh, sku, &one) : INV_UNAVAILABLE;
        if (st != INV_OK)
            break;
        out->initial += one.initial;
        out->orders += one.orders;
        out->sold += one.sold;
        out->remaining += one.remaining;
        out->limit_breaches += one.limit_breaches; /* a user buys in one shard */
        out->duplicate_order_ids += one.duplicate_order_ids; /* ids carry the gene */
        out->pending += one.pending; /* an order lives and ends on its shard */
        out->paid += one.paid;
        out->cancelled += one.cancelled;
        out->expired += one.expired;
        out->returned += one.returned;
        out->state_conflicts += one.state_conflicts;
        out->returned_twice += one.returned_twice;
        for (int j = 0; j < INV_NSTATES; j++) {
            out->state_orders[j] += one.state_orders[j];
            out->state_units[j] += one.state_units[j];
        }
        out->outbox_lag += one.outbox_lag;
        if (one.generation[0]) /* every shard of the SKU has the directory's epoch */
            snprintf(out->generation, sizeof(out->generation), "%s", one.generation);
        out->consistent &= one.consistent;
    }
    /* The shards' initial shares add up to the SKU's but for the units on
     * their way between them, which their transfers' records must show. */
    long long flying = 0;
    for (int i = 0; st == INV_OK && i < l.nshards; i++)
        st = units_in_flight(s, sku, &l, l.genes[i], &flying);
    if (st == INV_OK) {
        out->consistent &= l.initial - out->initial == flying;
        out->remaining += flying;
        out->initial = l.initial;
        out->oversold = out->sold > out->initial ? out->sold - out->initial : 0;
        out->consistent &=
            out->oversold == 0 && out->sold + out->remaining == out->initial;
    }
    return inv_shard_outcome(s, st);
}

inv_status inv_audit(struct inv_session *s, const char *sku, struct inv_audit *out)
{
    return s->cl ? read_retried(s, audit_shards, sku, out) : inv_audit_shard(s, sku, out);
}
