/* Unit tests: flag validation of service/config.c: the rule that a
 * non-loopback --listen needs an admin token, the ZooKeeper flags, the
 * connection limits, and --order-retention.
 * Nothing is bound or started: svc_config_load only parses and validates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "config.h"
#include "lock.h"

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
    unsetenv("SECKILL_ZK");
    unsetenv("SECKILL_ZK_SESSION_MS");
    unsetenv("SECKILL_ZK_WATCH");
    unsetenv("SECKILL_LOCK");
    unsetenv("SECKILL_REDIS");
    unsetenv("SECKILL_MAX_CONNS_PER_IP");
    unsetenv("SECKILL_REQUEST_TIMEOUT_MS");
    unsetenv("SECKILL_POSTGRES");
    unsetenv("SECKILL_ORDER_RETENTION");
    return 0;
}

/* Loads "<flag> <value>" (flag may be NULL) into cfg. */
static config_status load_flag(struct svc_config *cfg, const char *flag,
                               const char *value, char *err, size_t errlen)
{
    char *argv[] = {"seckill", (char *)flag, (char *)value, NULL};
    err[0] = '\0';
    return svc_config_load(cfg, flag ? 3 : 1, argv, err, errlen);
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
        /* ... and with a token it is fine, but for a host that does not
         * resolve: a bad flag, which names it */
        st = load(refused[i], "--admin-token", "s3cret", err, sizeof(err));
        if (strstr(refused[i], ".invalid")) {
            if (st != CONFIG_ERROR || !strstr(err, "is no address"))
                fail_msg("--listen %s with a token: %s", refused[i], err);
        } else if (st != CONFIG_OK) {
            fail_msg("--listen %s with a token refused: %s", refused[i], err);
        }
    }
}

/* --listen is resolved with the flags into the address the server binds:
 * IPv4, IPv6 (brackets or not), localhost as 127.0.0.1. */
static void test_listen_resolved(void **state)
{
    (void)state;
    const struct {
        const char *listen;
        int family;
        const char *addr;
        int port;
    } cases[] = {{"127.0.0.1:8080", AF_INET, "127.0.0.1", 8080},
                 {"localhost:81", AF_INET, "127.0.0.1", 81},
                 {"[::1]:8081", AF_INET6, "::1", 8081},
                 {"::1:8082", AF_INET6, "::1", 8082},
                 {"[::]:8083", AF_INET6, "::", 8083},
                 {"0.0.0.0:8084", AF_INET, "0.0.0.0", 8084}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct svc_config cfg;
        char err[512], text[INET6_ADDRSTRLEN] = "";
        char *argv[] = {"seckill", "--listen", (char *)cases[i].listen, "--admin-token", "t",
                        NULL};
        if (svc_config_load(&cfg, 5, argv, err, sizeof(err)) != CONFIG_OK)
            fail_msg("--listen %s refused: %s", cases[i].listen, err);
        const struct sockaddr *sa = (const struct sockaddr *)&cfg.listen_addr;
        assert_int_equal(sa->sa_family, cases[i].family);
        int port;
        if (sa->sa_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
            inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
            port = ntohs(in6->sin6_port);
        } else {
            const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
            inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
            port = ntohs(in->sin_port);
        }
        assert_string_equal(text, cases[i].addr);
        assert_int_equal(port, cases[i].port);
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

/* --redis: one address, or the seeds of a cluster (the first kept, counted);
 * a malformed one anywhere in the list is refused, naming the form. */
static void test_redis_seeds(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512];
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.redis_seeds, 1);
    assert_int_equal(load_flag(&cfg, "--redis", "10.0.0.1:7000", err, sizeof(err)),
                     CONFIG_OK);
    assert_string_equal(cfg.redis.host, "10.0.0.1");
    assert_int_equal(cfg.redis.port, 7000);
    assert_int_equal(cfg.redis_seeds, 1);
    assert_int_equal(
        load_flag(&cfg, "--redis", "r1:7000,r2:7001,r3:7002", err, sizeof(err)),
        CONFIG_OK);
    assert_string_equal(cfg.redis.host, "r1");
    assert_int_equal(cfg.redis.port, 7000);
    assert_int_equal(cfg.redis_seeds, 3);
    const char *bad[] = {"r1",         "r1:7000,",      ",r1:7000",
                         "r1:7000,r2", "r1:7000,,r2:1", "r1:x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (load_flag(&cfg, "--redis", bad[i], err, sizeof(err)) != CONFIG_ERROR)
            fail_msg("--redis %s accepted", bad[i]);
        if (!strstr(err, "HOST:PORT"))
            fail_msg("--redis %s: %s", bad[i], err);
    }
}

static void test_zk_flags(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512];
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.zk_hosts, "127.0.0.1:2181");
    assert_int_equal(cfg.zk_session_ms, 3000);
    assert_int_equal(load_flag(&cfg, "--lock", "zk", err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.lock_mode, "zk");

    const char *ok[][2] = {{"10.0.0.1:2181", "10.0.0.1:2181"},
                           {"zk1:2181,zk2:2182,zk3:2183", "zk1:2181,zk2:2182,zk3:2183"},
                           {"[::1]:2181,127.0.0.1:2182", "::1:2181,127.0.0.1:2182"}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (load_flag(&cfg, "--zk", ok[i][0], err, sizeof(err)) != CONFIG_OK)
            fail_msg("--zk %s refused: %s", ok[i][0], err);
        assert_string_equal(cfg.zk_hosts, ok[i][1]);
    }
    const char *bad[] = {
        "",       "zk1",
        "zk1:0",  "zk1:65536",
        "zk1:x",  "zk1:1,",
        ",zk1:1", "zk1:1,,zk2:2",
        ":2181",  "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1,j:1,k:1,l:1,m:1,n:1,o:1,p:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (load_flag(&cfg, "--zk", bad[i], err, sizeof(err)) != CONFIG_ERROR)
            fail_msg("--zk '%s' accepted", bad[i]);
        if (!strstr(err, "--zk") || !strstr(err, "HOST:PORT"))
            fail_msg("--zk '%s': the message does not say why: %s", bad[i], err);
    }

    assert_int_equal(load_flag(&cfg, "--zk-session-ms", "1000", err, sizeof(err)),
                     CONFIG_OK);
    assert_int_equal(cfg.zk_session_ms, 1000);
    const char *bad_ms[] = {"", "0", "99", "600001", "-3000", "3s", "abc"};
    for (size_t i = 0; i < sizeof(bad_ms) / sizeof(bad_ms[0]); i++) {
        if (load_flag(&cfg, "--zk-session-ms", bad_ms[i], err, sizeof(err)) !=
            CONFIG_ERROR)
            fail_msg("--zk-session-ms '%s' accepted", bad_ms[i]);
        if (!strstr(err, "--zk-session-ms") || !strstr(err, "100..600000"))
            fail_msg("--zk-session-ms '%s': the message does not say why: %s", bad_ms[i],
                     err);
    }

    /* the environment, and the flag over it */
    setenv("SECKILL_ZK", "zk9:2190", 1);
    setenv("SECKILL_ZK_SESSION_MS", "5000", 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.zk_hosts, "zk9:2190");
    assert_int_equal(cfg.zk_session_ms, 5000);
    assert_int_equal(load_flag(&cfg, "--zk", "zk8:2180", err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.zk_hosts, "zk8:2180");
    setenv("SECKILL_ZK_SESSION_MS", "10", 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_ERROR);
    assert_non_null(strstr(err, "SECKILL_ZK_SESSION_MS"));
    unsetenv("SECKILL_ZK");
    unsetenv("SECKILL_ZK_SESSION_MS");
}

/* --zk-watch: what a zk waiter watches; its predecessor unless asked. */
static void test_zk_watch_flag(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512];
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.zk_watch, LOCK_ZK_WATCH_PREDECESSOR);
    assert_int_equal(load_flag(&cfg, "--zk-watch", "all", err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.zk_watch, LOCK_ZK_WATCH_ALL);
    assert_int_equal(load_flag(&cfg, "--zk-watch", "predecessor", err, sizeof(err)),
                     CONFIG_OK);
    assert_int_equal(cfg.zk_watch, LOCK_ZK_WATCH_PREDECESSOR);
    const char *bad[] = {"", "All", "parent", "pred", "1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (load_flag(&cfg, "--zk-watch", bad[i], err, sizeof(err)) != CONFIG_ERROR)
            fail_msg("--zk-watch '%s' accepted", bad[i]);
        if (!strstr(err, "--zk-watch") || !strstr(err, "predecessor or all"))
            fail_msg("--zk-watch '%s': the message does not say why: %s", bad[i], err);
    }
    /* the environment, and the flag over it */
    setenv("SECKILL_ZK_WATCH", "all", 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.zk_watch, LOCK_ZK_WATCH_ALL);
    assert_int_equal(load_flag(&cfg, "--zk-watch", "predecessor", err, sizeof(err)),
                     CONFIG_OK);
    assert_int_equal(cfg.zk_watch, LOCK_ZK_WATCH_PREDECESSOR);
    unsetenv("SECKILL_ZK_WATCH");
}

/* Writes text into a fresh file under /tmp; its path in path. */
static void secret_file(char path[64], const char *text)
{
    snprintf(path, 64, "/tmp/seckill-test-config.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* --admin-token-file and --redis-password-file (and their SECKILL_*_FILE):
 * the file's content, read once, its trailing newline stripped; an unreadable
 * or empty file is an error that names the flag and the file. */
static void test_secret_files(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512], token[64], password[64];
    secret_file(token, "t0k3n\n");
    secret_file(password, "pa ss\r\n");
    assert_int_equal(load_flag(&cfg, "--admin-token-file", token, err, sizeof(err)),
                     CONFIG_OK);
    assert_string_equal(cfg.admin_token, "t0k3n");
    setenv("SECKILL_REDIS_PASSWORD_FILE", password, 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.redis_password, "pa ss");
    unsetenv("SECKILL_REDIS_PASSWORD_FILE");
    /* a public address passes with a token read from a file */
    char *argv[] = {"seckill", "--listen", "0.0.0.0:8080", "--admin-token-file",
                    token,     NULL};
    assert_int_equal(svc_config_load(&cfg, 5, argv, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(
        load_flag(&cfg, "--admin-token-file", "/nonexistent/token", err, sizeof(err)),
        CONFIG_ERROR);
    assert_non_null(strstr(err, "--admin-token-file"));
    assert_non_null(strstr(err, "/nonexistent/token"));
    char empty[64];
    secret_file(empty, "\n");
    assert_int_equal(load_flag(&cfg, "--redis-password-file", empty, err, sizeof(err)),
                     CONFIG_ERROR);
    assert_non_null(strstr(err, "--redis-password-file"));
    unlink(token);
    unlink(password);
    unlink(empty);
}

/* --pay-token(-file) and --postgres-file: the payment service's own token,
 * which may not be the admin token's; the connection string from a file,
 * checked as --postgres checks it, a refusal never repeating its content. */
static void test_pay_token_postgres_file(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512], pay[64], pg[64], badpg[64];
    secret_file(pay, "p4y\n");
    secret_file(pg, "host=127.0.0.1 port=5 user=seckill password=hunter2\n");
    secret_file(badpg, "host=127.0.0.1 password=hunter2 nonsense\n");
    assert_int_equal(load_flag(&cfg, "--pay-token-file", pay, err, sizeof(err)),
                     CONFIG_OK);
    assert_string_equal(cfg.pay_token, "p4y");
    setenv("SECKILL_PAY_TOKEN", "from-env", 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.pay_token, "from-env");
    unsetenv("SECKILL_PAY_TOKEN");
    char *same[] = {"seckill", "--admin-token", "t", "--pay-token", "t", NULL};
    assert_int_equal(svc_config_load(&cfg, 5, same, err, sizeof(err)), CONFIG_ERROR);
    assert_non_null(strstr(err, "--pay-token"));
    assert_int_equal(load_flag(&cfg, "--postgres-file", pg, err, sizeof(err)), CONFIG_OK);
    assert_string_equal(cfg.postgres,
                        "host=127.0.0.1 port=5 user=seckill password=hunter2");
    assert_int_equal(load_flag(&cfg, "--postgres-file", badpg, err, sizeof(err)),
                     CONFIG_ERROR);
    assert_non_null(strstr(err, "--postgres-file"));
    assert_null(strstr(err, "hunter2"));
    assert_null(strstr(err, "nonsense"));
    unlink(pay);
    unlink(pg);
    unlink(badpg);
}

/* --room-key-file: the file's bytes, any of them (NUL and newlines inside),
 * a final newline dropped; fewer than 32 refused without repeating them. */
static void test_room_key_file(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512], key[64] = "/tmp/seckill-test-config.XXXXXX", small[64];
    unsigned char raw[41];
    for (size_t i = 0; i < sizeof(raw); i++)
        raw[i] = (unsigned char)(i * 37); /* a NUL, a newline among them */
    raw[sizeof(raw) - 1] = '\n';
    int fd = mkstemp(key);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, raw, sizeof(raw)), (ssize_t)sizeof(raw));
    close(fd);
    assert_int_equal(load_flag(&cfg, "--room-key-file", key, err, sizeof(err)),
                     CONFIG_OK);
    assert_int_equal(cfg.room_key_len, sizeof(raw) - 1);
    assert_memory_equal(cfg.room_key, raw, sizeof(raw) - 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.room_key_len, 0); /* none: shared through Redis */
    secret_file(small, "0123456789abcdef0123456789abcde\n"); /* 31 bytes */
    assert_int_equal(load_flag(&cfg, "--room-key-file", small, err, sizeof(err)),
                     CONFIG_ERROR);
    assert_non_null(strstr(err, "--room-key-file"));
    assert_null(strstr(err, "0123456789"));
    unlink(key);
    unlink(small);
}

/* --version prints and exits 0, like --help. */
/* The connection limits: defaults, flag, environment, and their ranges. */
static void test_connection_limits(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512];
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.max_conns_per_ip, 256);
    assert_int_equal(cfg.request_timeout_ms, 10000);
    assert_int_equal(load_flag(&cfg, "--max-conns-per-ip", "0", err, sizeof(err)),
                     CONFIG_OK);
    assert_int_equal(cfg.max_conns_per_ip, 0); /* no limit */
    setenv("SECKILL_REQUEST_TIMEOUT_MS", "2500", 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.request_timeout_ms, 2500);
    assert_int_equal(load_flag(&cfg, "--request-timeout-ms", "400", err, sizeof(err)),
                     CONFIG_OK);
    assert_int_equal(cfg.request_timeout_ms, 400); /* the flag wins */
    unsetenv("SECKILL_REQUEST_TIMEOUT_MS");
    const char *bad[][2] = {{"--max-conns-per-ip", "-1"},
                            {"--max-conns-per-ip", "many"},
                            {"--request-timeout-ms", "99"},
                            {"--request-timeout-ms", "3600001"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(load_flag(&cfg, bad[i][0], bad[i][1], err, sizeof(err)),
                         CONFIG_ERROR);
        assert_non_null(strstr(err, bad[i][0]));
    }
}

/* --order-retention: 7 days by default, a number and its unit, 0 for none;
 * refused without --postgres (the records would be the only copy), also
 * from the environment, and for a value that is not one. */
static void test_order_retention(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[512];
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_OK);
    assert_int_equal(cfg.order_retention_ms, 7LL * 86400000);
    setenv("SECKILL_POSTGRES", "postgresql://x@127.0.0.1/x", 1);
    const struct {
        const char *value;
        long long ms;
    } good[] = {{"0", 0},
                {"500ms", 500},
                {"90s", 90000},
                {"15m", 900000},
                {"2h", 7200000},
                {"7d", 604800000LL},
                {"3650d", 3650LL * 86400000}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(
            load_flag(&cfg, "--order-retention", good[i].value, err, sizeof(err)),
            CONFIG_OK);
        assert_true(cfg.order_retention_ms == good[i].ms);
    }
    const char *bad[] = {"7", "1w", "-1s", "s", "1.5h", "3651d", "99999999999999999999d",
                         ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(load_flag(&cfg, "--order-retention", bad[i], err, sizeof(err)),
                         CONFIG_ERROR);
        assert_non_null(strstr(err, "--order-retention"));
    }
    unsetenv("SECKILL_POSTGRES");
    assert_int_equal(load_flag(&cfg, "--order-retention", "1s", err, sizeof(err)),
                     CONFIG_ERROR);
    assert_non_null(strstr(err, "needs --postgres"));
    setenv("SECKILL_ORDER_RETENTION", "1d", 1);
    assert_int_equal(load_flag(&cfg, NULL, NULL, err, sizeof(err)), CONFIG_ERROR);
    unsetenv("SECKILL_ORDER_RETENTION");
}

static void test_version(void **state)
{
    (void)state;
    struct svc_config cfg;
    char err[64];
    assert_int_equal(load_flag(&cfg, "--version", NULL, err, sizeof(err)), CONFIG_HELP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_loopback_needs_no_token, setup),
        cmocka_unit_test_setup(test_public_address_needs_token, setup),
        cmocka_unit_test_setup(test_listen_resolved, setup),
        cmocka_unit_test_setup(test_token_from_environment, setup),
        cmocka_unit_test_setup(test_redis_seeds, setup),
        cmocka_unit_test_setup(test_zk_flags, setup),
        cmocka_unit_test_setup(test_zk_watch_flag, setup),
        cmocka_unit_test_setup(test_secret_files, setup),
        cmocka_unit_test_setup(test_pay_token_postgres_file, setup),
        cmocka_unit_test_setup(test_room_key_file, setup),
        cmocka_unit_test_setup(test_connection_limits, setup),
        cmocka_unit_test_setup(test_version, setup),
        cmocka_unit_test_setup(test_order_retention, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
