/* duty: a background duty of an event loop, as the service runs four on
 * loop 0 (the reservations' sweep, the order-id lease's renewal, the
 * durability check, the health round): a timer, and a connection of its own
 * to the data Redis or to a Redis Cluster's masters, started on a loop and
 * stopped there.
 *
 * Stopping frees the timer first, then closes the connection: what the duty
 * has on its way is answered, as failed, inside duty_stop, with the
 * connection already gone from the duty (duty_connected false), so that a
 * callback sends nothing more.
 *
 * Thread safety: none. A duty belongs to the thread that runs its loop. */
#ifndef SECKILL_DUTY_H
#define SECKILL_DUTY_H

#include "aconn.h"
#include "rconn.h"

struct event;
struct event_base;
struct aconn;
struct acluster;

/* Where a duty's connection goes: a Redis Cluster (nseeds > 0: seeds), one
 * Redis (host, port), or nowhere (host NULL, nseeds 0). The strings and seeds
 * are borrowed: they must outlive the duty. */
struct duty_target {
    const char *host;
    int port;
    const struct rconn_addr *seeds;
    int nseeds;
    const char *password; /* NULL for none */
    int timeout_ms;       /* a command's answer, at most */
};

struct duty {
    struct aconn *conn;       /* to one Redis, while started */
    struct acluster *cluster; /* or to a Redis Cluster's masters */
    struct event_base *base;  /* the loop's, once started */
    /* its own */
    struct event *tick;
    struct duty_target to;
    void (*fn)(void *arg);
    void *arg;
};

/* Starts d on base: its connection to `to` (copied; NULL for none), then a
 * timer that calls fn(arg) every every_ms. A started duty is left as it is.
 * Aborts when the timer cannot be made. */
void duty_start(struct duty *d, struct event_base *base, const struct duty_target *to,
                int every_ms, void (*fn)(void *arg), void *arg);

/* Stops the timer, then closes the connection (above). A stopped duty, or one
 * never started (zeroed), is left as it is. */
void duty_stop(struct duty *d);

/* Closes the connection (as duty_stop does) and makes a new one to the same
 * target. On a started duty. */
void duty_reconnect(struct duty *d);

/* Queues argv (a call of script when not NULL: nkeys KEYS, then ARGV, argc
 * strings in all) on d's connection: on a Redis Cluster to the master of
 * slot, on one Redis the one connection (slot ignored). As aconn_command:
 * RCONN_OK, cb called once; RCONN_ERR, refused, cb never called. */
rconn_status duty_send(struct duty *d, int slot, aconn_cb *cb, void *arg,
                       struct rscript *script, int nkeys, int argc, const char **argv);

/* True while started. */
int duty_running(const struct duty *d);
/* True while it has a connection (started, and not inside duty_stop). */
int duty_connected(const struct duty *d);

#endif
