/* zk_conn: the ZooKeeper client under the zk lock (lock_zk.c, its only
 * caller): one session per struct lock and its replacement when it expires,
 * requests waited for with a deadline, watches that wake waiters, the orphan
 * sweep that deletes a node whose create or delete lost its answer, and the
 * cache of lock parents known to exist. Which contender holds a lock is
 * decided in lock_zk.c: here a node is a path, a guid and a parent.
 *
 * Threads: any thread with a lock_session calls it (the acquirers block on
 * condition variables here, never longer than their deadline). The client is
 * the single-threaded one (libzookeeper_st): st->loop's thread (zk_loop.h)
 * makes every ZooKeeper call and runs the watchers and completions, which
 * take st->mu and never block; other threads hand it their requests. No
 * ZooKeeper call is made holding st->mu.
 *
 * Calls that answer an int answer a ZooKeeper code (ZOK, ZNONODE, ...), or
 * ZOPERATIONTIMEOUT when the deadline came before the answer. */
#ifndef SECKILL_ZK_CONN_H
#define SECKILL_ZK_CONN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

#include "lock.h"

struct event;
struct lock_counters;
struct zk_loop;

#define ZK_ROOT "/seckill"
#define ZK_LOCKS ZK_ROOT "/locks"
#define ZK_PATH_MAX 1024
/* Our node names are "_c_<guid>-lock-<seq>" (guid: 32 characters). */
#define ZK_GUID_PREFIX "_c_"
#define ZK_NODE_SUFFIX "-lock-"
#define ZK_PARENT_BUCKETS 256
/* Not a ZooKeeper code (those are <= 0): the wait deadline passed while the
 * contender was waiting for its predecessor. */
#define ZK_DEADLINE 1

struct zk_state;
struct zk_orphan;
struct zk_parent;

/* A contender sleeping until the watch on its predecessor (or, watching all,
 * on the lock node's children) fires. */
struct zk_waiter {
    struct zk_waiter *next;
    const char *path; /* the watched path */
    int woken;        /* a watch on path fired */
    int asleep;       /* counted in watch_waiters */
    pthread_cond_t cond;
    /* A waiter of a step (zk_steps.c) sleeps on no thread: called, under
     * st->mu on st->loop's thread, when the watch fires or the session
     * expires (set after zk_waiter_add, on that thread). */
    void (*wake)(struct zk_waiter *w);
    void *ctx;
};

/* A hold as its session sees it: on the conn's list while held, marked lost
 * (and counted once in leases_lost) when the session expires. Under st->mu. */
struct zk_conn_hold {
    struct zk_conn_hold *next;
    int lost;
};

/* One ZooKeeper session. Replaced by a new one when it expires; freed (and its
 * handle closed, on st->loop) when the last reference goes. All fields but zh
 * and io are under st->mu; zh is set once, by zookeeper_init on st->loop, and
 * it and io are used on st->loop's thread only. */
struct zk_conn {
    struct zk_state *st;
    zhandle_t *zh;
    struct event *io;        /* the handle's socket and timeout, on st->loop */
    int refs;                /* st's while current, each acquire using it, each hold */
    int connected;           /* the last session event said so */
    int expired;             /* the session is gone: its nodes with it */
    int closing;             /* the last reference went: issue nothing more */
    int64_t disconnected_us; /* when the connection was lost; 0 when connected */
    int64_t session_us;      /* the session timeout the server granted */
    pthread_cond_t changed;  /* connected or expired changed */
    struct zk_waiter *waiters;
    struct zk_conn_hold *holds;
    struct zk_orphan *orphans;
};

/* The zk lock's state: the client's, and the recipe's settings (timeout_ms,
 * watch). */
struct zk_state {
    char *hosts;
    int session_ms;
    int timeout_ms;
    struct lock_counters *counters;
    lock_zk_watch watch;                          /* what a waiter watches */
    lock_link_fn *on_link;                        /* the session's news (lock.h) */
    struct zk_loop *loop;                         /* drives every session (zk_loop.h) */
    pthread_mutex_t mu;                           /* everything here and in every conn */
    pthread_mutex_t reconnect_mu;                 /* one new session at a time */
    struct zk_conn *conn;                         /* the current session */
    struct zk_parent *parents[ZK_PARENT_BUCKETS]; /* known to exist */
    int steps;                                    /* zk_steps.c's jobs alive */
    pthread_cond_t steps_gone;                    /* steps went to 0 */
};

/* The client library's log lines go to sink (LOCK_LINK_CLIENT), or nowhere
 * (NULL). The library's log is process-wide; so is this. */
void zk_conn_log_to(lock_link_fn *sink);

/* ---- sessions ---------------------------------------------------------- */

/* A new session of st (connecting in the background), with one reference for
 * the caller; NULL when the client refuses the hosts. */
struct zk_conn *zk_conn_open(struct zk_state *st);

/* Drops a reference; the last one closes the session (its nodes go) and frees
 * c. NULL is a no-op. Never called holding st->mu. */
void zk_conn_put(struct zk_conn *c);

/* st's current session with a reference for the caller, after replacing it
 * with a new one if it expired. NULL when no new one could be made (st keeps
 * the expired one). */
struct zk_conn *zk_conn_get(struct zk_state *st);

/* Waits until c is connected, at most until deadline_us. 1 when connected;
 * 0 when the deadline passed or the session expired. */
int zk_conn_wait_connected(struct zk_conn *c, int64_t deadline_us);

/* 1 once c's session expired (its ephemeral nodes are gone). */
int zk_conn_expired(struct zk_conn *c);

/* Puts h on c's list of holds, marked lost at once when c already expired. */
void zk_conn_hold_add(struct zk_conn *c, struct zk_conn_hold *h);

/* Takes h off c's list (a no-op when it is not on it). */
void zk_conn_hold_remove(struct zk_conn *c, struct zk_conn_hold *h);

/* ---- requests ---------------------------------------------------------- */

/* Creates our contender node "<parent>/_c_<guid>-lock-<seq>"
 * (EPHEMERAL_SEQUENTIAL). ZOK with *node (caller frees) and *czxid; otherwise
 * the error. A create still pending at the deadline is finished by its
 * completion: the node is deleted (or left to the orphan sweep). */
int zk_create(struct zk_conn *c, const char *parent, const char *guid,
              int64_t deadline_us, char **node, int64_t *czxid);

/* The children of parent (*kids, *nkids: caller frees with zk_kids_free; NULL
 * and 0 on an error); with watch, also sets a child watch on parent (it wakes
 * the waiters on parent) in the same request, when parent exists. */
int zk_children(struct zk_conn *c, const char *parent, int watch, int64_t deadline_us,
                char ***kids, int *nkids);

/* Frees what zk_children gave. */
void zk_kids_free(char **kids, int n);

/* The czxid of node into *czxid; ZNONODE when it is gone. */
int zk_czxid(struct zk_conn *c, const char *node, int64_t deadline_us, int64_t *czxid);

/* Sets the data watch on node (it wakes the waiters on node). ZNONODE when it
 * is gone: then no watch was left behind. */
int zk_watch(struct zk_conn *c, const char *node, int64_t deadline_us);

/* Deletes node; a delete whose answer was lost leaves the node to the orphan
 * sweep (found by the guid in its name). */
int zk_delete(struct zk_conn *c, const char *node, int64_t deadline_us);

/* The same, without waiting: from callbacks and from session_free. A lost
 * answer leaves the node to the orphan sweep by guid under parent ("": to
 * nobody). */
void zk_delete_unwaited(struct zk_conn *c, const char *node, const char *guid,
                        const char *parent);

/* 1 when name is one of our node names and carries guid. */
int zk_has_guid(const char *name, const char *guid);

/* The parent path of node into parent (len bytes); "" for a name without '/'. */
void zk_parent_of(const char *node, char *parent, size_t len);

/* On st->loop's thread only: asks the client's interest again after a
 * request made outside a completion or watcher (a job, a timer). */
void zk_conn_arm(struct zk_conn *c);

/* On st->loop's thread only: sets the data watch on node (waking the
 * waiters on node), without waiting: done(rc, ..., data) answers. */
int zk_awatch(struct zk_conn *c, const char *node, data_completion_t done,
              const void *data);
/* On st->loop's thread only: lists parent's children and sets a child watch
 * on parent (waking the waiters on parent) in one request, without waiting:
 * done(rc, kids, data) answers. The naive recipe's request (the herd). */
int zk_alist_watch(struct zk_conn *c, const char *parent, strings_completion_t done,
                   const void *data);

/* ---- watches ----------------------------------------------------------- */

/* Puts w on c's list of waiters for watches on path (borrowed until
 * zk_waiter_remove). Before the request that sets the watch: a fire cannot be
 * missed. */
void zk_waiter_add(struct zk_conn *c, struct zk_waiter *w, const char *path);

/* Takes w off c's list and destroys it. */
void zk_waiter_remove(struct zk_conn *c, struct zk_waiter *w);

/* Sleeps until w's watch fires (ZOK, counted in watch_wakeups), the session
 * expires (ZSESSIONEXPIRED) or deadline_us passes (ZK_DEADLINE). While it
 * sleeps, w counts in watch_waiters. */
int zk_waiter_sleep(struct zk_conn *c, struct zk_waiter *w, int64_t deadline_us);

/* ---- orphans ----------------------------------------------------------- */

/* Remembers that a node of ours carrying guid may exist under parent, unwanted:
 * once c is connected it is looked for by its guid and deleted, in the
 * background. Nothing when guid is "" or c's session is gone. */
void zk_orphan_add(struct zk_conn *c, const char *parent, const char *guid);

/* Looks for every orphan of c by its guid and deletes it, in the background;
 * nothing unless c is connected. An orphan whose answer is lost stays for the
 * next sweep. */
void zk_orphans_sweep(struct zk_conn *c);

/* ---- parents ----------------------------------------------------------- */

/* Creates /seckill, /seckill/locks and parent unless parent is known to exist;
 * remembers it on success. ZOK, or the first error. */
int zk_parents_ensure(struct zk_conn *c, const char *parent, int64_t deadline_us);

/* 1 when parent is known to exist. */
int zk_parent_known(struct zk_state *st, const char *path);

/* Remembers parent as known to exist (known 1) or forgets it (known 0). */
void zk_parent_remember(struct zk_state *st, const char *path, int known);

/* Forgets every parent (when st goes). */
void zk_parents_free(struct zk_state *st);

#endif
