/* blocking: an event loop's connections for blocking commands (the waits
 * for a lock's hand-off, BLPOP), one per wait in flight, kept for the next
 * wait on the same node. A wait lasts at most --wait-ms, so a connection's
 * answer may take that long beside the usual timeout.
 *
 * Thread safety: a pool belongs to its loop's thread. */
#ifndef SECKILL_BLOCKING_H
#define SECKILL_BLOCKING_H

#include "aconn.h"

struct event_base;
struct blocking_pool;

/* A pool on base; its connections authenticate with password (NULL: none)
 * and answer within timeout_ms. Never returns NULL. */
struct blocking_pool *blocking_pool_new(struct event_base *base, const char *password,
                                        int timeout_ms);
/* Closes every connection (each answers what it has in flight). NULL is a
 * no-op. */
void blocking_pool_free(struct blocking_pool *p);
/* An idle connection to host:port, made on first need. */
struct aconn *blocking_get(struct blocking_pool *p, const char *host, int port);
/* c, from blocking_get, is idle again. */
void blocking_put(struct blocking_pool *p, struct aconn *c);

#endif
