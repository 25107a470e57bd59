/* redis: a reentrant lease lock on one Redis, in the manner of Redisson.
 *
 * The lock key is a hash {owner: holds} with a PX lease; the owner is the
 * session (one per thread), so the same session re-acquiring increments its
 * count and must release as many times. Grant, lease and fencing token (INCR
 * "<key>:fence" on a new grant) are one script, so no grant exists without a
 * token.
 *
 * Watchdog (redis_watchdog.c): a timer on the loop the lock is attached to
 * (lock_attach) renews every held lease at ttl/3 with an owner-checked PEXPIRE,
 * pipelined. It stops on release, when the lease turns out lost (counted, by the renewal
 * or by the release that finds it gone, whichever comes first), and at
 * max_lease_ms after the grant. Validity is kept on the monotonic clock: renewal sent at
 * t with lease L is valid until t + L.
 *
 * Waiting without polling, by hand-off: a waiter whose attempt finds the lock
 * taken is queued on "<key>:queue" as "<deadline ms>:<owner>" (Redis clock)
 * and BLPOPs its own "<key>:grant:<owner>" for at most min(wait left, the
 * holder's PTTL). The release that frees the lock gives it straight to the
 * first queued waiter whose deadline has not passed (new lease, new fence)
 * and pushes the fence onto that waiter's grant list: one waiter is woken, and
 * it already holds the lock, so nobody barges in between and no wake is
 * wasted. A grant pushed before the waiter blocks waits in its list (and the
 * next attempt picks it up), so no wake is lost. A holder that crashed pushes
 * nothing, but its lease, which bounds the BLPOP, runs out and the waiter's
 * next attempt takes the free lock. The queue expires a lease after its
 * latest deadline (a new entry only ever extends its expiry, so a short
 * waiter never cuts an older, longer one's entry short).
 *
 * Leaving the queue: a waiter that gives up at its deadline leaves it in its
 * last attempt; one whose attempt fails with an error (timeout, connection
 * reset) takes its entry off, best effort, in a step of its own (LREM) before
 * it answers LOCK_ERROR. A release never hands the lock to the owner
 * releasing it, whose entries can only be left over from failed attempts, so
 * a session that takes the lock through the free path does not hand it to
 * itself. An entry left behind all the same (the process died, the clean-up
 * failed too) can be handed the lock by another's release until its deadline:
 * the grant waits in the owner's list and runs out after one ttl (nobody
 * renews it), or the session's next acquire of the key picks it up, with a new
 * lease counted from the pick-up.
 *
 * Steps (lock.h): an attempt is the acquire script (phase TRY), a command
 * pipelined behind which runs under the lock when it grants; a
 * queued waiter's wait is the BLPOP of the hand-off, on a connection of the
 * caller's own; the release is the release script (phase RELEASE), which may
 * go in one pipeline behind the caller's last command under the lock. A
 * release whose answer was lost is not sent again: the lease runs out. */
#include "clock.h"
#include "lock_impl.h"
#include "redis_impl.h"
#include "redis_watchdog.h"
#include "xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The scripts: KEYS, ARGV and replies are described at the top of each file. */
extern const struct rscript_source lua_lock_redis_acquire, lua_lock_redis_release;
static struct rscript acquire_script = /* lock/lua/redis_acquire.lua */
    RSCRIPT_INIT("redis_acquire", lua_lock_redis_acquire);
static struct rscript release_script = /* lock/lua/redis_release.lua */
    RSCRIPT_INIT("redis_release", lua_lock_redis_release);

static void *redis_create(const struct lock_config *cfg, struct lock_counters *counters,
                          char *err, size_t errlen)
{
    (void)err, (void)errlen;
    struct redis_state *st = xcalloc(1, sizeof(*st));
    st->ttl_ms = cfg->ttl_ms;
    st->fencing = cfg->fencing;
    snprintf(st->ttl_arg, sizeof(st->ttl_arg), "%d", cfg->ttl_ms);
    st->watchdog =
        redis_watchdog_new(cfg->ttl_ms, cfg->max_lease_ms, cfg->password, counters);
    return st;
}

static void redis_attach(void *state, struct event_base *base)
{
    struct redis_state *st = state;
    redis_watchdog_attach(st->watchdog, base);
}

static void redis_detach(void *state)
{
    struct redis_state *st = state;
    redis_watchdog_detach(st->watchdog);
}

static void redis_destroy(void *state)
{
    struct redis_state *st = state;
    redis_watchdog_free(st->watchdog);
    free(st);
}

static void *redis_session_new(void *state, struct rconn *data)
{
    struct redis_session *s = xcalloc(1, sizeof(*s));
    s->st = state;
    s->data = data;
    lock_token_new(s->owner);
    return s;
}

static void redis_session_free(void *session)
{
    struct redis_session *s = session;
    while (s->mine) /* not released: stop renewing, let the leases run out */
        redis_lease_end(s, s->mine);
    free(s);
}

/* ---- acquire / release ---------------------------------------------------- */

/* The keys of rw, the read-write lock that a plain lock reads (lock.h
 * lock_step_read_of), behind the script's own keys at k: the hash and the
 * writer's intent (its name in buf). Returns how many: 0 without rw. */
static int read_of_keys(const char *rw, char *buf, const char **k)
{
    if (!rw)
        return 0;
    snprintf(buf, KEY_MAX, "%s:writer", rw);
    k[0] = rw;
    k[1] = buf;
    return 2;
}

/* The acquire script's arguments for key (see lock/lua/redis_acquire.lua):
 * its keys written to st->buf, the wait and the queue entry the caller's;
 * with st->rw the read-write lock's two keys too (and ARGV[7], st->rw_held,
 * which the script reads only then). Returns the keys' count. */
static int acquire_argv(struct redis_session *s, const char *key, struct lock_step *st)
{
    char(*bufs)[KEY_MAX] = st->buf;
    lock_fence_key(key, bufs[0], KEY_MAX);
    snprintf(bufs[1], KEY_MAX, "%s:queue", key);
    snprintf(bufs[2], KEY_MAX, "%s:grant:%s", key, s->owner);
    const char **a = st->argv;
    const char *k[] = {key, bufs[0], bufs[1], bufs[2]};
    memcpy(a, k, sizeof(k));
    int nkeys = 4 + read_of_keys(st->rw, bufs[3], a + 4);
    const char *v[] = {s->owner,
                       s->st->ttl_arg,
                       s->st->fencing ? "1" : "0",
                       st->wait,
                       st->entry,
                       redis_lease_find(s, key) ? "1" : "0",
                       st->rw_held ? "1" : "0"};
    memcpy(a + nkeys, v, sizeof(v));
    return nkeys;
}

/* Reads the acquire script's answer r: *kind (1 granted, 2 re-entered, 0
 * taken), *value (the fence, or the holder's PTTL) and the queue entry.
 * False when r is no such answer (entry is then left as it was). */
static int acquire_answer(const redisReply *r, long long *kind, long long *value,
                          char *entry, size_t len)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return 0;
    *kind = r->element[0]->integer;
    *value = r->element[1]->integer;
    snprintf(entry, len, "%s", r->element[2]->str);
    return 1;
}

/* The release script's arguments for key and g, in st->buf and st->argv;
 * with st->rw the read-write lock's two keys too. Returns the keys' count. */
static int release_argv(struct redis_session *s, const char *key,
                        const struct lock_grant *g, struct lock_step *st)
{
    char(*bufs)[KEY_MAX] = st->buf;
    lock_fence_key(key, bufs[0], KEY_MAX);
    snprintf(bufs[1], KEY_MAX, "%s:queue", key);
    snprintf(bufs[2], KEY_MAX, "%s:grant:", key);
    const char **a = st->argv;
    a[0] = key;
    a[1] = bufs[0];
    a[2] = bufs[1];
    int nkeys = 3 + read_of_keys(st->rw, bufs[3], a + 3);
    a[nkeys] = g->token;
    a[nkeys + 1] = s->st->ttl_arg;
    a[nkeys + 2] = s->st->fencing ? "1" : "0";
    a[nkeys + 3] = bufs[2];
    return nkeys;
}

/* ---- steps ---------------------------------------------------------------- */

/* An attempt: the acquire script, waiting in the queue (st->entry) while
 * st->wait is left. */
static void redis_try_cmd(void *session, const char *key, struct lock_step *st)
{
    if (st->side != LOCK_EXCLUSIVE) {
        rwlock_redis_try_cmd(session, key, st);
        return;
    }
    int nkeys = acquire_argv(session, key, st);
    st->cmd[0] = (struct rcmd){
        .script = &acquire_script, .nkeys = nkeys, .argc = nkeys + 7, .argv = st->argv};
    st->node[0] = -1;
    st->ncmd = 1;
    st->last = 1;
}

/* The attempt's answer or the release's, read at once: a grant or the
 * release's outcome, in st. The queue's LREM answers nothing of use. */
static void redis_step_answer(void *session, const char *key, struct lock_step *st,
                              const redisReply *r)
{
    if (st->phase == REDIS_PHASE_LEAVE)
        return;
    if (st->phase == REDIS_PHASE_RELEASE) {
        st->res = redis_release_finish(session, key, st->g, r);
        return;
    }
    if (st->side != LOCK_EXCLUSIVE) {
        rwlock_redis_answer(session, key, st, r);
        return;
    }
    long long kind, value;
    memset(&st->grant, 0, sizeof(st->grant));
    if (!acquire_answer(r, &kind, &value, st->entry, sizeof(st->entry))) {
        st->res = LOCK_ERROR;
    } else if (kind <= 0) { /* -1: free, but a writer of st->rw is there */
        st->pttl_ms = value;
        st->val[0] = kind;
        st->res = LOCK_BUSY;
    } else {
        redis_grant_fill(session, key, kind == 2, value, st->start_us, &st->grant);
        st->res = LOCK_ACQUIRED;
    }
}

/* st becomes the LREM of its queue entry (a failed attempt's: no release is
 * to hand the lock to a waiter that is gone), best effort. */
static void leave_cmd(const char *key, struct lock_step *st)
{
    lock_step_clear(st, REDIS_PHASE_LEAVE);
    snprintf(st->buf[0], KEY_MAX, "%s:queue", key);
    snprintf(st->buf[1], KEY_MAX, "%s", st->entry);
    st->entry[0] = '\0';
    const char *argv[] = {"LREM", st->buf[0], "1", st->buf[1]};
    memcpy(st->argv, argv, sizeof(argv));
    st->cmd[0] = (struct rcmd){.argc = 4, .argv = st->argv};
    st->node[0] = -1;
    st->ncmd = 1;
}

static lock_status redis_try_done(void *session, const char *key, struct lock_step *st,
                                  struct lock_grant *g)
{
    (void)session;
    if (st->phase == REDIS_PHASE_LEAVE)
        return LOCK_ERROR;
    if (st->answered == 0) /* refused */
        st->res = LOCK_ERROR;
    if (st->res == LOCK_ERROR && st->entry[0]) { /* queued by an earlier attempt */
        leave_cmd(key, st);
        return LOCK_PENDING;
    }
    if (st->side != LOCK_EXCLUSIVE)
        return rwlock_redis_try_done(session, st, g);
    if (st->res == LOCK_ACQUIRED)
        *g = st->grant;
    else if (st->res == LOCK_BUSY && st->val[0] < 0) /* a writer: poll till it is done */
        st->retry_us = lock_step_backoff(st, RW_POLL_FIRST_US, RW_POLL_MAX_US, NULL);
    return st->res;
}

/* The wait for a hand-off: BLPOP of the session's grant list, bounded by the
 * wait left and the holder's lease (a holder that crashed hands nothing). */
static void redis_handoff_cmd(void *session, const char *key, int64_t wait_us,
                              struct lock_step *st)
{
    struct redis_session *s = session;
    int64_t lease_us = (st->pttl_ms >= 0 ? st->pttl_ms : s->st->ttl_ms) * 1000 + 1000;
    int64_t ms = ((wait_us < lease_us ? wait_us : lease_us) + 999) / 1000;
    if (ms < 1)
        ms = 1; /* 0 would block forever */
    snprintf(st->buf[0], KEY_MAX, "%s:grant:%s", key, s->owner);
    snprintf(st->wait, sizeof(st->wait), "%lld.%03lld", (long long)(ms / 1000),
             (long long)(ms % 1000));
    st->block_us = ms * 1000;
    st->argv[0] = "BLPOP";
    st->argv[1] = st->buf[0];
    st->argv[2] = st->wait;
    st->cmd[0].argc = 3;
}

static lock_status redis_handoff_answer(void *session, const char *key,
                                        struct lock_step *st, const redisReply *r,
                                        struct lock_grant *g)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return LOCK_BUSY;
    if (strcmp(r->element[1]->str, "w") == 0) { /* woken for a writer, not granted */
        st->entry[0] = '\0';                    /* the release took it off the queue */
        return LOCK_BUSY;
    }
    /* A grant handed over cannot predate the attempt that queued: its lease
     * counts from that attempt's start. */
    redis_grant_fill(session, key, 0, atoll(r->element[1]->str), st->start_us, g);
    g->acquired_us = clock_now_us();
    st->entry[0] = '\0'; /* the release took it off the queue */
    return LOCK_ACQUIRED;
}

static void redis_release_cmd(void *session, const char *key, struct lock_grant *g,
                              struct lock_step *st)
{
    if (g->side != LOCK_EXCLUSIVE) {
        rwlock_redis_release_cmd(session, key, g, st);
        return;
    }
    int nkeys = release_argv(session, key, g, st);
    st->cmd[0] = (struct rcmd){
        .script = &release_script, .nkeys = nkeys, .argc = nkeys + 4, .argv = st->argv};
    st->node[0] = -1;
    st->ncmd = 1;
    st->phase = REDIS_PHASE_RELEASE;
    st->res = LOCK_ERROR;
}

static lock_status redis_release_done(void *session, const char *key,
                                      struct lock_grant *g, struct lock_step *st)
{
    if (!st || st->answered == 0)
        return redis_release_finish(session, key, g, NULL);
    return st->res;
}

static int64_t redis_valid_until(void *session, const struct lock_grant *g)
{
    struct redis_session *s = session;
    struct lease *l = g->holder;
    if (!l)
        return g->valid_until_us;
    return redis_watchdog_valid_until(s->st->watchdog, l);
}

const struct lock_backend lock_backend_redis = {
    .name = "redis",
    .fenced = 1,
    .create = redis_create,
    .destroy = redis_destroy,
    .attach = redis_attach,
    .detach = redis_detach,
    .session_new = redis_session_new,
    .session_free = redis_session_free,
    .valid_until = redis_valid_until,
    .try_cmd = redis_try_cmd,
    .step_answer = redis_step_answer,
    .try_done = redis_try_done,
    .handoff_cmd = redis_handoff_cmd,
    .handoff_answer = redis_handoff_answer,
    .release_cmd = redis_release_cmd,
    .release_done = redis_release_done,
    .fences = 1,
    .rw = 1,
    .read_args = rwlock_redis_read_args,
    .read_taken = rwlock_redis_read_taken,
    .read_dropped = rwlock_redis_read_dropped,
};
