/* durability: does an order this instance acknowledges survive a crash of the
 * data Redis? Read from Redis's persistence settings (CONFIG GET append*).
 *
 * Durable means, today, AOF with appendfsync always; replica acknowledgement
 * (the other way, --min-replicas-acked) is not implemented yet. Settings that
 * cannot be read (CONFIG renamed, refused by an ACL) count as not durable.
 *
 * Read at start-up, then again whenever a Redis connection of this process is
 * re-established (rconn_reconnects moved): a timer on the event loop it is
 * attached to looks once a second at that counter and at its own idle async
 * connection (whose close the loop notices: a restarted Redis), and talks to
 * Redis only when one of them moved. The order path does no work for it. Every turn to
 * "not durable" logs one level=warn line saying what can be lost; a turn to durable logs
 * an info line. */
#ifndef SECKILL_DURABILITY_H
#define SECKILL_DURABILITY_H

struct event_base;
struct svc_durability;

/* Reads the settings of the Redis at host:port once, now (password may be
 * NULL), and logs the verdict. When Redis cannot be reached the verdict is 0
 * until it can. Never returns NULL. */
struct svc_durability *svc_durability_start(const char *host, int port,
                                            const char *password);
/* Re-checks on base from now on: before base runs, or on its thread. */
void svc_durability_attach(struct svc_durability *d, struct event_base *base);
/* Stops re-checking: on base's thread, or once it no longer runs. NULL, or
 * not attached: a no-op. */
void svc_durability_detach(struct svc_durability *d);

/* Detaches (same rule) and frees d. NULL is a no-op. */
void svc_durability_stop(struct svc_durability *d);

/* 1 when the last reading said durable, else 0 (not durable, unknown, or not
 * read yet; also for NULL). Any thread. */
int svc_durability_durable(const struct svc_durability *d);

#endif
