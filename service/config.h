/* config: the server's flags, each with an environment variable
 * SECKILL_<NAME> (upper case, '-' becomes '_'); the flag wins. */
#ifndef SECKILL_CONFIG_H
#define SECKILL_CONFIG_H

#include "buyer.h"
#include <stddef.h>
#include <sys/socket.h>

#include "rconn.h"

#define CONFIG_MAX_LOCK_NODES 15

#define SVC_MAX_SEEDS 16

struct svc_config {
    struct rconn_addr listen; /* as given: an IPv6 host keeps its brackets */
    /* --listen resolved (svc_config_load): IPv4 or IPv6, what the server binds */
    struct sockaddr_storage listen_addr;
    socklen_t listen_addrlen;
    struct rconn_addr redis;
    char redis_password[256];
    char lock_mode[16];
    struct rconn_addr lock_nodes[CONFIG_MAX_LOCK_NODES];
    int nlock_nodes;
    char zk_hosts[1024]; /* "host:port,..." as the ZooKeeper client takes it */
    int zk_session_ms;
    int zk_watch; /* lock_zk_watch: what a waiting zk contender watches */
    char postgres[1024]; /* --postgres: libpq conninfo or URI, "" when not given */
    /* --order-retention: with --postgres, a settled order's record leaves Redis this
     * long after PostgreSQL has it; 0: never */
    long long order_retention_ms;
    int order_retention_given; /* set by the flag or its variable, not the default */
    int segments;
    int lock_ttl_ms;
    int wait_ms;
    int work_us;
    int batch;              /* most orders of one segment one lock hold serves */
    int min_replicas_acked; /* -1: 1 when the data Redis has replicas, else 0 */
    int redis_seeds;        /* addresses given to --redis (more than 1: a cluster) */
    struct rconn_addr redis_seed[SVC_MAX_SEEDS]; /* the first redis_seeds of them */
    int fencing;
    int instance_id; /* -1: leased from Redis */
    int threads;
    int max_conns_per_ip;   /* open connections from one client address; 0: no limit */
    int request_timeout_ms; /* a request's headers and body must be in within this */
    char admin_token[256];
    char pay_token[256]; /* --pay-token: pays need it, the admin token no longer pays */
    /* --buyer-key-file: the key of buyer tokens (buyer.h), the file's bytes but a
     * final newline, made ready to sign; its len 0: none, user ids are trusted */
    struct buyer_key buyer_key;
    /* --room-key-file: the waiting rooms' key, read at start (a final newline
     * dropped); room_key_len 0: none given, the key is shared through Redis */
    unsigned char room_key[1024];
    size_t room_key_len;
    int log_level;
    char log_level_file[1024]; /* --log-level-file, "" when not given */
};

typedef enum { CONFIG_OK = 0, CONFIG_HELP, CONFIG_ERROR } config_status;

/* Fills cfg from defaults, then the environment, then argv. CONFIG_HELP when
 * --help or --version was asked (the text is printed to stdout: exit 0);
 * CONFIG_ERROR with a message in err for a bad flag or value. The
 * *-file flags read their file here, once. */
config_status svc_config_load(struct svc_config *cfg, int argc, char **argv, char *err,
                              size_t errlen);

/* The log level now: cfg->log_level, or, with --log-level-file, what the file
 * says now (read again; SIGHUP). -1 with err set when that file cannot be read
 * or names no level (the caller keeps the level it has). */
int svc_config_log_level(const struct svc_config *cfg, char *err, size_t errlen);

#endif
