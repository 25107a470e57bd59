/* zk_conn: the ZooKeeper client under the zk lock (see zk_conn.h).
 *
 * One ZooKeeper session (one zhandle) per struct lock, that is per process,
 * driven by one thread (st->loop, zk_loop.h) on the single-threaded client:
 * every thread's requests go out on one connection, one heartbeat keeps every hold of the
 * process alive, and when the process dies or is cut off past the session timeout, all
 * its nodes go at once.
 *
 * Bounded waits: every request is asynchronous and waited for on a condition
 * variable with a deadline, so ZooKeeper being down or hung costs at most the
 * wait deadline. A request given up on is not forgotten: its completion still
 * runs, and deletes a node that was created for a contender that has left
 * (see call_done). Nothing here blocks in a ZooKeeper callback, and no
 * ZooKeeper call is made holding st->mu (the client's threads take it in the
 * callbacks). */
#include "zk_conn.h"

#include "clock.h"
#include "lock_impl.h"
#include "xalloc.h"
#include "zk_call.h"
#include "zk_loop.h"

#include <errno.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the library's log ------------------------------------------------- */

/* Where the client's log lines go: the lock's user (lock_config.on_link),
 * which writes them through its logger, or nowhere. The client takes a bare
 * function, no context: a global, set by the one zk lock of the process. */
static lock_link_fn *_Atomic zk_log_sink;

void zk_conn_log_to(lock_link_fn *sink)
{
    atomic_store(&zk_log_sink, sink);
}

static void zk_log(const char *message)
{
    lock_link_fn *sink = atomic_load(&zk_log_sink);
    if (sink)
        sink(LOCK_LINK_CLIENT, NULL, message);
}

/* ---- driving a session on st->loop ----------------------------------------
 *
 * The single-threaded client does its I/O, completions and watchers in
 * zookeeper_process, called on st->loop's thread when the socket that
 * zookeeper_interest named is ready or its timeout passed; after every call
 * the interest is asked again (it changes with the requests queued, the
 * heartbeat due and the reconnects). A request from another thread is a job
 * on that loop (call_send): the caller holds a reference to the conn, so the
 * job runs before the conn's close (jobs run in order, and the close is
 * posted by the last reference). */

static void conn_io(evutil_socket_t fd, short what, void *arg);

/* Arms c->io for what the client wants next: its socket (if any) for the
 * events it asks, and its timeout. Nothing once the session is gone. */
void zk_conn_arm(struct zk_conn *c)
{
    if (!c->io)
        return;
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    int rc = zookeeper_interest(c->zh, &fd, &interest, &tv);
    event_del(c->io);
    if (rc == ZINVALIDSTATE)
        return; /* expired (or auth failed): nothing more to drive */
    short what = 0;
    if (fd >= 0) {
        what |= (interest & ZOOKEEPER_READ) ? EV_READ : 0;
        what |= (interest & ZOOKEEPER_WRITE) ? EV_WRITE : 0;
    }
    if (rc != ZOK && tv.tv_sec == 0 && tv.tv_usec < 10000)
        tv.tv_usec = 10000; /* a failed connect: try again, but do not spin */
    event_assign(c->io, zk_loop_base(c->st->loop), what ? fd : -1, what, conn_io, c);
    event_add(c->io, &tv);
}

static void conn_io(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct zk_conn *c = arg;
    int events = ((what & EV_READ) ? ZOOKEEPER_READ : 0) |
                 ((what & EV_WRITE) ? ZOOKEEPER_WRITE : 0);
    zookeeper_process(c->zh, events);
    zk_conn_arm(c);
}

/* ---- sessions ---------------------------------------------------------- */

/* The session's own watcher: connection state changes. */
static void conn_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    struct zk_conn *c = ctx;
    struct zk_state *st = c->st;
    int sweep = 0;
    const char *down = NULL; /* why the session went down, for st->on_link */
    pthread_mutex_lock(&st->mu);
    int was_connected = c->connected;
    if (state == ZOO_CONNECTED_STATE) {
        c->connected = 1;
        c->disconnected_us = 0;
        c->session_us = (int64_t)zoo_recv_timeout(zh) * 1000;
        sweep = c->orphans != NULL;
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        down = state == ZOO_EXPIRED_SESSION_STATE ? "session expired" : "authentication failed";
        c->expired = 1;
        c->connected = 0;
        for (struct zk_conn_hold *h = c->holds; h; h = h->next) {
            if (!h->lost) {
                h->lost = 1;
                lock_count_lost(st->counters);
            }
        }
        for (struct zk_waiter *w = c->waiters; w; w = w->next) {
            if (w->wake)
                w->wake(w);
            pthread_cond_signal(&w->cond);
        }
    } else if (c->connected) { /* connecting, associating: the connection dropped */
        down = "connection lost";
        c->connected = 0;
        c->disconnected_us = clock_now_us();
    }
    int closing = c->closing;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&st->mu);
    if (st->on_link && !closing) {
        if (state == ZOO_CONNECTED_STATE && !was_connected)
            st->on_link(LOCK_LINK_UP, st->hosts, NULL);
        else if (down)
            st->on_link(LOCK_LINK_DOWN, st->hosts, down);
    }
    if (sweep)
        zk_orphans_sweep(c);
}

/* On st->loop: the handle (connecting begins with the first interest). */
static void conn_open_here(void *arg)
{
    struct zk_conn *c = arg;
    struct zk_state *st = c->st;
    zhandle_t *zh =
        zookeeper_init2(st->hosts, conn_watcher, st->session_ms, NULL, c, 0, zk_log);
    if (!zh)
        return;
    pthread_mutex_lock(&st->mu);
    c->zh = zh;
    pthread_mutex_unlock(&st->mu);
    c->io = event_new(zk_loop_base(st->loop), -1, 0, conn_io, c);
    zk_conn_arm(c);
}

/* A new session (connecting in the background), with one reference for the
 * caller; NULL when the client refuses the hosts. */
struct zk_conn *zk_conn_open(struct zk_state *st)
{
    struct zk_conn *c = xcalloc(1, sizeof(*c));
    c->st = st;
    c->refs = 1;
    c->session_us = (int64_t)st->session_ms * 1000;
    clock_cond_init(&c->changed);
    zk_loop_call(st->loop, conn_open_here, c);
    if (!c->zh) {
        pthread_cond_destroy(&c->changed);
        free(c);
        return NULL;
    }
    return c;
}

/* On st->loop, after every job of c's: closes the session (the pending
 * completions run with ZCLOSING, and take st->mu) and frees c. */
static void conn_close_here(void *arg)
{
    struct zk_conn *c = arg;
    if (c->io)
        event_free(c->io);
    zookeeper_close(c->zh);
    while (c->orphans) {
        struct zk_orphan *o = c->orphans;
        c->orphans = o->next;
        free(o);
    }
    pthread_cond_destroy(&c->changed);
    free(c);
}

/* Drops a reference; the last one has the session closed (its nodes go) and
 * c freed on st->loop, after the jobs posted before. */
void zk_conn_put(struct zk_conn *c)
{
    if (!c)
        return;
    struct zk_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    int last = --c->refs == 0;
    if (last)
        c->closing = 1;
    pthread_mutex_unlock(&st->mu);
    if (last)
        zk_loop_post(st->loop, conn_close_here, c);
}

/* The current session with a reference for the caller, after replacing it
 * with a new one if it expired. NULL when no new one could be made. */
struct zk_conn *zk_conn_get(struct zk_state *st)
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
    struct zk_conn *fresh = zk_conn_open(st), *old = NULL;
    if (fresh) {
        pthread_mutex_lock(&st->mu);
        old = st->conn;
        st->conn = fresh; /* the reference zk_conn_open gave */
        fresh->refs++;    /* the caller's */
        pthread_mutex_unlock(&st->mu);
    }
    pthread_mutex_unlock(&st->reconnect_mu);
    zk_conn_put(old); /* st's reference to the expired one */
    return fresh;
}

/* Waits until c is connected, at most until deadline_us. 1 when connected;
 * 0 when the deadline passed or the session expired. */
int zk_conn_wait_connected(struct zk_conn *c, int64_t deadline_us)
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

int zk_conn_expired(struct zk_conn *c)
{
    pthread_mutex_lock(&c->st->mu);
    int expired = c->expired;
    pthread_mutex_unlock(&c->st->mu);
    return expired;
}

void zk_conn_hold_add(struct zk_conn *c, struct zk_conn_hold *h)
{
    struct zk_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    h->next = c->holds;
    c->holds = h;
    if (c->expired) { /* expired between the grant and here */
        h->lost = 1;
        lock_count_lost(st->counters);
    }
    pthread_mutex_unlock(&st->mu);
}

void zk_conn_hold_remove(struct zk_conn *c, struct zk_conn_hold *h)
{
    pthread_mutex_lock(&c->st->mu);
    for (struct zk_conn_hold **p = &c->holds; *p; p = &(*p)->next) {
        if (*p == h) {
            *p = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->st->mu);
}

/* ---- watches ----------------------------------------------------------- */

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
        if (w->wake)
            w->wake(w);
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&c->st->mu);
}

/* Puts w on c's list of waiters for watches on path. Before the request that
 * sets the watch: a fire cannot be missed. */
void zk_waiter_add(struct zk_conn *c, struct zk_waiter *w, const char *path)
{
    memset(w, 0, sizeof(*w));
    w->path = path;
    clock_cond_init(&w->cond);
    pthread_mutex_lock(&c->st->mu);
    w->next = c->waiters;
    c->waiters = w;
    pthread_mutex_unlock(&c->st->mu);
}

void zk_waiter_remove(struct zk_conn *c, struct zk_waiter *w)
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
 * expires (ZSESSIONEXPIRED) or deadline_us passes (ZK_DEADLINE). While
 * it sleeps, w counts in watch_waiters. */
int zk_waiter_sleep(struct zk_conn *c, struct zk_waiter *w, int64_t deadline_us)
{
    struct zk_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    if (w->woken) { /* already, by another contender's watch on the same path */
        lock_count_wakeup(st->counters);
    } else {
        w->asleep = 1;
        lock_count_watch_waiter(st->counters, 1);
    }
    while (!w->woken && !c->expired &&
           clock_cond_wait_until(&w->cond, &st->mu, deadline_us) != ETIMEDOUT)
        ;
    if (w->asleep) { /* not woken: pred_watcher did not take it off */
        w->asleep = 0;
        lock_count_watch_waiter(st->counters, -1);
    }
    int rc = w->woken ? ZOK : c->expired ? ZSESSIONEXPIRED : ZK_DEADLINE;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* ---- requests ---------------------------------------------------------- */

struct zk_call *zk_call_new(struct zk_conn *c, enum zk_op op, int waited)
{
    struct zk_call *call = xcalloc(1, sizeof(*call));
    call->conn = c;
    call->op = op;
    call->refs = waited ? 2 : 1;
    clock_cond_init(&call->cond);
    return call;
}

void zk_call_free(struct zk_call *call)
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
int zk_rc_uncertain(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

/* Ends a call from its completion (results already stored): wakes the caller,
 * and when the caller has left, undoes what it no longer wants. */
static void call_done(struct zk_call *call, int rc)
{
    struct zk_conn *c = call->conn;
    /* A delete whose answer was lost: the node may still be there. (Before
     * done is set: until then the caller cannot free the call.) */
    if (call->op == OP_DELETE && zk_rc_uncertain(rc))
        zk_orphan_add(c, call->parent, call->guid);
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
        zk_delete_unwaited(c, call->created, call->guid, call->parent);
    else if (call->op == OP_CREATE && zk_rc_uncertain(rc))
        zk_orphan_add(c, call->parent, call->guid);
    zk_call_free(call);
}

/* Waits for the call until deadline_us and drops the caller's reference.
 * Returns its result code, or ZOPERATIONTIMEOUT when the deadline came first.
 * On ZOK, results the caller wants are moved out through the out arguments
 * first (any may be NULL). */
int zk_call_finish(struct zk_call *call, int64_t deadline_us, char **created,
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
        zk_call_free(call);
    return rc;
}

void zk_kids_free(char **kids, int n)
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
        call->created = xstrdup(path);
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
        call->kids = xcalloc((size_t)strings->count, sizeof(char *));
        for (int i = 0; i < strings->count; i++) {
            call->kids[i] = xstrdup(strings->data[i]);
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

/* The request of call, on st->loop's thread. */
static int call_issue(struct zk_call *call)
{
    zhandle_t *zh = call->conn->zh;
    const char *path = call->path;
    switch (call->op) {
    case OP_CREATE:
        return zoo_acreate2(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, create_done, call);
    case OP_PARENT:
        return zoo_acreate(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, string_done,
                           call);
    case OP_CHILDREN:
        return call->watch ? zoo_awget_children(zh, path, pred_watcher, call->conn,
                                                children_done, call)
                           : zoo_aget_children(zh, path, 0, children_done, call);
    case OP_EXISTS:
        return zoo_aexists(zh, path, 0, stat_done, call);
    case OP_WATCH:
        return zoo_awget(zh, path, pred_watcher, call->conn, data_done, call);
    case OP_DELETE:
        return zoo_adelete(zh, path, -1, void_done, call);
    case OP_SWEEP:
        break;
    }
    return ZBADARGUMENTS;
}

/* Sends call's request; a refusal ends it at once, as its completion would. */
static void call_send_here(struct zk_call *call)
{
    int rc = call_issue(call);
    if (rc != ZOK)
        call_done(call, rc);
}

static void call_send_job(void *arg)
{
    struct zk_call *call = arg;
    struct zk_conn *c = call->conn; /* call may be gone after the send */
    call_send_here(call);
    zk_conn_arm(c);
}

/* Sends call on c's loop: at once from its thread (a completion, a watcher:
 * the loop asks the interest again after them), else as a job. */
void zk_call_send(struct zk_call *call)
{
    struct zk_loop *loop = call->conn->st->loop;
    if (zk_loop_here(loop))
        call_send_here(call);
    else
        zk_loop_post(loop, call_send_job, call);
}

/* Creates our contender node "<parent>/_c_<guid>-lock-<seq>". ZOK with *node
 * (caller frees) and *czxid; otherwise the error. */
int zk_create(struct zk_conn *c, const char *parent, const char *guid,
              int64_t deadline_us, char **node, int64_t *czxid)
{
    struct zk_call *call = zk_call_new(c, OP_CREATE, 1);
    snprintf(call->path, sizeof(call->path), "%s/" ZK_GUID_PREFIX "%s" ZK_NODE_SUFFIX,
             parent, guid);
    snprintf(call->guid, sizeof(call->guid), "%s", guid);
    snprintf(call->parent, sizeof(call->parent), "%s", parent);
    zk_call_send(call);
    return zk_call_finish(call, deadline_us, node, czxid, NULL, NULL);
}

/* Creates the persistent node path; ZOK also when it was there. */
int zk_create_parent(struct zk_conn *c, const char *path, int64_t deadline_us)
{
    struct zk_call *call = zk_call_new(c, OP_PARENT, 1);
    snprintf(call->path, sizeof(call->path), "%s", path);
    zk_call_send(call);
    int rc = zk_call_finish(call, deadline_us, NULL, NULL, NULL, NULL);
    return rc == ZNODEEXISTS ? ZOK : rc;
}

/* The children of parent (*kids: caller frees); with watch, also sets a child
 * watch on parent (pred_watcher) in the same request, when parent exists. */
int zk_children(struct zk_conn *c, const char *parent, int watch, int64_t deadline_us,
                char ***kids, int *nkids)
{
    *kids = NULL;
    *nkids = 0;
    struct zk_call *call = zk_call_new(c, OP_CHILDREN, 1);
    snprintf(call->path, sizeof(call->path), "%s", parent);
    call->watch = watch;
    zk_call_send(call);
    return zk_call_finish(call, deadline_us, NULL, NULL, kids, nkids);
}

int zk_czxid(struct zk_conn *c, const char *node, int64_t deadline_us, int64_t *czxid)
{
    struct zk_call *call = zk_call_new(c, OP_EXISTS, 1);
    snprintf(call->path, sizeof(call->path), "%s", node);
    zk_call_send(call);
    return zk_call_finish(call, deadline_us, NULL, czxid, NULL, NULL);
}

/* Sets the data watch on node (pred_watcher). ZNONODE when it is gone: then no
 * watch was left behind. */
int zk_watch(struct zk_conn *c, const char *node, int64_t deadline_us)
{
    struct zk_call *call = zk_call_new(c, OP_WATCH, 1);
    snprintf(call->path, sizeof(call->path), "%s", node);
    zk_call_send(call);
    return zk_call_finish(call, deadline_us, NULL, NULL, NULL, NULL);
}

int zk_awatch(struct zk_conn *c, const char *node, data_completion_t done,
              const void *data)
{
    return zoo_awget(c->zh, node, pred_watcher, c, done, data);
}

int zk_alist_watch(struct zk_conn *c, const char *parent, strings_completion_t done,
                   const void *data)
{
    return zoo_awget_children(c->zh, parent, pred_watcher, c, done, data);
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

void zk_parent_of(const char *node, char *parent, size_t len)
{
    const char *slash = strrchr(node, '/');
    snprintf(parent, len, "%.*s", slash ? (int)(slash - node) : 0, node);
}

/* Deletes node; a delete whose answer was lost leaves the node to the orphan
 * sweep (call_done). */
int zk_delete(struct zk_conn *c, const char *node, int64_t deadline_us)
{
    struct zk_call *call = zk_call_new(c, OP_DELETE, 1);
    node_guid(node, call->guid);
    zk_parent_of(node, call->parent, sizeof(call->parent));
    snprintf(call->path, sizeof(call->path), "%s", node);
    zk_call_send(call);
    return zk_call_finish(call, deadline_us, NULL, NULL, NULL, NULL);
}

/* The same, without waiting: from callbacks and from session_free. A lost
 * answer leaves the node to the orphan sweep by guid ("": to nobody). */
void zk_delete_unwaited(struct zk_conn *c, const char *node, const char *guid,
                        const char *parent)
{
    struct zk_call *call = zk_call_new(c, OP_DELETE, 0);
    snprintf(call->guid, sizeof(call->guid), "%s", guid);
    snprintf(call->parent, sizeof(call->parent), "%s", parent);
    snprintf(call->path, sizeof(call->path), "%s", node);
    zk_call_send(call); /* a refusal: call_done leaves an uncertain one to the sweep */
}
