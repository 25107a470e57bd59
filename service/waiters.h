/* waiters: the routes which wait on Redis (ROUTE_WAITS: PUT/GET of a SKU,
 * the audit, GET of an order, /metrics) run on the main thread, on
 * its own connection, so that no event loop waits on Redis and no thread
 * exists only for them. A loop hands a request over (waiters_hand_over) with
 * its connection suspended; the main thread, between signals, runs the route
 * and resumes the connection with the answer (waiters_serve). A costly read
 * (ROUTE_SHARED: the audit) waits until the others queued meanwhile are
 * served, and the requests of one path waiting together share one answer,
 * computed after all of them arrived. (/readyz is
 * answered on the loop, from health.h.) Private to the server: server.c and http.c include it. */
#ifndef SECKILL_WAITERS_H
#define SECKILL_WAITERS_H

#include <stdint.h>

#include "server_impl.h"

/* Before the loops start: a route's answer is sent by resume(st) (http.c's,
 * given by server.c: waiters call nothing of http.c by name). Aborts when its
 * descriptor cannot be made. */
void waiters_init(struct svc_server *srv, void (*resume)(struct conn_state *st));

/* On a loop thread: hands a route that waits on Redis to the main thread,
 * which runs run (NULL: the route's handler, its token checked) and resumes
 * the connection with its answer: true, or false once stopped: nothing done,
 * the caller answers it itself. */
int waiters_hand_over(struct conn_state *st, const struct svc_request *req,
                      svc_handler run);

/* On the main thread: runs what is handed over until fd (when >= 0) is
 * readable, or until the monotonic clock reaches until_us (when > 0).
 * Returns 1 when fd is readable, 0 when the time is up. */
int waiters_serve(struct svc_server *srv, int fd, int64_t until_us);

/* On the main thread: runs what is queued, then refuses more; what the loops
 * bring after that they answer themselves (waiters_hand_over). */
void waiters_stop(struct svc_server *srv);

/* Once the loops are gone: frees the descriptor and this thread's worker. */
void waiters_free(struct svc_server *srv);

#endif
