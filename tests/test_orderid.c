/* Unit tests of the snowflake generator (with an injected clock), and of the
 * worker-id lease against a real redis-server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "orderid.h"
#include "testutil.h"

static int64_t fake_ms;
static int64_t fake_clock(void)
{
    return fake_ms;
}

static void test_layout(void **state)
{
    (void)state;
    struct orderid_gen g;
    fake_ms = ORDERID_EPOCH_MS + 123456;
    orderid_init(&g, 513, fake_clock, 0);
    uint64_t id = orderid_next(&g);
    assert_int_equal(orderid_worker_of(id), 513);
    assert_int_equal(orderid_unix_ms_of(id), ORDERID_EPOCH_MS + 123456);
    assert_int_equal(id & 0xfff, 0);
    assert_int_equal(orderid_next(&g) & 0xfff, 1);
}

static void test_clock_going_backwards(void **state)
{
    (void)state;
    struct orderid_gen g;
    fake_ms = ORDERID_EPOCH_MS + 1000000;
    orderid_init(&g, 1, fake_clock, 0);
    uint64_t last = orderid_next(&g);
    fake_ms -= 5000; /* NTP steps the clock back 5 s */
    for (int i = 0; i < 10000; i++) {
        uint64_t id = orderid_next(&g);
        assert_true(id > last); /* never repeats, never goes back */
        last = id;
    }
    assert_int_equal(g.clock_backwards, 10000);
    /* 10001 ids in "one" millisecond borrowed the next ones: 4096 per ms */
    assert_int_equal(orderid_unix_ms_of(last), ORDERID_EPOCH_MS + 1000000 + 2);
    fake_ms += 10000; /* the clock catches up: real time again */
    uint64_t id = orderid_next(&g);
    assert_int_equal(orderid_unix_ms_of(id), fake_ms);
    assert_int_equal(id & 0xfff, 0);
}

static void test_sequence_overflow_within_ms(void **state)
{
    (void)state;
    struct orderid_gen g;
    fake_ms = ORDERID_EPOCH_MS + 50;
    orderid_init(&g, 3, fake_clock, 0);
    uint64_t last = 0;
    for (int i = 0; i < 3 * 4096; i++) {
        uint64_t id = orderid_next(&g);
        assert_true(id > last);
        last = id;
    }
    assert_int_equal(orderid_unix_ms_of(last), ORDERID_EPOCH_MS + 52);
}

static void test_floor_from_high_water_mark(void **state)
{
    (void)state;
    struct orderid_gen g;
    fake_ms = ORDERID_EPOCH_MS + 1000;
    orderid_init(&g, 3, fake_clock, ORDERID_EPOCH_MS + 9000);
    assert_true(orderid_unix_ms_of(orderid_next(&g)) >= ORDERID_EPOCH_MS + 9000);
}

#define THREADS 4
#define PER_THREAD 50000
static uint64_t thread_ids[THREADS][PER_THREAD];

static void *make_ids(void *arg)
{
    struct orderid_gen *g = ((void **)arg)[0];
    uint64_t *out = ((void **)arg)[1];
    for (int i = 0; i < PER_THREAD; i++)
        out[i] = orderid_next(g);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_unique_across_threads(void **state)
{
    (void)state;
    struct orderid_gen g;
    orderid_init(&g, 9, NULL, 0);
    pthread_t t[THREADS];
    void *args[THREADS][2];
    for (int i = 0; i < THREADS; i++) {
        args[i][0] = &g;
        args[i][1] = thread_ids[i];
        pthread_create(&t[i], NULL, make_ids, args[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t *all = &thread_ids[0][0];
    qsort(all, THREADS * PER_THREAD, sizeof(uint64_t), cmp_u64);
    for (int i = 1; i < THREADS * PER_THREAD; i++)
        assert_true(all[i] != all[i - 1]);
}

static void test_lease_distinct_workers_and_restart_above_mark(void **state)
{
    (void)state;
    struct test_redis redis;
    test_redis_start(&redis, NULL);
    struct orderid_gen a, b;
    orderid_init(&a, 0, NULL, 0);
    orderid_init(&b, 0, NULL, 0);
    char err[200];
    struct orderid_lease *la =
        orderid_lease_start("127.0.0.1", redis.port, NULL, -1, &a, err, sizeof(err));
    struct orderid_lease *lb =
        orderid_lease_start("127.0.0.1", redis.port, NULL, -1, &b, err, sizeof(err));
    assert_non_null(la);
    assert_non_null(lb);
    assert_true(orderid_lease_valid(la));
    assert_true(a.worker != b.worker);
    int worker = a.worker;
    uint64_t before = orderid_next(&a);
    orderid_lease_stop(la);

    /* The same worker id again (fixed) on a machine whose clock is 1 hour
     * behind: the high-water mark keeps its ids above the earlier ones. */
    struct orderid_gen c;
    fake_ms = orderid_wall_ms() - 3600 * 1000;
    orderid_init(&c, worker, fake_clock, 0);
    struct orderid_lease *lc =
        orderid_lease_start("127.0.0.1", redis.port, NULL, worker, &c, err, sizeof(err));
    assert_non_null(lc);
    assert_true(orderid_next(&c) > before);
    orderid_lease_stop(lc);
    orderid_lease_stop(lb);

    /* Redis unreachable: no lease, a clear error */
    test_redis_stop(&redis, 1, 0);
    struct orderid_gen d;
    orderid_init(&d, 0, NULL, 0);
    assert_null(
        orderid_lease_start("127.0.0.1", redis.port, NULL, -1, &d, err, sizeof(err)));
    assert_non_null(strstr(err, "connect"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_clock_going_backwards),
        cmocka_unit_test(test_sequence_overflow_within_ms),
        cmocka_unit_test(test_floor_from_high_water_mark),
        cmocka_unit_test(test_unique_across_threads),
        cmocka_unit_test(test_lease_distinct_workers_and_restart_above_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
