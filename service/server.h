/* server: the event loops (--threads), each a libevent base driving its own
 * libmicrohttpd daemon on the shared listening socket and its order engine;
 * and the start and the drain of the whole. The main thread calls it, and
 * runs the routes which wait on Redis meanwhile (svc_server_serve; waiters.c).
 * What the daemons call on each request is http.c. */
#ifndef SECKILL_SERVER_H
#define SECKILL_SERVER_H

#include <stddef.h>

#include "routes.h"

struct svc_server;

/* Starts listening on app->cfg->listen. NULL with err set on failure (address
 * in use, bad host). app must outlive the server. */
struct svc_server *svc_server_start(struct svc_app *app, char *err, size_t errlen);

/* On the main thread, once started: runs the routes which wait on Redis
 * until signal_fd is readable (a signalfd: a signal is pending, which the
 * caller reads), then returns 1. Called again after a signal that does not stop. */
int svc_server_serve(struct svc_server *srv, int signal_fd);

/* On the main thread. Drains: /readyz answers 503 at once, new connections are refused after
 * grace_ms, in-flight requests finish (at most wait_ms), then the daemon stops
 * and every worker's connections are closed. Frees the server. */
void svc_server_stop(struct svc_server *srv, int grace_ms, int wait_ms);

#endif
