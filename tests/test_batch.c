/* Tests of the group commit against a real redis-server: one lock hold and
 * one commit script serving several orders of a segment (inv_ticket_batch),
 * and the batcher that queues orders per segment and runs the batches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "invfix.h"
#include "hold.h"
#include "testutil.h"

/* Opens a ticket that must go to Redis, queued for segment `seg`. */
static void ticket(struct invfix *f, struct inv_ticket *t, const char *sku,
                   const char *user, const char *key, int seg)
{
    assert_int_equal(inv_ticket_open(f->inv, t, sku, user, 1, key), INV_PENDING);
    t->home = t->seg = seg;
}

/* One batch holds a placed order, the same user again (limit, counted within
 * the batch), a replay of an order placed before, a user at the limit, a key
 * reused by another user, and an order the segment is too short for: that
 * one alone is left undecided, and placed by itself on another segment. */
static void test_batch_mixes_outcomes(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    assert_int_equal(inv_sku_put(f.s, "mix", 6, 2, 1), INV_CREATED); /* 3 + 3 */
    char bea[16], cid[16], x[16], y[16], ann[16], dan[16], eve[16];
    invfix_user_with_home(1, 2, 0, bea, sizeof(bea));
    invfix_user_with_home(1, 2, 1, cid, sizeof(cid));
    invfix_user_with_home(0, 2, 0, x, sizeof(x));
    invfix_user_with_home(0, 2, 1, y, sizeof(y));
    invfix_user_with_home(0, 2, 2, ann, sizeof(ann));
    invfix_user_with_home(0, 2, 3, dan, sizeof(dan));
    invfix_user_with_home(0, 2, 4, eve, sizeof(eve));
    struct inv_order first, o;
    assert_int_equal(inv_order_place(f.s, "mix", bea, 1, "kb", &first), INV_PLACED);
    assert_int_equal(inv_order_place(f.s, "mix", cid, 1, NULL, &o), INV_PLACED);
    assert_int_equal(inv_order_place(f.s, "mix", x, 1, NULL, &o), INV_PLACED);
    assert_int_equal(inv_order_place(f.s, "mix", y, 1, NULL, &o), INV_PLACED);
    /* segment 0 holds 1 unit, segment 1 holds 1 */
    struct inv_ticket t[6];
    ticket(&f, &t[0], "mix", ann, NULL, 0);
    ticket(&f, &t[1], "mix", ann, NULL, 0);
    ticket(&f, &t[2], "mix", bea, "kb", 0);
    ticket(&f, &t[3], "mix", cid, NULL, 0);
    ticket(&f, &t[4], "mix", eve, "kb", 0);
    ticket(&f, &t[5], "mix", dan, NULL, 0);
    struct inv_ticket *batch[6] = {&t[0], &t[1], &t[2], &t[3], &t[4], &t[5]};
    inv_ticket_batch(f.s, batch, 6, 0);
    assert_int_equal(t[0].st, INV_PLACED);
    assert_int_equal(t[0].order.segment, 0);
    assert_int_equal(t[1].st, INV_LIMIT);
    assert_int_equal(t[2].st, INV_REPLAYED);
    assert_true(t[2].order.id == first.id);
    assert_int_equal(t[3].st, INV_LIMIT);
    assert_int_equal(t[4].st, INV_IDEM_MISMATCH);
    assert_int_equal(t[5].st, INV_PENDING); /* short here: undecided */
    inv_ticket_single(f.s, &t[5]);
    assert_int_equal(t[5].st, INV_PLACED);
    assert_int_equal(t[5].order.segment, 1);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.spilled, 1);
    invfix_assert_sold(&f, "mix", 6, 0);
    invfix_close(&f);
}

/* atomic: no lock, one script per order, the calls pipelined. A replay among
 * them loads its first order by a command of its own, after the pipeline's
 * answers: every order gets its own answer, not its neighbour's. */
static void test_atomic_pipeline_keeps_each_answer(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "atomic", 0);
    inv_sku_put(f.s, "pipe", 10, 2, 1);
    struct inv_order first;
    assert_int_equal(inv_order_place(f.s, "pipe", "ann", 1, "ka", &first), INV_PLACED);
    struct inv_ticket t[5];
    ticket(&f, &t[0], "pipe", "ann", "ka", 0);
    ticket(&f, &t[1], "pipe", "bob", NULL, 0);
    ticket(&f, &t[2], "pipe", "ann", "ka", 0);
    ticket(&f, &t[3], "pipe", "cid", NULL, 0);
    ticket(&f, &t[4], "pipe", "bob", NULL, 0);
    struct inv_ticket *batch[5] = {&t[0], &t[1], &t[2], &t[3], &t[4]};
    inv_ticket_batch(f.s, batch, 5, 0);
    inv_status want[] = {INV_REPLAYED, INV_PLACED, INV_REPLAYED, INV_PLACED, INV_LIMIT};
    for (int i = 0; i < 5; i++)
        if (t[i].st != want[i])
            fail_msg("order %d: status %d, not %d", i, t[i].st, want[i]);
    assert_true(t[0].order.id == first.id && t[2].order.id == first.id);
    assert_string_equal(t[1].order.user_id, "bob");
    invfix_assert_sold(&f, "pipe", 3, 7);
    invfix_close(&f);
}

struct slow_batch {
    struct inv_session *s;
    struct inv_ticket **t;
    int n;
};

static void *run_batch(void *arg)
{
    struct slow_batch *b = arg;
    inv_ticket_batch(b->s, b->t, b->n, 0);
    return NULL;
}

/* Opens f (400 ms of work) and other on SKU "slow" (stock 10, one segment,
 * one unit sold, its layout known), then starts a batch of n fresh users on
 * segment 0 in a thread and returns once it holds the segment lock. */
static void start_slow_batch(struct invfix *f, struct invfix *other, pthread_t *th,
                             struct slow_batch *b, struct inv_ticket *t, int n)
{
    invfix_open_shared(f, "redis", 400000);
    invfix_open_shared(other, "redis", 0);
    inv_sku_put(f->s, "slow", 10, 1, 1);
    struct inv_order o;
    assert_int_equal(inv_order_place(f->s, "slow", "warm", 1, NULL, &o), INV_PLACED);
    static struct inv_ticket *ptrs[8];
    for (int i = 0; i < n; i++) {
        char user[16];
        snprintf(user, sizeof(user), "slow%d", i);
        ticket(f, &t[i], "slow", user, NULL, 0);
        ptrs[i] = &t[i];
    }
    *b = (struct slow_batch){.s = f->s, .t = ptrs, .n = n};
    pthread_create(th, NULL, run_batch, b);
    const char *sku = "slow";
    assert_true(invfix_wait_locked(other->rc, &sku, 1, 5000));
}

/* The lease runs out in the middle of a batch and another holder takes the
 * segment: the batch's commit is refused as a whole by the fencing token,
 * every order answers busy and nothing is written. */
static void test_batch_with_lost_lease_is_refused_whole(void **state)
{
    (void)state;
    struct invfix f, other;
    struct inv_ticket t[3];
    struct slow_batch b;
    pthread_t th;
    start_slow_batch(&f, &other, &th, &b, t, 3);
    invfix_take_over(&other, "slow", 0);
    pthread_join(th, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t[i].st, INV_BUSY);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.fenced_off, 1);
    invfix_assert_sold(&f, "slow", 1, 9);
    invfix_close(&other);
    invfix_close(&f);
}

/* A reset in the middle of a batch: the batch writes nothing into the new
 * epoch, its orders are left undecided (the batcher then places each by
 * itself, in the new epoch), and the new stock is whole. */
static void test_batch_across_a_reset_writes_nothing(void **state)
{
    (void)state;
    struct invfix f, other;
    struct inv_ticket t[3];
    struct slow_batch b;
    pthread_t th;
    start_slow_batch(&f, &other, &th, &b, t, 3);
    assert_int_equal(inv_sku_put(other.s, "slow", 7, 1, 1), INV_OK);
    pthread_join(th, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t[i].st, INV_PENDING);
    invfix_assert_sold(&f, "slow", 0, 7);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.epoch_changed, 1);
    for (int i = 0; i < 3; i++) {
        inv_ticket_single(f.s, &t[i]);
        assert_int_equal(t[i].st, INV_PLACED);
    }
    invfix_assert_sold(&f, "slow", 3, 4);
    invfix_close(&other);
    invfix_close(&f);
}

/* The connection to Redis is lost after the batch commit was sent: every
 * order of the batch answers outcome unknown with its id, and each id then
 * tells that it was placed. Lost before the commit (at the lock), they answer
 * unavailable and nothing is placed. */
static void test_batch_with_lost_connection(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "setnx", "local"};
    for (int m = 0; m < 3; m++) {
        char sku[16], lockkey[32];
        snprintf(sku, sizeof(sku), "cut-%s", modes[m]);
        snprintf(lockkey, sizeof(lockkey), "sk:{%s}:lock:0", sku);
        struct invfix direct;
        invfix_open_shared(&direct, modes[m], 0);
        inv_sku_put(direct.s, sku, 10, 1, 1);
        struct inv_order o;
        assert_int_equal(inv_order_place(direct.s, sku, "warm", 1, NULL, &o), INV_PLACED);
        struct test_proxy proxy;
        test_proxy_start(&proxy, invfix_redis.port, "order:");
        struct invfix f;
        invfix_open(&f, modes[m], 0, proxy.port, &invfix_ids);
        /* the layout is learnt by this instance first */
        assert_int_equal(inv_order_place(f.s, sku, "warm", 1, NULL, &o), INV_LIMIT);
        struct inv_ticket t[3];
        struct inv_ticket *batch[3] = {&t[0], &t[1], &t[2]};
        for (int i = 0; i < 3; i++) {
            char user[16];
            snprintf(user, sizeof(user), "cut%d", i);
            ticket(&f, &t[i], sku, user, NULL, 0);
        }
        inv_ticket_batch(f.s, batch, 3, 0);
        for (int i = 0; i < 3; i++) {
            if (t[i].st != INV_OUTCOME_UNKNOWN)
                fail_msg("%s: order %d of a batch whose answer was lost: status %d",
                         modes[m], i, t[i].st);
            struct inv_order back;
            assert_int_equal(inv_order_get(direct.s, t[i].order.id, &back), INV_OK);
        }
        invfix_assert_sold(&direct, sku, 4, 6);
        invfix_close(&f);
        test_proxy_stop(&proxy);

        /* lost at the lock, before any commit (local keeps no lock in Redis) */
        if (strcmp(modes[m], "local") == 0) {
            invfix_close(&direct);
            continue;
        }
        test_proxy_start(&proxy, invfix_redis.port, lockkey);
        invfix_open(&f, modes[m], 0, proxy.port, &invfix_ids);
        assert_int_equal(inv_order_place(f.s, sku, "warm", 1, NULL, &o), INV_LIMIT);
        for (int i = 0; i < 3; i++) {
            char user[16];
            snprintf(user, sizeof(user), "late%d", i);
            ticket(&f, &t[i], sku, user, NULL, 0);
        }
        inv_ticket_batch(f.s, batch, 3, 0);
        for (int i = 0; i < 3; i++)
            assert_int_equal(t[i].st, INV_UNAVAILABLE);
        invfix_close(&f);
        test_proxy_stop(&proxy);
        invfix_assert_sold(&direct, sku, 4, 6);
        invfix_close(&direct);
    }
}

/* ---- the batcher ---------------------------------------------------------- */

#define CROWD 64

/* A batcher of `threads` threads and batches of `batch` on the fixture. */
static struct inv_batcher *batcher(struct invfix *f, int threads, int batch)
{
    struct inv_batcher_config bc = {.threads = threads,
                                    .batch = batch,
                                    .redis_host = "127.0.0.1",
                                    .redis_port = invfix_redis.port};
    return inv_batcher_start(f->inv, &bc);
}

/* Orders that arrive while a segment's batch is in flight wait for the next
 * one: with one batch thread, 20 ms of work per hold and 64 orders queued
 * for one segment, a handful of holds serve all of them, and every order gets
 * exactly one answer. The first orders of a SKU this process has not seen
 * yet go one by one until its layout is known. */
static void test_batcher_groups_orders_of_a_segment(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 20000);
    inv_sku_put(f.s, "crowd", 50, 1, 1);
    struct inv_batcher *b = batcher(&f, 1, 16);
    static struct inv_ticket t[CROWD];
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    invfix_submit_crowd(f.inv, b, t, CROWD, "crowd", "c", &w);
    invfix_wait_done(&w, CROWD);
    assert_int_equal(invfix_count(t, CROWD, INV_PLACED), 50);
    assert_int_equal(invfix_count(t, CROWD, INV_SOLD_OUT), CROWD - 50);
    struct inv_batch_stats bs;
    inv_batcher_stats(b, &bs);
    if (bs.batches == 0 || bs.batches > 12)
        fail_msg("%llu batches for %d queued orders", (unsigned long long)bs.batches,
                 CROWD);
    assert_int_equal(bs.queued, 0);
    inv_batcher_free(b);
    invfix_assert_sold(&f, "crowd", 50, 0);
    invfix_close(&f);
}

/* Orders spread over the SKU's segments still share holds: a hold with room
 * left takes the orders waiting on the other segments, and places each on the
 * held segment while it has stock (counted as spilled); those it could not
 * serve are sent on to segments that hold stock, where the next hold takes
 * them together. 48 orders queued over 4 segments of 25 units, one batch
 * thread: two holds serve them all; without stealing, every segment would
 * need a hold of its own (4), and without sending on, the 24 left over would
 * each take a lock by themselves. */
static void test_batcher_fills_a_hold_from_other_segments(void **state)
{
    (void)state;
    struct invfix f, gate;
    invfix_open_shared(&f, "redis", 20000);
    invfix_open_shared(&gate, "redis", 0);
    inv_sku_put(f.s, "spread", 100, 4, 1);
    inv_sku_put(f.s, "gate", 10, 1, 1);
    struct inv_order o;
    assert_int_equal(inv_order_place(f.s, "spread", "learn", 1, NULL, &o), INV_PLACED);
    assert_int_equal(inv_order_place(f.s, "gate", "learn", 1, NULL, &o), INV_PLACED);
    /* The one batch thread first waits for the gate's lock, held here, so that
     * all 48 orders are queued before it serves any of them. */
    struct lock_session *ls = lock_session_new(gate.lock, gate.rc);
    struct lock_grant g;
    assert_int_equal(lock_acquire(ls, "sk:{gate}:lock:0", 5000, &g), LOCK_ACQUIRED);
    struct inv_batcher *b = batcher(&f, 1, 64);
    static struct inv_ticket t[49];
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    invfix_submit(f.inv, b, &t[48], "gate", "g", &w);
    for (int i = 0; i < 48; i++) {
        char user[16];
        invfix_user_with_home(i % 4, 4, i / 4, user, sizeof(user));
        invfix_submit(f.inv, b, &t[i], "spread", user, &w);
        assert_int_equal(t[i].home, i % 4);
    }
    lock_release(ls, "sk:{gate}:lock:0", &g);
    lock_session_free(ls);
    invfix_wait_done(&w, 49);
    for (int i = 0; i < 49; i++)
        assert_int_equal(t[i].st, INV_PLACED);
    struct inv_batch_stats bs;
    inv_batcher_stats(b, &bs);
    if (bs.batches != 3) /* the gate's, and two for the 48 */
        fail_msg("%llu holds for the gate and 48 orders over 4 segments",
                 (unsigned long long)bs.batches);
    inv_batcher_free(b);
    invfix_assert_sold(&f, "spread", 49, 51);
    invfix_close(&gate);
    invfix_close(&f);
}

/* --work-us is a timer, not a sleep: one batch thread keeps the holds of three
 * SKUs open at once while their orders work (300 ms each), and every order is
 * placed. A thread that slept through each hold would hold one at a time. */
static void test_batcher_works_holds_side_by_side(void **state)
{
    (void)state;
    struct invfix f, probe;
    invfix_open_shared(&f, "redis", 300000);
    invfix_open_shared(&probe, "redis", 0);
    char sku[3][16];
    for (int i = 0; i < 3; i++) {
        snprintf(sku[i], sizeof(sku[i]), "park%d", i);
        inv_sku_put(f.s, sku[i], 10, 1, 1);
    }
    struct inv_batcher *b = batcher(&f, 1, 8);
    static struct inv_ticket learn[3], t[3];
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    for (int i = 0; i < 3; i++) /* the layouts, learnt one by one */
        invfix_submit(f.inv, b, &learn[i], sku[i], "learn", &w);
    invfix_wait_done(&w, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(learn[i].st, INV_PLACED);
        invfix_submit(f.inv, b, &t[i], sku[i], "park", &w);
    }
    const char *parked[] = {sku[0], sku[1], sku[2]};
    assert_true(invfix_wait_locked(probe.rc, parked, 3, 5000));
    invfix_wait_done(&w, 6);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(t[i].st, INV_PLACED);
        invfix_assert_sold(&f, sku[i], 2, 8);
    }
    inv_batcher_free(b);
    invfix_close(&probe);
    invfix_close(&f);
}

/* Orders for SKUs that do not exist (made-up names) answer not found and
 * leave no queue behind; a real SKU keeps its layout queue and one queue per
 * segment it sold from. */
static void test_batcher_keeps_no_queue_for_unknown_skus(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    inv_sku_put(f.s, "real", 10, 2, 1);
    struct inv_batcher *b = batcher(&f, 2, 8);
    static struct inv_ticket t[42];
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    for (int i = 0; i < 40; i++) {
        char sku[16];
        snprintf(sku, sizeof(sku), "madeup%d", i);
        invfix_submit(f.inv, b, &t[i], sku, "u", &w);
    }
    invfix_wait_done(&w, 40);
    for (int i = 0; i < 40; i++)
        assert_int_equal(t[i].st, INV_NOT_FOUND);
    struct inv_batch_stats bs;
    inv_batcher_stats(b, &bs);
    assert_int_equal(bs.queues, 0);
    invfix_submit(f.inv, b, &t[40], "real", "u", &w);
    invfix_wait_done(&w, 41);
    assert_int_equal(t[40].st, INV_PLACED);
    inv_batcher_stats(b, &bs);
    assert_int_equal(bs.queues, 0); /* learnt by itself: no segment queue yet */
    invfix_submit(f.inv, b, &t[41], "real", "v",
                  &w); /* its segment's queue, and the SKU's */
    invfix_wait_done(&w, 42);
    assert_int_equal(t[41].st, INV_PLACED);
    inv_batcher_stats(b, &bs);
    assert_int_equal(bs.queues, 2);
    inv_batcher_free(b);
    invfix_close(&f);
}

/* A batcher that stops serves what is queued, and answers what comes after
 * at once as unavailable. */
static void test_batcher_stop_answers_everything(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "local", 5000);
    inv_sku_put(f.s, "stop", 100, 2, 1);
    struct inv_batcher *b = batcher(&f, 2, 4);
    static struct inv_ticket t[CROWD + 1];
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    invfix_submit_crowd(f.inv, b, t, CROWD, "stop", "s", &w);
    invfix_submit(f.inv, NULL, &t[CROWD], "stop", "late", &w); /* opened only */
    inv_batcher_stop(b);
    pthread_mutex_lock(&w.mu);
    assert_int_equal(w.done, CROWD);
    pthread_mutex_unlock(&w.mu);
    assert_int_equal(invfix_count(t, CROWD, INV_PLACED), CROWD);
    inv_batcher_submit(b, &t[CROWD]);
    assert_int_equal(t[CROWD].st, INV_UNAVAILABLE);
    invfix_wait_done(&w, CROWD + 1);
    inv_batcher_free(b);
    invfix_assert_sold(&f, "stop", CROWD, 100 - CROWD);
    invfix_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_mixes_outcomes),
        cmocka_unit_test(test_batch_with_lost_lease_is_refused_whole),
        cmocka_unit_test(test_batch_across_a_reset_writes_nothing),
        cmocka_unit_test(test_batch_with_lost_connection),
        cmocka_unit_test(test_atomic_pipeline_keeps_each_answer),
        cmocka_unit_test(test_batcher_groups_orders_of_a_segment),
        cmocka_unit_test(test_batcher_fills_a_hold_from_other_segments),
        cmocka_unit_test(test_batcher_works_holds_side_by_side),
        cmocka_unit_test(test_batcher_keeps_no_queue_for_unknown_skus),
        cmocka_unit_test(test_batcher_stop_answers_everything),
    };
    return cmocka_run_group_tests(tests, invfix_setup, invfix_teardown);
}
