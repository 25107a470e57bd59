/* waiters: the SERVER_WAITERS threads that run the routes which wait on Redis
 * (ROUTE_WAITS: PUT/GET of a SKU, the audit, GET of an order, /metrics,
 * /readyz), each on its own connection, so that no event loop waits on Redis.
 * A loop hands a request over (waiters_hand_over) with its connection
 * suspended; a waiter runs the route and resumes the connection with the
 * answer. The main thread starts and stops them (svc_server_start/stop).
 * Private to the server: server.c and http.c include it. */
#ifndef SECKILL_WAITERS_H
#define SECKILL_WAITERS_H

#include "server_impl.h"

/* Starts srv's waiter threads. Aborts when a thread cannot be created. */
void waiters_start(struct svc_server *srv);

/* On a loop thread: hands a route that waits on Redis to the waiter threads,
 * which resume the connection with its answer: true, or false when they are
 * stopping: nothing done, the caller runs the route itself. */
int waiters_hand_over(struct conn_state *st, const struct svc_request *req);

/* Serves what is queued, then stops the threads; what the loops bring
 * after that they answer themselves (waiters_hand_over). */
void waiters_stop(struct svc_server *srv);

/* Once the loops are gone. */
void waiters_free(struct svc_server *srv);

#endif
