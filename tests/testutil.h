/* testutil: a real, throwaway redis-server for tests.
 *
 * test_redis_start() starts `redis-server` on a free loopback port in its own
 * temp dir and waits until it answers PING; test_redis_stop() stops it by PID
 * and removes the dir. An atexit hook stops any server still running, so a
 * failing test leaves nothing behind. */
#ifndef SECKILL_TESTUTIL_H
#define SECKILL_TESTUTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "lock.h"

struct test_redis {
    pid_t pid;
    int port;
    char dir[256];
};

/* Starts a server; extra_args (may be NULL) is a NULL-terminated list of extra
 * redis-server arguments such as {"--appendonly", "yes", NULL}. Exits the test
 * program (status 1, after stopping the servers it started) when none can be.
 * Makes the test process ignore SIGPIPE, as the server does. */
void test_redis_start(struct test_redis *r, const char *const *extra_args);
/* SIGKILL (hard) or SIGTERM, then waits for the PID. Keeps the dir when
 * keep_dir is set so that the server can be restarted on the same data. */
void test_redis_stop(struct test_redis *r, int hard, int keep_dir);
/* Starts again on the same port and dir (after a stop with keep_dir). */
void test_redis_restart(struct test_redis *r, const char *const *extra_args);

/* A test-only TCP proxy in front of a Redis (tests/faultproxy.c), for losing
 * exactly one answer: with drop_prefix set, the first command carrying an
 * argument that starts with it reaches Redis, and then that connection is cut
 * before its answer comes back. */
struct test_proxy {
    pid_t pid;
    int port; /* where clients connect */
};

/* Starts $SECKILL_BUILD/tests/faultproxy (default build/) in front of
 * 127.0.0.1:target_port and waits until it listens. drop_prefix may be NULL
 * (a plain proxy). Stopped by the exit hook too. Exits 1 when it cannot start. */
void test_proxy_start(struct test_proxy *p, int target_port, const char *drop_prefix);
/* The same, for any protocol: the first client write carrying drop_bytes
 * anywhere reaches the server and loses its answer (see tests/faultproxy.c). */
void test_proxy_start_bytes(struct test_proxy *p, int target_port,
                            const char *drop_bytes);
/* A plain proxy whose network is slowed on SIGUSR1: each chunk read then
 * waits slow_ms before it goes on, both ways (SIGHUP heals it). */
void test_proxy_start_slow(struct test_proxy *p, int target_port, int slow_ms);
/* SIGKILL. (A test may also SIGSTOP p->pid to cut the path without closing
 * the connections, and SIGCONT it again.) */
void test_proxy_stop(struct test_proxy *p);

/* A real, throwaway ZooKeeper server: standalone, from the Debian jars
 * (/usr/share/java/zookeeper.jar), in a small JVM, on a free loopback port in
 * its own temp dir. tickTime is 100 ms, so sessions of 200 ms to 60 s are
 * granted as asked; the admin server is off; the four-letter words srvr,
 * cons and wchp are on. test_zk_start() waits until srvr answers. The exit
 * hook stops any server still running, as for Redis. */
struct test_zk {
    pid_t pid;
    int port;
    char dir[256];
};

/* Exits the test program (status 1) when no server can be started. */
void test_zk_start(struct test_zk *z);
/* SIGKILL (hard) or SIGTERM, then waits for the PID; keep_dir keeps the data
 * (sessions and nodes survive a restart). */
void test_zk_stop(struct test_zk *z, int hard, int keep_dir);
/* Starts again on the same port and data (after a stop with keep_dir). */
void test_zk_restart(struct test_zk *z);
/* Sends the four-letter word cmd ("srvr", "cons", "wchp") to the server on
 * port and reads the whole answer into buf (NUL-terminated). Returns its
 * length, or -1 when the server did not answer. */
int test_zk_4lw(int port, const char *cmd, char *buf, size_t len);

/* A real, throwaway PostgreSQL: initdb in its own temp dir and the server, both
 * as the postgres user (the server refuses root), on a free loopback port, its
 * socket in the dir; fsync off. test_pg_start() waits until it accepts
 * connections; url is a libpq URI for it. Stopped by its pid: SIGINT (a fast
 * shutdown, every client disconnected) or, hard, SIGQUIT (an immediate one);
 * the exit hook stops any server still running, and a server outliving its
 * test gets SIGQUIT. extra (may be NULL): a NULL-terminated list of more
 * server arguments ("-c", "log_statement=all", ...). Exits the test program
 * (status 1, or 77, skipped, when PostgreSQL or the postgres user is
 * missing) when none can be started. */
struct test_pg {
    pid_t pid;
    int port;
    char dir[256];
    char url[128];
    const char *const *extra;
};
void test_pg_start(struct test_pg *p, const char *const *extra);
void test_pg_stop(struct test_pg *p, int hard, int keep_dir);
/* Starts again on the same port and data (after a stop with keep_dir). */
void test_pg_restart(struct test_pg *p);

/* A loopback TCP port nobody listens on right now, below the ephemeral range and
 * reserved for two minutes against tests running side by side (testutil.c). Aborts
 * when none is found. */
int test_free_port(void);

/* Waits until cond_fn(arg) is true, checking every 2 ms, at most timeout_ms.
 * Returns 1 when it became true. For conditions that cannot be waited on
 * directly (another process's state). */
int test_wait_for(int (*cond_fn)(void *), void *arg, int timeout_ms);

/* ---- the background loop ------------------------------------------------ */

/* The one event loop of a test process that has no service loop: a thread
 * running an event_base while anyone holds it. The libraries' background
 * duties (the redis lock's watchdog, the sold-out listener, the worker-id
 * lease) attach to it, as the server attaches them to its loop 0. Stopped
 * (thread joined) when the last holder lets go, so that a test that forks
 * afterwards forks a process of one thread. */
struct event_base *test_loop_hold(void);
/* Lets go; the last one stops the loop. Every duty attached to it must be
 * detached first. */
void test_loop_release(void);
/* The loop now held (the test fails when nobody holds it). */
struct event_base *test_loop(void);
/* Runs fn(arg) on the loop's thread and returns when it has; the loop must
 * be held. */
void test_loop_call(void (*fn)(void *), void *arg);

/* ---- locks -------------------------------------------------------------- */

/* A fenced lock of mode with a ttl_ms lease that the watchdog renews up to
 * max_lease_ms (0: no limit), on a clock skew_ms ahead. Fails the test when
 * lock_new refuses. */
struct lock *test_lock_new(const char *mode, int ttl_ms, int max_lease_ms, int skew_ms);
/* Holds test_loop() and attaches l to it (lock_attach); test_lock_new does. */
void test_lock_attach(struct lock *l);
/* Detaches l on the loop's thread, frees it and lets the loop go (for locks
 * attached by test_lock_attach; NULL is a no-op). */
void test_lock_free(struct lock *l);

/* Deletes the lock key, its fence counter and its wait queue, through rc. */
void test_lock_key_del(struct rconn *rc, const char *key);

/* n sessions (at most TEST_SESSIONS_MAX) of one lock, each on a connection of
 * its own to the Redis on port. The lock is the fixture's: closing frees it. */
#define TEST_SESSIONS_MAX 3
struct test_sessions {
    struct lock *lock;
    int n;
    struct rconn *rc[TEST_SESSIONS_MAX];
    struct lock_session *s[TEST_SESSIONS_MAX];
};

void test_sessions_open(struct test_sessions *p, struct lock *l, int port, int n);
void test_sessions_close(struct test_sessions *p);

/* Threads that contend for one key: each, on a session of its own (connected
 * to the Redis on port), takes the lock iterations times, waiting up to 10 s,
 * and inside reads counter, works work_us, then writes it back plus one. A
 * lock that lets two in at once loses an update and counts an overlap; an
 * acquire that fails, or a release that does not answer LOCK_RELEASED (also
 * LOCK_NOT_HELD when not_held_ok), counts a failure. */
#define TEST_EXCL_THREADS 16
struct test_excl {
    struct lock *lock; /* borrowed */
    const char *key;
    int port;
    int iterations;
    int work_us;
    int not_held_ok;
    _Atomic long counter;
    atomic_int inside, overlaps, failures;
    int nthreads;
    pthread_t thread[TEST_EXCL_THREADS];
};

/* Starts nthreads (at most TEST_EXCL_THREADS) workers on run. */
void test_excl_start(struct test_excl *run, int nthreads);
/* Waits until every worker is done. */
void test_excl_join(struct test_excl *run);

/* A stream entry's [field, value, ...] array, as XREADGROUP answers one, made
 * from "o=42 s=paid ..." (split at spaces, each at its first '='; 16 fields at
 * most). It points into *e, which must outlive it. */
struct test_entry {
    char text[1024];
    struct redisReply arr, items[64], *ptrs[64];
};
const struct redisReply *test_entry_of(struct test_entry *e, const char *fields);

/* A read-write lock's mixed load (test_rwlock_*): what the workers of one test
 * saw, shared by them. */
struct rw_tally {
    atomic_int readers, writers, overlaps, failures, shared;
};
/* One round of a mixed load: side of key on s (waiting at most wait_ms), then
 * 300 us of the critical section's work, counted in t: an overlap when a writer
 * meets anyone or a reader a writer, shared when readers meet, a failure when
 * the acquire or the release does not answer as it should. */
void rw_tally_round(struct lock_session *s, const char *key, lock_side side, int wait_ms,
                    struct rw_tally *t);

/* An acquire on a thread of its own (test_rwlock_*): of the plain lock key as
 * a reader of rw (test_read_of_start: lock_acquire_read_of, not held), or of
 * rw's write side over the n plain locks "<readers>0".. that read it
 * (test_write_over_start: lock_rw_write_over). The thread sets res, g and
 * acquired_us (the monotonic time the acquire answered), then done; the
 * caller joins thread. The strings are borrowed until then. */
struct test_acquirer {
    struct lock_session *s;
    const char *key, *rw, *readers;
    int n, wait_ms;
    pthread_t thread;
    atomic_int done;
    lock_status res;
    struct lock_grant g;
    int64_t acquired_us;
};
void test_read_of_start(struct test_acquirer *a, struct lock_session *s, const char *key,
                        const char *rw, int wait_ms);
void test_write_over_start(struct test_acquirer *a, struct lock_session *s,
                           const char *rw, const char *readers, int n, int wait_ms);
/* For test_wait_for: a's acquire answered. */
int test_acquirer_done(void *a);

#endif
