/* setnx: the classic pre-2.6.12 Redis lock.
 *
 *   SETNX key <expiry>          expiry = this instance's wall clock + ttl, in ms
 *   taken: GET key; when the stored expiry has passed, GETSET key <new expiry>
 *          and win only if the value GETSET returned had itself expired
 *   release: DEL key, only if our own expiry has not passed yet
 *
 * Waiting polls with jittered backoff until the deadline.
 *
 * Known weaknesses, kept on purpose (this mode is here to be measured):
 * - No owner token: the value is only a timestamp. A holder whose expiry check
 *   passes and whose DEL then arrives late (a pause, or a clock that runs
 *   behind another instance's) deletes a lock someone else now holds.
 * - Correctness rests on synchronised wall clocks: an instance whose clock runs
 *   ahead sees a live lease as expired and takes it over (lock_config's
 *   clock_skew_ms shows this).
 * - A loser's GETSET overwrites the winner's expiry with its own, so the winner's
 *   lease silently becomes the loser's timing.
 * - The key never expires in Redis; a crashed holder's key stays until the next
 *   GETSET takeover.
 * Fencing tokens (lock.c's step after the grant) make commits safe regardless. */
#include "lock_impl.h"
#include "xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct setnx_state {
    int ttl_ms;
    int skew_ms;
};

struct setnx_session {
    struct setnx_state *st;
    unsigned int seed;
};

static void *setnx_create(const struct lock_config *cfg, struct lock_counters *counters,
                          char *err, size_t errlen)
{
    (void)counters, (void)err, (void)errlen;
    struct setnx_state *st = xcalloc(1, sizeof(*st));
    st->ttl_ms = cfg->ttl_ms;
    st->skew_ms = cfg->clock_skew_ms;
    return st;
}

static void setnx_destroy(void *state)
{
    free(state);
}

static void *setnx_session_new(void *state, struct rconn *data)
{
    struct setnx_session *s = xcalloc(1, sizeof(*s));
    (void)data;
    s->st = state;
    char token[33];
    lock_token_new(token);
    s->seed = (unsigned int)strtoul(token + 24, NULL, 16);
    return s;
}

static void setnx_session_free(void *session)
{
    free(session);
}

/* This instance's idea of the wall clock, in unix milliseconds. */
static long long wall_ms(const struct setnx_state *st)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + st->skew_ms;
}

/* A stored expiry: -1 when the key is gone (nil), -2 when unreadable. */
static long long reply_expiry(const redisReply *r)
{
    if (r->type == REDIS_REPLY_NIL)
        return -1;
    if (r->type != REDIS_REPLY_STRING)
        return -2;
    char *end;
    errno = 0;
    long long v = strtoll(r->str, &end, 10);
    return errno || *end ? -2 : v;
}

/* Steps. An attempt is SETNX with GET in one round trip (phase 0); a
 * stored expiry that has passed is taken over by GETSET (phase 1); a taken
 * lock is polled with jittered backoff (st->retry_us), not past the stored
 * expiry. The fencing token is lock.c's step after the grant. The release
 * (phase 2) is the DEL, or nothing once our own expiry has passed. */
enum { PHASE_TRY, PHASE_GETSET, PHASE_RELEASE };

/* One command of st, on the data Redis, from argv[at..at+argc-1]. */
static void step_cmd(struct lock_step *st, int at, int argc)
{
    st->cmd[st->ncmd] = (struct rcmd){.argc = argc, .argv = st->argv + at};
    st->node[st->ncmd++] = -1;
}

static void setnx_try_cmd(void *session, const char *key, struct lock_step *st)
{
    struct setnx_session *s = session;
    long long now = wall_ms(s->st);
    st->val[0] = now;
    snprintf(st->buf[0], sizeof(st->buf[0]), "%s", key);
    snprintf(st->buf[1], sizeof(st->buf[1]), "%lld", now + s->st->ttl_ms + 1);
    const char *argv[] = {"SETNX", st->buf[0], st->buf[1], "GET", st->buf[0]};
    memcpy(st->argv, argv, sizeof(argv));
    step_cmd(st, 0, 3);
    step_cmd(st, 3, 2);
    st->last = 1;
    st->res = LOCK_ERROR;
}

static void setnx_step_answer(void *session, const char *key, struct lock_step *st,
                              const redisReply *r)
{
    (void)session, (void)key;
    if (st->phase == PHASE_RELEASE) {
        st->res = !r || r->type != REDIS_REPLY_INTEGER ? LOCK_ERROR
                  : r->integer == 1                    ? LOCK_RELEASED
                                                       : LOCK_NOT_HELD;
    } else if (st->phase == PHASE_TRY && st->answered == 0) { /* SETNX */
        st->ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        st->res = r && r->type == REDIS_REPLY_INTEGER ? LOCK_BUSY : LOCK_ERROR;
    } else { /* GET, or GETSET: the stored expiry */
        st->val[1] = r ? reply_expiry(r) : -2;
    }
}

/* A taken lock, stored expiry held_until: poll again after a jittered pause,
 * not past that expiry. */
static lock_status setnx_busy(struct setnx_session *s, struct lock_step *st,
                              long long held_until)
{
    int64_t pause = lock_step_backoff(st, 200, 20000, &s->seed);
    int64_t until_expiry = (held_until - wall_ms(s->st)) * 1000 + 1000;
    st->retry_us = pause < until_expiry ? pause : until_expiry > 1 ? until_expiry : 1;
    return LOCK_BUSY;
}

static lock_status setnx_try_done(void *session, const char *key, struct lock_step *st,
                                  struct lock_grant *g)
{
    struct setnx_session *s = session;
    long long now = st->val[0], held_until = st->val[1];
    if (st->answered < st->ncmd || st->res == LOCK_ERROR || held_until == -2)
        return LOCK_ERROR;
    int won = st->phase == PHASE_TRY ? st->ok : held_until < now;
    if (won) { /* the token is the expiry: this algorithm has no owner identity */
        snprintf(g->token, sizeof(g->token), "%s", st->buf[1]);
        g->acquired_us = st->start_us;
        g->valid_until_us = st->start_us + (int64_t)s->st->ttl_ms * 1000;
        return LOCK_ACQUIRED;
    }
    if (st->phase == PHASE_TRY && held_until == -1) { /* released meanwhile: again */
        lock_step_clear(st, PHASE_TRY);
        setnx_try_cmd(s, key, st);
        return LOCK_PENDING;
    }
    if (st->phase == PHASE_TRY && held_until < now) { /* expired: take it over */
        lock_step_clear(st, PHASE_GETSET);
        const char *argv[] = {"GETSET", st->buf[0], st->buf[1]};
        memcpy(st->argv, argv, sizeof(argv));
        step_cmd(st, 0, 3);
        st->last = 1;
        return LOCK_PENDING;
    }
    return setnx_busy(s, st, held_until);
}

static void setnx_release_cmd(void *session, const char *key, struct lock_grant *g,
                              struct lock_step *st)
{
    struct setnx_session *s = session;
    st->phase = PHASE_RELEASE;
    st->after = 1;           /* the expiry is checked once the commit answered */
    st->res = LOCK_NOT_HELD; /* our expiry has passed: leave the key alone */
    if (wall_ms(s->st) >= strtoll(g->token, NULL, 10))
        return;
    snprintf(st->buf[0], sizeof(st->buf[0]), "%s", key);
    st->argv[0] = "DEL";
    st->argv[1] = st->buf[0];
    step_cmd(st, 0, 2);
    st->res = LOCK_ERROR;
}

static lock_status setnx_release_done(void *session, const char *key,
                                      struct lock_grant *g, struct lock_step *st)
{
    (void)session, (void)key, (void)g;
    return st ? st->res : LOCK_ERROR;
}

const struct lock_backend lock_backend_setnx = {
    .name = "setnx",
    .fenced = 1,
    .create = setnx_create,
    .destroy = setnx_destroy,
    .session_new = setnx_session_new,
    .session_free = setnx_session_free,
    .try_cmd = setnx_try_cmd,
    .step_answer = setnx_step_answer,
    .try_done = setnx_try_done,
    .release_cmd = setnx_release_cmd,
    .release_done = setnx_release_done,
};
