/* test_lock_pg: the pg lock mode against a real PostgreSQL (one per binary,
 * started once, logging every statement): exclusion, versions as fencing
 * tokens, reentrancy, waiters woken by NOTIFY and not by polling (counted in
 * the server's own statement log, by the waiter's owner token), the steps on
 * an event loop, the watchdog's renewals and a lease taken away, a lease run
 * out and its holder fenced, PostgreSQL stopped and started again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "lock.h"
#include "testutil.h"

static struct test_pg pg;

static int group_setup(void **state)
{
    (void)state;
    static const char *const extra[] = {"-c", "log_statement=all", NULL};
    test_pg_start(&pg, extra);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    test_pg_stop(&pg, 0, 0);
    return 0;
}

/* A pg lock with a ttl_ms lease; attached to the test loop (its watchdog
 * renews) when attach. */
static struct lock *pg_lock(int ttl_ms, int fencing, int attach)
{
    struct lock_config cfg = {
        .ttl_ms = ttl_ms, .fencing = fencing, .timeout_ms = 1000, .postgres = pg.url};
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

/* Runs sql on the test server; its first value, or "" (static buffer). */
static const char *sql(const char *q)
{
    static char out[256];
    out[0] = '\0';
    PGconn *c = PQconnectdb(pg.url);
    PGresult *r = PQexec(c, q);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(out, sizeof(out), "%s", PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("%s: %s", q, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return out;
}

/* The acquire statements the server ran for owner token (its log: the
 * conditional UPDATE's parameters key, owner, ttl; a release's third is a
 * version, a renewal has four). */
static int acquires_of(const char *token, int ttl_ms)
{
    char path[320], pattern[160], line[2048];
    snprintf(path, sizeof(path), "%s/pg.log", pg.dir);
    snprintf(pattern, sizeof(pattern), "\\$2 = '%s', \\$3 = '%d'$", token, ttl_ms);
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        n += regexec(&re, line, 0, NULL, 0) == 0;
    }
    fclose(f);
    regfree(&re);
    return n;
}

static uint64_t wakeups(struct lock *l)
{
    struct lock_stats st;
    lock_stats(l, &st);
    return st.watch_wakeups;
}

/* ---- exclusion ---------------------------------------------------------- */

#define EXCL_THREADS 4
#define EXCL_ROUNDS 40

struct excl {
    struct lock *l;
    atomic_int inside, overlaps, failures;
    long counter;
    uint64_t last_fence; /* inside the lock only */
    int fence_backwards;
};

static void *excl_main(void *arg)
{
    struct excl *e = arg;
    struct lock_session *s = lock_session_new(e->l, NULL);
    for (int i = 0; i < EXCL_ROUNDS; i++) {
        struct lock_grant g;
        if (lock_acquire(s, "t:excl", 10000, &g) != LOCK_ACQUIRED) {
            atomic_fetch_add(&e->failures, 1);
            continue;
        }
        if (atomic_fetch_add(&e->inside, 1) != 0)
            atomic_fetch_add(&e->overlaps, 1);
        if (g.fence <= e->last_fence)
            e->fence_backwards = 1;
        e->last_fence = g.fence;
        long c = e->counter;
        clock_sleep_us(300);
        e->counter = c + 1;
        atomic_fetch_sub(&e->inside, 1);
        if (lock_release(s, "t:excl", &g) != LOCK_RELEASED)
            atomic_fetch_add(&e->failures, 1);
    }
    lock_session_free(s);
    return NULL;
}

/* Threads, each on its own session (its own connection, as separate
 * processes), never overlap; every grant's version is above the last. */
static void test_exclusion_and_tokens(void **state)
{
    (void)state;
    struct excl e = {.l = pg_lock(3000, 1, 1)};
    pthread_t t[EXCL_THREADS];
    for (int i = 0; i < EXCL_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, excl_main, &e), 0);
    for (int i = 0; i < EXCL_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&e.overlaps), 0);
    assert_int_equal(atomic_load(&e.failures), 0);
    assert_int_equal(e.counter, EXCL_THREADS * EXCL_ROUNDS);
    assert_int_equal(e.fence_backwards, 0);
    /* 160 grants, each version above the last (fence_backwards), the last one
     * the row's, at least the database's clock in microseconds when granted */
    char last[32];
    snprintf(last, sizeof(last), "%llu", (unsigned long long)e.last_fence);
    assert_string_equal(sql("SELECT version FROM seckill_locks WHERE key = 't:excl'"), last);
    assert_true(e.last_fence > 1700000000000000ULL); /* past 2023-11-14, in us */
    assert_string_equal(sql("SELECT coalesce(owner, 'free') FROM seckill_locks "
                            "WHERE key = 't:excl'"),
                        "free");
    struct lock_stats st;
    lock_stats(e.l, &st);
    assert_true(st.contended > 0);
    assert_int_equal(st.watch_waiters, 0);
    pg_lock_free(e.l, 1);
}

/* A session that holds a key gets it again (the same token); only its last
 * release frees the row. The token is "<n>@pg", from outside the data Redis,
 * in the pg namespace. */
static void test_reentrant(void **state)
{
    (void)state;
    struct lock *l = pg_lock(3000, 1, 1);
    assert_true(lock_fenced(l));
    assert_true(lock_fence_external(l));
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant g1, g2, gb;
    assert_int_equal(lock_acquire(a, "t:re", 0, &g1), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(a, "t:re", 0, &g2), LOCK_ACQUIRED);
    assert_int_equal(g1.fence, g2.fence);
    char text[LOCK_FENCE_TEXT], want[32];
    lock_fence_text(&g1, text, sizeof(text));
    snprintf(want, sizeof(want), "%llu@pg", (unsigned long long)g1.fence);
    assert_string_equal(text, want);
    assert_int_equal(lock_release(a, "t:re", &g2), LOCK_RELEASED);
    assert_int_equal(lock_acquire(b, "t:re", 0, &gb), LOCK_BUSY);
    assert_int_equal(lock_release(a, "t:re", &g1), LOCK_RELEASED);
    assert_int_equal(lock_acquire(b, "t:re", 0, &gb), LOCK_ACQUIRED);
    assert_true(gb.fence > g1.fence);
    assert_int_equal(lock_release(b, "t:re", &gb), LOCK_RELEASED);
    lock_session_free(a);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* ---- woken by NOTIFY ------------------------------------------------------ */

struct releaser {
    struct lock_session *s;
    const char *key;
    struct lock_grant *g;
    int after_ms;
    int64_t released_us;
};

static void *release_later(void *arg)
{
    struct releaser *r = arg;
    clock_sleep_us((int64_t)r->after_ms * 1000);
    r->released_us = clock_now_us();
    assert_int_equal(lock_release(r->s, r->key, r->g), LOCK_RELEASED);
    return NULL;
}

/* A blocking waiter sleeps on its LISTENing connection: the release's NOTIFY
 * wakes it long before the holder's 10 s lease would run out, and it asked
 * PostgreSQL twice in all (the attempt that found the row taken, the one
 * after the notification). */
static void test_blocking_waiter_woken_by_notify(void **state)
{
    (void)state;
    const int ttl = 10000;
    struct lock *l = pg_lock(ttl, 1, 1);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant ga, gb;
    assert_int_equal(lock_acquire(a, "t:notify", 0, &ga), LOCK_ACQUIRED);
    uint64_t before = wakeups(l);
    struct releaser r = {.s = a, .key = "t:notify", .g = &ga, .after_ms = 300};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_later, &r), 0);
    assert_int_equal(lock_acquire(b, "t:notify", 5000, &gb), LOCK_ACQUIRED);
    int64_t got = clock_now_us();
    pthread_join(t, NULL);
    assert_true(gb.contended);
    assert_true(gb.fence > ga.fence);
    if (got - r.released_us > 500000)
        fail_msg("woken %lld us after the release", (long long)(got - r.released_us));
    assert_int_equal(wakeups(l) - before, 1);
    assert_int_equal(acquires_of(gb.token, ttl), 2);
    assert_int_equal(lock_release(b, "t:notify", &gb), LOCK_RELEASED);
    lock_session_free(a);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* ---- steps on an event loop ------------------------------------------------ */

static void on_step_over(void *arg)
{
    *(int *)arg = 1;
}

/* Returns once the listener of base's loop (pg/apg.c: LISTEN "seckill_locks") has
 * LISTENed and base has taken the answer. Until then a waiter is woken once more
 * when the answer comes (apg_listen: what was notified meanwhile is lost), an attempt
 * that a count of attempts must not see: on a busy machine (CI under stress) the
 * listener's connection came after the steps before a wait, and a count of 2 read 3.
 * The server says idle just before it flushes the answer: 100 ms of turns of base
 * then take it. */
static void listener_ready(struct event_base *base)
{
    const char *q = "select count(*) from pg_stat_activity where state = 'idle' "
                    "and query = 'LISTEN \"seckill_locks\"'"; /* lock/pg_lease.h PG_CHANNEL */
    int64_t deadline = clock_now_us() + 10000000; /* 10 s: a busy machine's connection */
    while (atoi(sql(q)) == 0) {
        if (clock_now_us() > deadline)
            fail_msg("the loop's listener did not LISTEN within 10 s");
        event_base_loop(base, EVLOOP_NONBLOCK);
        clock_sleep_us(10000);
    }
    for (int i = 0; i < 10; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        clock_sleep_us(10000);
    }
}

/* Runs the step st on key until it is over, driving base as an event loop
 * would; st is done there (never from inside lock_step_start). */
static void step_run(struct lock_session *s, const char *key, struct lock_step *st,
                     struct event_base *base)
{
    int over = 0;
    assert_true(st->async);
    lock_step_start(s, key, st, base, on_step_over, &over);
    assert_int_equal(over, 0);
    while (!over)
        event_base_loop(base, EVLOOP_ONCE);
}

/* An acquire in steps on a loop waits for the holder's release, woken by
 * its NOTIFY (one wake-up, two attempts), then releases in steps. A step
 * on a free key is granted at once; one that finds it taken with no wait
 * left is busy. */
static void test_steps_woken_by_notify(void **state)
{
    (void)state;
    const int ttl = 10000;
    struct lock *l = pg_lock(ttl, 1, 1);
    struct lock_session *a = lock_session_new(l, NULL), *s = lock_session_new(l, NULL);
    struct event_base *base = event_base_new();
    struct lock_step st;
    struct lock_grant ga, g, g2;

    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:steps", 1000, &st), 1);
    step_run(s, "t:steps", &st, base);
    assert_int_equal(lock_try_done(s, "t:steps", &st, &g), LOCK_ACQUIRED);
    lock_step_init(&st); /* re-entered: decided at once */
    assert_int_equal(lock_try_step(s, "t:steps", 0, &st), 1);
    assert_false(st.async);
    assert_int_equal(lock_try_done(s, "t:steps", &st, &g2), LOCK_ACQUIRED);
    assert_int_equal(g2.fence, g.fence);
    lock_release_step(s, "t:steps", &g2, &st);
    assert_false(st.async);
    assert_int_equal(lock_release_done(s, "t:steps", &g2, &st), LOCK_RELEASED);
    lock_release_step(s, "t:steps", &g, &st);
    assert_true(st.after);
    step_run(s, "t:steps", &st, base);
    assert_int_equal(lock_release_done(s, "t:steps", &g, &st), LOCK_RELEASED);

    assert_int_equal(lock_acquire(a, "t:steps", 0, &ga), LOCK_ACQUIRED);
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:steps", 0, &st), 1);
    step_run(s, "t:steps", &st, base);
    assert_int_equal(lock_try_done(s, "t:steps", &st, &g), LOCK_BUSY);

    listener_ready(base);
    uint64_t before = wakeups(l);
    struct releaser r = {.s = a, .key = "t:steps", .g = &ga, .after_ms = 300};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_later, &r), 0);
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:steps", 5000, &st), 1);
    step_run(s, "t:steps", &st, base);
    int64_t got = clock_now_us();
    pthread_join(t, NULL);
    assert_int_equal(lock_try_done(s, "t:steps", &st, &g), LOCK_ACQUIRED);
    assert_true(g.contended);
    assert_true(g.fence > ga.fence);
    if (got - r.released_us > 500000)
        fail_msg("woken %lld us after the release", (long long)(got - r.released_us));
    assert_int_equal(wakeups(l) - before, 1);
    assert_int_equal(acquires_of(g.token, ttl), 2);
    lock_release_step(s, "t:steps", &g, &st);
    step_run(s, "t:steps", &st, base);
    assert_int_equal(lock_release_done(s, "t:steps", &g, &st), LOCK_RELEASED);

    lock_session_free(s); /* its loop connections: closed on its loop's thread */
    lock_session_free(a);
    event_base_free(base);
    pg_lock_free(l, 1);
}

/* A step given up (the hold abandoned) leaves nothing held: the grant that
 * comes after the cancel is let go, and another takes the key at once. The
 * loop's first step makes the row and has its listener LISTEN (an attempt
 * waits for that on a new loop), so that the cancel finds the attempt in
 * flight. */
static void test_step_cancelled_lets_go(void **state)
{
    (void)state;
    struct lock *l = pg_lock(10000, 1, 1);
    struct lock_session *s = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct event_base *base = event_base_new();
    struct lock_step st;
    struct lock_grant g;
    int over = 0;
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:cancel", 1000, &st), 1);
    step_run(s, "t:cancel", &st, base);
    assert_int_equal(lock_try_done(s, "t:cancel", &st, &g), LOCK_ACQUIRED); /* the row */
    lock_release_step(s, "t:cancel", &g, &st);
    step_run(s, "t:cancel", &st, base);
    assert_int_equal(lock_release_done(s, "t:cancel", &g, &st), LOCK_RELEASED);
    char want[128];
    snprintf(want, sizeof(want), "SELECT version > %llu AND owner IS NULL "
             "FROM seckill_locks WHERE key = 't:cancel'", (unsigned long long)g.fence);
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:cancel", 1000, &st), 1);
    lock_step_start(s, "t:cancel", &st, base, on_step_over, &over);
    lock_step_cancel(s, &st);
    /* the grant comes and is let go: the loop runs until the row was taken
     * once more (its version) and is free again */
    int64_t until = clock_now_us() + 5000000;
    while (clock_now_us() < until &&
           strcmp(sql(want), "t") != 0) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    assert_int_equal(over, 0);
    assert_string_equal(sql(want), "t");
    assert_int_equal(lock_acquire(b, "t:cancel", 0, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(b, "t:cancel", &g), LOCK_RELEASED);
    lock_session_free(s);
    lock_session_free(b);
    event_base_free(base);
    pg_lock_free(l, 1);
}

/* ---- leases ---------------------------------------------------------------- */

static int lost_once(void *arg)
{
    struct lock_stats st;
    lock_stats(arg, &st);
    return st.leases_lost == 1;
}

/* The watchdog renews a held lease past its ttl (nobody else gets the key);
 * a lease taken away behind the holder's back (the row's owner changed) is
 * found lost at the next renewal: counted, valid_until 0, release NOT_HELD. */
static void test_watchdog_renews_and_finds_loss(void **state)
{
    (void)state;
    struct lock *l = pg_lock(300, 1, 1);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant g, gb;
    assert_int_equal(lock_acquire(a, "t:renew", 0, &g), LOCK_ACQUIRED);
    clock_sleep_us(1000000);
    assert_int_equal(lock_acquire(b, "t:renew", 0, &gb), LOCK_BUSY);
    assert_true(lock_valid_until_us(a, &g) > clock_now_us());
    struct lock_stats st;
    lock_stats(l, &st);
    assert_true(st.renewals >= 2);
    sql("UPDATE seckill_locks SET owner = 'thief', version = version + 1 "
        "WHERE key = 't:renew'");
    if (!test_wait_for(lost_once, l, 2000))
        fail_msg("the lease taken away was not found lost");
    assert_int_equal(lock_valid_until_us(a, &g), 0);
    assert_int_equal(lock_release(a, "t:renew", &g), LOCK_NOT_HELD);
    lock_session_free(a);
    lock_session_free(b);
    pg_lock_free(l, 1);
}

/* Not attached (no watchdog), a lease runs out on the database's clock: a
 * second contender takes the key with a higher version (the first holder's
 * token is fenced off by it), and the first one's release touches nothing
 * of the second's. With fencing off the mode hands out no token to check. */
static void test_lease_runs_out(void **state)
{
    (void)state;
    struct lock *l = pg_lock(200, 1, 0);
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant ga, gb;
    assert_int_equal(lock_acquire(a, "t:expire", 0, &ga), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(b, "t:expire", 0, &gb), LOCK_BUSY);
    assert_int_equal(lock_acquire(b, "t:expire", 3000, &gb), LOCK_ACQUIRED);
    assert_true(gb.fence > ga.fence);
    assert_true(gb.contended);
    assert_true(lock_valid_until_us(a, &ga) < clock_now_us());
    assert_int_equal(lock_release(a, "t:expire", &ga), LOCK_NOT_HELD);
    char owner[64];
    snprintf(owner, sizeof(owner), "%s",
             sql("SELECT owner FROM seckill_locks WHERE key = 't:expire'"));
    assert_string_equal(owner, gb.token);
    assert_int_equal(lock_release(b, "t:expire", &gb), LOCK_RELEASED);
    lock_session_free(a);
    lock_session_free(b);
    lock_free(l);

    l = pg_lock(200, 0, 0);
    assert_false(lock_fenced(l));
    assert_false(lock_fence_external(l));
    lock_free(l);
}

/* ---- PostgreSQL away and back ---------------------------------------------- */

/* While the database is down an acquire answers LOCK_ERROR at once (blocking
 * and in steps); once it is back, both forms take locks again on the same
 * sessions (new connections: a loop's connection is made again at most every
 * APG_RETRY_MS, so the first acquires after the restart may still answer
 * LOCK_ERROR). */
static void test_database_down_and_back(void **state)
{
    (void)state;
    struct lock *l = pg_lock(3000, 1, 1);
    struct lock_session *a = lock_session_new(l, NULL), *s = lock_session_new(l, NULL);
    struct event_base *base = event_base_new();
    struct lock_step st;
    struct lock_grant g;
    assert_int_equal(lock_acquire(a, "t:down", 0, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(a, "t:down", &g), LOCK_RELEASED);
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:down", 1000, &st), 1);
    step_run(s, "t:down", &st, base);
    assert_int_equal(lock_try_done(s, "t:down", &st, &g), LOCK_ACQUIRED);
    lock_release_step(s, "t:down", &g, &st);
    step_run(s, "t:down", &st, base);
    assert_int_equal(lock_release_done(s, "t:down", &g, &st), LOCK_RELEASED);

    test_pg_stop(&pg, 0, 1);
    int64_t t0 = clock_now_us();
    assert_int_equal(lock_acquire(a, "t:down", 1000, &g), LOCK_ERROR);
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:down", 1000, &st), 1);
    step_run(s, "t:down", &st, base);
    assert_int_equal(lock_try_done(s, "t:down", &st, &g), LOCK_ERROR);
    assert_true(clock_now_us() - t0 < 2500000);

    test_pg_restart(&pg);
    lock_status res = LOCK_ERROR;
    for (int i = 0; i < 50 && res != LOCK_ACQUIRED; i++) { /* apg: 100 ms between tries */
        res = lock_acquire(a, "t:down", 1000, &g);
        if (res != LOCK_ACQUIRED)
            clock_sleep_us(50000);
    }
    assert_int_equal(res, LOCK_ACQUIRED);
    assert_int_equal(lock_release(a, "t:down", &g), LOCK_RELEASED);
    res = LOCK_ERROR;
    for (int i = 0; i < 50 && res != LOCK_ACQUIRED; i++) { /* apg: 100 ms between tries */
        lock_step_init(&st);
        assert_int_equal(lock_try_step(s, "t:down", 1000, &st), 1);
        step_run(s, "t:down", &st, base);
        res = lock_try_done(s, "t:down", &st, &g);
        if (res != LOCK_ACQUIRED)
            clock_sleep_us(50000);
    }
    assert_int_equal(res, LOCK_ACQUIRED);
    lock_release_step(s, "t:down", &g, &st);
    step_run(s, "t:down", &st, base);
    assert_int_equal(lock_release_done(s, "t:down", &g, &st), LOCK_RELEASED);
    lock_session_free(s);
    lock_session_free(a);
    event_base_free(base);
    pg_lock_free(l, 1);
}

/* Without --postgres the mode is refused. */
static void test_needs_postgres(void **state)
{
    (void)state;
    struct lock_config cfg = {.ttl_ms = 1000, .fencing = 1};
    char err[256] = "";
    assert_null(lock_new("pg", &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "--postgres"));
    assert_true(lock_mode_known("pg"));
}

/* A lock table made anew (dropped, restored from a backup) hands out versions
 * above those handed out before, not 1 again: the segments' marks in the data
 * Redis still hold the old ones, and a version below them would be refused
 * until it passed them (inventory/lua/fence.lua). */
static void test_table_made_anew(void **state)
{
    (void)state;
    struct lock *l = pg_lock(3000, 1, 0);
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant g1, g2;
    assert_int_equal(lock_acquire(s, "t:anew", 0, &g1), LOCK_ACQUIRED);
    assert_int_equal(lock_release(s, "t:anew", &g1), LOCK_RELEASED);
    sql("DROP TABLE seckill_locks");
    sql("CREATE TABLE seckill_locks (key text PRIMARY KEY, owner text, "
        "expires_at timestamptz, version bigint NOT NULL DEFAULT 0)");
    assert_int_equal(lock_acquire(s, "t:anew", 0, &g2), LOCK_ACQUIRED);
    if (g2.fence <= g1.fence)
        fail_msg("a table made anew granted version %llu after %llu",
                 (unsigned long long)g2.fence, (unsigned long long)g1.fence);
    assert_int_equal(lock_release(s, "t:anew", &g2), LOCK_RELEASED);
    lock_session_free(s);
    pg_lock_free(l, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_needs_postgres),
        cmocka_unit_test(test_exclusion_and_tokens),
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_table_made_anew),
        cmocka_unit_test(test_blocking_waiter_woken_by_notify),
        cmocka_unit_test(test_steps_woken_by_notify),
        cmocka_unit_test(test_step_cancelled_lets_go),
        cmocka_unit_test(test_watchdog_renews_and_finds_loss),
        cmocka_unit_test(test_lease_runs_out),
        cmocka_unit_test(test_database_down_and_back),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
