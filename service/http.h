/* http: the glue between libmicrohttpd and the route table. A loop's daemon
 * calls it for each request (on that loop's thread): it finds the route,
 * buffers the body, runs the handler or hands the request over (to the waiter
 * threads, to the loop's order engine) with its connection suspended, and
 * sends the answer once the connection is resumed. Private to the server:
 * server.c includes it. */
#ifndef SECKILL_HTTP_H
#define SECKILL_HTTP_H

#include "server_impl.h"

/* Starts one loop's daemon on the listening socket lsock, its requests
 * served with app, at most conn_limit connections; external polling, for the
 * loop to drive (MHD_run). Returns the daemon, or NULL when MHD could not
 * start it (MHD logged why): nothing to free then. Called by the main thread
 * (svc_server_start). */
struct MHD_Daemon *http_daemon_start(struct svc_app *app, int lsock,
                                     unsigned int conn_limit);

/* st's answer is ready (on another thread): its connection goes on, and
 * on_request is called again to send it, on st's loop, which it wakes. st may
 * be freed by the time this returns: the caller touches it no more. */
void http_conn_resume(struct conn_state *st);

#endif
