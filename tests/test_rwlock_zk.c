/* test_rwlock_zk: the read-write lock of the zk mode (lock.h "the read-write
 * lock", Curator's InterProcessReadWriteLock in lock/zk_steps.c) against a
 * real ZooKeeper server (one per binary) and, for the fencing token's check,
 * a real redis-server running the commit's own fence piece
 * (inventory/lua/fence.lua): readers share, a writer excludes both sides, a
 * waiting writer keeps new readers out (and they get in after it),
 * reentrancy, a holder whose session expires frees its side, and a stale
 * writer is fenced off by the next writer's czxid.
 *
 * Each struct lock is its own ZooKeeper session, as a process is; sessions
 * of one lock contend as separate threads of that process do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "lock.h"
#include "testutil.h"

#define SESSION_MS 3000
/* The wait of an acquire expected at once (granted, or busy): a free key is
 * granted at once whatever the wait; a taken one is busy once its list found
 * it taken. A wait of 0 still gets 200 ms for its round trips (zk_steps.c's
 * floor), which a JVM on a busy 2-core machine can eat (an error, not busy):
 * 500 ms is the slack. */
#define TRY_MS 500

static struct test_zk zk;
static struct test_redis srv;
static struct rconn *data; /* the data Redis, where commits check the fence */
static char hosts[64];

static int group_setup(void **state)
{
    (void)state;
    evthread_use_pthreads(); /* the steps' bases are woken from the zk loop */
    test_zk_start(&zk);
    snprintf(hosts, sizeof(hosts), "127.0.0.1:%d", zk.port);
    test_redis_start(&srv, NULL);
    data = rconn_new("127.0.0.1", srv.port, NULL, 2000);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rconn_free(data);
    test_redis_stop(&srv, 1, 0);
    test_zk_stop(&zk, 1, 0);
    return 0;
}

/* A zk lock (one ZooKeeper session) on ensemble. */
static struct lock *zk_lock(const char *ensemble, int session_ms)
{
    struct lock_config cfg = {
        .ttl_ms = 3000, .fencing = 1, .zk_hosts = ensemble, .zk_session_ms = session_ms};
    char err[256] = "";
    struct lock *l = lock_new("zk", &cfg, err, sizeof(err));
    if (!l)
        fail_msg("lock_new(zk, %s): %s", ensemble, err);
    /* Its session connects in the background: a first acquire of a key
     * nobody takes, waiting up to 20 s (a busy machine's JVM), returns once
     * it is there, so that the test's own acquires find it connected. */
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant g;
    if (lock_rw_acquire(s, "rw:connected", LOCK_READ, 20000, &g) != LOCK_ACQUIRED)
        fail_msg("zk (%s): no session within 20 s", ensemble);
    lock_release(s, "rw:connected", &g);
    lock_session_free(s);
    return l;
}

static void expect(lock_status got, lock_status want, const char *what)
{
    if (got != want)
        fail_msg("%s: status %d, expected %d", what, got, want);
}

static uint64_t asleep(struct lock *l)
{
    struct lock_stats st;
    lock_stats(l, &st);
    return st.watch_waiters;
}

struct asleep_arg {
    struct lock *l;
    uint64_t want;
};

static int asleep_is(void *arg)
{
    struct asleep_arg *a = arg;
    return asleep(a->l) == a->want;
}

/* Waits until want waiters of l sleep on a watch (their nodes made, their
 * predecessors watched). */
static void wait_asleep(struct lock *l, uint64_t want)
{
    struct asleep_arg a = {l, want};
    if (!test_wait_for(asleep_is, &a, 20000))
        fail_msg("%llu waiters asleep, expected %llu", (unsigned long long)asleep(l),
                 (unsigned long long)want);
}

/* ---- an acquire on its own thread, blocking or by steps ---------------------- */

struct contender {
    struct lock_session *s;
    const char *key;
    lock_side side;
    int wait_ms, steps;
    pthread_t thread;
    atomic_int done;
    lock_status res;
    struct lock_grant g;
    int64_t acquired_us;
};

static void on_step_over(void *arg)
{
    *(int *)arg = 1;
}

/* As an event loop acquires: lock_rw_try_step, the step done on the zk loop,
 * its base driven until it is over. */
static lock_status acquire_by_steps(struct lock_session *s, const char *key,
                                    lock_side side, int wait_ms, struct lock_grant *g)
{
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct lock_step st;
    lock_step_init(&st);
    assert_int_equal(lock_rw_try_step(s, key, side, wait_ms, &st), 1);
    if (st.async) {
        int over = 0;
        lock_step_start(s, key, &st, base, on_step_over, &over);
        while (!over)
            event_base_loop(base, EVLOOP_ONCE);
    }
    lock_status res = lock_try_done(s, key, &st, g);
    event_base_free(base);
    return res;
}

static void *contender_main(void *arg)
{
    struct contender *c = arg;
    c->res = c->steps ? acquire_by_steps(c->s, c->key, c->side, c->wait_ms, &c->g)
                      : lock_rw_acquire(c->s, c->key, c->side, c->wait_ms, &c->g);
    c->acquired_us = clock_now_us();
    atomic_store(&c->done, 1);
    return NULL;
}

static void contender_start(struct contender *c, struct lock_session *s, const char *key,
                            lock_side side, int wait_ms, int steps)
{
    memset(c, 0, sizeof(*c));
    c->s = s;
    c->key = key;
    c->side = side;
    c->wait_ms = wait_ms;
    c->steps = steps;
    assert_int_equal(pthread_create(&c->thread, NULL, contender_main, c), 0);
}

/* ---- sharing and exclusion ----------------------------------------------- */

/* Readers of two processes (two ZooKeeper sessions) hold at once; a writer
 * gets in once both are gone. */
static void test_readers_share(void **state)
{
    (void)state;
    const char *key = "rw:share";
    struct lock *la = zk_lock(hosts, SESSION_MS), *lb = zk_lock(hosts, SESSION_MS);
    struct lock_session *a = lock_session_new(la, NULL), *b = lock_session_new(lb, NULL),
                        *w = lock_session_new(lb, NULL);
    assert_true(lock_rw_supported(la));
    struct lock_grant ra, rb, g;
    expect(lock_rw_acquire(a, key, LOCK_READ, TRY_MS, &ra), LOCK_ACQUIRED,
           "first reader");
    expect(lock_rw_acquire(b, key, LOCK_READ, TRY_MS, &rb), LOCK_ACQUIRED,
           "second reader while the first reads");
    assert_int_equal(ra.fence, 0); /* a reader writes nothing: no token */
    expect(lock_rw_acquire(w, key, LOCK_WRITE, TRY_MS, &g), LOCK_BUSY,
           "a writer while two read");
    expect(lock_release(a, key, &ra), LOCK_RELEASED, "first reader's release");
    expect(lock_rw_acquire(w, key, LOCK_WRITE, TRY_MS, &g), LOCK_BUSY,
           "a writer while one reads");
    expect(lock_release(b, key, &rb), LOCK_RELEASED, "second reader's release");
    expect(lock_rw_acquire(w, key, LOCK_WRITE, TRY_MS, &g), LOCK_ACQUIRED,
           "a writer once both are gone");
    assert_true(g.fence > 0);
    expect(lock_release(w, key, &g), LOCK_RELEASED, "its release");
    lock_session_free(a);
    lock_session_free(b);
    lock_session_free(w);
    lock_free(la);
    lock_free(lb);
}

static void test_writer_excludes_both(void **state)
{
    (void)state;
    const char *key = "rw:excl";
    struct lock *la = zk_lock(hosts, SESSION_MS), *lb = zk_lock(hosts, SESSION_MS);
    struct lock_session *a = lock_session_new(la, NULL), *b = lock_session_new(lb, NULL);
    struct lock_grant w, g;
    expect(lock_rw_acquire(a, key, LOCK_WRITE, TRY_MS, &w), LOCK_ACQUIRED, "writer");
    expect(lock_rw_acquire(b, key, LOCK_READ, TRY_MS, &g), LOCK_BUSY,
           "a reader while another writes");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, TRY_MS, &g), LOCK_BUSY,
           "a writer while another writes");
    expect(acquire_by_steps(b, key, LOCK_READ, TRY_MS, &g), LOCK_BUSY,
           "a reader by steps while another writes");
    expect(lock_release(a, key, &w), LOCK_RELEASED, "writer's release");
    expect(lock_rw_acquire(a, key, LOCK_READ, TRY_MS, &g), LOCK_ACQUIRED, "reader");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, TRY_MS, &w), LOCK_BUSY,
           "a writer while another reads");
    expect(lock_release(a, key, &g), LOCK_RELEASED, "reader's release");
    expect(acquire_by_steps(b, key, LOCK_WRITE, TRY_MS, &w), LOCK_ACQUIRED,
           "a writer by steps once the reader is gone");
    expect(lock_release(b, key, &w), LOCK_RELEASED, "its release");
    lock_session_free(a);
    lock_session_free(b);
    lock_free(la);
    lock_free(lb);
}

/* Threads of two processes at once, readers and writers: a writer is never
 * inside with anyone else. */
struct mixed {
    struct lock *lock[2];
    const char *key;
    atomic_int next;
    struct rw_tally t;
};

static void *mixed_worker(void *arg)
{
    struct mixed *m = arg;
    int me = atomic_fetch_add(&m->next, 1);
    struct lock_session *s = lock_session_new(m->lock[me % 2], NULL);
    unsigned int seed = (unsigned int)me * 7919u + 1u;
    for (int i = 0; i < 25; i++) {
        lock_side side = rand_r(&seed) % 4 == 0 ? LOCK_WRITE : LOCK_READ;
        rw_tally_round(s, m->key, side, 20000, &m->t);
    }
    lock_session_free(s);
    return NULL;
}

static void test_mixed_load_never_overlaps(void **state)
{
    (void)state;
    struct mixed m = {.key = "rw:mixed"};
    m.lock[0] = zk_lock(hosts, SESSION_MS);
    m.lock[1] = zk_lock(hosts, SESSION_MS);
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&t[i], NULL, mixed_worker, &m);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    printf("mixed: %d overlaps, %d failures, %d reads shared\n", m.t.overlaps,
           m.t.failures, m.t.shared);
    assert_int_equal(m.t.overlaps, 0);
    assert_int_equal(m.t.failures, 0);
    lock_free(m.lock[0]);
    lock_free(m.lock[1]);
}

/* ---- writer preference ----------------------------------------------------- */

/* A writer waiting for a reader keeps new readers out: one that will not wait
 * is busy, one that waits (by steps, as a loop does) sleeps on the writer's
 * node and gets in only after the writer's release, though the reader it
 * would have shared with was still there when it came. */
static void test_waiting_writer_keeps_new_readers_out(void **state)
{
    (void)state;
    const char *key = "rw:pref";
    struct lock *lr = zk_lock(hosts, SESSION_MS), *lw = zk_lock(hosts, SESSION_MS),
                *ln = zk_lock(hosts, SESSION_MS);
    struct lock_session *r = lock_session_new(lr, NULL), *w = lock_session_new(lw, NULL),
                        *n = lock_session_new(ln, NULL), *n2 = lock_session_new(ln, NULL);
    struct lock_grant r1, g;
    expect(lock_rw_acquire(r, key, LOCK_READ, TRY_MS, &r1), LOCK_ACQUIRED, "reader");
    struct contender cw, cn;
    contender_start(&cw, w, key, LOCK_WRITE, 20000, 0);
    wait_asleep(lw, 1); /* the writer's node made, the reader's watched */
    expect(lock_rw_acquire(n2, key, LOCK_READ, TRY_MS, &g), LOCK_BUSY,
           "a new reader that will not wait, while a writer waits");
    contender_start(&cn, n, key, LOCK_READ, 20000, 1);
    wait_asleep(ln, 1); /* asleep on the writer's node */
    int64_t released_us = clock_now_us();
    expect(lock_release(r, key, &r1), LOCK_RELEASED, "the first reader's release");
    pthread_join(cw.thread, NULL);
    expect(cw.res, LOCK_ACQUIRED, "the waiting writer");
    /* Slack: one watch and one list away; 2 s for a busy machine. */
    assert_true(cw.acquired_us - released_us < 2000000);
    assert_false(atomic_load(&cn.done)); /* the new reader still waits: for the writer */
    int64_t write_released_us = clock_now_us();
    expect(lock_release(w, key, &cw.g), LOCK_RELEASED, "the writer's release");
    pthread_join(cn.thread, NULL);
    expect(cn.res, LOCK_ACQUIRED, "the new reader, after the writer");
    assert_true(cn.acquired_us >= write_released_us);
    expect(lock_release(n, key, &cn.g), LOCK_RELEASED, "its release");
    lock_session_free(r);
    lock_session_free(w);
    lock_session_free(n);
    lock_session_free(n2);
    lock_free(lr);
    lock_free(lw);
    lock_free(ln);
}

/* ---- reentrancy ------------------------------------------------------------ */

static void test_reentrant(void **state)
{
    (void)state;
    const char *key = "rw:reenter";
    struct lock *la = zk_lock(hosts, SESSION_MS), *lb = zk_lock(hosts, SESSION_MS);
    struct lock_session *a = lock_session_new(la, NULL), *b = lock_session_new(lb, NULL);
    struct lock_grant r1, r2, w1, w2, wr, g;
    /* a reader twice */
    expect(lock_rw_acquire(a, key, LOCK_READ, TRY_MS, &r1), LOCK_ACQUIRED, "read");
    expect(lock_rw_acquire(a, key, LOCK_READ, TRY_MS, &r2), LOCK_ACQUIRED, "read again");
    expect(lock_release(a, key, &r2), LOCK_RELEASED, "one read released");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, TRY_MS, &g), LOCK_BUSY,
           "a writer while one read is left");
    expect(lock_release(a, key, &r1), LOCK_RELEASED, "the last read");
    /* a writer twice (a second node would wait for the first), and reading
     * too (a read node after its write node would wait for it) */
    expect(lock_rw_acquire(a, key, LOCK_WRITE, TRY_MS, &w1), LOCK_ACQUIRED, "write");
    expect(lock_rw_acquire(a, key, LOCK_WRITE, TRY_MS, &w2), LOCK_ACQUIRED,
           "write again");
    assert_int_equal(w2.fence, w1.fence); /* the same node, the same token */
    expect(lock_rw_acquire(a, key, LOCK_READ, TRY_MS, &wr), LOCK_ACQUIRED,
           "the writer reads");
    assert_int_equal(wr.fence, 0);
    expect(lock_release(a, key, &w2), LOCK_RELEASED, "one write released");
    expect(lock_rw_acquire(b, key, LOCK_READ, TRY_MS, &g), LOCK_BUSY,
           "a reader while one write is left");
    expect(lock_release(a, key, &w1), LOCK_RELEASED, "the last write");
    /* no downgrade: the writer's read keeps its write node */
    expect(lock_rw_acquire(b, key, LOCK_READ, TRY_MS, &g), LOCK_BUSY,
           "a reader while the former writer reads");
    expect(lock_release(a, key, &wr), LOCK_RELEASED, "the former writer's read");
    expect(lock_release(a, key, &wr), LOCK_NOT_HELD, "a release too many");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, TRY_MS, &g), LOCK_ACQUIRED,
           "a writer once all is released");
    assert_true(g.fence > w1.fence);
    expect(lock_release(b, key, &g), LOCK_RELEASED, "its release");
    lock_session_free(a);
    lock_session_free(b);
    lock_free(la);
    lock_free(lb);
}

/* ---- sessions that expire, and the writer's token ------------------------------ */

/* The commit of a writer holding g, checked as the order path's commit does
 * (inventory/lua/fence.lua's fenced(): the holder's token takes the mark
 * unless a later one of its namespace took it): 1 let through, 0 refused. */
extern const struct rscript_source lua_inventory_fence;

static long long fenced_commit(const char *key, const struct lock_grant *g)
{
    char fence[LOCK_FENCE_TEXT], fkey[600], script[16384];
    lock_fence_text(g, fence, sizeof(fence));
    lock_fence_key(key, fkey, sizeof(fkey));
    snprintf(script, sizeof(script),
             "%s\nif fenced(KEYS[1], ARGV[1]) then return 0 end\n"
             "redis.call('INCR', KEYS[2])\nreturn 1\n",
             lua_inventory_fence.text);
    redisReply *r =
        rconn_command(data, "EVAL %s 2 %s %s:data %s", script, fkey, key, fence);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("script: %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

struct valid_arg {
    struct lock_session *s;
    const struct lock_grant *g;
};

static int validity_zero(void *arg)
{
    struct valid_arg *a = arg;
    return lock_valid_until_us(a->s, a->g) == 0;
}

/* A holder of dead_side whose process is cut off from ZooKeeper (its proxy
 * frozen) past its 1 s session: the server expires the session, its node
 * goes, and a holder of next_side of another process gets in (not before
 * the session could have expired). Once the first hears of the expiry its
 * grant is worth 0 and its release is NOT_HELD. With dead_side the write,
 * the dead writer's commit after the next writer's is refused by the next
 * one's token. */
static void session_expires(const char *key, lock_side dead_side, lock_side next_side)
{
    const int session_ms = 1000;
    struct test_proxy proxy;
    test_proxy_start_bytes(&proxy, zk.port, NULL);
    char via[64];
    snprintf(via, sizeof(via), "127.0.0.1:%d", proxy.port);
    struct lock *ld = zk_lock(via, session_ms), *ln = zk_lock(hosts, SESSION_MS);
    struct lock_session *d = lock_session_new(ld, NULL), *n = lock_session_new(ln, NULL);
    redisReply *del = rconn_command(data, "DEL %s:fence %s:data", key, key);
    assert_non_null(del);
    freeReplyObject(del);
    struct lock_grant gd, gn;
    expect(lock_rw_acquire(d, key, dead_side, 5000, &gd), LOCK_ACQUIRED,
           "the one to die");
    if (dead_side == LOCK_WRITE)
        assert_int_equal(fenced_commit(key, &gd), 1);
    int64_t cut_us = clock_now_us();
    kill(proxy.pid, SIGSTOP);
    expect(lock_rw_acquire(n, key, next_side, 20000, &gn), LOCK_ACQUIRED,
           "the next once the session expired");
    /* The server expires a session no sooner than its timeout after the last
     * it heard (at the cut or before it; 100 ms of slack for a tick). */
    assert_true(clock_now_us() - cut_us > (session_ms - 100) * 1000);
    int fencing = dead_side == LOCK_WRITE && next_side == LOCK_WRITE;
    if (fencing) {
        assert_true(gn.fence > gd.fence);
        assert_int_equal(fenced_commit(key, &gn), 1);
        assert_int_equal(fenced_commit(key, &gd), 0); /* the stale writer: refused */
    }
    kill(proxy.pid, SIGCONT);
    struct valid_arg va = {d, &gd};
    assert_true(test_wait_for(validity_zero, &va, 20000));
    expect(lock_release(d, key, &gd), LOCK_NOT_HELD, "the expired holder's release");
    expect(lock_release(n, key, &gn), LOCK_RELEASED, "the next one's release");
    if (fencing)
        assert_int_equal(fenced_commit(key, &gd), 0); /* still refused */
    lock_session_free(d);
    lock_session_free(n);
    lock_free(ld);
    lock_free(ln);
    test_proxy_stop(&proxy);
}

static void test_expired_reader_frees_the_writer(void **state)
{
    (void)state;
    session_expires("rw:dead-reader", LOCK_READ, LOCK_WRITE);
}

static void test_expired_writer_is_fenced(void **state)
{
    (void)state;
    session_expires("rw:dead-writer", LOCK_WRITE, LOCK_WRITE);
}

static void test_expired_writer_frees_the_reader(void **state)
{
    (void)state;
    session_expires("rw:dead-writer2", LOCK_WRITE, LOCK_READ);
}

/* ---- segment locks as readers (lock_step_read_of, lock_rw_write_over) ---- */

/* A SKU's locks as inventory/hold.c names them: its segments' plain locks
 * "<prefix><i>" and its read-write lock "<prefix>rw". Each test its own SKU. */
struct sku {
    char prefix[32], rw[40], seg[5][40];
};

static void sku_init(struct sku *k, const char *name)
{
    snprintf(k->prefix, sizeof(k->prefix), "{%s}:lock:", name);
    snprintf(k->rw, sizeof(k->rw), "%srw", k->prefix);
    for (int i = 0; i < 5; i++)
        snprintf(k->seg[i], sizeof(k->seg[i]), "%s%d", k->prefix, i);
}

struct probe {
    struct lock_session *s;
    const struct sku *k;
};

/* True once a new reader of the SKU is refused: a writer's node is there.
 * The reader takes segment 4, which no writer here counts, and lets it go
 * at once when granted (no writer yet). */
static int readers_refused(void *arg)
{
    struct probe *p = arg;
    struct lock_grant g;
    lock_status res = lock_acquire_read_of(p->s, p->k->seg[4], p->k->rw, 0, 0, &g);
    if (res == LOCK_ACQUIRED)
        lock_release(p->s, p->k->seg[4], &g);
    return res == LOCK_BUSY;
}

/* Waits until a writer's node keeps new readers out. */
static void wait_writer_there(struct lock_session *s, const struct sku *k)
{
    struct probe p = {s, k};
    if (!test_wait_for(readers_refused, &p, 20000))
        fail_msg("no writer keeps new readers of %s out within 20 s", k->rw);
}

/* A segment's lock taken with the SKU's read side excludes the writer that
 * counts it (lock_rw_write_over); the writer's hold keeps new segment grants
 * out (nothing left behind: a plain lock of the same segment is free); a
 * plain lock that is no reader is not refused. */
static void test_segment_locks_are_readers(void **state)
{
    (void)state;
    struct sku k;
    sku_init(&k, "segs");
    struct lock *la = zk_lock(hosts, SESSION_MS), *lb = zk_lock(hosts, SESSION_MS);
    struct lock_session *r = lock_session_new(la, NULL), *w = lock_session_new(lb, NULL),
                        *n = lock_session_new(la, NULL);
    struct lock_grant a, b, g;
    expect(lock_acquire_read_of(r, k.seg[0], k.rw, 0, TRY_MS, &a), LOCK_ACQUIRED,
           "segment 0's lock");
    expect(lock_rw_write_over(w, k.rw, k.prefix, 2, TRY_MS, &g), LOCK_BUSY,
           "the writer while segment 0 is held");
    expect(lock_rw_acquire(w, k.rw, LOCK_WRITE, TRY_MS, &g), LOCK_ACQUIRED,
           "a writer that counts no segment (the read-write lock alone is free)");
    expect(lock_release(w, k.rw, &g), LOCK_RELEASED, "its release");
    expect(lock_release(r, k.seg[0], &a), LOCK_RELEASED, "segment 0's release");
    expect(lock_rw_write_over(w, k.rw, k.prefix, 2, TRY_MS, &g), LOCK_ACQUIRED,
           "the writer once no segment is held");
    assert_true(g.fence > 0);
    expect(lock_acquire_read_of(n, k.seg[1], k.rw, 0, TRY_MS, &b), LOCK_BUSY,
           "segment 1's lock while the writer holds");
    expect(lock_acquire(n, k.seg[1], 0, &b), LOCK_ACQUIRED,
           "the same lock taken as no reader (no node of the refused one left)");
    expect(lock_release(n, k.seg[1], &b), LOCK_RELEASED, "its release");
    expect(lock_release(w, k.rw, &g), LOCK_RELEASED, "the writer's release");
    expect(lock_acquire_read_of(n, k.seg[1], k.rw, 0, TRY_MS, &b), LOCK_ACQUIRED,
           "segment 1's lock once the writer is done");
    expect(lock_release(n, k.seg[1], &b), LOCK_RELEASED, "its release");
    lock_session_free(r);
    lock_session_free(w);
    lock_session_free(n);
    lock_free(la);
    lock_free(lb);
}

/* An order of several segments holds one and takes the next while a writer
 * waits for the first: the next one is not refused (held), or both would
 * wait until the order gave up; and the writer counts it though its node is
 * younger than the writer's (its guid marked held), so it gets in only once
 * both are released. */
static void test_held_reader_takes_next_segment(void **state)
{
    (void)state;
    struct sku k;
    sku_init(&k, "held");
    struct lock *la = zk_lock(hosts, SESSION_MS), *lb = zk_lock(hosts, SESSION_MS);
    struct lock_session *r = lock_session_new(la, NULL), *ws = lock_session_new(lb, NULL),
                        *p = lock_session_new(lb, NULL);
    struct lock_grant a, b;
    expect(lock_acquire_read_of(r, k.seg[0], k.rw, 0, TRY_MS, &a), LOCK_ACQUIRED,
           "segment 0's lock");
    struct test_acquirer w;
    test_write_over_start(&w, ws, k.rw, k.prefix, 2, 20000);
    wait_writer_there(p, &k);
    expect(lock_acquire_read_of(r, k.seg[1], k.rw, 0, TRY_MS, &b), LOCK_BUSY,
           "segment 1 as a new reader while the writer waits");
    expect(lock_acquire_read_of(r, k.seg[1], k.rw, 1, TRY_MS, &b), LOCK_ACQUIRED,
           "segment 1 by the holder of segment 0");
    expect(lock_release(r, k.seg[0], &a), LOCK_RELEASED, "segment 0's release");
    /* Counting segment 1's lock by its age alone, the writer would be in
     * within a poll (20 ms) and a few round trips of the release: 1 s of
     * them, which a busy machine may stretch (then this passes wrongly, never
     * fails wrongly). */
    assert_false(test_wait_for(test_acquirer_done, &w, 1000));
    int64_t released_us = clock_now_us();
    expect(lock_release(r, k.seg[1], &b), LOCK_RELEASED, "segment 1's release");
    pthread_join(w.thread, NULL);
    expect(w.res, LOCK_ACQUIRED, "the writer, after both");
    assert_true(w.acquired_us >= released_us);
    expect(lock_release(ws, k.rw, &w.g), LOCK_RELEASED, "the writer's release");
    lock_session_free(r);
    lock_session_free(ws);
    lock_session_free(p);
    lock_free(la);
    lock_free(lb);
}

/* Writer preference over a segment's queue: a reader queued for segment 0
 * before the writer came makes way once its turn comes (the look it sends
 * with its list sees the writer's node), so the writer waits for the hold
 * in progress only, not for the queue before it; the reader gets in once
 * the writer is done (it polls). */
static void test_queued_reader_makes_way_for_the_writer(void **state)
{
    (void)state;
    struct sku k;
    sku_init(&k, "queue");
    struct lock *la = zk_lock(hosts, SESSION_MS), *lb = zk_lock(hosts, SESSION_MS),
                *lc = zk_lock(hosts, SESSION_MS);
    struct lock_session *r = lock_session_new(la, NULL), *ws = lock_session_new(lb, NULL),
                        *p = lock_session_new(lb, NULL), *qs = lock_session_new(lc, NULL);
    struct lock_grant a;
    expect(lock_acquire_read_of(r, k.seg[0], k.rw, 0, TRY_MS, &a), LOCK_ACQUIRED,
           "segment 0's lock");
    struct test_acquirer q;
    test_read_of_start(&q, qs, k.seg[0], k.rw, 20000);
    wait_asleep(lc, 1); /* queued: its node made, its predecessor watched */
    struct test_acquirer w;
    test_write_over_start(&w, ws, k.rw, k.prefix, 2, 20000);
    wait_writer_there(p, &k);
    expect(lock_release(r, k.seg[0], &a), LOCK_RELEASED, "segment 0's release");
    pthread_join(w.thread, NULL);
    expect(w.res, LOCK_ACQUIRED, "the writer, before the queued reader");
    assert_false(
        atomic_load(&q.done)); /* it made way, and polls while the writer holds */
    int64_t released_us = clock_now_us();
    expect(lock_release(ws, k.rw, &w.g), LOCK_RELEASED, "the writer's release");
    pthread_join(q.thread, NULL);
    expect(q.res, LOCK_ACQUIRED, "the queued reader, after the writer");
    /* Slack: its polls come every 20 ms at most; 2 s for a busy machine. */
    assert_true(q.acquired_us - released_us < 2000000);
    expect(lock_release(qs, k.seg[0], &q.g), LOCK_RELEASED, "its release");
    lock_session_free(r);
    lock_session_free(ws);
    lock_session_free(p);
    lock_session_free(qs);
    lock_free(la);
    lock_free(lb);
    lock_free(lc);
}

/* A session of its own process that takes its segment's lock as a reader
 * again and again, at once (no wait, no pause): a stream of short-lived
 * nodes under the segment's lock node while a writer waits. */
struct churner {
    struct lock *l;
    const struct sku *k;
    int seg;
    pthread_t thread;
    atomic_int stop;
    atomic_int refused;  /* attempts refused (a writer was there) */
    atomic_int late;     /* grants after a refusal: while a writer was there */
    atomic_int failures; /* errors */
};

static void *churner_run(void *arg)
{
    struct churner *c = arg;
    struct lock_session *s = lock_session_new(c->l, NULL);
    const char *key = c->k->seg[c->seg];
    while (!atomic_load(&c->stop)) {
        struct lock_grant g;
        lock_status res = lock_acquire_read_of(s, key, c->k->rw, 0, 0, &g);
        if (res == LOCK_ACQUIRED) {
            if (atomic_load(&c->refused) > 0)
                atomic_fetch_add(&c->late, 1);
            lock_release(s, key, &g);
        } else if (res == LOCK_BUSY) {
            atomic_fetch_add(&c->refused, 1);
        } else {
            atomic_fetch_add(&c->failures, 1);
        }
    }
    lock_session_free(s);
    return NULL;
}

static int churners_refused(void *arg)
{
    struct churner *c = arg;
    return atomic_load(&c[0].refused) > 0 && atomic_load(&c[1].refused) > 0;
}

/* A waiting writer keeps new segment readers out and gets in once the older
 * hold is released, though two other processes keep trying their segments'
 * locks in a loop all along: their nodes, younger than the writer's, come
 * and go under the segment lock nodes it lists, and it does not wait for
 * them (else a stream of them would starve it). A loop on a machine this
 * size makes them too sparse to starve a writer that counted them, so one
 * young node also stays there: a plain lock of segment 3 taken after the
 * writer's node, standing in for a refused reader whose node is still
 * there (its delete on its way, or lost with the connection and left to
 * the orphan sweep); the writer gets in beside it. Once a churner was
 * refused it is never granted again while the writer waits or holds: its
 * next node comes after the writer's. */
static void test_waiting_writer_is_not_starved_by_segment_readers(void **state)
{
    (void)state;
    struct sku k;
    sku_init(&k, "churn");
    struct lock *lr = zk_lock(hosts, SESSION_MS), *lw = zk_lock(hosts, SESSION_MS);
    struct lock_session *r = lock_session_new(lr, NULL), *ws = lock_session_new(lw, NULL);
    struct lock_grant a;
    expect(lock_acquire_read_of(r, k.seg[0], k.rw, 0, TRY_MS, &a), LOCK_ACQUIRED,
           "segment 0's lock: the older hold");
    struct churner c[2];
    for (int i = 0; i < 2; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].l = zk_lock(hosts, SESSION_MS);
        c[i].k = &k;
        c[i].seg = i + 1;
        assert_int_equal(pthread_create(&c[i].thread, NULL, churner_run, &c[i]), 0);
    }
    struct test_acquirer w;
    test_write_over_start(&w, ws, k.rw, k.prefix, 4, 20000);
    if (!test_wait_for(churners_refused, c, 20000))
        fail_msg("the churners were not refused within 20 s (%d, %d)",
                 atomic_load(&c[0].refused), atomic_load(&c[1].refused));
    struct lock_grant young;
    expect(lock_acquire(r, k.seg[3], TRY_MS, &young), LOCK_ACQUIRED,
           "segment 3's lock as no reader, after the writer's node");
    /* The writer waits for the older hold: still out 200 ms later (it would
     * be in within a poll and a round trip if it did not). */
    assert_false(test_wait_for(test_acquirer_done, &w, 200));
    int64_t released_us = clock_now_us();
    expect(lock_release(r, k.seg[0], &a), LOCK_RELEASED, "the older hold's release");
    pthread_join(w.thread, NULL);
    expect(w.res, LOCK_ACQUIRED, "the writer, while the churners go on");
    /* Slack: a poll (20 ms at most) and two round trips; 5 s for a busy
     * machine's JVM. Starved, it would be busy at its wait's end (20 s). */
    assert_true(w.acquired_us - released_us < 5000000);
    for (int i = 0; i < 2; i++) {
        atomic_store(&c[i].stop, 1);
        pthread_join(c[i].thread, NULL);
    }
    printf("churners: refused %d and %d times, late grants %d and %d, errors %d and %d\n",
           c[0].refused, c[1].refused, c[0].late, c[1].late, c[0].failures,
           c[1].failures);
    assert_int_equal(c[0].late + c[1].late, 0);
    expect(lock_release(ws, k.rw, &w.g), LOCK_RELEASED, "the writer's release");
    expect(lock_release(r, k.seg[3], &young), LOCK_RELEASED, "segment 3's release");
    for (int i = 0; i < 2; i++)
        lock_free(c[i].l);
    lock_session_free(r);
    lock_session_free(ws);
    lock_free(lr);
    lock_free(lw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_share),
        cmocka_unit_test(test_writer_excludes_both),
        cmocka_unit_test(test_mixed_load_never_overlaps),
        cmocka_unit_test(test_waiting_writer_keeps_new_readers_out),
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_expired_reader_frees_the_writer),
        cmocka_unit_test(test_expired_writer_is_fenced),
        cmocka_unit_test(test_expired_writer_frees_the_reader),
        cmocka_unit_test(test_segment_locks_are_readers),
        cmocka_unit_test(test_held_reader_takes_next_segment),
        cmocka_unit_test(test_queued_reader_makes_way_for_the_writer),
        cmocka_unit_test(test_waiting_writer_is_not_starved_by_segment_readers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
