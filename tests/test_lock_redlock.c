/* test_lock_redlock: Redlock over three real redis-servers (plus a fourth as the
 * data Redis that holds the fence counters), including one node killed while
 * the lock is under contention. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "lock.h"
#include "testutil.h"

#define NODES 3

static struct test_redis data_srv, node_srv[NODES];
static struct rconn_addr node_addr[NODES];

static int group_setup(void **state)
{
    (void)state;
    test_redis_start(&data_srv, NULL);
    for (int i = 0; i < NODES; i++) {
        test_redis_start(&node_srv[i], NULL);
        snprintf(node_addr[i].host, sizeof(node_addr[i].host), "127.0.0.1");
        node_addr[i].port = node_srv[i].port;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        if (node_srv[i].pid > 0)
            test_redis_stop(&node_srv[i], 1, 0);
    test_redis_stop(&data_srv, 1, 0);
    return 0;
}

static struct lock *redlock_make(int nnodes, int ttl_ms, char *err, size_t errlen)
{
    struct lock_config cfg = {
        .ttl_ms = ttl_ms, .nodes = node_addr, .nnodes = nnodes, .fencing = 1};
    return lock_new("redlock", &cfg, err, errlen);
}

static struct rconn *data_conn(void)
{
    return rconn_new("127.0.0.1", data_srv.port, NULL, 2000);
}

/* How many live nodes have key. */
static int nodes_holding(const char *key)
{
    int n = 0;
    for (int i = 0; i < NODES; i++) {
        if (node_srv[i].pid <= 0)
            continue;
        struct rconn *rc = rconn_new("127.0.0.1", node_srv[i].port, NULL, 1000);
        redisReply *r = rconn_command(rc, "EXISTS %s", key);
        assert_non_null(r);
        n += (int)r->integer;
        freeReplyObject(r);
        rconn_free(rc);
    }
    return n;
}

static void test_rejects_even_or_few_nodes(void **state)
{
    (void)state;
    char err[256];
    for (int n = 0; n <= 2; n++) {
        err[0] = '\0';
        assert_null(redlock_make(n, 1000, err, sizeof(err)));
        assert_non_null(strstr(err, "odd number"));
    }
    struct lock_config cfg = {.ttl_ms = 1000, .nodes = node_addr, .nnodes = 4};
    assert_null(lock_new("redlock", &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "got 4"));
}

static void test_grant_and_release_on_all_nodes(void **state)
{
    (void)state;
    const char *key = "t:rl:basic";
    char err[256];
    const int ttl = 2000;
    struct lock *l = redlock_make(NODES, ttl, err, sizeof(err));
    assert_non_null(l);
    assert_true(lock_fenced(l));
    struct rconn *rc = data_conn();
    struct lock_session *a = lock_session_new(l, rc), *b = lock_session_new(l, rc);
    struct lock_grant ga, gb;
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    assert_int_equal(nodes_holding(key), NODES);
    /* validity = ttl - elapsed - drift (1% of ttl + 2 ms) */
    int64_t validity = ga.valid_until_us - ga.acquired_us;
    assert_true(validity > 0 && validity <= (int64_t)ttl * 1000 - ttl * 10 - 2000);
    assert_true(ga.fence > 0);
    int64_t t0 = clock_now_us();
    assert_int_equal(lock_acquire(b, key, 100, &gb), LOCK_BUSY);
    assert_true(clock_now_us() - t0 >= 100000);
    assert_int_equal(lock_release(b, key, &gb), LOCK_NOT_HELD); /* not the owner */
    assert_int_equal(nodes_holding(key), NODES);
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    assert_int_equal(nodes_holding(key), 0);
    assert_int_equal(lock_acquire(b, key, 0, &gb), LOCK_ACQUIRED);
    assert_true(gb.fence > ga.fence);
    assert_int_equal(lock_release(b, key, &gb), LOCK_RELEASED);
    /* Nodes that forgot the release script (restart, SCRIPT FLUSH) still
     * release: the owner-checked delete falls back to EVAL there. */
    for (int i = 0; i < 2; i++) {
        struct rconn *node = rconn_new("127.0.0.1", node_srv[i].port, NULL, 1000);
        redisReply *r = rconn_command(node, "SCRIPT FLUSH");
        assert_non_null(r);
        freeReplyObject(r);
        rconn_free(node);
    }
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    assert_int_equal(nodes_holding(key), 0);
    lock_session_free(a);
    lock_session_free(b);
    rconn_free(rc);
    lock_free(l);
}

static int third_done(void *arg)
{
    struct test_excl *run = arg;
    return atomic_load(&run->counter) >= run->iterations * 4 / 3;
}

/* Four threads contend; a third of the way through, one node is killed. The
 * remaining majority keeps the lock exclusive and every acquire succeeds. */
static void test_exclusive_through_node_loss(void **state)
{
    (void)state;
    char err[256];
    /* A hold whose majority included the killed node can only be released on
     * the others: LOCK_NOT_HELD then, which is no failure. */
    struct test_excl run = {.lock = redlock_make(NODES, 3000, err, sizeof(err)),
                            .key = "t:rl:excl",
                            .port = data_srv.port,
                            .iterations = 120,
                            .work_us = 200,
                            .not_held_ok = 1};
    assert_non_null(run.lock);
    test_excl_start(&run, 4);
    assert_true(test_wait_for(third_done, &run, 20000));
    test_redis_stop(&node_srv[2], 1, 0);
    test_excl_join(&run);
    assert_int_equal(atomic_load(&run.failures), 0);
    assert_int_equal(atomic_load(&run.overlaps), 0);
    assert_int_equal(atomic_load(&run.counter), 4 * run.iterations);
    assert_int_equal(nodes_holding("t:rl:excl"), 0);
    lock_free(run.lock);
}

/* With a second node gone no majority can be had: acquire fails, nothing is
 * left held on the surviving node. */
static void test_no_majority_no_lock(void **state)
{
    (void)state;
    assert_true(node_srv[2].pid <= 0); /* killed by the previous test */
    test_redis_stop(&node_srv[1], 1, 0);
    char err[256];
    struct lock *l = redlock_make(NODES, 3000, err, sizeof(err));
    struct rconn *rc = data_conn();
    struct lock_session *s = lock_session_new(l, rc);
    struct lock_grant g;
    assert_int_not_equal(lock_acquire(s, "t:rl:minority", 200, &g), LOCK_ACQUIRED);
    assert_int_equal(nodes_holding("t:rl:minority"), 0);
    lock_session_free(s);
    rconn_free(rc);
    lock_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejects_even_or_few_nodes),
        cmocka_unit_test(test_grant_and_release_on_all_nodes),
        cmocka_unit_test(test_exclusive_through_node_loss),
        cmocka_unit_test(test_no_majority_no_lock),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
