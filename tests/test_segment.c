/* Unit tests: stock split and user routing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>

#include "segment.h"

static void test_split_adds_up_and_is_even(void **state)
{
    (void)state;
    const long long stocks[] = {0, 1, 7, 10, 16, 17, 1000, 999999937};
    const int ks[] = {1, 2, 3, 16, 1024};
    for (size_t s = 0; s < sizeof(stocks) / sizeof(stocks[0]); s++) {
        for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
            long long sum = 0, lo = stocks[s], hi = 0;
            for (int i = 0; i < ks[j]; i++) {
                long long v = seg_initial(stocks[s], ks[j], i);
                sum += v;
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            assert_int_equal(sum, stocks[s]);
            assert_true(hi - lo <= 1);
        }
    }
    /* the remainder goes to the first segments */
    assert_int_equal(seg_initial(10, 4, 0), 3);
    assert_int_equal(seg_initial(10, 4, 1), 3);
    assert_int_equal(seg_initial(10, 4, 2), 2);
    assert_int_equal(seg_initial(10, 4, 3), 2);
}

static void test_hash_is_stable(void **state)
{
    (void)state;
    /* Known values: every instance, every run and the Lua side must agree. */
    assert_true(seg_user_hash("") ==
                (14695981039346656037ull ^ (14695981039346656037ull >> 32)));
    assert_int_equal(seg_route("alice"), seg_route("alice"));
    assert_true(seg_route("alice") != seg_route("alicf"));
    assert_true(seg_route("anyone") < 0x80000000u);
    assert_int_equal(seg_home("alice", 16), (int)(seg_route("alice") % 16));
}

static void test_routing_spreads_users(void **state)
{
    (void)state;
    /* 16000 sequential user ids over 16 segments: each gets 1000 +- 15 %. */
    int count[16] = {0};
    char user[32];
    for (int i = 0; i < 16000; i++) {
        snprintf(user, sizeof(user), "user-%d", i);
        int h = seg_home(user, 16);
        assert_true(h >= 0 && h < 16);
        count[h]++;
    }
    for (int i = 0; i < 16; i++)
        assert_in_range(count[i], 850, 1150);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_adds_up_and_is_even),
        cmocka_unit_test(test_hash_is_stable),
        cmocka_unit_test(test_routing_spreads_users),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
