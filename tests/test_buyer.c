/* Unit tests: buyer tokens (service/buyer.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "buyer.h"

static const unsigned char KEY[] = "a key of more than sixteen bytes";
#define KEYLEN (sizeof(KEY) - 1)

static void test_round_trip(void **state)
{
    (void)state;
    char token[BUYER_TOKEN_MAX + 1], user[INV_ID_MAX + 1];
    /* a user id may hold dots and colons: the token is read from its right end */
    assert_int_equal(buyer_token(KEY, KEYLEN, "a.b:c", 2000, token, sizeof(token)), 0);
    assert_int_equal(buyer_check(KEY, KEYLEN, token, 1999, user), BUYER_OK);
    assert_string_equal(user, "a.b:c");
    /* valid while now < expiry */
    assert_int_equal(buyer_check(KEY, KEYLEN, token, 2000, user), BUYER_EXPIRED);
    assert_string_equal(user, "");
    /* another key */
    assert_int_equal(buyer_check(KEY, KEYLEN - 1, token, 1999, user), BUYER_INVALID);
}

static void test_refused(void **state)
{
    (void)state;
    char token[BUYER_TOKEN_MAX + 1], user[INV_ID_MAX + 1], copy[BUYER_TOKEN_MAX + 8];
    assert_int_equal(buyer_token(KEY, KEYLEN, "ann", 2000, token, sizeof(token)), 0);
    assert_int_equal(buyer_check(KEY, KEYLEN, NULL, 0, user), BUYER_MISSING);
    assert_int_equal(buyer_check(KEY, KEYLEN, "", 0, user), BUYER_MISSING);
    /* each byte of the signature changed in turn */
    char *sig = strrchr(token, '.') + 1;
    for (size_t i = 0; i < 64; i++) {
        snprintf(copy, sizeof(copy), "%s", token);
        char *c = copy + (sig - token) + i;
        *c = *c == '0' ? '1' : '0';
        assert_int_equal(buyer_check(KEY, KEYLEN, copy, 0, user), BUYER_INVALID);
    }
    /* another user, another expiry, with the same signature */
    snprintf(copy, sizeof(copy), "bob.2000.%s", sig);
    assert_int_equal(buyer_check(KEY, KEYLEN, copy, 0, user), BUYER_INVALID);
    snprintf(copy, sizeof(copy), "ann.9999.%s", sig);
    assert_int_equal(buyer_check(KEY, KEYLEN, copy, 0, user), BUYER_INVALID);
    /* upper-case hex, a signature too short or too long, malformed parts */
    snprintf(copy, sizeof(copy), "%s", token);
    for (char *c = copy + (sig - token); *c; c++)
        if (*c >= 'a' && *c <= 'f')
            *c = (char)(*c - 'a' + 'A');
    if (strcmp(copy, token) != 0)
        assert_int_equal(buyer_check(KEY, KEYLEN, copy, 0, user), BUYER_INVALID);
    snprintf(copy, sizeof(copy), "%s0", token);
    assert_int_equal(buyer_check(KEY, KEYLEN, copy, 0, user), BUYER_INVALID);
    copy[strlen(token) - 1] = '\0';
    assert_int_equal(buyer_check(KEY, KEYLEN, copy, 0, user), BUYER_INVALID);
    const char *bad[] = {"ann",      "ann.2000",   ".2000.x",     "2000.abc",
                         "ann..abc", "ann.-1.abc", "a b.2000.abc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(buyer_check(KEY, KEYLEN, bad[i], 0, user), BUYER_INVALID);
    /* no token of a bad user id, nor in too little room */
    assert_int_equal(buyer_token(KEY, KEYLEN, "a b", 2000, token, sizeof(token)), -1);
    assert_int_equal(buyer_token(KEY, KEYLEN, "ann", 2000, token, 20), -1);
    assert_string_equal(token, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
