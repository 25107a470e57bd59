/* rwlock_redis: the read-write lock of the redis mode, in the manner of
 * Redisson's RReadWriteLock (lock.h "the read-write lock"; the scripts in
 * lock/lua/rw_*.lua say the layout of the keys).
 *
 * The lock is one hash at the key: its mode ("read" or "write") and, per
 * holder (the session's owner, as for the plain lock), its holds and, for
 * the writer, its writes. One PX lease covers the hash, so that the
 * watchdog renews a read or a write hold as it renews the plain lock's
 * (redis_renew.lua: an owner-checked PEXPIRE of the hash); the hash lives
 * while any holder renews, and a holder that died keeps its count in it until
 * the others have gone and the lease runs out (a writer waits that much
 * longer, one ttl at most after the last live reader).
 *
 * Writer preference: a writer whose attempt finds the key taken leaves its
 * intent at "<key>:writer" (a short lease each attempt renews); new readers
 * are refused while it lives. Waiting polls, a pause of 1 ms doubling to 20
 * ms (no hand-off queue: a release wakes nobody, and readers are many): the
 * writer's intent outlives its pause by far (the script gives it 100 ms past
 * the wait at least).
 *
 * Fencing: a new write grant takes the next token on "<key>:fence" in its
 * script (fence.lua), a re-entry gets the same; a read has none.
 *
 * Leases, re-entry and the watchdog are lock_redis.c's (redis_impl.h); this
 * file is the scripts' arguments and answers. */
#include "clock.h"
#include "redis_impl.h"

#include <stdio.h>
#include <string.h>

/* The scripts: KEYS, ARGV and replies are described at the top of each file. */
extern const struct rscript_source lua_lock_rw_read_acquire, lua_lock_rw_write_acquire,
    lua_lock_rw_release;
static struct rscript read_script = /* lock/lua/rw_read_acquire.lua */
    RSCRIPT_INIT("rw_read_acquire", lua_lock_rw_read_acquire);
static struct rscript write_script = /* lock/lua/rw_write_acquire.lua */
    RSCRIPT_INIT("rw_write_acquire", lua_lock_rw_write_acquire);
static struct rscript release_script = /* lock/lua/rw_release.lua */
    RSCRIPT_INIT("rw_release", lua_lock_rw_release);

int rwlock_redis_read_args(void *session, const char *key, struct lock_rw_args *a)
{
    struct redis_session *s = session;
    snprintf(a->hash, sizeof(a->hash), "%s", key);
    snprintf(a->writer, sizeof(a->writer), "%s:writer", key);
    memcpy(a->owner, s->owner, sizeof(a->owner));
    snprintf(a->ttl, sizeof(a->ttl), "%s", s->st->ttl_arg);
    return 1;
}

void rwlock_redis_try_cmd(struct redis_session *s, const char *key, struct lock_step *st)
{
    snprintf(st->buf[0], KEY_MAX, "%s:writer", key);
    st->argv[0] = key;
    st->argv[1] = st->buf[0];
    if (st->side == LOCK_READ) {
        st->argv[2] = s->owner;
        st->argv[3] = s->st->ttl_arg;
        st->argv[4] = redis_lease_find(s, key) ? "1" : "0"; /* a re-entry */
        st->cmd[0] = (struct rcmd){
            .script = &read_script, .nkeys = 2, .argc = 5, .argv = st->argv};
    } else {
        lock_fence_key(key, st->buf[1], KEY_MAX);
        st->argv[2] = st->buf[1];
        st->argv[3] = s->owner;
        st->argv[4] = s->st->ttl_arg;
        st->argv[5] = s->st->fencing ? "1" : "0";
        st->argv[6] = st->wait;
        int argc = 7;
        if (st->readers) { /* the plain locks that read it (lock_rw_write_over) */
            st->argv[argc++] = st->readers;
            st->argv[argc++] = st->nreaders;
        }
        st->cmd[0] = (struct rcmd){
            .script = &write_script, .nkeys = 3, .argc = argc, .argv = st->argv};
    }
    st->node[0] = -1;
    st->ncmd = 1;
    st->last = 1;
}

/* The answer of an attempt, {kind, fence or PTTL}: kind 1 a new hold, 2 one
 * more of the session's, 0 taken. */
void rwlock_redis_answer(struct redis_session *s, const char *key, struct lock_step *st,
                         const redisReply *r)
{
    memset(&st->grant, 0, sizeof(st->grant));
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        st->res = LOCK_ERROR;
        return;
    }
    long long kind = r->element[0]->integer, value = r->element[1]->integer;
    if (kind == 0) {
        st->pttl_ms = value;
        st->res = LOCK_BUSY;
        return;
    }
    redis_grant_fill(s, key, kind == 2, st->side == LOCK_WRITE ? value : 0, st->start_us,
                     &st->grant);
    st->res = LOCK_ACQUIRED;
}

lock_status rwlock_redis_try_done(struct redis_session *s, struct lock_step *st,
                                  struct lock_grant *g)
{
    (void)s;
    if (st->answered == 0)
        st->res = LOCK_ERROR;
    if (st->res == LOCK_ACQUIRED)
        *g = st->grant;
    else if (st->res == LOCK_BUSY) /* lock.c bounds it by the wait left */
        st->retry_us = lock_step_backoff(st, RW_POLL_FIRST_US, RW_POLL_MAX_US, NULL);
    return st->res;
}

void rwlock_redis_release_cmd(struct redis_session *s, const char *key,
                              struct lock_grant *g, struct lock_step *st)
{
    st->argv[0] = key;
    st->argv[1] = g->token;
    st->argv[2] = g->side == LOCK_WRITE ? "w" : "r";
    st->argv[3] = s->st->ttl_arg;
    st->cmd[0] =
        (struct rcmd){.script = &release_script, .nkeys = 1, .argc = 4, .argv = st->argv};
    st->node[0] = -1;
    st->ncmd = 1;
    st->phase = REDIS_PHASE_RELEASE;
    st->res = LOCK_ERROR;
}

lock_status rwlock_redis_read_taken(void *session, const char *key, long long taken,
                                    int64_t sent_us, struct lock_grant *g)
{
    if (taken != 1 && taken != 2)
        return LOCK_BUSY;
    redis_grant_fill(session, key, taken == 2, 0, sent_us, g);
    return LOCK_ACQUIRED;
}

lock_status rwlock_redis_read_dropped(void *session, const char *key,
                                      const long long *left, struct lock_grant *g)
{
    redisReply r = {.type = REDIS_REPLY_INTEGER, .integer = left ? *left : 0};
    return redis_release_finish(session, key, g, left ? &r : NULL);
}
