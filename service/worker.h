/* worker: each thread's Redis connections for the routes it runs (a
 * blocking rconn and an inventory session on it), made on its first
 * request. Private to the server: http.c and waiters.c use it. */
#ifndef SECKILL_WORKER_H
#define SECKILL_WORKER_H

#include "routes.h"

/* This thread's worker, created on its first request: one hiredis context
 * per thread, never shared. Freed when the thread exits (pthread_exit or
 * its start routine's return). Never NULL (aborts
 * when out of memory); its connection is made on first use (rconn_new). */
struct svc_worker *svc_worker_get(struct svc_app *app);

/* Frees this thread's worker now, if it has one: for the main thread, whose
 * exit runs no thread-specific destructor. */
void svc_worker_release(void);

#endif
