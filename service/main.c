/* seckill: the flash-sale inventory server. */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "buyer.h"
#include "clock.h"
#include "config.h"
#include "durability.h"
#include "health.h"
#include "inventory.h"
#include "lock.h"
#include "log.h"
#include "notify.h"
#include "rcluster.h"
#include "orderid.h"
#include "reach.h"
#include "room.h"
#include "roompace.h"
#include "roomtoken.h"
#include "server.h"
#include "sink.h"
#include "store.h"

#define STARTUP_REDIS_WAIT_MS 10000
#define DRAIN_GRACE_MS 300
#define DRAIN_WAIT_MS 5000

/* --min-replicas-acked, resolved: as given, or (not given) 1 when the data
 * Redis has a replica connected now (on a cluster: every master lists one),
 * else 0. Read once, at start. */
static int replicas_acked(const struct svc_config *cfg, int cluster)
{
    if (cfg->min_replicas_acked >= 0)
        return cfg->min_replicas_acked;
    if (cluster) {
        struct rcluster *c =
            rcluster_new(cfg->redis_seed, cfg->redis_seeds, cfg->redis_password, 1000);
        const struct cluster_map *m = rcluster_map(c);
        int acked = m->nmasters > 0;
        for (int i = 0; i < m->nmasters; i++)
            acked &= m->masters[i].replicas > 0;
        rcluster_free(c);
        return acked;
    }
    struct rconn *rc =
        rconn_new(cfg->redis.host, cfg->redis.port, cfg->redis_password, 1000);
    redisReply *r = rconn_command(rc, "INFO replication");
    const char *n =
        r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "connected_slaves:") : NULL;
    int acked = n && atoi(n + strlen("connected_slaves:")) > 0;
    if (r)
        freeReplyObject(r);
    rconn_free(rc);
    return acked;
}

/* True when the data Redis answers that it is a node of a Redis Cluster.
 * False also when it does not answer yet (lease_worker waits for it). */
static int redis_is_cluster(const struct svc_config *cfg)
{
    struct rconn *rc =
        rconn_new(cfg->redis.host, cfg->redis.port, cfg->redis_password, 1000);
    redisReply *r = rconn_command(rc, "INFO cluster");
    int cluster =
        r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_enabled:1");
    if (r)
        freeReplyObject(r);
    rconn_free(rc);
    return cluster;
}

/* libevent's own messages (it writes them to stderr by default) through the
 * logger, at their level. */
static void libevent_line(int severity, const char *msg)
{
    int level = severity == EVENT_LOG_DEBUG ? LOG_DEBUG
                : severity == EVENT_LOG_MSG ? LOG_INFO
                : severity == EVENT_LOG_WARN ? LOG_WARN
                                             : LOG_ERROR;
    char detail[512];
    log_event(level, "libevent", "detail=\"%s\"", log_quote(detail, sizeof(detail), msg));
}

/* The worker-id lease's news, in the log. */
static void lease_event(orderid_lease_event ev, int worker)
{
    switch (ev) {
    case ORDERID_LEASE_LOST:
        log_event(LOG_ERROR, "worker_lease_lost", "worker=%d", worker);
        break;
    case ORDERID_LEASE_TAKEN:
        log_event(LOG_WARN, "worker_lease_taken", "worker=%d", worker);
        break;
    }
}

/* Leases the order-id worker id, retrying while Redis starts. */
static struct orderid_lease *lease_worker(const struct svc_config *cfg,
                                          struct orderid_gen *ids, int cluster)
{
    char err[256] = "";
    struct orderid_lease_config lc = {.host = cfg->redis.host,
                                      .port = cfg->redis.port,
                                      .password = cfg->redis_password,
                                      .fixed = cfg->instance_id,
                                      .seeds = cfg->redis_seed,
                                      .nseeds = cluster ? cfg->redis_seeds : 0,
                                      .on_event = lease_event};
    for (int waited = 0; waited <= STARTUP_REDIS_WAIT_MS; waited += 200) {
        struct orderid_lease *l = orderid_lease_start(&lc, ids, err, sizeof(err));
        if (l)
            return l;
        clock_sleep_us(200 * 1000);
    }
    log_event(LOG_ERROR, "startup_failed", "reason=\"worker id lease: %s\"", err);
    return NULL;
}

/* Blocks SIGINT, SIGTERM and SIGHUP before any thread starts, so that every
 * thread inherits the mask, and returns a signalfd that becomes readable once
 * one of them arrives (also one sent during the start): the main thread waits
 * on it between the routes it runs (svc_server_serve), and reads it
 * (signal_take). */
static int signals_take(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) {
        log_event(LOG_ERROR, "startup_failed", "reason=\"signalfd: %s\"", strerror(errno));
        exit(1);
    }
    return fd;
}

/* The signal the signalfd holds, or 0 when none (already taken). */
static int signal_take(int fd)
{
    struct signalfd_siginfo si;
    if (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
        return 0;
    return (int)si.ssi_signo;
}

/* SIGHUP: the log file opened again by its name (logrotate moved it), and the
 * level read again (--log-level-file). Nothing else changes; a failure keeps
 * what was, and says so. */
static void reload(const struct svc_config *cfg)
{
    int reopened = log_reopen();
    if (reopened < 0)
        log_event(LOG_ERROR, "log_reopen_failed", "file=%s reason=\"%s\"", log_file(),
                  strerror(errno));
    char err[512];
    int level = svc_config_log_level(cfg, err, sizeof(err));
    if (level < 0)
        log_event(LOG_WARN, "log_level_kept", "file=%s reason=\"%s\"",
                  cfg->log_level_file, err);
    else
        log_set_level(level);
    /* at warn: seen at every level but error */
    log_event(LOG_WARN, "reloaded", "log_reopened=%s log_level=%s",
              reopened > 0 ? "yes" : "no", level >= 0 ? log_level_name(level) : "kept");
}

/* What the HTTP server stands on, owned by main. */
struct backend {
    struct lock *lock; /* NULL in atomic mode */
    int cluster;       /* the data Redis is a Redis Cluster */
    struct orderid_gen ids;
    struct orderid_lease *lease;
    struct soldout *soldout;
    int replicas_acked; /* --min-replicas-acked, resolved */
    struct inv *inv;
    struct inv_sweep *sweep; /* reservations past pay_by */
    struct svc_durability *durability;
    struct svc_health *health;
    struct svc_sink *sink;   /* --postgres: the outbox into PostgreSQL */
    struct svc_store *store; /* --postgres: what it holds, read back */
    struct room_key room_key;
    struct inv_rooms *rooms; /* the waiting rooms known here, their pacer */
};

/* Frees what b holds (any part may be missing). */
static void backend_free(struct backend *b)
{
    svc_store_free(b->store);
    svc_sink_free(b->sink);
    svc_health_free(b->health);
    inv_rooms_free(b->rooms);
    svc_durability_stop(b->durability);
    orderid_lease_stop(b->lease);
    inv_sweep_free(b->sweep);
    inv_free(b->inv);
    soldout_free(b->soldout);
    lock_free(b->lock);
}

/* The zk lock's session, up or down, in the log (reach.h). */
static struct svc_reach zk_reach;
/* The ZooKeeper client logs each failed reconnect (one per 1/60 of the
 * session timeout while ZooKeeper is down): a line a second at most. */
static struct log_limit zk_client_lines = LOG_LIMIT_INIT(1);

/* A line of the ZooKeeper client's own log ("<date>:<pid>(<thread>):ZOO_ERROR@
 * <function>@<line>: <message>") through the logger, at its level. */
static void zk_client_line(const char *line)
{
    static const struct {
        const char *tag;
        int level;
    } levels[] = {{":ZOO_ERROR@", LOG_ERROR},
                  {":ZOO_WARN@", LOG_WARN},
                  {":ZOO_INFO@", LOG_INFO},
                  {":ZOO_DEBUG@", LOG_DEBUG}};
    int level = LOG_WARN;
    const char *text = line;
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        const char *at = strstr(line, levels[i].tag);
        if (at) {
            level = levels[i].level;
            text = at + strlen(levels[i].tag);
            break;
        }
    }
    uint64_t suppressed;
    if (!log_enabled(level) || !log_limit_take(&zk_client_lines, &suppressed))
        return;
    char detail[512];
    log_quote(detail, sizeof(detail), text);
    if (suppressed)
        log_event(level, "zk_client", "detail=\"%s\" suppressed=%llu", detail,
                  (unsigned long long)suppressed);
    else
        log_event(level, "zk_client", "detail=\"%s\"", detail);
}

/* The zk lock's news (lock.h's lock_link_fn), on the client's thread. */
static void zk_link(lock_link_event ev, const char *service, const char *detail)
{
    (void)service; /* zk_reach names it */
    switch (ev) {
    case LOCK_LINK_DOWN:
        svc_reach_failed(&zk_reach, detail);
        break;
    case LOCK_LINK_UP:
        svc_reach_ok(&zk_reach);
        break;
    case LOCK_LINK_CLIENT:
        zk_client_line(detail);
        break;
    }
}

/* Opens the lock of --lock into *lock (NULL in atomic mode): true, or false
 * with err set. */
static int lock_open(const struct svc_config *cfg, struct lock **lock, char *err,
                     size_t errlen)
{
    *lock = NULL;
    if (strcmp(cfg->lock_mode, "atomic") == 0)
        return 1;
    struct lock_config lc = {
        .ttl_ms = cfg->lock_ttl_ms,
        .nodes = cfg->lock_nodes,
        .nnodes = cfg->nlock_nodes,
        .password = cfg->redis_password,
        .timeout_ms = 1000,
        .fencing = cfg->fencing,
        .zk_hosts = cfg->zk_hosts,
        .zk_session_ms = cfg->zk_session_ms,
        .zk_watch = (lock_zk_watch)cfg->zk_watch,
        .on_link = zk_link,
        .postgres = cfg->postgres,
    };
    svc_reach_init(&zk_reach, "zk", cfg->zk_hosts);
    *lock = lock_new(cfg->lock_mode, &lc, err, errlen);
    return *lock != NULL;
}

/* The inventory over b's lock, order ids and sold-out listener. */
static struct inv *inventory_new(const struct svc_config *cfg, struct backend *b)
{
    struct inv_config ic = {
        .lock = b->lock,
        .wait_ms = cfg->wait_ms,
        .work_us = cfg->work_us,
        .fencing = cfg->fencing,
        .ids = &b->ids,
        .lease = b->lease,
        .soldout = b->soldout,
        .min_replicas_acked = b->replicas_acked,
        .acked_wait_ms = 500,
        .cluster = b->cluster,
        .seeds = cfg->redis_seed,
        .nseeds = cfg->redis_seeds,
        .password = cfg->redis_password,
        .timeout_ms = 1000,
        .outbox = cfg->postgres[0] != 0,
    };
    return inv_new(&ic);
}

/* The background duties on loop 0 (app.h): the worker-id lease's renewal,
 * the lock's lease watchdog, the sold-out listener, the durability re-check,
 * the sweep of reservations past their pay_by. */
static void duties_attach(struct svc_app *app, struct event_base *base)
{
    struct backend *b = app->duties;
    orderid_lease_attach(b->lease, base);
    if (b->lock)
        lock_attach(b->lock, base);
    soldout_attach(b->soldout, base);
    inv_sweep_attach(b->sweep, base);
    inv_rooms_attach(b->rooms, base);
    svc_durability_attach(b->durability, base);
    svc_health_attach(b->health, base);
    svc_sink_attach(b->sink, base);
}

static void duties_detach(struct svc_app *app)
{
    struct backend *b = app->duties;
    svc_sink_detach(b->sink);
    svc_health_detach(b->health);
    svc_durability_detach(b->durability);
    inv_sweep_detach(b->sweep);
    inv_rooms_detach(b->rooms);
    soldout_detach(b->soldout);
    lock_detach(b->lock);
    orderid_lease_detach(b->lease);
}

/* The waiting rooms' key: --room-key-file's, or the one the instances share
 * in Redis (room.h), made by the first. Then the rooms' table and pacer,
 * whose lease token is random. 0, or -1 (logged) when Redis gave no key. */
static int rooms_start(const struct svc_config *cfg, struct backend *b)
{
    unsigned char shared[64];
    int len = -1;
    if (cfg->room_key_len > 0) {
        len = room_key_init(&b->room_key, cfg->room_key, cfg->room_key_len);
    } else {
        struct rconn *rc =
            rconn_new(cfg->redis.host, cfg->redis.port, cfg->redis_password, 1000);
        struct inv_session *s = inv_session_new(b->inv, rc);
        for (int waited = 0; len < 0 && waited <= STARTUP_REDIS_WAIT_MS; waited += 200) {
            len = inv_room_key_shared(s, shared, sizeof(shared));
            if (len < 0)
                clock_sleep_us(200 * 1000);
        }
        inv_session_free(s);
        rconn_free(rc);
        if (len > 0)
            len = room_key_init(&b->room_key, shared, (size_t)len);
    }
    if (len < 0) {
        log_event(LOG_ERROR, "startup_failed", "reason=\"no room key: Redis gave none\"");
        return -1;
    }
    unsigned char raw[16];
    char owner[2 * sizeof(raw) + 1];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        abort(); /* only on a broken kernel */
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(owner + 2 * i, 3, "%02x", raw[i]);
    b->rooms = inv_rooms_new(
        cfg->redis.host, cfg->redis.port, b->cluster ? cfg->redis_seed : NULL,
        b->cluster ? cfg->redis_seeds : 0, cfg->redis_password, owner);
    if (!b->cluster) { /* known before the first request (no room on a cluster) */
        struct rconn *rc =
            rconn_new(cfg->redis.host, cfg->redis.port, cfg->redis_password, 1000);
        inv_rooms_prime(b->rooms, rc);
        rconn_free(rc);
    }
    log_event(LOG_INFO, "room_key", "source=%s kid=%s",
              cfg->room_key_len > 0 ? "file" : "redis", b->room_key.kid);
    return 0;
}

/* Starts b's parts in order. 0, or the exit status (message given) with
 * what was started freed. b must not move while started (ids). */
static int backend_start(const struct svc_config *cfg, struct backend *b)
{
    char err[512];
    if (!lock_open(cfg, &b->lock, err, sizeof(err))) {
        fprintf(stderr, "seckill: --lock %s: %s\n", cfg->lock_mode, err);
        return 2;
    }
    b->cluster = cfg->redis_seeds > 1 || redis_is_cluster(cfg);
    orderid_init(&b->ids, cfg->instance_id >= 0 ? cfg->instance_id : 0, NULL, 0);
    if (b->cluster) /* an order id names its shard */
        orderid_use_genes(&b->ids);
    b->lease = lease_worker(cfg, &b->ids, b->cluster);
    if (!b->lease) {
        backend_free(b);
        return 1;
    }
    /* On a cluster it listens on one node: a reset is published on every
     * node, and while that node is gone nothing is answered from memory.
     * It listens once attached to loop 0 (duties_attach). */
    b->soldout = soldout_new(cfg->redis.host, cfg->redis.port, cfg->redis_password);
    b->replicas_acked = replicas_acked(cfg, b->cluster);
    b->inv = inventory_new(cfg, b);
    if (b->cluster)
        b->sweep = inv_sweep_new_cluster(b->inv, cfg->redis_seed, cfg->redis_seeds,
                                         cfg->redis_password);
    else
        b->sweep = inv_sweep_new(b->inv, cfg->redis.host, cfg->redis.port,
                                 cfg->redis_password);
    if (rooms_start(cfg, b) != 0) {
        backend_free(b);
        return 1;
    }
    /* Redis answered the lease: its persistence settings can be read now. */
    b->durability =
        svc_durability_start(cfg->redis.host, cfg->redis.port, cfg->redis_password);
    b->health =
        svc_health_new(cfg, b->cluster, svc_notify_ready, b->durability, b->rooms);
    if (cfg->postgres[0]) {
        char consumer[32];
        snprintf(consumer, sizeof(consumer), "seckill-%d", orderid_worker(&b->ids));
        b->sink = svc_sink_new(cfg->postgres, cfg->redis.host, cfg->redis.port,
                               b->cluster ? cfg->redis_seed : NULL,
                               b->cluster ? cfg->redis_seeds : 0, cfg->redis_password,
                               consumer, cfg->order_retention_ms);
        b->store = svc_store_new(cfg->postgres);
    }
    return 0;
}

static void log_listening(const struct svc_config *cfg, struct backend *b)
{
    log_event(LOG_INFO, "listening",
              "addr=%s:%d redis=%s:%d%s lock=%s segments=%d threads=%d worker_id=%d "
              "fencing=%s work_us=%d batch=%d min_replicas_acked=%d",
              cfg->listen.host, cfg->listen.port, cfg->redis.host, cfg->redis.port,
              b->cluster ? " cluster=yes" : "", cfg->lock_mode, cfg->segments,
              cfg->threads, orderid_worker(&b->ids), cfg->fencing ? "on" : "off",
              cfg->work_us, cfg->batch, b->replicas_acked);
}

/* `seckill buyer-token USER [--key-file F] [--ttl S]`: prints USER's buyer
 * token (buyer.h), valid S seconds (default 3600) from now, signed with the
 * key of F (default $SECKILL_BUYER_KEY_FILE), for tests, demos and a shop's
 * login to copy. 0, or 2 with a message on stderr. */
static int buyer_token_main(int argc, char **argv)
{
    const char *user = NULL, *file = getenv("SECKILL_BUYER_KEY_FILE");
    long long ttl = 3600;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--key-file") == 0 && i + 1 < argc) {
            file = argv[++i];
        } else if (strcmp(argv[i], "--ttl") == 0 && i + 1 < argc) {
            ttl = strtoll(argv[++i], &end, 10);
            if (*end || end == argv[i] || ttl < 1 || ttl > 31536000) {
                fprintf(stderr,
                        "seckill buyer-token: --ttl must be 1..31536000 seconds\n");
                return 2;
            }
        } else if (!user && argv[i][0] != '-') {
            user = argv[i];
        } else {
            fprintf(stderr,
                    "usage: seckill buyer-token USER [--key-file F] [--ttl SECONDS]\n");
            return 2;
        }
    }
    if (!user || !inv_id_valid(user)) {
        fprintf(stderr, "seckill buyer-token: USER must be 1..64 characters of "
                        "[A-Za-z0-9_.:-]\n");
        return 2;
    }
    if (!file || !*file) {
        fprintf(stderr, "seckill buyer-token: no key: --key-file F or "
                        "SECKILL_BUYER_KEY_FILE\n");
        return 2;
    }
    struct buyer_key key;
    char err[256], token[BUYER_TOKEN_MAX + 1];
    if (buyer_key_read(file, &key, err, sizeof(err)) != 0) {
        fprintf(stderr, "seckill buyer-token: %s: %s\n", file, err);
        return 2;
    }
    if (buyer_token(&key, user, (long long)time(NULL) + ttl, token, sizeof(token)) != 0) {
        fprintf(stderr, "seckill buyer-token: could not sign\n");
        return 2;
    }
    printf("%s\n", token);
    return 0;
}

int main(int argc, char **argv)
{
    struct svc_config cfg;
    char err[512];
    if (argc >= 2 && strcmp(argv[1], "buyer-token") == 0)
        return buyer_token_main(argc - 1, argv + 1);
    switch (svc_config_load(&cfg, argc, argv, err, sizeof(err))) {
    case CONFIG_HELP:
        return 0;
    case CONFIG_ERROR:
        fprintf(stderr, "seckill: %s\n", err);
        return 2;
    case CONFIG_OK:
        break;
    }
    log_open();
    event_set_log_callback(libevent_line);
    int level = svc_config_log_level(&cfg, err, sizeof(err)); /* read at the flag */
    log_set_level(level >= 0 ? level : cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    int signal_fd = signals_take();

    struct backend b = {0};
    int status = backend_start(&cfg, &b);
    if (status != 0)
        return status;
    struct svc_app app = {.cfg = &cfg,
                          .inv = b.inv,
                          .lock = b.lock,
                          .lease = b.lease,
                          .durability = b.durability,
                          .health = b.health,
                          .sink = b.sink,
                          .store = b.store,
                          .room_key = &b.room_key,
                          .rooms = b.rooms,
                          .replicas_acked = b.replicas_acked,
                          .cluster = b.cluster,
                          .ids = &b.ids,
                          .duties_attach = duties_attach,
                          .duties_detach = duties_detach,
                          .duties = &b};
    struct svc_server *srv = svc_server_start(&app, err, sizeof(err));
    if (!srv) {
        log_event(LOG_ERROR, "startup_failed", "reason=\"%s\"", err);
        backend_free(&b);
        return 1;
    }
    log_listening(&cfg, &b);

    /* SIGHUP reloads and serves on; SIGTERM and SIGINT drain and stop. */
    for (;;) {
        svc_server_serve(srv, signal_fd);
        int sig = signal_take(signal_fd);
        if (sig == SIGHUP)
            reload(&cfg);
        else if (sig != 0)
            break;
    }

    svc_notify_stopping();
    svc_server_stop(srv, DRAIN_GRACE_MS, DRAIN_WAIT_MS);
    backend_free(&b);
    close(signal_fd);
    log_event(LOG_INFO, "exit", "code=0");
    return 0;
}
