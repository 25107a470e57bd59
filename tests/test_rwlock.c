/* test_rwlock: the read-write lock of the modes without a lock service
 * (local, none) and of those without one at all (lock.h "the read-write
 * lock"). The redis mode's is test_rwlock_redis. No server: these modes
 * send nothing (setnx, refused before it would). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "lock.h"

static struct lock *mode_new(const char *mode)
{
    struct lock_config cfg = {.ttl_ms = 1000};
    char err[256] = "";
    struct lock *l = lock_new(mode, &cfg, err, sizeof(err));
    if (!l)
        fail_msg("lock_new(%s): %s", mode, err);
    return l;
}

static void test_local_readers_share_writer_excludes(void **state)
{
    (void)state;
    struct lock *l = mode_new("local");
    assert_true(lock_rw_supported(l));
    struct lock_session *a = lock_session_new(l, NULL), *b = lock_session_new(l, NULL);
    struct lock_grant r1, r2, w;
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_READ, 0, &r1), LOCK_ACQUIRED);
    assert_int_equal(lock_rw_acquire(b, "k", LOCK_READ, 0, &r2), LOCK_ACQUIRED);
    assert_int_equal(lock_rw_acquire(b, "k", LOCK_WRITE, 0, &w), LOCK_BUSY);
    assert_int_equal(lock_release(a, "k", &r1), LOCK_RELEASED);
    assert_int_equal(lock_rw_acquire(b, "k", LOCK_WRITE, 0, &w), LOCK_BUSY);
    assert_int_equal(lock_release(b, "k", &r2), LOCK_RELEASED);
    assert_int_equal(lock_rw_acquire(b, "k", LOCK_WRITE, 0, &w), LOCK_ACQUIRED);
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_READ, 0, &r1), LOCK_BUSY);
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_WRITE, 0, &r1), LOCK_BUSY);
    assert_int_equal(lock_release(b, "k", &w), LOCK_RELEASED);
    assert_int_equal(lock_release(b, "k", &w), LOCK_NOT_HELD);
    lock_session_free(a);
    lock_session_free(b);
    lock_free(l);
}

static void test_none_grants_every_side(void **state)
{
    (void)state;
    struct lock *l = mode_new("none");
    struct lock_session *a = lock_session_new(l, NULL);
    struct lock_grant w1, w2;
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_WRITE, 0, &w1), LOCK_ACQUIRED);
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_WRITE, 0, &w2), LOCK_ACQUIRED);
    lock_session_free(a);
    lock_free(l);
}

/* Modes without a read-write lock refuse at once, and so does a side that is
 * no side of one. */
static void test_unsupported(void **state)
{
    (void)state;
    struct lock *l = mode_new("setnx");
    assert_false(lock_rw_supported(l));
    struct lock_session *a = lock_session_new(l, NULL);
    struct lock_grant g;
    struct lock_step st;
    lock_step_init(&st);
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_READ, 0, &g), LOCK_ERROR);
    assert_int_equal(lock_rw_try_step(a, "k", LOCK_WRITE, 0, &st), 0);
    struct lock_rw_args args;
    assert_int_equal(lock_rw_read_args(a, "k", &args), 0);
    lock_session_free(a);
    lock_free(l);
    l = mode_new("local");
    a = lock_session_new(l, NULL);
    assert_int_equal(lock_rw_acquire(a, "k", LOCK_EXCLUSIVE, 0, &g), LOCK_ERROR);
    lock_session_free(a);
    lock_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_readers_share_writer_excludes),
        cmocka_unit_test(test_none_grants_every_side),
        cmocka_unit_test(test_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
