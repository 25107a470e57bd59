/* Unit tests: the waiting room's tickets and passes (inventory/roomtoken.h):
 * what is signed reads back, and every change to a token, another key, a
 * ticket offered as a pass, an expired pass or one of another user or SKU is
 * refused for its own reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "roomtoken.h"

static struct room_key key, other;
static unsigned char a[32]; /* key's bytes */

static int setup(void **state)
{
    (void)state;
    unsigned char b[40];
    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (unsigned char)(i * 13 + 5);
    return room_key_init(&key, a, sizeof(a)) || room_key_init(&other, b, sizeof(b));
}

static void test_key(void **state)
{
    (void)state;
    struct room_key k;
    unsigned char short_key[31] = {0};
    assert_int_equal(room_key_init(&k, short_key, sizeof(short_key)), -1);
    assert_int_equal(strlen(key.kid), ROOM_KID_LEN);
    assert_string_not_equal(key.kid, other.kid);
    /* the kid is SHA-256's start: the same bytes give the same id */
    assert_int_equal(room_key_init(&k, a, sizeof(a)), 0);
    assert_string_equal(k.kid, key.kid);
}

static void test_ticket_round_trip(void **state)
{
    (void)state;
    struct room_ticket t = {.epoch = 1795791600000000LL,
                            .place = 123456789012345LL,
                            .rank = 41},
                       back;
    snprintf(t.sku, sizeof(t.sku), "tv-55.in:ch");
    snprintf(t.user, sizeof(t.user), "u_1.x");
    char text[ROOM_TOKEN_MAX + 1];
    size_t n = room_ticket_sign(&key, &t, text, sizeof(text));
    assert_true(n > 0 && n == strlen(text));
    assert_int_equal(strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789-_."),
                     n); /* path-safe */
    assert_int_equal(room_ticket_check(&key, text, &back), 0);
    assert_string_equal(back.sku, t.sku);
    assert_string_equal(back.user, t.user);
    assert_int_equal(back.epoch, t.epoch);
    assert_int_equal(back.place, t.place);
    assert_int_equal(back.rank, t.rank);
    /* another key's, a ticket read as a pass */
    assert_int_equal(room_ticket_check(&other, text, &back), -1);
    struct room_pass p;
    assert_int_equal(room_pass_check(&key, text, &p), -1);
    assert_int_equal(room_pass_admits(&key, text, t.sku, t.user, 0, 3), ROOM_PASS_FORGED);
    /* a buffer too small, an id that is not one */
    assert_int_equal(room_ticket_sign(&key, &t, text, 40), 0);
    snprintf(t.user, sizeof(t.user), "a|b");
    assert_int_equal(room_ticket_sign(&key, &t, text, sizeof(text)), 0);
}

/* Any one character changed, dropped or added: refused. */
static void test_ticket_tampered(void **state)
{
    (void)state;
    struct room_ticket t = {.epoch = 7, .place = 99, .rank = 0}, back;
    snprintf(t.sku, sizeof(t.sku), "s");
    snprintf(t.user, sizeof(t.user), "alice");
    char text[ROOM_TOKEN_MAX + 1], bad[ROOM_TOKEN_MAX + 2];
    size_t n = room_ticket_sign(&key, &t, text, sizeof(text));
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, text, n + 1);
        bad[i] = bad[i] == 'A' ? 'B' : 'A';
        assert_int_equal(room_ticket_check(&key, bad, &back), -1);
        memcpy(bad, text, i);
        memcpy(bad + i, text + i + 1, n - i); /* one dropped */
        assert_int_equal(room_ticket_check(&key, bad, &back), -1);
    }
    memcpy(bad, text, n);
    memcpy(bad + n, "A", 2);
    assert_int_equal(room_ticket_check(&key, bad, &back), -1);
    const char *junk[] = {"", ".", "..", "a.b.c", "abc", NULL};
    for (int i = 0; junk[i]; i++)
        assert_int_equal(room_ticket_check(&key, junk[i], &back), -1);
}

static void test_pass(void **state)
{
    (void)state;
    struct room_pass p = {.epoch = 3, .expires_ms = 1000000}, back;
    snprintf(p.sku, sizeof(p.sku), "tv");
    snprintf(p.user, sizeof(p.user), "bob");
    char text[ROOM_TOKEN_MAX + 1];
    assert_true(room_pass_sign(&key, &p, text, sizeof(text)) > 0);
    assert_int_equal(room_pass_check(&key, text, &back), 0);
    assert_int_equal(back.expires_ms, 1000000);
    assert_int_equal(room_pass_admits(&key, text, "tv", "bob", 999999, 3), ROOM_PASS_OK);
    assert_int_equal(room_pass_admits(&key, text, "tv", "bob", 1000000, 3),
                     ROOM_PASS_EXPIRED);
    assert_int_equal(room_pass_admits(&key, text, "tv", "eve", 0, 3),
                     ROOM_PASS_OTHER_USER);
    assert_int_equal(room_pass_admits(&key, text, "radio", "bob", 0, 3),
                     ROOM_PASS_OTHER_SKU);
    assert_int_equal(room_pass_admits(&key, NULL, "tv", "bob", 0, 3), ROOM_PASS_MISSING);
    assert_int_equal(room_pass_admits(&key, "", "tv", "bob", 0, 3), ROOM_PASS_MISSING);
    assert_int_equal(room_pass_admits(&other, text, "tv", "bob", 0, 3), ROOM_PASS_FORGED);
    /* the SKU was reset since (epoch 4): refused; an epoch not known yet (0): any */
    assert_int_equal(room_pass_admits(&key, text, "tv", "bob", 0, 4), ROOM_PASS_RESET);
    assert_int_equal(room_pass_admits(&key, text, "tv", "bob", 0, 0), ROOM_PASS_OK);
    assert_string_equal(room_pass_status_name(ROOM_PASS_RESET), "reset");
    /* a pass read as a ticket */
    struct room_ticket t;
    assert_int_equal(room_ticket_check(&key, text, &t), -1);
    assert_string_equal(room_pass_status_name(ROOM_PASS_OTHER_USER), "another_user");
    assert_string_equal(room_pass_status_name(ROOM_PASS_FORGED), "forged");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_ticket_round_trip),
        cmocka_unit_test(test_ticket_tampered),
        cmocka_unit_test(test_pass),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
