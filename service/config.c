#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "file.h"
#include "lock.h"
#include "log.h"
#include "version.h"

typedef config_status (*option_parse_fn)(struct svc_config *cfg, const char *value,
                                         char *err, size_t errlen);

struct option_spec {
    const char *name; /* flag without the leading "--" */
    const char *arg;  /* what the value looks like, for --help */
    const char *dflt; /* default, for --help */
    const char *help;
    option_parse_fn parse;
};

static config_status parse_int(const char *value, long min, long max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < min || v > max)
        return CONFIG_ERROR;
    *out = (int)v;
    return CONFIG_OK;
}

#define INT_OPTION(fn, field, min, max)                                                  \
    static config_status fn(struct svc_config *cfg, const char *value, char *err,        \
                            size_t errlen)                                               \
    {                                                                                    \
        if (parse_int(value, min, max, &cfg->field) == CONFIG_OK)                        \
            return CONFIG_OK;                                                            \
        snprintf(err, errlen, "must be an integer in %ld..%ld", (long)(min),             \
                 (long)(max));                                                           \
        return CONFIG_ERROR;                                                             \
    }

INT_OPTION(opt_segments, segments, 1, 1024)
INT_OPTION(opt_ttl, lock_ttl_ms, 10, 3600000)
INT_OPTION(opt_wait, wait_ms, 0, 600000)
INT_OPTION(opt_work, work_us, 0, 10000000)
INT_OPTION(opt_batch, batch, 1, 1024)
INT_OPTION(opt_min_acked, min_replicas_acked, 0, 16)
INT_OPTION(opt_instance, instance_id, 0, 1023)
INT_OPTION(opt_threads, threads, 1, 1024)
INT_OPTION(opt_zk_session, zk_session_ms, 100, 600000)
INT_OPTION(opt_max_conns_per_ip, max_conns_per_ip, 0, 1000000)
INT_OPTION(opt_request_timeout, request_timeout_ms, 100, 3600000)

static config_status addr_option(struct rconn_addr *addr, const char *value, char *err,
                                 size_t errlen)
{
    if (rconn_addr_parse(value, addr) == RCONN_OK)
        return CONFIG_OK;
    snprintf(err, errlen, "must be HOST:PORT");
    return CONFIG_ERROR;
}

static config_status opt_listen(struct svc_config *cfg, const char *value, char *err,
                                size_t errlen)
{
    return addr_option(&cfg->listen, value, err, errlen);
}

/* One Redis, or (several addresses) the seeds of a Redis Cluster: the first
 * is kept, and how many there are. */
static config_status opt_redis(struct svc_config *cfg, const char *value, char *err,
                               size_t errlen)
{
    char first[300];
    const char *comma = strchr(value, ',');
    size_t n = comma ? (size_t)(comma - value) : strlen(value);
    if (n >= sizeof(first)) {
        snprintf(err, errlen, "must be HOST:PORT[,HOST:PORT...]");
        return CONFIG_ERROR;
    }
    memcpy(first, value, n);
    first[n] = '\0';
    struct rconn_addr seed;
    cfg->redis_seeds = 0;
    for (const char *p = value; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        char one[300];
        size_t len = strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p);
        if (len >= sizeof(one))
            len = sizeof(one) - 1;
        memcpy(one, p, len);
        one[len] = '\0';
        if (rconn_addr_parse(one, &seed) != RCONN_OK) {
            snprintf(err, errlen, "must be HOST:PORT[,HOST:PORT...]");
            return CONFIG_ERROR;
        }
        if (cfg->redis_seeds == SVC_MAX_SEEDS) {
            snprintf(err, errlen, "at most %d addresses", SVC_MAX_SEEDS);
            return CONFIG_ERROR;
        }
        cfg->redis_seed[cfg->redis_seeds++] = seed;
    }
    return addr_option(&cfg->redis, first, err, errlen);
}

/* A string option: copies value into field (of size len) when ok, else puts
 * why in err and returns -1. */
static config_status string_option(char *field, size_t len, const char *value, int ok,
                                   const char *why, char *err, size_t errlen)
{
    if (!ok) {
        snprintf(err, errlen, "%s", why);
        return CONFIG_ERROR;
    }
    snprintf(field, len, "%s", value);
    return CONFIG_OK;
}

static config_status opt_password(struct svc_config *cfg, const char *value, char *err,
                                  size_t errlen)
{
    return string_option(cfg->redis_password, sizeof(cfg->redis_password), value,
                         strlen(value) < sizeof(cfg->redis_password), "is too long", err,
                         errlen);
}

/* --postgres: what libpq parses as a connection string or URI (checked here,
 * connected later: a database not up yet is not a bad flag). */
static config_status opt_postgres(struct svc_config *cfg, const char *value, char *err,
                                  size_t errlen)
{
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(value, &why);
    if (!opts) {
        /* libpq's messages end with a newline */
        int n = why ? (int)strcspn(why, "\n") : 13;
        snprintf(err, errlen, "is not a libpq connection string or URI: %.*s", n,
                 why ? why : "out of memory");
        PQfreemem(why);
        return CONFIG_ERROR;
    }
    PQconninfoFree(opts);
    return string_option(cfg->postgres, sizeof(cfg->postgres), value,
                         value[0] && strlen(value) < sizeof(cfg->postgres),
                         "must be a connection string of at most 1023 bytes", err, errlen);
}

/* Reads the one line of the file at path into field (of size len), its
 * trailing newline ("\n" or "\r\n") stripped. For secrets, read once at start
 * (they stay out of /proc/PID/cmdline and /proc/PID/environ), and for the log
 * level. Refused, field untouched, when unreadable, empty or of several lines;
 * err never repeats the content. */
static config_status file_line(char *field, size_t len, const char *path, char *err,
                               size_t errlen)
{
    char buf[1024];
    size_t n;
    if (file_read(path, buf, sizeof(buf), &n, err, errlen) != 0)
        return CONFIG_ERROR;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n == 0 || n >= len || memchr(buf, '\n', n) || memchr(buf, '\0', n)) {
        snprintf(err, errlen, "the file must hold one line of 1..%zu characters",
                 len - 1);
        return CONFIG_ERROR;
    }
    memcpy(field, buf, n);
    field[n] = '\0';
    return CONFIG_OK;
}

static config_status opt_password_file(struct svc_config *cfg, const char *value,
                                       char *err, size_t errlen)
{
    return file_line(cfg->redis_password, sizeof(cfg->redis_password), value, err,
                     errlen);
}

static config_status opt_token_file(struct svc_config *cfg, const char *value, char *err,
                                    size_t errlen)
{
    return file_line(cfg->admin_token, sizeof(cfg->admin_token), value, err, errlen);
}

/* --buyer-key-file: the key (buyer_key_read). */
static config_status opt_buyer_key_file(struct svc_config *cfg, const char *value,
                                        char *err, size_t errlen)
{
    return buyer_key_read(value, &cfg->buyer_key, err, errlen) == 0 ? CONFIG_OK
                                                                    : CONFIG_ERROR;
}

/* --postgres-file: the connection string read from a file, checked as
 * --postgres checks it. A refusal names neither the content nor libpq's
 * reason, which may quote it (the password is in it). */
static config_status opt_postgres_file(struct svc_config *cfg, const char *value,
                                       char *err, size_t errlen)
{
    char conninfo[sizeof(cfg->postgres)];
    if (file_line(conninfo, sizeof(conninfo), value, err, errlen) != CONFIG_OK)
        return CONFIG_ERROR;
    char why[160];
    if (opt_postgres(cfg, conninfo, why, sizeof(why)) != CONFIG_OK) {
        snprintf(err, errlen, "the file holds no libpq connection string or URI");
        return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

static config_status opt_pay_token_file(struct svc_config *cfg, const char *value,
                                        char *err, size_t errlen)
{
    return file_line(cfg->pay_token, sizeof(cfg->pay_token), value, err, errlen);
}

/* --room-key-file: the file's bytes (a final newline dropped), 32..1024 of
 * them, any bytes (random ones, not a line of text). */
static config_status opt_room_key_file(struct svc_config *cfg, const char *value,
                                       char *err, size_t errlen)
{
    unsigned char buf[sizeof(cfg->room_key) + 2];
    size_t n;
    if (file_read(value, buf, sizeof(buf), &n, err, errlen) != 0)
        return CONFIG_ERROR;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n < 32 || n > sizeof(cfg->room_key)) {
        snprintf(err, errlen, "the file must hold 32..%zu bytes (random ones)",
                 sizeof(cfg->room_key));
        return CONFIG_ERROR;
    }
    memcpy(cfg->room_key, buf, n);
    cfg->room_key_len = n;
    return CONFIG_OK;
}

static config_status opt_lock(struct svc_config *cfg, const char *value, char *err,
                              size_t errlen)
{
    return string_option(cfg->lock_mode, sizeof(cfg->lock_mode), value,
                         strcmp(value, "atomic") == 0 || strcmp(value, "pg") == 0 ||
                             lock_mode_known(value),
                         "must be none, local, setnx, redis, redlock, zk, pg or atomic",
                         err, errlen);
}

static config_status opt_lock_nodes(struct svc_config *cfg, const char *value, char *err,
                                    size_t errlen)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", value);
    cfg->nlock_nodes = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (cfg->nlock_nodes == CONFIG_MAX_LOCK_NODES ||
            rconn_addr_parse(tok, &cfg->lock_nodes[cfg->nlock_nodes]) != RCONN_OK) {
            snprintf(err, errlen, "must be up to %d HOST:PORT separated by commas",
                     CONFIG_MAX_LOCK_NODES);
            return CONFIG_ERROR;
        }
        cfg->nlock_nodes++;
    }
    if (cfg->nlock_nodes < 3 || cfg->nlock_nodes % 2 == 0) {
        snprintf(err, errlen, "needs an odd number of nodes, at least 3");
        return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

/* Checks each address of value and writes the list into out as the
 * ZooKeeper client parses it: it splits host and port at the last ':' and
 * resolves the host as it is, so an IPv6 host loses its brackets. -1 when an
 * address is malformed, empty or one too many. */
static config_status zk_hosts_parse(const char *value, char *out, size_t len)
{
    char buf[1024];
    size_t vlen = strlen(value), used = 0;
    if (vlen == 0 || vlen >= sizeof(buf) || vlen >= len || value[0] == ',' ||
        value[vlen - 1] == ',' || strstr(value, ",,"))
        return CONFIG_ERROR;
    snprintf(buf, sizeof(buf), "%s", value);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct rconn_addr a;
        if (n == CONFIG_MAX_LOCK_NODES || rconn_addr_parse(tok, &a) != RCONN_OK)
            return CONFIG_ERROR;
        const char *host = a.host;
        size_t hl = strlen(host);
        if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
            host++;
            hl -= 2;
        }
        used += (size_t)snprintf(out + used, len - used, "%s%.*s:%d", n ? "," : "",
                                 (int)hl, host, a.port);
        if (used >= len)
            return CONFIG_ERROR;
        n++;
    }
    return CONFIG_OK;
}

static config_status opt_zk(struct svc_config *cfg, const char *value, char *err,
                            size_t errlen)
{
    char hosts[sizeof(cfg->zk_hosts)];
    if (zk_hosts_parse(value, hosts, sizeof(hosts)) == CONFIG_OK) {
        snprintf(cfg->zk_hosts, sizeof(cfg->zk_hosts), "%s", hosts);
        return CONFIG_OK;
    }
    snprintf(err, errlen, "must be up to %d HOST:PORT separated by commas",
             CONFIG_MAX_LOCK_NODES);
    return CONFIG_ERROR;
}

static config_status opt_zk_watch(struct svc_config *cfg, const char *value, char *err,
                                  size_t errlen)
{
    if (strcmp(value, "predecessor") == 0 || strcmp(value, "all") == 0) {
        cfg->zk_watch =
            strcmp(value, "all") == 0 ? LOCK_ZK_WATCH_ALL : LOCK_ZK_WATCH_PREDECESSOR;
        return CONFIG_OK;
    }
    snprintf(err, errlen, "must be predecessor or all");
    return CONFIG_ERROR;
}

static config_status opt_fencing(struct svc_config *cfg, const char *value, char *err,
                                 size_t errlen)
{
    if (strcmp(value, "on") == 0 || strcmp(value, "off") == 0) {
        cfg->fencing = strcmp(value, "on") == 0;
        return CONFIG_OK;
    }
    snprintf(err, errlen, "must be on or off");
    return CONFIG_ERROR;
}

static config_status opt_token(struct svc_config *cfg, const char *value, char *err,
                               size_t errlen)
{
    return string_option(cfg->admin_token, sizeof(cfg->admin_token), value,
                         *value && strlen(value) < sizeof(cfg->admin_token),
                         "must be 1..255 characters", err, errlen);
}

#define RETENTION_MAX_MS (3650LL * 86400000) /* ten years */

/* --order-retention: 0 (records kept), or a whole number with its unit, ms, s,
 * m, h or d ("7d", "90s", "500ms"), up to ten years. */
static config_status opt_order_retention(struct svc_config *cfg, const char *value,
                                         char *err, size_t errlen)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    char *end;
    errno = 0;
    long long n = strtoll(value, &end, 10);
    int ok = !errno && end != value && isdigit((unsigned char)value[0]) &&
             n <= RETENTION_MAX_MS;
    long long ms = -1;
    if (ok && n == 0 && *end == '\0')
        ms = 0;
    for (size_t i = 0; ok && ms < 0 && i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].unit) == 0 && n <= RETENTION_MAX_MS / units[i].ms)
            ms = n * units[i].ms;
    if (ms < 0) {
        snprintf(err, errlen,
                 "must be 0 (kept) or a whole number with a unit, ms, s, m, h or d "
                 "(e.g. 7d), up to 3650d");
        return CONFIG_ERROR;
    }
    cfg->order_retention_ms = ms;
    cfg->order_retention_given = 1;
    return CONFIG_OK;
}

static config_status opt_pay_token(struct svc_config *cfg, const char *value, char *err,
                                   size_t errlen)
{
    return string_option(cfg->pay_token, sizeof(cfg->pay_token), value,
                         *value && strlen(value) < sizeof(cfg->pay_token),
                         "must be 1..255 characters", err, errlen);
}

static config_status opt_log_level(struct svc_config *cfg, const char *value, char *err,
                                   size_t errlen)
{
    cfg->log_level = log_level_parse(value);
    if (cfg->log_level >= 0)
        return CONFIG_OK;
    snprintf(err, errlen, "must be debug, info, warn or error");
    return CONFIG_ERROR;
}

/* --log-level-file: read now (an unreadable file or an unknown level is a
 * bad flag), and again at every SIGHUP (svc_config_log_level). */
static config_status opt_log_level_file(struct svc_config *cfg, const char *value,
                                        char *err, size_t errlen)
{
    if (strlen(value) >= sizeof(cfg->log_level_file)) {
        snprintf(err, errlen, "is too long");
        return CONFIG_ERROR;
    }
    snprintf(cfg->log_level_file, sizeof(cfg->log_level_file), "%s", value);
    int level = svc_config_log_level(cfg, err, errlen);
    if (level < 0)
        return CONFIG_ERROR;
    cfg->log_level = level;
    return CONFIG_OK;
}

int svc_config_log_level(const struct svc_config *cfg, char *err, size_t errlen)
{
    char word[16];
    if (!cfg->log_level_file[0])
        return cfg->log_level;
    if (file_line(word, sizeof(word), cfg->log_level_file, err, errlen) != CONFIG_OK)
        return -1;
    int level = log_level_parse(word);
    if (level < 0)
        snprintf(err, errlen, "'%s' is not debug, info, warn or error", word);
    return level;
}

static const struct option_spec options[] = {
    {"listen", "HOST:PORT", "127.0.0.1:8080",
     "HTTP address; a non-loopback one needs --admin-token", opt_listen},
    {"redis", "HOST:PORT[,...]", "127.0.0.1:6379",
     "Redis holding stock, orders and locks: one node, or seeds of a Redis Cluster "
     "(detected; several addresses imply one)",
     opt_redis},
    {"redis-password", "PW", "none", "Redis AUTH password", opt_password},
    {"redis-password-file", "F", "none",
     "Redis AUTH password read from file F at start (trailing newline stripped): "
     "not visible in argv or the environment",
     opt_password_file},
    {"lock", "MODE", "redis", "none, local, setnx, redis, redlock, zk, pg or atomic",
     opt_lock},
    {"postgres", "URL", "none",
     "PostgreSQL (libpq connection string or URI): the orders' system of record (the "
     "sink) and --lock pg's table; without it, no sink, and --lock pg exits 2",
     opt_postgres},
    {"order-retention", "DUR", "7d",
     "with --postgres: a settled order's record (paid, cancelled, expired, or placed "
     "without a payment window) leaves Redis DUR after PostgreSQL has its final state, "
     "and GET /orders/{id} then answers from PostgreSQL; 0: records stay until their "
     "SKU is retired; units ms, s, m, h, d (up to 3650d); without --postgres exits 2",
     opt_order_retention},
    {"postgres-file", "F", "none",
     "the --postgres connection string read from file F at start (trailing newline "
     "stripped): its password not visible in argv or the environment",
     opt_postgres_file},
    {"lock-nodes", "H:P,H:P,...", "none",
     "independent Redis masters for redlock (odd, 3..15); --lock redlock without "
     "them exits 2",
     opt_lock_nodes},
    {"zk", "H:P[,H:P...]", "127.0.0.1:2181", "ZooKeeper ensemble for --lock zk", opt_zk},
    {"zk-session-ms", "N", "3000",
     "ZooKeeper session timeout for --lock zk, the lease (100..600000; the server "
     "may grant another)",
     opt_zk_session},
    {"zk-watch", "predecessor|all", "predecessor",
     "what a waiter watches under --lock zk: its predecessor (a release wakes one "
     "waiter), or all the lock's children as the naive recipe does (every change "
     "wakes every waiter: the herd effect, counted in /stats lock.watch_wakeups)",
     opt_zk_watch},
    {"segments", "K", "16", "segments of a SKU created without a count (1..1024)",
     opt_segments},
    {"lock-ttl-ms", "N", "3000", "lock lease (10..3600000)", opt_ttl},
    {"wait-ms", "N", "1000",
     "longest wait for a segment lock before 503 busy (0..600000)", opt_wait},
    {"work-us", "N", "0",
     "simulated work inside the critical section (a batch's orders work side by side) "
     "(0..10000000)",
     opt_work},
    {"batch", "N", "32",
     "most queued orders one lock hold serves (atomic on one Redis: one group "
     "commit's script); 1: one order per hold (1..1024)",
     opt_batch},
    {"min-replicas-acked", "N", "1 when the data Redis has replicas, else 0",
     "a 201 is answered only after N replicas acknowledged the order (WAIT); "
     "else 503 outcome_unknown with its order id (0..16)",
     opt_min_acked},
    {"fencing", "on|off", "on", "fenced commits", opt_fencing},
    {"instance-id", "N", "leased from Redis", "order-id worker id (0..1023)",
     opt_instance},
    {"threads", "N", "1 per core, >= 2",
     "event loops, each serving HTTP and the orders' Redis work on one connection, "
     "no thread waiting on Redis for an order (1..1024)",
     opt_threads},
    {"max-conns-per-ip", "N", "256",
     "most open connections from one client address; more are refused at accept "
     "(0: no limit; a balancer on the same host is one address: give it room) "
     "(0..1000000)",
     opt_max_conns_per_ip},
    {"request-timeout-ms", "N", "10000",
     "a request's headers and body must arrive within this, however slowly they "
     "trickle; else 408 and the connection is closed (100..3600000)",
     opt_request_timeout},
    {"admin-token", "T", "none",
     "admin routes need Authorization: Bearer T; required unless --listen is loopback",
     opt_token},
    {"admin-token-file", "F", "none",
     "the admin token read from file F at start (trailing newline stripped): not "
     "visible in argv or the environment",
     opt_token_file},
    {"pay-token", "T", "none",
     "POST /orders/{id}/pay needs Authorization: Bearer T (the payment service's "
     "credential), and the admin token no longer pays; without it pays take the "
     "admin token",
     opt_pay_token},
    {"pay-token-file", "F", "none",
     "the pay token read from file F at start (trailing newline stripped): not "
     "visible in argv or the environment",
     opt_pay_token_file},
    {"buyer-key-file", "F", "none",
     "the shop's key for buyer tokens (16..1024 bytes, a final newline dropped): "
     "placing, cancelling and reading an order, and joining a waiting room, then "
     "need Seckill-Buyer: "
     "<user_id>.<expiry>.<HMAC-SHA256 hex>; without it user_id is trusted (the "
     "gateway must authenticate buyers)",
     opt_buyer_key_file},
    {"room-key-file", "F", "none",
     "the key (32..1024 random bytes, a final newline dropped) that signs waiting-room "
     "tickets and passes, read from file F at start; every instance must read the same. "
     "Without it the instances share a random key kept in Redis (seckill:room:key)",
     opt_room_key_file},
    {"log-level", "L", "info", "debug, info, warn or error", opt_log_level},
    {"log-level-file", "F", "none",
     "the log level read from file F (one word, as --log-level) at start and again "
     "at every SIGHUP; wins over --log-level",
     opt_log_level_file},
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

#define ENV_PREFIX "SECKILL_"

/* The environment variable of option o: SECKILL_<NAME>, upper case, '-'
 * becomes '_'. */
static void option_env(const struct option_spec *o, char env[64])
{
    size_t n = strlen(ENV_PREFIX);
    memcpy(env, ENV_PREFIX, n);
    for (const char *p = o->name; *p && n < 63; p++)
        env[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    env[n] = '\0';
}

static void print_help(void)
{
    printf("usage: seckill [flags]\n\nEvery flag also reads SECKILL_<NAME> from the "
           "environment; the flag wins.\n\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        char env[64], flag[64];
        option_env(&options[i], env);
        snprintf(flag, sizeof(flag), "--%s %s", options[i].name, options[i].arg);
        printf("  %-28s %s (default: %s)\n  %-28s env %s\n", flag, options[i].help,
               options[i].dflt, "", env);
    }
    printf("  %-28s this text\n", "--help");
    printf("  %-28s the version and the commit\n", "--version");
    printf("\nOrder answers: 201 placed; 400 bad_request; 404 not_found; 409 sold_out\n"
           "or limit_reached; 413 too_large; 422 idempotency_mismatch (the\n"
           "Idempotency-Key was used for another user_id or qty: nothing placed,\n"
           "nothing revealed); 503 busy or unavailable (nothing placed, retry); 503\n"
           "outcome_unknown with order_id (the commit was sent, its answer lost:\n"
           "GET /orders/{order_id} tells, and a retry with the same Idempotency-Key\n"
           "is safe).\n"
           "\nListening on a non-loopback address needs --admin-token (else exit 2).\n"
           "/metrics has seckill_redis_durable: 1 when the data Redis runs AOF with\n"
           "appendfsync always (an acknowledged order survives its crash), else 0 and\n"
           "a level=warn line at start-up and on reconnect.\n");
}

static const struct option_spec *option_find(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

static config_status apply(struct svc_config *cfg, const struct option_spec *o,
                           const char *value, const char *origin, char *err,
                           size_t errlen)
{
    char why[160];
    if (o->parse(cfg, value, why, sizeof(why)) == CONFIG_OK)
        return CONFIG_OK;
    snprintf(err, errlen, "%s: invalid value '%s': %s", origin, value, why);
    return CONFIG_ERROR;
}

static int sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127; /* ::ffff:127.x */
    }
    return 0;
}

/* host without the brackets of an IPv6 literal ("[::1]" -> "::1") into bare. */
static void host_bare(const char *host, char bare[256])
{
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') /* [::1] */
        snprintf(bare, 256, "%.*s", (int)(n - 2), host + 1);
    else
        snprintf(bare, 256, "%s", host);
}

/* 1 when host is a loopback address (127.0.0.0/8, ::1, "localhost") or a name
 * whose every address is one; 0 for anything else: the wildcard 0.0.0.0 and ::,
 * any other address, and a name that does not resolve (why says which). */
static int host_is_loopback(const char *host, char *why, size_t whylen)
{
    char bare[256];
    host_bare(host, bare);
    if (strcasecmp(bare, "localhost") == 0)
        return 1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(bare, NULL, &hints, &res);
    if (rc != 0) {
        snprintf(why, whylen, "'%s' does not resolve (%s)", bare, gai_strerror(rc));
        return 0;
    }
    int all = res != NULL;
    for (const struct addrinfo *ai = res; ai && all; ai = ai->ai_next)
        all = sockaddr_is_loopback(ai->ai_addr);
    freeaddrinfo(res);
    if (!all)
        snprintf(why, whylen, "'%s' is not a loopback address", bare);
    return all;
}

/* Resolves --listen into cfg->listen_addr: an IPv4 address, an IPv6 one
 * ("[::1]", brackets optional) or a name (its first address; "localhost" is
 * 127.0.0.1, as it always was). CONFIG_ERROR with err set when it does not
 * resolve: a bad flag (exit 2), not a failure to start. */
static config_status listen_resolve(struct svc_config *cfg, char *err, size_t errlen)
{
    char bare[256], port[8];
    host_bare(cfg->listen.host, bare);
    snprintf(port, sizeof(port), "%d", cfg->listen.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(strcasecmp(bare, "localhost") == 0 ? "127.0.0.1" : bare, port,
                         &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "--listen %s:%d: '%s' is no address (%s)", cfg->listen.host,
                 cfg->listen.port, bare, rc ? gai_strerror(rc) : "no address");
        return CONFIG_ERROR;
    }
    memcpy(&cfg->listen_addr, res->ai_addr, res->ai_addrlen);
    cfg->listen_addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return CONFIG_OK;
}

/* The event loops: one per core, at least 2. More loops
 * only split the queues into smaller batches and add context switches (make
 * bench, lock mode redis at -c256 with blocking batch threads: 2 threads sold
 * 12.3k orders/s at 34 us of Redis CPU per order, 16 threads 7.9k at 72 us). */
static int default_threads(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return (int)(cores < 2 ? 2 : cores > 64 ? 64 : cores);
}

static void config_defaults(struct svc_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    rconn_addr_parse("127.0.0.1:8080", &cfg->listen);
    rconn_addr_parse("127.0.0.1:6379", &cfg->redis);
    snprintf(cfg->zk_hosts, sizeof(cfg->zk_hosts), "127.0.0.1:2181");
    cfg->zk_session_ms = 3000;
    cfg->zk_watch = LOCK_ZK_WATCH_PREDECESSOR;
    snprintf(cfg->lock_mode, sizeof(cfg->lock_mode), "redis");
    cfg->segments = 16;
    cfg->lock_ttl_ms = 3000;
    cfg->wait_ms = 1000;
    cfg->fencing = 1;
    cfg->instance_id = -1;
    cfg->threads = default_threads();
    cfg->max_conns_per_ip = 256;
    cfg->request_timeout_ms = 10000;
    cfg->batch = 32;
    cfg->min_replicas_acked = -1;
    cfg->redis_seeds = 1;
    cfg->redis_seed[0] = cfg->redis;
    cfg->log_level = LOG_INFO;
    cfg->order_retention_ms = 7 * 86400000LL;
}

/* Applies the SECKILL_<NAME> variables that are set. 0, or -1 with err set. */
static config_status config_from_env(struct svc_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        char env[64];
        option_env(&options[i], env);
        const char *value = getenv(env);
        if (value && apply(cfg, &options[i], value, env, err, errlen) != CONFIG_OK)
            return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

/* Applies the flags of argv (--name value, --name=value, --help). */
static config_status config_from_args(struct svc_config *cfg, int argc, char **argv,
                                      char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help();
            return CONFIG_HELP;
        }
        if (strcmp(arg, "--version") == 0) {
            printf("seckill %s (commit %s)\n", svc_version(), svc_commit());
            return CONFIG_HELP;
        }
        if (strncmp(arg, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (see --help)", arg);
            return CONFIG_ERROR;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct option_spec *o = option_find(name, len);
        if (!o) {
            snprintf(err, errlen, "unknown flag '%.*s' (see --help)", (int)len + 2, arg);
            return CONFIG_ERROR;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "flag '--%s' needs a value", o->name);
                return CONFIG_ERROR;
            }
            value = argv[++i];
        }
        char origin[80];
        snprintf(origin, sizeof(origin), "--%s", o->name);
        if (apply(cfg, o, value, origin, err, errlen) != CONFIG_OK)
            return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

/* The rules across flags, once all are read; fills the lock nodes' default.
 * 0, or -1 with err set. */
static config_status config_check(struct svc_config *cfg, char *err, size_t errlen)
{
    /* Without a token the admin routes (reset a SKU: wipe its orders, restock)
     * are open to whoever reaches the port: only loopback may go without one,
     * in the spirit of Redis's protected mode. Checked before the other
     * cross-flag rules (tests/it_auth.sh relies on that order). */
    char why[300];
    if (!cfg->admin_token[0] && !host_is_loopback(cfg->listen.host, why, sizeof(why))) {
        snprintf(err, errlen,
                 "--listen %s:%d: %s, and no --admin-token (or SECKILL_ADMIN_TOKEN) is "
                 "set: anyone reaching the port could reset SKUs through the admin "
                 "routes. Set an admin token, or listen on a loopback address "
                 "(127.0.0.1, ::1, localhost)",
                 cfg->listen.host, cfg->listen.port, why);
        return CONFIG_ERROR;
    }
    /* The pay token is the payment service's alone: the same string as the
     * admin token would let either holder do both (reset SKUs, pay orders). */
    if (cfg->pay_token[0] && strcmp(cfg->pay_token, cfg->admin_token) == 0) {
        snprintf(err, errlen,
                 "--pay-token is the same as --admin-token: give the payment service a "
                 "token of its own");
        return CONFIG_ERROR;
    }
    if (listen_resolve(cfg, err, errlen) != CONFIG_OK)
        return CONFIG_ERROR;
    if (cfg->nlock_nodes == 0) {
        cfg->lock_nodes[0] = cfg->redis;
        cfg->nlock_nodes = 1;
    }
    if (strcmp(cfg->lock_mode, "pg") == 0 && !cfg->postgres[0]) {
        snprintf(err, errlen, "--lock pg needs --postgres URL");
        return CONFIG_ERROR;
    }
    /* Without a database the records are the only copy of the orders: nothing
     * may expire them. */
    if (cfg->order_retention_given && !cfg->postgres[0]) {
        snprintf(err, errlen,
                 "--order-retention needs --postgres URL: without PostgreSQL the order "
                 "records in Redis are the only copy and never expire");
        return CONFIG_ERROR;
    }
    if (strcmp(cfg->lock_mode, "redlock") == 0 && cfg->nlock_nodes < 3) {
        snprintf(err, errlen, "--lock redlock needs --lock-nodes with at least 3 nodes");
        return CONFIG_ERROR;
    }
    return CONFIG_OK;
}

config_status svc_config_load(struct svc_config *cfg, int argc, char **argv, char *err,
                              size_t errlen)
{
    config_defaults(cfg);
    if (config_from_env(cfg, err, errlen) != CONFIG_OK)
        return CONFIG_ERROR;
    config_status st = config_from_args(cfg, argc, argv, err, errlen);
    if (st != CONFIG_OK)
        return st;
    return config_check(cfg, err, errlen);
}
