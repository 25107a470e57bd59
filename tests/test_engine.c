/* Tests of the event-driven order path (engine.h) against a real redis-server.
 * The test thread runs a libevent loop with an engine on it, as a server's
 * loop thread does: every order of every mode is served there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <event2/event.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aconn.h"
#include "clock.h"
#include "engine.h"
#include "invfix.h"
#include "testutil.h"

/* Three independent masters for the redlock mode. */
#define NODES 3
static struct test_redis node[NODES];
static struct rconn_addr node_addr[NODES];
/* A ZooKeeper server for the zk mode. */
static struct test_zk zk;
static char zk_hosts[64];

/* Opens f in mode (its nodes for redlock). */
static void open_mode(struct invfix *f, const char *mode, int work_us)
{
    invfix_open_nodes(f, mode, work_us, invfix_redis.port, &invfix_ids, node_addr, NODES);
}

/* Most orders one loop takes in a test. */
#define LOOP_ORDERS 64

/* One event loop as a server thread runs it: its engine, on the Redis (or
 * proxy) a test names. Answers are counted per order. */
struct loop {
    struct invfix *f;
    struct event_base *base;
    struct event *tick; /* ends each turn soon: a zk step ends on the zk loop's thread */
    struct inv_engine *engine; /* NULL once a test freed it */
    pthread_mutex_t mu;
    int answered;             /* answers so far, under mu */
    int answers[LOOP_ORDERS]; /* per order, under mu */
    int64_t took_us[LOOP_ORDERS]; /* per order, from its start to its answer */
    int n;                    /* orders submitted */
    struct inv_ticket t[LOOP_ORDERS];
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

/* A loop on f whose engine talks to the Redis (or proxy) on port; one lock
 * hold serves at most `batch` orders. */
static struct loop *loop_new(struct invfix *f, int port, int batch)
{
    struct loop *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->f = f;
    pthread_mutex_init(&l->mu, NULL);
    l->base = event_base_new();
    assert_non_null(l->base);
    l->tick = event_new(l->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval every = {.tv_usec = 2000};
    assert_int_equal(event_add(l->tick, &every), 0);
    struct inv_engine_config ec = {.redis_host = "127.0.0.1",
                                   .redis_port = port,
                                   .redis_password = NULL,
                                   .timeout_ms = 1000,
                                   .batch = batch};
    l->engine = inv_engine_new(f->inv, l->base, &ec);
    return l;
}

/* Frees the engine (which answers what it has in flight), then the loop. */
static void loop_free(struct loop *l)
{
    inv_engine_free(l->engine);
    event_free(l->tick);
    event_base_free(l->base);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* t->done of the loop's orders, on the loop thread. */
static void on_answer(struct inv_ticket *t)
{
    struct loop *l = t->owner;
    pthread_mutex_lock(&l->mu);
    l->answers[t - l->t]++;
    l->took_us[t - l->t] = clock_now_us() - t->start_us;
    l->answered++;
    pthread_mutex_unlock(&l->mu);
}

/* Submits an order of qty units of sku for user (key: its Idempotency-Key,
 * or NULL) to the loop's engine. Returns its ticket. */
static struct inv_ticket *loop_order_qty(struct loop *l, const char *sku,
                                         const char *user, int qty, const char *key)
{
    assert_true(l->n < LOOP_ORDERS);
    struct inv_ticket *t = &l->t[l->n++];
    assert_int_equal(inv_ticket_open(l->f->inv, t, sku, user, qty, key), INV_PENDING);
    t->done = on_answer;
    t->owner = l;
    inv_engine_submit(l->engine, t);
    return t;
}

static struct inv_ticket *loop_order(struct loop *l, const char *sku, const char *user,
                                     const char *key)
{
    return loop_order_qty(l, sku, user, 1, key);
}

/* Submits n orders of sku for users "<prefix>0".. Returns the first one's
 * index in l->t. */
static int loop_orders(struct loop *l, const char *sku, const char *prefix, int n)
{
    int first = l->n;
    for (int i = 0; i < n; i++) {
        char user[24];
        snprintf(user, sizeof(user), "%s%d", prefix, i);
        loop_order(l, sku, user, NULL);
    }
    return first;
}

static int answered(struct loop *l)
{
    pthread_mutex_lock(&l->mu);
    int n = l->answered;
    pthread_mutex_unlock(&l->mu);
    return n;
}

/* Runs the loop until until(l, arg) holds. 0 when it did not within
 * timeout_ms. */
static int loop_run(struct loop *l, int (*until)(struct loop *, const void *),
                    const void *arg, int timeout_ms)
{
    int64_t deadline = clock_now_us() + (int64_t)timeout_ms * 1000;
    while (!until(l, arg)) {
        if (clock_now_us() > deadline)
            return 0;
        event_base_loop(l->base, EVLOOP_ONCE);
    }
    return 1;
}

static int all_answered(struct loop *l, const void *arg)
{
    (void)arg;
    return answered(l) >= l->n;
}

/* Runs the loop until every order submitted has an answer (at most
 * timeout_ms), then asserts that each got exactly one, with a final status,
 * and that nothing is left in flight on the loop. */
static void loop_settle(struct loop *l, int timeout_ms)
{
    if (!loop_run(l, all_answered, NULL, timeout_ms))
        fail_msg("%d of %d orders answered after %d ms", answered(l), l->n, timeout_ms);
    int answers[LOOP_ORDERS];
    pthread_mutex_lock(&l->mu);
    memcpy(answers, l->answers, sizeof(answers));
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->n; i++)
        if (answers[i] != 1 || l->t[i].st == INV_PENDING)
            fail_msg("order %d: %d answers, status %d", i, answers[i], l->t[i].st);
    if (l->engine)
        assert_int_equal(inv_engine_inflight(l->engine), 0);
}

/* Asserts that orders first..first+n-1 of the loop answered st. */
static void expect_status(struct loop *l, int first, int n, inv_status st)
{
    for (int i = first; i < first + n; i++)
        if (l->t[i].st != st)
            fail_msg("order %d (%s): status %d, not %d", i, l->t[i].user_id, l->t[i].st,
                     st);
}

static int never(struct loop *l, const void *arg)
{
    (void)l, (void)arg;
    return 0;
}

/* Runs the loop for ms: for what must not happen meanwhile. */
static void loop_idle(struct loop *l, int ms)
{
    loop_run(l, never, NULL, ms);
}

static struct lock_stats lock_figures(struct loop *l)
{
    struct lock_stats s;
    lock_stats(l->f->lock, &s);
    return s;
}

/* The loop's lock has granted *n holds in all: the latest hold works. */
static int granted(struct loop *l, const void *n)
{
    return lock_figures(l).acquisitions >= *(const uint64_t *)n;
}

/* The loop's lock found a segment taken *n times. */
static int contended(struct loop *l, const void *n)
{
    return lock_figures(l).contended >= *(const uint64_t *)n;
}

/* *n releases of the loop's lock found it held by someone else. */
static int released_not_held(struct loop *l, const void *n)
{
    return lock_figures(l).releases_not_held >= *(const uint64_t *)n;
}

/* Orders first..first+n-1 of a loop. */
struct orders_of {
    struct loop *l;
    int first, n;
};

/* True when each of the orders (struct orders_of) is recorded in Redis, for
 * its user: what a client whose answer was lost asks. */
static int orders_found(void *arg)
{
    const struct orders_of *o = arg;
    for (int i = o->first; i < o->first + o->n; i++) {
        const struct inv_ticket *t = &o->l->t[i];
        struct inv_order back;
        if (inv_order_get(o->l->f->s, t->order.id, &back) != INV_OK ||
            strcmp(back.user_id, t->user_id) != 0)
            return 0;
    }
    return 1;
}

/* Lets f learn sku's layout, so that f's orders are routed to their segment
 * and served on the loop: an order for more than any limit allows, refused
 * after its first look at the SKU, before any lock or work; nothing sold. */
static void learn_layout(struct invfix *f, const char *sku)
{
    struct inv_order o;
    assert_int_equal(invfix_place(f->p, sku, "learn", INV_MAX_LIMIT, NULL, &o),
                     INV_BAD_QTY);
}

/* ---- group commits on the loop (modes none and redis) -------------------- */

/* One hold on the loop serves a placed order, the same user again (limit), a
 * replay of an order placed before (which the loop answers with the first
 * order, by itself), a user at the limit, a key reused by another user, and an
 * order its segment is too short for, which the loop sends on and places on
 * the other segment. The batch stats count the loop's holds. */
static void test_hold_mixes_outcomes(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    assert_int_equal(inv_sku_put(f.s, "mix", 20, 2, 1), INV_CREATED); /* 10 + 10 */
    /* nine buyers of segment 0 leave it one unit; the first one used "kb" */
    char buyer[9][16], ann[16], dan[16], eve[16];
    struct inv_order first, o;
    for (int i = 0; i < 9; i++) {
        invfix_user_with_home(0, 2, i, buyer[i], sizeof(buyer[i]));
        assert_int_equal(invfix_place(f.p, "mix", buyer[i], 1, i == 0 ? "kb" : NULL,
                                      i == 0 ? &first : &o),
                         INV_PLACED);
    }
    invfix_user_with_home(0, 2, 9, ann, sizeof(ann));
    invfix_user_with_home(0, 2, 10, dan, sizeof(dan));
    invfix_user_with_home(0, 2, 11, eve, sizeof(eve));
    struct inv_batch_stats bs0;
    inv_batch_stats(f.inv, &bs0); /* the nine's holds are not the loop's */
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    struct inv_ticket *placed = loop_order(l, "mix", ann, NULL);
    struct inv_ticket *again = loop_order(l, "mix", ann, NULL);
    struct inv_ticket *replay = loop_order(l, "mix", buyer[0], "kb");
    struct inv_ticket *bought = loop_order(l, "mix", buyer[1], NULL);
    struct inv_ticket *reused = loop_order(l, "mix", eve, "kb");
    struct inv_ticket *spilled = loop_order(l, "mix", dan, NULL);
    loop_settle(l, 5000);
    assert_int_equal(placed->st, INV_PLACED);
    assert_int_equal(placed->order.segment, 0);
    assert_int_equal(again->st, INV_LIMIT);
    assert_int_equal(replay->st, INV_REPLAYED);
    assert_true(replay->order.id == first.id);
    assert_int_equal(bought->st, INV_LIMIT);
    assert_int_equal(reused->st, INV_IDEM_MISMATCH);
    assert_int_equal(spilled->st, INV_PLACED);
    assert_int_equal(spilled->order.segment, 1);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.spilled, 1);
    /* the loop's holds: segment 0's with the six, segment 1's with dan */
    struct inv_batch_stats bs;
    inv_batch_stats(f.inv, &bs);
    assert_int_equal(bs.holds - bs0.holds, 2);
    assert_int_equal(bs.orders - bs0.orders, 7);
    loop_free(l);
    invfix_assert_sold(&f, "mix", 11, 9);
    invfix_close(&f);
}

/* What one hold writes once for all of its orders (the buyers' counts, the
 * Idempotency-Keys) is still seen by its later orders: a key used twice in
 * one hold is placed once and replayed once, with the first order's id; a
 * key reused by another user in it is refused; a user's third unit in it
 * meets the limit of 2. */
static void test_hold_sees_its_own_orders(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    assert_int_equal(inv_sku_put(f.s, "twice", 10, 1, 2), INV_CREATED);
    learn_layout(&f, "twice");
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    struct inv_ticket *first = loop_order(l, "twice", "una", "kn");
    struct inv_ticket *replay = loop_order(l, "twice", "una", "kn");
    struct inv_ticket *vic = loop_order(l, "twice", "vic", "kv");
    struct inv_ticket *reused = loop_order(l, "twice", "wes", "kv");
    struct inv_ticket *second = loop_order(l, "twice", "vic", NULL);
    struct inv_ticket *third = loop_order(l, "twice", "vic", NULL);
    loop_settle(l, 5000);
    assert_int_equal(first->st, INV_PLACED);
    assert_int_equal(replay->st, INV_REPLAYED);
    assert_true(replay->order.id == first->order.id);
    assert_int_equal(vic->st, INV_PLACED);
    assert_int_equal(reused->st, INV_IDEM_MISMATCH);
    assert_int_equal(second->st, INV_PLACED);
    assert_int_equal(third->st, INV_LIMIT);
    struct inv_batch_stats bs;
    inv_batch_stats(f.inv, &bs);
    assert_int_equal(bs.holds, 1);
    loop_free(l);
    invfix_assert_sold(&f, "twice", 3, 7);
    invfix_close(&f);
}

/* An order id issued twice (a worker id shared after a lost lease) is found
 * by the commit, whose one look over the hold's order keys says that one of
 * them exists: that order takes a fresh id and is placed, its neighbour in
 * the hold is placed as it is, and the record already there is untouched. */
static void test_hold_finds_an_id_issued_twice(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    assert_int_equal(inv_sku_put(f.s, "dup", 10, 1, 1), INV_CREATED);
    learn_layout(&f, "dup");
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    struct inv_ticket *t = &l->t[l->n++];
    assert_int_equal(inv_ticket_open(f.inv, t, "dup", "ida", 1, NULL), INV_PENDING);
    uint64_t issued = t->order.id;
    char idt[24], okey[64];
    snprintf(idt, sizeof(idt), "%" PRIu64, issued);
    inv_record_key(okey, sizeof(okey), "order:", idt);
    freeReplyObject(rconn_command(f.rc, "HSET %s %s %s", okey, idt, "other someone 1 0"));
    t->done = on_answer;
    t->owner = l;
    inv_engine_submit(l->engine, t);
    struct inv_ticket *next = loop_order(l, "dup", "ned", NULL);
    loop_settle(l, 5000);
    assert_int_equal(t->st, INV_PLACED);
    assert_true(t->order.id != issued);
    assert_int_equal(next->st, INV_PLACED);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.id_collisions, 1);
    redisReply *r = rconn_command(f.rc, "HGET %s %s", okey, idt);
    assert_non_null(r);
    assert_string_equal(r->str, "other someone 1 0"); /* as it was */
    freeReplyObject(r);
    loop_free(l);
    invfix_assert_sold(&f, "dup", 2, 8);
    invfix_close(&f);
}

#define CROWD 64

/* Orders that arrive while a segment's hold is in flight wait for the next
 * one: with 20 ms of work per hold and 64 orders submitted at once for one
 * segment of 50 units, a handful of holds serve all of them, every order gets
 * exactly one answer, exactly the stock is sold, and no ticket is left
 * queued. With and without a lock in Redis, and with zk's on ZooKeeper. */
static void test_orders_during_a_hold_form_the_next(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "none", "local", "setnx", "redlock", "zk"};
    for (int m = 0; m < 6; m++) {
        char sku[16];
        snprintf(sku, sizeof(sku), "crowd-%s", modes[m]);
        struct invfix f;
        open_mode(&f, modes[m], 20000);
        inv_sku_put(f.s, sku, 50, 1, 1);
        learn_layout(&f, sku);
        struct loop *l = loop_new(&f, invfix_redis.port, 16);
        loop_orders(l, sku, "c", CROWD);
        loop_settle(l, 10000);
        assert_int_equal(invfix_count(l->t, CROWD, INV_PLACED), 50);
        assert_int_equal(invfix_count(l->t, CROWD, INV_SOLD_OUT), CROWD - 50);
        struct inv_batch_stats bs;
        inv_batch_stats(f.inv, &bs);
        if (bs.holds < CROWD / 16 || bs.holds > 12)
            fail_msg("%s: %llu holds for %d orders in batches of 16", modes[m],
                     (unsigned long long)bs.holds, CROWD);
        if (bs.queued != 0)
            fail_msg("%s: %lld ticket(s) left queued", modes[m], (long long)bs.queued);
        loop_free(l);
        invfix_assert_sold(&f, sku, 50, 0);
        invfix_close(&f);
    }
}

/* Opens f (400 ms of work) and other on sku (stock 10, one segment, limit 1,
 * the layout known); a loop on f places one order, so that it has served a
 * hold before; then n orders are submitted and the loop runs until their
 * hold has the segment lock and works. */
static struct loop *start_slow_hold(struct invfix *f, struct invfix *other,
                                    const char *sku, int n)
{
    invfix_open_shared(f, "redis", 400000);
    invfix_open_shared(other, "redis", 0);
    inv_sku_put(other->s, sku, 10, 1, 1);
    learn_layout(f, sku);
    struct loop *l = loop_new(f, invfix_redis.port, 8);
    struct inv_ticket *early = loop_order(l, sku, "early", NULL);
    loop_settle(l, 5000);
    assert_int_equal(early->st, INV_PLACED);
    uint64_t held = lock_figures(l).acquisitions + 1;
    loop_orders(l, sku, "slow", n);
    if (!loop_run(l, granted, &held, 5000))
        fail_msg("the hold of %d orders did not get the lock of %s", n, sku);
    return l;
}

/* The lease runs out in the middle of a hold and another holder takes the
 * segment: the hold's commit is refused whole by the fencing token, every
 * order answers busy, nothing is written, and no commit is counted as made
 * after its lease was lost. */
static void test_lost_lease_refuses_the_hold_whole(void **state)
{
    (void)state;
    struct invfix f, other;
    struct loop *l = start_slow_hold(&f, &other, "fence", 3);
    invfix_take_over(&other, "fence", 0);
    loop_settle(l, 5000);
    expect_status(l, 1, 3, INV_BUSY);
    uint64_t one = 1; /* the hold's release, after its commit */
    assert_true(loop_run(l, released_not_held, &one, 5000));
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.fenced_off, 1);
    if (st.commits_after_lease != 0) /* a false alarm of the safety figure */
        fail_msg("a fenced-off commit counted as %llu placed after its lease",
                 (unsigned long long)st.commits_after_lease);
    loop_free(l);
    invfix_assert_sold(&f, "fence", 1, 9);
    invfix_close(&other);
    invfix_close(&f);
}

/* A reset in the middle of a hold: the hold writes nothing into the new
 * epoch; its orders look at the SKU anew on the loop, which places each in
 * the new epoch, and the new stock is whole. */
static void test_reset_during_a_hold_writes_nothing(void **state)
{
    (void)state;
    struct invfix f, other;
    struct loop *l = start_slow_hold(&f, &other, "reset", 3);
    assert_int_equal(inv_sku_put(other.s, "reset", 7, 1, 1), INV_OK);
    loop_settle(l, 5000);
    expect_status(l, 1, 3, INV_PLACED);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.epoch_changed, 1);
    loop_free(l);
    invfix_assert_sold(&f, "reset", 3, 4);
    invfix_close(&other);
    invfix_close(&f);
}

/* The connection to Redis is lost after a hold's commit went out: every order
 * of the hold answers outcome unknown, each id then tells that it was placed,
 * and the loop connects again for the next orders. Lost at the lock, before
 * any commit, they answer unavailable and nothing is placed. */
static void test_lost_connection_during_a_hold(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    inv_sku_put(f.s, "cut", 10, 1, 1);
    learn_layout(&f, "cut");
    struct test_proxy proxy;
    test_proxy_start(&proxy, invfix_redis.port, "order:");
    struct loop *l = loop_new(&f, proxy.port, 8);
    int first = loop_orders(l, "cut", "cut", 3);
    loop_settle(l, 5000);
    expect_status(l, first, 3, INV_OUTCOME_UNKNOWN);
    assert_true(orders_found(&(struct orders_of){l, first, 3}));
    /* the loop connects again once a retry is due: the next orders go through */
    loop_idle(l, 2 * ACONN_RETRY_MS);
    first = loop_orders(l, "cut", "again", 2);
    loop_settle(l, 5000);
    expect_status(l, first, 2, INV_PLACED);
    loop_free(l);
    test_proxy_stop(&proxy);
    invfix_assert_sold(&f, "cut", 5, 5);

    test_proxy_start(&proxy, invfix_redis.port, "sk:{cut}:lock:0");
    l = loop_new(&f, proxy.port, 8);
    first = loop_orders(l, "cut", "late", 3);
    loop_settle(l, 5000);
    expect_status(l, first, 3, INV_UNAVAILABLE);
    loop_free(l);
    test_proxy_stop(&proxy);
    invfix_assert_sold(&f, "cut", 5, 5);
    invfix_close(&f);
}

/* Redis stops answering while a hold works (the path to it frozen): its
 * orders are not left hanging but answer outcome unknown once the 1 s command
 * timeout has passed; the commit, delivered when the path thaws, placed each
 * of them, as their ids then tell. */
static void test_stalled_redis_answers_after_the_timeout(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 200000);
    inv_sku_put(f.s, "stall", 10, 1, 1);
    learn_layout(&f, "stall");
    struct test_proxy proxy;
    test_proxy_start(&proxy, invfix_redis.port, NULL);
    struct loop *l = loop_new(&f, proxy.port, 8);
    uint64_t held = lock_figures(l).acquisitions + 1;
    int first = loop_orders(l, "stall", "st", 3);
    assert_true(loop_run(l, granted, &held, 5000));
    kill(proxy.pid, SIGSTOP);
    loop_settle(l, 2500); /* the work, the timeout, and slack */
    kill(proxy.pid, SIGCONT);
    expect_status(l, first, 3, INV_OUTCOME_UNKNOWN);
    assert_true(test_wait_for(orders_found, &(struct orders_of){l, first, 3}, 5000));
    loop_free(l);
    test_proxy_stop(&proxy);
    invfix_assert_sold(&f, "stall", 3, 7);
    invfix_close(&f);
}

static void script_flush(struct invfix *f)
{
    redisReply *r = rconn_command(f->rc, "SCRIPT FLUSH");
    assert_true(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* Redis loses its script cache (SCRIPT FLUSH here; a restart or a failover
 * does the same) before a hold's lock try, then while a hold works (before
 * its commit and release): the orders are placed just the same, and at once,
 * not after the segment lock's 3 s lease has run out. */
static void test_lost_script_cache(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 100000);
    inv_sku_put(f.s, "flush", 10, 1, 1);
    learn_layout(&f, "flush");
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    script_flush(&f);
    int first = loop_orders(l, "flush", "a", 3);
    loop_settle(l, 1500);
    expect_status(l, first, 3, INV_PLACED);
    uint64_t held = lock_figures(l).acquisitions + 1;
    first = loop_orders(l, "flush", "b", 3);
    assert_true(loop_run(l, granted, &held, 5000));
    script_flush(&f);
    loop_settle(l, 1500);
    expect_status(l, first, 3, INV_PLACED);
    loop_free(l);
    invfix_assert_sold(&f, "flush", 6, 4);
    invfix_close(&f);
}

/* The loop's hold has joined the queue of the lock *key (a waiter's entry). */
static int queued(struct loop *l, const void *key)
{
    redisReply *r = rconn_command(l->f->rc, "LLEN %s:queue", (const char *)key);
    int yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
        freeReplyObject(r);
    return yes;
}

/* A segment whose lock another instance holds: the loop does not answer its
 * orders busy; its hold joins the lock's queue and waits, on a connection of
 * its own, and the release hands the lock straight to it (the wake-one
 * hand-off, without a thread waiting): every order is placed, and the grant
 * counts as contended. */
static void test_taken_lock_waits_for_the_handoff(void **state)
{
    (void)state;
    struct invfix f, other;
    invfix_open_shared(&f, "redis", 0);
    invfix_open_shared(&other, "redis", 0);
    inv_sku_put(f.s, "taken", 10, 1, 1);
    learn_layout(&f, "taken");
    struct lock_session *ls = lock_session_new(other.lock, other.rc);
    struct lock_grant g;
    assert_int_equal(lock_acquire(ls, "sk:{taken}:lock:0", 5000, &g), LOCK_ACQUIRED);
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    uint64_t taken = lock_figures(l).contended + 1;
    loop_orders(l, "taken", "t", 3);
    assert_true(loop_run(l, queued, "sk:{taken}:lock:0", 5000));
    loop_idle(l, 100);
    assert_int_equal(answered(l), 0); /* waiting, not refused */
    lock_release(ls, "sk:{taken}:lock:0", &g);
    lock_session_free(ls);
    loop_settle(l, 5000);
    expect_status(l, 0, 3, INV_PLACED);
    assert_true(contended(l, &taken));
    loop_free(l);
    invfix_assert_sold(&f, "taken", 3, 7);
    invfix_close(&other);
    invfix_close(&f);
}

/* An order that no single segment holds but the SKU does: the loop's hold
 * finds its segment short, and the loop places it on several segments at
 * once, in every lock-guarded mode with steps; the batch threads serve
 * nothing. */
static void test_order_of_several_segments(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "none", "local", "setnx", "redlock", "zk"};
    for (int m = 0; m < 6; m++) {
        char sku[16]; /* each mode its own: zk's tokens are not the others' */
        snprintf(sku, sizeof(sku), "wide-%s", modes[m]);
        struct invfix f;
        open_mode(&f, modes[m], 0);
        inv_sku_put(f.s, sku, 6, 3, 5); /* 2 + 2 + 2 */
        learn_layout(&f, sku);
        struct loop *l = loop_new(&f, invfix_redis.port, 8);
        struct inv_ticket *t = loop_order_qty(l, sku, "big", 4, NULL);
        loop_settle(l, 5000);
        if (t->st != INV_PLACED)
            fail_msg("%s: status %d", modes[m], t->st);
        if (t->order.nparts < 2)
            fail_msg("%s: 4 units of segments of 2 placed from %d segment(s)", modes[m],
                     t->order.nparts);
        int units = 0;
        for (int i = 0; i < t->order.nparts; i++)
            units += t->order.parts[i].qty;
        assert_int_equal(units, 4);
        loop_free(l);
        invfix_assert_sold(&f, sku, 4, 2);
        invfix_close(&f);
    }
}

#define WIDE 6

/* Orders of several segments contend with each other and with the loop's
 * group commits of the same segments (20 ms of work each): 12 units over 4
 * segments, six orders of 4 units and six of 1. Nothing is oversold, every
 * order answers placed or sold out, what is sold is what the answers placed,
 * and all of it is served on the loop. */
static void test_orders_of_several_segments_contend(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "local", "setnx", "redlock", "zk"};
    for (int m = 0; m < 5; m++) {
        char sku[16]; /* each mode its own: zk's tokens are not the others' */
        snprintf(sku, sizeof(sku), "wides-%s", modes[m]);
        struct invfix f;
        open_mode(&f, modes[m], 20000);
        inv_sku_put(f.s, sku, 12, 4, 4); /* 3 + 3 + 3 + 3 */
        learn_layout(&f, sku);
        struct loop *l = loop_new(&f, invfix_redis.port, 4);
        for (int i = 0; i < 2 * WIDE; i++) {
            char user[16];
            snprintf(user, sizeof(user), "w%d", i);
            loop_order_qty(l, sku, user, i % 2 ? 1 : 4, NULL);
        }
        loop_settle(l, 10000);
        long long units = 0;
        for (int i = 0; i < l->n; i++) {
            if (l->t[i].st == INV_PLACED)
                units += l->t[i].qty;
            else if (l->t[i].st != INV_SOLD_OUT)
                fail_msg("%s: order %d status %d after %lld ms", modes[m], i, l->t[i].st,
                         (long long)l->took_us[i] / 1000);
        }
        int64_t slowest = 0;
        for (int i = 0; i < l->n; i++)
            slowest = l->took_us[i] > slowest ? l->took_us[i] : slowest;
        print_message("%s: the slowest of %d orders answered in %lld ms\n", modes[m],
                      l->n, (long long)slowest / 1000);
        if (units > 12 || units < 9) /* sold out while 4 remain: stranded */
            fail_msg("%s: %lld units placed of 12", modes[m], units);
        loop_free(l);
        invfix_assert_sold(&f, sku, units, 12 - units);
        invfix_close(&f);
    }
}

/* While an order of two segments holds both locks and works (400 ms),
 * another holder takes its first segment over: its commit is refused by
 * that part's fence (not only the last one's), it answers busy, and
 * nothing is sold. */
static void test_order_of_several_segments_is_fenced(void **state)
{
    (void)state;
    struct invfix f, other;
    invfix_open_shared(&f, "redis", 400000);
    invfix_open_shared(&other, "redis", 0);
    inv_sku_put(other.s, "wfence", 6, 2, 5); /* 3 + 3 */
    learn_layout(&f, "wfence");
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    uint64_t held = lock_figures(l).acquisitions + 2;
    struct inv_ticket *t = loop_order_qty(l, "wfence", "big", 4, NULL);
    if (!loop_run(l, granted, &held, 5000))
        fail_msg("the order did not get both segment locks");
    invfix_take_over(&other, "wfence", 0);
    loop_settle(l, 5000);
    assert_int_equal(t->st, INV_BUSY);
    struct inv_stats st;
    inv_stats(f.inv, &st);
    assert_int_equal(st.fenced_off, 1);
    loop_free(l);
    invfix_assert_sold(&f, "wfence", 0, 6);
    invfix_close(&other);
    invfix_close(&f);
}

/* A repeat of a keyed order answers the first order (its id), on the loop,
 * in a lock-guarded mode and in the atomic one; a key reused by another user
 * is refused; nothing more is sold. */
static void test_replays_answered_on_the_loop(void **state)
{
    (void)state;
    const char *modes[] = {"redis", "atomic"};
    for (int m = 0; m < 2; m++) {
        struct invfix f;
        open_mode(&f, modes[m], 0);
        inv_sku_put(f.s, "again", 10, 2, 1);
        learn_layout(&f, "again");
        struct loop *l = loop_new(&f, invfix_redis.port, 8);
        struct inv_ticket *first = loop_order(l, "again", "ann", "k1");
        loop_settle(l, 5000);
        assert_int_equal(first->st, INV_PLACED);
        struct inv_ticket *replay = loop_order(l, "again", "ann", "k1");
        struct inv_ticket *reused = loop_order(l, "again", "bob", "k1");
        loop_settle(l, 5000);
        if (replay->st != INV_REPLAYED)
            fail_msg("%s: the replay's status %d", modes[m], replay->st);
        assert_true(replay->order.id == first->order.id);
        assert_string_equal(replay->order.user_id, "ann");
        assert_int_equal(reused->st, INV_IDEM_MISMATCH);
        loop_free(l);
        invfix_assert_sold(&f, "again", 1, 9);
        invfix_close(&f);
    }
}

/* The first orders of a SKU this process has not learnt are placed on the
 * loop (the first look teaches the layout), and so is a ticket that hopped
 * between segments as often as a ticket may: it is placed by itself on a
 * segment that holds its units. */
static void test_unknown_layout_and_hops_on_the_loop(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 0);
    inv_sku_put(f.s, "fresh", 10, 2, 1);
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    int first = loop_orders(l, "fresh", "n", 3);
    loop_settle(l, 5000);
    expect_status(l, first, 3, INV_PLACED);
    /* segment 0 emptied elsewhere; a ticket whose home it is has hopped 4 times */
    inv_sku_put(f.s, "hops", 4, 2, 1); /* 2 + 2 */
    learn_layout(&f, "hops");
    char a[16], b[16], c[16];
    invfix_user_with_home(0, 2, 0, a, sizeof(a));
    invfix_user_with_home(0, 2, 1, b, sizeof(b));
    invfix_user_with_home(0, 2, 2, c, sizeof(c));
    struct inv_order o;
    assert_int_equal(invfix_place(f.p, "hops", a, 1, NULL, &o), INV_PLACED);
    assert_int_equal(invfix_place(f.p, "hops", b, 1, NULL, &o), INV_PLACED);
    struct inv_ticket *t = &l->t[l->n++];
    assert_int_equal(inv_ticket_open(f.inv, t, "hops", c, 1, NULL), INV_PENDING);
    t->done = on_answer;
    t->owner = l;
    t->hops = 4;
    inv_engine_submit(l->engine, t);
    loop_settle(l, 5000);
    assert_int_equal(t->st, INV_PLACED);
    assert_int_equal(t->order.segment, 1);
    loop_free(l);
    invfix_assert_sold(&f, "fresh", 3, 7);
    invfix_assert_sold(&f, "hops", 3, 1);
    invfix_close(&f);
}

/* A loop that stops frees its engine: the orders of a hold still working
 * (1 s) and the one queued behind it are answered unavailable at once, and
 * nothing is sold. */
static void test_free_answers_orders_in_flight(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "redis", 1000000);
    inv_sku_put(f.s, "stop", 10, 1, 1);
    learn_layout(&f, "stop");
    struct loop *l = loop_new(&f, invfix_redis.port, 2);
    uint64_t held = lock_figures(l).acquisitions + 1;
    loop_orders(l, "stop", "s", 3); /* two in the hold, one queued */
    assert_true(loop_run(l, granted, &held, 5000));
    assert_int_equal(answered(l), 0);
    inv_engine_free(l->engine);
    l->engine = NULL;
    assert_int_equal(answered(l), 3);
    loop_settle(l, 0);
    expect_status(l, 0, 3, INV_UNAVAILABLE);
    loop_free(l);
    invfix_assert_sold(&f, "stop", 0, 10);
    invfix_close(&f);
}

/* ---- the atomic mode on the loop ------------------------------------------ */

/* One script per order, pipelined on the loop's connection: a replay among
 * them is answered with the first order, a second order
 * of the same user hits the limit, and every order gets its own answer, not
 * its neighbour's. */
static void test_atomic_keeps_each_answer(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "atomic", 0);
    inv_sku_put(f.s, "pipe", 10, 2, 1);
    struct inv_order first;
    assert_int_equal(invfix_place(f.p, "pipe", "ann", 1, "ka", &first), INV_PLACED);
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    const char *user[] = {"ann", "bob", "ann", "cid", "bob"};
    const char *key[] = {"ka", NULL, "ka", NULL, NULL};
    inv_status want[] = {INV_REPLAYED, INV_PLACED, INV_REPLAYED, INV_PLACED, INV_LIMIT};
    for (int i = 0; i < 5; i++)
        loop_order(l, "pipe", user[i], key[i]);
    loop_settle(l, 5000);
    for (int i = 0; i < 5; i++)
        expect_status(l, i, 1, want[i]);
    assert_true(l->t[0].order.id == first.id && l->t[2].order.id == first.id);
    for (int i = 1; i <= 3; i += 2) {
        struct inv_order back;
        assert_int_equal(inv_order_get(f.s, l->t[i].order.id, &back), INV_OK);
        assert_string_equal(back.user_id, user[i]);
    }
    loop_free(l);
    invfix_assert_sold(&f, "pipe", 3, 7);
    invfix_close(&f);
}

/* With Redis unreachable, atomic orders on the loop answer unavailable at
 * once, well within the 1 s command timeout: those that tried to connect, and
 * those refused before the next attempt is due. Nothing is sold. */
static void test_atomic_without_redis_answers_at_once(void **state)
{
    (void)state;
    struct invfix f;
    invfix_open_shared(&f, "atomic", 0);
    inv_sku_put(f.s, "down", 10, 1, 1);
    struct loop *l = loop_new(&f, test_free_port(), 8);
    loop_orders(l, "down", "d", 3);
    loop_settle(l, 300);
    loop_orders(l, "down", "e", 3); /* right after: no new attempt is due yet */
    loop_settle(l, 300);
    expect_status(l, 0, 6, INV_UNAVAILABLE);
    loop_free(l);
    invfix_assert_sold(&f, "down", 0, 10);
    invfix_close(&f);
}

/* A lock that polls (local, setnx, redlock), or zk's, which watches its
 * predecessor, held elsewhere: the loop's hold waits without blocking the
 * loop, answers nothing while it is held, and places its orders once it is
 * released, under a fencing token of its own (the segment's fence moved past
 * the other holder's); zk's wait ended by the watch, on the loop. */
static void test_polling_lock_waits_on_the_loop(void **state)
{
    (void)state;
    const char *modes[] = {"local", "setnx", "redlock", "zk"};
    for (int m = 0; m < 4; m++) {
        char sku[16], lkey[64], fkey[80];
        snprintf(sku, sizeof(sku), "poll-%s", modes[m]);
        snprintf(lkey, sizeof(lkey), "sk:{%s}:lock:0", sku);
        lock_fence_key(lkey, fkey, sizeof(fkey));
        struct invfix f;
        open_mode(&f, modes[m], 0);
        inv_sku_put(f.s, sku, 10, 1, 1);
        learn_layout(&f, sku);
        /* Another holder: another session of this process (local), or of
         * another instance (the Redis modes: the same lock, another session). */
        struct lock_session *other = lock_session_new(f.lock, f.rc);
        struct lock_grant g;
        assert_int_equal(lock_acquire(other, lkey, 2000, &g), LOCK_ACQUIRED);
        struct loop *l = loop_new(&f, invfix_redis.port, 8);
        uint64_t was = lock_figures(l).contended + 1;
        loop_orders(l, sku, "p", 3);
        loop_idle(l, 200); /* what must not happen: an answer while it is held */
        assert_int_equal(answered(l), 0);
        assert_int_equal(lock_release(other, lkey, &g), LOCK_RELEASED);
        loop_settle(l, 3000);
        expect_status(l, 0, 3, INV_PLACED);
        if (lock_figures(l).contended < was) /* counted once the grant came */
            fail_msg("%s: the loop's hold never found the lock taken", modes[m]);
        if (strcmp(modes[m], "zk") == 0 && lock_figures(l).watch_wakeups < 1)
            fail_msg("zk: the loop's hold was not woken by its predecessor's watch");
        if (lock_fenced(f.lock)) {
            redisReply *r = rconn_command(f.rc, "GET %s", fkey);
            assert_non_null(r);
            if (!r->str || atoll(r->str) <= (long long)g.fence)
                fail_msg("%s: fence %s after the other's %llu", modes[m],
                         r->str ? r->str : "(nil)", (unsigned long long)g.fence);
            freeReplyObject(r);
        }
        loop_free(l);
        lock_session_free(other);
        invfix_assert_sold(&f, sku, 3, 7);
        invfix_close(&f);
    }
}

/* Redlock on the loop with one of its three nodes frozen (SIGSTOP: the
 * kernel still accepts connections, nothing answers) and another refusing
 * at first (another owner holds the locks of two SKUs there for 1.5 s):
 * two holds' attempts get one grant of three, are undone on every node,
 * the frozen one included, and retried; once the other owner's keys expire
 * the two live nodes grant, and every order is placed. Nothing waits on the
 * frozen node past its command timeout: a hold whose undo went to it on a
 * fresh connection while the old one was being dropped must still get its
 * answer (none) and go on. */
static void test_redlock_with_a_frozen_node(void **state)
{
    (void)state;
    const char *skus[] = {"frozen-a", "frozen-b"}; /* two holds at once */
    struct invfix f;
    open_mode(&f, "redlock", 0);
    for (int k = 0; k < 2; k++) {
        inv_sku_put(f.s, skus[k], 10, 1, 1);
        learn_layout(&f, skus[k]);
        struct rconn *c = rconn_new("127.0.0.1", node[0].port, NULL, 1000);
        redisReply *r =
            rconn_command(c, "SET sk:{%s}:lock:0 other-owner PX 1500", skus[k]);
        assert_non_null(r);
        freeReplyObject(r);
        rconn_free(c);
    }
    struct loop *l = loop_new(&f, invfix_redis.port, 8);
    kill(node[2].pid, SIGSTOP);
    char user[16];
    for (int i = 0; i < 8; i++) {
        snprintf(user, sizeof(user), "f%d", i);
        loop_order(l, skus[i % 2], user, NULL);
    }
    int answered_all = loop_run(l, all_answered, NULL, 8000);
    kill(node[2].pid, SIGCONT); /* before any assertion: the other tests need it */
    if (!answered_all)
        fail_msg("%d of 8 orders answered in 8 s with a node frozen", answered(l));
    loop_settle(l, 1000);
    expect_status(l, 0, 8, INV_PLACED);
    loop_free(l);
    for (int k = 0; k < 2; k++)
        invfix_assert_sold(&f, skus[k], 4, 6);
    invfix_close(&f);
}

static int setup(void **state)
{
    invfix_setup(state);
    for (int i = 0; i < NODES; i++) {
        test_redis_start(&node[i], NULL);
        snprintf(node_addr[i].host, sizeof(node_addr[i].host), "127.0.0.1");
        node_addr[i].port = node[i].port;
    }
    test_zk_start(&zk);
    snprintf(zk_hosts, sizeof(zk_hosts), "127.0.0.1:%d", zk.port);
    invfix_zk_hosts = zk_hosts;
    return 0;
}

static int teardown(void **state)
{
    invfix_teardown(state);
    for (int i = 0; i < NODES; i++)
        test_redis_stop(&node[i], 0, 0);
    test_zk_stop(&zk, 1, 0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hold_mixes_outcomes),
        cmocka_unit_test(test_hold_sees_its_own_orders),
        cmocka_unit_test(test_hold_finds_an_id_issued_twice),
        cmocka_unit_test(test_orders_during_a_hold_form_the_next),
        cmocka_unit_test(test_lost_lease_refuses_the_hold_whole),
        cmocka_unit_test(test_reset_during_a_hold_writes_nothing),
        cmocka_unit_test(test_lost_connection_during_a_hold),
        cmocka_unit_test(test_stalled_redis_answers_after_the_timeout),
        cmocka_unit_test(test_lost_script_cache),
        cmocka_unit_test(test_taken_lock_waits_for_the_handoff),
        cmocka_unit_test(test_polling_lock_waits_on_the_loop),
        cmocka_unit_test(test_redlock_with_a_frozen_node),
        cmocka_unit_test(test_order_of_several_segments),
        cmocka_unit_test(test_orders_of_several_segments_contend),
        cmocka_unit_test(test_order_of_several_segments_is_fenced),
        cmocka_unit_test(test_replays_answered_on_the_loop),
        cmocka_unit_test(test_unknown_layout_and_hops_on_the_loop),
        cmocka_unit_test(test_free_answers_orders_in_flight),
        cmocka_unit_test(test_atomic_keeps_each_answer),
        cmocka_unit_test(test_atomic_without_redis_answers_at_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
