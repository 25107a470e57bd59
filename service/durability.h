/* durability: does an order this instance acknowledges survive a crash of the
 * data Redis, and may that Redis evict what it holds? Read from its settings
 * (CONFIG GET append* maxmemory-policy: Redis 7.0 or later).
 *
 * Durable means AOF with appendfsync always (replica acknowledgement, the
 * other way, is --min-replicas-acked, which metrics.c adds). Settings that
 * cannot be read (CONFIG renamed, refused by an ACL) count as not durable.
 * A maxmemory-policy other than noeviction is refused: the instance is not
 * ready (/readyz 503, no READY=1) while it lasts.
 *
 * Read at start-up, then once a second on the event loop it is attached to
 * (one CONFIG GET on a connection of its own). The order path does no work
 * for it. Every turn to "not durable" logs one level=warn line saying what
 * can be lost, a turn to durable an info line; every turn to an evicting
 * policy a level=warn event=redis_evicting line, a turn back an info line. */
#ifndef SECKILL_DURABILITY_H
#define SECKILL_DURABILITY_H

#include <stddef.h>

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

/* 1 when the last reading found a maxmemory-policy that evicts, with a
 * sentence saying so in why (of len; why may be NULL); 0 for noeviction, for
 * a policy not read (yet, or CONFIG refused), and for NULL. Any thread. */
int svc_durability_refused(const struct svc_durability *d, char *why, size_t len);

/* What a crash of the data Redis can lose under the settings last read, as
 * a sentence; NULL when nothing (durable). Any thread. */
const char *svc_durability_loss(const struct svc_durability *d);

#endif
