/* zk_impl: the zk lock's requests as jobs on the zk loop (zk_steps.c), for
 * the recipe above them (lock_zk.c, their only caller: the steps of the
 * backend, the holds of its sessions). zk_steps.c calls zk_conn.c and
 * zk_loop.c, never lock_zk.c: it reaches its caller only through the done
 * callback it was given. Private to lock/. */
#ifndef SECKILL_ZK_IMPL_H
#define SECKILL_ZK_IMPL_H

#include "lock_impl.h"
#include "zk_conn.h"

struct event;
struct event_base;

enum zk_phase {
    ZS_CONNECT,
    ZS_PARENTS,
    ZS_CREATE,
    ZS_FIND,
    ZS_STAT,
    ZS_RWCHECK,
    ZS_LIST,
    ZS_READERS,
    ZS_PAUSE,
    ZS_WATCH,
    ZS_WAIT,
    ZS_DELETE,
    ZS_DONE
};

/* One acquire or release, shared by its caller and the zk loop (zk_steps.c
 * says how). Once zk_job_take answered, the caller reads the outcome: res,
 * and for a grant node, guid, czxid and conn (its reference, which the
 * caller may take over, leaving NULL), and contended. */
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
    lock_side side; /* an acquire's: which node it makes, which it waits for */
    int watching; /* w is on the conn's list */
    /* A plain lock that reads a read-write lock (zk_job_read_of): */
    char rw_parent[ZK_PATH_MAX]; /* the read-write lock's node; "" none */
    int held;                    /* the caller reads it already: no look */
    int rw_checked;              /* our node's look for a writer is done */
    int rw_asked;                /* the looks in flight */
    int writer_seen;             /* busy: a writer was there (it polls) */
    int rw_fresh;                /* the look was just done: the next list needs none */
    int rw_writer;               /* the look sent with the last list saw a writer */
    /* A write side that waits for such readers (zk_job_write_over): */
    char readers[ZK_PATH_MAX]; /* their nodes' prefix: "<readers><i>" */
    int nreaders;
    int asked, answered; /* READERS: requests in flight, lists answered */
    int old_readers;     /* READERS: readers found that keep us out */
    char **asked_paths;  /* READERS: the nodes whose czxid is asked, in order */
    int asked_paths_n, asked_paths_cap, asked_paths_next;
    char blocker[ZK_PATH_MAX]; /* READERS: one of the readers that keep us out */
    int readers_rc;      /* READERS: the first failure, ZOK none */
    int64_t poll_us;     /* PAUSE: the last pause */
    struct zk_waiter w;
    char parent[ZK_PATH_MAX], guid[33], node[ZK_PATH_MAX], pred[ZK_PATH_MAX];
    int64_t czxid, deadline_us, hard_us;
    struct event *timer, *retry; /* on the zk loop: the bound, the reconnect */
    struct event *deliver;       /* on the caller's base */
    lock_step_cb *done;
    void *arg;
};

/* A job of st for a caller on base, with the caller's reference: done(arg) is
 * called on base's thread once it is over (never from inside these calls),
 * unless the caller took or cancelled it first. */
struct zk_job *zk_job_new(struct zk_state *st, struct event_base *base,
                          lock_step_cb *done, void *arg);
/* Ends j before it started, with res: done is called as after a run. */
void zk_job_end(struct zk_job *j, lock_status res);
/* Makes j's acquire (a plain lock) a reader of the read-write lock whose
 * node is rw_parent: refused (busy, j->writer_seen) when a writer's node is
 * there as ours is made; held: the caller reads it already, no look, and
 * our node is marked as such a reader (ZK_HELD_MARK). Before
 * zk_job_acquire. */
void zk_job_read_of(struct zk_job *j, const char *rw_parent, int held);
/* Makes j's acquire (a write side) wait, once its turn came, until no
 * reader "<readers><i>" (i < n, the nodes' paths) older than its node, or
 * marked held, is there. Before zk_job_acquire. */
void zk_job_write_over(struct zk_job *j, const char *readers, int n);
/* Starts j as an acquire of side under parent (a fresh guid), on st's
 * current session, waiting until deadline_us (its requests get at least a
 * floor). */
void zk_job_acquire(struct zk_job *j, const char *parent, lock_side side,
                    int64_t deadline_us);
/* Starts j as the release of node (guid's, on session c: a reference of the
 * job's own is taken). */
void zk_job_release(struct zk_job *j, struct zk_conn *c, const char *node,
                    const char *guid);
/* The caller's end of j: nothing is delivered any more. Its outcome
 * (LOCK_ERROR when it was not over). */
lock_status zk_job_take(struct zk_job *j);
/* The caller gives j up (taken or not) and drops its reference: a job not
 * over ends now, a grant nobody took is let go. j is not to be used after. */
void zk_job_cancel(struct zk_job *j);
/* Drops the caller's reference once taken. */
void zk_job_put(struct zk_job *j);
/* Waits (at most the request timeout) until every job is gone: a cancelled
 * one may still wait for a request's answer. Before st goes. */
void zk_steps_drain(struct zk_state *st);

#endif
