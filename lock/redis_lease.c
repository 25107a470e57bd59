/* redis_lease.c: the redis lock's sessions' leases and grants, shared by the
 * plain lock (lock_redis.c) and the read-write lock (rwlock_redis.c), both of
 * which call these and neither of which the other's code needs (redis_impl.h). */
#include "lock_impl.h"
#include "redis_impl.h"
#include "redis_watchdog.h"
#include "xalloc.h"

#include <stdint.h>
#include <string.h>

/* ---- leases --------------------------------------------------------------- */

/* Starts tracking a new hold of key by s; starts the watchdog on first use. */
static struct lease *lease_new(struct redis_session *s, const char *key, int64_t start)
{
    struct redis_state *st = s->st;
    size_t keylen = strlen(key);
    struct lease *l = xcalloc(1, sizeof(*l) + keylen + 1);
    memcpy(l->key, key, keylen + 1);
    memcpy(l->owner, s->owner, sizeof(l->owner));
    l->depth = 1;
    l->snext = s->mine;
    s->mine = l;
    redis_watchdog_add(st->watchdog, l, start, s->data);
    return l;
}

void redis_lease_end(struct redis_session *s, struct lease *l)
{
    for (struct lease **p = &s->mine; *p; p = &(*p)->snext) {
        if (*p == l) {
            *p = l->snext;
            break;
        }
    }
    redis_watchdog_drop(s->st->watchdog, l);
}

struct lease *redis_lease_find(struct redis_session *s, const char *key)
{
    for (struct lease *l = s->mine; l; l = l->snext)
        if (strcmp(l->key, key) == 0)
            return l;
    return NULL;
}

void redis_grant_fill(struct redis_session *s, const char *key, int reentered,
                      long long fence, int64_t start, struct lock_grant *g)
{
    struct redis_state *st = s->st;
    struct lease *l = redis_lease_find(s, key);
    if (reentered && l) {
        l->depth++;
        redis_watchdog_extend(st->watchdog, l, start + (int64_t)st->ttl_ms * 1000);
    } else {
        if (l) { /* an earlier hold of ours was lost unnoticed: a new lease */
            redis_watchdog_lose(st->watchdog, l);
            for (struct lease **p = &s->mine; *p; p = &(*p)->snext)
                if (*p == l) {
                    *p = l->snext;
                    break;
                }
            l->snext = NULL;
        }
        l = lease_new(s, key, start);
    }
    memcpy(g->token, s->owner, sizeof(g->token));
    g->fence = (uint64_t)fence;
    if (fence > 0) /* the scripts took it for this owner (lock/lua/fence.lua) */
        memcpy(g->fence_owner, s->owner, sizeof(g->fence_owner));
    g->acquired_us = start;
    g->valid_until_us = start + (int64_t)st->ttl_ms * 1000;
    g->holder = l;
}

lock_status redis_release_finish(struct redis_session *s, const char *key,
                                 struct lock_grant *g, const redisReply *r)
{
    lock_status res = LOCK_ERROR;
    if (r && r->type == REDIS_REPLY_INTEGER)
        res = r->integer >= 0 ? LOCK_RELEASED : LOCK_NOT_HELD;
    struct lease *l = g->holder;
    if (l && strcmp(l->key, key) == 0) {
        g->holder = NULL;
        if (res == LOCK_NOT_HELD) /* lost while held, if no renewal said so yet */
            redis_watchdog_lose(s->st->watchdog, l);
        if (--l->depth == 0)
            redis_lease_end(s, l); /* also a lost lease that a newer one replaced */
    }
    return res;
}
