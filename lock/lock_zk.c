/* zk: the ZooKeeper lock recipe, with Curator's protected mode and the lock
 * node's czxid as the fencing token.
 *
 * Layout: the lock of key K lives under the persistent node
 * /seckill/locks/<K encoded> (see key_path: bytes outside [A-Za-z0-9_:{}-]
 * become %XX, so '/' cannot nest and "." or ".." cannot name a node; the
 * mapping is one to one). The parents are created on first use and
 * remembered; a create that finds its parent gone (deleted by hand) forgets
 * it and creates it again.
 *
 * Contending: a contender creates an EPHEMERAL_SEQUENTIAL child named
 * "_c_<guid>-lock-" (a new random guid per attempt) and lists the children
 * without a watch. It holds the lock when its child has the lowest sequence
 * number. Otherwise it watches only its immediate predecessor (a data watch:
 * zoo_awget sets none on a node that is already gone, where zoo_awexists would
 * leave one behind for good) and sleeps until that watch fires, the session
 * expires or the wait deadline passes; then it lists again, because the
 * predecessor may have given up rather than released. A contender that gives
 * up has its own child deleted (in the background) as it answers LOCK_BUSY.
 *
 * The herd: with lock_config.zk_watch LOCK_ZK_WATCH_ALL a waiter instead
 * watches the lock node's children, listing and watching in one request
 * (zoo_awget_children), as the naive recipe does: every waiter is woken by
 * every create and delete under the lock node, lists again, and all but one
 * go back to sleep. Exclusion is the same (the lowest child holds); only the
 * wake-ups differ. Each wait ended by a watch counts in watch_wakeups: about
 * one per contended acquisition watching the predecessor, about as many as
 * there are waiters per release watching all.
 *
 * Connection loss during a create: the create may have happened on the server
 * with its answer lost. Once reconnected (same session) the contender looks
 * for a child carrying its guid and uses it, rather than creating a second
 * one that would wait behind the first forever. A contender that cannot find
 * out before its deadline leaves the guid on the connection's orphan list:
 * after the next reconnect the node is found by its guid and deleted
 * (Curator's "find and delete protected node in background").
 *
 * The files: this one has the backend's steps (lock.h: done elsewhere) and
 * the holds of its sessions; the requests of an acquire or a release are a
 * job on the zk loop (zk_steps.c, a state machine); under both, the client
 * (zk_conn.c: the session, watches, orphans, parents known) and its thread
 * (zk_loop.c).
 * One ZooKeeper session (one zhandle) per struct lock, that is per process.
 * Threads (struct lock_session) are told apart by their nodes, not by
 * sessions, so two threads of one process contend like two processes.
 * Reentrancy is per lock_session, in memory: a session that re-acquires a key
 * it holds increments a count, and only its last release deletes the node.
 *
 * The read-write lock (lock.h): the same steps with a side, whose node is a
 * "-read-" or "-write-" one (zk_steps.c says whom each waits for). Holds are
 * per side: a session re-enters its read, or its write, with no request; a
 * read while it writes is counted on the write hold (no node of its own: one
 * made after another writer's node would wait for it), and the write's node
 * stays until those reads are released too (no downgrade). A write while
 * it only reads makes a write node, which waits for its own read node like
 * any other (no upgrade). The writer's token is its node's czxid; a read
 * grant has none.
 *
 * Segment locks as readers (lock.h: lock_step_read_of, lock_rw_write_over):
 * a plain lock may read a read-write lock, and a write side wait for such
 * readers; zk_steps.c has the recipe. A re-entry of a plain lock is granted
 * in memory without looking for a writer: the order path never re-enters a
 * segment (one hold per segment per loop), so none is let in past a writer.
 *
 * Session expiry: every hold of that session is lost (counted once each, in
 * leases_lost): lock_valid_until_us answers 0 and release LOCK_NOT_HELD. The
 * next acquire opens a new session (zookeeper_init again). While disconnected,
 * a holder counts its lock lost once the session timeout has passed since the
 * disconnection, as the recipe does; the server may expire the session sooner
 * (the client notices silence only after 2/3 of the timeout), which is why the
 * czxid fences the commits.
 *
 * Fencing: the token is the czxid of the contender's own node (from
 * zoo_acreate2's Stat, or zoo_exists on the node found by its guid). Creates
 * under one parent are ordered by zxid, and a grant goes to the lowest child
 * left, so later grants carry larger czxids; unlike the sequence number, the
 * czxid keeps growing when the parent is deleted and created again.
 *
 * Bounded waits: a job ends at its wait's deadline (its requests get at least
 * a floor, so that a try-lock with no wait still gets its round trips), so
 * ZooKeeper being down or hung costs at most the wait. No ZooKeeper call is
 * made holding st->mu (the callbacks, on the zk loop's thread, take it). */
#include "clock.h"
#include "lock_impl.h"
#include "zk_conn.h"
#include "zk_impl.h"
#include "zk_loop.h"
#include "xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest parent path: room for "/_c_<guid>-lock-<10 digits>" after it. */
#define ZK_PARENT_MAX (ZK_PATH_MAX - 64)
#define ZK_DEFAULT_SESSION_MS 3000
/* A segment lock refused while a writer holds or waits polls (redis_impl.h's
 * RW_POLL_*). */
#define ZK_READ_POLL_FIRST_US 1000
#define ZK_READ_POLL_MAX_US 20000

/* One key held by one lock_session on one side (its node's kind), perhaps
 * re-entered. */
struct zk_hold {
    struct zk_session *owner; /* the session that took it, whose list it is on */
    struct zk_hold *snext;    /* the session's list (session thread only) */
    struct zk_conn_hold cl;   /* the conn's list, lost: the session expired */
    struct zk_conn *conn;     /* referenced */
    int depth;                /* grants not yet released (session thread only) */
    int reads;                /* a write hold's read grants (session thread only) */
    lock_side side;
    int detached;             /* found lost by an acquire that made a new hold */
    uint64_t fence;
    char guid[33];
    char *key;
    char node[ZK_PATH_MAX];
};

struct zk_session {
    struct zk_state *st;
    struct zk_hold *holds;
};

/* The parent node of key's lock into out; -1 when the key is too long. */
static int key_path(const char *key, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = (size_t)snprintf(out, len, "%s/", ZK_LOCKS);
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("_:{}-", *p);
        if (n + 4 > ZK_PARENT_MAX || n + 4 > len)
            return -1;
        if (plain) {
            out[n++] = (char)*p;
        } else {
            out[n++] = '%';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 15];
        }
    }
    out[n] = '\0';
    return *key ? 0 : -1;
}

/* ---- holds ------------------------------------------------------------- */

/* s's hold of side of key, NULL when none (session thread only). */
static struct zk_hold *hold_find(struct zk_session *s, const char *key, lock_side side)
{
    for (struct zk_hold *h = s->holds; h; h = h->snext)
        if (!h->detached && h->side == side && strcmp(h->key, key) == 0)
            return h;
    return NULL;
}

/* A hold of side of key by s of node (guid's, czxid its token); takes over
 * the caller's reference to c. */
static struct zk_hold *hold_new(struct zk_session *s, const char *key, lock_side side,
                                struct zk_conn *c, int64_t czxid, const char *guid,
                                const char *node)
{
    struct zk_hold *h = xcalloc(1, sizeof(*h));
    h->key = xstrdup(key);
    h->side = side;
    h->conn = c;
    h->depth = 1;
    h->fence = (uint64_t)czxid;
    snprintf(h->guid, sizeof(h->guid), "%s", guid);
    snprintf(h->node, sizeof(h->node), "%s", node);
    h->owner = s;
    h->snext = s->holds;
    s->holds = h;
    zk_conn_hold_add(c, &h->cl);
    return h;
}

/* Off its lists and freed. The caller's session may be another session of the
 * thread that took it (a hold taken on one is released through another): the
 * hold leaves its owner's list, not the caller's, or the owner would keep a
 * freed hold. */
static void hold_free(struct zk_hold *h)
{
    for (struct zk_hold **p = &h->owner->holds; *p; p = &(*p)->snext) {
        if (*p == h) {
            *p = h->snext;
            break;
        }
    }
    struct zk_conn *c = h->conn;
    zk_conn_hold_remove(c, &h->cl);
    zk_conn_put(c);
    free(h->key);
    free(h);
}

/* 1 while h's session lives (it may be disconnected). */
static int hold_alive(struct zk_state *st, const struct zk_hold *h)
{
    pthread_mutex_lock(&st->mu);
    int alive = !h->cl.lost && !h->conn->expired;
    pthread_mutex_unlock(&st->mu);
    return alive;
}

/* g as a grant of side of h (a read of a write hold: the writer reads). A
 * read carries no token. */
static void grant_fill(struct zk_state *st, struct zk_hold *h, lock_side side,
                       int contended, struct lock_grant *g)
{
    pthread_mutex_lock(&st->mu);
    int64_t session_us = h->conn->session_us;
    pthread_mutex_unlock(&st->mu);
    memcpy(g->token, h->guid, sizeof(g->token));
    g->fence = side == LOCK_READ ? 0 : h->fence;
    g->acquired_us = clock_now_us();
    g->valid_until_us = g->acquired_us + session_us;
    g->contended = contended;
    g->holder = h;
}

/* The live hold that a grant of side of key re-enters (no request): the
 * session's hold of that side, or for a read its write (the writer reads);
 * NULL when none. A hold of that side found lost is left to its grants
 * (they release as NOT_HELD): the grant is a new one. */
static struct zk_hold *hold_reentered(struct zk_session *s, const char *key,
                                      lock_side side)
{
    struct zk_hold *w = side == LOCK_READ ? hold_find(s, key, LOCK_WRITE) : NULL;
    if (w && hold_alive(s->st, w))
        return w;
    struct zk_hold *h = hold_find(s, key, side);
    if (h && hold_alive(s->st, h))
        return h;
    if (h)
        h->detached = 1;
    return NULL;
}

/* The grants of h not yet released. */
static int hold_grants(const struct zk_hold *h)
{
    return h->depth + h->reads;
}

/* Counts one more grant of side on h (re-entered). */
static void hold_enter(struct zk_hold *h, lock_side side)
{
    if (side == LOCK_READ && h->side == LOCK_WRITE)
        h->reads++;
    else
        h->depth++;
}

/* Releases g (key's) without a job: a re-entered grant, a lost one, or one
 * whose release was never sent; the last grant of a live hold has its node
 * deleted in the background (a lost answer leaves it to the orphan sweep),
 * as a node has no lease that would run out. A write hold's node stays
 * while the writer still reads: no downgrade (see design.md). */
static lock_status hold_let_go(struct zk_session *s, const char *key,
                               struct lock_grant *g)
{
    struct zk_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    int alive = hold_alive(s->st, h);
    if (g->side == LOCK_READ && h->side == LOCK_WRITE)
        h->reads--;
    else
        h->depth--;
    if (hold_grants(h) > 0)
        return alive ? LOCK_RELEASED : LOCK_NOT_HELD;
    if (alive) {
        char parent[ZK_PATH_MAX];
        zk_parent_of(h->node, parent, sizeof(parent));
        zk_delete_unwaited(h->conn, h->node, h->guid, parent);
    }
    hold_free(h);
    return alive ? LOCK_RELEASED : LOCK_NOT_HELD;
}

/* ---- steps (lock.h: done elsewhere, by a job of zk_steps.c) --------------- */

#define PHASE_REENTER 1
#define PHASE_RELEASE 2

static void zk_try_cmd(void *session, const char *key, struct lock_step *st)
{
    if (hold_reentered(session, key, st->side))
        st->phase = PHASE_REENTER; /* decided at once, in try_done */
    else
        st->async = 1;
}

static void zk_step_start(void *session, const char *key, struct lock_step *st,
                          struct event_base *base, lock_step_cb *done, void *arg)
{
    struct zk_session *s = session;
    struct zk_job *j = zk_job_new(s->st, base, done, arg);
    st->job = j;
    if (st->phase == PHASE_RELEASE) {
        /* the delete of the node of the last grant of a hold whose session
         * lives; else nothing to delete, and release_done decides */
        struct zk_hold *h = st->g->holder;
        if (!h || strcmp(h->key, key) != 0 || hold_grants(h) > 1 || !hold_alive(s->st, h))
            zk_job_end(j, LOCK_RELEASED);
        else
            zk_job_release(j, h->conn, h->node, h->guid);
        return;
    }
    char parent[ZK_PATH_MAX], rw[ZK_PATH_MAX], readers[ZK_PATH_MAX];
    int n = st->readers ? atoi(st->nreaders) : 0;
    if (key_path(key, parent, sizeof(parent)) != 0 ||
        (st->rw && st->side == LOCK_EXCLUSIVE && key_path(st->rw, rw, sizeof(rw)) != 0) ||
        (n > 0 && (key_path(st->readers, readers, sizeof(readers)) != 0 ||
                   strlen(readers) + 11 > ZK_PARENT_MAX))) { /* room for "<i>" */
        zk_job_end(j, LOCK_ERROR);
        return;
    }
    if (st->rw && st->side == LOCK_EXCLUSIVE)
        zk_job_read_of(j, rw, st->rw_held);
    if (n > 0 && st->side == LOCK_WRITE)
        zk_job_write_over(j, readers, n);
    zk_job_acquire(j, parent, st->side, st->deadline_us);
}

static lock_status zk_try_done(void *session, const char *key, struct lock_step *st,
                               struct lock_grant *g)
{
    struct zk_session *s = session;
    struct zk_job *j = st->job;
    if (!j) { /* a re-entry (or nothing started) */
        struct zk_hold *h =
            st->phase == PHASE_REENTER ? hold_reentered(s, key, st->side) : NULL;
        if (!h)
            return LOCK_ERROR;
        hold_enter(h, st->side);
        grant_fill(s->st, h, st->side, 0, g);
        return LOCK_ACQUIRED;
    }
    st->job = NULL;
    lock_status res = zk_job_take(j);
    if (res == LOCK_BUSY && j->writer_seen) /* a reader kept out: polls */
        st->retry_us =
            lock_step_backoff(st, ZK_READ_POLL_FIRST_US, ZK_READ_POLL_MAX_US, NULL);
    if (res == LOCK_ACQUIRED) {
        struct zk_hold *h =
            hold_new(s, key, st->side, j->conn, j->czxid, j->guid, j->node);
        j->conn = NULL; /* the hold's now */
        grant_fill(s->st, h, st->side, j->contended, g);
    }
    st->contended |= j->contended;
    zk_job_put(j);
    return res;
}

static void zk_step_cancel(void *session, struct lock_step *st)
{
    (void)session;
    struct zk_job *j = st->job;
    st->job = NULL;
    zk_job_cancel(j);
}

static void zk_release_cmd(void *session, const char *key, struct lock_grant *g,
                           struct lock_step *st)
{
    (void)session, (void)key, (void)g;
    st->async = 1;
    st->phase = PHASE_RELEASE;
    st->after = 1; /* the delete goes once the commit answered */
}

static lock_status zk_release_done(void *session, const char *key, struct lock_grant *g,
                                   struct lock_step *st)
{
    struct zk_job *j = st ? st->job : NULL;
    if (!j || !j->release) { /* never sent, or nothing to delete */
        if (j)
            zk_step_cancel(session, st);
        return hold_let_go(session, key, g);
    }
    st->job = NULL;
    lock_status res = zk_job_take(j);
    zk_job_put(j);
    struct zk_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    hold_free(h); /* its last grant (the job's) */
    return res;
}

/* ---- the backend ------------------------------------------------------- */

/* The client's own log: errors only (a global of the library, set once). */
static void zk_log_quiet(void)
{
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
}

static void *zk_create_state(const struct lock_config *cfg,
                             struct lock_counters *counters, char *err, size_t errlen)
{
    if (!cfg->zk_hosts || !*cfg->zk_hosts) {
        snprintf(err, errlen, "zk needs the ZooKeeper ensemble (--zk H:P[,H:P...])");
        return NULL;
    }
    struct zk_state *st = xcalloc(1, sizeof(*st));
    st->hosts = xstrdup(cfg->zk_hosts);
    st->session_ms = cfg->zk_session_ms > 0 ? cfg->zk_session_ms : ZK_DEFAULT_SESSION_MS;
    st->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 1000;
    st->counters = counters;
    st->watch = cfg->zk_watch;
    st->on_link = cfg->on_link;
    zk_conn_log_to(cfg->on_link);
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->reconnect_mu, NULL);
    clock_cond_init(&st->steps_gone);
    static pthread_once_t log_once = PTHREAD_ONCE_INIT;
    pthread_once(&log_once, zk_log_quiet);
    st->loop = zk_loop_new();
    /* Connecting goes on in the background: ZooKeeper may come up later. */
    st->conn = st->loop ? zk_conn_open(st) : NULL;
    if (!st->conn) {
        if (st->loop)
            snprintf(err, errlen, "the ZooKeeper client refuses the ensemble '%s'",
                     st->hosts);
        else
            snprintf(err, errlen, "zk: no thread for the ZooKeeper client");
        zk_loop_free(st->loop);
        pthread_cond_destroy(&st->steps_gone);
        pthread_mutex_destroy(&st->mu);
        pthread_mutex_destroy(&st->reconnect_mu);
        free(st->hosts);
        free(st);
        return NULL;
    }
    return st;
}

static void zk_destroy(void *state)
{
    struct zk_state *st = state;
    zk_steps_drain(st); /* their last answers, while the session is open */
    zk_conn_put(st->conn);
    zk_loop_free(st->loop); /* after the close of every session */
    zk_parents_free(st);
    pthread_cond_destroy(&st->steps_gone);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->reconnect_mu);
    free(st->hosts);
    free(st);
}

static void *zk_session_new(void *state, struct rconn *data)
{
    (void)data;
    struct zk_session *s = xcalloc(1, sizeof(*s));
    s->st = state;
    return s;
}

/* Holds not released are let go here, unlike in the lease modes: a node has
 * no lease that would run out, and would hold the lock for the whole life of
 * the process's session. */
static void zk_session_free(void *session)
{
    struct zk_session *s = session;
    while (s->holds) {
        struct zk_hold *h = s->holds;
        if (hold_alive(s->st, h)) {
            char parent[ZK_PATH_MAX];
            zk_parent_of(h->node, parent, sizeof(parent));
            zk_delete_unwaited(h->conn, h->node, h->guid, parent);
        }
        hold_free(h);
    }
    free(s);
}

/* Valid while the session lives: until the session timeout after a
 * disconnection, 0 once it expired. */
static int64_t zk_valid_until(void *session, const struct lock_grant *g)
{
    struct zk_session *s = session;
    const struct zk_hold *h = g->holder;
    if (!h)
        return g->valid_until_us;
    pthread_mutex_lock(&s->st->mu);
    const struct zk_conn *c = h->conn;
    int64_t until = h->cl.lost || c->expired ? 0
                    : c->connected           ? clock_now_us() + c->session_us
                                             : c->disconnected_us + c->session_us;
    pthread_mutex_unlock(&s->st->mu);
    return until;
}

const struct lock_backend lock_backend_zk = {
    .name = "zk",
    .fenced = 1,
    .fence_external = 1, /* czxid */
    .create = zk_create_state,
    .destroy = zk_destroy,
    .session_new = zk_session_new,
    .session_free = zk_session_free,
    .valid_until = zk_valid_until,
    /* steps done elsewhere (a job of zk_steps.c) */
    .try_cmd = zk_try_cmd,
    .step_answer = lock_answer_nothing,
    .try_done = zk_try_done,
    .release_cmd = zk_release_cmd,
    .release_done = zk_release_done,
    .step_start = zk_step_start,
    .step_cancel = zk_step_cancel,
    .fences = 1, /* the czxid */
    .rw = 1,     /* "-read-" and "-write-" nodes (zk_steps.c) */
};
