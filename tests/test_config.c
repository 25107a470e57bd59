/* Unit tests: flag validation of service/config.c, here the rule that a
 * non-loopback --listen needs an admin token. Nothing is bound or started:
 * svc_config_load only parses and validates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "config.h"

/* Loads "--listen <listen>" plus extra (a flag and its value, or NULL). */
static config_status load(const char *listen, const char *flag, const char *value,
                          char *err, size_t errlen)
{
    struct svc_config cfg;
    char *argv[] = {"seckill",    "--listen",    (char *)listen,
                    (char *)flag, (char *)value, NULL};
    int argc = flag ? 5 : 3;
    err[0] = '\0';
    return svc_config_load(&cfg, argc, argv, err, errlen);
}

static int setup(void **state)
{
    (void)state;
    unsetenv("SECKILL_ADMIN_TOKEN");
    unsetenv("SECKILL_LISTEN");
    return 0;
}

static void test_loopback_needs_no_token(void **state)
{
    (void)state;
    const char *ok[] = {"127.0.0.1:8080", "127.0.0.2:8080",       "127.255.255.254:1",
                        "localhost:8080", "LocalHost:8080",       "::1:8080",
                        "[::1]:8080",     "::ffff:127.0.0.1:8080"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char err[512];
        config_status st = load(ok[i], NULL, NULL, err, sizeof(err));
        if (st != CONFIG_OK)
            fail_msg("--listen %s refused: %s", ok[i], err);
    }
}

static void test_public_address_needs_token(void **state)
{
    (void)state;
    const char *refused[] = {
        "0.0.0.0:8080",         ":::8080",          "[::]:8080",
        "10.0.0.1:8080",        "192.168.1.10:80",  "128.0.0.1:8080",
        "126.255.255.255:8080", "2001:db8::1:8080", "no-such-host.invalid:8080"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        char err[512];
        config_status st = load(refused[i], NULL, NULL, err, sizeof(err));
        if (st != CONFIG_ERROR)
            fail_msg("--listen %s accepted without a token", refused[i]);
        if (!strstr(err, "--admin-token") || !strstr(err, "loopback"))
            fail_msg("--listen %s: the message does not say why: %s", refused[i], err);
        /* ... and with a token it is fine */
        st = load(refused[i], "--admin-token", "s3cret", err, sizeof(err));
        if (st != CONFIG_OK)
            fail_msg("--listen %s with a token refused: %s", refused[i], err);
    }
}

static void test_token_from_environment(void **state)
{
    (void)state;
    char err[512];
    setenv("SECKILL_ADMIN_TOKEN", "from-env", 1);
    assert_int_equal(load("0.0.0.0:8080", NULL, NULL, err, sizeof(err)), CONFIG_OK);
    unsetenv("SECKILL_ADMIN_TOKEN");
    /* the listen address from the environment is held to the same rule */
    setenv("SECKILL_LISTEN", "0.0.0.0:8080", 1);
    struct svc_config cfg;
    char *argv[] = {"seckill", NULL};
    assert_int_equal(svc_config_load(&cfg, 1, argv, err, sizeof(err)), CONFIG_ERROR);
    assert_non_null(strstr(err, "--admin-token"));
    unsetenv("SECKILL_LISTEN");
    /* the default address is loopback */
    assert_int_equal(svc_config_load(&cfg, 1, argv, err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.listen.host, "127.0.0.1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_loopback_needs_no_token, setup),
        cmocka_unit_test_setup(test_public_address_needs_token, setup),
        cmocka_unit_test_setup(test_token_from_environment, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
