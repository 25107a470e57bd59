/* room.c: a waiting room's join and its shared key, blocking (room.h). */
#include "room.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cluster.h"
#include "inv_impl.h"
#include "rcluster.h"

extern const struct rscript_source lua_inventory_room_join;
/* inventory/lua/room_join.lua: a user joins a room's queue. */
static struct rscript join_script =
    RSCRIPT_INIT("inv_room_join", lua_inventory_room_join);

/* The connection to the master of key's slot: the session's own on one
 * Redis; on a cluster the master's (NULL: none known). */
static struct rconn *slot_conn(struct inv_session *s, const char *key)
{
    if (!s->cl)
        return s->rc;
    return rcluster_conn(s->cl, cluster_keyslot(key, strlen(key)));
}

/* A reply's decimal string or integer as a long long; -1 for anything else. */
static long long reply_number(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type != REDIS_REPLY_STRING)
        return -1;
    char *end;
    long long v = strtoll(r->str, &end, 10);
    return *end || end == r->str ? -1 : v;
}

inv_status inv_room_join(struct inv_session *s, const char *sku, const char *user,
                         long long draw, struct inv_room_place *out)
{
    char source[96], queue[96], room[96], ranks[96], seen[96], drawn[24];
    /* on one Redis the SKU's meta, on a cluster its directory: both in {sku} */
    snprintf(source, sizeof(source), "sk:{%s}:%s", sku, s->cl ? "dir" : "meta");
    snprintf(queue, sizeof(queue), "sk:{%s}:room:q", sku);
    snprintf(room, sizeof(room), "sk:{%s}:room", sku);
    snprintf(ranks, sizeof(ranks), "sk:{%s}:room:rank", sku);
    snprintf(seen, sizeof(seen), "sk:{%s}:room:seen", sku);
    snprintf(drawn, sizeof(drawn), "%lld", draw);
    struct rconn *rc = slot_conn(s, source);
    if (!rc)
        return inv_shard_outcome(s, INV_UNAVAILABLE);
    if (!s->cl)
        rconn_check(rc);
    const char *argv[] = {source, queue, room, ranks, seen, user, drawn};
    redisReply *r = rconn_eval(rc, &join_script, 5, 2, argv, NULL);
    inv_status st = INV_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER) {
        long long code = r->element[0]->integer;
        if (code == -2)
            st = INV_NOT_FOUND;
        else if (code == -1)
            st = INV_NO_ROOM;
        else if (code == 1 && r->elements == 5) {
            out->place = reply_number(r->element[1]);
            out->rank = reply_number(r->element[2]);
            out->epoch = reply_number(r->element[3]);
            out->joined = reply_number(r->element[4]) == 1;
            if (out->place >= 0 && out->rank >= 0 && out->epoch >= 0)
                st = INV_OK;
        }
    }
    if (r)
        freeReplyObject(r);
    return s->cl ? inv_shard_outcome(s, st) : st;
}

int inv_room_key_shared(struct inv_session *s, unsigned char *key, size_t cap)
{
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 1];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0)
            abort(); /* only on a broken kernel: never a weak key */
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    struct rconn *rc = slot_conn(s, INV_ROOM_KEY);
    if (!rc || cap < sizeof(raw))
        return -1;
    redisReply *r = rconn_command(rc, "SET %s %s NX", INV_ROOM_KEY, hex);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r)
        freeReplyObject(r);
    r = ok ? rconn_command(rc, "GET %s", INV_ROOM_KEY) : NULL;
    int len = -1;
    if (r && r->type == REDIS_REPLY_STRING && r->len == 2 * sizeof(raw)) {
        len = (int)sizeof(raw);
        for (size_t i = 0; i < sizeof(raw) && len > 0; i++) {
            unsigned v;
            if (sscanf(r->str + 2 * i, "%2x", &v) != 1)
                len = -1;
            key[i] = (unsigned char)v;
        }
    }
    if (r)
        freeReplyObject(r);
    return len;
}
