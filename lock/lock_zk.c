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
 * One ZooKeeper session (one zhandle) per struct lock, that is per process
 * (zk_conn.c: sessions, requests, watches, orphans and parents live there).
 * Threads (struct lock_session) are told apart by their nodes, not by
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
 * Bounded waits: every request is waited for with a deadline (zk_conn.c), so
 * ZooKeeper being down or hung costs at most the wait deadline (requests get
 * at least ZK_TRY_FLOOR_MS, so that a try-lock with no wait still gets its
 * round trips). No ZooKeeper call is made holding st->mu (the callbacks, on
 * the zk loop's thread, take it). */
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
#define ZK_SEQ_DIGITS 10
/* Least time the requests of one acquire get, whatever its wait. */
#define ZK_TRY_FLOOR_MS 200
#define ZK_DEFAULT_SESSION_MS 3000

/* ---- the recipe -------------------------------------------------------- */

/* The parent node of key's lock into out; -1 when the key is too long. */
int zk_key_path(const char *key, char *out, size_t len)
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
        if (!zk_has_guid(kids[i], a->guid))
            continue;
        snprintf(a->node, sizeof(a->node), "%s/%s", a->parent, kids[i]);
        rc = zk_czxid(a->conn, a->node, a->hard_us, &a->czxid);
        if (rc != ZOK)
            a->node[0] = '\0';
    }
    zk_kids_free(kids, n);
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
            if (!zk_conn_wait_connected(a->conn, a->deadline_us)) {
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
        rc = zk_parents_ensure(a->conn, a->parent, a->hard_us);
        if (rc == ZCONNECTIONLOSS && zk_conn_wait_connected(a->conn, a->deadline_us))
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
            zk_parent_remember(a->conn->st, a->parent, 0);
            continue;
        }
        if (rc == ZOPERATIONTIMEOUT) /* still pending: its completion cleans up */
            return rc;
        if (rc != ZCONNECTIONLOSS)
            return rc;
        uncertain = 1;
    }
    if (uncertain && !zk_conn_expired(a->conn))
        zk_orphan_add(a->conn, a->parent, a->guid);
    return rc;
}

/* Which of kids[0..n-1] (children of parent) precedes our node (its path):
 * ZOK with pred its path, "" when ours is the lowest; ZNONODE when ours is
 * not among them. Deletes (on c) any other node carrying our guid. */
int zk_predecessor(struct zk_conn *c, char **kids, int n, const char *parent,
                   const char *node, const char *guid, char *pred, size_t len)
{
    const char *mine = strrchr(node, '/') + 1;
    long long my_seq = -1, best_seq = -1;
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(kids[i], mine) == 0) {
            my_seq = node_seq(mine);
        } else if (zk_has_guid(kids[i], guid)) {
            /* A second node of this attempt: a create whose answer was lost
             * and that reached the server after find_own looked. No guid for
             * the orphan sweep, which would delete ours too: a lost delete is
             * tried again by the next listing. */
            char dup[ZK_PATH_MAX];
            snprintf(dup, sizeof(dup), "%s/%s", parent, kids[i]);
            zk_delete_unwaited(c, dup, "", parent);
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
        snprintf(pred, len, "%s/%s", parent, kids[best]);
    return my_seq >= 0 ? ZOK : ZNONODE;
}

/* Lists the children (with watch, also watching them: see zk_children): as
 * zk_predecessor. */
static int find_predecessor(struct zk_attempt *a, int watch, char *pred, size_t len)
{
    char **kids;
    int n;
    int rc = zk_children(a->conn, a->parent, watch, a->hard_us, &kids, &n);
    if (rc != ZOK)
        return rc;
    rc = zk_predecessor(a->conn, kids, n, a->parent, a->node, a->guid, pred, len);
    zk_kids_free(kids, n);
    return rc;
}

/* One round of the recipe: lists the children; ZOK with *held set when ours
 * is the lowest. Otherwise watches only the immediate predecessor and sleeps
 * until that watch fires: ZOK (list again), or as zk_waiter_sleep. ZOK at once
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
    zk_waiter_add(c, &w, pred);
    rc = zk_watch(c, pred, a->hard_us);
    if (rc == ZOK)
        rc = zk_waiter_sleep(c, &w, a->deadline_us);
    else if (rc == ZNONODE)
        rc = ZOK; /* gone before we could watch it: list again */
    zk_waiter_remove(c, &w);
    return rc;
}

/* One round of the naive recipe (the herd): lists the children and watches
 * them in one request; ZOK with *held set when ours is the lowest, else sleeps
 * until any child of the lock node comes or goes: ZOK (list again), or as
 * zk_waiter_sleep. */
static int round_watch_all(struct zk_attempt *a, int *held)
{
    struct zk_conn *c = a->conn;
    struct zk_waiter w;
    char pred[ZK_PATH_MAX];
    zk_waiter_add(c, &w, a->parent);
    int rc = find_predecessor(a, 1, pred, sizeof(pred));
    *held = rc == ZOK && !pred[0];
    if (rc == ZOK && !*held) {
        a->contended = 1;
        rc = clock_now_us() >= a->deadline_us ? ZK_DEADLINE
                                              : zk_waiter_sleep(c, &w, a->deadline_us);
    }
    zk_waiter_remove(c, &w);
    return rc;
}

/* Gives up after rc: deletes our node, if any, waiting for that at most
 * ZK_TRY_FLOOR_MS (a delete still pending then, or whose answer is lost, is
 * finished in the background: see call_done in zk_conn.c). LOCK_BUSY only for a wait that
 * ran out while ZooKeeper was there to ask. */
static enum zk_try give_up(struct zk_attempt *a, int rc)
{
    struct zk_conn *c = a->conn;
    if (zk_conn_expired(c))
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
    if (!zk_conn_wait_connected(a->conn, a->deadline_us))
        return zk_conn_expired(a->conn) ? TRY_AGAIN : TRY_ERROR;
    zk_orphans_sweep(a->conn);
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
            return zk_conn_expired(a->conn) || clock_now_us() < a->deadline_us
                       ? TRY_AGAIN
                       : TRY_ERROR;
        }
        if (rc == ZCONNECTIONLOSS && zk_conn_wait_connected(a->conn, a->deadline_us))
            continue;
        return give_up(a, rc);
    }
}

/* ---- holds ------------------------------------------------------------- */

struct zk_hold *zk_hold_find(struct zk_session *s, const char *key)
{
    for (struct zk_hold *h = s->holds; h; h = h->snext)
        if (!h->detached && strcmp(h->key, key) == 0)
            return h;
    return NULL;
}

/* A hold of key from a's grant; takes over a's reference to the conn. */
struct zk_hold *zk_hold_new(struct zk_session *s, const char *key, struct zk_conn *c,
                            int64_t czxid, const char *guid, const char *node)
{
    struct zk_hold *h = xcalloc(1, sizeof(*h));
    h->key = xstrdup(key);
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
 * thread that took it (on a Redis Cluster a blocking caller has one per master,
 * and a hold taken on one is released on another when the map changed
 * meanwhile): the hold leaves its owner's list, not the caller's, or the owner
 * would keep a freed hold. */
void zk_hold_free(struct zk_hold *h)
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
int zk_hold_alive(struct zk_state *st, const struct zk_hold *h)
{
    pthread_mutex_lock(&st->mu);
    int alive = !h->cl.lost && !h->conn->expired;
    pthread_mutex_unlock(&st->mu);
    return alive;
}

void zk_grant_fill(struct zk_state *st, struct zk_hold *h, int contended,
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
        if (zk_hold_alive(s->st, h)) {
            char parent[ZK_PATH_MAX];
            zk_parent_of(h->node, parent, sizeof(parent));
            zk_delete_unwaited(h->conn, h->node, h->guid, parent);
        }
        zk_hold_free(h);
    }
    free(s);
}

static lock_status zk_acquire(void *session, const char *key, int64_t deadline_us,
                              struct lock_grant *g)
{
    struct zk_session *s = session;
    struct zk_state *st = s->st;
    struct zk_hold *h = zk_hold_find(s, key);
    if (h && zk_hold_alive(st, h)) {
        h->depth++;
        zk_grant_fill(st, h, 0, g);
        return LOCK_ACQUIRED;
    }
    if (h) /* lost: its grants release as NOT_HELD; this one is new */
        h->detached = 1;
    char parent[ZK_PATH_MAX];
    if (zk_key_path(key, parent, sizeof(parent)) != 0)
        return LOCK_ERROR;
    int64_t floor_us = clock_now_us() + (int64_t)ZK_TRY_FLOOR_MS * 1000;
    struct zk_attempt a = {.parent = parent,
                           .deadline_us = deadline_us,
                           .hard_us = deadline_us > floor_us ? deadline_us : floor_us};
    for (;;) {
        a.conn = zk_conn_get(st);
        if (!a.conn)
            return LOCK_ERROR;
        lock_token_new(a.guid);
        a.node[0] = '\0';
        enum zk_try t = contend(&a);
        if (t == TRY_ACQUIRED) {
            zk_grant_fill(st, zk_hold_new(s, key, a.conn, a.czxid, a.guid, a.node),
                          a.contended, g);
            return LOCK_ACQUIRED;
        }
        zk_conn_put(a.conn);
        if (t == TRY_AGAIN && clock_now_us() < deadline_us)
            continue;
        return t == TRY_BUSY ? LOCK_BUSY : LOCK_ERROR;
    }
}

lock_status zk_hold_release(struct zk_session *s, const char *key, struct lock_grant *g,
                            int wait)
{
    struct zk_hold *h = g->holder;
    if (!h || strcmp(h->key, key) != 0)
        return LOCK_NOT_HELD;
    g->holder = NULL;
    int alive = zk_hold_alive(s->st, h);
    if (--h->depth > 0)
        return alive ? LOCK_RELEASED : LOCK_NOT_HELD;
    lock_status res = LOCK_NOT_HELD;
    if (alive && !wait) {
        char parent[ZK_PATH_MAX];
        zk_parent_of(h->node, parent, sizeof(parent));
        zk_delete_unwaited(h->conn, h->node, h->guid, parent);
        res = LOCK_RELEASED;
    } else if (alive) {
        int64_t until = clock_now_us() + (int64_t)s->st->timeout_ms * 1000;
        int rc = zk_delete(h->conn, h->node, until);
        if (rc == ZOK)
            res = LOCK_RELEASED;
        else if (rc == ZNONODE || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE)
            res = LOCK_NOT_HELD; /* deleted under us, or the session went meanwhile */
        else
            res = LOCK_ERROR; /* unknown: a lost delete is retried after reconnect */
    }
    zk_hold_free(h);
    return res;
}

static lock_status zk_release(void *session, const char *key, struct lock_grant *g)
{
    return zk_hold_release(session, key, g, 1);
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
    .acquire = zk_acquire,
    .release = zk_release,
    .valid_until = zk_valid_until,
    /* steps done elsewhere (zk_steps.c) */
    .try_cmd = zk_try_cmd,
    .step_answer = lock_answer_nothing,
    .try_done = zk_try_done,
    .release_cmd = zk_release_cmd,
    .release_done = zk_release_done,
    .step_start = zk_step_start,
    .step_cancel = zk_step_cancel,
    .fences = 1, /* the czxid */
};
