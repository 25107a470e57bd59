/* Unit tests of the snowflake generator (with an injected clock), and of the
 * worker-id lease against a real redis-server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* With genes (a Redis Cluster) the low 6 bits are left for the shard's
 * gene: 64 ids per millisecond, each unique once its gene is set, and the
 * gene read back from the id. */
static void test_genes_leave_the_low_bits_to_the_shard(void **state)
{
    (void)state;
    struct orderid_gen g;
    fake_ms = ORDERID_EPOCH_MS + 70;
    orderid_init(&g, 5, fake_clock, 0);
    orderid_use_genes(&g);
    uint64_t last = 0;
    for (int i = 0; i < 3 * 64; i++) {
        uint64_t id = orderid_next(&g);
        assert_int_equal(orderid_gene_of(id), 0);
        uint64_t placed = orderid_with_gene(id, i % 64);
        assert_true(placed > last);
        assert_int_equal(orderid_gene_of(placed), i % 64);
        assert_int_equal(orderid_worker_of(placed), 5);
        last = placed;
    }
    assert_int_equal(orderid_unix_ms_of(last), ORDERID_EPOCH_MS + 72);
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

/* A lease renewed on the test's background loop, as the server's on loop 0. */
static void attach_on_loop(void *l)
{
    orderid_lease_attach(l, test_loop());
}

static void detach_on_loop(void *l)
{
    orderid_lease_detach(l);
}

static struct orderid_lease *lease_start(const struct orderid_lease_config *cfg,
                                         struct orderid_gen *gen, char *err,
                                         size_t errlen)
{
    struct orderid_lease *l = orderid_lease_start(cfg, gen, err, errlen);
    if (l) {
        test_loop_hold();
        test_loop_call(attach_on_loop, l);
    }
    return l;
}

static void lease_stop(struct orderid_lease *l)
{
    if (l) {
        test_loop_call(detach_on_loop, l);
        test_loop_release();
    }
    orderid_lease_stop(l);
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
    struct orderid_lease_config cfg = {
        .host = "127.0.0.1", .port = redis.port, .fixed = -1};
    struct orderid_lease *la = lease_start(&cfg, &a, err, sizeof(err));
    struct orderid_lease *lb = lease_start(&cfg, &b, err, sizeof(err));
    assert_non_null(la);
    assert_non_null(lb);
    assert_true(orderid_lease_valid(la));
    assert_true(orderid_worker(&a) != orderid_worker(&b));
    int worker = orderid_worker(&a);
    uint64_t before = orderid_next(&a);
    lease_stop(la);

    /* The same worker id again (fixed) on a machine whose clock is 1 hour
     * behind: the high-water mark keeps its ids above the earlier ones. */
    struct orderid_gen c;
    fake_ms = orderid_wall_ms() - 3600 * 1000;
    orderid_init(&c, worker, fake_clock, 0);
    struct orderid_lease_config fixed = cfg;
    fixed.fixed = worker;
    struct orderid_lease *lc = lease_start(&fixed, &c, err, sizeof(err));
    assert_non_null(lc);
    assert_true(orderid_next(&c) > before);
    lease_stop(lc);
    lease_stop(lb);

    /* Redis unreachable: no lease, a clear error */
    test_redis_stop(&redis, 1, 0);
    struct orderid_gen d;
    orderid_init(&d, 0, NULL, 0);
    assert_null(lease_start(&cfg, &d, err, sizeof(err)));
    assert_non_null(strstr(err, "connect"));
}

/* Runs one command on a plain hiredis connection; the test fails if Redis
 * does not answer. */
static void redis_do(int port, const char *fmt, int arg)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    assert_true(c && !c->err);
    redisReply *r = redisCommand(c, fmt, arg);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(c);
}

static _Atomic int64_t skew_a; /* instance A's clock, ahead of the wall by this */
static int64_t clock_a(void)
{
    return orderid_wall_ms() + atomic_load(&skew_a);
}
static int64_t clock_b(void) /* the successor's clock runs 3 s behind */
{
    return orderid_wall_ms() - 3000;
}

/* Instance A's worker lease vanishes early (a Redis restart lost the key) and
 * successor B, whose clock is 3 s behind, takes the same worker id. A has not
 * noticed yet and goes on while its lease looks valid to it, its clock now 12 s
 * on (past its 10 s lease, within the 8 s that its local validity allowed
 * before the fix). No id that A issues may be one that B issues: all of A's
 * must be below B's first, because A stops at the mark that B starts above. */
static void test_no_id_twice_when_a_lease_is_lost_to_a_successor(void **state)
{
    (void)state;
    static struct test_redis redis; /* static: the exit hook can stop it on failure */
    test_redis_start(&redis, NULL);
    atomic_store(&skew_a, 0);
    struct orderid_gen a, b;
    orderid_init(&a, 0, clock_a, 0);
    orderid_init(&b, 0, clock_b, 0);
    char err[200];
    struct orderid_lease_config cfg = {
        .host = "127.0.0.1", .port = redis.port, .fixed = -1, .ttl_ms = 10000};
    struct orderid_lease *la = lease_start(&cfg, &a, err, sizeof(err));
    assert_non_null(la);
    int worker = orderid_worker(&a);
    uint64_t a_max = orderid_next(&a);
    assert_true(a_max != 0);

    for (int w = 0; w <= ORDERID_MAX_WORKER; w++) /* B can only get A's id */
        if (w != worker)
            redis_do(redis.port, "SET seckill:worker:%d someone-else", w);
    /* A renews every 2 s: should its renewal fall between the DEL and B's
     * take, A takes its id again and B finds none; then once more. */
    struct orderid_lease *lb = NULL;
    for (int attempt = 0; attempt < 3 && !lb; attempt++) {
        redis_do(redis.port, "DEL seckill:worker:%d", worker);
        lb = lease_start(&cfg, &b, err, sizeof(err));
    }
    assert_non_null(lb);
    assert_int_equal(orderid_worker(&b), worker);

    atomic_store(&skew_a, 12000);
    int issued = 0, refused = 0;
    for (int i = 0; i < 1000 && orderid_lease_valid(la); i++) {
        uint64_t id = orderid_next(&a);
        if (!id) {
            refused++;
            continue;
        }
        issued++;
        if (id > a_max)
            a_max = id;
    }
    uint64_t b_min = orderid_next(&b);
    assert_true(b_min != 0);
    if (a_max >= b_min)
        fail_msg("A issued id %llu (%lld ms) at or above B's first %llu (%lld ms), "
                 "%d issued after the takeover",
                 (unsigned long long)a_max, (long long)orderid_unix_ms_of(a_max),
                 (unsigned long long)b_min, (long long)orderid_unix_ms_of(b_min), issued);
    assert_true(refused > 0); /* A stopped at its mark */
    lease_stop(la);
    lease_stop(lb);
    test_redis_stop(&redis, 1, 0);
}

/* Every fresh instance used to probe from 1023 (a token parsed past its
 * range): the first free id from a random point is taken instead. */
static void test_worker_probing_starts_at_a_random_point(void **state)
{
    (void)state;
    static struct test_redis redis;
    test_redis_start(&redis, NULL);
    struct orderid_lease_config cfg = {
        .host = "127.0.0.1", .port = redis.port, .fixed = -1};
    int first = -1, other = 0;
    char err[200];
    for (int i = 0; i < 6; i++) { /* each lease is dropped before the next */
        struct orderid_gen g;
        orderid_init(&g, 0, NULL, 0);
        struct orderid_lease *l = lease_start(&cfg, &g, err, sizeof(err));
        assert_non_null(l);
        int w = orderid_worker(&g);
        if (first < 0)
            first = w;
        else if (w != first)
            other++;
        lease_stop(l);
    }
    if (!other)
        fail_msg("six fresh leases all took worker id %d", first);
    test_redis_stop(&redis, 1, 0);
}

static _Atomic int lost_events, taken_events, taken_worker;

static void count_event(orderid_lease_event ev, int worker)
{
    if (ev == ORDERID_LEASE_LOST) {
        atomic_fetch_add(&lost_events, 1);
    } else {
        atomic_store(&taken_worker, worker);
        atomic_fetch_add(&taken_events, 1);
    }
}

static int one_taken(void *arg)
{
    (void)arg;
    return atomic_load(&taken_events) >= 1;
}

static int lease_invalid(void *l)
{
    return !orderid_lease_valid(l);
}

static int lease_ok(void *l)
{
    return orderid_lease_valid(l);
}

/* A renewal finds the id taken by someone else: the instance says so, takes
 * another id by itself (on the loop), and issues ids under that one. */
static void test_lost_lease_is_replaced_by_a_new_id(void **state)
{
    (void)state;
    static struct test_redis redis;
    test_redis_start(&redis, NULL);
    atomic_store(&lost_events, 0);
    atomic_store(&taken_events, 0);
    struct orderid_gen a;
    orderid_init(&a, 0, NULL, 0);
    char err[200];
    struct orderid_lease_config cfg = {.host = "127.0.0.1",
                                       .port = redis.port,
                                       .fixed = -1,
                                       .ttl_ms = 1000,
                                       .on_event = count_event};
    struct orderid_lease *la = lease_start(&cfg, &a, err, sizeof(err));
    assert_non_null(la);
    int worker = orderid_worker(&a);
    redis_do(redis.port, "SET seckill:worker:%d someone-else", worker);
    assert_true(test_wait_for(one_taken, NULL, 5000));
    assert_int_equal(atomic_load(&lost_events), 1);
    assert_int_not_equal(orderid_worker(&a), worker);
    assert_int_equal(atomic_load(&taken_worker), orderid_worker(&a));
    assert_true(test_wait_for(lease_ok, la, 2000));
    uint64_t id = orderid_next(&a);
    assert_true(id != 0);
    assert_int_equal(orderid_worker_of(id), orderid_worker(&a));
    lease_stop(la);
    test_redis_stop(&redis, 1, 0);
}

/* Redis gone: within the lease the instance stops issuing ids (the lease is
 * not valid any more, the generator stops at its mark); Redis back: the
 * renewals on the loop make it valid again, same id. */
static void test_renewals_stop_and_resume_with_redis(void **state)
{
    (void)state;
    static struct test_redis redis;
    test_redis_start(&redis, NULL);
    struct orderid_gen a;
    orderid_init(&a, 0, NULL, 0);
    char err[200];
    struct orderid_lease_config cfg = {
        .host = "127.0.0.1", .port = redis.port, .fixed = -1, .ttl_ms = 1000};
    struct orderid_lease *la = lease_start(&cfg, &a, err, sizeof(err));
    assert_non_null(la);
    int worker = orderid_worker(&a);
    test_redis_stop(&redis, 1, 1);
    assert_true(test_wait_for(lease_invalid, la, 3000));
    test_redis_restart(&redis, NULL);
    assert_true(test_wait_for(lease_ok, la, 3000));
    assert_int_equal(orderid_worker(&a), worker);
    assert_true(orderid_next(&a) != 0);
    lease_stop(la);
    test_redis_stop(&redis, 1, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_clock_going_backwards),
        cmocka_unit_test(test_sequence_overflow_within_ms),
        cmocka_unit_test(test_genes_leave_the_low_bits_to_the_shard),
        cmocka_unit_test(test_floor_from_high_water_mark),
        cmocka_unit_test(test_unique_across_threads),
        cmocka_unit_test(test_lease_distinct_workers_and_restart_above_mark),
        cmocka_unit_test(test_no_id_twice_when_a_lease_is_lost_to_a_successor),
        cmocka_unit_test(test_worker_probing_starts_at_a_random_point),
        cmocka_unit_test(test_lost_lease_is_replaced_by_a_new_id),
        cmocka_unit_test(test_renewals_stop_and_resume_with_redis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
