/* zk_steps: the zk lock's steps for an event loop, done elsewhere (lock.h:
 * st->async). The acquire is a job of the zk loop's thread (zk_loop.h), a
 * state machine driven by the completions of asynchronous requests and by
 * the watch on the predecessor, never blocking: the recipe of lock_zk.c
 * (create our EPHEMERAL_SEQUENTIAL node, list the children, lowest holds,
 * else watch the immediate predecessor and list again once it goes; the
 * node's czxid is the fencing token). Watching all (--zk-watch all, the
 * herd), the list itself sets a watch on the children and the waiter sleeps
 * on it: LIST goes to WAIT, and any child that comes or goes lists again. Once it is over
 * (granted, busy at the wait's end, failed) an event of the caller's base is made active,
 * and the caller (its event loop) takes the outcome in lock_try_done.
 *
 *   phase     in flight                       then
 *   CONNECT   nothing: a timer (not connected) PARENTS/CREATE, FIND, or LIST
 *   PARENTS   a create of a parent level      the next level, then CREATE
 *   CREATE    the create of our node          LIST (or PARENTS: parent gone;
 *                                             CONNECT: its answer lost)
 *   FIND      the children, for our guid      STAT (found), CREATE (none)
 *   STAT      our node's czxid                LIST
 *   LIST      the children                    DONE (held), WATCH (or WAIT,
 *                                             watching all), DONE (busy)
 *   WATCH     the watch on the predecessor    WAIT, or LIST (it went)
 *   WAIT      nothing: the watch (a wake job) LIST
 *   DONE      requests may still answer: each is undone (node deleted)
 *
 * Protected mode (Curator's): a create whose answer was lost with the
 * connection may have made our node. Once reconnected (the same session) the
 * job looks for a child carrying its guid (FIND) and uses it, rather than
 * create a second one that would wait behind the first forever; a job that
 * ends before it knows leaves the guid to the orphan sweep.
 *
 * Bounds: a timer at the wait's end (at least ZK_STEP_FLOOR_MS after the
 * start, so that a try gets its round trips) ends any phase: busy while
 * ZooKeeper is connected and we were waiting our turn (a predecessor seen),
 * else an error. A lost connection waits for the reconnect (same session:
 * our node stays); an expired session ends it (the node went with it).
 *
 * Lifetime: a job is shared by the caller and the zk loop, and freed by the
 * last reference (refs under st->mu): the caller's (until lock_try_done or
 * lock_step_cancel), the loop's (until DONE), one per request or posted job
 * in flight. The caller's event is made active only under st->mu and only
 * while not cancelled, and freed by the caller on its own thread, so no
 * completion reaches a caller that gave up (a hold that is gone). A grant
 * the caller never took is deleted by whichever of DONE and the cancel
 * comes second. */
#include "clock.h"
#include "xalloc.h"
#include "zk_impl.h"
#include "zk_loop.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZK_STEP_FLOOR_MS 200
#define ZK_STEP_RECONNECT_US 20000 /* a look at the connection while it is down */

enum zk_phase {
    ZS_CONNECT,
    ZS_PARENTS,
    ZS_CREATE,
    ZS_FIND,
    ZS_STAT,
    ZS_LIST,
    ZS_WATCH,
    ZS_WAIT,
    ZS_DELETE,
    ZS_DONE
};

struct zk_job {
    struct zk_state *st;
    struct zk_conn *conn; /* referenced, until a grant's hold takes it over */
    int refs;             /* under st->mu */
    int finished;         /* under st->mu: res is the outcome */
    int cancelled;        /* under st->mu: the caller gave up or took it */
    lock_status res;
    enum zk_phase phase; /* the zk loop's thread only, as all below */
    int level;           /* PARENTS: the next of root, locks, parent */
    int parent_again;    /* the parent vanished under a create once */
    int lost_create;     /* a create's answer was lost: our node may exist */
    int contended;
    int release;  /* a release: the delete of node (DELETE), not an acquire */
    int watching; /* w is on the conn's list */
    struct zk_waiter w;
    char parent[ZK_PATH_MAX], guid[33], node[ZK_PATH_MAX], pred[ZK_PATH_MAX];
    int64_t czxid, deadline_us, hard_us;
    struct event *timer, *retry; /* on the zk loop: the bound, the reconnect */
    struct event *deliver;       /* on the caller's base */
    lock_step_cb *done;
    void *arg;
};

static void job_ref(struct zk_job *j)
{
    pthread_mutex_lock(&j->st->mu);
    j->refs++;
    pthread_mutex_unlock(&j->st->mu);
}

static void job_put(struct zk_job *j)
{
    pthread_mutex_lock(&j->st->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->st->mu);
    if (!last)
        return;
    zk_conn_put(j->conn);
    pthread_mutex_lock(&j->st->mu);
    if (--j->st->steps == 0)
        pthread_cond_broadcast(&j->st->steps_gone);
    pthread_mutex_unlock(&j->st->mu);
    free(j);
}

void zk_steps_drain(struct zk_state *st)
{
    int64_t until = clock_now_us() + (int64_t)st->timeout_ms * 1000;
    pthread_mutex_lock(&st->mu);
    while (st->steps > 0 && clock_cond_wait_until(&st->steps_gone, &st->mu, until) == 0)
        ;
    pthread_mutex_unlock(&st->mu);
}

static void unwatch(struct zk_job *j)
{
    if (!j->watching)
        return;
    pthread_mutex_lock(&j->st->mu);
    if (j->w.asleep) {
        j->w.asleep = 0;
        lock_count_watch_waiter(j->st->counters, -1);
    }
    pthread_mutex_unlock(&j->st->mu);
    zk_waiter_remove(j->conn, &j->w);
    j->watching = 0;
}

/* The job is over with res: the caller is told unless it gave up; a node
 * nobody will use is deleted. */
static void finish(struct zk_job *j, lock_status res)
{
    if (j->phase == ZS_DONE)
        return;
    j->phase = ZS_DONE;
    event_free(j->timer);
    event_free(j->retry);
    j->timer = j->retry = NULL;
    unwatch(j);
    pthread_mutex_lock(&j->st->mu);
    j->res = res;
    j->finished = 1;
    int cancelled = j->cancelled;
    if (!cancelled)
        event_active(j->deliver, EV_TIMEOUT, 0);
    pthread_mutex_unlock(&j->st->mu);
    /* A node nobody will use any more is deleted in the background (or, its
     * answer lost, left to the orphan sweep): an attempt that did not end
     * holding it, and a release that ended without the delete's answer (its
     * bound came while ZooKeeper was away). Left there, it would block every
     * later contender for as long as the session lives, which a ZooKeeper
     * restart does not end. */
    int unwanted = j->release ? res == LOCK_ERROR : res != LOCK_ACQUIRED || cancelled;
    if (unwanted && j->node[0])
        zk_delete_unwaited(j->conn, j->node, j->guid, j->parent);
    else if (unwanted && j->lost_create) /* not found yet: maybe there */
        zk_orphan_add(j->conn, j->parent, j->guid);
    job_put(j); /* the loop's */
}

static void resume(struct zk_job *j);
static void wake_job(void *arg);
static void delete_send(struct zk_job *j);

/* Asks again once the connection may be back. */
static void later(struct zk_job *j)
{
    j->phase = ZS_CONNECT;
    struct timeval tv = {0, ZK_STEP_RECONNECT_US};
    evtimer_add(j->retry, &tv);
}

/* A request refused by the client (rc not ZOK): the job ends. */
static void refused(struct zk_job *j, int rc)
{
    if (rc == ZOK)
        return;
    job_put(j); /* the request's */
    finish(j, LOCK_ERROR);
}

static int uncertain(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

static void list(struct zk_job *j);
static void parents_next(struct zk_job *j);

static void create_done(int rc, const char *path, const struct Stat *stat,
                        const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase != ZS_CREATE) { /* over meanwhile: nobody wants the node */
        if (rc == ZOK && path)
            zk_delete_unwaited(j->conn, path, j->guid, j->parent);
        else if (uncertain(rc))
            zk_orphan_add(j->conn, j->parent, j->guid);
    } else if (rc == ZOK && path && stat && stat->czxid > 0) {
        snprintf(j->node, sizeof(j->node), "%s", path);
        j->czxid = stat->czxid;
        list(j);
    } else if (rc == ZNONODE && !j->parent_again) { /* deleted since we made it */
        j->parent_again = 1;
        zk_parent_remember(j->st, j->parent, 0);
        j->level = 0;
        parents_next(j);
    } else if (rc == ZCONNECTIONLOSS) { /* made or not: looked for once back */
        j->lost_create = 1;
        later(j);
    } else {
        if (rc == ZOK && path) /* no Stat: no token */
            zk_delete_unwaited(j->conn, path, j->guid, j->parent);
        else if (uncertain(rc))
            zk_orphan_add(j->conn, j->parent, j->guid);
        finish(j, LOCK_ERROR);
    }
    job_put(j);
}

static void create(struct zk_job *j)
{
    char path[ZK_PATH_MAX];
    snprintf(path, sizeof(path), "%s/" ZK_GUID_PREFIX "%s" ZK_NODE_SUFFIX, j->parent,
             j->guid);
    j->phase = ZS_CREATE;
    job_ref(j);
    refused(j, zoo_acreate2(j->conn->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, create_done, j));
}

static void stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase == ZS_STAT) {
        if (rc == ZOK && stat && stat->czxid > 0) {
            j->czxid = stat->czxid;
            j->lost_create = 0;
            list(j);
        } else if (rc == ZNONODE) { /* gone meanwhile: a new one */
            j->node[0] = '\0';
            j->lost_create = 0;
            create(j);
        } else if (rc == ZCONNECTIONLOSS) {
            later(j); /* FIND again */
        } else {
            finish(j, LOCK_ERROR);
        }
    }
    job_put(j);
}

static void found(int rc, const struct String_vector *kids, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase != ZS_FIND) {
        job_put(j);
        return;
    }
    for (int i = 0; rc == ZOK && kids && i < kids->count && !j->node[0]; i++)
        if (zk_has_guid(kids->data[i], j->guid))
            snprintf(j->node, sizeof(j->node), "%s/%s", j->parent, kids->data[i]);
    if (rc == ZOK && j->node[0]) { /* ours: its czxid is the token */
        j->phase = ZS_STAT;
        job_ref(j);
        refused(j, zoo_aexists(j->conn->zh, j->node, 0, stat_done, j));
    } else if (rc == ZOK || rc == ZNONODE) { /* never made */
        j->lost_create = 0;
        j->level = 0;
        parents_next(j);
    } else if (rc == ZCONNECTIONLOSS) {
        later(j);
    } else {
        finish(j, LOCK_ERROR);
    }
    job_put(j);
}

/* After a create whose answer was lost: our node, if the create made it, is
 * the child carrying our guid. */
static void find(struct zk_job *j)
{
    j->phase = ZS_FIND;
    j->node[0] = '\0';
    job_ref(j);
    refused(j, zoo_aget_children(j->conn->zh, j->parent, 0, found, j));
}

static void parent_done(int rc, const char *path, const void *data)
{
    (void)path;
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase == ZS_PARENTS) {
        if (rc == ZOK || rc == ZNODEEXISTS) {
            j->level++;
            parents_next(j);
        } else if (rc == ZCONNECTIONLOSS) {
            later(j);
        } else {
            finish(j, LOCK_ERROR);
        }
    }
    job_put(j);
}

/* Creates /seckill, /seckill/locks and the lock's parent unless known to
 * exist, one level after the other, then our node. */
static void parents_next(struct zk_job *j)
{
    if (j->level == 0 && zk_parent_known(j->st, j->parent))
        j->level = 3;
    if (j->level >= 3) {
        zk_parent_remember(j->st, j->parent, 1);
        create(j);
        return;
    }
    const char *levels[] = {ZK_ROOT, ZK_LOCKS, j->parent};
    j->phase = ZS_PARENTS;
    job_ref(j);
    refused(j, zoo_acreate(j->conn->zh, levels[j->level], NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                           0, parent_done, j));
}

/* The predecessor's watch fired, or the session expired: under st->mu. */
static void woken(struct zk_waiter *w)
{
    struct zk_job *j = w->ctx;
    j->refs++;
    zk_loop_post(j->st->loop, wake_job, j);
}

/* A wake that finds the job listing (watching all: the list's own watch
 * fired before its answer came) is taken up by asleep() once it answers; one
 * for a watch since given up (woken not set on the waiter now) is stale. */
static void wake_job(void *arg)
{
    struct zk_job *j = arg;
    pthread_mutex_lock(&j->st->mu);
    int woken = j->w.woken;
    pthread_mutex_unlock(&j->st->mu);
    if (j->watching && woken && (j->phase == ZS_WAIT || j->phase == ZS_WATCH)) {
        unwatch(j);
        resume(j); /* lists again, or ends on an expired session */
        zk_conn_arm(j->conn);
    }
    job_put(j);
}

static void asleep(struct zk_job *j);

static void watch_done(int rc, const char *value, int len, const struct Stat *stat,
                       const void *data)
{
    (void)value, (void)len, (void)stat;
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase == ZS_WATCH && j->watching) {
        if (rc == ZOK) {
            asleep(j);
        } else if (rc == ZNONODE) { /* gone before we could watch it */
            unwatch(j);
            list(j);
        } else if (rc == ZCONNECTIONLOSS) {
            unwatch(j);
            later(j);
        } else {
            finish(j, LOCK_ERROR);
        }
    }
    job_put(j);
}

/* Puts the job on the list of waiters for a watch on path, before the
 * request that sets the watch: a fire cannot be missed. */
static void watch_on(struct zk_job *j, const char *path)
{
    zk_waiter_add(j->conn, &j->w, path);
    j->w.wake = woken; /* on this thread, as the watcher: not missed */
    j->w.ctx = j;
    j->watching = 1;
}

/* Asleep on the watch just set, unless it already fired: then it lists
 * again now (a wake job that came while it listed did nothing). */
static void asleep(struct zk_job *j)
{
    j->phase = ZS_WAIT;
    pthread_mutex_lock(&j->st->mu);
    int woken = j->w.woken;
    if (!woken) {
        j->w.asleep = 1;
        lock_count_watch_waiter(j->st->counters, 1);
    }
    pthread_mutex_unlock(&j->st->mu);
    if (woken) { /* fired already, perhaps while the list was on its way */
        lock_count_wakeup(j->st->counters);
        unwatch(j);
        list(j);
    }
}

static void watch(struct zk_job *j)
{
    j->phase = ZS_WATCH;
    watch_on(j, j->pred);
    job_ref(j);
    refused(j, zk_awatch(j->conn, j->pred, watch_done, j));
}

static void list_done(int rc, const struct String_vector *kids, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase != ZS_LIST) {
        job_put(j);
        return;
    }
    int herd = j->watching; /* the children's watch came with the list */
    if (rc == ZOK) {
        char *none[1];
        int n = kids ? kids->count : 0;
        rc = zk_predecessor(j->conn, n ? kids->data : none, n, j->parent, j->node,
                            j->guid, j->pred, sizeof(j->pred));
        if (rc == ZNONODE) { /* ours was deleted under us: a new one */
            unwatch(j);
            j->node[0] = '\0';
            lock_token_new(j->guid);
            if (clock_now_us() < j->deadline_us)
                resume(j);
            else
                finish(j, LOCK_ERROR);
        } else if (!j->pred[0]) {
            finish(j, LOCK_ACQUIRED);
        } else {
            j->contended = 1;
            if (clock_now_us() >= j->deadline_us)
                finish(j, LOCK_BUSY);
            else if (herd)
                asleep(j);
            else
                watch(j);
        }
    } else if (rc == ZCONNECTIONLOSS) {
        unwatch(j);
        later(j); /* our node stays with the session */
    } else {
        finish(j, LOCK_ERROR);
    }
    job_put(j);
}

/* Lists the children; watching all (the herd), it also watches them in the
 * same request, and a waiter sleeps on that watch (WAIT) instead of a
 * predecessor's. */
static void list(struct zk_job *j)
{
    j->phase = ZS_LIST;
    job_ref(j);
    if (j->st->watch == LOCK_ZK_WATCH_ALL) {
        watch_on(j, j->parent);
        refused(j, zk_alist_watch(j->conn, j->parent, list_done, j));
    } else {
        refused(j, zoo_aget_children(j->conn->zh, j->parent, 0, list_done, j));
    }
}

/* Goes on from where the job is, once connected. */
static void resume(struct zk_job *j)
{
    pthread_mutex_lock(&j->st->mu);
    int connected = j->conn->connected, expired = j->conn->expired;
    pthread_mutex_unlock(&j->st->mu);
    if (expired) {
        j->node[0] = '\0'; /* gone with the session */
        finish(j, j->release ? LOCK_NOT_HELD : LOCK_ERROR);
    } else if (!connected) {
        later(j);
    } else if (j->release) {
        delete_send(j);
    } else if (j->lost_create) {
        find(j);
    } else if (!j->node[0]) {
        j->level = 0;
        parents_next(j);
    } else {
        list(j);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct zk_job *j = arg;
    job_ref(j);
    resume(j);
    zk_conn_arm(j->conn);
    job_put(j);
}

/* The wait's end: busy when it ran out while ZooKeeper was there to ask and
 * we were waiting our turn: a predecessor was seen (contended), whether we
 * are asleep, setting a watch, or listing again after a wake (only a list
 * that found a predecessor leads to WATCH or WAIT). */
static void on_bound(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct zk_job *j = arg;
    int64_t left = j->hard_us - clock_now_us();
    if (left > 0) { /* early: libevent counts from its cached time */
        struct timeval tv = {.tv_sec = left / 1000000, .tv_usec = left % 1000000};
        evtimer_add(j->timer, &tv);
        return;
    }
    pthread_mutex_lock(&j->st->mu);
    int connected = j->conn->connected;
    pthread_mutex_unlock(&j->st->mu);
    struct zk_conn *c = j->conn;
    job_ref(j);
    if (j->release) /* no answer to the delete: the session's fate tells */
        finish(j, zk_conn_expired(c) ? LOCK_NOT_HELD : LOCK_ERROR);
    else
        finish(j, j->contended && connected ? LOCK_BUSY : LOCK_ERROR);
    zk_conn_arm(c);
    job_put(j);
}

static void delete_done(int rc, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase == ZS_DELETE && rc == ZCONNECTIONLOSS) {
        later(j); /* the same session back: again; an expired one: not held */
        job_put(j);
        return;
    }
    if (uncertain(rc)) /* the node may still be there */
        zk_orphan_add(j->conn, j->parent, j->guid);
    if (rc == ZOK)
        finish(j, LOCK_RELEASED);
    else if (rc == ZNONODE || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE)
        finish(j, LOCK_NOT_HELD); /* deleted under us, or the session went */
    else
        finish(j, LOCK_ERROR);
    job_put(j);
}

static void delete_send(struct zk_job *j)
{
    j->phase = ZS_DELETE;
    job_ref(j);
    refused(j, zoo_adelete(j->conn->zh, j->node, -1, delete_done, j));
}

static void start_job(void *arg)
{
    struct zk_job *j = arg;
    struct event_base *base = zk_loop_base(j->st->loop);
    j->timer = evtimer_new(base, on_bound, j);
    j->retry = evtimer_new(base, on_retry, j);
    int64_t left = j->hard_us - clock_now_us();
    left = left > 0 ? left : 0;
    struct timeval tv = {.tv_sec = left / 1000000, .tv_usec = left % 1000000};
    evtimer_add(j->timer, &tv);
    struct zk_conn *c = j->conn;
    job_ref(j);
    if (j->release)
        delete_send(j);
    else
        resume(j);
    zk_conn_arm(c);
    job_put(j);
}

static void cancel_job(void *arg)
{
    struct zk_job *j = arg;
    struct zk_conn *c = j->conn;
    finish(j, LOCK_ERROR); /* no-op when it was over */
    zk_conn_arm(c);
    job_put(j);
}

static void on_deliver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct zk_job *j = arg;
    j->done(j->arg);
}

/* ---- the caller's side (its event loop's thread) ----------------------- */

#define PHASE_REENTER 1
#define PHASE_RELEASE 2

void zk_try_cmd(void *session, const char *key, struct lock_step *st)
{
    struct zk_session *s = session;
    struct zk_hold *h = zk_hold_find(s, key);
    if (h && zk_hold_alive(s->st, h)) {
        st->phase = PHASE_REENTER; /* decided at once, in try_done */
        return;
    }
    if (h) /* lost: its grants release as NOT_HELD; this one is new */
        h->detached = 1;
    st->async = 1;
}

/* A release's job: the delete of the node of the last grant of a hold
 * whose session lives (1); else nothing to delete (0): the job ends at once
 * and release_done decides as zk_hold_release does. */
static int release_job(struct zk_session *s, struct zk_job *j, const char *key,
                       const struct lock_grant *g)
{
    struct zk_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0 || h->depth > 1 || !zk_hold_alive(s->st, h))
        return 0;
    j->release = 1;
    j->conn = h->conn;
    pthread_mutex_lock(&s->st->mu);
    h->conn->refs++; /* the job's own: the hold may go first (a cancel) */
    pthread_mutex_unlock(&s->st->mu);
    snprintf(j->node, sizeof(j->node), "%s", h->node);
    snprintf(j->guid, sizeof(j->guid), "%s", h->guid);
    zk_parent_of(h->node, j->parent, sizeof(j->parent));
    j->hard_us = clock_now_us() + (int64_t)s->st->timeout_ms * 1000;
    return 1;
}

void zk_step_start(void *session, const char *key, struct lock_step *st,
                   struct event_base *base, lock_step_cb *done, void *arg)
{
    struct zk_session *s = session;
    struct zk_job *j = xcalloc(1, sizeof(*j));
    j->st = s->st;
    j->done = done;
    j->arg = arg;
    j->deliver = event_new(base, -1, 0, on_deliver, j);
    j->refs = 1; /* the caller's */
    st->job = j;
    pthread_mutex_lock(&s->st->mu);
    s->st->steps++;
    pthread_mutex_unlock(&s->st->mu);
    if (st->phase == PHASE_RELEASE) {
        if (!release_job(s, j, key, st->g)) {
            j->res = LOCK_RELEASED; /* not used: release_done decides */
            j->finished = 1;
            event_active(j->deliver, EV_TIMEOUT, 0);
            return;
        }
        j->refs++; /* the loop's */
        zk_loop_post(s->st->loop, start_job, j);
        return;
    }
    int64_t floor_us = clock_now_us() + (int64_t)ZK_STEP_FLOOR_MS * 1000;
    j->deadline_us = st->deadline_us;
    j->hard_us = st->deadline_us > floor_us ? st->deadline_us : floor_us;
    lock_token_new(j->guid);
    if (zk_key_path(key, j->parent, sizeof(j->parent)) != 0 ||
        !(j->conn = zk_conn_get(s->st))) {
        j->res = LOCK_ERROR;
        j->finished = 1;
        event_active(j->deliver, EV_TIMEOUT, 0);
        return;
    }
    j->refs++; /* the loop's */
    zk_loop_post(s->st->loop, start_job, j);
}

lock_status zk_try_done(void *session, const char *key, struct lock_step *st,
                        struct lock_grant *g)
{
    struct zk_session *s = session;
    struct zk_job *j = st->job;
    if (!j) { /* a re-entry (or nothing started) */
        struct zk_hold *h = zk_hold_find(s, key);
        if (st->phase != PHASE_REENTER || !h || !zk_hold_alive(s->st, h))
            return LOCK_ERROR;
        h->depth++;
        zk_grant_fill(s->st, h, 0, g);
        return LOCK_ACQUIRED;
    }
    st->job = NULL;
    pthread_mutex_lock(&s->st->mu);
    j->cancelled = 1; /* taken: nothing more is delivered */
    lock_status res = j->finished ? j->res : LOCK_ERROR;
    pthread_mutex_unlock(&s->st->mu);
    event_free(j->deliver);
    if (res == LOCK_ACQUIRED) {
        struct zk_hold *h =
            zk_hold_new(s, key, j->conn, j->czxid, j->guid, j->node); /* its conn */
        j->conn = NULL;
        zk_grant_fill(s->st, h, j->contended, g);
    }
    st->contended |= j->contended;
    job_put(j);
    return res;
}

void zk_step_cancel(void *session, struct lock_step *st)
{
    struct zk_session *s = session;
    struct zk_job *j = st->job;
    st->job = NULL;
    pthread_mutex_lock(&s->st->mu);
    j->cancelled = 1;
    int finished = j->finished;
    pthread_mutex_unlock(&s->st->mu);
    event_free(j->deliver);
    if (finished && j->res == LOCK_ACQUIRED) /* granted, never taken */
        zk_delete_unwaited(j->conn, j->node, j->guid, j->parent);
    else if (!finished && j->conn) { /* ends it now rather than at its bound */
        job_ref(j);
        zk_loop_post(s->st->loop, cancel_job, j);
    }
    job_put(j);
}

void zk_release_cmd(void *session, const char *key, struct lock_grant *g,
                    struct lock_step *st)
{
    (void)session, (void)key, (void)g;
    st->async = 1;
    st->phase = PHASE_RELEASE;
    st->after = 1; /* the delete goes once the commit answered */
}

lock_status zk_release_done(void *session, const char *key, struct lock_grant *g,
                            struct lock_step *st)
{
    struct zk_session *s = session;
    struct zk_job *j = st ? st->job : NULL;
    if (!j || !j->release) {
        if (j)
            zk_step_cancel(session, st);
        /* never sent, or nothing to delete: a node has no lease that would
         * run out, so it goes now (unwaited) */
        return zk_hold_release(session, key, g, 0);
    }
    st->job = NULL;
    pthread_mutex_lock(&s->st->mu);
    j->cancelled = 1;
    lock_status res = j->finished ? j->res : LOCK_ERROR;
    pthread_mutex_unlock(&s->st->mu);
    event_free(j->deliver);
    job_put(j);
    struct zk_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    zk_hold_free(h); /* its last grant (release_job) */
    return res;
}
