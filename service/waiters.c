#include "waiters.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "answers.h"
#include "clock.h"
#include "worker.h"

void waiters_init(struct svc_server *srv, void (*resume)(struct conn_state *st))
{
    struct waiters *w = &srv->waiters;
    w->resume = resume;
    pthread_mutex_init(&w->mu, NULL);
    w->tail = &w->head;
    w->shared_tail = &w->shared;
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0)
        abort();
}

/* Takes every queued connection, oldest first (NULL-terminated by next). */
static struct conn_state *waiters_take_all(struct waiters *w)
{
    pthread_mutex_lock(&w->mu);
    struct conn_state *all = w->head;
    w->head = NULL;
    w->tail = &w->head;
    pthread_mutex_unlock(&w->mu);
    return all;
}

static void waiters_run(struct svc_server *srv, struct conn_state *st)
{
    st->req.worker = svc_worker_get(srv->app);
    if (st->run)
        st->run(&st->req, &st->res);
    else
        svc_route_run(st->route, &st->req, &st->res);
}

/* Answers the oldest shared request, and every other one for the same path
 * with a copy of its answer: all of them arrived before it was computed. */
static void waiters_answer_shared(struct svc_server *srv)
{
    struct waiters *w = &srv->waiters;
    struct conn_state *first = w->shared;
    w->shared = first->next;
    waiters_run(srv, first);
    const struct svc_response *res = &first->res;
    struct conn_state **link = &w->shared;
    w->shared_tail = &w->shared;
    while (*link) {
        struct conn_state *st = *link;
        if (st->route != first->route || strcmp(st->path, first->path) != 0) {
            link = &st->next;
            w->shared_tail = link;
            continue;
        }
        *link = st->next;
        st->res = (struct svc_response){.status = res->status,
                                        .content_type = res->content_type,
                                        .retry_after = res->retry_after,
                                        .order_id = res->order_id};
        if (res->json)
            st->res.json = json_deep_copy(res->json);
        if (res->text)
            st->res.text = strdup(res->text);
        if (!st->res.json && !st->res.text)
            svc_error(&st->res, 503, "unavailable", "out of memory");
        srv->waiters.resume(st);
    }
    srv->waiters.resume(first); /* last: its loop frees the answer copied above */
}

/* Runs what is queued: each request in turn, but the shared ones (the audit)
 * after every other queued meanwhile, one path at a time, so that a cheap
 * route waits behind one costly computation at most. */
static void waiters_run_queued(struct svc_server *srv)
{
    struct waiters *w = &srv->waiters;
    for (;;) {
        struct conn_state *st = waiters_take_all(w);
        while (st) {
            struct conn_state *next = st->next;
            st->next = NULL;
            if (st->route->flags & ROUTE_SHARED) {
                *w->shared_tail = st;
                w->shared_tail = &st->next;
            } else {
                waiters_run(srv, st);
                srv->waiters.resume(st);
            }
            st = next;
        }
        if (!w->shared)
            return;
        waiters_answer_shared(srv);
    }
}

int waiters_serve(struct svc_server *srv, int fd, int64_t until_us)
{
    struct pollfd p[2] = {{.fd = srv->waiters.efd, .events = POLLIN},
                          {.fd = fd, .events = POLLIN}};
    for (;;) {
        waiters_run_queued(srv);
        int timeout = -1;
        if (until_us > 0) {
            int64_t left = until_us - clock_now_us();
            if (left <= 0)
                return 0;
            timeout = (int)((left + 999) / 1000);
        }
        int n = poll(p, fd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR)
            abort();
        if (n > 0 && (p[1].revents & POLLIN))
            return 1;
        if (n > 0 && (p[0].revents & POLLIN)) {
            uint64_t v;
            if (read(srv->waiters.efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                abort();
        }
    }
}

/* Suspends st's connection and queues it: true, or false once stopped (the
 * server is going down): nothing done, the caller answers it itself. */
static int waiters_submit(struct waiters *w, struct conn_state *st)
{
    st->next = NULL;
    pthread_mutex_lock(&w->mu);
    int stopped = w->stop;
    if (!stopped) {
        /* Suspended before it is queued, so that only a suspended connection
         * can be resumed. */
        MHD_suspend_connection(st->conn);
        *w->tail = st;
        w->tail = &st->next;
    }
    pthread_mutex_unlock(&w->mu);
    if (!stopped) {
        uint64_t one = 1;
        /* Only a full counter (2^64 - 2 wakes unread) could refuse it. */
        if (write(w->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
            abort();
    }
    return !stopped;
}

int waiters_hand_over(struct conn_state *st, const struct svc_request *req,
                      svc_handler run)
{
    st->req = *req;
    st->run = run;
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
    pthread_mutex_lock(&srv->waiters.mu);
    srv->waiters.stop = 1;
    pthread_mutex_unlock(&srv->waiters.mu);
    waiters_run_queued(srv); /* nothing is queued after the stop */
}

void waiters_free(struct svc_server *srv)
{
    close(srv->waiters.efd);
    pthread_mutex_destroy(&srv->waiters.mu);
    svc_worker_release();
}
