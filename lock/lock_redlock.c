/* redlock: the Redlock algorithm over N independent Redis masters (N >= 3, odd).
 *
 * Acquire: SET key token NX PX ttl on every node at once (one short per-node
 * timeout, lock_nodes), with the same random token. Held when a majority said
 * OK and the validity ttl - elapsed - drift (drift = 1% of ttl + 2 ms) is
 * still positive; otherwise the partial grant is released on all nodes and
 * the attempt retried after a jittered pause, until the wait deadline.
 * Release: owner-checked delete on every node. Survives the loss of a minority
 * of nodes. Fencing tokens come from the data Redis (lock.c's fence step), since the
 * nodes share no counter. */
#include "clock.h"
#include "lock_impl.h"
#include "xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REDLOCK_MAX_NODES 15

/* lock/lua/del_if_owner.lua: the owner-checked delete, 1 when deleted. */
extern const struct rscript_source lua_lock_del_if_owner;
static struct rscript release_script =
    RSCRIPT_INIT("redlock_release", lua_lock_del_if_owner);

struct redlock_state {
    int ttl_ms;
    char ttl_arg[16];
    int nnodes;
};

struct redlock_session {
    struct redlock_state *st;
    unsigned int seed;
};

static void *redlock_create(const struct lock_config *cfg, struct lock_counters *counters,
                            char *err, size_t errlen)
{
    (void)counters;
    if (!cfg->nodes || cfg->nnodes < 3 || cfg->nnodes % 2 == 0 ||
        cfg->nnodes > REDLOCK_MAX_NODES) {
        snprintf(err, errlen,
                 "redlock needs an odd number of independent nodes, 3 to %d "
                 "(--lock-nodes); got %d",
                 REDLOCK_MAX_NODES, cfg->nodes ? cfg->nnodes : 0);
        return NULL;
    }
    struct redlock_state *st = xcalloc(1, sizeof(*st));
    st->ttl_ms = cfg->ttl_ms;
    snprintf(st->ttl_arg, sizeof(st->ttl_arg), "%d", cfg->ttl_ms);
    st->nnodes = cfg->nnodes;
    return st;
}

static void redlock_destroy(void *state)
{
    free(state);
}

static void *redlock_session_new(void *state, struct rconn *data)
{
    (void)data;
    struct redlock_state *st = state;
    struct redlock_session *s = xcalloc(1, sizeof(*s));
    s->st = st;
    char token[33];
    lock_token_new(token);
    s->seed = (unsigned int)strtoul(token + 24, NULL, 16);
    return s;
}

static void redlock_session_free(void *session)
{
    free(session);
}

static int set_ok(const redisReply *r)
{
    return r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
}

static int deleted_ok(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

/* Steps: the attempt is SET NX PX on every node at once (phase 0); a grant
 * short of a majority or of validity is undone on every node (phase 1)
 * before the next attempt, which comes after a jittered pause
 * (st->retry_us); the release is the owner-checked delete on every node
 * (phase 2). A node's answer counts in st->ok (granted, deleted) and
 * st->val[0] (answered); the fencing token is lock.c's step after a grant. */
enum { PHASE_TRY, PHASE_UNDO, PHASE_RELEASE };

/* st's commands: argv[0..argc-1] (script: KEYS/ARGV for it) to every node. */
static void to_all_nodes(struct redlock_session *s, struct lock_step *st,
                         struct rscript *script, int argc, int phase)
{
    lock_step_clear(st, phase);
    st->val[0] = 0;
    for (int i = 0; i < s->st->nnodes; i++) {
        st->cmd[i] = (struct rcmd){
            .script = script, .nkeys = script ? 1 : 0, .argc = argc, .argv = st->argv};
        st->node[i] = i;
        st->ncmd++;
    }
}

/* The owner-checked delete of st's key and token on every node. */
static void undo_cmd(struct redlock_session *s, struct lock_step *st, int phase)
{
    st->argv[0] = st->buf[0];
    st->argv[1] = st->buf[1];
    to_all_nodes(s, st, &release_script, 2, phase);
}

static void redlock_try_cmd(void *session, const char *key, struct lock_step *st)
{
    struct redlock_session *s = session;
    snprintf(st->buf[0], sizeof(st->buf[0]), "%s", key);
    lock_token_new(st->buf[1]);
    const char *argv[] = {"SET", st->buf[0], st->buf[1], "NX", "PX", s->st->ttl_arg};
    memcpy(st->argv, argv, sizeof(argv));
    to_all_nodes(s, st, NULL, 6, PHASE_TRY);
    st->last = 1;
}

static void redlock_step_answer(void *session, const char *key, struct lock_step *st,
                                const redisReply *r)
{
    (void)session, (void)key;
    if (!r)
        return;
    st->val[0]++;
    if (st->phase == PHASE_TRY)
        st->ok += set_ok(r);
    else if (st->phase == PHASE_RELEASE)
        st->ok += deleted_ok(r);
}

static lock_status redlock_try_done(void *session, const char *key, struct lock_step *st,
                                    struct lock_grant *g)
{
    (void)key;
    struct redlock_session *s = session;
    struct redlock_state *rs = s->st;
    int quorum = rs->nnodes / 2 + 1;
    if (st->phase == PHASE_UNDO) { /* val[1]: a majority answered the attempt */
        if (!st->val[1])
            return LOCK_ERROR; /* a majority is unreachable: nobody can hold it */
    } else {
        int64_t ttl_us = (int64_t)rs->ttl_ms * 1000;
        int64_t validity =
            ttl_us - (clock_now_us() - st->start_us) - (ttl_us / 100 + 2000);
        if (st->ok >= quorum && validity > 0) {
            snprintf(g->token, sizeof(g->token), "%s", st->buf[1]);
            g->acquired_us = st->start_us;
            g->valid_until_us = st->start_us + validity;
            return LOCK_ACQUIRED;
        }
        st->val[1] = st->val[0] >= quorum;
        if (st->ok > 0) {
            undo_cmd(s, st, PHASE_UNDO);
            return LOCK_PENDING;
        }
        if (!st->val[1])
            return LOCK_ERROR;
    }
    st->retry_us = lock_step_backoff(st, 1000, 20000, &s->seed);
    return LOCK_BUSY;
}

static void redlock_release_cmd(void *session, const char *key, struct lock_grant *g,
                                struct lock_step *st)
{
    snprintf(st->buf[0], sizeof(st->buf[0]), "%s", key);
    snprintf(st->buf[1], sizeof(st->buf[1]), "%s", g->token);
    undo_cmd(session, st, PHASE_RELEASE);
}

static lock_status redlock_release_done(void *session, const char *key,
                                        struct lock_grant *g, struct lock_step *st)
{
    (void)key, (void)g;
    struct redlock_session *s = session;
    int quorum = s->st->nnodes / 2 + 1;
    if (st && st->ok >= quorum)
        return LOCK_RELEASED;
    return st && st->val[0] >= quorum ? LOCK_NOT_HELD : LOCK_ERROR;
}

const struct lock_backend lock_backend_redlock = {
    .name = "redlock",
    .fenced = 1,
    .create = redlock_create,
    .destroy = redlock_destroy,
    .session_new = redlock_session_new,
    .session_free = redlock_session_free,
    .has_nodes = 1,
    .try_cmd = redlock_try_cmd,
    .step_answer = redlock_step_answer,
    .try_done = redlock_try_done,
    .release_cmd = redlock_release_cmd,
    .release_done = redlock_release_done,
};
