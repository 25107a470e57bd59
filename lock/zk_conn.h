/* zk_conn: the ZooKeeper client under the zk lock's recipe (lock_zk.c,
 * zk_steps.c): one session per struct lock and its replacement when it
 * expires, the watches that wake waiters, deletes nobody waits for, the
 * orphan sweep that deletes a node whose create or delete lost its answer,
 * the cache of lock parents known to exist, and the state the recipe keeps
 * beside it (struct zk_state). Which contender
 * holds a lock is decided above: here a node is a path, a guid and a parent.
 * Nothing here calls the recipe; it reaches a waiter only through the wake
 * callback it was given.
 *
 * Threads: the client is the single-threaded one (libzookeeper_st):
 * st->loop's thread (zk_loop.h) makes every ZooKeeper call and runs the
 * watchers and completions, which take st->mu and never block; other threads
 * hand it their requests. No ZooKeeper call is made holding st->mu. */
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
/* Our node names are "_c_<guid>-lock-<seq>" (guid: 32 characters, lower
 * case hex; its first one ZK_HELD_MARK for a plain lock that reads a
 * read-write lock whose caller holds another reader of it already,
 * zk_steps.c: a name every build parses as a plain lock's); those of the
 * read-write lock "_c_<guid>-read-<seq>" and "_c_<guid>-write-<seq>". */
#define ZK_GUID_PREFIX "_c_"
#define ZK_NODE_SUFFIX "-lock-"
#define ZK_READ_SUFFIX "-read-"
#define ZK_WRITE_SUFFIX "-write-"
#define ZK_HELD_MARK 'h' /* no hex digit */
#define ZK_PARENT_BUCKETS 256

struct zk_state;
struct zk_orphan;
struct zk_parent;

/* A contender asleep until the watch on its predecessor (or, watching all,
 * on the lock node's children) fires: wake is called, under st->mu on
 * st->loop's thread, when it fires or the session expires. */
struct zk_waiter {
    struct zk_waiter *next;
    const char *path; /* the watched path */
    int woken;        /* a watch on path fired */
    int asleep;       /* counted in watch_waiters */
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

/* 1 once c's session expired (its ephemeral nodes are gone). */
int zk_conn_expired(struct zk_conn *c);

/* Puts h on c's list of holds, marked lost at once when c already expired. */
void zk_conn_hold_add(struct zk_conn *c, struct zk_conn_hold *h);

/* Takes h off c's list (a no-op when it is not on it). */
void zk_conn_hold_remove(struct zk_conn *c, struct zk_conn_hold *h);

/* ---- requests ---------------------------------------------------------- */

/* Deletes node, from any thread, without waiting: a lost answer leaves the
 * node to the orphan sweep by guid under parent ("": to nobody). */
void zk_delete_unwaited(struct zk_conn *c, const char *node, const char *guid,
                        const char *parent);

/* 1 when name is one of our node names and carries guid. */
int zk_has_guid(const char *name, const char *guid);

/* Whether a request that failed with rc may have been carried out all the
 * same (its answer lost with the connection). */
int zk_rc_uncertain(int rc);

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
 * zk_waiter_remove), to be woken by wake(w) (ctx is the caller's). Before the
 * request that sets the watch: a fire cannot be missed. */
void zk_waiter_add(struct zk_conn *c, struct zk_waiter *w, const char *path,
                   void (*wake)(struct zk_waiter *w), void *ctx);

/* Takes w off c's list. */
void zk_waiter_remove(struct zk_conn *c, struct zk_waiter *w);

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

/* The lock parents known to exist (st->parents), so that a contender creates
 * them once. Any thread. */

/* 1 when path is known to exist. */
int zk_parent_known(struct zk_state *st, const char *path);
/* Remembers path as known to exist (known 1) or forgets it (known 0). */
void zk_parent_remember(struct zk_state *st, const char *path, int known);
/* Forgets every parent (when st goes). */
void zk_parents_free(struct zk_state *st);

#endif
