/* testutil: a real, throwaway redis-server for tests.
 *
 * test_redis_start() starts `redis-server` on a free loopback port in its own
 * temp dir and waits until it answers PING; test_redis_stop() stops it by PID
 * and removes the dir. An atexit hook stops any server still running, so a
 * failing test leaves nothing behind. */
#ifndef SECKILL_TESTUTIL_H
#define SECKILL_TESTUTIL_H

#include <sys/types.h>

struct test_redis {
    pid_t pid;
    int port;
    char dir[256];
};

/* Starts a server; extra_args (may be NULL) is a NULL-terminated list of extra
 * redis-server arguments such as {"--appendonly", "yes", NULL}. Aborts the test
 * program when no server can be started. */
void test_redis_start(struct test_redis *r, const char *const *extra_args);
/* SIGKILL (hard) or SIGTERM, then waits for the PID. Keeps the dir when
 * keep_dir is set so that the server can be restarted on the same data. */
void test_redis_stop(struct test_redis *r, int hard, int keep_dir);
/* Starts again on the same port and dir (after a stop with keep_dir). */
void test_redis_restart(struct test_redis *r, const char *const *extra_args);

/* A loopback TCP port nobody listens on right now. */
int test_free_port(void);

/* Waits until cond_fn(arg) is true, checking every 2 ms, at most timeout_ms.
 * Returns 1 when it became true. For conditions that cannot be waited on
 * directly (another process's state). */
int test_wait_for(int (*cond_fn)(void *), void *arg, int timeout_ms);

#endif
