/* The zk mode's fencing, enforced by the data Redis (a real redis-server and
 * a real ZooKeeper): a grant's token is its lock node's czxid, which the data
 * Redis does not hand out, so the holder's read raises the segment's
 * high-water token to it and the commit is refused unless it is still the
 * holder's (inventory/lua/fence_read.lua). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "invfix.h"
#include "testutil.h"

static struct test_zk zk;

/* One instance in zk mode: its ZooKeeper and Redis ports may be proxies. */
struct zkfix {
    struct lock *lock;
    struct inv *inv;
    struct rconn *rc;
    struct inv_session *s;
    struct invfix_placer *p;
};

static void zkfix_open(struct zkfix *f, int zk_port, int redis_port, int work_us,
                       int fencing)
{
    char hosts[64], err[256] = "";
    snprintf(hosts, sizeof(hosts), "127.0.0.1:%d", zk_port);
    struct lock_config lc = {
        .ttl_ms = 3000, .fencing = fencing, .zk_hosts = hosts, .zk_session_ms = 1000};
    f->lock = lock_new("zk", &lc, err, sizeof(err));
    if (!f->lock)
        fail_msg("lock_new(zk): %s", err);
    test_lock_attach(f->lock);
    struct inv_config ic = {.lock = f->lock,
                            .wait_ms = 20000,
                            .work_us = work_us,
                            .fencing = fencing,
                            .ids = &invfix_ids};
    f->inv = inv_new(&ic);
    /* a long timeout: a commit held up by a stopped proxy still gets its answer */
    f->rc = rconn_new("127.0.0.1", redis_port, NULL, 30000);
    f->s = inv_session_new(f->inv, f->rc);
    f->p = invfix_placer_new(f->inv, redis_port, 32, 30000);
}

static void zkfix_close(struct zkfix *f)
{
    invfix_placer_free(f->p);
    inv_session_free(f->s);
    rconn_free(f->rc);
    inv_free(f->inv);
    test_lock_free(f->lock);
}

#define FENCE_KEY "sk:{zf}:lock:0:fence"

/* The segment's high-water token, "" when none. */
static void mark(struct zkfix *f, char *out, size_t len)
{
    redisReply *r = rconn_command(f->rc, "GET %s", FENCE_KEY);
    assert_non_null(r);
    snprintf(out, len, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
}

struct placing {
    struct zkfix *f;
    const char *user;
    inv_status st;
};

static void *place(void *arg)
{
    struct placing *p = arg;
    static _Thread_local struct inv_order o;
    p->st = invfix_place(p->f->p, "zf", p->user, 1, NULL, &o);
    return NULL;
}

struct mark_arg {
    struct zkfix *f;
    const char * not ; /* wait until the mark is set and differs from this */
};

static int mark_moved(void *arg)
{
    struct mark_arg *m = arg;
    char now[32];
    mark(m->f, now, sizeof(now));
    return now[0] && strcmp(now, m->not ) != 0;
}

static int acquired(void *arg)
{
    struct lock_stats st;
    lock_stats(arg, &st);
    return st.acquisitions >= 1;
}

/* Holder A reads under its lock and works; its ZooKeeper session then expires
 * (its connection frozen) and B takes the segment and reads it, raising the
 * mark to its own czxid, but has not committed yet. A's commit, held up until
 * then, is refused: nothing of A's is written, and B's order is placed. With
 * --fencing off the same schedule lets A's stale commit through. */
static void run_stale_holder(int fencing)
{
    struct test_proxy zkp, rp;
    test_proxy_start_bytes(&zkp, zk.port, NULL);
    test_proxy_start(&rp, invfix_redis.port, NULL);
    struct zkfix a, b, admin;
    zkfix_open(&a, zkp.port, rp.port, 300000, fencing);
    zkfix_open(&b, zk.port, invfix_redis.port, 3000000, fencing);
    zkfix_open(&admin, zk.port, invfix_redis.port, 0, fencing);
    assert_int_not_equal(inv_sku_put(admin.s, "zf", 10, 1, 2), INV_UNAVAILABLE);
    redisReply *del = rconn_command(admin.rc, "DEL %s", FENCE_KEY);
    assert_non_null(del);
    freeReplyObject(del);

    struct placing pa = {.f = &a, .user = "alice"}, pb = {.f = &b, .user = "bob"};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, place, &pa);
    /* A holds (with fencing: has read, the mark is its czxid); without
     * fencing its read may still be on its way, to arrive after B's: either
     * way its commit writes what it read. */
    char before[32] = "";
    assert_true(test_wait_for(acquired, a.lock, 10000));
    if (fencing) {
        struct mark_arg m = {&admin, ""};
        assert_true(test_wait_for(mark_moved, &m, 10000));
        mark(&admin, before, sizeof(before));
    }
    kill(rp.pid, SIGSTOP);  /* A's commit waits here */
    kill(zkp.pid, SIGSTOP); /* and its session expires */
    pthread_create(&tb, NULL, place, &pb);
    /* B holds once A's session expired; with fencing, B has read: the mark is
     * B's czxid now */
    assert_true(test_wait_for(acquired, b.lock, 20000));
    if (fencing) {
        struct mark_arg m = {&admin, before};
        assert_true(test_wait_for(mark_moved, &m, 20000));
    }
    kill(rp.pid, SIGCONT);
    pthread_join(ta, NULL);
    kill(zkp.pid, SIGCONT);
    pthread_join(tb, NULL);

    struct inv_sku_report *r = malloc(sizeof(*r));
    assert_int_equal(inv_sku_get(admin.s, "zf", r), INV_OK);
    struct inv_stats st;
    inv_stats(a.inv, &st);
    if (fencing) {
        assert_int_equal(pa.st, INV_BUSY);
        assert_int_equal(st.fenced_off, 1);
        assert_int_equal(pb.st, INV_PLACED);
        assert_int_equal(r->sold, 1);
        assert_int_equal(r->remaining, 9);
    } else { /* A's stale commit went through */
        assert_int_equal(pa.st, INV_PLACED);
        assert_int_equal(pb.st, INV_PLACED);
        assert_int_equal(r->sold, 2);
    }
    free(r);
    zkfix_close(&admin);
    zkfix_close(&b);
    zkfix_close(&a);
    test_proxy_stop(&rp);
    test_proxy_stop(&zkp);
}

static void test_stale_holder_is_fenced_off(void **state)
{
    (void)state;
    run_stale_holder(1);
}

static void test_stale_holder_writes_without_fencing(void **state)
{
    (void)state;
    run_stale_holder(0);
}

/* In zk mode with fencing on, orders sell through an event loop's group
 * commits, the commit accepting the czxid the read raised the mark to; the
 * audit agrees. */
static void test_batches_sell_with_czxid_tokens(void **state)
{
    (void)state;
    struct zkfix f;
    zkfix_open(&f, zk.port, invfix_redis.port, 0, 1);
    assert_int_not_equal(inv_sku_put(f.s, "zb", 30, 4, 1), INV_UNAVAILABLE);
    static struct inv_ticket t[40];
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    invfix_tickets(f.inv, t, 40, "zb", "z", &w);
    invfix_serve(f.inv, t, 40, 8, &w);
    assert_int_equal(invfix_count(t, 40, INV_PLACED), 30);
    assert_int_equal(invfix_count(t, 40, INV_SOLD_OUT), 10);
    struct inv_audit a;
    assert_int_equal(inv_audit(f.s, "zb", &a), INV_OK);
    assert_int_equal(a.sold, 30);
    assert_true(a.consistent);
    zkfix_close(&f);
}

static int setup(void **state)
{
    invfix_setup(state);
    test_zk_start(&zk);
    return 0;
}

static int teardown(void **state)
{
    test_zk_stop(&zk, 0, 0);
    invfix_teardown(state);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_sell_with_czxid_tokens),
        cmocka_unit_test(test_stale_holder_is_fenced_off),
        cmocka_unit_test(test_stale_holder_writes_without_fencing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
