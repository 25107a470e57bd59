#include "waiters.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>

#include "http.h"

static void *waiter_main(void *arg)
{
    struct svc_server *srv = arg;
    struct waiters *w = &srv->waiters;
    pthread_setname_np(pthread_self(), "sk-waiter");
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        struct conn_state *st = w->head;
        if (!st)
            break; /* stopped, and nothing queued */
        w->head = st->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        st->req.worker = http_worker_get(srv->app);
        svc_route_run(st->route, &st->req, &st->res);
        http_conn_resume(st);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Suspends st's connection and queues it: true, or false once the threads
 * are stopping (the server is going down): nothing done, the caller answers
 * it itself. */
static int waiters_submit(struct waiters *w, struct conn_state *st)
{
    st->next = NULL;
    pthread_mutex_lock(&w->mu);
    int stopping = w->stop;
    if (!stopping) {
        /* Suspended before it is queued, so that a waiter can only resume a
         * suspended connection. */
        MHD_suspend_connection(st->conn);
        if (w->tail)
            w->tail->next = st;
        else
            w->head = st;
        w->tail = st;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return !stopping;
}

void waiters_start(struct svc_server *srv)
{
    struct waiters *w = &srv->waiters;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int i = 0; i < SERVER_WAITERS; i++)
        if (pthread_create(&w->tid[i], NULL, waiter_main, srv) != 0)
            abort();
}

int waiters_hand_over(struct conn_state *st, const struct svc_request *req)
{
    st->req = *req;
    st->res = (struct svc_response){0};
    st->pending = PENDING_WAITER;
    st->loop = tls_loop;
    if (waiters_submit(&tls_loop->srv->waiters, st))
        return 1;
    st->pending = PENDING_NONE; /* going down: answered here */
    return 0;
}

void waiters_stop(struct svc_server *srv)
{
    struct waiters *w = &srv->waiters;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < SERVER_WAITERS; i++)
        pthread_join(w->tid[i], NULL);
}

void waiters_free(struct svc_server *srv)
{
    pthread_mutex_destroy(&srv->waiters.mu);
    pthread_cond_destroy(&srv->waiters.cv);
}
