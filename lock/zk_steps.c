/* zk_steps: the zk lock's requests as jobs on the zk loop (zk_impl.h): the
 * ZooKeeper recipe, for the steps of lock_zk.c, done elsewhere (lock.h:
 * st->async). An acquire is a job of the zk loop's thread (zk_loop.h), a
 * state machine driven by the completions of asynchronous requests and by
 * the watch on the predecessor, never blocking: create our
 * EPHEMERAL_SEQUENTIAL node, list the children, lowest holds, else watch the
 * immediate predecessor and list again once it goes; the node's czxid is the
 * fencing token. Watching all (--zk-watch all, the herd), the list itself
 * sets a watch on the children and the waiter sleeps on it: LIST goes to
 * WAIT, and any child that comes or goes lists again. Once it is over
 * (granted, busy at the wait's end, failed) an event of the caller's base is
 * made active, and the caller takes the outcome (zk_job_take).
 *
 *   phase     in flight                       then
 *   CONNECT   nothing: a timer (not connected) PARENTS/CREATE, FIND, or LIST
 *   PARENTS   a create of a parent level      the next level, then CREATE
 *   CREATE    the create of our node          LIST, or RWCHECK (a reader of a
 *                                             read-write lock); PARENTS: parent
 *                                             gone; CONNECT: its answer lost
 *   FIND      the children, for our guid      STAT (found), CREATE (none)
 *   STAT      our node's czxid                LIST (or RWCHECK)
 *   RWCHECK   the read-write lock's children  LIST (no writer), DONE (busy:
 *                                             a writer; the caller polls)
 *   LIST      the children                    DONE (held), READERS (a writer
 *                                             over readers: our turn), WATCH
 *                                             (or WAIT, watching all), DONE
 *                                             (busy)
 *   READERS   the readers' children, czxids   DONE (none older than us),
 *                                             WATCH (one of them), PAUSE
 *                                             (none known by name)
 *   PAUSE     nothing: a timer (1 ms .. 20 ms) LIST
 *   WATCH     the watch on the predecessor    WAIT, or LIST (it went)
 *             (or a reader that keeps us out)
 *   WAIT      nothing: the watch (a wake job) LIST
 *   DELETE    a release's delete of our node  DONE
 *   DONE      requests may still answer: each is undone (node deleted)
 *
 * The read-write lock (Curator's InterProcessReadWriteLock): the node of a
 * side is "-read-" or "-write-" where the plain lock's is "-lock-", under the
 * same parent and in one sequence; a writer waits for the nearest node
 * before it of either side, a reader only for the nearest write node (the
 * readers between share), so a waiting writer's node keeps out every reader
 * that comes after it (writer preference). Plain and read-write nodes never
 * wait for each other: a key is one or the other (lock.h).
 *
 * Segment locks as readers (lock.h: lock_step_read_of, lock_rw_write_over):
 * a plain lock that reads a read-write lock lists that lock's node right
 * behind the create of its own, in the same pipeline (a zhandle answers in
 * order: no round trip more), and finding a "-write-" child there gives up
 * (its node deleted, busy: the caller polls, 1 ms doubling to 20 ms). Once
 * queued, it looks again with each list of its queue (the look sent before
 * the list, answered first: no round trip more) and makes way the same way
 * when a writer came meanwhile, so that the writer waits for the hold in
 * progress only, not for the whole queue before its node (which it would
 * have to: those nodes are older). One whose caller reads already (held) does not look,
 * and its node's guid is marked (ZK_HELD_MARK). A writer over readers, its turn come
 * (LIST), lists each reader's node and asks each child's czxid (READERS, pipelined): a
 * child older than our node, or marked held, keeps it waiting: asleep on a
 * watch of one such node (WATCH, WAIT), then LIST again, its node kept: that node is what
 * keeps new readers out. Younger children are ignored: each was made after ours, so its
 * list of the read-write lock came after ours too and saw it (ZooKeeper applies writes in
 * zxid order, and a client reads after its own writes), and it goes away; counting them
 * would let a stream of them starve the writer. A plain lock's re-entry (lock_zk.c, in
 * memory) asks nothing: the order path never re-enters a segment (one hold per segment
 * per loop).
 *
 * Protected mode (Curator's): a create whose answer was lost with the
 * connection may have made our node. Once reconnected (the same session) the
 * job looks for a child carrying its guid (FIND) and uses it, rather than
 * create a second one that would wait behind the first forever; a job that
 * ends before it knows leaves the guid to the orphan sweep.
 *
 * Bounds: a timer at the wait's end (at least ZK_STEP_FLOOR_MS after the
 * start, so that a try gets its round trips) ends any phase: busy while
 * ZooKeeper is connected and we were waiting our turn (a predecessor seen) or
 * only trying (a wait shorter than the floor), else an error. A lost
 * connection waits for the reconnect (same session: our node stays); an
 * expired session ends it (the node went with it).
 *
 * Lifetime: a job is shared by the caller and the zk loop, and freed by the
 * last reference (refs under st->mu): the caller's (until zk_job_take or
 * zk_job_cancel), the loop's (until DONE), one per request or posted job
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
#define ZK_SEQ_DIGITS 10
/* A writer's pause while readers older than it hold (as redis_impl.h's
 * RW_POLL_*), and a refused reader's before its next attempt. */
#define ZK_READERS_POLL_FIRST_US 1000
#define ZK_READERS_POLL_MAX_US 20000

/* ---- the recipe's pieces ------------------------------------------------ */

/* The node kinds and the suffix each one's name carries. A plain lock's
 * node whose caller reads the same read-write lock already (zk_job_read_of),
 * which a writer counts whatever its age, carries ZK_HELD_MARK as its
 * guid's first character: a suffix of its own would be a name that an
 * earlier build does not parse, and skips as nobody's (two holders, during
 * a rolling upgrade). */
static const struct {
    const char *suffix;
    lock_side side;
} node_kinds[] = {
    {ZK_NODE_SUFFIX, LOCK_EXCLUSIVE},
    {ZK_READ_SUFFIX, LOCK_READ},
    {ZK_WRITE_SUFFIX, LOCK_WRITE},
};

static const char *node_suffix(lock_side side)
{
    for (size_t i = 0; i < sizeof(node_kinds) / sizeof(node_kinds[0]); i++)
        if (node_kinds[i].side == side)
            return node_kinds[i].suffix;
    return ZK_NODE_SUFFIX;
}

/* The sequence number of one of our node names, its kind in *side and
 * whether it is a held reader's in *held (NULL: not wanted); -1 for any
 * other name. */
static long long node_seq(const char *name, lock_side *side, int *held)
{
    size_t len = strlen(name);
    if (strncmp(name, ZK_GUID_PREFIX, strlen(ZK_GUID_PREFIX)) != 0 || len < ZK_SEQ_DIGITS)
        return -1;
    const char *digits = name + len - ZK_SEQ_DIGITS;
    int kind = -1;
    for (size_t i = 0; i < sizeof(node_kinds) / sizeof(node_kinds[0]) && kind < 0; i++) {
        size_t slen = strlen(node_kinds[i].suffix);
        if (len >= ZK_SEQ_DIGITS + slen &&
            strncmp(digits - slen, node_kinds[i].suffix, slen) == 0)
            kind = (int)i;
    }
    if (kind < 0)
        return -1;
    long long seq = 0;
    for (const char *p = digits; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        seq = seq * 10 + (*p - '0');
    }
    *side = node_kinds[kind].side;
    if (held)
        *held = *side == LOCK_EXCLUSIVE && name[strlen(ZK_GUID_PREFIX)] == ZK_HELD_MARK;
    return seq;
}

/* Whether a node of side theirs before ours (of side mine) keeps us waiting
 * (Curator's InterProcessReadWriteLock for the two sides): the plain lock
 * waits for any plain node, a writer for any read or write node, a reader
 * only for a write node. */
static int waits_for(lock_side mine, lock_side theirs)
{
    if (mine == LOCK_EXCLUSIVE)
        return theirs == LOCK_EXCLUSIVE;
    if (mine == LOCK_WRITE)
        return theirs != LOCK_EXCLUSIVE;
    return theirs == LOCK_WRITE;
}

/* Which of kids[0..n-1] (children of parent) our node (its path, of side)
 * waits for: the nearest before it of a kind it waits for (waits_for). ZOK
 * with pred its path, "" when there is none (ours holds); ZNONODE when ours
 * is not among them. Deletes (on c) any other node carrying our guid. */
static int predecessor(struct zk_conn *c, char **kids, int n, const char *parent,
                       const char *node, lock_side side, const char *guid, char *pred,
                       size_t len)
{
    const char *mine = strrchr(node, '/') + 1;
    long long my_seq = -1, best_seq = -1;
    int best = -1;
    lock_side kind;
    for (int i = 0; i < n; i++) {
        if (strcmp(kids[i], mine) == 0) {
            my_seq = node_seq(mine, &kind, NULL);
        } else if (zk_has_guid(kids[i], guid)) {
            /* A second node of this attempt: a create whose answer was lost
             * and that reached the server after FIND looked. No guid for the
             * orphan sweep, which would delete ours too: a lost delete is
             * tried again by the next listing. */
            char dup[ZK_PATH_MAX];
            snprintf(dup, sizeof(dup), "%s/%s", parent, kids[i]);
            zk_delete_unwaited(c, dup, "", parent);
            kids[i][0] = '\0'; /* not a predecessor */
        }
    }
    for (int i = 0; i < n && my_seq >= 0; i++) {
        long long seq = node_seq(kids[i], &kind, NULL);
        if (seq >= 0 && seq < my_seq && seq > best_seq && waits_for(side, kind)) {
            best_seq = seq;
            best = i;
        }
    }
    pred[0] = '\0';
    if (best >= 0)
        snprintf(pred, len, "%s/%s", parent, kids[best]);
    return my_seq >= 0 ? ZOK : ZNONODE;
}

/* ---- jobs ---------------------------------------------------------------- */

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
    for (int i = 0; i < j->asked_paths_n; i++)
        free(j->asked_paths[i]);
    free(j->asked_paths);
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

static void list(struct zk_job *j);
static void parents_next(struct zk_job *j);
static void rw_check(struct zk_job *j);
static void rw_ask(struct zk_job *j);
static void readers_check(struct zk_job *j);
static void make_way(struct zk_job *j);

/* True when j is a reader of a read-write lock that looks for its writer. */
static int reads_rw(const struct zk_job *j)
{
    return j->rw_parent[0] && !j->held;
}

/* Our node is made (or found): a reader of a read-write lock looks for a
 * writer first (the look sent behind the create already: sent), then the
 * children are listed. */
static void made(struct zk_job *j, int sent)
{
    if (!reads_rw(j) || j->rw_checked)
        list(j);
    else if (sent)
        j->phase = ZS_RWCHECK; /* its answer comes next */
    else
        rw_check(j);
}

static void create_done(int rc, const char *path, const struct Stat *stat,
                        const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase != ZS_CREATE) { /* over meanwhile: nobody wants the node */
        if (rc == ZOK && path)
            zk_delete_unwaited(j->conn, path, j->guid, j->parent);
        else if (zk_rc_uncertain(rc))
            zk_orphan_add(j->conn, j->parent, j->guid);
    } else if (rc == ZOK && path && stat && stat->czxid > 0) {
        snprintf(j->node, sizeof(j->node), "%s", path);
        j->czxid = stat->czxid;
        made(j, 1);
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
        else if (zk_rc_uncertain(rc))
            zk_orphan_add(j->conn, j->parent, j->guid);
        finish(j, LOCK_ERROR);
    }
    job_put(j);
}

static void create(struct zk_job *j)
{
    char path[ZK_PATH_MAX];
    if (j->held)
        j->guid[0] = ZK_HELD_MARK; /* before the name, FIND and the sweep use it */
    snprintf(path, sizeof(path), "%s/" ZK_GUID_PREFIX "%s%s", j->parent, j->guid,
             node_suffix(j->side));
    j->phase = ZS_CREATE;
    j->rw_checked = 0; /* a new node: its own look */
    job_ref(j);
    int rc = zoo_acreate2(j->conn->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                          ZOO_EPHEMERAL_SEQUENTIAL, create_done, j);
    refused(j, rc);
    if (rc == ZOK && reads_rw(j)) /* in the same pipeline: no round trip */
        rw_ask(j);
}

static void stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    if (j->phase == ZS_STAT) {
        if (rc == ZOK && stat && stat->czxid > 0) {
            j->czxid = stat->czxid;
            j->lost_create = 0;
            made(j, 0);
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
    zk_waiter_add(j->conn, &j->w, path, woken, j);
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
    if (rc == ZOK && j->rw_writer) { /* a writer came while we queued */
        unwatch(j);
        make_way(j);
    } else if (rc == ZOK) {
        char *none[1];
        int n = kids ? kids->count : 0;
        rc = predecessor(j->conn, n ? kids->data : none, n, j->parent, j->node, j->side,
                         j->guid, j->pred, sizeof(j->pred));
        if (rc == ZNONODE) { /* ours was deleted under us: a new one */
            unwatch(j);
            j->node[0] = '\0';
            lock_token_new(j->guid);
            if (clock_now_us() < j->deadline_us)
                resume(j);
            else
                finish(j, LOCK_ERROR);
        } else if (!j->pred[0] && j->nreaders > 0) {
            readers_check(j); /* our turn: the readers that came before us */
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
static void rw_relooked(int rc, const struct String_vector *kids, const void *data);

static void list(struct zk_job *j)
{
    j->phase = ZS_LIST;
    j->rw_writer = 0;
    if (reads_rw(j) && !j->rw_fresh) { /* a queued reader: answered before the list */
        job_ref(j);
        if (zoo_aget_children(j->conn->zh, j->rw_parent, 0, rw_relooked, j) != ZOK)
            job_put(j); /* the list's own request tells what went wrong */
    }
    j->rw_fresh = 0;
    job_ref(j);
    if (j->st->watch == LOCK_ZK_WATCH_ALL) {
        watch_on(j, j->parent);
        refused(j, zk_alist_watch(j->conn, j->parent, list_done, j));
    } else {
        refused(j, zoo_aget_children(j->conn->zh, j->parent, 0, list_done, j));
    }
}

/* ---- segment locks as readers (lock.h: lock_step_read_of) -------------- */

/* True when the read-write lock's children (a look's answer rc, kids) hold
 * a writer's node; ZNONODE (no such node) has none. */
static int writer_there(int rc, const struct String_vector *kids)
{
    lock_side kind;
    for (int i = 0; rc == ZOK && kids && i < kids->count; i++)
        if (node_seq(kids->data[i], &kind, NULL) >= 0 && kind == LOCK_WRITE)
            return 1;
    return 0;
}

/* A reader that found a writer: it counts us or waits for us to go, so we
 * go (our node deleted, busy: the caller polls). */
static void make_way(struct zk_job *j)
{
    j->contended = 1;
    j->writer_seen = 1;
    finish(j, LOCK_BUSY);
}

static void rw_listed(int rc, const struct String_vector *kids, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    j->rw_asked--;
    if (j->phase != ZS_RWCHECK || j->rw_asked > 0) { /* not the last look */
        job_put(j);
        return;
    }
    if (rc == ZOK || rc == ZNONODE) {
        if (writer_there(rc, kids)) {
            make_way(j);
        } else {
            j->rw_checked = 1;
            j->rw_fresh = 1;
            list(j);
        }
    } else if (rc == ZCONNECTIONLOSS) {
        later(j); /* looks again once back */
    } else {
        finish(j, LOCK_ERROR);
    }
    job_put(j);
}

/* The look a queued reader sends with each list of its queue (list): a
 * writer there, and it makes way at once (list_done) rather than hold the
 * writer back for the whole queue before it. */
static void rw_relooked(int rc, const struct String_vector *kids, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    j->rw_writer = writer_there(rc, kids);
    job_put(j);
}

/* Lists the read-write lock's node: its writer's node, if any. Sent right
 * behind the create of ours, it reads after our node is made. */
static void rw_ask(struct zk_job *j)
{
    j->rw_asked++;
    job_ref(j);
    int rc = zoo_aget_children(j->conn->zh, j->rw_parent, 0, rw_listed, j);
    if (rc != ZOK)
        j->rw_asked--;
    refused(j, rc);
}

/* The look on its own: our node was found (FIND), or the first look's
 * answer was lost. */
static void rw_check(struct zk_job *j)
{
    j->phase = ZS_RWCHECK;
    rw_ask(j);
}

/* The readers' round is over: granted, or a pause and our turn again. */
static void readers_over(struct zk_job *j)
{
    if (j->readers_rc == ZCONNECTIONLOSS) {
        later(j); /* lists again once back */
    } else if (j->readers_rc != ZOK) {
        finish(j, LOCK_ERROR);
    } else if (!j->old_readers) {
        finish(j, LOCK_ACQUIRED);
    } else if (j->blocker[0]) { /* asleep on its node until it goes, then again */
        j->contended = 1;
        snprintf(j->pred, sizeof(j->pred), "%s", j->blocker);
        watch(j);
    } else {
        j->contended = 1;
        if (clock_now_us() >= j->deadline_us) {
            finish(j, LOCK_BUSY);
            return;
        }
        j->poll_us = j->poll_us ? j->poll_us * 2 : ZK_READERS_POLL_FIRST_US;
        if (j->poll_us > ZK_READERS_POLL_MAX_US)
            j->poll_us = ZK_READERS_POLL_MAX_US;
        j->phase = ZS_PAUSE; /* then resume: our node listed, the readers */
        struct timeval tv = {0, (suseconds_t)j->poll_us};
        evtimer_add(j->retry, &tv);
    }
}

/* One answer of the round less in flight. */
static void readers_answered(struct zk_job *j)
{
    if (--j->asked == 0 && j->phase == ZS_READERS)
        readers_over(j);
}

static void reader_stat(int rc, const struct Stat *stat, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    int i = j->asked_paths_next++; /* answers come in the order asked */
    if (j->phase == ZS_READERS) {
        if (rc == ZOK && stat && stat->czxid < j->czxid) {
            j->old_readers++; /* made before ours: it may not have seen us */
            if (!j->blocker[0] && i < j->asked_paths_n)
                snprintf(j->blocker, sizeof(j->blocker), "%s", j->asked_paths[i]);
        } else if (rc != ZOK && rc != ZNONODE && j->readers_rc == ZOK)
            j->readers_rc = rc;
    }
    readers_answered(j);
    job_put(j);
}

/* Asks for path's czxid; 0 when refused (the first failure noted). */
static int reader_ask(struct zk_job *j, const char *path)
{
    j->asked++;
    job_ref(j);
    int rc = zoo_aexists(j->conn->zh, path, 0, reader_stat, j);
    if (rc == ZOK) {
        if (j->asked_paths_n == j->asked_paths_cap) {
            j->asked_paths_cap = j->asked_paths_cap ? 2 * j->asked_paths_cap : 8;
            j->asked_paths = xrealloc(j->asked_paths, (size_t)j->asked_paths_cap *
                                                          sizeof(*j->asked_paths));
        }
        j->asked_paths[j->asked_paths_n++] = xstrdup(path);
        return 1;
    }
    j->asked--;
    j->readers_rc = j->readers_rc == ZOK ? rc : j->readers_rc;
    job_put(j);
    return 0;
}

/* The children of reader i (answers come in the order asked: the lists of
 * a round are all sent before any of them answers). A held reader's node
 * counts whatever its age; another's czxid is asked. */
static void readers_listed(int rc, const struct String_vector *kids, const void *data)
{
    struct zk_job *j = (struct zk_job *)data;
    int i = j->answered++;
    if (j->phase == ZS_READERS && rc == ZOK && kids) {
        lock_side kind;
        int held;
        for (int k = 0; k < kids->count; k++) {
            if (node_seq(kids->data[k], &kind, &held) < 0 || kind != LOCK_EXCLUSIVE)
                continue;
            char path[ZK_PATH_MAX];
            snprintf(path, sizeof(path), "%s%d/%s", j->readers, i, kids->data[k]);
            if (held) {
                j->old_readers++;
                if (!j->blocker[0])
                    snprintf(j->blocker, sizeof(j->blocker), "%s", path);
                continue;
            }
            if (!reader_ask(j, path))
                break;
        }
    } else if (j->phase == ZS_READERS && rc != ZNONODE && j->readers_rc == ZOK) {
        j->readers_rc = rc;
    }
    readers_answered(j);
    job_put(j);
}

/* Our turn on the read-write lock: granted once no reader that came before
 * our node (or that holds another segment already) is there. Readers whose
 * node is younger than ours saw ours (they list the read-write lock after
 * their create: zxid order) and go away; counting them would let a stream
 * of them starve us. */
static void readers_check(struct zk_job *j)
{
    unwatch(j); /* watching all: no sleep on the children now */
    j->phase = ZS_READERS;
    j->answered = j->old_readers = 0;
    for (int i = 0; i < j->asked_paths_n; i++)
        free(j->asked_paths[i]);
    j->asked_paths_n = j->asked_paths_next = 0;
    j->blocker[0] = '\0';
    j->readers_rc = ZOK;
    j->asked = 1; /* ours, until all are sent */
    for (int i = 0; i < j->nreaders; i++) {
        char path[ZK_PATH_MAX];
        snprintf(path, sizeof(path), "%s%d", j->readers, i);
        j->asked++;
        job_ref(j);
        int rc = zoo_aget_children(j->conn->zh, path, 0, readers_listed, j);
        if (rc != ZOK) {
            j->asked--;
            j->readers_rc = rc;
            job_put(j);
            break;
        }
    }
    readers_answered(j);
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
        made(j, 0);
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
    /* A try (its wait shorter than the floor) not answered by then, on a connected
     * session, is busy too: it asked for the lock now, and did not get it. (A loop
     * that holds other segments tries the next one; on a busy machine ZooKeeper's
     * answers took longer than the floor, and the order answered 503 unavailable.) */
    int tried = j->deadline_us < j->hard_us;
    if (j->release) /* no answer to the delete: the session's fate tells */
        finish(j, zk_conn_expired(c) ? LOCK_NOT_HELD : LOCK_ERROR);
    else
        finish(j, (j->contended || tried) && connected ? LOCK_BUSY : LOCK_ERROR);
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
    if (zk_rc_uncertain(rc)) /* the node may still be there */
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

struct zk_job *zk_job_new(struct zk_state *st, struct event_base *base,
                          lock_step_cb *done, void *arg)
{
    struct zk_job *j = xcalloc(1, sizeof(*j));
    j->st = st;
    j->done = done;
    j->arg = arg;
    j->deliver = event_new(base, -1, 0, on_deliver, j);
    j->refs = 1; /* the caller's */
    pthread_mutex_lock(&st->mu);
    st->steps++;
    pthread_mutex_unlock(&st->mu);
    return j;
}

void zk_job_end(struct zk_job *j, lock_status res)
{
    j->res = res;
    j->finished = 1;
    event_active(j->deliver, EV_TIMEOUT, 0);
}

/* Hands j to the zk loop, with the loop's reference. */
static void run(struct zk_job *j)
{
    job_ref(j);
    zk_loop_post(j->st->loop, start_job, j);
}

void zk_job_read_of(struct zk_job *j, const char *rw_parent, int held)
{
    snprintf(j->rw_parent, sizeof(j->rw_parent), "%s", rw_parent);
    j->held = held;
}

void zk_job_write_over(struct zk_job *j, const char *readers, int n)
{
    snprintf(j->readers, sizeof(j->readers), "%s", readers);
    j->nreaders = n;
}

void zk_job_acquire(struct zk_job *j, const char *parent, lock_side side,
                    int64_t deadline_us)
{
    j->side = side;
    int64_t floor_us = clock_now_us() + (int64_t)ZK_STEP_FLOOR_MS * 1000;
    j->deadline_us = deadline_us;
    j->hard_us = deadline_us > floor_us ? deadline_us : floor_us;
    snprintf(j->parent, sizeof(j->parent), "%s", parent);
    lock_token_new(j->guid);
    if (!(j->conn = zk_conn_get(j->st)))
        zk_job_end(j, LOCK_ERROR);
    else
        run(j);
}

void zk_job_release(struct zk_job *j, struct zk_conn *c, const char *node,
                    const char *guid)
{
    j->release = 1;
    j->conn = c;
    pthread_mutex_lock(&j->st->mu);
    c->refs++; /* the job's own: the hold may go first (a cancel) */
    pthread_mutex_unlock(&j->st->mu);
    snprintf(j->node, sizeof(j->node), "%s", node);
    snprintf(j->guid, sizeof(j->guid), "%s", guid);
    zk_parent_of(node, j->parent, sizeof(j->parent));
    j->hard_us = clock_now_us() + (int64_t)j->st->timeout_ms * 1000;
    run(j);
}

lock_status zk_job_take(struct zk_job *j)
{
    pthread_mutex_lock(&j->st->mu);
    j->cancelled = 1; /* taken: nothing more is delivered */
    lock_status res = j->finished ? j->res : LOCK_ERROR;
    pthread_mutex_unlock(&j->st->mu);
    if (j->deliver)
        event_free(j->deliver);
    j->deliver = NULL;
    return res;
}

void zk_job_put(struct zk_job *j)
{
    job_put(j);
}

void zk_job_cancel(struct zk_job *j)
{
    pthread_mutex_lock(&j->st->mu);
    j->cancelled = 1;
    int finished = j->finished;
    pthread_mutex_unlock(&j->st->mu);
    if (j->deliver)
        event_free(j->deliver);
    j->deliver = NULL;
    if (finished && j->res == LOCK_ACQUIRED && j->conn) /* granted, never taken */
        zk_delete_unwaited(j->conn, j->node, j->guid, j->parent);
    else if (!finished && j->conn) { /* ends it now rather than at its bound */
        job_ref(j);
        zk_loop_post(j->st->loop, cancel_job, j);
    }
    job_put(j);
}
