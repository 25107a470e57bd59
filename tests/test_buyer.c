/* Unit tests: buyer tokens (service/buyer.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "buyer.h"

static const unsigned char KEY[] = "a key of more than sixteen bytes";
#define KEYLEN (sizeof(KEY) - 1)

/* KEY's first n bytes, made ready to sign. */
static struct buyer_key key_of(size_t n)
{
    struct buyer_key k;
    buyer_key_set(&k, KEY, n);
    return k;
}

static void test_round_trip(void **state)
{
    (void)state;
    struct buyer_key key = key_of(KEYLEN);
    char token[BUYER_TOKEN_MAX + 1], user[INV_ID_MAX + 1];
    /* a user id may hold dots and colons: the token is read from its right end */
    assert_int_equal(buyer_token(&key, "a.b:c", 2000, token, sizeof(token)), 0);
    assert_int_equal(buyer_check(&key, token, 1999, user), BUYER_OK);
    assert_string_equal(user, "a.b:c");
    /* valid while now < expiry */
    assert_int_equal(buyer_check(&key, token, 2000, user), BUYER_EXPIRED);
    assert_string_equal(user, "");
    /* another key */
    struct buyer_key short_key = key_of(KEYLEN - 1);
    assert_int_equal(buyer_check(&short_key, token, 1999, user), BUYER_INVALID);
}

/* The signature is HMAC-SHA256 as OpenSSL's own HMAC() makes it, for a key of
 * under a block, of a block and of more (hashed first, RFC 2104): the token's
 * tail is its hex. */
static void test_the_signature_is_hmac_sha256(void **state)
{
    (void)state;
    unsigned char big[200];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7 + 1);
    const size_t lens[] = {16, 32, 63, 64, 65, 200};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        struct buyer_key k;
        buyer_key_set(&k, big, lens[l]);
        char token[BUYER_TOKEN_MAX + 1], want[65];
        assert_int_equal(buyer_token(&k, "bob", 1234567890, token, sizeof(token)), 0);
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        const char *text = "bob.1234567890";
        assert_non_null(HMAC(EVP_sha256(), big, (int)lens[l], (const unsigned char *)text,
                             strlen(text), md, &n));
        assert_int_equal(n, 32);
        for (unsigned int i = 0; i < n; i++)
            snprintf(want + 2 * i, 3, "%02x", md[i]);
        assert_string_equal(token + strlen(text) + 1, want);
    }
}

static void test_refused(void **state)
{
    (void)state;
    struct buyer_key key = key_of(KEYLEN);
    char token[BUYER_TOKEN_MAX + 1], user[INV_ID_MAX + 1], copy[BUYER_TOKEN_MAX + 8];
    assert_int_equal(buyer_token(&key, "ann", 2000, token, sizeof(token)), 0);
    assert_int_equal(buyer_check(&key, NULL, 0, user), BUYER_MISSING);
    assert_int_equal(buyer_check(&key, "", 0, user), BUYER_MISSING);
    /* each byte of the signature changed in turn */
    char *sig = strrchr(token, '.') + 1;
    for (size_t i = 0; i < 64; i++) {
        snprintf(copy, sizeof(copy), "%s", token);
        char *c = copy + (sig - token) + i;
        *c = *c == '0' ? '1' : '0';
        assert_int_equal(buyer_check(&key, copy, 0, user), BUYER_INVALID);
    }
    /* another user, another expiry, with the same signature */
    snprintf(copy, sizeof(copy), "bob.2000.%s", sig);
    assert_int_equal(buyer_check(&key, copy, 0, user), BUYER_INVALID);
    snprintf(copy, sizeof(copy), "ann.9999.%s", sig);
    assert_int_equal(buyer_check(&key, copy, 0, user), BUYER_INVALID);
    /* upper-case hex, a signature too short or too long, malformed parts */
    snprintf(copy, sizeof(copy), "%s", token);
    for (char *c = copy + (sig - token); *c; c++)
        if (*c >= 'a' && *c <= 'f')
            *c = (char)(*c - 'a' + 'A');
    if (strcmp(copy, token) != 0)
        assert_int_equal(buyer_check(&key, copy, 0, user), BUYER_INVALID);
    snprintf(copy, sizeof(copy), "%s0", token);
    assert_int_equal(buyer_check(&key, copy, 0, user), BUYER_INVALID);
    copy[strlen(token) - 1] = '\0';
    assert_int_equal(buyer_check(&key, copy, 0, user), BUYER_INVALID);
    const char *bad[] = {"ann",      "ann.2000",   ".2000.x",     "2000.abc",
                         "ann..abc", "ann.-1.abc", "a b.2000.abc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(buyer_check(&key, bad[i], 0, user), BUYER_INVALID);
    /* no token of a bad user id, nor in too little room */
    assert_int_equal(buyer_token(&key, "a b", 2000, token, sizeof(token)), -1);
    assert_int_equal(buyer_token(&key, "ann", 2000, token, 20), -1);
    assert_string_equal(token, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_the_signature_is_hmac_sha256),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
