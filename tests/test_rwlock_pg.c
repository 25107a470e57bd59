/* test_rwlock_pg: the read-write lock of the pg mode (lock.h "the read-write
 * lock"; its rows in seckill_rwlocks, lock/pg_sql.c) against a real
 * PostgreSQL (one per binary) and, for the fencing token's check, a real
 * redis-server running the commit's own fence piece
 * (inventory/lua/fence.lua): readers share, a writer excludes both sides, a
 * waiting writer keeps new readers out (and they get in after it, woken by
 * NOTIFY), a writer that gives up lets them in at once, reentrancy, leases
 * that run out and the watchdog's renewals on both sides, a stale writer
 * fenced off by the next writer's version, and the plain lock's table as an
 * older build made it, used beside the new one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "lock.h"
#include "testutil.h"

static struct test_pg pg;
static struct test_redis srv;
static struct rconn *data; /* the data Redis, where commits check the fence */

static int group_setup(void **state)
{
    (void)state;
    test_pg_start(&pg, NULL);
    test_redis_start(&srv, NULL);
    data = rconn_new("127.0.0.1", srv.port, NULL, 2000);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rconn_free(data);
    test_redis_stop(&srv, 1, 0);
    test_pg_stop(&pg, 0, 0);
    return 0;
}

/* A pg lock with a ttl_ms lease; attached to the test loop (its watchdog
 * renews) when attach. */
static struct lock *pg_lock(int ttl_ms, int attach)
{
    struct lock_config cfg = {
        .ttl_ms = ttl_ms, .fencing = 1, .timeout_ms = 1000, .postgres = pg.url};
    char err[256] = "";
    struct lock *l = lock_new("pg", &cfg, err, sizeof(err));
    if (!l)
        fail_msg("lock_new(pg): %s", err);
    if (attach)
        test_lock_attach(l);
    return l;
}

static void pg_lock_free(struct lock *l, int attached)
{
    if (attached)
        test_lock_free(l);
    else
        lock_free(l);
}

/* Runs q on the test server; its first value, or "" (static buffer). */
static const char *sql(const char *q)
{
    static char out[256];
    out[0] = '\0';
    PGconn *c = PQconnectdb(pg.url);
    PGresult *r = PQexec(c, q);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(out, sizeof(out), "%s", PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_COMMAND_OK &&
             PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", q, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return out;
}

static void expect(lock_status got, lock_status want, const char *what)
{
    if (got != want)
        fail_msg("%s: status %d, expected %d", what, got, want);
}

static struct lock_stats stats_of(struct lock *l)
{
    struct lock_stats st;
    lock_stats(l, &st);
    return st;
}

struct asleep_arg {
    struct lock *l;
    uint64_t want;
};

static int asleep_is(void *arg)
{
    struct asleep_arg *a = arg;
    return stats_of(a->l).watch_waiters == a->want;
}

/* Waits until want waiters of l sleep (their attempt found the key taken). */
static void wait_asleep(struct lock *l, uint64_t want)
{
    struct asleep_arg a = {l, want};
    if (!test_wait_for(asleep_is, &a, 20000))
        fail_msg("%llu waiters asleep, expected %llu",
                 (unsigned long long)stats_of(l).watch_waiters, (unsigned long long)want);
}

/* 1 when key's row has a writer's intent ("t"), 0 when none. */
static int intent_of(const char *key)
{
    char q[256];
    snprintf(q, sizeof(q),
             "SELECT intent IS NOT NULL FROM seckill_rwlocks WHERE key = '%s'", key);
    return strcmp(sql(q), "t") == 0;
}

static int intent_there(void *arg)
{
    return intent_of(arg);
}

static int intent_gone(void *arg)
{
    return !intent_of(arg);
}

/* ---- an acquire on its own thread ------------------------------------------ */

struct contender {
    struct lock_session *s;
    const char *key;
    lock_side side;
    int wait_ms;
    pthread_t thread;
    atomic_int done;
    lock_status res;
    struct lock_grant g;
    int64_t acquired_us;
};

static void *contender_main(void *arg)
{
    struct contender *c = arg;
    c->res = lock_rw_acquire(c->s, c->key, c->side, c->wait_ms, &c->g);
    c->acquired_us = clock_now_us();
    atomic_store(&c->done, 1);
    return NULL;
}

static void contender_start(struct contender *c, struct lock_session *s, const char *key,
                            lock_side side, int wait_ms)
{
    memset(c, 0, sizeof(*c));
    c->s = s;
    c->key = key;
    c->side = side;
    c->wait_ms = wait_ms;
    assert_int_equal(pthread_create(&c->thread, NULL, contender_main, c), 0);
}

static void on_step_over(void *arg)
{
    *(int *)arg = 1;
}

/* As an event loop acquires: lock_rw_try_step, its job on base (driven until
 * it is over). */
static lock_status acquire_by_steps(struct lock_session *s, const char *key,
                                    lock_side side, int wait_ms, struct event_base *base,
                                    struct lock_grant *g)
{
    struct lock_step st;
    lock_step_init(&st);
    assert_int_equal(lock_rw_try_step(s, key, side, wait_ms, &st), 1);
    if (st.async) {
        int over = 0;
        lock_step_start(s, key, &st, base, on_step_over, &over);
        assert_int_equal(over, 0);
        while (!over)
            event_base_loop(base, EVLOOP_ONCE);
    }
    return lock_try_done(s, key, &st, g);
}

/* ---- sharing and exclusion ----------------------------------------------- */

static void test_readers_share(void **state)
{
    (void)state;
    const char *key = "rw:share";
    struct lock *l = pg_lock(5000, 1);
    assert_true(lock_rw_supported(l));
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL),
                        *w = lock_session_new(l, NULL);
    struct lock_grant ra, rb, g;
    expect(lock_rw_acquire(a, key, LOCK_READ, 0, &ra), LOCK_ACQUIRED, "first reader");
    expect(lock_rw_acquire(b, key, LOCK_READ, 0, &rb), LOCK_ACQUIRED,
           "second reader while the first reads");
    assert_int_equal(ra.fence, 0); /* a reader writes nothing: no token */
    assert_string_equal(
        sql("SELECT count(*) FROM seckill_rwlocks, jsonb_object_keys(readers) "
            "WHERE key = 'rw:share'"),
        "2");
    expect(lock_rw_acquire(w, key, LOCK_WRITE, 0, &g), LOCK_BUSY,
           "a writer while two read");
    expect(lock_release(a, key, &ra), LOCK_RELEASED, "first reader's release");
    expect(lock_rw_acquire(w, key, LOCK_WRITE, 0, &g), LOCK_BUSY,
           "a writer while one reads");
    expect(lock_release(b, key, &rb), LOCK_RELEASED, "second reader's release");
    expect(lock_rw_acquire(w, key, LOCK_WRITE, 0, &g), LOCK_ACQUIRED,
           "a writer once both are gone");
    assert_true(g.fence > 1700000000000000ULL); /* the version: the clock's floor */
    char text[LOCK_FENCE_TEXT], want[40];
    lock_fence_text(&g, text, sizeof(text));
    snprintf(want, sizeof(want), "%llu@pg", (unsigned long long)g.fence);
    assert_string_equal(text, want);
    expect(lock_release(w, key, &g), LOCK_RELEASED, "its release");
    lock_session_free(a);
    lock_session_free(b);
    lock_session_free(w);
    pg_lock_free(l, 1);
}

static void test_writer_excludes_both(void **state)
{
    (void)state;
    const char *key = "rw:excl";
    struct lock *l = pg_lock(5000, 1);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL),
                        *s = lock_session_new(l, NULL);
    struct event_base *base = event_base_new();
    struct lock_grant w, g;
    expect(lock_rw_acquire(a, key, LOCK_WRITE, 0, &w), LOCK_ACQUIRED, "writer");
    expect(lock_rw_acquire(b, key, LOCK_READ, 0, &g), LOCK_BUSY,
           "a reader while another writes");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, 0, &g), LOCK_BUSY,
           "a writer while another writes");
    expect(acquire_by_steps(s, key, LOCK_READ, 0, base, &g), LOCK_BUSY,
           "a reader by steps while another writes");
    expect(lock_release(a, key, &w), LOCK_RELEASED, "writer's release");
    expect(lock_rw_acquire(a, key, LOCK_READ, 0, &g), LOCK_ACQUIRED, "reader");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, 0, &w), LOCK_BUSY,
           "a writer while another reads");
    expect(lock_release(a, key, &g), LOCK_RELEASED, "reader's release");
    expect(acquire_by_steps(s, key, LOCK_WRITE, 0, base, &w), LOCK_ACQUIRED,
           "a writer by steps once the reader is gone");
    struct lock_step st;
    lock_release_step(s, key, &w, &st);
    int over = 0;
    lock_step_start(s, key, &st, base, on_step_over, &over);
    while (!over)
        event_base_loop(base, EVLOOP_ONCE);
    expect(lock_release_done(s, key, &w, &st), LOCK_RELEASED, "its release by steps");
    lock_session_free(s); /* its loop's connections, on that loop's thread */
    lock_session_free(a);
    lock_session_free(b);
    event_base_free(base);
    pg_lock_free(l, 1);
}

/* Threads, each on a session of its own (as processes are), readers and
 * writers: a writer is never inside with anyone else. */
struct mixed {
    struct lock *lock;
    const char *key;
    atomic_int next;
    struct rw_tally t;
};

static void *mixed_worker(void *arg)
{
    struct mixed *m = arg;
    int me = atomic_fetch_add(&m->next, 1);
    struct lock_session *s = lock_session_new(m->lock, NULL);
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
    struct mixed m = {.key = "rw:mixed", .lock = pg_lock(5000, 1)};
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&t[i], NULL, mixed_worker, &m);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    printf("mixed: %d overlaps, %d failures, %d reads shared\n", m.t.overlaps,
           m.t.failures, m.t.shared);
    assert_int_equal(m.t.overlaps, 0);
    assert_int_equal(m.t.failures, 0);
    assert_int_equal(stats_of(m.lock).watch_waiters, 0);
    pg_lock_free(m.lock, 1);
}

/* ---- writer preference ----------------------------------------------------- */

/* A writer waiting for a reader leaves its intent: a new reader that will not
 * wait is busy, one that waits gets in only after the writer's release. The
 * writer is woken by the reader's release (NOTIFY), not by its intent's
 * renewal: that would come after half the 10 s lease. */
static void test_waiting_writer_keeps_new_readers_out(void **state)
{
    (void)state;
    const char *key = "rw:pref";
    struct lock *l = pg_lock(10000, 1), *ln = pg_lock(10000, 1);
    struct lock_session *r = lock_session_new(l, NULL), *w = lock_session_new(l, NULL),
                        *n = lock_session_new(ln, NULL), *n2 = lock_session_new(l, NULL);
    struct lock_grant r1, g;
    expect(lock_rw_acquire(r, key, LOCK_READ, 0, &r1), LOCK_ACQUIRED, "reader");
    struct contender cw, cn;
    contender_start(&cw, w, key, LOCK_WRITE, 20000);
    if (!test_wait_for(intent_there, (void *)key, 20000))
        fail_msg("the waiting writer left no intent");
    expect(lock_rw_acquire(n2, key, LOCK_READ, 0, &g), LOCK_BUSY,
           "a new reader that will not wait, while a writer waits");
    contender_start(&cn, n, key, LOCK_READ, 20000);
    wait_asleep(ln, 1); /* its attempt was refused */
    int64_t released_us = clock_now_us();
    expect(lock_release(r, key, &r1), LOCK_RELEASED, "the first reader's release");
    pthread_join(cw.thread, NULL);
    expect(cw.res, LOCK_ACQUIRED, "the waiting writer");
    /* Slack: a NOTIFY and an attempt away; 2 s for a busy machine (the
     * intent's renewal would wake it after 5 s). */
    assert_true(cw.acquired_us - released_us < 2000000);
    assert_false(intent_of(key));        /* taken with the grant */
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
    pg_lock_free(l, 1);
    pg_lock_free(ln, 1);
}

/* A writer that gives up (its wait over) lets its intent go at once: the
 * readers it kept out get in without waiting for the intent's lease. */
static void test_writer_giving_up_lets_readers_in(void **state)
{
    (void)state;
    const char *key = "rw:giveup";
    struct lock *l = pg_lock(10000, 1);
    struct lock_session *r = lock_session_new(l, NULL), *w = lock_session_new(l, NULL),
                        *n = lock_session_new(l, NULL);
    struct lock_grant r1, g;
    expect(lock_rw_acquire(r, key, LOCK_READ, 0, &r1), LOCK_ACQUIRED, "reader");
    expect(lock_rw_acquire(w, key, LOCK_WRITE, 300, &g), LOCK_BUSY,
           "a writer that waits");
    /* its intent's lease: 300 + 100 ms; gone now means let go, not run out
     * (a run-out intent stays in the row until another writer's replaces it) */
    if (!test_wait_for(intent_gone, (void *)key, 20000))
        fail_msg("the writer that gave up left its intent");
    expect(lock_rw_acquire(n, key, LOCK_READ, 0, &g), LOCK_ACQUIRED,
           "a new reader once the writer gave up");
    expect(lock_release(n, key, &g), LOCK_RELEASED, "its release");
    expect(lock_release(r, key, &r1), LOCK_RELEASED, "the first reader's release");
    lock_session_free(r);
    lock_session_free(w);
    lock_session_free(n);
    pg_lock_free(l, 1);
}

/* ---- reentrancy ------------------------------------------------------------ */

static void test_reentrant(void **state)
{
    (void)state;
    const char *key = "rw:reenter";
    struct lock *l = pg_lock(5000, 1);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant r1, r2, w1, w2, wr, g;
    expect(lock_rw_acquire(a, key, LOCK_READ, 0, &r1), LOCK_ACQUIRED, "read");
    expect(lock_rw_acquire(a, key, LOCK_READ, 0, &r2), LOCK_ACQUIRED, "read again");
    expect(lock_release(a, key, &r2), LOCK_RELEASED, "one read released");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, 0, &g), LOCK_BUSY,
           "a writer while one read is left");
    expect(lock_release(a, key, &r1), LOCK_RELEASED, "the last read");
    /* a writer twice (a second owner would find the row written), and
     * reading too (a reader's member would be refused under the write) */
    expect(lock_rw_acquire(a, key, LOCK_WRITE, 0, &w1), LOCK_ACQUIRED, "write");
    expect(lock_rw_acquire(a, key, LOCK_WRITE, 0, &w2), LOCK_ACQUIRED, "write again");
    assert_int_equal(w2.fence, w1.fence); /* the same ownership, the same token */
    expect(lock_rw_acquire(a, key, LOCK_READ, 0, &wr), LOCK_ACQUIRED, "the writer reads");
    assert_int_equal(wr.fence, 0);
    expect(lock_release(a, key, &w2), LOCK_RELEASED, "one write released");
    expect(lock_rw_acquire(b, key, LOCK_READ, 0, &g), LOCK_BUSY,
           "a reader while one write is left");
    expect(lock_release(a, key, &w1), LOCK_RELEASED, "the last write");
    /* no downgrade: the writer's read keeps the row written */
    expect(lock_rw_acquire(b, key, LOCK_READ, 0, &g), LOCK_BUSY,
           "a reader while the former writer reads");
    expect(lock_release(a, key, &wr), LOCK_RELEASED, "the former writer's read");
    expect(lock_release(a, key, &wr), LOCK_NOT_HELD, "a release too many");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, 0, &g), LOCK_ACQUIRED,
           "a writer once all is released");
    assert_true(g.fence > w1.fence);
    expect(lock_release(b, key, &g), LOCK_RELEASED, "its release");
    lock_session_free(a);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* ---- leases and the writer's token ---------------------------------------------- */

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

/* A holder of dead_side that dies (its session freed without a release:
 * nothing renews its lease) frees its side when the lease runs out, for a
 * holder of next_side. A dead writer's commit after the next writer's is
 * refused by the next one's version. */
static void lease_runs_out(const char *key, lock_side dead_side, lock_side next_side)
{
    const int ttl = 300;
    struct lock *l = pg_lock(ttl, 1);
    struct lock_session *dead = lock_session_new(l, NULL), *n = lock_session_new(l, NULL);
    redisReply *del = rconn_command(data, "DEL %s:fence %s:data", key, key);
    assert_non_null(del);
    freeReplyObject(del);
    struct lock_grant d, g;
    expect(lock_rw_acquire(dead, key, dead_side, 0, &d), LOCK_ACQUIRED, "the one to die");
    int fencing = dead_side == LOCK_WRITE && next_side == LOCK_WRITE;
    if (fencing)
        assert_int_equal(fenced_commit(key, &d), 1);
    int64_t died_us = clock_now_us();
    lock_session_free(dead);
    expect(lock_rw_acquire(n, key, next_side, 5000, &g), LOCK_ACQUIRED,
           "the next once the lease ran out");
    /* It waited for the lease (less 50 ms of slack: the lease was set a round
     * trip before died_us was read). */
    assert_true(clock_now_us() - died_us > (ttl - 50) * 1000);
    if (fencing) {
        assert_true(g.fence > d.fence);
        assert_int_equal(fenced_commit(key, &g), 1);
        assert_int_equal(fenced_commit(key, &d), 0); /* the stale writer: refused */
    }
    expect(lock_release(n, key, &g), LOCK_RELEASED, "its release");
    lock_session_free(n);
    pg_lock_free(l, 1);
}

static void test_dead_reader_lease_runs_out(void **state)
{
    (void)state;
    lease_runs_out("rw:dead-reader", LOCK_READ, LOCK_WRITE);
}

static void test_dead_writer_lease_runs_out(void **state)
{
    (void)state;
    lease_runs_out("rw:dead-writer", LOCK_WRITE, LOCK_READ);
}

static void test_stale_writer_is_fenced(void **state)
{
    (void)state;
    lease_runs_out("rw:fence", LOCK_WRITE, LOCK_WRITE);
}

/* Not attached (no watchdog), a writer's lease runs out on the database's
 * clock while it still thinks it holds: its release is NOT_HELD and touches
 * nothing of the next writer's. */
static void test_stale_writer_release_touches_nothing(void **state)
{
    (void)state;
    const char *key = "rw:stale";
    struct lock *l = pg_lock(200, 0);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant ga, gb;
    expect(lock_rw_acquire(a, key, LOCK_WRITE, 0, &ga), LOCK_ACQUIRED, "writer");
    expect(lock_rw_acquire(b, key, LOCK_WRITE, 3000, &gb), LOCK_ACQUIRED,
           "the next writer once the lease ran out");
    assert_true(gb.fence > ga.fence);
    expect(lock_release(a, key, &ga), LOCK_NOT_HELD, "the stale writer's release");
    char owner[64];
    snprintf(owner, sizeof(owner), "%s",
             sql("SELECT writer FROM seckill_rwlocks WHERE key = 'rw:stale'"));
    assert_string_equal(owner, gb.token);
    expect(lock_release(b, key, &gb), LOCK_RELEASED, "the next writer's release");
    lock_session_free(a);
    lock_session_free(b);
    pg_lock_free(l, 0);
}

/* The watchdog renews a reader's and a writer's lease past many ttls: a
 * writer that waits 4 leases does not get in. */
static void test_watchdog_renews_both_sides(void **state)
{
    (void)state;
    const char *key = "rw:renew";
    const int ttl = 200;
    struct lock *l = pg_lock(ttl, 1);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    for (lock_side side = LOCK_READ; side <= LOCK_WRITE; side++) {
        struct lock_grant h, g;
        expect(lock_rw_acquire(a, key, side, 0, &h), LOCK_ACQUIRED, "holder");
        uint64_t renewals = stats_of(l).renewals;
        expect(lock_rw_acquire(b, key, LOCK_WRITE, 4 * ttl, &g), LOCK_BUSY,
               "a writer while the watchdog renews the holder");
        assert_true(stats_of(l).renewals > renewals);
        assert_true(lock_valid_until_us(a, &h) > clock_now_us());
        expect(lock_release(a, key, &h), LOCK_RELEASED, "the holder's release");
    }
    assert_int_equal(stats_of(l).leases_lost, 0);
    lock_session_free(a);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* ---- segment locks as readers (lock_step_read_of, lock_rw_write_over) ------- */

#define SEG_RW "seg:rw"
#define SEG_PREFIX "seg:"

/* 1 when key's plain row carries a writer's mark that still runs. */
static int marked(const char *key)
{
    char q[256];
    snprintf(q, sizeof(q),
             "SELECT coalesce(writer_until >= now(), false) FROM seckill_locks "
             "WHERE key = '%s'",
             key);
    return strcmp(sql(q), "t") == 0;
}

static int seg1_marked(void *arg)
{
    (void)arg;
    return marked(SEG_PREFIX "1");
}

/* A segment's lock taken as a reader excludes the writer that counts it; the
 * writer's hold keeps new segment grants out; a plain lock that is no reader
 * is not refused; the writer's release lets them in. */
static void test_segment_locks_are_readers(void **state)
{
    (void)state;
    struct lock *l = pg_lock(5000, 1);
    struct lock_session *a = lock_session_new(l, NULL), *w = lock_session_new(l, NULL),
                        *b = lock_session_new(l, NULL);
    struct lock_grant ga, gw, gb;
    expect(lock_acquire_read_of(a, SEG_PREFIX "0", SEG_RW, 0, 0, &ga), LOCK_ACQUIRED,
           "segment 0's lock");
    expect(lock_rw_write_over(w, SEG_RW, SEG_PREFIX, 2, 0, &gw), LOCK_BUSY,
           "the writer while segment 0 is held");
    expect(lock_rw_acquire(w, SEG_RW, LOCK_WRITE, 0, &gw), LOCK_ACQUIRED,
           "a writer that counts no segment");
    expect(lock_release(w, SEG_RW, &gw), LOCK_RELEASED, "its release");
    expect(lock_release(a, SEG_PREFIX "0", &ga), LOCK_RELEASED, "segment 0's release");
    expect(lock_rw_write_over(w, SEG_RW, SEG_PREFIX, 2, 0, &gw), LOCK_ACQUIRED,
           "the writer once no segment is held");
    assert_true(gw.fence > 0);
    expect(lock_acquire_read_of(b, SEG_PREFIX "1", SEG_RW, 0, 0, &gb), LOCK_BUSY,
           "segment 1's lock while the writer holds");
    assert_string_equal(sql("SELECT coalesce(owner, 'free') FROM seckill_locks "
                            "WHERE key = '" SEG_PREFIX "1'"),
                        "free"); /* nothing taken */
    expect(lock_acquire(b, SEG_PREFIX "1", 0, &gb), LOCK_ACQUIRED,
           "the same lock taken as no reader");
    expect(lock_release(b, SEG_PREFIX "1", &gb), LOCK_RELEASED, "its release");
    expect(lock_release(w, SEG_RW, &gw), LOCK_RELEASED, "the writer's release");
    assert_false(marked(SEG_PREFIX "1"));
    expect(lock_acquire_read_of(b, SEG_PREFIX "1", SEG_RW, 0, 0, &gb), LOCK_ACQUIRED,
           "segment 1's lock once the writer is done");
    expect(lock_release(b, SEG_PREFIX "1", &gb), LOCK_RELEASED, "its release");
    lock_session_free(a);
    lock_session_free(w);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* A writer waiting for a segment's hold marks every segment: a new segment
 * reader is refused (one that will not wait: busy; one that waits: asleep),
 * the holder finishes, the writer gets in at its release (NOTIFY: the 10 s
 * lease would wake it seconds later), and the waiting reader once the
 * writer's release takes the marks off. */
static void test_waiting_writer_keeps_segment_readers_out(void **state)
{
    (void)state;
    struct lock *l = pg_lock(10000, 1);
    struct lock_session *a = lock_session_new(l, NULL), *w = lock_session_new(l, NULL),
                        *b = lock_session_new(l, NULL), *c = lock_session_new(l, NULL);
    struct lock_grant ga, gb;
    expect(lock_acquire_read_of(a, SEG_PREFIX "0", SEG_RW, 0, 0, &ga), LOCK_ACQUIRED,
           "segment 0's lock");
    struct test_acquirer o;
    test_write_over_start(&o, w, SEG_RW, SEG_PREFIX, 2, 10000);
    assert_true(test_wait_for(seg1_marked, NULL, 10000)); /* its intent, on segment 1 */
    expect(lock_acquire_read_of(b, SEG_PREFIX "1", SEG_RW, 0, 0, &gb), LOCK_BUSY,
           "a new reader of segment 1 while the writer waits");
    struct test_acquirer r;
    test_read_of_start(&r, c, SEG_PREFIX "1", SEG_RW, 10000);
    wait_asleep(l, 2); /* the writer and the reader */
    int64_t released_us = clock_now_us();
    expect(lock_release(a, SEG_PREFIX "0", &ga), LOCK_RELEASED, "segment 0's release");
    pthread_join(o.thread, NULL);
    expect(o.res, LOCK_ACQUIRED, "the waiting writer");
    /* Slack: woken by the release's NOTIFY; 2 s for a busy machine, well
     * under the lease (10 s) that would wake it otherwise. */
    assert_true(o.acquired_us - released_us < 2000000);
    assert_false(atomic_load(&r.done)); /* still kept out while the writer holds */
    released_us = clock_now_us();
    expect(lock_release(w, SEG_RW, &o.g), LOCK_RELEASED, "the writer's release");
    pthread_join(r.thread, NULL);
    expect(r.res, LOCK_ACQUIRED, "the segment's reader, after the writer");
    assert_true(r.acquired_us - released_us < 2000000); /* the same slack */
    expect(lock_release(c, SEG_PREFIX "1", &r.g), LOCK_RELEASED, "its release");
    assert_int_equal(stats_of(l).watch_waiters, 0);
    lock_session_free(a);
    lock_session_free(w);
    lock_session_free(b);
    lock_session_free(c);
    pg_lock_free(l, 1);
}

/* An order of several segments holds one and takes the next while a writer
 * waits for the first: the next one is not refused (held), or both would
 * wait until the order gave up. */
static void test_held_reader_takes_next_segment(void **state)
{
    (void)state;
    struct lock *l = pg_lock(10000, 1);
    struct lock_session *a = lock_session_new(l, NULL), *w = lock_session_new(l, NULL);
    struct lock_grant g0, g1;
    expect(lock_acquire_read_of(a, SEG_PREFIX "0", SEG_RW, 0, 0, &g0), LOCK_ACQUIRED,
           "segment 0's lock");
    struct test_acquirer o;
    test_write_over_start(&o, w, SEG_RW, SEG_PREFIX, 2, 10000);
    assert_true(test_wait_for(seg1_marked, NULL, 10000));
    expect(lock_acquire_read_of(a, SEG_PREFIX "1", SEG_RW, 0, 0, &g1), LOCK_BUSY,
           "segment 1 as a new reader while the writer waits");
    expect(lock_acquire_read_of(a, SEG_PREFIX "1", SEG_RW, 1, 0, &g1), LOCK_ACQUIRED,
           "segment 1 by the holder of segment 0");
    expect(lock_release(a, SEG_PREFIX "1", &g1), LOCK_RELEASED, "segment 1's release");
    expect(lock_release(a, SEG_PREFIX "0", &g0), LOCK_RELEASED, "segment 0's release");
    pthread_join(o.thread, NULL);
    expect(o.res, LOCK_ACQUIRED, "the writer, after both");
    expect(lock_release(w, SEG_RW, &o.g), LOCK_RELEASED, "the writer's release");
    lock_session_free(a);
    lock_session_free(w);
    pg_lock_free(l, 1);
}

/* The writer's marks live as long as its lease: the watchdog's renewals move
 * them on (a hold of two leases keeps segment readers out to its end), and
 * a writer that gives up takes them off (its let-go NOTIFYs the segments). */
static void test_marks_follow_the_writers_lease(void **state)
{
    (void)state;
    /* A lease of 1.5 s renewed every 0.5 s: a renewal may come 1 s late on a
     * busy machine before the marks run out. */
    struct lock *l = pg_lock(1500, 1);
    struct lock_session *w = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant gw, gb;
    expect(lock_rw_write_over(w, SEG_RW, SEG_PREFIX, 2, 0, &gw), LOCK_ACQUIRED,
           "the writer");
    int64_t until = clock_now_us() + 3200000; /* two leases and more */
    while (clock_now_us() < until) {
        expect(lock_acquire_read_of(b, SEG_PREFIX "1", SEG_RW, 0, 0, &gb), LOCK_BUSY,
               "a segment reader while the writer holds, renewed");
        clock_sleep_us(100000); /* a probe every 100 ms; what is waited for is time */
    }
    assert_true(lock_valid_until_us(w, &gw) > clock_now_us());
    expect(lock_release(w, SEG_RW, &gw), LOCK_RELEASED, "the writer's release");
    expect(lock_acquire_read_of(b, SEG_PREFIX "1", SEG_RW, 0, 0, &gb), LOCK_ACQUIRED,
           "a segment reader once it is released");
    /* A writer that waits 300 ms for it and gives up: its marks go with it. */
    expect(lock_rw_write_over(w, SEG_RW, SEG_PREFIX, 2, 300, &gw), LOCK_BUSY,
           "a writer that gives up");
    struct lock_grant g0;
    struct lock_session *c = lock_session_new(l, NULL);
    int64_t gave_up_us = clock_now_us();
    expect(lock_acquire_read_of(c, SEG_PREFIX "0", SEG_RW, 0, 5000, &g0), LOCK_ACQUIRED,
           "another segment's reader after it gave up");
    /* Slack: the let-go comes at once; 1 s for a busy machine, under the
     * lease (1.5 s) a mark left behind would keep. */
    assert_true(clock_now_us() - gave_up_us < 1000000);
    expect(lock_release(c, SEG_PREFIX "0", &g0), LOCK_RELEASED, "its release");
    expect(lock_release(b, SEG_PREFIX "1", &gb), LOCK_RELEASED, "segment 1's release");
    lock_session_free(c);
    lock_session_free(w);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* Threads on sessions of their own (as processes are), segment readers and
 * writers over them: a writer is never inside with a reader or a writer. */
struct seg_mixed {
    struct lock *lock;
    atomic_int next, readers, writers, overlaps, failures;
};

static void *seg_mixed_worker(void *arg)
{
    struct seg_mixed *m = arg;
    int me = atomic_fetch_add(&m->next, 1);
    struct lock_session *s = lock_session_new(m->lock, NULL);
    unsigned int seed = (unsigned int)me * 7919u + 1u;
    for (int i = 0; i < 25; i++) {
        struct lock_grant g;
        char key[32];
        int writer = rand_r(&seed) % 5 == 0;
        snprintf(key, sizeof(key), SEG_PREFIX "%d", (int)(rand_r(&seed) % 2));
        lock_status res = writer ? lock_rw_write_over(s, SEG_RW, SEG_PREFIX, 2, 20000, &g)
                                 : lock_acquire_read_of(s, key, SEG_RW, 0, 20000, &g);
        if (res != LOCK_ACQUIRED) {
            atomic_fetch_add(&m->failures, 1);
            continue;
        }
        atomic_int *mine = writer ? &m->writers : &m->readers;
        atomic_fetch_add(mine, 1);
        if (atomic_load(&m->writers) > (writer ? 1 : 0) ||
            (writer && atomic_load(&m->readers) > 0))
            atomic_fetch_add(&m->overlaps, 1);
        clock_sleep_us(2000); /* inside: what another could overlap */
        atomic_fetch_sub(mine, 1);
        lock_release(s, writer ? SEG_RW : key, &g);
    }
    lock_session_free(s);
    return NULL;
}

static void test_segment_load_never_overlaps(void **state)
{
    (void)state;
    struct seg_mixed m = {.lock = pg_lock(5000, 1)};
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&t[i], NULL, seg_mixed_worker, &m);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    printf("segments: %d overlaps, %d failures\n", atomic_load(&m.overlaps),
           atomic_load(&m.failures));
    assert_int_equal(atomic_load(&m.overlaps), 0);
    assert_int_equal(atomic_load(&m.failures), 0);
    pg_lock_free(m.lock, 1);
}

/* ---- the tables ------------------------------------------------------------------- */

/* The plain lock's table as an older build made it gets the column of a
 * writer's marks (nothing of the older build names it), also when made again
 * under a running lock, and the read-write lock's own table is made when
 * missing, also once dropped under a running lock. */
static void test_tables(void **state)
{
    (void)state;
    sql("DROP TABLE IF EXISTS seckill_locks");
    sql("DROP TABLE IF EXISTS seckill_rwlocks");
    sql("CREATE TABLE seckill_locks (key text PRIMARY KEY, owner text, "
        "expires_at timestamptz, version bigint NOT NULL DEFAULT 0)");
    struct lock *l = pg_lock(3000, 1);
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant p, r, w;
    expect(lock_acquire(s, "t:plain", 0, &p), LOCK_ACQUIRED, "a plain lock");
    expect(lock_rw_acquire(s, "t:rw", LOCK_READ, 0, &r), LOCK_ACQUIRED,
           "a read beside it, its table made");
    expect(lock_release(s, "t:rw", &r), LOCK_RELEASED, "the read's release");
    expect(lock_release(s, "t:plain", &p), LOCK_RELEASED, "the plain lock's release");
    assert_string_equal(sql("SELECT count(*) FROM information_schema.columns "
                            "WHERE table_name = 'seckill_locks'"),
                        "5"); /* its four, and writer_until added */
    /* Made again as an older build made it, under the running lock: the
     * reader's attempt that finds the column missing adds it and tries again. */
    sql("DROP TABLE seckill_locks");
    sql("CREATE TABLE seckill_locks (key text PRIMARY KEY, owner text, "
        "expires_at timestamptz, version bigint NOT NULL DEFAULT 0)");
    expect(lock_acquire_read_of(s, "t:seg0", "t:segrw", 0, 0, &p), LOCK_ACQUIRED,
           "a segment reader on the older table");
    expect(lock_release(s, "t:seg0", &p), LOCK_RELEASED, "its release");
    sql("DROP TABLE seckill_rwlocks");
    lock_status res = lock_rw_acquire(s, "t:rw", LOCK_WRITE, 0, &w);
    if (res == LOCK_ERROR) /* the attempt that found it gone: made again */
        res = lock_rw_acquire(s, "t:rw", LOCK_WRITE, 0, &w);
    expect(res, LOCK_ACQUIRED, "a write once the table was dropped");
    expect(lock_release(s, "t:rw", &w), LOCK_RELEASED, "its release");
    lock_session_free(s);
    pg_lock_free(l, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_share),
        cmocka_unit_test(test_writer_excludes_both),
        cmocka_unit_test(test_mixed_load_never_overlaps),
        cmocka_unit_test(test_waiting_writer_keeps_new_readers_out),
        cmocka_unit_test(test_writer_giving_up_lets_readers_in),
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_dead_reader_lease_runs_out),
        cmocka_unit_test(test_dead_writer_lease_runs_out),
        cmocka_unit_test(test_stale_writer_is_fenced),
        cmocka_unit_test(test_stale_writer_release_touches_nothing),
        cmocka_unit_test(test_watchdog_renews_both_sides),
        cmocka_unit_test(test_segment_locks_are_readers),
        cmocka_unit_test(test_waiting_writer_keeps_segment_readers_out),
        cmocka_unit_test(test_held_reader_takes_next_segment),
        cmocka_unit_test(test_marks_follow_the_writers_lease),
        cmocka_unit_test(test_segment_load_never_overlaps),
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
