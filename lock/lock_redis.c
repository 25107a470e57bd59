/* redis: SET key token NX PX ttl, unlocked by an owner-checked Lua
 * compare-and-delete. The grant and its fencing token are taken in one script,
 * so no grant exists without a token. Waiting retries with jittered backoff
 * until the deadline. */
#include "lock_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token, ARGV[2] ttl ms,
 * ARGV[3] "1" to take a fencing token. Returns the fence (0 when not fenced),
 * or -1 when the lock is taken. */
static struct rscript acquire_script = RSCRIPT_INIT("redis_acquire",
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  if ARGV[3] == '1' then return redis.call('INCR', KEYS[2]) end\n"
    "  return 0\n"
    "end\n"
    "return -1\n");

/* KEYS[1] lock key; ARGV[1] token. 1 when deleted, 0 when not the owner. */
static struct rscript release_script = RSCRIPT_INIT("redis_release",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n");

struct redis_state {
    int ttl_ms;
    int fencing;
};

struct redis_session {
    struct redis_state *st;
    struct rconn *data;
    unsigned int seed;
};

static void *redis_create(const struct lock_config *cfg, struct lock_counters *counters,
                          char *err, size_t errlen)
{
    (void)counters, (void)err, (void)errlen;
    struct redis_state *st = calloc(1, sizeof(*st));
    if (!st)
        abort();
    st->ttl_ms = cfg->ttl_ms;
    st->fencing = cfg->fencing;
    return st;
}

static void redis_destroy(void *state)
{
    free(state);
}

static void *redis_session_new(void *state, struct rconn *data)
{
    struct redis_session *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->st = state;
    s->data = data;
    char token[33];
    lock_token_new(token);
    s->seed = (unsigned int)strtoul(token + 24, NULL, 16);
    return s;
}

static void redis_session_free(void *session)
{
    free(session);
}

static void sleep_us(int64_t us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static lock_status redis_acquire(void *session, const char *key, int64_t deadline_us,
                                 struct lock_grant *g)
{
    struct redis_session *s = session;
    char fkey[600], ttl[16];
    lock_fence_key(key, fkey, sizeof(fkey));
    snprintf(ttl, sizeof(ttl), "%d", s->st->ttl_ms);
    lock_token_new(g->token);
    const char *argv[] = {key, fkey, g->token, ttl, s->st->fencing ? "1" : "0"};
    int64_t backoff_us = 200;
    for (;;) {
        int64_t start = lock_now_us();
        redisReply *r = rconn_eval(s->data, &acquire_script, 2, 3, argv, NULL);
        if (!r || r->type != REDIS_REPLY_INTEGER) {
            if (r)
                freeReplyObject(r);
            return LOCK_ERROR;
        }
        long long fence = r->integer;
        freeReplyObject(r);
        if (fence >= 0) {
            g->fence = (uint64_t)fence;
            g->acquired_us = start;
            g->valid_until_us = start + (int64_t)s->st->ttl_ms * 1000;
            return LOCK_ACQUIRED;
        }
        g->contended = 1;
        int64_t now = lock_now_us();
        if (now >= deadline_us)
            return LOCK_BUSY;
        int64_t pause = backoff_us / 2 + rand_r(&s->seed) % (backoff_us / 2 + 1);
        if (now + pause > deadline_us)
            pause = deadline_us - now;
        sleep_us(pause);
        if (backoff_us < 20000)
            backoff_us *= 2;
    }
}

static lock_status redis_release(void *session, const char *key, struct lock_grant *g)
{
    struct redis_session *s = session;
    const char *argv[] = {key, g->token};
    redisReply *r = rconn_eval(s->data, &release_script, 1, 1, argv, NULL);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r)
            freeReplyObject(r);
        return LOCK_ERROR;
    }
    lock_status st = r->integer == 1 ? LOCK_RELEASED : LOCK_NOT_HELD;
    freeReplyObject(r);
    return st;
}

const struct lock_backend lock_backend_redis = {
    .name = "redis",
    .fenced = 1,
    .create = redis_create,
    .destroy = redis_destroy,
    .session_new = redis_session_new,
    .session_free = redis_session_free,
    .acquire = redis_acquire,
    .release = redis_release,
};
