#include "invfix.h"

#include "engine.h"

#include <event2/event.h>
#include <event2/thread.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most orders one lock hold of a fixture's placer serves (the server's default). */
#define INVFIX_BATCH 32

struct test_redis invfix_redis;
struct orderid_gen invfix_ids;
const char *invfix_zk_hosts;

int invfix_setup(void **state)
{
    (void)state;
    test_redis_start(&invfix_redis, NULL);
    orderid_init(&invfix_ids, 7, NULL, 0);
    return 0;
}

int invfix_teardown(void **state)
{
    (void)state;
    test_redis_stop(&invfix_redis, 0, 0);
    return 0;
}

void invfix_open(struct invfix *f, const char *mode, int work_us, int port,
                 struct orderid_gen *ids)
{
    invfix_open_nodes(f, mode, work_us, port, ids, NULL, 0);
}

void invfix_open_shared(struct invfix *f, const char *mode, int work_us)
{
    invfix_open(f, mode, work_us, invfix_redis.port, &invfix_ids);
}

void invfix_open_nodes(struct invfix *f, const char *mode, int work_us, int port,
                       struct orderid_gen *ids, const struct rconn_addr *nodes,
                       int nnodes)
{
    memset(f, 0, sizeof(*f));
    struct lock_config lc = {.ttl_ms = 3000,
                             .fencing = 1,
                             .timeout_ms = 1000,
                             .nodes = nodes,
                             .nnodes = nnodes,
                             .zk_hosts = invfix_zk_hosts,
                             .zk_session_ms = 3000};
    char err[200];
    if (strcmp(mode, "atomic") != 0) {
        f->lock = lock_new(mode, &lc, err, sizeof(err));
        assert_non_null(f->lock);
        test_lock_attach(f->lock);
    }
    struct inv_config ic = {
        .lock = f->lock, .wait_ms = 5000, .work_us = work_us, .fencing = 1, .ids = ids};
    f->inv = inv_new(&ic);
    f->rc = rconn_new("127.0.0.1", port, NULL, 2000);
    f->s = inv_session_new(f->inv, f->rc);
    f->p = invfix_placer_new(f->inv, port, INVFIX_BATCH, INVFIX_TIMEOUT_MS);
}

void invfix_close(struct invfix *f)
{
    invfix_placer_free(f->p);
    inv_session_free(f->s);
    rconn_free(f->rc);
    inv_free(f->inv);
    test_lock_free(f->lock);
}

void invfix_user_with_home(int home, int k, int nth, char *out, size_t len)
{
    for (int i = 0, found = 0;; i++) {
        snprintf(out, len, "u%d", i);
        if (seg_home(out, k) == home && found++ == nth)
            return;
    }
}

void invfix_assert_sold(struct invfix *f, const char *sku, long long sold,
                        long long remaining)
{
    struct inv_sku_report *r = malloc(sizeof(*r));
    assert_non_null(r);
    assert_int_equal(inv_sku_get(f->s, sku, r), INV_OK);
    assert_int_equal(r->sold, sold);
    assert_int_equal(r->remaining, remaining);
    free(r);
    struct inv_audit a;
    assert_int_equal(inv_audit(f->s, sku, &a), INV_OK);
    assert_int_equal(a.sold, sold);
    assert_int_equal(a.remaining, remaining);
    assert_true(a.consistent);
}

#define INVFIX_LOCKED_MAX 4

struct locked_arg {
    struct rconn *rc;
    int n;
    const char *argv[1 + INVFIX_LOCKED_MAX];
};

static int all_locked(void *arg)
{
    struct locked_arg *a = arg;
    redisReply *r = rconn_command_argv(a->rc, 1 + a->n, a->argv, NULL);
    int yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == a->n;
    if (r)
        freeReplyObject(r);
    return yes;
}

int invfix_wait_locked(struct rconn *rc, const char *const *skus, int n, int timeout_ms)
{
    assert_true(n >= 1 && n <= INVFIX_LOCKED_MAX);
    char keys[INVFIX_LOCKED_MAX][80];
    struct locked_arg a = {.rc = rc, .n = n, .argv = {"EXISTS"}};
    for (int i = 0; i < n; i++) {
        snprintf(keys[i], sizeof(keys[i]), "sk:{%s}:lock:0", skus[i]);
        a.argv[1 + i] = keys[i];
    }
    return test_wait_for(all_locked, &a, timeout_ms);
}

void invfix_take_over(struct invfix *f, const char *sku, int seg)
{
    char key[80];
    snprintf(key, sizeof(key), "sk:{%s}:lock:%d", sku, seg);
    redisReply *r = rconn_command(f->rc, "DEL %s", key); /* the lease is gone */
    assert_true(r && r->integer == 1);
    freeReplyObject(r);
    struct lock_session *ls = lock_session_new(f->lock, f->rc);
    struct lock_grant g;
    assert_int_equal(lock_acquire(ls, key, 5000, &g), LOCK_ACQUIRED);
    lock_release(ls, key, &g);
    lock_session_free(ls);
}

void invfix_on_done(struct inv_ticket *t)
{
    struct invfix_waiter *w = t->owner;
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void invfix_wait_done(struct invfix_waiter *w, int n)
{
    pthread_mutex_lock(&w->mu);
    while (w->done < n)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void invfix_ticket(struct inv *inv, struct inv_ticket *t, const char *sku,
                   const char *user, int qty, struct invfix_waiter *w)
{
    assert_int_equal(inv_ticket_open(inv, t, sku, user, qty, NULL), INV_PENDING);
    t->done = invfix_on_done;
    t->owner = w;
}

void invfix_tickets(struct inv *inv, struct inv_ticket *t, int n, const char *sku,
                    const char *prefix, struct invfix_waiter *w)
{
    for (int i = 0; i < n; i++) {
        char user[32];
        snprintf(user, sizeof(user), "%s%d", prefix, i);
        invfix_ticket(inv, &t[i], sku, user, 1, w);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

static int answered(struct invfix_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    int done = w->done;
    pthread_mutex_unlock(&w->mu);
    return done;
}

struct invfix_placer {
    struct event_base *base;
    struct event *tick; /* ends each turn soon: a zk step ends on the zk loop's thread */
    struct inv_engine *engine;
    struct inv *inv;
};

struct invfix_placer *invfix_placer_new(struct inv *inv, int port, int batch,
                                        int timeout_ms)
{
    evthread_use_pthreads();
    struct invfix_placer *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->inv = inv;
    p->base = event_base_new();
    assert_non_null(p->base);
    p->tick = event_new(p->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval every = {.tv_usec = 2000};
    assert_int_equal(event_add(p->tick, &every), 0);
    struct inv_engine_config ec = {
        .redis_host = "127.0.0.1",
        .redis_port = port,
        .timeout_ms = timeout_ms,
        .batch = batch,
        .wait_ms =
            20000}; /* a blocking wait's answer: the longest wait_ms of a fixture */
    p->engine = inv_engine_new(inv, p->base, &ec);
    return p;
}

void invfix_placer_free(struct invfix_placer *p)
{
    if (!p)
        return;
    inv_engine_free(p->engine);
    event_free(p->tick);
    event_base_free(p->base);
    free(p);
}

/* Drives p's loop until w counted n answers. */
static void placer_run(struct invfix_placer *p, struct invfix_waiter *w, int n)
{
    while (answered(w) < n)
        event_base_loop(p->base, EVLOOP_ONCE);
}

inv_status invfix_place(struct invfix_placer *p, const char *sku, const char *user,
                        int qty, const char *key, struct inv_order *o)
{
    struct invfix_waiter w = INVFIX_WAITER_INIT;
    struct inv_ticket *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    inv_status st = inv_ticket_open(p->inv, t, sku, user, qty, key);
    if (st == INV_PENDING) {
        t->done = invfix_on_done;
        t->owner = &w;
        inv_engine_submit(p->engine, t);
        placer_run(p, &w, 1);
        st = t->st;
    }
    if (o)
        *o = t->order;
    free(t);
    return st;
}

void invfix_serve(struct inv *inv, struct inv_ticket *t, int n, int batch,
                  struct invfix_waiter *w)
{
    struct invfix_placer *p =
        invfix_placer_new(inv, invfix_redis.port, batch, INVFIX_TIMEOUT_MS);
    for (int i = 0; i < n; i++)
        inv_engine_submit(p->engine, &t[i]);
    placer_run(p, w, n);
    invfix_placer_free(p);
}

int invfix_count(const struct inv_ticket *t, int n, inv_status st)
{
    int count = 0;
    for (int i = 0; i < n; i++)
        count += t[i].st == st;
    return count;
}
