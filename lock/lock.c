#include "clock.h"
#include "lock_impl.h"
#include "xalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

const int64_t lock_wait_bucket_us[LOCK_WAIT_BUCKETS - 1] = {
    100,   500,    1000,   2000,   5000,    10000,  25000,
    50000, 100000, 250000, 500000, 1000000, 2500000};

static const struct lock_backend *const backends[] = {
    &lock_backend_none,    &lock_backend_local, &lock_backend_setnx, &lock_backend_redis,
    &lock_backend_redlock, &lock_backend_zk,    &lock_backend_pg,
};

struct lock_session {
    struct lock *lock;
    struct rconn *data;
    void *impl;
    /* The blocking calls' own, made on their first use: a base for the steps
     * done elsewhere (zk, pg), connections to the lock nodes (redlock). */
    struct event_base *base;
    struct rconn **node;
    int nnodes;
};

static const struct lock_backend *backend_find(const char *mode)
{
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
        if (mode && strcmp(backends[i]->name, mode) == 0)
            return backends[i];
    return NULL;
}

int lock_mode_known(const char *mode)
{
    return backend_find(mode) != NULL;
}

struct lock *lock_new(const char *mode, const struct lock_config *cfg, char *err,
                      size_t errlen)
{
    const struct lock_backend *be = backend_find(mode);
    if (!be) {
        snprintf(err, errlen, "unknown lock mode '%s'", mode ? mode : "");
        return NULL;
    }
    if (cfg->ttl_ms <= 0) {
        snprintf(err, errlen, "lock ttl must be positive");
        return NULL;
    }
    struct lock *l = xcalloc(1, sizeof(*l));
    l->be = be;
    l->cfg = *cfg;
    if (l->cfg.max_lease_ms <= 0)
        l->cfg.max_lease_ms = 10 * l->cfg.ttl_ms;
    if (l->cfg.timeout_ms <= 0)
        l->cfg.timeout_ms = 1000;
    l->state = be->create(&l->cfg, &l->counters, err, errlen);
    if (!l->state) {
        free(l);
        return NULL;
    }
    return l;
}

void lock_attach(struct lock *l, struct event_base *base)
{
    if (l->be->attach)
        l->be->attach(l->state, base);
}

void lock_detach(struct lock *l)
{
    if (l && l->be->detach)
        l->be->detach(l->state);
}

void lock_free(struct lock *l)
{
    if (!l)
        return;
    lock_detach(l);
    l->be->destroy(l->state);
    free(l);
}

const char *lock_name(const struct lock *l)
{
    return l->be->name;
}

int lock_fenced(const struct lock *l)
{
    return l->be->fenced && l->cfg.fencing;
}

int lock_fence_external(const struct lock *l)
{
    return lock_fenced(l) && l->be->fence_external;
}

struct lock_session *lock_session_new(struct lock *l, struct rconn *data)
{
    struct lock_session *s = xcalloc(1, sizeof(*s));
    s->lock = l;
    s->data = data;
    s->impl = l->be->session_new(l->state, data);
    return s;
}

void lock_session_free(struct lock_session *s)
{
    if (!s)
        return;
    s->lock->be->session_free(s->impl); /* pg: its connections on s->base */
    if (s->base)
        event_base_free(s->base);
    for (int i = 0; i < s->nnodes; i++)
        rconn_free(s->node[i]);
    free(s->node);
    free(s);
}

void lock_fence_text(const struct lock_grant *g, char *buf, size_t len)
{
    if (g->fence_owner[0])
        snprintf(buf, len, "%" PRIu64 ":%s", g->fence, g->fence_owner);
    else if (g->fence_ns[0])
        snprintf(buf, len, "%" PRIu64 "@%s", g->fence, g->fence_ns);
    else
        snprintf(buf, len, "%" PRIu64, g->fence);
}

void lock_fence_key(const char *key, char *buf, size_t len)
{
    snprintf(buf, len, "%s:fence", key);
}

static void count_wait(struct lock_counters *c, int64_t waited_us)
{
    int b = 0;
    while (b < LOCK_WAIT_BUCKETS - 1 && waited_us > lock_wait_bucket_us[b])
        b++;
    atomic_fetch_add_explicit(&c->wait_buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->wait_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->wait_sum_us, (uint64_t)waited_us, memory_order_relaxed);
}

static void bump(_Atomic uint64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

void lock_count_renewal(struct lock_counters *c)
{
    bump(&c->renewals);
}

void lock_count_lost(struct lock_counters *c)
{
    bump(&c->leases_lost);
}

void lock_count_wakeup(struct lock_counters *c)
{
    bump(&c->watch_wakeups);
}

void lock_count_watch_waiter(struct lock_counters *c, int delta)
{
    if (delta > 0)
        atomic_fetch_add_explicit(&c->watch_waiters, (uint64_t)delta,
                                  memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&c->watch_waiters, (uint64_t)-delta,
                                  memory_order_relaxed);
}

/* Counts an acquire that ended in st after waited_us; a grant gets its wait
 * and, when the backend set none, its time. */
static void acquire_ended(struct lock *l, lock_status st, int64_t waited_us,
                          struct lock_grant *g)
{
    switch (st) {
    case LOCK_ACQUIRED:
        g->waited_us = waited_us;
        if (!g->acquired_us)
            g->acquired_us = clock_now_us();
        bump(&l->counters.acquisitions);
        if (g->contended)
            bump(&l->counters.contended);
        count_wait(&l->counters, waited_us);
        break;
    case LOCK_BUSY:
        bump(&l->counters.wait_timeouts);
        count_wait(&l->counters, waited_us);
        break;
    default:
        bump(&l->counters.errors);
        break;
    }
}

/* lock/lua/fence_take.lua: a fencing token after a grant (fence_step), for
 * modes that hand out none themselves. */
extern const struct rscript_source lua_lock_fence_take;
static struct rscript fence_take_script =
    RSCRIPT_INIT("lock_fence_take", lua_lock_fence_take);

static lock_status count_release(struct lock *l, lock_status st)
{
    if (st == LOCK_RELEASED)
        bump(&l->counters.releases);
    else if (st == LOCK_NOT_HELD)
        bump(&l->counters.releases_not_held);
    else
        bump(&l->counters.errors);
    return st;
}

int lock_node_timeout_ms(const struct lock_config *cfg)
{
    int ms = cfg->ttl_ms / 20;
    if (ms < 50)
        ms = 50;
    return ms < cfg->timeout_ms ? ms : cfg->timeout_ms;
}

int lock_nodes(const struct lock *l, const struct rconn_addr **nodes,
               const char **password, int *timeout_ms)
{
    if (!l->be->has_nodes)
        return 0;
    *nodes = l->cfg.nodes;
    *password = l->cfg.password && *l->cfg.password ? l->cfg.password : NULL;
    *timeout_ms = lock_node_timeout_ms(&l->cfg);
    return l->cfg.nnodes;
}

void lock_step_nothing(void *session, const char *key, struct lock_step *st)
{
    (void)session, (void)key, (void)st;
}

void lock_release_nothing(void *session, const char *key, struct lock_grant *g,
                          struct lock_step *st)
{
    (void)session, (void)key, (void)g, (void)st;
}

void lock_answer_nothing(void *session, const char *key, struct lock_step *st,
                         const redisReply *r)
{
    (void)session, (void)key, (void)st, (void)r;
}

void lock_step_start(struct lock_session *s, const char *key, struct lock_step *st,
                     struct event_base *base, lock_step_cb *done, void *arg)
{
    s->lock->be->step_start(s->impl, key, st, base, done, arg);
}

void lock_step_cancel(struct lock_session *s, struct lock_step *st)
{
    if (st->job && s->lock->be->step_cancel)
        s->lock->be->step_cancel(s->impl, st);
}

void lock_step_init(struct lock_step *st)
{
    st->job = NULL;
    st->entry[0] = '\0';
    st->pttl_ms = -1;
    st->contended = 0;
    st->backoff_us = 0;
    st->first_us = clock_now_us();
    st->side = LOCK_EXCLUSIVE;
    st->rw = NULL;
    st->rw_held = 0;
    st->readers = NULL;
    st->nreaders[0] = '\0';
}

void lock_step_read_of(struct lock_step *st, const char *rw, int held)
{
    st->rw = rw;
    st->rw_held = held;
}

void lock_step_clear(struct lock_step *st, int phase)
{
    st->ncmd = 0;
    st->async = 0;
    st->last = 0;
    st->after = 0;
    st->answered = 0;
    st->ok = 0;
    st->phase = phase;
}

int64_t lock_step_backoff(struct lock_step *st, int64_t first_us, int64_t max_us,
                          unsigned int *seed)
{
    st->backoff_us = st->backoff_us ? st->backoff_us * 2 : first_us;
    if (st->backoff_us > max_us)
        st->backoff_us = max_us;
    if (!seed)
        return st->backoff_us;
    return clock_jitter_us(st->backoff_us, seed);
}

/* The phase of lock.c's own step, the fencing token's INCR after a grant. */
#define PHASE_FENCE 100

/* True when a grant of l comes without its fencing token: lock.c takes it. */
static int fence_after(const struct lock *l)
{
    return lock_fenced(l) && !l->be->fences;
}

/* Fills st with an attempt on key that waits until deadline_us. */
static void try_step(struct lock_session *s, const char *key, int64_t deadline_us,
                     struct lock_step *st)
{
    lock_step_clear(st, 0);
    st->retry_us = 0;
    st->start_us = clock_now_us();
    st->deadline_us = deadline_us;
    int64_t left_ms = (deadline_us - st->start_us) / 1000;
    snprintf(st->wait, sizeof(st->wait), "%lld", (long long)(left_ms > 0 ? left_ms : 0));
    s->lock->be->try_cmd(s->impl, key, st);
    if (fence_after(s->lock))
        st->last = 0;
}

int lock_try_step(struct lock_session *s, const char *key, int wait_ms,
                  struct lock_step *st)
{
    try_step(s, key, clock_now_us() + (int64_t)(wait_ms > 0 ? wait_ms : 0) * 1000, st);
    return 1;
}

void lock_step_answer(struct lock_session *s, const char *key, struct lock_step *st,
                      const redisReply *r)
{
    if (st->phase == PHASE_FENCE)
        st->ok = r && r->type == REDIS_REPLY_INTEGER &&
                 (st->grant.fence = (uint64_t)r->integer) > 0;
    else
        s->lock->be->step_answer(s->impl, key, st, r);
    st->answered++;
}

/* Counts the acquire of st, which ended in res (g: its grant, if any). */
static void step_ended(struct lock *l, struct lock_step *st, lock_status res,
                       struct lock_grant *g)
{
    g->contended = st->contended;
    if (res == LOCK_ACQUIRED) {
        g->side = st->side;
        g->rw = st->side == LOCK_EXCLUSIVE ? st->rw : NULL;
    }
    acquire_ended(l, res, clock_now_us() - st->first_us, g);
}

/* st becomes the taking of key's fencing token (fence_take.lua), for grant g. */
static void fence_step(const char *key, struct lock_step *st, const struct lock_grant *g)
{
    st->grant = *g;
    lock_token_new(st->grant.fence_owner);
    lock_step_clear(st, PHASE_FENCE);
    lock_fence_key(key, st->buf[3], sizeof(st->buf[3]));
    st->argv[0] = st->buf[3];
    st->argv[1] = st->grant.fence_owner;
    st->cmd[0] = (struct rcmd){
        .script = &fence_take_script, .nkeys = 1, .argc = 2, .argv = st->argv};
    st->node[0] = -1;
    st->ncmd = 1;
    st->last = 1;
}

lock_status lock_try_done(struct lock_session *s, const char *key, struct lock_step *st,
                          struct lock_grant *g)
{
    struct lock *l = s->lock;
    memset(g, 0, sizeof(*g));
    lock_status res;
    if (st->phase == PHASE_FENCE) {
        /* Without its token the grant is of no use: it is left to its lease
         * (no step waits for a release of it). */
        res = st->ok ? LOCK_ACQUIRED : LOCK_ERROR;
        if (st->ok)
            *g = st->grant;
    } else {
        res = l->be->try_done(s->impl, key, st, g);
        if (res == LOCK_ACQUIRED && fence_after(l)) {
            fence_step(key, st, g);
            return LOCK_PENDING;
        }
    }
    if (res == LOCK_PENDING) {
        if (fence_after(l))
            st->last = 0; /* the grant is complete with lock.c's fence step */
        return res;
    }
    if (res == LOCK_BUSY) {
        st->contended = 1;
        int64_t left = st->deadline_us - clock_now_us();
        if (st->entry[0] || left <= 0)
            st->retry_us = 0;
        else if (st->retry_us > left)
            st->retry_us = left;
    }
    if (res != LOCK_BUSY || (!st->entry[0] && st->retry_us == 0)) /* else it waits on */
        step_ended(l, st, res, g);
    return res;
}

void lock_handoff_step(struct lock_session *s, const char *key, int64_t wait_us,
                       struct lock_step *st)
{
    lock_step_clear(st, 0);
    st->cmd[0] = (struct rcmd){.argv = st->argv};
    st->node[0] = -1;
    st->ncmd = 1;
    s->lock->be->handoff_cmd(s->impl, key, wait_us, st);
}

lock_status lock_handoff_done(struct lock_session *s, const char *key,
                              struct lock_step *st, const redisReply *r,
                              struct lock_grant *g)
{
    memset(g, 0, sizeof(*g));
    lock_status res = s->lock->be->handoff_answer(s->impl, key, st, r, g);
    if (res == LOCK_ACQUIRED)
        step_ended(s->lock, st, res, g);
    return res;
}

void lock_release_step(struct lock_session *s, const char *key, struct lock_grant *g,
                       struct lock_step *st)
{
    lock_step_clear(st, 0);
    st->g = g;
    st->rw = g->rw;
    s->lock->be->release_cmd(s->impl, key, g, st);
}

lock_status lock_release_done(struct lock_session *s, const char *key,
                              struct lock_grant *g, struct lock_step *st)
{
    return count_release(s->lock, s->lock->be->release_done(s->impl, key, g, st));
}

/* ---- the blocking calls: the steps, run here ---------------------------------
 *
 * lock_acquire and lock_release run the backend's steps as an event loop
 * does, on the calling thread: the commands on the session's data connection
 * and on connections of its own to the lock nodes (each connection's in one
 * pipeline, all sent before any answer is read), a step done elsewhere on a
 * base of the session's own until its done comes, a hand-off's wait as a
 * blocking command on the data connection, a poll's pause asleep. So the
 * counters, the lease, the fencing token and the wait are the steps'. */

/* Slack over a hand-off's BLPOP before the socket gives up on it: Redis times
 * out blocked clients from its event loop, up to 1/hz late when idle (the
 * socket's timeout then drops the connection, which the next call makes
 * again). */
#define HANDOFF_SLACK_MS 15

/* s's connection to lock node i, made on first use; NULL when there is none. */
static struct rconn *node_conn(struct lock_session *s, int i)
{
    if (!s->node) {
        const struct rconn_addr *nodes;
        const char *password;
        int ms;
        int n = lock_nodes(s->lock, &nodes, &password, &ms);
        s->node = xcalloc(n > 0 ? (size_t)n : 1, sizeof(*s->node));
        for (s->nnodes = 0; s->nnodes < n; s->nnodes++)
            s->node[s->nnodes] =
                rconn_new(nodes[s->nnodes].host, nodes[s->nnodes].port, password, ms);
    }
    return i >= 0 && i < s->nnodes ? s->node[i] : NULL;
}

/* Sends st's commands, then hands their answers to lock_step_answer in the
 * commands' order. A script the connection lost (NOSCRIPT) runs again by
 * itself, its EVAL fallback loading it. */
static void step_send(struct lock_session *s, const char *key, struct lock_step *st)
{
    struct rconn *conn[LOCK_STEP_CMDS];
    struct rpipe pipe[LOCK_STEP_CMDS];
    int pipe_of[LOCK_STEP_CMDS], npipe = 0;
    for (int i = 0; i < st->ncmd; i++) {
        struct rconn *rc = st->node[i] < 0 ? s->data : node_conn(s, st->node[i]);
        pipe_of[i] = -1;
        if (!rc)
            continue;
        int p = 0;
        while (p < npipe && conn[p] != rc)
            p++;
        if (p == npipe)
            conn[npipe++] = rc;
        pipe_of[i] = p;
        rconn_prepare(rc, &st->cmd[i]); /* a load is a round trip of its own */
    }
    for (int p = 0; p < npipe; p++)
        rpipe_begin(&pipe[p], conn[p]);
    for (int i = 0; i < st->ncmd; i++)
        if (pipe_of[i] >= 0)
            rpipe_append(&pipe[pipe_of[i]], &st->cmd[i]);
    for (int p = 0; p < npipe; p++) /* every node's before waiting on any */
        rpipe_flush(&pipe[p]);
    redisReply *r[LOCK_STEP_CMDS];
    for (int i = 0; i < st->ncmd; i++)
        r[i] = pipe_of[i] >= 0 ? rpipe_collect(&pipe[pipe_of[i]]) : NULL;
    for (int p = 0; p < npipe; p++)
        rpipe_end(&pipe[p]);
    for (int i = 0; i < st->ncmd; i++) {
        if (st->cmd[i].script && rconn_is_noscript(r[i])) {
            freeReplyObject(r[i]);
            r[i] = rconn_run(conn[pipe_of[i]], &st->cmd[i]);
        }
        lock_step_answer(s, key, st, r[i]);
        if (r[i])
            freeReplyObject(r[i]);
    }
}

static void step_over(void *arg)
{
    *(int *)arg = 1;
}

/* Runs st until its answers are in. */
static void step_run(struct lock_session *s, const char *key, struct lock_step *st)
{
    if (!st->async) {
        step_send(s, key, st);
        return;
    }
    if (!s->base && !(s->base = event_base_new()))
        abort(); /* out of memory or descriptors: as xalloc does */
    int over = 0;
    lock_step_start(s, key, st, s->base, step_over, &over);
    while (!over)
        event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NO_EXIT_ON_EMPTY);
}

/* A queued acquire waits for the lock to be handed over, until deadline_us
 * (at least a millisecond, as a loop waits): LOCK_ACQUIRED or LOCK_BUSY. */
static lock_status handoff(struct lock_session *s, const char *key, struct lock_step *st,
                           int64_t deadline_us, struct lock_grant *g)
{
    int64_t wait_us = deadline_us - clock_now_us();
    wait_us = wait_us > 1000 ? wait_us : 1000;
    lock_handoff_step(s, key, wait_us, st);
    redisReply *r = NULL;
    redisContext *c = s->data ? rconn_ctx(s->data) : NULL;
    if (c) { /* the socket gives up shortly after Redis should have */
        int64_t ms = (st->block_us + 999) / 1000 + HANDOFF_SLACK_MS;
        redisSetTimeout(c, (struct timeval){ms / 1000, (ms % 1000) * 1000});
        r = rconn_run(s->data, &st->cmd[0]);
        if (r) { /* else the context is gone, and the next call reconnects */
            int normal = rconn_timeout_ms(s->data);
            redisSetTimeout(c, (struct timeval){normal / 1000, (normal % 1000) * 1000});
        }
    }
    lock_status res = lock_handoff_done(s, key, st, r, g);
    if (r)
        freeReplyObject(r);
    return res;
}

/* An acquire of side of key, waiting at most wait_ms: an exclusive lock
 * that reads the read-write lock rw (lock_step_read_of, with held) when rw is set, a
 * write side that waits for n readers "<readers>i" too (lock_rw_write_over)
 * when readers is. */
static lock_status acquire(struct lock_session *s, const char *key, lock_side side,
                           const char *rw, int held, const char *readers, int n,
                           int wait_ms, struct lock_grant *g)
{
    int64_t deadline = clock_now_us() + (int64_t)(wait_ms > 0 ? wait_ms : 0) * 1000;
    struct lock_step st;
    lock_step_init(&st);
    st.side = side;
    lock_step_read_of(&st, rw, held);
    if (readers) {
        st.readers = readers;
        snprintf(st.nreaders, sizeof(st.nreaders), "%d", n);
    }
    for (;;) {
        try_step(s, key, deadline, &st);
        lock_status res;
        do
            step_run(s, key, &st);
        while ((res = lock_try_done(s, key, &st, g)) == LOCK_PENDING);
        if (res != LOCK_BUSY)
            return res;
        if (st.entry[0]) {
            if (handoff(s, key, &st, deadline, g) == LOCK_ACQUIRED)
                return LOCK_ACQUIRED;
        } else if (st.retry_us > 0) {
            clock_sleep_us(st.retry_us);
        } else {
            return LOCK_BUSY;
        }
    }
}

lock_status lock_acquire(struct lock_session *s, const char *key, int wait_ms,
                         struct lock_grant *g)
{
    return acquire(s, key, LOCK_EXCLUSIVE, NULL, 0, NULL, 0, wait_ms, g);
}

lock_status lock_acquire_read_of(struct lock_session *s, const char *key, const char *rw,
                                 int held, int wait_ms, struct lock_grant *g)
{
    return acquire(s, key, LOCK_EXCLUSIVE, rw, held, NULL, 0, wait_ms, g);
}

/* ---- the read-write lock: the same steps, with a side ------------------------ */

int lock_rw_supported(const struct lock *l)
{
    return l->be->rw;
}

lock_status lock_rw_acquire(struct lock_session *s, const char *key, lock_side side,
                            int wait_ms, struct lock_grant *g)
{
    if (!lock_rw_supported(s->lock) || side == LOCK_EXCLUSIVE) {
        bump(&s->lock->counters.errors);
        return LOCK_ERROR;
    }
    return acquire(s, key, side, NULL, 0, NULL, 0, wait_ms, g);
}

lock_status lock_rw_write_over(struct lock_session *s, const char *key,
                               const char *readers, int n, int wait_ms,
                               struct lock_grant *g)
{
    if (!lock_rw_supported(s->lock)) {
        bump(&s->lock->counters.errors);
        return LOCK_ERROR;
    }
    return acquire(s, key, LOCK_WRITE, NULL, 0, readers, n, wait_ms, g);
}

int lock_rw_try_step(struct lock_session *s, const char *key, lock_side side, int wait_ms,
                     struct lock_step *st)
{
    if (!lock_rw_supported(s->lock) || side == LOCK_EXCLUSIVE)
        return 0;
    st->side = side;
    return lock_try_step(s, key, wait_ms, st);
}

int lock_rw_read_args(struct lock_session *s, const char *key, struct lock_rw_args *a)
{
    const struct lock_backend *be = s->lock->be;
    return be->read_args ? be->read_args(s->impl, key, a) : 0;
}

lock_status lock_rw_read_taken(struct lock_session *s, const char *key, long long taken,
                               int64_t sent_us, struct lock_grant *g)
{
    memset(g, 0, sizeof(*g));
    lock_status res = s->lock->be->read_taken(s->impl, key, taken, sent_us, g);
    g->side = LOCK_READ;
    acquire_ended(s->lock, res, 0, g);
    return res;
}

lock_status lock_rw_read_dropped(struct lock_session *s, const char *key,
                                 const long long *left, struct lock_grant *g)
{
    return count_release(s->lock, s->lock->be->read_dropped(s->impl, key, left, g));
}

lock_status lock_release(struct lock_session *s, const char *key, struct lock_grant *g)
{
    struct lock_step st;
    lock_step_init(&st);
    lock_release_step(s, key, g, &st);
    step_run(s, key, &st);
    return lock_release_done(s, key, g, &st);
}

int64_t lock_valid_until_us(struct lock_session *s, const struct lock_grant *g)
{
    const struct lock_backend *be = s->lock->be;
    return be->valid_until ? be->valid_until(s->impl, g) : g->valid_until_us;
}

void lock_stats(const struct lock *l, struct lock_stats *out)
{
    const struct lock_counters *c = &l->counters;
#define LOCK_STATS_LOAD(field, kind, help) out->field = atomic_load(&c->field);
    LOCK_STATS(LOCK_STATS_LOAD)
#undef LOCK_STATS_LOAD
    for (int i = 0; i < LOCK_WAIT_BUCKETS; i++)
        out->wait_buckets[i] = atomic_load(&c->wait_buckets[i]);
}

void lock_token_new(char out[33])
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            abort(); /* getrandom only fails on a broken kernel: never a weak token */
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
}
