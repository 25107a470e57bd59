/* room.c: a waiting room's join, on the loop, and its shared key (room.h). */
#include "room.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "aconn.h"
#include "cluster.h"
#include "inv_impl.h"
#include "path.h"
#include "rcluster.h"
#include "text.h"

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

void inv_join_open(struct inv_ticket *t, const char *sku, const char *user,
                   long long draw)
{
    inv_ticket_clear(t);
    t->end = INV_END_JOIN;
    text_copy(t->sku, sizeof(t->sku), sku);
    text_copy(t->user_id, sizeof(t->user_id), user);
    t->draw = draw;
    t->qty = 0;
    t->home = t->seg = -1;
}

inv_do inv_join_start(struct inv *inv, struct inv_ticket *t, const struct inv_conns *cs,
                      aconn_cb *cb, void *arg)
{
    (void)inv;
    if (++t->tries > INV_TRIES) {
        t->st = INV_UNAVAILABLE;
        return INV_DO_OVER;
    }
    char source[96], queue[96], room[96], ranks[96], seen[96], drawn[24];
    /* on one Redis the SKU's meta, on a cluster its directory: both in {sku} */
    snprintf(source, sizeof(source), "sk:{%s}:%s", t->sku, cs->cluster ? "dir" : "meta");
    snprintf(queue, sizeof(queue), "sk:{%s}:room:q", t->sku);
    snprintf(room, sizeof(room), "sk:{%s}:room", t->sku);
    snprintf(ranks, sizeof(ranks), "sk:{%s}:room:rank", t->sku);
    snprintf(seen, sizeof(seen), "sk:{%s}:room:seen", t->sku);
    snprintf(drawn, sizeof(drawn), "%lld", t->draw);
    const char *argv[] = {source, queue, room, ranks, seen, t->user_id, drawn};
    rconn_status rc = inv_ticket_eval(cs, cluster_keyslot(source, strlen(source)), cb,
                                      arg, &join_script, 5, 7, argv);
    if (rc != RCONN_OK) {
        t->st = INV_UNAVAILABLE; /* nothing sent */
        return INV_DO_OVER;
    }
    return INV_DO_AWAIT;
}

inv_do inv_join_on_reply(struct inv *inv, struct inv_ticket *t,
                         const struct inv_conns *cs, aconn_cb *cb, void *arg,
                         aconn_result res, const redisReply *r)
{
    t->st = INV_UNAVAILABLE; /* a join lost may have run: joining again finds it */
    if (res != ACONN_REPLY)
        return INV_DO_OVER;
    if (rconn_is_noscript(r)) /* the connection loads it again first */
        return inv_join_start(inv, t, cs, cb, arg);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return INV_DO_OVER;
    long long code = r->element[0]->integer;
    if (code == -2) {
        t->st = INV_NOT_FOUND;
    } else if (code == -1) {
        t->st = INV_NO_ROOM;
    } else if (code == 1 && r->elements == 5) {
        struct inv_room_place *p = &t->room;
        p->place = reply_number(r->element[1]);
        p->rank = reply_number(r->element[2]);
        p->epoch = reply_number(r->element[3]);
        p->joined = reply_number(r->element[4]) == 1;
        if (p->place >= 0 && p->rank >= 0 && p->epoch >= 0)
            t->st = INV_OK;
    }
    return INV_DO_OVER;
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
