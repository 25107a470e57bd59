/* test_lock_zk: the zk lock mode against a real ZooKeeper server (one per
 * binary, started once): exclusion, waking only the next waiter, giving up,
 * czxid fences, reentrancy, protected mode after a lost create answer,
 * session expiry and ZooKeeper going away and coming back.
 *
 * The test looks at the server itself through its own ZooKeeper handle
 * (children, czxids, session owners) and through four-letter words: wchp for
 * who watches which node, cons for a session's connection (its packet count
 * and when it was established). Each struct lock here is its own ZooKeeper
 * session, as separate processes would be. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <zookeeper/zookeeper.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "clock.h"
#include "lock.h"
#include "testutil.h"

#define LOCKS "/seckill/locks"
#define SESSION_MS 3000

static struct test_zk zk;
static char hosts[64];
static zhandle_t *admin; /* the test's own look at ZooKeeper */

/* The admin handle is the single-threaded client's (libzookeeper_st, as the
 * lock's): the test's thread drives it, waiting at most timeout_ms for its
 * socket, then letting it process what came. A handle whose session expired
 * (not driven for longer than its timeout) is replaced. */
static void admin_drive(int timeout_ms)
{
    if (zoo_state(admin) == ZOO_EXPIRED_SESSION_STATE) {
        zookeeper_close(admin);
        admin = zookeeper_init(hosts, NULL, 30000, NULL, NULL, 0);
        assert_non_null(admin);
    }
    int fd = -1, interest = 0;
    struct timeval tv = {0, 0};
    zookeeper_interest(admin, &fd, &interest, &tv);
    int wait = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
    if (wait > timeout_ms || wait < 0)
        wait = timeout_ms;
    struct pollfd p = {.fd = fd, .events = 0};
    p.events |= (interest & ZOOKEEPER_READ) ? POLLIN : 0;
    p.events |= (interest & ZOOKEEPER_WRITE) ? POLLOUT : 0;
    int events = 0;
    if (poll(&p, fd >= 0 ? 1 : 0, wait) > 0) {
        events |= (p.revents & (POLLIN | POLLHUP | POLLERR)) ? ZOOKEEPER_READ : 0;
        events |= (p.revents & POLLOUT) ? ZOOKEEPER_WRITE : 0;
    }
    zookeeper_process(admin, events);
}

static int admin_connected(void *arg)
{
    (void)arg;
    admin_drive(10);
    return zoo_state(admin) == ZOO_CONNECTED_STATE;
}

/* One answer of the admin handle, waited for by admin_wait. */
struct admin_answer {
    int done, rc;
    struct Stat stat;
    struct String_vector kids; /* deallocate_String_vector */
};

static void admin_stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct admin_answer *a = (struct admin_answer *)data;
    if (rc == ZOK && stat)
        a->stat = *stat;
    a->rc = rc;
    a->done = 1;
}

static void admin_kids_done(int rc, const struct String_vector *v, const void *data)
{
    struct admin_answer *a = (struct admin_answer *)data;
    if (rc == ZOK && v && v->count > 0) {
        a->kids.data = calloc((size_t)v->count, sizeof(char *));
        for (int i = 0; i < v->count; i++)
            a->kids.data[i] = strdup(v->data[i]);
        a->kids.count = v->count;
    }
    a->rc = rc;
    a->done = 1;
}

static void admin_void_done(int rc, const void *data)
{
    struct admin_answer *a = (struct admin_answer *)data;
    a->rc = rc;
    a->done = 1;
}

/* Drives the admin handle until a's answer came (sent with rc), at most 10 s. */
static int admin_wait(int rc, struct admin_answer *a)
{
    if (rc != ZOK)
        return rc;
    int64_t end = clock_now_us() + 10000000;
    while (!a->done && clock_now_us() < end)
        admin_drive(100);
    return a->done ? a->rc : ZOPERATIONTIMEOUT;
}

static int admin_children(const char *path, struct String_vector *v)
{
    struct admin_answer a = {0};
    int rc = admin_wait(zoo_aget_children(admin, path, 0, admin_kids_done, &a), &a);
    *v = a.kids;
    return rc;
}

static int admin_exists(const char *path, struct Stat *stat)
{
    struct admin_answer a = {0};
    int rc = admin_wait(zoo_aexists(admin, path, 0, admin_stat_done, &a), &a);
    *stat = a.stat;
    return rc;
}

static int admin_delete(const char *path)
{
    struct admin_answer a = {0};
    return admin_wait(zoo_adelete(admin, path, -1, admin_void_done, &a), &a);
}

static int group_setup(void **state)
{
    (void)state;
    evthread_use_pthreads(); /* the steps' bases are woken from the zk loop */
    test_zk_start(&zk);
    snprintf(hosts, sizeof(hosts), "127.0.0.1:%d", zk.port);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    admin = zookeeper_init(hosts, NULL, 30000, NULL, NULL, 0);
    if (!admin || !test_wait_for(admin_connected, NULL, 20000)) {
        fprintf(stderr, "the test's ZooKeeper handle did not connect\n");
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    zookeeper_close(admin);
    test_zk_stop(&zk, 1, 0);
    return 0;
}

static struct lock *zk_lock_watching(const char *ensemble, int session_ms,
                                     lock_zk_watch watch)
{
    struct lock_config cfg = {.ttl_ms = 3000,
                              .fencing = 1,
                              .zk_hosts = ensemble,
                              .zk_session_ms = session_ms,
                              .zk_watch = watch};
    char err[256] = "";
    struct lock *l = lock_new("zk", &cfg, err, sizeof(err));
    if (!l)
        fail_msg("lock_new(zk, %s): %s", ensemble, err);
    return l;
}

static struct lock *zk_lock(const char *ensemble, int session_ms)
{
    return zk_lock_watching(ensemble, session_ms, LOCK_ZK_WATCH_PREDECESSOR);
}

static struct lock *direct_lock(void)
{
    return zk_lock(hosts, SESSION_MS);
}

/* A lock that reaches ZooKeeper through proxy p. */
static struct lock *proxied_lock(const struct test_proxy *p, int session_ms)
{
    char via[64];
    snprintf(via, sizeof(via), "127.0.0.1:%d", p->port);
    return zk_lock(via, session_ms);
}

static void parent_of_key(const char *key, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", LOCKS, key);
}

/* The children of key's lock node, sorted by name within one lock: by
 * sequence; -1 when the lock node does not exist. Names into names[i] (up to
 * max) when names is not NULL. */
static int children(const char *key, char names[][256], int max)
{
    char parent[512];
    parent_of_key(key, parent, sizeof(parent));
    struct String_vector v = {0};
    int rc = admin_children(parent, &v);
    if (rc == ZNONODE)
        return -1;
    assert_int_equal(rc, ZOK);
    int n = v.count;
    for (int i = 0; i < n && names && i < max; i++)
        snprintf(names[i], 256, "%s", v.data[i]);
    deallocate_String_vector(&v);
    return n;
}

struct count_arg {
    const char *key;
    int want;
};

static int has_children(void *arg)
{
    struct count_arg *a = arg;
    int n = children(a->key, NULL, 0);
    return (n < 0 ? 0 : n) == a->want;
}

/* Waits until key's lock has want children (nodes of other sessions). */
static void wait_children(const char *key, int want)
{
    struct count_arg a = {key, want};
    if (!test_wait_for(has_children, &a, 20000))
        fail_msg("%s: %d children, expected %d", key, children(key, NULL, 0), want);
}

/* The path of key's child with the given sequence number ("" when none). */
static void child_by_seq(const char *key, int seq, char *out, size_t len)
{
    char names[16][256];
    int n = children(key, names, 16);
    char suffix[16];
    snprintf(suffix, sizeof(suffix), "%010d", seq);
    out[0] = '\0';
    for (int i = 0; i < n && i < 16; i++) {
        size_t l = strlen(names[i]);
        if (l > 10 && strcmp(names[i] + l - 10, suffix) == 0)
            snprintf(out, len, "%s/%s/%s", LOCKS, key, names[i]);
    }
}

/* The single child of key (asserts there is exactly one). */
static void only_child(const char *key, char *out, size_t len)
{
    char names[4][256];
    assert_int_equal(children(key, names, 4), 1);
    snprintf(out, len, "%s/%s/%s", LOCKS, key, names[0]);
}

static struct Stat node_stat(const char *path)
{
    struct Stat st;
    int rc = admin_exists(path, &st);
    if (rc != ZOK)
        fail_msg("%s: exists %d", path, rc);
    return st;
}

/* How many sessions watch path, per wchp; *has set when sid is one of them. */
static int watchers(const char *path, long long sid, int *has)
{
    static char buf[65536];
    if (test_zk_4lw(zk.port, "wchp", buf, sizeof(buf)) < 0)
        fail_msg("wchp: no answer");
    int n = 0, in = 0;
    if (has)
        *has = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '/') {
            in = strcmp(line, path) == 0;
        } else if (in && strncmp(line, "\t0x", 3) == 0) {
            n++;
            if (has && strtoll(line + 3, NULL, 16) == sid)
                *has = 1;
        }
    }
    return n;
}

struct watch_arg {
    const char *path;
    long long sid;
    int only; /* sid and nobody else */
};

static int watched_by(void *arg)
{
    struct watch_arg *a = arg;
    int has, n = watchers(a->path, a->sid, &has);
    return has && (!a->only || n == 1);
}

/* Waits until session sid watches path; with only, until nobody else does. */
static void wait_watched(const char *path, long long sid, int only)
{
    struct watch_arg a = {path, sid, only};
    if (!test_wait_for(watched_by, &a, 20000))
        fail_msg("%s: not watched by 0x%llx%s (%d watchers)", path, sid,
                 only ? " alone" : "", watchers(path, 0, NULL));
}

/* From cons: the packets received on session sid's connection and when the
 * server established that connection (wall clock ms). 0 when not found. */
static int session_conn(long long sid, long long *recved, long long *est)
{
    static char buf[65536];
    if (test_zk_4lw(zk.port, "cons", buf, sizeof(buf)) < 0)
        return 0;
    char needle[40];
    snprintf(needle, sizeof(needle), "sid=0x%llx,", sid);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, needle))
            continue;
        const char *r = strstr(line, "recved="), *e = strstr(line, "est=");
        if (!r || !e)
            return 0;
        *recved = atoll(r + 7);
        *est = atoll(e + 4);
        return 1;
    }
    return 0;
}

static long long wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* A contender on its own thread: acquires key once, within wait_ms. */
struct contender {
    struct lock_session *s;
    const char *key;
    int wait_ms;
    pthread_t thread;
    atomic_int done;
    lock_status st;
    struct lock_grant g;
    _Atomic int64_t returned_us;
    int steps; /* acquires as an event loop does (acquire_by_steps) */
};

static void step_run(struct lock_session *s, const char *key, struct lock_step *st,
                     struct event_base *base);

/* As an event loop acquires: by steps (done on the zk loop), its base driven
 * until the step is over. */
static lock_status acquire_by_steps(struct lock_session *s, const char *key, int wait_ms,
                                    struct lock_grant *g)
{
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct lock_step st;
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, key, wait_ms, &st), 1);
    step_run(s, key, &st, base);
    lock_status res = lock_try_done(s, key, &st, g);
    event_base_free(base);
    return res;
}

static void *contender_main(void *arg)
{
    struct contender *c = arg;
    c->st = c->steps ? acquire_by_steps(c->s, c->key, c->wait_ms, &c->g)
                     : lock_acquire(c->s, c->key, c->wait_ms, &c->g);
    atomic_store(&c->returned_us, clock_now_us());
    atomic_store(&c->done, 1);
    return NULL;
}

static void contender_start_as(struct contender *c, struct lock *l, const char *key,
                               int wait_ms, int steps)
{
    memset(c, 0, sizeof(*c));
    c->s = lock_session_new(l, NULL);
    c->key = key;
    c->wait_ms = wait_ms;
    c->steps = steps;
    if (pthread_create(&c->thread, NULL, contender_main, c) != 0)
        abort();
}

static void contender_start(struct contender *c, struct lock *l, const char *key,
                            int wait_ms)
{
    contender_start_as(c, l, key, wait_ms, 0);
}

static void contender_join(struct contender *c)
{
    pthread_join(c->thread, NULL);
}

/* ---- exclusion ------------------------------------------------------- */

#define EXCL_THREADS 4
#define EXCL_ROUNDS 20

static atomic_int excl_inside, excl_overlaps, excl_failures, excl_fence_regressions;
static _Atomic uint64_t excl_last_fence;
static pthread_barrier_t excl_start;

static void *excl_main(void *arg)
{
    struct lock_session *s = lock_session_new(arg, NULL);
    pthread_barrier_wait(&excl_start);
    for (int i = 0; i < EXCL_ROUNDS; i++) {
        struct lock_grant g;
        if (lock_acquire(s, "t:excl", 30000, &g) != LOCK_ACQUIRED) {
            atomic_fetch_add(&excl_failures, 1);
            continue;
        }
        if (atomic_fetch_add(&excl_inside, 1) != 0)
            atomic_fetch_add(&excl_overlaps, 1);
        /* Grants come in czxid order: each fence above every earlier one. */
        if (g.fence <= atomic_load(&excl_last_fence))
            atomic_fetch_add(&excl_fence_regressions, 1);
        atomic_store(&excl_last_fence, g.fence);
        clock_sleep_us(1000); /* the work: a window for an intruder */
        atomic_fetch_sub(&excl_inside, 1);
        if (lock_release(s, "t:excl", &g) != LOCK_RELEASED)
            atomic_fetch_add(&excl_failures, 1);
    }
    lock_session_free(s);
    return NULL;
}

/* Two ZooKeeper sessions (processes), two threads each, one key: never two
 * inside at once, every acquire granted, fences strictly increasing. Returns
 * the watch wake-ups of both sessions; *contended_out the acquisitions that
 * waited. */
static uint64_t exclusion_run(lock_zk_watch watch, uint64_t *contended_out)
{
    struct lock *locks[2] = {zk_lock_watching(hosts, SESSION_MS, watch),
                             zk_lock_watching(hosts, SESSION_MS, watch)};
    atomic_store(&excl_inside, 0);
    atomic_store(&excl_overlaps, 0);
    atomic_store(&excl_failures, 0);
    atomic_store(&excl_fence_regressions, 0);
    pthread_t t[EXCL_THREADS];
    pthread_barrier_init(&excl_start, NULL, EXCL_THREADS);
    for (int i = 0; i < EXCL_THREADS; i++)
        pthread_create(&t[i], NULL, excl_main, locks[i % 2]);
    for (int i = 0; i < EXCL_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&excl_start);
    assert_int_equal(atomic_load(&excl_failures), 0);
    assert_int_equal(atomic_load(&excl_overlaps), 0);
    assert_int_equal(atomic_load(&excl_fence_regressions), 0);
    uint64_t acquired = 0, contended = 0, wakeups = 0;
    for (int i = 0; i < 2; i++) {
        struct lock_stats st;
        lock_stats(locks[i], &st);
        acquired += st.acquisitions;
        contended += st.contended;
        wakeups += st.watch_wakeups;
    }
    assert_int_equal(acquired, EXCL_THREADS * EXCL_ROUNDS);
    assert_true(contended > 0); /* they did wait for each other */
    assert_int_equal(children("t:excl", NULL, 0), 0);
    lock_free(locks[0]);
    lock_free(locks[1]);
    *contended_out = contended;
    return wakeups;
}

/* The ids of this process's threads now (/proc/self/task), at most MAX_THREADS. A
 * thread that pthread_join has returned for can still be listed for a moment
 * (the kernel reaps it after waking the joiner), so tests compare ids, not
 * counts. */
#define MAX_THREADS 64
static int thread_ids(long *ids)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            assert_true(n < MAX_THREADS);
            ids[n++] = atol(e->d_name);
        }
    closedir(d);
    return n;
}

static int has_id(const long *ids, int n, long id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

/* The threads listed now that are not among the n in before: at most one
 * (more fails the test), 0 when none. */
static long new_thread(const long *before, int n)
{
    long now[MAX_THREADS], found = 0;
    int m = thread_ids(now);
    for (int i = 0; i < m; i++)
        if (!has_id(before, n, now[i])) {
            if (found)
                fail_msg("two new threads: %ld and %ld", found, now[i]);
            found = now[i];
        }
    return found;
}

static int thread_gone(void *arg)
{
    long now[MAX_THREADS];
    return !has_id(now, thread_ids(now), *(long *)arg);
}

/* One thread drives a zk lock's session (the single-threaded client on the
 * zk loop; libzookeeper_mt brought two threads of its own), and it is gone
 * once the lock is freed. */
static void *no_op(void *arg)
{
    return arg;
}

static void test_one_thread_drives_the_session(void **state)
{
    (void)state;
    /* ThreadSanitizer starts a thread of its own at the first pthread_create:
     * one thread made and joined first, so that it is among those before. */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, no_op, NULL), 0);
    pthread_join(t, NULL);
    long before[MAX_THREADS];
    int n = thread_ids(before);
    struct lock *l = direct_lock();
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant g;
    assert_int_equal(lock_acquire(s, "t:threads", 5000, &g), LOCK_ACQUIRED);
    long zk_thread = new_thread(before, n);
    assert_true(zk_thread != 0);
    assert_int_equal(lock_release(s, "t:threads", &g), LOCK_RELEASED);
    lock_session_free(s);
    lock_free(l);
    assert_true(test_wait_for(thread_gone, &zk_thread, 2000));
    assert_int_equal(new_thread(before, n), 0);
}

/* Watching the predecessor, only a release wakes a waiter (nobody gives up
 * here), and only the next one: at most one wake-up per acquisition that
 * waited (none when the predecessor went before the watch was set). */
static void test_exclusion(void **state)
{
    (void)state;
    uint64_t contended, wakeups = exclusion_run(LOCK_ZK_WATCH_PREDECESSOR, &contended);
    if (wakeups > contended)
        fail_msg("%llu wake-ups for %llu waits", (unsigned long long)wakeups,
                 (unsigned long long)contended);
}

/* Watching all the children (the herd) is just as exclusive. */
static void test_exclusion_watching_all(void **state)
{
    (void)state;
    uint64_t contended;
    exclusion_run(LOCK_ZK_WATCH_ALL, &contended);
}

/* ---- waiting and waking ---------------------------------------------- */

/* A holder A (session sa of lock la) and a contender B queued behind it (on
 * lock lb, a ZooKeeper session of its own; by steps or not, waiting up to
 * b_wait_ms), with their nodes and B's session id; set up until B watches
 * A's node, alone. */
struct queue2 {
    struct lock_session *sa;
    struct lock_grant ga;
    struct contender b;
    char na[512], nb[512];
    long long b_sid;
};

static void queue2_start(struct queue2 *q, struct lock *la, struct lock *lb,
                         const char *key, int b_wait_ms, int b_steps)
{
    q->sa = lock_session_new(la, NULL);
    assert_int_equal(lock_acquire(q->sa, key, 1000, &q->ga), LOCK_ACQUIRED);
    only_child(key, q->na, sizeof(q->na));
    contender_start_as(&q->b, lb, key, b_wait_ms, b_steps);
    wait_children(key, 2);
    child_by_seq(key, 1, q->nb, sizeof(q->nb));
    q->b_sid = node_stat(q->nb).ephemeralOwner;
    wait_watched(q->na, q->b_sid, 1);
}

/* A waiter sleeps on a watch of the holder's node (it sends nothing but its
 * session's pings while it waits) and has the lock within moments of the
 * release, long before its deadline. */
static void test_release_wakes_waiter_without_polling(void **state)
{
    (void)state;
    struct lock *la = direct_lock(), *lb = direct_lock();
    struct queue2 q;
    queue2_start(&q, la, lb, "t:wake", 20000, 0);
    assert_int_equal(watchers(q.nb, 0, NULL), 0);

    /* Watch the waiter's connection for a second: a poller would send
     * requests all along; a watcher only pings (every third of 3 s). */
    long long r0, r1, est;
    assert_true(session_conn(q.b_sid, &r0, &est));
    clock_sleep_us(1000000); /* an observation window, not a synchronisation */
    assert_true(session_conn(q.b_sid, &r1, &est));
    assert_false(atomic_load(&q.b.done));
    if (r1 - r0 > 3)
        fail_msg("the waiter sent %lld packets in 1 s while waiting", r1 - r0);

    int64_t released = clock_now_us();
    assert_int_equal(lock_release(q.sa, "t:wake", &q.ga), LOCK_RELEASED);
    contender_join(&q.b);
    assert_int_equal(q.b.st, LOCK_ACQUIRED);
    assert_true(q.b.g.contended);
    int64_t after_us = atomic_load(&q.b.returned_us) - released;
    if (after_us > 2000000)
        fail_msg("the waiter took %lld ms after the release", (long long)after_us / 1000);
    assert_true(q.b.g.fence > q.ga.fence);
    assert_int_equal(lock_release(q.b.s, "t:wake", &q.b.g), LOCK_RELEASED);
    assert_int_equal(children("t:wake", NULL, 0), 0);
    lock_session_free(q.b.s);
    lock_session_free(q.sa);
    lock_free(la);
    lock_free(lb);
}

/* Then a third, C, queued behind B, each in a lock of its own, with C's node
 * and session id; set up until C watches B's node. */
struct queue3 {
    struct lock *la, *lb, *lc;
    struct queue2 ab;
    struct contender c;
    char nc[512];
    long long c_sid;
};

static void queue3_start(struct queue3 *q, const char *key, int b_wait_ms)
{
    q->la = direct_lock();
    q->lb = direct_lock();
    q->lc = direct_lock();
    queue2_start(&q->ab, q->la, q->lb, key, b_wait_ms, 0);
    contender_start(&q->c, q->lc, key, 20000);
    wait_children(key, 3);
    child_by_seq(key, 2, q->nc, sizeof(q->nc));
    q->c_sid = node_stat(q->nc).ephemeralOwner;
    wait_watched(q->ab.nb, q->c_sid, 1);
}

/* Frees what queue3_start made (the contenders joined). */
static void queue3_free(struct queue3 *q)
{
    lock_session_free(q->ab.b.s);
    lock_session_free(q->c.s);
    lock_session_free(q->ab.sa);
    lock_free(q->la);
    lock_free(q->lb);
    lock_free(q->lc);
}

/* Three contenders: each waiter watches only its immediate predecessor, and
 * the release wakes exactly one of them (the next); the third keeps waiting
 * on the second. */
static void test_release_wakes_only_the_next(void **state)
{
    (void)state;
    struct queue3 q;
    queue3_start(&q, "t:next", 20000);
    char parent[512];
    parent_of_key("t:next", parent, sizeof(parent));
    assert_int_equal(watchers(q.nc, 0, NULL), 0);
    assert_int_equal(watchers(parent, 0, NULL), 0);

    assert_int_equal(lock_release(q.ab.sa, "t:next", &q.ab.ga), LOCK_RELEASED);
    contender_join(&q.ab.b);
    assert_int_equal(q.ab.b.st, LOCK_ACQUIRED);
    /* c was not woken: it still waits, on b's node, and holds nothing */
    assert_false(atomic_load(&q.c.done));
    int has;
    assert_int_equal(watchers(q.ab.nb, q.c_sid, &has), 1);
    assert_true(has);
    assert_int_equal(children("t:next", NULL, 0), 2);

    assert_int_equal(lock_release(q.ab.b.s, "t:next", &q.ab.b.g), LOCK_RELEASED);
    contender_join(&q.c);
    assert_int_equal(q.c.st, LOCK_ACQUIRED);
    assert_true(q.c.g.fence > q.ab.b.g.fence && q.ab.b.g.fence > q.ab.ga.fence);
    assert_int_equal(lock_release(q.c.s, "t:next", &q.c.g), LOCK_RELEASED);
    queue3_free(&q);
}

/* The middle of three contenders gives up: the third, woken by its
 * predecessor's deletion, lists again and waits for the holder instead of
 * taking the lock. */
static void test_middle_gives_up(void **state)
{
    (void)state;
    struct queue3 q;
    queue3_start(&q, "t:middle", 1500);

    contender_join(&q.ab.b);
    assert_int_equal(q.ab.b.st, LOCK_BUSY);
    /* c moved on to the holder (b's watch on it stays until it fires: a
     * ZooKeeper watch cannot be taken back safely here, and a stale one
     * wakes nobody) */
    wait_watched(q.ab.na, q.c_sid, 0);
    assert_int_equal(children("t:middle", NULL, 0), 2);
    assert_false(atomic_load(&q.c.done));

    int64_t released = clock_now_us();
    assert_int_equal(lock_release(q.ab.sa, "t:middle", &q.ab.ga), LOCK_RELEASED);
    contender_join(&q.c);
    assert_int_equal(q.c.st, LOCK_ACQUIRED);
    assert_true(atomic_load(&q.c.returned_us) - released < 2000000);
    assert_int_equal(lock_release(q.c.s, "t:middle", &q.c.g), LOCK_RELEASED);
    queue3_free(&q);
}

/* A contender that runs out of wait answers LOCK_BUSY at its deadline and
 * leaves no node behind. */
static void test_give_up_leaves_no_node(void **state)
{
    (void)state;
    struct lock *la = direct_lock(), *lb = direct_lock();
    struct lock_session *sa = lock_session_new(la, NULL),
                        *sb = lock_session_new(lb, NULL);
    struct lock_grant ga, gb;
    assert_int_equal(lock_acquire(sa, "t:giveup", 1000, &ga), LOCK_ACQUIRED);
    int64_t start = clock_now_us();
    assert_int_equal(lock_acquire(sb, "t:giveup", 300, &gb), LOCK_BUSY);
    int64_t took = clock_now_us() - start;
    if (took < 300000 || took > 1000000)
        fail_msg("gave up after %lld ms, asked for 300", (long long)took / 1000);
    wait_children("t:giveup", 1); /* only the holder's */
    char node[512];
    only_child("t:giveup", node, sizeof(node));
    assert_int_equal(node_stat(node).czxid, (int64_t)ga.fence);
    /* a try with no wait at all gives up just the same */
    assert_int_equal(lock_acquire(sb, "t:giveup", 0, &gb), LOCK_BUSY);
    wait_children("t:giveup", 1);
    struct lock_stats st;
    lock_stats(lb, &st);
    assert_int_equal(st.wait_timeouts, 2);
    assert_int_equal(st.errors, 0);
    assert_int_equal(lock_release(sa, "t:giveup", &ga), LOCK_RELEASED);
    assert_int_equal(children("t:giveup", NULL, 0), 0);
    lock_session_free(sa);
    lock_session_free(sb);
    lock_free(la);
    lock_free(lb);
}

/* ---- the herd effect ------------------------------------------------- */

#define HERD_WAITERS 4

/* A round trip on l's ZooKeeper session (an acquire and release of a key
 * nobody else uses). Once it is answered, every watch event the server sent
 * that session before has been handled: a session gets its events and answers
 * in order, and the client runs them in order on one thread. */
static void session_round_trip(struct lock *l)
{
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant g;
    assert_int_equal(lock_acquire(s, "t:herd:probe", 5000, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(s, "t:herd:probe", &g), LOCK_RELEASED);
    lock_session_free(s);
}

struct asleep_arg {
    struct lock *const *locks;
    int from, to;
};

static int all_asleep(void *arg)
{
    struct asleep_arg *a = arg;
    for (int i = a->from; i < a->to; i++) {
        struct lock_stats st;
        lock_stats(a->locks[i], &st);
        if (st.watch_waiters != 1)
            return 0;
    }
    return 1;
}

/* Settles the waiters of locks[from..to) (one each) after a change under the
 * lock node: each has had every watch event of that change (and counted its
 * wake-up), and each is asleep on a watch again (one that was woken has
 * listed again and set a new watch). No time window: a wake-up that would
 * come later than this is not one that change caused. */
static void waiters_settle(struct lock *const *locks, int from, int to)
{
    for (int i = from; i < to; i++)
        session_round_trip(locks[i]);
    struct asleep_arg a = {locks, from, to};
    if (!test_wait_for(all_asleep, &a, 20000))
        fail_msg("waiters %d..%d are not all asleep on a watch", from, to - 1);
}

static uint64_t herd_wakeups(struct lock *const *locks, int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        struct lock_stats st;
        lock_stats(locks[i], &st);
        sum += st.watch_wakeups;
    }
    return sum;
}

/* A holder and HERD_WAITERS waiters queued behind it on key, each its own
 * ZooKeeper session (process). The holder releases, then each waiter in turn
 * once it holds. woken[r] is the watch wake-ups that release r caused (over
 * every session), counted once the waiters left have settled; the wake-ups
 * of the waiters' arrivals are not in it. Exclusion all along: each release
 * lets in the next waiter and nobody else, with a larger fence. */
static void herd_run(lock_zk_watch watch, const char *key, uint64_t woken[HERD_WAITERS],
                     int steps)
{
    struct lock *locks[HERD_WAITERS + 1];
    for (int i = 0; i <= HERD_WAITERS; i++)
        locks[i] = zk_lock_watching(hosts, SESSION_MS, watch);
    struct lock_session *sh = lock_session_new(locks[HERD_WAITERS], NULL);
    struct lock_grant gh;
    assert_int_equal(lock_acquire(sh, key, 1000, &gh), LOCK_ACQUIRED);
    struct contender c[HERD_WAITERS];
    for (int i = 0; i < HERD_WAITERS; i++) {
        contender_start_as(&c[i], locks[i], key, 30000, steps);
        wait_children(key, i + 2);
        waiters_settle(locks, 0, i + 1); /* (watching all, an arrival wakes all) */
    }
    uint64_t base = herd_wakeups(locks, HERD_WAITERS + 1), last_fence = gh.fence;
    struct lock_stats st;
    lock_stats(locks[HERD_WAITERS], &st);
    assert_int_equal(st.watch_wakeups, 0); /* the holder never waited */

    for (int r = 0; r < HERD_WAITERS; r++) {
        if (r == 0)
            assert_int_equal(lock_release(sh, key, &gh), LOCK_RELEASED);
        else
            assert_int_equal(lock_release(c[r - 1].s, key, &c[r - 1].g), LOCK_RELEASED);
        contender_join(&c[r]);
        assert_int_equal(c[r].st, LOCK_ACQUIRED);
        assert_true(c[r].g.contended);
        assert_true(c[r].g.fence > last_fence);
        last_fence = c[r].g.fence;
        waiters_settle(locks, r + 1, HERD_WAITERS);
        for (int j = r + 1; j < HERD_WAITERS; j++)
            if (atomic_load(&c[j].done))
                fail_msg("release %d: waiter %d returned while %d holds", r, j, r);
        assert_int_equal(children(key, NULL, 0), HERD_WAITERS - r);
        uint64_t now = herd_wakeups(locks, HERD_WAITERS + 1);
        woken[r] = now - base;
        base = now;
    }
    assert_int_equal(lock_release(c[HERD_WAITERS - 1].s, key, &c[HERD_WAITERS - 1].g),
                     LOCK_RELEASED);
    assert_int_equal(children(key, NULL, 0), 0);
    for (int i = 0; i < HERD_WAITERS; i++)
        lock_session_free(c[i].s);
    lock_session_free(sh);
    for (int i = 0; i <= HERD_WAITERS; i++)
        lock_free(locks[i]);
}

/* Watching the predecessor, each release wakes exactly one waiter, the one
 * that then holds: one wake-up per acquisition that waited. Watching all the
 * children, each release wakes every waiter still queued: HERD_WAITERS, then
 * one fewer each time (n(n+1)/2 for n acquisitions). */
static void herd_check(lock_zk_watch watch, int steps, const char *key)
{
    int all = watch == LOCK_ZK_WATCH_ALL;
    uint64_t woken[HERD_WAITERS], sum = 0;
    herd_run(watch, key, woken, steps);
    for (int r = 0; r < HERD_WAITERS; r++) {
        uint64_t want = all ? (uint64_t)(HERD_WAITERS - r) : 1;
        if (woken[r] != want)
            fail_msg("release %d woke %llu waiters, expected %llu%s", r,
                     (unsigned long long)woken[r], (unsigned long long)want,
                     all ? " (every one queued)" : "");
        sum += woken[r];
    }
    print_message("watching %s%s: %llu wake-ups for %d acquisitions "
                  "(%.2f per acquisition; %llu for the first release, %d waiting)\n",
                  all ? "all children" : "the predecessor", steps ? " (steps)" : "",
                  (unsigned long long)sum, HERD_WAITERS, (double)sum / HERD_WAITERS,
                  (unsigned long long)woken[0], HERD_WAITERS);
}

static void test_herd_watching_predecessor(void **state)
{
    (void)state;
    herd_check(LOCK_ZK_WATCH_PREDECESSOR, 0, "t:herd:pred");
}

static void test_herd_watching_all(void **state)
{
    (void)state;
    herd_check(LOCK_ZK_WATCH_ALL, 0, "t:herd:all");
}

/* The same by steps, as the event loops acquire (zk_steps.c): every order of
 * the zk mode, --zk-watch all included, is served on the loops. */
static void test_herd_steps_watching_predecessor(void **state)
{
    (void)state;
    herd_check(LOCK_ZK_WATCH_PREDECESSOR, 1, "t:herd:spred");
}

static void test_herd_steps_watching_all(void **state)
{
    (void)state;
    herd_check(LOCK_ZK_WATCH_ALL, 1, "t:herd:sall");
}

/* ---- fences, reentrancy, keys ---------------------------------------- */

/* The fence is the lock node's czxid: strictly increasing across grants and
 * sessions, and still increasing after the lock node is deleted and created
 * again (when the sequence numbers start over). */
static void test_fence_is_czxid(void **state)
{
    (void)state;
    struct lock *la = direct_lock(), *lb = direct_lock();
    struct lock_session *sa = lock_session_new(la, NULL),
                        *sb = lock_session_new(lb, NULL);
    uint64_t last = 0;
    for (int i = 0; i < 4; i++) {
        struct lock_session *s = i % 2 ? sb : sa;
        struct lock_grant g;
        assert_int_equal(lock_acquire(s, "t:fence", 1000, &g), LOCK_ACQUIRED);
        char node[512];
        only_child("t:fence", node, sizeof(node));
        assert_int_equal(node_stat(node).czxid, (int64_t)g.fence);
        assert_true(g.fence > last);
        last = g.fence;
        assert_int_equal(lock_release(s, "t:fence", &g), LOCK_RELEASED);
    }
    /* Delete the lock node (la remembers it as existing). */
    char parent[512];
    parent_of_key("t:fence", parent, sizeof(parent));
    assert_int_equal(admin_delete(parent), ZOK);
    struct lock_grant g;
    assert_int_equal(lock_acquire(sa, "t:fence", 1000, &g), LOCK_ACQUIRED);
    char node[512];
    only_child("t:fence", node, sizeof(node));
    size_t len = strlen(node);
    assert_string_equal(node + len - 10, "0000000000"); /* a new lock node */
    assert_true(g.fence > last);
    assert_int_equal(lock_release(sa, "t:fence", &g), LOCK_RELEASED);
    lock_session_free(sa);
    lock_session_free(sb);
    lock_free(la);
    lock_free(lb);
}

/* A session re-acquiring a key it holds gets it at once, with the same node
 * and fence; only its last release lets others in. */
static void test_reentrant(void **state)
{
    (void)state;
    struct lock *la = direct_lock(), *lb = direct_lock();
    struct lock_session *sa = lock_session_new(la, NULL),
                        *sb = lock_session_new(lb, NULL);
    struct lock_grant g1, g2, other;
    assert_int_equal(lock_acquire(sa, "t:reent", 1000, &g1), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(sa, "t:reent", 1000, &g2), LOCK_ACQUIRED);
    assert_int_equal(g2.fence, g1.fence);
    assert_int_equal(children("t:reent", NULL, 0), 1);
    assert_int_equal(lock_acquire(sb, "t:reent", 100, &other), LOCK_BUSY);
    wait_children("t:reent", 1); /* sb's node goes as it answers, in the background */
    assert_int_equal(lock_release(sa, "t:reent", &g2), LOCK_RELEASED);
    assert_int_equal(children("t:reent", NULL, 0), 1);
    assert_int_equal(lock_acquire(sb, "t:reent", 100, &other), LOCK_BUSY);
    wait_children("t:reent", 1);
    assert_int_equal(lock_release(sa, "t:reent", &g1), LOCK_RELEASED);
    assert_int_equal(children("t:reent", NULL, 0), 0);
    assert_int_equal(lock_acquire(sb, "t:reent", 1000, &other), LOCK_ACQUIRED);
    assert_true(other.fence > g1.fence);
    assert_int_equal(lock_release(sb, "t:reent", &other), LOCK_RELEASED);

    /* Another thread's session of the same process is another contender. */
    struct lock_session *sa2 = lock_session_new(la, NULL);
    assert_int_equal(lock_acquire(sa, "t:reent", 1000, &g1), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(sa2, "t:reent", 100, &other), LOCK_BUSY);
    /* A session freed while holding lets its nodes go. */
    lock_session_free(sa);
    wait_children("t:reent", 0);
    assert_int_equal(lock_acquire(sa2, "t:reent", 1000, &other), LOCK_ACQUIRED);
    assert_int_equal(lock_release(sa2, "t:reent", &other), LOCK_RELEASED);
    lock_session_free(sa2);
    lock_session_free(sb);
    lock_free(la);
    lock_free(lb);
}

/* A hold released through another session of the same thread (a batch
 * thread on a Redis Cluster has one per master, and the map can change while
 * it holds) leaves the session that took it: that session does not find it
 * again and waits as anyone would. Before, the hold stayed on its taker's
 * list, freed: the next acquire there read freed memory (ASan) or took the
 * freed hold for its own and was granted a lock another session held. */
static void test_release_through_another_session(void **state)
{
    (void)state;
    struct lock *la = direct_lock(), *lb = direct_lock();
    struct lock_session *taker = lock_session_new(la, NULL),
                        *releaser = lock_session_new(la, NULL),
                        *other = lock_session_new(lb, NULL);
    struct lock_grant g, og;
    assert_int_equal(lock_acquire(taker, "t:moved", 1000, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(releaser, "t:moved", &g), LOCK_RELEASED);
    assert_int_equal(children("t:moved", NULL, 0), 0);
    assert_int_equal(lock_acquire(other, "t:moved", 1000, &og), LOCK_ACQUIRED);
    assert_int_equal(lock_acquire(taker, "t:moved", 100, &g), LOCK_BUSY);
    assert_int_equal(lock_release(other, "t:moved", &og), LOCK_RELEASED);
    assert_int_equal(lock_acquire(taker, "t:moved", 1000, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(taker, "t:moved", &g), LOCK_RELEASED);
    lock_session_free(taker);
    lock_session_free(releaser);
    lock_session_free(other);
    lock_free(la);
    lock_free(lb);
}

/* Lock keys map one to one onto node names: '/' does not nest, '.' and '%'
 * are escaped, the service's key shape is kept readable. */
static void test_key_names(void **state)
{
    (void)state;
    const char *keys[] = {"a/b", "a%2Fb", "..", "sk:{s1}:lock:3"};
    const char *nodes[] = {LOCKS "/a%2Fb", LOCKS "/a%252Fb", LOCKS "/%2E%2E",
                           LOCKS "/sk:{s1}:lock:3"};
    struct lock *l = direct_lock();
    struct lock_session *s[4];
    struct lock_grant g[4];
    for (int i = 0; i < 4; i++) {
        s[i] = lock_session_new(l, NULL);
        assert_int_equal(lock_acquire(s[i], keys[i], 200, &g[i]), LOCK_ACQUIRED);
        assert_int_equal(node_stat(nodes[i]).numChildren, 1);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(lock_release(s[i], keys[i], &g[i]), LOCK_RELEASED);
        lock_session_free(s[i]);
    }
    lock_free(l);
    /* no ensemble, no lock */
    struct lock_config cfg = {.ttl_ms = 3000};
    char err[256] = "";
    assert_null(lock_new("zk", &cfg, err, sizeof(err)));
    assert_non_null(strstr(err, "--zk"));
}

/* ---- failures -------------------------------------------------------- */

/* The answer to the contender's create is lost with its connection: after
 * reconnecting it finds its node by its guid and holds the lock with it, not
 * with a second node queued behind the first. */
static void test_lost_create_answer(void **state)
{
    (void)state;
    struct test_proxy proxy;
    test_proxy_start_bytes(&proxy, zk.port, "t:cut/_c_");
    struct lock *l = proxied_lock(&proxy, SESSION_MS);
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant g;
    /* a first hold through the proxy, untouched: the connection is up */
    assert_int_equal(lock_acquire(s, "t:warm", 5000, &g), LOCK_ACQUIRED);
    char node[512];
    only_child("t:warm", node, sizeof(node));
    long long sid = node_stat(node).ephemeralOwner, recved, est;
    assert_int_equal(lock_release(s, "t:warm", &g), LOCK_RELEASED);
    long long before_ms = wall_ms();

    assert_int_equal(lock_acquire(s, "t:cut", 5000, &g), LOCK_ACQUIRED);
    only_child("t:cut", node, sizeof(node));
    struct Stat st = node_stat(node);
    assert_int_equal(st.ephemeralOwner, sid); /* the same session, */
    assert_true(session_conn(sid, &recved, &est));
    assert_true(est >= before_ms); /* on a new connection: the cut happened */
    assert_int_equal(st.czxid, (int64_t)g.fence);
    assert_string_equal(node + strlen(node) - 10, "0000000000"); /* the first create */
    assert_int_equal(lock_release(s, "t:cut", &g), LOCK_RELEASED);
    assert_int_equal(children("t:cut", NULL, 0), 0);
    lock_session_free(s);
    lock_free(l);
    test_proxy_stop(&proxy);
}

struct valid_arg {
    struct lock_session *s;
    const struct lock_grant *g;
    int64_t session_us;
};

/* The lock noticed the disconnection: the validity stops moving with time. */
static int validity_frozen(void *arg)
{
    struct valid_arg *a = arg;
    int64_t v = lock_valid_until_us(a->s, a->g);
    return v > 0 && v < clock_now_us() + a->session_us - 100000;
}

static int validity_zero(void *arg)
{
    struct valid_arg *a = arg;
    return lock_valid_until_us(a->s, a->g) == 0;
}

struct gone_arg {
    const char *path;
};

static int node_gone(void *arg)
{
    struct Stat st;
    return admin_exists(((struct gone_arg *)arg)->path, &st) == ZNONODE;
}

/* A holder cut off from ZooKeeper (its proxy frozen) past its session: while
 * disconnected its validity is the session timeout from the disconnection;
 * the server expires the session and another takes the lock with a larger
 * fence; once the holder hears of the expiry its grant is worth 0, the loss
 * is counted, its release is NOT_HELD, and it acquires again on a new
 * session. */
static void test_session_expiry(void **state)
{
    (void)state;
    const int session_ms = 1000;
    struct test_proxy proxy;
    test_proxy_start_bytes(&proxy, zk.port, NULL);
    struct lock *l = proxied_lock(&proxy, session_ms), *other = direct_lock();
    struct lock_session *s = lock_session_new(l, NULL),
                        *so = lock_session_new(other, NULL);
    struct lock_grant g, go;
    assert_int_equal(lock_acquire(s, "t:expire", 5000, &g), LOCK_ACQUIRED);
    char node[512];
    only_child("t:expire", node, sizeof(node));
    int64_t v0 = lock_valid_until_us(s, &g);
    assert_true(v0 > clock_now_us());

    int64_t cut = clock_now_us();
    kill(proxy.pid, SIGSTOP);
    struct valid_arg va = {s, &g, (int64_t)session_ms * 1000};
    assert_true(test_wait_for(validity_frozen, &va, 10000));
    int64_t v1 = lock_valid_until_us(s, &g);
    /* disconnected at most 2/3 of the session after the cut (+ scheduling) */
    assert_true(v1 > cut && v1 <= cut + 2 * va.session_us + 500000);
    clock_sleep_us(20000);
    assert_int_equal(lock_valid_until_us(s, &g), v1); /* frozen */

    struct gone_arg gone = {node};
    assert_true(test_wait_for(node_gone, &gone, 20000)); /* the server expired it */
    assert_int_equal(lock_acquire(so, "t:expire", 5000, &go), LOCK_ACQUIRED);
    assert_true(go.fence > g.fence);
    assert_int_equal(lock_release(so, "t:expire", &go), LOCK_RELEASED);

    kill(proxy.pid, SIGCONT);
    assert_true(test_wait_for(validity_zero, &va, 20000));
    struct lock_stats st;
    lock_stats(l, &st);
    assert_int_equal(st.leases_lost, 1);
    assert_int_equal(lock_release(s, "t:expire", &g), LOCK_NOT_HELD);
    struct lock_grant g2;
    assert_int_equal(lock_acquire(s, "t:expire", 5000, &g2), LOCK_ACQUIRED);
    assert_true(g2.fence > go.fence);
    only_child("t:expire", node, sizeof(node));
    assert_int_equal(node_stat(node).czxid, (int64_t)g2.fence);
    assert_int_equal(lock_release(s, "t:expire", &g2), LOCK_RELEASED);
    lock_stats(l, &st);
    assert_int_equal(st.leases_lost, 1);
    lock_session_free(s);
    lock_session_free(so);
    lock_free(l);
    lock_free(other);
    test_proxy_stop(&proxy);
}

/* A waiter whose wait runs out while it lists the children again after its
 * predecessor went (ZooKeeper slow to answer that list) is busy, not an
 * error: it was waiting its turn on a ZooKeeper that answers. (A service
 * answered such orders 503 unavailable while a frozen holder's session
 * expired.) B reaches ZooKeeper through a proxy slowed by N ms per chunk each
 * way once B waits: A's release at B's bound - 2N wakes B at about bound - N
 * and B's new list is answered at about bound + N, so the bound comes while B
 * lists, N either side to spare. */
static void test_bound_while_listing_again_is_busy(void **state)
{
    (void)state;
    const int slow_ms = 1000, wait_ms = 4 * slow_ms;
    struct test_proxy proxy;
    test_proxy_start_slow(&proxy, zk.port, slow_ms);
    struct lock *la = direct_lock(), *lb = proxied_lock(&proxy, 20000);
    struct queue2 q;
    int64_t t0 = clock_now_us(); /* B starts its wait after this */
    queue2_start(&q, la, lb, "t:relist", wait_ms, 1);

    kill(proxy.pid, SIGUSR1);
    int64_t release_at = t0 + (int64_t)(wait_ms - 2 * slow_ms) * 1000;
    if (release_at > clock_now_us()) /* a point in time, not a condition */
        clock_sleep_us(release_at - clock_now_us());
    assert_int_equal(lock_release(q.sa, "t:relist", &q.ga), LOCK_RELEASED);
    contender_join(&q.b);
    assert_int_equal(q.b.st, LOCK_BUSY);
    /* at its bound, not at the list's answer (about slow_ms later); libevent
     * may fire a timer a few ms early (it counts from its cached time) */
    int64_t took_ms = (atomic_load(&q.b.returned_us) - t0) / 1000;
    if (took_ms < wait_ms - 100 || took_ms > wait_ms + slow_ms)
        fail_msg("B answered after %lld ms, not at its bound (%d ms)", (long long)took_ms,
                 wait_ms);
    kill(proxy.pid, SIGHUP);
    wait_children("t:relist", 0); /* B's node, unwanted, is deleted */
    lock_session_free(q.b.s);
    lock_session_free(q.sa);
    lock_free(la);
    lock_free(lb);
    test_proxy_stop(&proxy);
}

/* A try (wait 0) of a free lock that ZooKeeper answers later than the try's
 * floor (200 ms), on a connected session, is busy, not an error: it asked for
 * the lock now and did not get it. (A loop that holds a segment tries the next
 * one so: on a busy machine, an order of several segments answered 503
 * unavailable.) The proxy slows each chunk by N ms each way, so the create's
 * answer comes 2N after it was sent; the try answers at its floor, and its node,
 * made late, is deleted. Slack: N = 600 ms leaves a second between the floor
 * and the answer for a loaded machine's timer. */
static void test_try_on_slow_zookeeper_is_busy(void **state)
{
    (void)state;
    const int slow_ms = 600;
    struct test_proxy proxy;
    test_proxy_start_slow(&proxy, zk.port, slow_ms);
    struct lock *l = proxied_lock(&proxy, 20000);
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant g;
    /* connected, and the lock's nodes made, before the network slows */
    assert_int_equal(lock_acquire(s, "t:slowtry", 5000, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(s, "t:slowtry", &g), LOCK_RELEASED);

    kill(proxy.pid, SIGUSR1);
    int64_t t0 = clock_now_us();
    lock_status st = lock_acquire(s, "t:slowtry", 0, &g);
    int64_t took_ms = (clock_now_us() - t0) / 1000;
    if (st != LOCK_BUSY)
        fail_msg("a try on a slow ZooKeeper: status %d after %lld ms, not busy", st,
                 (long long)took_ms);
    if (took_ms >= 2 * slow_ms)
        fail_msg("the try answered after %lld ms, not at its floor", (long long)took_ms);
    kill(proxy.pid, SIGHUP);
    wait_children("t:slowtry", 0); /* its node, unwanted, is deleted */
    assert_int_equal(lock_acquire(s, "t:slowtry", 5000, &g), LOCK_ACQUIRED);
    assert_int_equal(lock_release(s, "t:slowtry", &g), LOCK_RELEASED);
    lock_session_free(s);
    lock_free(l);
    test_proxy_stop(&proxy);
}

/* ZooKeeper killed: acquires answer LOCK_ERROR within their wait, a holder's
 * validity is the session timeout from the disconnection; restarted on its
 * data: the session lived through it (the hold releases normally) and
 * acquires work again, with no new lock. */
static void test_zookeeper_down_and_back(void **state)
{
    (void)state;
    const int session_ms = 15000; /* outlives a JVM restart */
    struct lock *l = zk_lock(hosts, session_ms);
    struct lock_session *s = lock_session_new(l, NULL);
    struct lock_grant held, g;
    assert_int_equal(lock_acquire(s, "t:down:held", 5000, &held), LOCK_ACQUIRED);

    int64_t killed = clock_now_us();
    test_zk_stop(&zk, 1, 1);
    struct valid_arg va = {s, &held, (int64_t)session_ms * 1000};
    assert_true(test_wait_for(validity_frozen, &va, 10000));
    int64_t v = lock_valid_until_us(s, &held);
    assert_true(v >= killed + va.session_us && v <= clock_now_us() + va.session_us);

    for (int wait_ms = 0; wait_ms <= 500; wait_ms += 500) {
        int64_t start = clock_now_us();
        assert_int_equal(lock_acquire(s, "t:down", wait_ms, &g), LOCK_ERROR);
        int64_t took = clock_now_us() - start;
        if (took > (int64_t)(wait_ms + 300) * 1000)
            fail_msg("LOCK_ERROR after %lld ms, wait %d", (long long)took / 1000,
                     wait_ms);
    }
    struct lock_stats st;
    lock_stats(l, &st);
    assert_int_equal(st.errors, 2);

    test_zk_restart(&zk);
    assert_int_equal(lock_acquire(s, "t:down", 20000, &g), LOCK_ACQUIRED);
    assert_true(g.fence > held.fence);
    assert_int_equal(lock_release(s, "t:down", &g), LOCK_RELEASED);
    assert_true(lock_valid_until_us(s, &held) > clock_now_us());
    assert_int_equal(lock_release(s, "t:down:held", &held), LOCK_RELEASED);
    lock_stats(l, &st);
    assert_int_equal(st.leases_lost, 0);
    lock_session_free(s);
    lock_free(l);
    if (!test_wait_for(admin_connected, NULL, 20000))
        fail_msg("the test's handle did not reconnect");
}

static void on_step_over(void *arg)
{
    *(int *)arg = 1;
}

/* Runs the step st (done on the zk loop) on key until it is over, driving
 * base as an event loop would. */
static void step_run(struct lock_session *s, const char *key, struct lock_step *st,
                     struct event_base *base)
{
    int over = 0;
    assert_true(st->async);
    lock_step_start(s, key, st, base, on_step_over, &over);
    while (!over)
        event_base_loop(base, EVLOOP_ONCE);
}

/* A release step that ends without its delete's answer (ZooKeeper killed, the
 * release's bound passed) must not leave the node behind: ZooKeeper restarted
 * on its data keeps the session, and the node would block the lock for as
 * long as the session lives (a chaos run's zk-restart: orders busy for a
 * minute, stock stranded). Another contender gets the lock once ZooKeeper is
 * back. */
static void test_step_release_lost_leaves_no_node(void **state)
{
    (void)state;
    const int session_ms = 15000; /* outlives a JVM restart */
    struct lock *l = zk_lock(hosts, session_ms);
    struct lock_session *s = lock_session_new(l, NULL);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    struct lock_step st;
    struct lock_grant g, g2;
    lock_step_init(&st);
    assert_int_equal(lock_try_step(s, "t:steprel", 5000, &st), 1);
    step_run(s, "t:steprel", &st, base);
    assert_int_equal(lock_try_done(s, "t:steprel", &st, &g), LOCK_ACQUIRED);

    test_zk_stop(&zk, 1, 1);
    lock_step_init(&st);
    lock_release_step(s, "t:steprel", &g, &st);
    step_run(s, "t:steprel", &st, base);
    assert_int_not_equal(lock_release_done(s, "t:steprel", &g, &st), LOCK_RELEASED);

    test_zk_restart(&zk);
    /* The node goes when s is connected again. A connect attempt made while the
     * JVM is still starting waits out the client's connect timeout (2/3 of the
     * 15 s session) before the next one: wait well past that. Either way the
     * node goes within the JVM's restart plus a session (the session's expiry
     * takes it if the reconnect is late); the JVM alone took over 15 s with the
     * whole suite and two other sessions' tests on this 2-core machine, and 30 s
     * was not enough once: 60 s is that slack twice. */
    struct lock_session *other = lock_session_new(l, NULL);
    assert_int_equal(lock_acquire(other, "t:steprel", 60000, &g2), LOCK_ACQUIRED);
    assert_int_equal(lock_release(other, "t:steprel", &g2), LOCK_RELEASED);
    lock_session_free(other);
    lock_session_free(s);
    lock_free(l);
    event_base_free(base);
    if (!test_wait_for(admin_connected, NULL, 20000))
        fail_msg("the test's handle did not reconnect");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_thread_drives_the_session),
        cmocka_unit_test(test_exclusion),
        cmocka_unit_test(test_exclusion_watching_all),
        cmocka_unit_test(test_release_wakes_waiter_without_polling),
        cmocka_unit_test(test_release_wakes_only_the_next),
        cmocka_unit_test(test_middle_gives_up),
        cmocka_unit_test(test_give_up_leaves_no_node),
        cmocka_unit_test(test_herd_watching_predecessor),
        cmocka_unit_test(test_herd_watching_all),
        cmocka_unit_test(test_herd_steps_watching_predecessor),
        cmocka_unit_test(test_herd_steps_watching_all),
        cmocka_unit_test(test_fence_is_czxid),
        cmocka_unit_test(test_reentrant),
        cmocka_unit_test(test_key_names),
        cmocka_unit_test(test_release_through_another_session),
        cmocka_unit_test(test_lost_create_answer),
        cmocka_unit_test(test_session_expiry),
        cmocka_unit_test(test_bound_while_listing_again_is_busy),
        cmocka_unit_test(test_try_on_slow_zookeeper_is_busy),
        cmocka_unit_test(test_zookeeper_down_and_back),
        cmocka_unit_test(test_step_release_lost_leaves_no_node),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
