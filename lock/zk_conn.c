/* zk_conn: the ZooKeeper client under the zk lock (see zk_conn.h).
 *
 * One ZooKeeper session (one zhandle) per struct lock, that is per process,
 * driven by one thread (st->loop, zk_loop.h) on the single-threaded client:
 * every thread's requests go out on one connection, one heartbeat keeps every
 * hold of the process alive, and when the process dies or is cut off past the
 * session timeout, all its nodes go at once.
 *
 * Besides the session: the watches that wake the recipe's waiters, deletes
 * that nobody waits for, and the orphan sweep, which deletes a node of ours
 * whose create or delete lost its answer, found by the guid in its name once
 * the session is connected again. Nothing here blocks, and no ZooKeeper call
 * is made holding st->mu (the callbacks, on st->loop's thread, take it). */
#include "zk_conn.h"

#include "clock.h"
#include "lock_impl.h"
#include "xalloc.h"
#include "zk_loop.h"

#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A node of ours that may exist but is no longer wanted: found by its guid
 * under parent once connected, and deleted. */
struct zk_orphan {
    struct zk_orphan *next;
    char guid[33];
    char parent[];
};

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
            w->wake(w);
        }
    } else if (c->connected) { /* connecting, associating: the connection dropped */
        down = "connection lost";
        c->connected = 0;
        c->disconnected_us = clock_now_us();
    }
    int closing = c->closing;
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
    zk_loop_call(st->loop, conn_open_here, c);
    if (!c->zh) {
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
        w->wake(w);
    }
    pthread_mutex_unlock(&c->st->mu);
}

/* Puts w on c's list of waiters for watches on path. Before the request that
 * sets the watch: a fire cannot be missed. */
void zk_waiter_add(struct zk_conn *c, struct zk_waiter *w, const char *path,
                   void (*wake)(struct zk_waiter *w), void *ctx)
{
    memset(w, 0, sizeof(*w));
    w->path = path;
    w->wake = wake;
    w->ctx = ctx;
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
}

/* ---- requests ---------------------------------------------------------- */

/* A request that nobody waits for: a delete (OP_DELETE), or an orphan
 * looked for by its guid (OP_SWEEP). Freed by its completion. */
enum zk_op { OP_DELETE, OP_SWEEP };

struct zk_call {
    struct zk_conn *conn;
    enum zk_op op;
    struct zk_orphan *orphan; /* OP_SWEEP */
    /* OP_DELETE: the node's guid and parent, to find it later */
    char guid[33];
    char parent[ZK_PATH_MAX];
    char path[ZK_PATH_MAX]; /* the node the request is about */
};

static struct zk_call *call_new(struct zk_conn *c, enum zk_op op)
{
    struct zk_call *call = xcalloc(1, sizeof(*call));
    call->conn = c;
    call->op = op;
    return call;
}

static void call_free(struct zk_call *call)
{
    free(call->orphan);
    free(call);
}

int zk_rc_uncertain(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

/* A delete answered: one whose answer was lost leaves the node (it may
 * still be there) to the orphan sweep. */
static void deleted(int rc, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    if (zk_rc_uncertain(rc))
        zk_orphan_add(call->conn, call->parent, call->guid);
    call_free(call);
}

/* Sends the delete on st->loop's thread: at once from there (a completion, a
 * watcher, a job: the loop asks the interest again after them), else as a
 * job, which the caller's reference to the conn keeps before its close. */
static void delete_here(void *arg)
{
    struct zk_call *call = arg;
    int rc = zoo_adelete(call->conn->zh, call->path, -1, deleted, call);
    if (rc != ZOK) /* refused: as its completion would */
        deleted(rc, call);
}

static void delete_job(void *arg)
{
    struct zk_call *call = arg;
    struct zk_conn *c = call->conn; /* call may be gone after the send */
    delete_here(call);
    zk_conn_arm(c);
}

void zk_delete_unwaited(struct zk_conn *c, const char *node, const char *guid,
                        const char *parent)
{
    struct zk_call *call = call_new(c, OP_DELETE);
    snprintf(call->guid, sizeof(call->guid), "%s", guid);
    snprintf(call->parent, sizeof(call->parent), "%s", parent);
    snprintf(call->path, sizeof(call->path), "%s", node);
    if (zk_loop_here(c->st->loop))
        delete_here(call);
    else
        zk_loop_post(c->st->loop, delete_job, call);
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

void zk_parent_of(const char *node, char *parent, size_t len)
{
    const char *slash = strrchr(node, '/');
    snprintf(parent, len, "%.*s", slash ? (int)(slash - node) : 0, node);
}

/* ---- orphans ----------------------------------------------------------- */

int zk_has_guid(const char *name, const char *guid)
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
    if (zk_rc_uncertain(rc)) {
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
            if (!zk_has_guid(strings->data[i], call->orphan->guid))
                continue;
            char node[ZK_PATH_MAX];
            snprintf(node, sizeof(node), "%s/%s", call->orphan->parent, strings->data[i]);
            rc = zoo_adelete(c->zh, node, -1, sweep_deleted, call);
            if (rc == ZOK)
                return; /* sweep_deleted carries on */
            break;
        }
    }
    if (zk_rc_uncertain(rc)) {
        orphan_requeue(c, call->orphan);
        call->orphan = NULL;
    }
    call_free(call);
}

/* The sweep, on c's loop. */
static void sweep_here(struct zk_conn *c)
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
        struct zk_call *call = call_new(c, OP_SWEEP);
        call->orphan = o;
        if (zoo_aget_children(c->zh, o->parent, 0, sweep_listed, call) != ZOK) {
            orphan_requeue(c, o);
            call->orphan = NULL;
            call_free(call);
        }
    }
}

/* A sweep asked from another thread: holds a reference to c. */
static void sweep_job(void *arg)
{
    struct zk_conn *c = arg;
    sweep_here(c);
    zk_conn_arm(c);
    zk_conn_put(c);
}

/* Looks for every orphan of c by its guid and deletes it, in the background:
 * at once on c's loop, else as a job (not once c is closing). */
void zk_orphans_sweep(struct zk_conn *c)
{
    struct zk_state *st = c->st;
    if (zk_loop_here(st->loop)) {
        sweep_here(c);
        return;
    }
    pthread_mutex_lock(&st->mu);
    int go = !c->closing && !c->expired && c->orphans;
    if (go)
        c->refs++;
    pthread_mutex_unlock(&st->mu);
    if (go)
        zk_loop_post(st->loop, sweep_job, c);
}

void zk_orphan_add(struct zk_conn *c, const char *parent, const char *guid)
{
    if (!guid[0])
        return;
    size_t len = strlen(parent);
    struct zk_orphan *o = xcalloc(1, sizeof(*o) + len + 1);
    snprintf(o->guid, sizeof(o->guid), "%s", guid);
    memcpy(o->parent, parent, len + 1);
    orphan_requeue(c, o);
    zk_orphans_sweep(c);
}

/* ---- parents ----------------------------------------------------------- */

/* A parent known to exist (st->parents). */
struct zk_parent {
    struct zk_parent *next;
    char path[];
};

static unsigned parent_bucket(const char *path)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % ZK_PARENT_BUCKETS;
}

int zk_parent_known(struct zk_state *st, const char *path)
{
    pthread_mutex_lock(&st->mu);
    struct zk_parent *p = st->parents[parent_bucket(path)];
    while (p && strcmp(p->path, path) != 0)
        p = p->next;
    pthread_mutex_unlock(&st->mu);
    return p != NULL;
}

void zk_parent_remember(struct zk_state *st, const char *path, int known)
{
    unsigned b = parent_bucket(path);
    pthread_mutex_lock(&st->mu);
    struct zk_parent **pp = &st->parents[b];
    while (*pp && strcmp((*pp)->path, path) != 0)
        pp = &(*pp)->next;
    if (known && !*pp) {
        size_t len = strlen(path);
        struct zk_parent *p = xcalloc(1, sizeof(*p) + len + 1);
        memcpy(p->path, path, len + 1);
        *pp = p;
    } else if (!known && *pp) {
        struct zk_parent *p = *pp;
        *pp = p->next;
        free(p);
    }
    pthread_mutex_unlock(&st->mu);
}

void zk_parents_free(struct zk_state *st)
{
    for (int i = 0; i < ZK_PARENT_BUCKETS; i++) {
        while (st->parents[i]) {
            struct zk_parent *p = st->parents[i];
            st->parents[i] = p->next;
            free(p);
        }
    }
}
