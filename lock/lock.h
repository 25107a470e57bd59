/* lock: distributed (and not so distributed) mutual exclusion behind one interface.
 *
 * A `struct lock` is one lock mode for the whole process, shared by all threads.
 * Each thread opens a `struct lock_session` on it, which holds that thread's
 * connections (the caller's data Redis connection is borrowed, never freed).
 * Lock keys are plain strings chosen by the caller; this library knows nothing
 * of what they protect.
 *
 * Fencing: a mode with `fenced` set hands out, with every grant, a token that is
 * strictly greater than every token granted before for that key. The counter
 * lives on the data Redis at "<key>:fence" (see lock_fence_key), so a commit
 * script can refuse a write whose grant is no longer the newest; the zk mode's
 * token comes from ZooKeeper instead (the lock node's czxid), the pg mode's
 * from PostgreSQL (the lock row's version), and no counter is kept for them.
 * The key's value is "<token>[|<token>...]": the last token taken, then the
 * high water of each other namespace whose tokens took it before (tokens of
 * two namespaces are never compared: inventory/lua/fence.lua). */
#ifndef SECKILL_LOCK_H
#define SECKILL_LOCK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rconn.h"

typedef enum {
    LOCK_ACQUIRED = 0, /* acquire: the caller holds the lock */
    LOCK_RELEASED,     /* release: the lock was held by the caller and is now free */
    LOCK_BUSY,         /* acquire: another holder kept it until the wait deadline */
    LOCK_NOT_HELD,     /* release: the caller's lease had already expired or moved on */
    LOCK_ERROR,        /* Redis or ZooKeeper unreachable or failing; nothing held */
    LOCK_PENDING,      /* steps only: the attempt goes on (lock_try_done) */
} lock_status;

/* Which side of a key an acquire takes. A key is either a plain lock
 * (lock_acquire: LOCK_EXCLUSIVE) or a read-write lock (lock_rw_acquire), never
 * both. */
typedef enum {
    LOCK_EXCLUSIVE = 0, /* the plain lock */
    LOCK_READ,          /* shared: readers hold together, never with a writer */
    LOCK_WRITE,         /* exclusive: no reader, no other writer */
} lock_side;

/* What a successful acquire hands back. Plain value; the caller keeps it until
 * release. */
struct lock_grant {
    char token[33];         /* owner token: 128 random bits in hex */
    uint64_t fence;         /* fencing token's number; 0 when the mode has none */
    char fence_owner[33];   /* whose it is (lock_fence_text): "" for zk's czxid */
    char fence_ns[8];       /* a token from outside the data Redis: the lock
                               namespace it belongs to ("pg"), "" for zk's czxid */
    int64_t acquired_us;    /* monotonic time of the grant */
    int64_t valid_until_us; /* monotonic time after which the lease may be lost */
    int64_t waited_us;      /* time spent waiting for it */
    int contended;          /* 1 when the first attempt found it taken */
    void *holder;           /* backend-private (watchdog entry, redlock nodes, ...) */
    lock_side side;         /* what it holds; its release lets go of that */
    const char *rw;         /* the read-write lock an exclusive grant reads
                               (lock_step_read_of), NULL: none; borrowed */
};

/* zk: what a waiting contender watches. */
typedef enum {
    /* its immediate predecessor: a release wakes one waiter (the recipe) */
    LOCK_ZK_WATCH_PREDECESSOR = 0,
    /* the lock node's children, as the naive recipe does: every create and
     * delete under it wakes every waiter (the herd effect) */
    LOCK_ZK_WATCH_ALL,
} lock_zk_watch;

/* What a lock tells its user of the service it stands on (zk: the ZooKeeper
 * ensemble), for the log. */
typedef enum {
    LOCK_LINK_DOWN = 0, /* a connected session lost its connection, or expired */
    LOCK_LINK_UP,       /* the session is connected (again) */
    LOCK_LINK_CLIENT,   /* a line of the client library's own log, in detail */
} lock_link_event;
/* service: the ensemble as configured; detail: why (DOWN) or the library's
 * line (CLIENT), NULL for UP. Called on the lock's own thread (zk: the
 * client's loop), one call at a time, never holding a lock's mutex. */
typedef void lock_link_fn(lock_link_event ev, const char *service, const char *detail);

struct lock_config {
    int ttl_ms;                     /* lease length */
    const struct rconn_addr *nodes; /* redlock: independent masters */
    int nnodes;
    const char *password; /* AUTH for lock nodes; NULL for none */
    int timeout_ms;       /* connect/command timeout for lock nodes */
    int fencing;          /* hand out fencing tokens (fenced modes only) */
    int max_lease_ms;     /* watchdog: longest total lease (0: 10 x ttl) */
    int clock_skew_ms;    /* setnx: added to this instance's wall clock, to
                             show what unsynchronised clocks do (0: none) */
    const char *zk_hosts; /* zk: the ensemble, "H:P[,H:P...]" (copied) */
    int zk_session_ms;    /* zk: session timeout asked for, the lease (0: 3000) */
    /* zk: what a waiter watches (0: its predecessor) */
    lock_zk_watch zk_watch;
    /* zk: told of the session's ups and downs and given the client
     * library's log lines (NULL: the library's lines are dropped). One per
     * process: the library's log is a global. */
    lock_link_fn *on_link;
    /* pg: the database of the lock table, a libpq connection string or URI
     * (copied) */
    const char *postgres;
};

#define LOCK_WAIT_BUCKETS 14
/* Upper bounds of the wait histogram in microseconds; the last bucket is +Inf. */
extern const int64_t lock_wait_bucket_us[LOCK_WAIT_BUCKETS - 1];

/* Process-wide figures of one lock, each declared here once as X(field, kind,
 * help): a field of struct lock_stats (and of the atomic counters lock.c and
 * the backends bump), its kind, and what it counts. Kinds: LOCK_STAT_COUNTER
 * and LOCK_STAT_GAUGE (a level now) are exported as metrics; LOCK_STAT_DETAIL
 * is not by itself (releases; the wait histogram's count and sum). */
typedef enum { LOCK_STAT_COUNTER, LOCK_STAT_GAUGE, LOCK_STAT_DETAIL } lock_stat_kind;
#define LOCK_STATS(X)                                                                    \
    X(acquisitions, LOCK_STAT_COUNTER, "Segment locks acquired.")                        \
    X(contended, LOCK_STAT_COUNTER, "Acquisitions that had to wait.")                    \
    X(wait_timeouts, LOCK_STAT_COUNTER, "Waits that ended in 503 busy.")                 \
    X(errors, LOCK_STAT_COUNTER, "Lock operations that failed on Redis.")                \
    X(releases, LOCK_STAT_DETAIL, "Locks released.")                                     \
    X(releases_not_held, LOCK_STAT_DETAIL, "Releases that found the lock held no more.") \
    X(renewals, LOCK_STAT_COUNTER, "Lease renewals by the watchdog.")                    \
    X(leases_lost, LOCK_STAT_COUNTER, "Leases found lost while held.")                   \
    X(watch_wakeups, LOCK_STAT_COUNTER,                                                  \
      "Waiters woken by a ZooKeeper watch (zk) or a NOTIFY (pg).")                       \
    X(watch_waiters, LOCK_STAT_GAUGE, "Waiters asleep on a watch or a LISTEN now.")      \
    X(wait_count, LOCK_STAT_DETAIL, "Waits for a lock, in the wait histogram.")          \
    X(wait_sum_us, LOCK_STAT_DETAIL, "Time those waits took, in microseconds.")

/* A copy of one lock's figures (lock_stats()). */
struct lock_stats {
#define LOCK_STATS_FIELD(field, kind, help) uint64_t field;
    LOCK_STATS(LOCK_STATS_FIELD)
#undef LOCK_STATS_FIELD
    uint64_t wait_buckets[LOCK_WAIT_BUCKETS]; /* non-cumulative counts */
};

struct event_base;
struct lock;
struct lock_session;

/* Creates the lock of mode `mode` ("none", "local", "setnx", "redis",
 * "redlock", "zk", "pg"). Returns NULL with a message in err when the mode is unknown or
 * the configuration unusable. */
struct lock *lock_new(const char *mode, const struct lock_config *cfg, char *err,
                      size_t errlen);
/* Detaches (see lock_detach: the same rule applies), then frees. NULL is a
 * no-op; all sessions must be freed first. */
void lock_free(struct lock *l);

/* Background work of a lock (the redis mode's lease watchdog: renewals at
 * ttl/3, lost leases counted) runs as timers and async connections on an
 * event loop that the caller owns. lock_attach hands it base: from any
 * thread, base running or not yet; the work happens on base's thread. Until
 * a lock is attached its leases are not renewed (they run out after one
 * ttl). lock_detach stops the work: on base's thread, or once base no longer
 * runs (then base may be freed). Modes without background work ignore both. */
void lock_attach(struct lock *l, struct event_base *base);
void lock_detach(struct lock *l);

/* True when mode names a lock mode this library has. */
int lock_mode_known(const char *mode);
const char *lock_name(const struct lock *l);
/* True when the mode hands out fencing tokens (distributed modes with fencing on). */
int lock_fenced(const struct lock *l);
/* True when those tokens come from outside the data Redis (zk: the lock node's
 * czxid), so no "<key>:fence" counter there moves with the grants. The data
 * Redis then keeps each key's high-water token at "<key>:fence" instead: the
 * holder's first step under the lock raises it to its token, refused when a
 * later holder's is there already, and a commit checks it as for the other
 * modes (still the holder's token, or refused). */
int lock_fence_external(const struct lock *l);

/* A session for the calling thread. data is the thread's connection to the data
 * Redis; it is borrowed and must outlive the session. Never returns NULL. */
struct lock_session *lock_session_new(struct lock *l, struct rconn *data);
void lock_session_free(struct lock_session *s); /* NULL is a no-op; releases nothing */

/* The blocking calls, for tests and tools (the event loops use the steps
 * below): they run the mode's steps on the calling thread (its commands on
 * the session's data connection and on connections to the lock nodes of its
 * own, a step done elsewhere on an event base of its own), with the same
 * counters, lease, fencing and waiting. A session is used by one thread at a
 * time, and one whose steps an event loop runs (pg) is not given to these.
 *
 * Acquires key, waiting at most wait_ms. On LOCK_ACQUIRED, *g describes the
 * grant. On any other status nothing is held and *g is undefined. */
lock_status lock_acquire(struct lock_session *s, const char *key, int wait_ms,
                         struct lock_grant *g);

/* Releases a grant of key. LOCK_RELEASED, LOCK_NOT_HELD (the lease expired and
 * maybe someone else holds it now: nothing of theirs was touched) or
 * LOCK_ERROR. The grant is finished either way. */
lock_status lock_release(struct lock_session *s, const char *key, struct lock_grant *g);

/* ---- steps, for an event loop --------------------------------------------
 *
 * Every mode hands out its acquire and release as steps: commands, which
 * the caller sends itself on its asynchronous connections, pipelined with its
 * own, and whose answers it hands back, without a thread waiting for Redis;
 * zk (either way it watches) and pg have steps done elsewhere (below).
 *
 * A step is up to LOCK_STEP_CMDS commands, each for the data Redis (node -1)
 * or for lock node i (redlock: the i-th of lock_config's nodes); the caller
 * sends them all at once and hands each answer to lock_step_answer (NULL
 * when none came or the command was refused). The answers of one connection
 * come in order; those of several nodes in any order.
 *
 * An acquire: lock_step_init, then lock_try_step, its answers, then
 * lock_try_done, which says:
 * - LOCK_PENDING: the attempt goes on: send st's commands, answers, done again;
 * - LOCK_ACQUIRED: held, g filled;
 * - LOCK_BUSY: taken. Queued for a hand-off when st->entry is set (redis):
 *   the caller then sends lock_handoff_step on a connection of its own (a
 *   blocking command) and hands its answer to lock_handoff_done: the lock
 *   handed over by a release, or nothing within the wait (then another
 *   attempt, with what is left of the wait; one with 0 left leaves the
 *   queue). Else, while st->retry_us > 0, the mode polls: attempt again
 *   (lock_try_step) after that pause. Else the wait is over;
 * - LOCK_ERROR: nothing held (a queue entry of the acquire's was taken off
 *   first, best effort, in a step of its own: LOCK_PENDING before it).
 * A step's commands on the data Redis run in order before what the caller
 * pipelines behind them, so when st->last is set (a grant by this step needs
 * no further step), a command queued right after them runs under the lock.
 *
 * A release: lock_release_step, its answers, lock_release_done.
 *
 * A step done elsewhere (st->async, zk, pg): no command to send. The caller
 * starts it with lock_step_start; the mode does its work on its own thread
 * (zk: the ZooKeeper requests on the zk loop, and a wait for the
 * predecessor's watch, within the wait) or on the caller's base itself (pg:
 * its queries on connections of that loop, a wait for a NOTIFY) and, once it
 * is over, has done(arg) called on the thread of the caller's event base
 * (never from inside lock_step_start); then lock_try_done as
 * after the answers (never LOCK_PENDING). A caller that will not wait for it
 * (shutdown, a hold given up) calls lock_step_cancel instead, on that
 * thread: done is not called after it, and a grant that comes later is let
 * go by the mode. A release of such a mode is a step done elsewhere too
 * (st->after: made after what went before it answered), or, when it needs
 * no request (a re-entered grant, a lost one), decided in lock_release_done. */
#define LOCK_STEP_CMDS 16

struct event_base;
typedef void lock_step_cb(void *arg);

struct lock_step {
    int ncmd; /* commands to send; 0: nothing (decided at once) */
    struct rcmd cmd[LOCK_STEP_CMDS];
    int node[LOCK_STEP_CMDS]; /* -1: the data Redis, else a lock node */
    int last;                 /* a grant by this step is complete */
    int after;                /* a release: send it only once what went before it answered
                                 (it decides on what time it is when it is made) */
    int64_t retry_us;         /* LOCK_BUSY without a queue entry: pause
                                 before the next attempt; 0: none */
    const char *argv[24];
    char buf[4][600];
    char wait[24];
    char entry[80];    /* the queue entry of the acquire, "" while none */
    long long pttl_ms; /* a taken lock's lease left, from the last attempt */
    int64_t block_us;  /* a hand-off's command: how long it blocks at most */
    int contended;     /* an attempt found the lock taken */
    int64_t first_us;  /* when the acquire began */
    int64_t start_us;  /* when the last attempt began: a lease counts from it */
    int64_t deadline_us;
    /* The mode's own, between a step and its answers. */
    int phase, answered, ok;
    long long val[2];
    int64_t backoff_us;
    lock_status res;
    struct lock_grant grant;
    struct lock_grant *g; /* the release's grant */
    int async;            /* done elsewhere: lock_step_start (see above) */
    void *job;            /* the mode's, while one is started */
    lock_side side;       /* what the acquire takes (lock_rw_try_step) */
    /* An exclusive lock that is also a reader of a read-write lock
     * (lock_step_read_of), or a write side that waits for such locks
     * (lock_rw_write_over); kept by lock_step_clear. */
    const char *rw;      /* the read-write lock's key; NULL: none */
    int rw_held;         /* the caller holds another lock that reads rw */
    const char *readers; /* write side: the readers' prefix; NULL: none */
    char nreaders[12];   /* and how many ("<readers>0".."<readers>N-1") */
};

/* The lock nodes of l's mode (redlock; lock_config's, borrowed), their
 * password (NULL: none) and the timeout of a command on one: how many, 0
 * for a mode without. The node of a step's command is an index into them. */
int lock_nodes(const struct lock *l, const struct rconn_addr **nodes,
               const char **password, int *timeout_ms);
/* Begins an acquire in st. */
void lock_step_init(struct lock_step *st);
/* As lock_acquire, the lock a reader of the read-write lock rw as
 * lock_step_read_of(rw, held) says; lock_release lets go of both. */
lock_status lock_acquire_read_of(struct lock_session *s, const char *key, const char *rw,
                                 int held, int wait_ms, struct lock_grant *g);
/* Makes the exclusive lock st acquires a reader of the read-write lock rw
 * (redis, zk, pg; other modes ignore it): its grant also waits while a
 * writer of rw holds it or waits for it (redis, zk: LOCK_BUSY, polling:
 * st->retry_us; pg: asleep until the writer's release NOTIFYs its key), unless held
 * is set: the caller holds another lock that reads rw already (the writer
 * waits for that one, and would wait for ever for a caller that waited for
 * it: an order of several segments takes them one after the other). In
 * redis its release hands the lock to no waiter while a writer is there
 * (they poll too); in zk a waiter looks again with each list of its queue
 * and makes way (polls) when a writer came. The
 * write side counts such a lock as a reader only when told its name
 * (lock_rw_write_over). rw is borrowed until the release is over: st keeps
 * it through lock_try_step, the grant names it, and lock_release_step takes
 * it from there. The plain lock's and rw's keys are in one slot. */
void lock_step_read_of(struct lock_step *st, const char *rw, int held);
/* Fills st with an attempt on key that waits (in the lock's queue, or by
 * polling) while wait_ms (>= 0) is left. Returns 1. */
int lock_try_step(struct lock_session *s, const char *key, int wait_ms,
                  struct lock_step *st);
/* One answer to st's commands (NULL when none came). */
void lock_step_answer(struct lock_session *s, const char *key, struct lock_step *st,
                      const redisReply *r);
/* What the attempt's answers mean (see above). */
lock_status lock_try_done(struct lock_session *s, const char *key, struct lock_step *st,
                          struct lock_grant *g);
/* Starts st (st->async): done(arg) is called on base's thread once it is
 * over, unless lock_step_cancel came first. */
void lock_step_start(struct lock_session *s, const char *key, struct lock_step *st,
                     struct event_base *base, lock_step_cb *done, void *arg);
/* Gives up a started st, from base's thread: nothing held by it stays. A
 * no-op when none is started. */
void lock_step_cancel(struct lock_session *s, struct lock_step *st);
/* Fills st with the wait of a queued acquire for the lock to be handed over,
 * at most wait_us (and the holder's lease left): one blocking command on
 * the data Redis (st->cmd[0]) that blocks st->block_us at most. */
void lock_handoff_step(struct lock_session *s, const char *key, int64_t wait_us,
                       struct lock_step *st);
/* Its answer: LOCK_ACQUIRED (handed over: g filled), else LOCK_BUSY (nothing
 * came, or no answer: attempt again). */
lock_status lock_handoff_done(struct lock_session *s, const char *key,
                              struct lock_step *st, const redisReply *r,
                              struct lock_grant *g);
/* Fills st with the release of g (key's, from lock_try_done); g must stay
 * until lock_release_done. */
void lock_release_step(struct lock_session *s, const char *key, struct lock_grant *g,
                       struct lock_step *st);
/* The release's outcome once its answers came (st NULL: it was never sent;
 * the lease then runs out in Redis). As lock_release; the grant is finished
 * either way. */
lock_status lock_release_done(struct lock_session *s, const char *key,
                              struct lock_grant *g, struct lock_step *st);

/* The monotonic time until which the grant's lease is known to be valid, as
 * extended by renewals (the watchdog of the redis mode); 0 once the lease is
 * known to be lost. For modes without renewal this is g->valid_until_us. Call
 * only between acquire and release of g, on the session that acquired it. */
int64_t lock_valid_until_us(struct lock_session *s, const struct lock_grant *g);

/* Writes "<key>:fence", the data-Redis key of key's fencing token. */
void lock_fence_key(const char *key, char *buf, size_t len);

/* The token of grant g as a commit checks it against "<key>:fence": "<n>:<owner>"
 * for a token the data Redis hands out (its number and the grant's owner, so
 * that a number handed out twice, after a failover lost the first, is not the
 * same token), "<n>@<namespace>" for one from outside that names its lock
 * namespace (pg's version: "<n>@pg"), "<n>" for zk's czxid (unique by
 * itself), "0" for none. Numbers of two namespaces are never compared
 * (inventory/lua/fence.lua). */
void lock_fence_text(const struct lock_grant *g, char *buf, size_t len);
#define LOCK_FENCE_TEXT 64 /* room for any of them */

/* ---- the read-write lock ------------------------------------------------
 *
 * A key taken by side: readers share it, a writer excludes readers and other
 * writers (seed 6.1, Redisson's RReadWriteLock). Holds are per lock_session,
 * as for the plain lock: reentrant (a session counts its holds of a side and
 * releases as many), and a session that holds the write may also read (the
 * write released first, its reads keep the key as a read in redis; in zk and
 * pg they keep it written until they are released too: no downgrade). A
 * reader may not upgrade: its write waits like any other, for the session's
 * own reads too (two readers that both tried would wait for each other
 * until their deadlines). Writer preference: a writer
 * that waits keeps new readers out, those that hold finish, and it gets in
 * (a stream of readers cannot starve it); a reader's re-entry is let through
 * (so a session that always holds a read of a key keeps a writer out: in zk
 * and pg every read of a session that holds one is a re-entry).
 * A write grant carries a fencing token as the plain lock's does (fence,
 * fence_owner, "<key>:fence", lock_fence_text); a read grant none (fence 0):
 * a reader writes nothing the lock guards. Leases as for the plain lock: the
 * watchdog renews them, and a holder that dies frees its side when its lease
 * (zk: its session) runs out. Released by lock_release (or its steps): the
 * grant says which side. docs/design.md "The read-write lock" has the modes'
 * recipes and how sound each is.
 *
 * Modes: redis (one hash, lock/rwlock_redis.c); zk (Curator's recipe:
 * "-read-" and "-write-" sequential nodes, the writer's token its node's
 * czxid, lock/zk_steps.c); pg (a row per key in seckill_rwlocks, the
 * writer's token its version, lock/pg_sql.c); local (a process-local
 * rwlock); none (nothing is locked: every acquire is granted). Others
 * (setnx, redlock) answer LOCK_ERROR: lock_rw_supported says which. */

/* True when l's mode has a read-write lock. */
int lock_rw_supported(const struct lock *l);

/* As lock_acquire, for side LOCK_READ or LOCK_WRITE of key. LOCK_ERROR at
 * once for a mode without a read-write lock or side LOCK_EXCLUSIVE. */
lock_status lock_rw_acquire(struct lock_session *s, const char *key, lock_side side,
                            int wait_ms, struct lock_grant *g);

/* As lock_rw_acquire's write side, which also waits until none of the
 * exclusive locks "<readers>0".."<readers>N-1" (n of them) is held: the
 * readers that take the read side with their own grant (lock_step_read_of).
 * redis, zk (readers younger than its waiting write node gave way to it and
 * are not counted) and pg (it marks their rows, and a release of one wakes
 * it); other modes take the write side alone. */
lock_status lock_rw_write_over(struct lock_session *s, const char *key,
                               const char *readers, int n, int wait_ms,
                               struct lock_grant *g);

/* As lock_try_step, for side of key: the attempt of a read-write lock, then
 * lock_step_answer and lock_try_done as for the plain lock (it polls: a
 * LOCK_BUSY sets st->retry_us, never st->entry). Returns 0, st untouched,
 * for a mode without a read-write lock. */
int lock_rw_try_step(struct lock_session *s, const char *key, lock_side side, int wait_ms,
                     struct lock_step *st);

/* The read side inside a caller's own script (redis): so that an order takes
 * the read side of its SKU in the same round trip as its segment lock, the
 * caller's script includes lock/lua/rw_read.lua (`--#include "rw_read.lua"`,
 * resolved at build time) and calls
 *
 *   rw_read_take(hash, writer, owner, ttl, reenter)   -> 1 | 2 taken, 0 refused
 *   rw_read_drop(hash, owner)                         -> holds left, -1 none
 *
 * with hash and writer among its KEYS (the same slot as its own keys: key
 * with their hash tag) and owner, ttl and reenter ("0" for a new hold) among
 * its ARGV, as lock_rw_read_args fills them in. Refused (0), the script
 * takes nothing else either and answers busy: a writer holds or waits, and
 * the caller tries again after a pause (the writer's lease left is
 * PTTL(hash), or PTTL(writer) while it waits). Taken, the caller hands the
 * answer to lock_rw_read_taken, which makes it a grant like
 * lock_rw_acquire's (the watchdog renews its lease; lock_release lets it
 * go), or, dropped in its own script with rw_read_drop, tells
 * lock_rw_read_dropped, which finishes the grant here. */
struct lock_rw_args {
    char hash[600];   /* KEYS: the lock, "<key>" */
    char writer[608]; /* KEYS: a waiting writer's intent, "<key>:writer" */
    char owner[33];   /* ARGV: the session */
    char ttl[16];     /* ARGV: the lease, ms */
};
/* Fills a for key on s. Returns 0 for a mode without such a script (the
 * caller then takes the read side with lock_rw_acquire or its steps). */
int lock_rw_read_args(struct lock_session *s, const char *key, struct lock_rw_args *a);
/* taken is rw_read_take's answer, from a script sent at sent_us (monotonic;
 * the lease counts from it). 1 or 2: LOCK_ACQUIRED, g a read grant of key;
 * else LOCK_BUSY, nothing held. */
lock_status lock_rw_read_taken(struct lock_session *s, const char *key, long long taken,
                               int64_t sent_us, struct lock_grant *g);
/* left is rw_read_drop's answer for g: as lock_release_done (>= 0
 * LOCK_RELEASED, -1 LOCK_NOT_HELD, anything else LOCK_ERROR, left NULL for
 * no answer); the grant is finished either way. */
lock_status lock_rw_read_dropped(struct lock_session *s, const char *key,
                                 const long long *left, struct lock_grant *g);

void lock_stats(const struct lock *l, struct lock_stats *out);

/* 128 random bits from getrandom(2), as 32 hex characters + NUL. */
void lock_token_new(char out[33]);

#endif
