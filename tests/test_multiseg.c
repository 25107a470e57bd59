/* Tests of orders across segments against a real redis-server: an order no
 * single segment can serve takes units from several (invariant 2: refused
 * only when fewer than qty remain in the whole SKU), locked in ascending
 * order, committed all or nothing; and orders that leave an emptied home
 * spread over what is left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "invfix.h"
#include "testutil.h"

/* An order placed on an event loop, as the server places it. */
static inv_status place_on_loop(struct invfix *f, const char *sku, const char *user, int qty,
                                struct inv_order *o)
{
    static struct inv_ticket t;
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    inv_status st = inv_ticket_open(f->inv, &t, sku, user, qty, NULL);
    if (st != INV_PENDING)
        return st;
    t.done = invfix_on_done;
    t.owner = &w;
    invfix_serve(f->inv, &t, 1, 32, &w);
    *o = t.order;
    return t.st;
}

/* 10 units in 16 segments hold at most one unit each: every order of 2 takes
 * two segments. Five such orders are placed, each one order with one id
 * listing its two segments, and the sixth is refused; nothing is stranded.
 * Before orders could span segments, every one of them was refused. */
static void test_units_in_several_segments_are_sold(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "setnx", "atomic"};
    for (int m = 0; m < 3; m++) {
        struct invfix f;
        invfix_open_shared(&f, modes[m], 0);
        assert_int_not_equal(inv_sku_put(f.s, "pairs", 10, 16, 3), INV_UNAVAILABLE);
        static struct inv_order o;
        for (int i = 0; i < 5; i++) {
            char user[16];
            snprintf(user, sizeof(user), "pair%d", i);
            assert_int_equal(place_on_loop(&f, "pairs", user, 2, &o), INV_PLACED);
            assert_int_equal(o.nparts, 2);
            assert_int_not_equal(o.parts[0].segment, o.parts[1].segment);
            assert_int_equal(o.parts[0].qty + o.parts[1].qty, 2);
            static struct inv_order got;
            assert_int_equal(inv_order_get(f.s, o.id, &got), INV_OK);
            assert_int_equal(got.nparts, 2);
            assert_int_equal(got.parts[1].segment, o.parts[1].segment);
        }
        assert_int_equal(place_on_loop(&f, "pairs", "pair5", 2, &o), INV_SOLD_OUT);
        invfix_assert_sold(&f, "pairs", 10, 0);
        invfix_close(&f);
    }
}

/* Two instances at once, each with an order that needs both segments of a
 * SKU: one user's home is segment 0, the other's segment 1, so one plans
 * {0, 1} and the other {1, 0}. Locked in that order they would each hold what
 * the other waits for until --wait-ms (both busy); locked in ascending order
 * one is placed and the other is refused as sold out, well within the wait. */
struct crossed {
    struct invfix *f;
    const char *user;
    pthread_barrier_t *go;
    inv_status st;
    int64_t took_us;
};

static void *place_crossed(void *arg)
{
    struct crossed *c = arg;
    static _Thread_local struct inv_order o;
    pthread_barrier_wait(c->go);
    int64_t t0 = clock_now_us();
    c->st = invfix_place(c->f->p, "cross", c->user, 3, NULL, &o);
    c->took_us = clock_now_us() - t0;
    return NULL;
}

static void test_crossed_orders_do_not_deadlock(void **state)
{
    (void)state;
    struct invfix a, b;
    invfix_open_shared(&a, "redis", 20000);
    invfix_open_shared(&b, "redis", 20000);
    char ua[16], ub[16];
    invfix_user_with_home(0, 2, 0, ua, sizeof(ua));
    invfix_user_with_home(1, 2, 0, ub, sizeof(ub));
    for (int round = 0; round < 10; round++) {
        assert_int_not_equal(inv_sku_put(a.s, "cross", 4, 2, 3), INV_UNAVAILABLE);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        struct crossed ca = {.f = &a, .user = ua, .go = &go},
                       cb = {.f = &b, .user = ub, .go = &go};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, place_crossed, &ca);
        pthread_create(&tb, NULL, place_crossed, &cb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&go);
        if (!((ca.st == INV_PLACED && cb.st == INV_SOLD_OUT) ||
              (cb.st == INV_PLACED && ca.st == INV_SOLD_OUT)))
            fail_msg("round %d: statuses %d and %d after %lld and %lld ms", round, ca.st,
                     cb.st, (long long)ca.took_us / 1000, (long long)cb.took_us / 1000);
        assert_true(ca.took_us < 1500000 && cb.took_us < 1500000);
        invfix_assert_sold(&a, "cross", 3, 1);
    }
    invfix_close(&b);
    invfix_close(&a);
}

/* The lease of one of an order's two segments is lost while it works, and
 * another holder takes that segment: the commit, fenced on every segment,
 * is refused as a whole. Nothing is written to either segment. */
struct lost {
    struct invfix *f;
    inv_status st;
};

static void *place_lost(void *arg)
{
    struct lost *l = arg;
    static struct inv_order o;
    l->st = invfix_place(l->f->p, "lost", "both", 2, NULL, &o);
    return NULL;
}

static int key_exists(void *arg)
{
    struct invfix *f = arg;
    redisReply *r = rconn_command(f->rc, "EXISTS sk:{lost}:lock:1");
    int yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return yes;
}

static void test_lost_lease_refuses_the_whole_order(void **state)
{
    (void)state;
    struct invfix f, other;
    invfix_open_shared(&f, "redis", 400000);
    invfix_open_shared(&other, "redis", 0);
    inv_sku_put(other.s, "lost", 2, 2, 2);
    struct lost l = {.f = &f};
    pthread_t th;
    pthread_create(&th, NULL, place_lost, &l);
    /* segment 1 is taken second: once it is held, both are */
    assert_true(test_wait_for(key_exists, &other, 5000));
    invfix_take_over(&other, "lost", 1);
    pthread_join(th, NULL);
    assert_int_equal(l.st, INV_BUSY);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.fenced_off, 1);
    invfix_assert_sold(&f, "lost", 0, 2);
    invfix_close(&other);
    invfix_close(&f);
}

/* Only segments 13, 14 and 15 of 16 hold stock. Orders whose homes are
 * empty spread over all three by the user hash; taken in ring order from
 * their homes (0..12), they would all pile onto segment 13 until it ran out. */
static void test_spilled_orders_spread_over_what_is_left(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "atomic"};
    for (int m = 0; m < 2; m++) {
        struct invfix f;
        invfix_open_shared(&f, modes[m], 0);
        inv_sku_put(f.s, "tail", 16 * 30, 16, 30);
        static struct inv_order o;
        char user[16];
        for (int seg = 0; seg < 13; seg++) { /* empty segments 0..12 */
            invfix_user_with_home(seg, 16, 0, user, sizeof(user));
            assert_int_equal(invfix_place(f.p, "tail", user, 30, NULL, &o),
                             INV_PLACED);
            assert_int_equal(o.segment, seg);
        }
        int served[16] = {0};
        for (int i = 0; i < 45; i++) {
            invfix_user_with_home(i % 13, 16, 1 + i / 13, user, sizeof(user));
            assert_int_equal(invfix_place(f.p, "tail", user, 1, NULL, &o), INV_PLACED);
            served[o.segment]++;
        }
        for (int seg = 13; seg < 16; seg++)
            if (served[seg] < 5)
                fail_msg("%s: segments 13..15 served %d, %d, %d of 45", modes[m],
                         served[13], served[14], served[15]);
        invfix_assert_sold(&f, "tail", 13 * 30 + 45, 3 * 30 - 45);
        invfix_close(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units_in_several_segments_are_sold),
        cmocka_unit_test(test_crossed_orders_do_not_deadlock),
        cmocka_unit_test(test_lost_lease_refuses_the_whole_order),
        cmocka_unit_test(test_spilled_orders_spread_over_what_is_left),
    };
    return cmocka_run_group_tests(tests, invfix_setup, invfix_teardown);
}
