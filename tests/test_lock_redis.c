/* test_lock_redis: what the redis mode adds over a plain SET NX lease —
 * reentrancy, the watchdog, waking waiters on release, a wait queue that
 * hands the lock to no waiter that is gone, and its cost in Redis commands
 * under contention — against a real redis-server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "lock.h"
#include "testutil.h"

static struct test_redis srv;
static struct rconn *admin; /* the test's own look at Redis */

static int group_setup(void **state)
{
    (void)state;
    test_redis_start(&srv, NULL);
    admin = rconn_new("127.0.0.1", srv.port, NULL, 2000);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rconn_free(admin);
    test_redis_stop(&srv, 1, 0);
    return 0;
}

static struct rconn *conn_new(void)
{
    return rconn_new("127.0.0.1", srv.port, NULL, 2000);
}

/* A redis-mode lock (ttl_ms, max_lease_ms) on key, reset first, and n
 * sessions of it in p, which frees the lock on close. */
static struct lock *sessions_open(struct test_sessions *p, const char *key, int ttl_ms,
                                  int max_lease_ms, int n)
{
    test_lock_key_del(admin, key);
    struct lock *l = test_lock_new("redis", ttl_ms, max_lease_ms, 0);
    test_sessions_open(p, l, srv.port, n);
    return l;
}

static void admin_cmd(const char *fmt, const char *arg)
{
    redisReply *r = rconn_command(admin, fmt, arg);
    assert_non_null(r);
    freeReplyObject(r);
}

/* A numeric field "name:value" of an INFO section; -1 when absent. */
static long long info_field(const char *section, const char *name)
{
    redisReply *r = rconn_command(admin, "INFO %s", section);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char pattern[128];
    snprintf(pattern, sizeof(pattern), "\n%s:", name);
    const char *p = strstr(r->str, pattern);
    long long v = -1;
    if (!p && strncmp(r->str, pattern + 1, strlen(pattern) - 1) == 0)
        p = r->str - 1;
    if (p)
        v = atoll(p + strlen(pattern));
    freeReplyObject(r);
    return v;
}

/* calls= of one command in INFO commandstats (0 when never called). */
static long long command_calls(const char *cmd)
{
    char name[64];
    snprintf(name, sizeof(name), "cmdstat_%s", cmd);
    redisReply *r = rconn_command(admin, "INFO commandstats");
    assert_non_null(r);
    char pattern[80];
    snprintf(pattern, sizeof(pattern), "%s:calls=", name);
    const char *p = strstr(r->str, pattern);
    long long v = p ? atoll(p + strlen(pattern)) : 0;
    freeReplyObject(r);
    return v;
}

/* Sum of calls= over every command in INFO commandstats but INFO/CONFIG. */
static long long all_calls(void)
{
    redisReply *r = rconn_command(admin, "INFO commandstats");
    assert_non_null(r);
    long long total = 0;
    for (const char *p = strstr(r->str, "cmdstat_"); p; p = strstr(p + 1, "cmdstat_")) {
        if (strncmp(p, "cmdstat_info:", 13) == 0 || strncmp(p, "cmdstat_config", 14) == 0)
            continue;
        const char *c = strstr(p, "calls=");
        if (c)
            total += atoll(c + 6);
    }
    freeReplyObject(r);
    return total;
}

static int blocked_is(long long n)
{
    return info_field("clients", "blocked_clients") == n;
}

static int one_blocked(void *arg)
{
    (void)arg;
    return blocked_is(1);
}

static int two_blocked(void *arg)
{
    (void)arg;
    return blocked_is(2);
}

/* The id of a client blocked in cmd (a blocking command, or one that CLIENT
 * PAUSE holds back); 0 when there is none. */
static long long blocked_client(const char *cmd)
{
    redisReply *r = rconn_command(admin, "CLIENT LIST TYPE normal");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char want[64];
    snprintf(want, sizeof(want), " cmd=%s ", cmd);
    long long id = 0;
    for (char *line = r->str; line && *line && !id;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        const char *flags = strstr(line, " flags=");
        if (strncmp(line, "id=", 3) == 0 && strstr(line, want) && flags) {
            size_t n = strcspn(flags + 7, " ");
            if (memchr(flags + 7, 'b', n))
                id = atoll(line + 3);
        }
        line = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return id;
}

static int acquire_held_back(void *arg)
{
    (void)arg;
    return blocked_client("evalsha") != 0;
}

static void admin_ok(redisReply *r)
{
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis: %s", r->str);
    freeReplyObject(r);
}

/* Kills client id and ends a CLIENT PAUSE in one transaction: the killed
 * client's command never runs, and whatever it sends next is not held back. */
static void kill_and_unpause(long long id)
{
    assert_true(id > 0);
    admin_ok(rconn_command(admin, "MULTI"));
    admin_ok(rconn_command(admin, "CLIENT KILL ID %lld", id));
    admin_ok(rconn_command(admin, "CLIENT UNPAUSE"));
    admin_ok(rconn_command(admin, "EXEC"));
}

/* Redis's clock in ms, as the lock scripts read it. */
static long long redis_now_ms(void)
{
    redisReply *r = rconn_command(admin, "TIME");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

static long long key_integer(const char *fmt, const char *key)
{
    redisReply *r = rconn_command(admin, fmt, key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Queues a stale entry of owner on key's wait queue, waiting until
 * deadline_ms (Redis clock), as an acquire of owner's session leaves one when
 * its attempt and its clean-up both failed. */
static void queue_stale_entry(const char *key, const char *owner, long long deadline_ms)
{
    admin_ok(rconn_command(admin, "RPUSH %s:queue %lld:%s", key, deadline_ms, owner));
}

/* The next buyer of key must get it at once (the lease is far longer). */
static void next_buyer_gets_in(struct lock_session *b, const char *key, int ttl)
{
    struct lock_grant g;
    int64_t t0 = clock_now_us();
    lock_status st = lock_acquire(b, key, 1000, &g);
    long long took_ms = (clock_now_us() - t0) / 1000;
    if (st != LOCK_ACQUIRED || took_ms > 100)
        fail_msg("the next buyer: %s after %lld ms (lease %d ms)",
                 st == LOCK_ACQUIRED ? "acquired" : "not acquired", took_ms, ttl);
    assert_int_equal(lock_release(b, key, &g), LOCK_RELEASED);
}

/* ---- reentrancy ------------------------------------------------------------ */

static void test_reentrant(void **state)
{
    (void)state;
    const char *key = "t:reentrant";
    struct test_sessions p;
    sessions_open(&p, key, 5000, 0, 2);
    struct lock_session *a = p.s[0], *b = p.s[1];
    struct lock_grant g1, g2, gb;
    assert_int_equal(lock_acquire(a, key, 0, &g1), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(a, key, 0, &g2), LOCK_ACQUIRED); /* re-entered */
    assert_int_equal(g2.fence, g1.fence); /* the same ownership, the same fence */
    assert_string_equal(g1.token, g2.token);
    redisReply *r = rconn_command(admin, "HGET %s %s", key, g1.token);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "2");
    freeReplyObject(r);
    assert_int_equal(lock_acquire(b, key, 0, &gb), LOCK_BUSY);
    assert_int_equal(lock_release(a, key, &g2), LOCK_RELEASED);
    assert_int_equal(lock_acquire(b, key, 0, &gb), LOCK_BUSY); /* one hold left */
    assert_int_equal(lock_release(a, key, &g1), LOCK_RELEASED);
    assert_int_equal(lock_release(a, key, &g1), LOCK_NOT_HELD); /* no more holds */
    assert_int_equal(lock_acquire(b, key, 0, &gb), LOCK_ACQUIRED);
    assert_true(gb.fence > g1.fence);
    assert_int_equal(lock_release(b, key, &gb), LOCK_RELEASED);
    test_sessions_close(&p);
}

/* ---- watchdog -------------------------------------------------------------- */

/* A holder that keeps working past its ttl keeps the lock: the watchdog renews. */
static void test_watchdog_renews(void **state)
{
    (void)state;
    const char *key = "t:watchdog";
    const int ttl = 300;
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, ttl, 10000, 2);
    struct lock_session *a = p.s[0], *b = p.s[1];
    struct lock_grant ga, gb;
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    int64_t first_valid = lock_valid_until_us(a, &ga);
    assert_int_equal(first_valid, ga.valid_until_us);
    /* B waits three leases long and does not get in. */
    assert_int_equal(lock_acquire(b, key, 3 * ttl, &gb), LOCK_BUSY);
    struct lock_stats st;
    lock_stats(l, &st);
    assert_true(st.renewals >= 5);
    assert_int_equal(st.leases_lost, 0);
    int64_t valid = lock_valid_until_us(a, &ga);
    assert_true(valid > clock_now_us());
    assert_true(valid > first_valid + 2 * ttl * 1000);
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    /* Renewal stops on release: nothing is renewed over two periods. */
    lock_stats(l, &st);
    uint64_t renewed = st.renewals;
    clock_sleep_us(2 * ttl * 1000 / 3 + 50000);
    lock_stats(l, &st);
    assert_int_equal(st.renewals, renewed);
    test_sessions_close(&p);
}

/* The watchdog gives up at max_lease_ms: a holder that never releases loses it. */
static void test_watchdog_max_lease(void **state)
{
    (void)state;
    const char *key = "t:maxlease";
    const int ttl = 200, max_lease = 600;
    struct test_sessions p;
    sessions_open(&p, key, ttl, max_lease, 2);
    struct lock_session *a = p.s[0], *b = p.s[1];
    struct lock_grant ga, gb;
    int64_t t0 = clock_now_us();
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(b, key, 3000, &gb), LOCK_ACQUIRED);
    int64_t took_ms = (clock_now_us() - t0) / 1000;
    if (took_ms < max_lease - 30 || took_ms > max_lease + 150)
        fail_msg("lease ended after %lld ms, max lease %d", (long long)took_ms,
                 max_lease);
    assert_int_equal(lock_release(a, key, &ga), LOCK_NOT_HELD);
    assert_int_equal(lock_release(b, key, &gb), LOCK_RELEASED);
    test_sessions_close(&p);
}

struct lost_arg {
    struct lock *lock;
};

static int lease_lost_counted(void *arg)
{
    struct lock_stats st;
    lock_stats(((struct lost_arg *)arg)->lock, &st);
    return st.leases_lost == 1;
}

/* A lease taken away behind the holder's back (here: deleted, as a failover
 * would) is noticed by the next renewal, counted, and no longer renewed. */
static void test_watchdog_notices_lost_lease(void **state)
{
    (void)state;
    const char *key = "t:lost";
    const int ttl = 300;
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, ttl, 10000, 2);
    struct lock_session *a = p.s[0], *b = p.s[1];
    struct lock_grant ga, gb;
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    admin_cmd("DEL %s", key);
    assert_int_equal(lock_acquire(b, key, 0, &gb), LOCK_ACQUIRED);
    struct lost_arg arg = {l};
    assert_true(test_wait_for(lease_lost_counted, &arg, 2 * ttl));
    assert_int_equal(lock_valid_until_us(a, &ga), 0);
    /* B's lease was not touched by A's renewals. */
    assert_true(lock_valid_until_us(b, &gb) > clock_now_us());
    assert_int_equal(lock_release(a, key, &ga), LOCK_NOT_HELD);
    assert_int_equal(lock_release(b, key, &gb), LOCK_RELEASED);
    test_sessions_close(&p);
}

/* ---- waking waiters ---------------------------------------------------------- */

struct waiter {
    struct lock *lock;
    const char *key;
    int wait_ms;
    lock_status status;
    int64_t acquired_at_us;
    struct lock_grant grant;
    pthread_t thread;
    /* released by the test when it is done looking */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int may_release;
    atomic_int acquired;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    struct rconn *rc = conn_new();
    struct lock_session *s = lock_session_new(w->lock, rc);
    w->status = lock_acquire(s, w->key, w->wait_ms, &w->grant);
    w->acquired_at_us = clock_now_us();
    atomic_store(&w->acquired, 1);
    if (w->status == LOCK_ACQUIRED) {
        pthread_mutex_lock(&w->mu);
        while (!w->may_release)
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        lock_release(s, w->key, &w->grant);
    }
    lock_session_free(s);
    rconn_free(rc);
    return NULL;
}

static void waiter_start(struct waiter *w, struct lock *l, const char *key, int wait_ms)
{
    memset(w, 0, sizeof(*w));
    w->lock = l;
    w->key = key;
    w->wait_ms = wait_ms;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    assert_int_equal(pthread_create(&w->thread, NULL, waiter_main, w), 0);
}

static void waiter_let_go(struct waiter *w)
{
    pthread_mutex_lock(&w->mu);
    w->may_release = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_join(struct waiter *w)
{
    waiter_let_go(w);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

static int has_acquired(void *arg)
{
    return atomic_load(&((struct waiter *)arg)->acquired);
}

/* A blocked waiter gets the lock as soon as the holder releases it, not when
 * the holder's (long) lease would have run out. */
static void test_release_wakes_waiter(void **state)
{
    (void)state;
    const char *key = "t:wake";
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, 10000, 0, 1);
    struct lock_session *a = p.s[0];
    struct lock_grant ga;
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    struct waiter w;
    waiter_start(&w, l, key, 5000);
    assert_true(test_wait_for(one_blocked, NULL, 2000));
    int64_t released_at = clock_now_us();
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    assert_true(test_wait_for(has_acquired, &w, 2000));
    assert_int_equal(w.status, LOCK_ACQUIRED);
    assert_true(w.grant.contended);
    int64_t latency_us = w.acquired_at_us - released_at;
    if (latency_us > 50000)
        fail_msg("waiter got in %lld us after the release", (long long)latency_us);
    waiter_join(&w);
    test_sessions_close(&p);
}

/* Two blocked waiters, one release: one is woken and gets in, the other stays
 * blocked (it makes no attempt at all) until the next release. */
static void test_release_wakes_one(void **state)
{
    (void)state;
    const char *key = "t:wakeone";
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, 10000, 0, 1);
    struct lock_session *a = p.s[0];
    struct lock_grant ga;
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    struct waiter w[2];
    waiter_start(&w[0], l, key, 5000);
    waiter_start(&w[1], l, key, 5000);
    assert_true(test_wait_for(two_blocked, NULL, 2000));
    admin_cmd("CONFIG RESETSTAT%s", "");
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    struct waiter *first = NULL, *second = NULL;
    for (int i = 0; i < 200 && !first; i++) {
        for (int j = 0; j < 2; j++)
            if (atomic_load(&w[j].acquired))
                first = &w[j], second = &w[1 - j];
        if (!first)
            clock_sleep_us(5000);
    }
    assert_non_null(first);
    assert_int_equal(first->status, LOCK_ACQUIRED);
    assert_true(test_wait_for(one_blocked, NULL, 1000));
    /* The release handed it over: no attempt by either waiter since. */
    assert_int_equal(command_calls("evalsha"), 1);
    assert_false(atomic_load(&second->acquired));
    waiter_let_go(first);
    assert_true(test_wait_for(has_acquired, second, 2000));
    assert_int_equal(second->status, LOCK_ACQUIRED);
    waiter_join(&w[0]);
    waiter_join(&w[1]);
    test_sessions_close(&p);
}

/* The steps keep the caller's commands inside the lock: a command pipelined
 * right behind a step that grants (st->last) runs under the lock, and the
 * release's step may go in one pipeline behind the holder's last command (a
 * free lock costs no round trip of its own). A waiter's read pipelined with
 * its first, taken attempt ran outside the lock (the step says busy: the
 * caller drops it); once the lock is handed over it reads again and sees the
 * holder's last write. */

/* Sends st's commands (all on the data Redis) and then extra in one pipeline
 * on rc; hands the step's answers over and returns extra's (caller frees). */
static redisReply *step_pipe(struct rconn *rc, struct lock_session *s, const char *key,
                             struct lock_step *st, const struct rcmd *extra,
                             int extra_first)
{
    struct rpipe p;
    for (int i = 0; i < st->ncmd; i++) {
        assert_int_equal(st->node[i], -1);
        assert_int_equal(rconn_prepare(rc, &st->cmd[i]), RCONN_OK);
    }
    assert_int_equal(rpipe_begin(&p, rc), RCONN_OK);
    if (extra_first)
        assert_int_equal(rpipe_append(&p, extra), RCONN_OK);
    for (int i = 0; i < st->ncmd; i++)
        assert_int_equal(rpipe_append(&p, &st->cmd[i]), RCONN_OK);
    if (!extra_first)
        assert_int_equal(rpipe_append(&p, extra), RCONN_OK);
    redisReply *r = extra_first ? rpipe_collect(&p) : NULL;
    for (int i = 0; i < st->ncmd; i++) {
        redisReply *a = rpipe_collect(&p);
        lock_step_answer(s, key, st, a);
        if (a)
            freeReplyObject(a);
    }
    if (!extra_first)
        r = rpipe_collect(&p);
    rpipe_end(&p);
    return r;
}

struct reader {
    struct lock *lock;
    const char *key, *data_key;
    lock_status status;
    char first[32], seen[32];
    pthread_t thread;
};

static void *reader_main(void *arg)
{
    struct reader *w = arg;
    struct rconn *rc = rconn_new("127.0.0.1", srv.port, NULL, 10000);
    struct lock_session *s = lock_session_new(w->lock, rc);
    const char *argv[] = {"GET", w->data_key};
    struct rcmd read = {.argc = 2, .argv = argv};
    struct lock_step st;
    struct lock_grant g;
    lock_step_init(&st);
    lock_try_step(s, w->key, 5000, &st);
    redisReply *r = step_pipe(rc, s, w->key, &st, &read, 0);
    snprintf(w->first, sizeof(w->first), "%s", r && r->str ? r->str : "?");
    freeReplyObject(r);
    w->status = lock_try_done(s, w->key, &st, &g); /* taken: queued */
    if (w->status == LOCK_BUSY && st.entry[0]) {
        lock_handoff_step(s, w->key, 5000000, &st);
        r = rconn_run(rc, &st.cmd[0]);
        w->status = lock_handoff_done(s, w->key, &st, r, &g);
        if (r)
            freeReplyObject(r);
    }
    if (w->status == LOCK_ACQUIRED) {
        r = rconn_run(rc, &read);
        snprintf(w->seen, sizeof(w->seen), "%s", r && r->str ? r->str : "?");
        if (r)
            freeReplyObject(r);
        lock_release(s, w->key, &g);
    }
    lock_session_free(s);
    rconn_free(rc);
    return NULL;
}

static void test_steps_keep_commands_inside_the_lock(void **state)
{
    (void)state;
    const char *key = "t:pipe", *data_key = "t:pipe:x";
    admin_cmd("SET %s before", data_key);
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, 10000, 0, 2);
    struct lock_session *a = p.s[0];
    const char *get_argv[] = {"GET", data_key};
    struct rcmd read = {.argc = 2, .argv = get_argv};
    struct lock_step st;
    struct lock_grant ga;
    lock_step_init(&st);
    lock_try_step(a, key, 0, &st);
    assert_true(st.last); /* what follows it runs under a grant by it */
    redisReply *r = step_pipe(p.rc[0], a, key, &st, &read, 0);
    assert_int_equal(lock_try_done(a, key, &st, &ga), LOCK_ACQUIRED);
    assert_non_null(r);
    assert_string_equal(r->str, "before");
    freeReplyObject(r);

    struct reader w = {.lock = l, .key = key, .data_key = data_key};
    assert_int_equal(pthread_create(&w.thread, NULL, reader_main, &w), 0);
    assert_true(test_wait_for(one_blocked, NULL, 2000)); /* queued, in BLPOP */
    const char *set_argv[] = {"SET", data_key, "written under the lock"};
    struct rcmd write = {.argc = 3, .argv = set_argv};
    lock_release_step(a, key, &ga, &st);
    assert_false(st.after); /* it may go behind the write, in one pipeline */
    r = step_pipe(p.rc[0], a, key, &st, &write, 1);
    assert_int_equal(lock_release_done(a, key, &ga, &st), LOCK_RELEASED);
    assert_non_null(r);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    pthread_join(w.thread, NULL);
    assert_string_equal(w.first, "before"); /* read outside the lock: dropped */
    assert_int_equal(w.status, LOCK_ACQUIRED);
    assert_string_equal(w.seen, "written under the lock");

    /* A busy lock grants nothing: the read pipelined with the try ran outside
     * it, and a try with no wait does not queue. */
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    struct lock_session *b = p.s[1];
    struct lock_grant gb;
    lock_step_init(&st);
    lock_try_step(b, key, 0, &st);
    r = step_pipe(p.rc[1], b, key, &st, &read, 0);
    freeReplyObject(r);
    assert_int_equal(lock_try_done(b, key, &st, &gb), LOCK_BUSY);
    assert_string_equal(st.entry, "");
    assert_int_equal(key_integer("LLEN %s:queue", key), 0);
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    test_sessions_close(&p);
}

/* A holder that dies without releasing sends no wake; its lease running out
 * still lets the waiter in, soon after the ttl. */
static void test_crashed_holder(void **state)
{
    (void)state;
    const char *key = "t:crash";
    test_lock_key_del(admin, key);
    const int ttl = 300;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct test_sessions c;
        test_sessions_open(&c, test_lock_new("redis", ttl, 10000, 0), srv.port, 1);
        struct lock_grant g;
        _exit(lock_acquire(c.s[0], key, 0, &g) == LOCK_ACQUIRED ? 0 : 1); /* no release */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int64_t crashed_at = clock_now_us();
    struct test_sessions p;
    test_sessions_open(&p, test_lock_new("redis", ttl, 0, 0), srv.port, 1);
    struct lock_session *b = p.s[0];
    struct lock_grant gb;
    assert_int_equal(lock_acquire(b, key, 5000, &gb), LOCK_ACQUIRED);
    int64_t took_ms = (clock_now_us() - crashed_at) / 1000;
    if (took_ms > ttl + 100)
        fail_msg("waiter got in %lld ms after the crash (ttl %d)", (long long)took_ms,
                 ttl);
    assert_int_equal(lock_release(b, key, &gb), LOCK_RELEASED);
    test_sessions_close(&p);
}

/* ---- wait-queue hygiene ------------------------------------------------------ */

struct queued_acquire {
    struct lock_session *session;
    const char *key;
    int wait_ms;
    lock_status status;
};

static void *queued_acquire_main(void *arg)
{
    struct queued_acquire *q = arg;
    struct lock_grant g;
    q->status = lock_acquire(q->session, q->key, q->wait_ms, &g);
    return NULL;
}

/* A waiter whose retry fails with a connection error leaves no queue entry
 * behind. Otherwise a release hands the lock to that stale entry: when the
 * same session later takes the lock through the free path, its own release
 * does, and the next buyer is refused busy for a whole lease. */
static void test_failed_retry_leaves_the_queue(void **state)
{
    (void)state;
    const char *key = "t:failedretry";
    const int ttl = 10000;
    struct test_sessions p;
    sessions_open(&p, key, ttl, 0, 2);
    struct lock_session *s = p.s[0], *b = p.s[1];
    /* Held by an instance elsewhere. */
    admin_ok(rconn_command(admin, "HSET %s elsewhere 1", key));
    admin_ok(rconn_command(admin, "PEXPIRE %s %d", key, ttl));
    struct queued_acquire q = {.session = s, .key = key, .wait_ms = 8000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, queued_acquire_main, &q), 0);
    assert_true(test_wait_for(one_blocked, NULL, 2000)); /* queued, in BLPOP */
    /* Its connection breaks while it waits; its retry (held back by a pause)
     * loses its connection too, on the way. */
    admin_ok(rconn_command(admin, "CLIENT PAUSE 5000 WRITE"));
    admin_ok(rconn_command(admin, "CLIENT KILL ID %lld", blocked_client("blpop")));
    assert_true(test_wait_for(acquire_held_back, NULL, 2000));
    kill_and_unpause(blocked_client("evalsha"));
    pthread_join(t, NULL);
    assert_int_equal(q.status, LOCK_ERROR);
    /* It left the queue: no release, by anyone, hands the lock to it. */
    long long left = key_integer("LLEN %s:queue", key);
    if (left != 0)
        fail_msg("the failed acquire left %lld entries in the queue", left);
    /* The holder's lease runs out (here: deleted); the same session takes the
     * free lock, then releases it. */
    admin_cmd("DEL %s", key);
    struct lock_grant g;
    assert_int_equal(lock_acquire(s, key, 0, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(s, key, &g), LOCK_RELEASED);
    next_buyer_gets_in(b, key, ttl);
    test_sessions_close(&p);
}

/* Second line of defence: an entry of the session's own that its clean-up
 * could not remove (Redis was unreachable for that too) is never handed the
 * lock by that session's own release. */
static void test_release_skips_own_entry(void **state)
{
    (void)state;
    const char *key = "t:ownentry";
    const int ttl = 10000;
    struct test_sessions p;
    sessions_open(&p, key, ttl, 0, 2);
    struct lock_session *s = p.s[0], *b = p.s[1];
    struct lock_grant g;
    assert_int_equal(lock_acquire(s, key, 0, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(s, key, &g), LOCK_RELEASED);
    queue_stale_entry(key, g.token, redis_now_ms() + 8000);
    assert_int_equal(lock_acquire(s, key, 0, &g), LOCK_ACQUIRED); /* the free path */
    assert_int_equal(lock_release(s, key, &g), LOCK_RELEASED);
    next_buyer_gets_in(b, key, ttl);
    assert_int_equal(key_integer("LLEN %s:queue", key), 0); /* dropped, too */
    test_sessions_close(&p);
}

/* A grant handed over while its waiter was not blocked on it waits in the
 * waiter's grant list; picked up later, it starts a full lease there, as the
 * new holder (its validity, its watchdog's first renewal at ttl/3) assumes:
 * nobody else gets in while it holds the lock. */
static void test_grant_picked_up_later_gets_a_full_lease(void **state)
{
    (void)state;
    const char *key = "t:pickup";
    const int ttl = 1000;
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, ttl, 20000, 3);
    struct lock_session *h = p.s[0], *s = p.s[1], *b = p.s[2];
    struct lock_grant gh, gs, gb;
    assert_int_equal(lock_acquire(s, key, 0, &gs), LOCK_ACQUIRED); /* S's owner token */
    assert_int_equal(lock_release(s, key, &gs), LOCK_RELEASED);
    assert_int_equal(lock_acquire(h, key, 0, &gh), LOCK_ACQUIRED);
    queue_stale_entry(key, gs.token, redis_now_ms() + 60000);
    assert_int_equal(lock_release(h, key, &gh), LOCK_RELEASED); /* handed to S */
    clock_sleep_us(800 * 1000); /* the grant waits; its lease runs */
    assert_int_equal(lock_acquire(s, key, 0, &gs), LOCK_ACQUIRED);
    assert_true(gs.fence > gh.fence);
    long long left = key_integer("PTTL %s", key);
    if (left < ttl - 100)
        fail_msg("lease left after the pick-up: %lld ms of %d", left, ttl);
    clock_sleep_us(400 * 1000); /* past the end of the lease as handed over */
    assert_int_equal(lock_acquire(b, key, 0, &gb), LOCK_BUSY);
    struct lock_stats st;
    lock_stats(l, &st);
    assert_int_equal(st.leases_lost, 0);
    assert_true(lock_valid_until_us(s, &gs) > clock_now_us());
    assert_int_equal(lock_release(s, key, &gs), LOCK_RELEASED);
    test_sessions_close(&p);
}

/* The wait queue lives as long as its longest waiter needs it: a newer waiter
 * with a shorter wait does not cut its expiry short under an older one, which
 * is still woken by the release. */
static void test_queue_expiry_only_extended(void **state)
{
    (void)state;
    const char *key = "t:queuettl";
    const int ttl = 1000, short_wait = 50;
    struct test_sessions p;
    struct lock *l = sessions_open(&p, key, ttl, 20000, 1);
    struct lock_session *a = p.s[0];
    struct lock_grant ga;
    /* A holds it as long as the test wants: its watchdog renews. */
    assert_int_equal(lock_acquire(a, key, 0, &ga), LOCK_ACQUIRED);
    struct waiter older, newer;
    waiter_start(&older, l, key, 5000);
    assert_true(test_wait_for(one_blocked, NULL, 2000));
    waiter_start(&newer, l, key, short_wait);
    assert_true(test_wait_for(has_acquired, &newer, 2000));
    assert_int_equal(newer.status, LOCK_BUSY);
    clock_sleep_us((short_wait + ttl + 200) * 1000); /* past the newer waiter's expiry */
    long long queued = key_integer("LLEN %s:queue", key);
    int64_t released_at = clock_now_us();
    assert_int_equal(lock_release(a, key, &ga), LOCK_RELEASED);
    int woken = test_wait_for(has_acquired, &older, 3000);
    waiter_join(&older);
    waiter_join(&newer);
    test_sessions_close(&p);
    if (queued != 1) /* the older waiter's entry */
        fail_msg("%lld entries queued after the newer waiter's expiry, not 1", queued);
    assert_true(woken);
    assert_int_equal(older.status, LOCK_ACQUIRED);
    int64_t latency_us = older.acquired_at_us - released_at;
    if (latency_us > 50000)
        fail_msg("the older waiter got in %lld us after the release",
                 (long long)latency_us);
}

/* ---- cost under contention ------------------------------------------------- */

/* Runs nthreads contending workers; returns total Redis commands (including
 * those run inside scripts) and client round trips per acquisition. */
static void contend(const char *mode, int nthreads, int iterations, double *commands,
                    double *round_trips, double *contended_share)
{
    const char *key = "t:bench";
    test_lock_key_del(admin, key);
    struct test_excl b = {.lock = test_lock_new(mode, 3000, 0, 0),
                          .key = key,
                          .port = srv.port,
                          .iterations = iterations,
                          .work_us = 300};
    admin_cmd("CONFIG RESETSTAT%s", "");
    test_excl_start(&b, nthreads);
    test_excl_join(&b);
    assert_int_equal(atomic_load(&b.failures), 0);
    long long total = all_calls();
    long long trips = command_calls("evalsha") + command_calls("eval") +
                      command_calls("blpop") + command_calls("setnx") +
                      command_calls("getset") + command_calls("del") +
                      command_calls("incr") + command_calls("script|load");
    if (strcmp(mode, "setnx") != 0) /* in-script commands are not round trips */
        trips = command_calls("evalsha") + command_calls("eval") + command_calls("blpop");
    struct lock_stats st;
    lock_stats(b.lock, &st);
    double acq = (double)st.acquisitions;
    *commands = (double)total / acq;
    *round_trips = (double)trips / acq;
    *contended_share = (double)st.contended / acq;
    test_lock_free(b.lock);
}

static void test_commands_per_acquisition(void **state)
{
    (void)state;
    double cmds, trips, share;
    contend("redis", 8, 100, &cmds, &trips, &share);
    printf("redis mode, 8 threads on one key: %.2f commands (%.2f round trips) per "
           "acquisition, %.0f%% contended\n",
           cmds, trips, share * 100);
    /* Uncontended the cost is 2 round trips (acquire + release script); a woken
     * waiter adds one BLPOP and one more attempt. Polling would be far more. */
    assert_true(share > 0.3);
    assert_true(trips < 5.0);
    double s_cmds, s_trips, s_share;
    contend("setnx", 8, 100, &s_cmds, &s_trips, &s_share);
    printf("setnx mode (polling), same load: %.2f commands (%.2f round trips) per "
           "acquisition, %.0f%% contended\n",
           s_cmds, s_trips, s_share * 100);
    assert_true(trips < s_trips);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_watchdog_renews),
        cmocka_unit_test(test_watchdog_max_lease),
        cmocka_unit_test(test_watchdog_notices_lost_lease),
        cmocka_unit_test(test_release_wakes_waiter),
        cmocka_unit_test(test_release_wakes_one),
        cmocka_unit_test(test_steps_keep_commands_inside_the_lock),
        cmocka_unit_test(test_crashed_holder),
        cmocka_unit_test(test_failed_retry_leaves_the_queue),
        cmocka_unit_test(test_release_skips_own_entry),
        cmocka_unit_test(test_grant_picked_up_later_gets_a_full_lease),
        cmocka_unit_test(test_queue_expiry_only_extended),
        cmocka_unit_test(test_commands_per_acquisition),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
