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
 * up deletes its own child before it answers LOCK_BUSY (a delete not answered
 * within ZK_TRY_FLOOR_MS finishes in the background).
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
 * One ZooKeeper session (one zhandle) per struct lock, that is per process:
 * the multi-threaded client multiplexes every thread's requests on one
 * connection, one heartbeat keeps every hold of the process alive, and when
 * the process dies or is cut off past the session timeout, all its nodes go
 * at once. Threads (struct lock_session) are told apart by their nodes, not by
 * sessions, so two threads of one process contend like two processes.
 * Reentrancy is per lock_session, in memory: a session that re-acquires a key
 * it holds increments a count, and only its last release deletes the node.
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
 * Bounded waits: every request is asynchronous and waited for on a condition
 * variable with a deadline, so ZooKeeper being down or hung costs at most the
 * wait deadline (requests get at least ZK_TRY_FLOOR_MS, so that a try-lock
 * with no wait still gets its round trips). A request given up on is not
 * forgotten: its completion still runs, and deletes a node that was created
 * for a contender that has left (see call_done). Nothing here blocks in a
 * ZooKeeper callback, and no ZooKeeper call is made holding st->mu (the
 * client's threads take it in the callbacks). */
#include "clock.h"
#include "lock_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zookeeper/zookeeper.h>

#define ZK_ROOT "/seckill"
#define ZK_LOCKS ZK_ROOT "/locks"
#define ZK_PATH_MAX 1024
/* The longest parent path: room for "/_c_<guid>-lock-<10 digits>" after it. */
#define ZK_PARENT_MAX (ZK_PATH_MAX - 64)
#define ZK_GUID_PREFIX "_c_"
#define ZK_NODE_SUFFIX "-lock-"
#define ZK_SEQ_DIGITS 10
/* Least time the requests of one acquire get, whatever its wait. */
#define ZK_TRY_FLOOR_MS 200
#define ZK_DEFAULT_SESSION_MS 3000
#define ZK_PARENT_BUCKETS 256
/* Not a ZooKeeper code (those are <= 0): the wait deadline passed while the
 * contender was waiting for its predecessor. */
#define ZK_DEADLINE 1

struct zk_state;

/* A node of ours that may exist but is no longer wanted: found by its guid
 * under parent once connected, and deleted. */
struct zk_orphan {
    struct zk_orphan *next;
    char guid[33];
    char parent[];
};

/* A contender sleeping until the watch on its predecessor (or, watching all,
 * on the lock node's children) fires. */
struct zk_waiter {
    struct zk_waiter *next;
    const char *path; /* the watched path */
    int woken;        /* a watch on path fired */
    int asleep;       /* counted in watch_waiters */
    pthread_cond_t cond;
};

struct zk_hold;

/* One ZooKeeper session. Replaced by a new one when it expires; freed (and its
 * handle closed) when the last reference goes. All fields but zh are under
 * st->mu; zh is set once, right after zookeeper_init. */
struct zk_conn {
    struct zk_state *st;
    zhandle_t *zh;
    int refs;                /* st's while current, each acquire using it, each hold */
    int connected;           /* the last session event said so */
    int expired;             /* the session is gone: its nodes with it */
    int closing;             /* the last reference went: issue nothing more */
    int64_t disconnected_us; /* when the connection was lost; 0 when connected */
    int64_t session_us;      /* the session timeout the server granted */
    pthread_cond_t changed;  /* connected or expired changed */
    struct zk_waiter *waiters;
    struct zk_hold *holds;
    struct zk_orphan *orphans;
};

/* One key held by one lock_session, perhaps re-entered. */
struct zk_hold {
    struct zk_session *owner; /* the session that took it, whose list it is on */
    struct zk_hold *snext;    /* the session's list (session thread only) */
    struct zk_hold *cnext;    /* the conn's list (st->mu) */
    struct zk_conn *conn;     /* referenced */
    int depth;                /* grants not yet released (session thread only) */
    int detached;             /* found lost by an acquire that made a new hold */
    int lost;                 /* the session expired (st->mu) */
    uint64_t fence;
    char guid[33];
    char *key;
    char node[ZK_PATH_MAX];
};

struct zk_parent {
    struct zk_parent *next;
    char path[];
};

struct zk_state {
    char *hosts;
    int session_ms;
    int timeout_ms;
    struct lock_counters *counters;
    lock_zk_watch watch;                          /* what a waiter watches */
    pthread_mutex_t mu;                           /* everything here and in every conn */
    pthread_mutex_t reconnect_mu;                 /* one new session at a time */
    struct zk_conn *conn;                         /* the current session */
    struct zk_parent *parents[ZK_PARENT_BUCKETS]; /* known to exist */
};

struct zk_session {
    struct zk_state *st;
    struct zk_hold *holds;
};

/* ---- the library's log ------------------------------------------------- */

/* The client logs every failed reconnect (one per 1/60 of the session
 * timeout while ZooKeeper is down): at most one line a second reaches
 * stderr. */
static void zk_log(const char *message)
{
    static _Atomic int64_t last_us;
    int64_t now = clock_now_us(), last = atomic_load(&last_us);
    if (now - last < 1000000 || !atomic_compare_exchange_strong(&last_us, &last, now))
        return;
    fprintf(stderr, "zk: %s\n", message);
}

/* ---- sessions ---------------------------------------------------------- */

static void orphans_sweep(struct zk_conn *c);

/* The session's own watcher: connection state changes. */
static void conn_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    struct zk_conn *c = ctx;
    struct zk_state *st = c->st;
    int sweep = 0;
    pthread_mutex_lock(&st->mu);
    if (state == ZOO_CONNECTED_STATE) {
        c->connected = 1;
        c->disconnected_us = 0;
        c->session_us = (int64_t)zoo_recv_timeout(zh) * 1000;
        sweep = c->orphans != NULL;
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        c->expired = 1;
        c->connected = 0;
        for (struct zk_hold *h = c->holds; h; h = h->cnext) {
            if (!h->lost) {
                h->lost = 1;
                lock_count_lost(st->counters);
            }
        }
        for (struct zk_waiter *w = c->waiters; w; w = w->next)
            pthread_cond_signal(&w->cond);
    } else if (c->connected) { /* connecting, associating: the connection dropped */
        c->connected = 0;
        c->disconnected_us = clock_now_us();
    }
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&st->mu);
    if (sweep)
        orphans_sweep(c);
}

/* The watch on a predecessor (or, watching all, on the lock node's children):
 * wakes the contenders waiting for that path. Session events reach every
 * watch too; conn_watcher handles those. */
static void pred_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)state;
    if (type == ZOO_SESSION_EVENT || !path)
        return;
    struct zk_conn *c = ctx;
    struct lock_counters *counters = c->st->counters;
    pthread_mutex_lock(&c->st->mu);
    for (struct zk_waiter *w = c->waiters; w; w = w->next) {
        if (strcmp(w->path, path) != 0 || w->woken)
            continue;
        w->woken = 1;
        /* Counted here rather than when the waiter's thread runs: once an
         * answer that came after this event is handled, the count is final. */
        if (w->asleep) {
            w->asleep = 0;
            lock_count_watch_waiter(counters, -1);
            lock_count_wakeup(counters);
        }
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&c->st->mu);
}

/* A new session (connecting in the background), with one reference for the
 * caller; NULL when the client refuses the hosts. */
static struct zk_conn *conn_open(struct zk_state *st)
{
    struct zk_conn *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->st = st;
    c->refs = 1;
    c->session_us = (int64_t)st->session_ms * 1000;
    clock_cond_init(&c->changed);
    zhandle_t *zh =
        zookeeper_init2(st->hosts, conn_watcher, st->session_ms, NULL, c, 0, zk_log);
    if (!zh) {
        pthread_cond_destroy(&c->changed);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&st->mu);
    c->zh = zh;
    pthread_mutex_unlock(&st->mu);
    return c;
}

/* Drops a reference; the last one closes the session (its nodes go) and
 * frees c. Never called holding st->mu: closing runs the pending completions,
 * which take it. */
static void conn_put(struct zk_conn *c)
{
    if (!c)
        return;
    struct zk_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    int last = --c->refs == 0;
    if (last)
        c->closing = 1;
    pthread_mutex_unlock(&st->mu);
    if (!last)
        return;
    zookeeper_close(c->zh);
    while (c->orphans) {
        struct zk_orphan *o = c->orphans;
        c->orphans = o->next;
        free(o);
    }
    pthread_cond_destroy(&c->changed);
    free(c);
}

/* The current session with a reference for the caller, after replacing it
 * with a new one if it expired. NULL when no new one could be made. */
static struct zk_conn *conn_get(struct zk_state *st)
{
    pthread_mutex_lock(&st->reconnect_mu);
    pthread_mutex_lock(&st->mu);
    struct zk_conn *c = st->conn;
    if (c && !c->expired) {
        c->refs++;
        pthread_mutex_unlock(&st->mu);
        pthread_mutex_unlock(&st->reconnect_mu);
        return c;
    }
    pthread_mutex_unlock(&st->mu);
    struct zk_conn *fresh = conn_open(st), *old = NULL;
    if (fresh) {
        pthread_mutex_lock(&st->mu);
        old = st->conn;
        st->conn = fresh; /* the reference conn_open gave */
        fresh->refs++;    /* the caller's */
        pthread_mutex_unlock(&st->mu);
    }
    pthread_mutex_unlock(&st->reconnect_mu);
    conn_put(old); /* st's reference to the expired one */
    return fresh;
}

/* Waits until c is connected, at most until deadline_us. 1 when connected;
 * 0 when the deadline passed or the session expired. */
static int conn_wait_connected(struct zk_conn *c, int64_t deadline_us)
{
    struct zk_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    while (!c->connected && !c->expired &&
           clock_cond_wait_until(&c->changed, &st->mu, deadline_us) != ETIMEDOUT)
        ;
    int ok = c->connected;
    pthread_mutex_unlock(&st->mu);
    return ok;
}

static int conn_expired(struct zk_conn *c)
{
    pthread_mutex_lock(&c->st->mu);
    int expired = c->expired;
    pthread_mutex_unlock(&c->st->mu);
    return expired;
}

/* ---- requests ---------------------------------------------------------- */

enum zk_op {
    OP_CREATE,
    OP_PARENT,
    OP_CHILDREN,
    OP_EXISTS,
    OP_WATCH,
    OP_DELETE,
    OP_SWEEP
};

/* One asynchronous request: shared by the caller waiting for it and the
 * completion, and freed by whichever of the two is last (refs under st->mu).
 * A caller that stops waiting leaves the completion to clean up. */
struct zk_call {
    struct zk_conn *conn;
    enum zk_op op;
    int refs;
    int done;
    int rc;
    pthread_cond_t cond;
    char *created; /* OP_CREATE: the node's path */
    int64_t czxid; /* OP_CREATE, OP_EXISTS */
    char **kids;   /* OP_CHILDREN */
    int nkids;
    struct zk_orphan *orphan; /* OP_SWEEP */
    /* OP_CREATE, OP_DELETE: the node's guid and parent, to find it later */
    char guid[33];
    char parent[ZK_PATH_MAX];
};

static struct zk_call *call_new(struct zk_conn *c, enum zk_op op, int waited)
{
    struct zk_call *call = calloc(1, sizeof(*call));
    if (!call)
        abort();
    call->conn = c;
    call->op = op;
    call->refs = waited ? 2 : 1;
    clock_cond_init(&call->cond);
    return call;
}

static void call_free(struct zk_call *call)
{
    for (int i = 0; i < call->nkids; i++)
        free(call->kids[i]);
    free(call->kids);
    free(call->created);
    free(call->orphan);
    pthread_cond_destroy(&call->cond);
    free(call);
}

/* Whether a request that failed with rc may have been carried out all the
 * same (its answer lost with the connection). */
static int rc_uncertain(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

static void orphan_add(struct zk_conn *c, const char *parent, const char *guid);
static void node_delete_unwaited(struct zk_conn *c, const char *node, const char *guid,
                                 const char *parent);

/* Ends a call from its completion (results already stored): wakes the caller,
 * and when the caller has left, undoes what it no longer wants. */
static void call_done(struct zk_call *call, int rc)
{
    struct zk_conn *c = call->conn;
    /* A delete whose answer was lost: the node may still be there. (Before
     * done is set: until then the caller cannot free the call.) */
    if (call->op == OP_DELETE && rc_uncertain(rc))
        orphan_add(c, call->parent, call->guid);
    pthread_mutex_lock(&c->st->mu);
    call->rc = rc;
    call->done = 1;
    pthread_cond_signal(&call->cond);
    int abandoned = --call->refs == 0;
    pthread_mutex_unlock(&c->st->mu);
    if (!abandoned)
        return;
    /* The contender gave up waiting for its create: nobody will use the
     * node, which would block everyone behind it for the session's life. */
    if (call->op == OP_CREATE && rc == ZOK)
        node_delete_unwaited(c, call->created, call->guid, call->parent);
    else if (call->op == OP_CREATE && rc_uncertain(rc))
        orphan_add(c, call->parent, call->guid);
    call_free(call);
}

/* After zoo_a*() answered rc: on an error the completion never runs. */
static int call_sent(struct zk_call *call, int rc)
{
    if (rc != ZOK) {
        call->refs--; /* the completion's; nobody else has the call yet */
        call->rc = rc;
        call->done = 1;
    }
    return rc;
}

/* Waits for the call until deadline_us and drops the caller's reference.
 * Returns its result code, or ZOPERATIONTIMEOUT when the deadline came first.
 * On ZOK, results the caller wants are moved out through the out arguments
 * first (any may be NULL). */
static int call_finish(struct zk_call *call, int64_t deadline_us, char **created,
                       int64_t *czxid, char ***kids, int *nkids)
{
    struct zk_state *st = call->conn->st;
    pthread_mutex_lock(&st->mu);
    while (!call->done &&
           clock_cond_wait_until(&call->cond, &st->mu, deadline_us) != ETIMEDOUT)
        ;
    int rc = call->done ? call->rc : ZOPERATIONTIMEOUT;
    if (call->done && rc == ZOK) {
        if (created) {
            *created = call->created;
            call->created = NULL;
        }
        if (czxid)
            *czxid = call->czxid;
        if (kids) {
            *kids = call->kids;
            *nkids = call->nkids;
            call->kids = NULL;
            call->nkids = 0;
        }
    }
    int last = --call->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (last)
        call_free(call);
    return rc;
}

static void kids_free(char **kids, int n)
{
    for (int i = 0; i < n; i++)
        free(kids[i]);
    free(kids);
}

static void create_done(int rc, const char *path, const struct Stat *stat,
                        const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    if (rc == ZOK && path) {
        call->created = strdup(path);
        if (!call->created)
            abort();
        call->czxid = stat ? stat->czxid : 0;
    }
    call_done(call, rc == ZOK && (!path || !stat) ? ZMARSHALLINGERROR : rc);
}

static void string_done(int rc, const char *path, const void *data)
{
    (void)path;
    call_done((struct zk_call *)data, rc);
}

static void children_done(int rc, const struct String_vector *strings, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    if (rc == ZOK && strings && strings->count > 0) {
        call->kids = calloc((size_t)strings->count, sizeof(char *));
        if (!call->kids)
            abort();
        for (int i = 0; i < strings->count; i++) {
            call->kids[i] = strdup(strings->data[i]);
            if (!call->kids[i])
                abort();
        }
        call->nkids = strings->count;
    }
    call_done(call, rc);
}

static void stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    if (rc == ZOK && stat)
        call->czxid = stat->czxid;
    call_done(call, rc);
}

static void data_done(int rc, const char *value, int len, const struct Stat *stat,
                      const void *data)
{
    (void)value, (void)len, (void)stat;
    call_done((struct zk_call *)data, rc);
}

static void void_done(int rc, const void *data)
{
    call_done((struct zk_call *)data, rc);
}

/* Creates our contender node "<parent>/_c_<guid>-lock-<seq>". ZOK with *node
 * (caller frees) and *czxid; otherwise the error. */
static int zk_create(struct zk_conn *c, const char *parent, const char *guid,
                     int64_t deadline_us, char **node, int64_t *czxid)
{
    char prefix[ZK_PATH_MAX];
    snprintf(prefix, sizeof(prefix), "%s/" ZK_GUID_PREFIX "%s" ZK_NODE_SUFFIX, parent,
             guid);
    struct zk_call *call = call_new(c, OP_CREATE, 1);
    snprintf(call->guid, sizeof(call->guid), "%s", guid);
    snprintf(call->parent, sizeof(call->parent), "%s", parent);
    call_sent(call, zoo_acreate2(c->zh, prefix, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                                 ZOO_EPHEMERAL_SEQUENTIAL, create_done, call));
    return call_finish(call, deadline_us, node, czxid, NULL, NULL);
}

/* Creates the persistent node path; ZOK also when it was there. */
static int zk_create_parent(struct zk_conn *c, const char *path, int64_t deadline_us)
{
    struct zk_call *call = call_new(c, OP_PARENT, 1);
    call_sent(call, zoo_acreate(c->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
                                string_done, call));
    int rc = call_finish(call, deadline_us, NULL, NULL, NULL, NULL);
    return rc == ZNODEEXISTS ? ZOK : rc;
}

/* The children of parent (*kids: caller frees); with watch, also sets a child
 * watch on parent (pred_watcher) in the same request, when parent exists. */
static int zk_children(struct zk_conn *c, const char *parent, int watch,
                       int64_t deadline_us, char ***kids, int *nkids)
{
    *kids = NULL;
    *nkids = 0;
    struct zk_call *call = call_new(c, OP_CHILDREN, 1);
    call_sent(call, watch ? zoo_awget_children(c->zh, parent, pred_watcher, c,
                                               children_done, call)
                          : zoo_aget_children(c->zh, parent, 0, children_done, call));
    return call_finish(call, deadline_us, NULL, NULL, kids, nkids);
}

static int zk_czxid(struct zk_conn *c, const char *node, int64_t deadline_us,
                    int64_t *czxid)
{
    struct zk_call *call = call_new(c, OP_EXISTS, 1);
    call_sent(call, zoo_aexists(c->zh, node, 0, stat_done, call));
    return call_finish(call, deadline_us, NULL, czxid, NULL, NULL);
}

/* Sets the data watch on node (pred_watcher). ZNONODE when it is gone: then no
 * watch was left behind. */
static int zk_watch(struct zk_conn *c, const char *node, int64_t deadline_us)
{
    struct zk_call *call = call_new(c, OP_WATCH, 1);
    call_sent(call, zoo_awget(c->zh, node, pred_watcher, c, data_done, call));
    return call_finish(call, deadline_us, NULL, NULL, NULL, NULL);
}

/* The guid of one of our node names "_c_<guid>-lock-<seq>" into guid (33
 * bytes); "" when name is not one. */
static void node_guid(const char *node, char *guid)
{
    const char *name = strrchr(node, '/');
    name = name ? name + 1 : node;
    guid[0] = '\0';
    size_t plen = strlen(ZK_GUID_PREFIX);
    if (strncmp(name, ZK_GUID_PREFIX, plen) == 0 && strlen(name) > plen + 32)
        snprintf(guid, 33, "%.32s", name + plen);
}

static void parent_of(const char *node, char *parent, size_t len)
{
    const char *slash = strrchr(node, '/');
    snprintf(parent, len, "%.*s", slash ? (int)(slash - node) : 0, node);
}

/* Deletes node; a delete whose answer was lost leaves the node to the orphan
 * sweep (call_done). */
static int zk_delete(struct zk_conn *c, const char *node, int64_t deadline_us)
{
    struct zk_call *call = call_new(c, OP_DELETE, 1);
    node_guid(node, call->guid);
    parent_of(node, call->parent, sizeof(call->parent));
    call_sent(call, zoo_adelete(c->zh, node, -1, void_done, call));
    return call_finish(call, deadline_us, NULL, NULL, NULL, NULL);
}

/* The same, without waiting: from callbacks and from session_free. A lost
 * answer leaves the node to the orphan sweep by guid ("": to nobody). */
static void node_delete_unwaited(struct zk_conn *c, const char *node, const char *guid,
                                 const char *parent)
{
    struct zk_call *call = call_new(c, OP_DELETE, 0);
    snprintf(call->guid, sizeof(call->guid), "%s", guid);
    snprintf(call->parent, sizeof(call->parent), "%s", parent);
    if (call_sent(call, zoo_adelete(c->zh, node, -1, void_done, call)) != ZOK) {
        if (rc_uncertain(call->rc))
            orphan_add(c, parent, guid);
        call_free(call);
    }
}

/* ---- orphans ----------------------------------------------------------- */

static int has_guid(const char *name, const char *guid)
{
    size_t plen = strlen(ZK_GUID_PREFIX);
    return strncmp(name, ZK_GUID_PREFIX, plen) == 0 &&
           strncmp(name + plen, guid, 32) == 0 && name[plen + 32] == '-';
}

/* Puts o back on c's list, or frees it when the session is gone (and its
 * ephemeral nodes with it). */
static void orphan_requeue(struct zk_conn *c, struct zk_orphan *o)
{
    pthread_mutex_lock(&c->st->mu);
    if (!c->closing && !c->expired) {
        o->next = c->orphans;
        c->orphans = o;
        o = NULL;
    }
    pthread_mutex_unlock(&c->st->mu);
    free(o);
}

static void sweep_deleted(int rc, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    if (rc_uncertain(rc)) {
        orphan_requeue(call->conn, call->orphan);
        call->orphan = NULL;
    }
    call_free(call);
}

static void sweep_listed(int rc, const struct String_vector *strings, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    struct zk_conn *c = call->conn;
    if (rc == ZOK && strings) {
        for (int i = 0; i < strings->count; i++) {
            if (!has_guid(strings->data[i], call->orphan->guid))
                continue;
            char node[ZK_PATH_MAX];
            snprintf(node, sizeof(node), "%s/%s", call->orphan->parent, strings->data[i]);
            rc = zoo_adelete(c->zh, node, -1, sweep_deleted, call);
            if (rc == ZOK)
                return; /* sweep_deleted carries on */
            break;
        }
    }
    if (rc_uncertain(rc)) {
        orphan_requeue(c, call->orphan);
        call->orphan = NULL;
    }
    call_free(call);
}

/* Looks for every orphan of c by its guid and deletes it, in the background. */
static void orphans_sweep(struct zk_conn *c)
{
    pthread_mutex_lock(&c->st->mu);
    struct zk_orphan *list = NULL;
    if (c->connected && !c->closing && !c->expired && c->zh) {
        list = c->orphans;
        c->orphans = NULL;
    }
    pthread_mutex_unlock(&c->st->mu);
    while (list) {
        struct zk_orphan *o = list;
        list = o->next;
        struct zk_call *call = call_new(c, OP_SWEEP, 0);
        call->orphan = o;
        if (zoo_aget_children(c->zh, o->parent, 0, sweep_listed, call) != ZOK) {
            orphan_requeue(c, o);
            call->orphan = NULL;
            call_free(call);
        }
    }
}

static void orphan_add(struct zk_conn *c, const char *parent, const char *guid)
{
    if (!guid[0])
        return;
    size_t len = strlen(parent);
    struct zk_orphan *o = calloc(1, sizeof(*o) + len + 1);
    if (!o)
        abort();
    snprintf(o->guid, sizeof(o->guid), "%s", guid);
    memcpy(o->parent, parent, len + 1);
    orphan_requeue(c, o);
    orphans_sweep(c);
}

/* ---- parents ----------------------------------------------------------- */

static unsigned parent_bucket(const char *path)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % ZK_PARENT_BUCKETS;
}

static int parent_known(struct zk_state *st, const char *path)
{
    pthread_mutex_lock(&st->mu);
    struct zk_parent *p = st->parents[parent_bucket(path)];
    while (p && strcmp(p->path, path) != 0)
        p = p->next;
    pthread_mutex_unlock(&st->mu);
    return p != NULL;
}

static void parent_remember(struct zk_state *st, const char *path, int known)
{
    unsigned b = parent_bucket(path);
    pthread_mutex_lock(&st->mu);
    struct zk_parent **pp = &st->parents[b];
    while (*pp && strcmp((*pp)->path, path) != 0)
        pp = &(*pp)->next;
    if (known && !*pp) {
        size_t len = strlen(path);
        struct zk_parent *p = calloc(1, sizeof(*p) + len + 1);
        if (!p)
            abort();
        memcpy(p->path, path, len + 1);
        *pp = p;
    } else if (!known && *pp) {
        struct zk_parent *p = *pp;
        *pp = p->next;
        free(p);
    }
    pthread_mutex_unlock(&st->mu);
}

/* Creates /seckill, /seckill/locks and parent unless parent is known to
 * exist. */
static int parents_ensure(struct zk_conn *c, const char *parent, int64_t deadline_us)
{
    struct zk_state *st = c->st;
    if (parent_known(st, parent))
        return ZOK;
    const char *levels[] = {ZK_ROOT, ZK_LOCKS, parent};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        int rc = zk_create_parent(c, levels[i], deadline_us);
        if (rc != ZOK)
            return rc;
    }
    parent_remember(st, parent, 1);
    return ZOK;
}

/* ---- the recipe -------------------------------------------------------- */

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

/* The sequence number of one of our node names; -1 for any other name. */
static long long node_seq(const char *name)
{
    size_t len = strlen(name), slen = strlen(ZK_NODE_SUFFIX);
    if (strncmp(name, ZK_GUID_PREFIX, strlen(ZK_GUID_PREFIX)) != 0 ||
        len < ZK_SEQ_DIGITS + slen ||
        strncmp(name + len - ZK_SEQ_DIGITS - slen, ZK_NODE_SUFFIX, slen) != 0)
        return -1;
    long long seq = 0;
    for (const char *p = name + len - ZK_SEQ_DIGITS; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        seq = seq * 10 + (*p - '0');
    }
    return seq;
}

enum zk_try { TRY_ACQUIRED, TRY_BUSY, TRY_ERROR, TRY_AGAIN /* session expired */ };

/* One contender's state through one acquire. */
struct zk_attempt {
    struct zk_conn *conn;
    const char *parent;
    char guid[33];
    char node[ZK_PATH_MAX]; /* our node once created; "" before */
    int64_t czxid;
    int64_t deadline_us; /* the caller's wait */
    int64_t hard_us;     /* for requests: the wait, but at least the floor */
    int contended;
};

/* Looks for a node of ours by its guid (a create whose answer was lost).
 * ZOK with a->node and a->czxid; ZNONODE when there is none. */
static int find_own(struct zk_attempt *a)
{
    char **kids;
    int n;
    int rc = zk_children(a->conn, a->parent, 0, a->hard_us, &kids, &n);
    if (rc != ZOK)
        return rc;
    rc = ZNONODE;
    for (int i = 0; i < n && rc == ZNONODE; i++) {
        if (!has_guid(kids[i], a->guid))
            continue;
        snprintf(a->node, sizeof(a->node), "%s/%s", a->parent, kids[i]);
        rc = zk_czxid(a->conn, a->node, a->hard_us, &a->czxid);
        if (rc != ZOK)
            a->node[0] = '\0';
    }
    kids_free(kids, n);
    return rc;
}

/* Creates our node (and the parents), in protected mode: after a lost answer,
 * the node is looked for by its guid before another is created. ZOK with
 * a->node and a->czxid. On failure a node that may exist is left to the
 * orphan sweep. */
static int node_create(struct zk_attempt *a)
{
    int rc = ZOPERATIONTIMEOUT, uncertain = 0;
    for (int round = 0; round < 8 && clock_now_us() < a->hard_us; round++) {
        if (uncertain) {
            if (!conn_wait_connected(a->conn, a->deadline_us)) {
                rc = ZCONNECTIONLOSS;
                break;
            }
            rc = find_own(a);
            if (rc == ZOK)
                return ZOK;
            if (rc != ZNONODE)
                continue; /* still uncertain */
            uncertain = 0;
        }
        rc = parents_ensure(a->conn, a->parent, a->hard_us);
        if (rc == ZCONNECTIONLOSS && conn_wait_connected(a->conn, a->deadline_us))
            continue;
        if (rc != ZOK)
            return rc;
        char *node = NULL;
        rc = zk_create(a->conn, a->parent, a->guid, a->hard_us, &node, &a->czxid);
        if (rc == ZOK) {
            snprintf(a->node, sizeof(a->node), "%s", node);
            free(node);
            return a->czxid > 0 ? ZOK : ZMARSHALLINGERROR;
        }
        if (rc == ZNONODE) { /* the parent was deleted since we made it */
            parent_remember(a->conn->st, a->parent, 0);
            continue;
        }
        if (rc == ZOPERATIONTIMEOUT) /* still pending: its completion cleans up */
            return rc;
        if (rc != ZCONNECTIONLOSS)
            return rc;
        uncertain = 1;
    }
    if (uncertain && !conn_expired(a->conn))
        orphan_add(a->conn, a->parent, a->guid);
    return rc;
}

/* Lists the children (with watch, also watching them: see zk_children): ZOK
 * with pred set to the path of our immediate predecessor, "" when ours is the
 * lowest; ZNONODE when ours is gone. Deletes any other node carrying our
 * guid. */
static int find_predecessor(struct zk_attempt *a, int watch, char *pred, size_t len)
{
    char **kids;
    int n;
    int rc = zk_children(a->conn, a->parent, watch, a->hard_us, &kids, &n);
    if (rc != ZOK)
        return rc;
    const char *mine = strrchr(a->node, '/') + 1;
    long long my_seq = -1, best_seq = -1;
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(kids[i], mine) == 0) {
            my_seq = node_seq(mine);
        } else if (has_guid(kids[i], a->guid)) {
            /* A second node of this attempt: a create whose answer was lost
             * and that reached the server after find_own looked. No guid for
             * the orphan sweep, which would delete ours too: a lost delete is
             * tried again by the next listing. */
            char dup[ZK_PATH_MAX];
            snprintf(dup, sizeof(dup), "%s/%s", a->parent, kids[i]);
            node_delete_unwaited(a->conn, dup, "", a->parent);
            kids[i][0] = '\0'; /* not a predecessor */
        }
    }
    for (int i = 0; i < n && my_seq >= 0; i++) {
        long long seq = node_seq(kids[i]);
        if (seq >= 0 && seq < my_seq && seq > best_seq) {
            best_seq = seq;
            best = i;
        }
    }
    pred[0] = '\0';
    if (best >= 0)
        snprintf(pred, len, "%s/%s", a->parent, kids[best]);
    kids_free(kids, n);
    return my_seq >= 0 ? ZOK : ZNONODE;
}

/* Puts w on c's list of waiters for watches on path. Before the request that
 * sets the watch: a fire cannot be missed. */
static void waiter_add(struct zk_conn *c, struct zk_waiter *w, const char *path)
{
    memset(w, 0, sizeof(*w));
    w->path = path;
    clock_cond_init(&w->cond);
    pthread_mutex_lock(&c->st->mu);
    w->next = c->waiters;
    c->waiters = w;
    pthread_mutex_unlock(&c->st->mu);
}

static void waiter_remove(struct zk_conn *c, struct zk_waiter *w)
{
    pthread_mutex_lock(&c->st->mu);
    for (struct zk_waiter **p = &c->waiters; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->st->mu);
    pthread_cond_destroy(&w->cond);
}

/* Sleeps until w's watch fires (ZOK, counted in watch_wakeups), the session
 * expires (ZSESSIONEXPIRED) or the wait deadline passes (ZK_DEADLINE). While
 * it sleeps, w counts in watch_waiters. */
static int waiter_sleep(struct zk_attempt *a, struct zk_waiter *w)
{
    struct zk_conn *c = a->conn;
    struct zk_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    if (w->woken) { /* already, by another contender's watch on the same path */
        lock_count_wakeup(st->counters);
    } else {
        w->asleep = 1;
        lock_count_watch_waiter(st->counters, 1);
    }
    while (!w->woken && !c->expired &&
           clock_cond_wait_until(&w->cond, &st->mu, a->deadline_us) != ETIMEDOUT)
        ;
    if (w->asleep) { /* not woken: pred_watcher did not take it off */
        w->asleep = 0;
        lock_count_watch_waiter(st->counters, -1);
    }
    int rc = w->woken ? ZOK : c->expired ? ZSESSIONEXPIRED : ZK_DEADLINE;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* One round of the recipe: lists the children; ZOK with *held set when ours
 * is the lowest. Otherwise watches only the immediate predecessor and sleeps
 * until that watch fires: ZOK (list again), or as waiter_sleep. ZOK at once
 * when the predecessor is already gone. */
static int round_watch_predecessor(struct zk_attempt *a, int *held)
{
    char pred[ZK_PATH_MAX];
    int rc = find_predecessor(a, 0, pred, sizeof(pred));
    *held = rc == ZOK && !pred[0];
    if (rc != ZOK || *held)
        return rc;
    a->contended = 1;
    if (clock_now_us() >= a->deadline_us)
        return ZK_DEADLINE;
    struct zk_conn *c = a->conn;
    struct zk_waiter w;
    waiter_add(c, &w, pred);
    rc = zk_watch(c, pred, a->hard_us);
    if (rc == ZOK)
        rc = waiter_sleep(a, &w);
    else if (rc == ZNONODE)
        rc = ZOK; /* gone before we could watch it: list again */
    waiter_remove(c, &w);
    return rc;
}

/* One round of the naive recipe (the herd): lists the children and watches
 * them in one request; ZOK with *held set when ours is the lowest, else sleeps
 * until any child of the lock node comes or goes: ZOK (list again), or as
 * waiter_sleep. */
static int round_watch_all(struct zk_attempt *a, int *held)
{
    struct zk_conn *c = a->conn;
    struct zk_waiter w;
    char pred[ZK_PATH_MAX];
    waiter_add(c, &w, a->parent);
    int rc = find_predecessor(a, 1, pred, sizeof(pred));
    *held = rc == ZOK && !pred[0];
    if (rc == ZOK && !*held) {
        a->contended = 1;
        rc = clock_now_us() >= a->deadline_us ? ZK_DEADLINE : waiter_sleep(a, &w);
    }
    waiter_remove(c, &w);
    return rc;
}

/* Gives up after rc: deletes our node, if any, waiting for that at most
 * ZK_TRY_FLOOR_MS (a delete still pending then, or whose answer is lost, is
 * finished in the background: see call_done). LOCK_BUSY only for a wait that
 * ran out while ZooKeeper was there to ask. */
static enum zk_try give_up(struct zk_attempt *a, int rc)
{
    struct zk_conn *c = a->conn;
    if (conn_expired(c))
        return TRY_AGAIN; /* our node went with the session */
    if (a->node[0])
        zk_delete(c, a->node, clock_now_us() + (int64_t)ZK_TRY_FLOOR_MS * 1000);
    pthread_mutex_lock(&c->st->mu);
    int connected = c->connected;
    pthread_mutex_unlock(&c->st->mu);
    return rc == ZK_DEADLINE && connected ? TRY_BUSY : TRY_ERROR;
}

static enum zk_try contend(struct zk_attempt *a)
{
    if (!conn_wait_connected(a->conn, a->deadline_us))
        return conn_expired(a->conn) ? TRY_AGAIN : TRY_ERROR;
    orphans_sweep(a->conn);
    int rc = node_create(a);
    if (rc != ZOK)
        return give_up(a, rc);
    for (;;) {
        int held = 0;
        rc = a->conn->st->watch == LOCK_ZK_WATCH_ALL ? round_watch_all(a, &held)
                                                     : round_watch_predecessor(a, &held);
        if (rc == ZOK && held)
            return TRY_ACQUIRED;
        if (rc == ZOK)
            continue;
        if (rc == ZNONODE) { /* our node was deleted under us */
            a->node[0] = '\0';
            return conn_expired(a->conn) || clock_now_us() < a->deadline_us ? TRY_AGAIN
                                                                            : TRY_ERROR;
        }
        if (rc == ZCONNECTIONLOSS && conn_wait_connected(a->conn, a->deadline_us))
            continue;
        return give_up(a, rc);
    }
}

/* ---- holds ------------------------------------------------------------- */

static struct zk_hold *hold_find(struct zk_session *s, const char *key)
{
    for (struct zk_hold *h = s->holds; h; h = h->snext)
        if (!h->detached && strcmp(h->key, key) == 0)
            return h;
    return NULL;
}

/* A hold of key from a's grant; takes over a's reference to the conn. */
static struct zk_hold *hold_new(struct zk_session *s, const char *key,
                                const struct zk_attempt *a)
{
    struct zk_hold *h = calloc(1, sizeof(*h));
    if (!h)
        abort();
    h->key = strdup(key);
    if (!h->key)
        abort();
    h->conn = a->conn;
    h->depth = 1;
    h->fence = (uint64_t)a->czxid;
    memcpy(h->guid, a->guid, sizeof(h->guid));
    snprintf(h->node, sizeof(h->node), "%s", a->node);
    h->owner = s;
    h->snext = s->holds;
    s->holds = h;
    struct zk_state *st = s->st;
    pthread_mutex_lock(&st->mu);
    h->cnext = a->conn->holds;
    a->conn->holds = h;
    if (a->conn->expired) { /* expired between the grant and here */
        h->lost = 1;
        lock_count_lost(st->counters);
    }
    pthread_mutex_unlock(&st->mu);
    return h;
}

/* Off its list and freed. s may be another session of the thread that took it
 * (on a Redis Cluster a batch thread has one per master, and a hold taken on
 * one is released on another when the map changed meanwhile): the hold leaves
 * its owner's list, not s's, or the owner would keep a freed hold. */
static void hold_free(struct zk_session *s, struct zk_hold *h)
{
    for (struct zk_hold **p = &h->owner->holds; *p; p = &(*p)->snext) {
        if (*p == h) {
            *p = h->snext;
            break;
        }
    }
    struct zk_conn *c = h->conn;
    pthread_mutex_lock(&s->st->mu);
    for (struct zk_hold **p = &c->holds; *p; p = &(*p)->cnext) {
        if (*p == h) {
            *p = h->cnext;
            break;
        }
    }
    pthread_mutex_unlock(&s->st->mu);
    conn_put(c);
    free(h->key);
    free(h);
}

/* 1 while h's session lives (it may be disconnected). */
static int hold_alive(struct zk_state *st, const struct zk_hold *h)
{
    pthread_mutex_lock(&st->mu);
    int alive = !h->lost && !h->conn->expired;
    pthread_mutex_unlock(&st->mu);
    return alive;
}

static void grant_fill(struct zk_state *st, struct zk_hold *h, int contended,
                       struct lock_grant *g)
{
    pthread_mutex_lock(&st->mu);
    int64_t session_us = h->conn->session_us;
    pthread_mutex_unlock(&st->mu);
    memcpy(g->token, h->guid, sizeof(g->token));
    g->fence = h->fence;
    g->acquired_us = clock_now_us();
    g->valid_until_us = g->acquired_us + session_us;
    g->contended = contended;
    g->holder = h;
}

/* ---- the backend ------------------------------------------------------- */

static void *zk_create_state(const struct lock_config *cfg,
                             struct lock_counters *counters, char *err, size_t errlen)
{
    if (!cfg->zk_hosts || !*cfg->zk_hosts) {
        snprintf(err, errlen, "zk needs the ZooKeeper ensemble (--zk H:P[,H:P...])");
        return NULL;
    }
    struct zk_state *st = calloc(1, sizeof(*st));
    if (!st)
        abort();
    st->hosts = strdup(cfg->zk_hosts);
    if (!st->hosts)
        abort();
    st->session_ms = cfg->zk_session_ms > 0 ? cfg->zk_session_ms : ZK_DEFAULT_SESSION_MS;
    st->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 1000;
    st->counters = counters;
    st->watch = cfg->zk_watch;
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->reconnect_mu, NULL);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    /* Connecting goes on in the background: ZooKeeper may come up later. */
    st->conn = conn_open(st);
    if (!st->conn) {
        snprintf(err, errlen, "the ZooKeeper client refuses the ensemble '%s'",
                 st->hosts);
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
    conn_put(st->conn);
    for (int i = 0; i < ZK_PARENT_BUCKETS; i++) {
        while (st->parents[i]) {
            struct zk_parent *p = st->parents[i];
            st->parents[i] = p->next;
            free(p);
        }
    }
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->reconnect_mu);
    free(st->hosts);
    free(st);
}

static void *zk_session_new(void *state, struct rconn *data)
{
    (void)data;
    struct zk_session *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
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
            parent_of(h->node, parent, sizeof(parent));
            node_delete_unwaited(h->conn, h->node, h->guid, parent);
        }
        hold_free(s, h);
    }
    free(s);
}

static lock_status zk_acquire(void *session, const char *key, int64_t deadline_us,
                              struct lock_grant *g)
{
    struct zk_session *s = session;
    struct zk_state *st = s->st;
    struct zk_hold *h = hold_find(s, key);
    if (h && hold_alive(st, h)) {
        h->depth++;
        grant_fill(st, h, 0, g);
        return LOCK_ACQUIRED;
    }
    if (h) /* lost: its grants release as NOT_HELD; this one is new */
        h->detached = 1;
    char parent[ZK_PATH_MAX];
    if (key_path(key, parent, sizeof(parent)) != 0)
        return LOCK_ERROR;
    int64_t floor_us = clock_now_us() + (int64_t)ZK_TRY_FLOOR_MS * 1000;
    struct zk_attempt a = {.parent = parent,
                           .deadline_us = deadline_us,
                           .hard_us = deadline_us > floor_us ? deadline_us : floor_us};
    for (;;) {
        a.conn = conn_get(st);
        if (!a.conn)
            return LOCK_ERROR;
        lock_token_new(a.guid);
        a.node[0] = '\0';
        enum zk_try t = contend(&a);
        if (t == TRY_ACQUIRED) {
            grant_fill(st, hold_new(s, key, &a), a.contended, g);
            return LOCK_ACQUIRED;
        }
        conn_put(a.conn);
        if (t == TRY_AGAIN && clock_now_us() < deadline_us)
            continue;
        return t == TRY_BUSY ? LOCK_BUSY : LOCK_ERROR;
    }
}

static lock_status zk_release(void *session, const char *key, struct lock_grant *g)
{
    struct zk_session *s = session;
    struct zk_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    int alive = hold_alive(s->st, h);
    if (--h->depth > 0)
        return alive ? LOCK_RELEASED : LOCK_NOT_HELD;
    lock_status res = LOCK_NOT_HELD;
    if (alive) {
        int64_t until = clock_now_us() + (int64_t)s->st->timeout_ms * 1000;
        int rc = zk_delete(h->conn, h->node, until);
        if (rc == ZOK)
            res = LOCK_RELEASED;
        else if (rc == ZNONODE || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE)
            res = LOCK_NOT_HELD; /* deleted under us, or the session went meanwhile */
        else
            res = LOCK_ERROR; /* unknown: a lost delete is retried after reconnect */
    }
    hold_free(s, h);
    return res;
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
    int64_t until = h->lost || c->expired ? 0
                    : c->connected        ? clock_now_us() + c->session_us
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
    .acquire = zk_acquire,
    .release = zk_release,
    .valid_until = zk_valid_until,
};
