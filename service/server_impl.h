/* server_impl: what the three files of the server share, and no one else:
 * server.c (the event loops and their daemons, start and stop), http.c (the
 * glue between libmicrohttpd and the route table) and waiters.c (the main
 * thread's part: the routes which wait on Redis). Only those three include it.
 *
 * A connection's conn_state belongs to its loop's thread, but while the
 * connection is suspended: then to whichever thread has its request or its
 * ticket (the main thread, the engine, a batch thread), until it resumes it. */
#ifndef SECKILL_SERVER_IMPL_H
#define SECKILL_SERVER_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "request.h"
#include "routes.h"

struct MHD_Connection;
struct MHD_Daemon;
struct event;
struct event_base;
struct conns_sweep;

#define SERVER_PATH_MAX 512

/* One event loop thread: its libmicrohttpd daemon, driven from the loop
 * (external polling on MHD's epoll descriptor), and its order engine, whose
 * Redis connection the same loop serves. */
struct svc_loop {
    struct svc_server *srv;
    pthread_t tid;
    struct event_base *base;
    struct MHD_Daemon *daemon;
    struct event *mhd_ready; /* MHD's epoll descriptor is readable */
    struct event *mhd_timer; /* MHD's next connection timeout */
    struct event *nudge;     /* a connection was resumed: run MHD (any thread) */
    struct event *quiesce;   /* from svc_server_stop: accept no more */
    struct inv_engine *engine;
    struct conns_sweep *sweep; /* its connections' request deadlines */
};

/* The queue of the routes which wait on Redis (ROUTE_WAITS: reads, admin,
 * readiness), so that no loop waits on it: a loop suspends the connection and
 * queues it here; the main thread runs the handler on its own connection and
 * resumes it with the answer (waiters.c). */
struct waiters {
    pthread_mutex_t mu;
    struct conn_state *head, **tail;
    int stop;
    int efd; /* an eventfd: something was queued */
    void (*resume)(struct conn_state *st); /* sends st's answer (http.c's) */
    /* The main thread's own: ROUTE_SHARED requests taken from the queue and
     * not answered yet, oldest first. */
    struct conn_state *shared, **shared_tail;
};

struct svc_server {
    struct svc_app *app;
    struct waiters waiters;
    int lsock; /* shared by every loop's daemon */
    int nloops;
    struct svc_loop *loops;
    struct inv_engine **engines; /* the loops', linked (inv_engine_link) */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a loop quiesced */
    int quiesced;
};

/* The loop of this thread (NULL off the loops); set by loop_main (server.c). */
extern _Thread_local struct svc_loop *tls_loop;

/* One request's state across the access handler's calls. */
struct conn_state {
    struct svc_route *route;
    int status_hint; /* 400 (a path too long)/404/405 decided before the body arrived, or
                        0 */
    int too_large;
    size_t body_len;
    int64_t start_us;
    char path[SERVER_PATH_MAX];  /* as requested, for Allow */
    char split[SERVER_PATH_MAX]; /* split in place; params point into it */
    const char *params[SVC_MAX_PARAMS];
    struct MHD_Connection *conn;
    int pending;              /* suspended until ticket is done (PENDING_*) */
    int answered;             /* the status of the answer queued, 0 before */
    char order_id[24];        /* the answer's order_id, "" when it has none */
    struct svc_loop *loop;    /* the loop whose daemon has the connection */
    struct inv_ticket ticket; /* an order waiting for its batch */
    struct svc_request req;   /* a route that waits on Redis: its request, */
    struct svc_response res;  /* and its answer from the main thread */
    svc_handler run;          /* what the main thread runs: the route's, or another */
    struct conn_state *next;  /* in the waiters' queue */
    char body[REQ_BODY_MAX];
};

enum { PENDING_NONE = 0, PENDING_ORDER, PENDING_WAITER };

#endif
