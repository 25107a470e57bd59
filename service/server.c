#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "clock.h"
#include "engine.h"
#include "log.h"
#include "request.h"

#define SERVER_CONN_TIMEOUT_S 15
#define SERVER_CONN_LIMIT 8192
/* Descriptors kept free of HTTP connections: Redis contexts (one per worker
 * thread, lock nodes), the listen socket, epoll, logs. */
#define SERVER_FD_RESERVE 128
/* MHD's memory pool per connection: room for a request's headers (a 10 KB
 * header still gets the route's own 400) and the 4 KiB body. MHD clears the
 * pool for each request of a kept-alive connection: at 32 KiB that memset
 * was 7 % of an instance's CPU under load (perf), at 16 KiB 4 %. */
#define SERVER_CONN_MEMORY (16 * 1024)
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
};

/* The threads that run the routes which wait on Redis (ROUTE_WAITS: reads,
 * admin, readiness), so that no loop waits on it: a loop suspends the
 * connection and queues it here; a thread runs the handler on its own
 * connection and resumes it with the answer. */
#define SERVER_WAITERS 2
struct waiters {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct conn_state *head, *tail;
    int stop;
    pthread_t tid[SERVER_WAITERS];
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

/* The loop of this thread (NULL off the loops). */
static _Thread_local struct svc_loop *tls_loop;

/* One request's state across the access handler's calls. */
struct conn_state {
    struct svc_route *route;
    int status_hint; /* 404/405/413 decided before the body arrived, or 0 */
    int too_large;
    size_t body_len;
    int64_t start_us;
    char path[SERVER_PATH_MAX];  /* as requested, for Allow */
    char split[SERVER_PATH_MAX]; /* split in place; params point into it */
    const char *params[SVC_MAX_PARAMS];
    struct MHD_Connection *conn;
    int pending;              /* suspended until ticket is done (PENDING_*) */
    struct svc_loop *loop;    /* the loop whose daemon has the connection */
    struct inv_ticket ticket; /* an order waiting for its batch */
    struct svc_request req;   /* a route that waits on Redis: its request, */
    struct svc_response res;  /* and its answer from a waiter thread */
    struct conn_state *next;  /* in the waiters' queue */
    char body[REQ_BODY_MAX];
};

enum { PENDING_NONE = 0, PENDING_ORDER, PENDING_WAITER };

static pthread_key_t worker_key;
static pthread_once_t worker_key_once = PTHREAD_ONCE_INIT;
static _Thread_local struct svc_worker *tls_worker;

static void worker_free(void *p)
{
    struct svc_worker *w = p;
    inv_session_free(w->inv);
    rconn_free(w->rc);
    free(w);
}

static void worker_key_init(void)
{
    pthread_key_create(&worker_key, worker_free);
}

/* This thread's worker, created on its first request: one hiredis context
 * per thread, never shared. */
static struct svc_worker *worker_get(struct svc_app *app)
{
    if (tls_worker)
        return tls_worker;
    struct svc_worker *w = calloc(1, sizeof(*w));
    if (!w)
        abort();
    const struct svc_config *cfg = app->cfg;
    w->rc = rconn_new(cfg->redis.host, cfg->redis.port, cfg->redis_password, 1000);
    w->inv = inv_session_new(app->inv, w->rc);
    pthread_once(&worker_key_once, worker_key_init);
    pthread_setspecific(worker_key, w);
    tls_worker = w;
    return w;
}

static enum MHD_Result send_response(struct MHD_Connection *conn, struct conn_state *st,
                                     struct svc_response *res)
{
    char *body = res->text;
    size_t len = 0;
    if (!body && res->json)
        body = json_dumps(res->json, JSON_COMPACT);
    if (!body) {
        res->status = 503;
        body = strdup("{\"error\":\"unavailable\",\"detail\":\"out of memory\"}");
        if (!body)
            return MHD_NO;
    }
    len = strlen(body);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            res->content_type ? res->content_type : "application/json");
    if (res->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", res->retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (res->status == 405) {
        char allow[64];
        svc_route_allowed(st->path, allow, sizeof(allow));
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned int)res->status, r);
    MHD_destroy_response(r);
    json_decref(res->json);
    return ret;
}

static struct conn_state *conn_state_new(struct MHD_Connection *conn, const char *url,
                                         const char *method)
{
    struct conn_state *st = malloc(sizeof(*st));
    if (!st)
        return NULL;
    st->route = NULL;
    st->status_hint = 0;
    st->too_large = 0;
    st->body_len = 0;
    st->start_us = clock_now_us();
    st->params[0] = st->params[1] = NULL;
    st->conn = conn;
    st->pending = 0;
    if (strlen(url) >= SERVER_PATH_MAX) {
        snprintf(st->path, sizeof(st->path), "/");
        st->status_hint = 404;
        return st;
    }
    snprintf(st->path, sizeof(st->path), "%s", url);
    snprintf(st->split, sizeof(st->split), "%s", url);
    int known;
    st->route = svc_route_find(method, st->split, st->params, &known);
    if (!st->route)
        st->status_hint = known ? 405 : 404;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > REQ_BODY_MAX)
        st->too_large = 1;
    return st;
}

/* st's answer is ready (on another thread): its connection goes on, and
 * on_request is called again to send it. */
static void conn_resume(struct conn_state *st)
{
    /* Once resumed, the connection belongs to its loop again, which may answer
     * it and free st before this thread goes on: nothing of st after that. */
    struct svc_loop *loop = st->loop;
    MHD_resume_connection(st->conn);
    /* MHD_run picks it up (in external polling, MHD_resume_connection does
     * not wake the loop by itself): run it now on its loop. Not through
     * mhd_timer: mhd_step re-arming that timer would take such an activation
     * back (libevent drops a timer's pending activation when it is re-added). */
    event_active(loop->nudge, EV_READ, 0);
}

/* A batch thread (or the loop) is done with the ticket. */
static void order_done(struct inv_ticket *t)
{
    conn_resume(t->owner);
}

static void *waiter_main(void *arg)
{
    struct svc_server *srv = arg;
    struct waiters *w = &srv->waiters;
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
        st->req.worker = worker_get(srv->app);
        svc_route_run(st->route, &st->req, &st->res);
        conn_resume(st);
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

static void waiters_start(struct svc_server *srv)
{
    struct waiters *w = &srv->waiters;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int i = 0; i < SERVER_WAITERS; i++)
        if (pthread_create(&w->tid[i], NULL, waiter_main, srv) != 0)
            abort();
}

/* Serves what is queued, then stops the threads; what the loops bring
 * after that they answer themselves (waiters_submit). */
static void waiters_stop(struct svc_server *srv)
{
    struct waiters *w = &srv->waiters;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < SERVER_WAITERS; i++)
        pthread_join(w->tid[i], NULL);
}

/* Once the loops are gone. */
static void waiters_free(struct svc_server *srv)
{
    pthread_mutex_destroy(&srv->waiters.mu);
    pthread_cond_destroy(&srv->waiters.cv);
}

/* Counts, logs and sends the answer of the request. */
static enum MHD_Result answer(struct MHD_Connection *conn, struct conn_state *st,
                              const char *method, struct svc_response *res)
{
    svc_route_count(st->route ? st->route : svc_route_unmatched(), res->status,
                    clock_now_us() - st->start_us);
    if (log_enabled(LOG_DEBUG))
        log_event(LOG_DEBUG, "request", "method=%s path=%s status=%d us=%lld", method,
                  st->path, res->status, (long long)(clock_now_us() - st->start_us));
    return send_response(conn, st, res);
}

/* Appends a chunk of the body. The cap is enforced while reading: past it,
 * the rest is discarded. */
static void body_append(struct conn_state *st, const char *data, size_t *size)
{
    size_t n = *size;
    if (!st->too_large && st->body_len + n <= REQ_BODY_MAX) {
        memcpy(st->body + st->body_len, data, n);
        st->body_len += n;
    } else {
        st->too_large = 1;
    }
    *size = 0;
}

/* st's connection was resumed: a waiter's answer is ready, or the order's
 * ticket is done. */
static enum MHD_Result answer_resumed(struct MHD_Connection *conn, struct conn_state *st,
                                      const char *method)
{
    int pending = st->pending;
    st->pending = PENDING_NONE;
    if (pending == PENDING_WAITER)
        return answer(conn, st, method, &st->res);
    struct svc_response res = {0};
    svc_order_finish(&st->ticket, &res);
    return answer(conn, st, method, &res);
}

/* Fills res when st is refused before any route runs (404, 405, 413).
 * Returns 1 when it is, 0 when its route is to run. */
static int refused(const struct conn_state *st, struct svc_response *res)
{
    if (st->status_hint == 404)
        svc_error(res, 404, "not_found", "no such route");
    else if (st->status_hint == 405)
        svc_error(res, 405, "method_not_allowed", "this path does not take that method");
    else if (st->too_large)
        svc_error(res, 413, "too_large", "the body is over 4 KiB");
    else
        return 0;
    return 1;
}

static struct svc_request request_of(struct svc_app *app, struct MHD_Connection *conn,
                                     struct conn_state *st, const char *method)
{
    return (struct svc_request){
        .app = app,
        .worker = worker_get(app),
        .method = method,
        .params = {st->params[0], st->params[1]},
        .body = st->body,
        .body_len = st->body_len,
        .idem_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key"),
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION),
        .ticket = &st->ticket,
    };
}

/* Hands a route that waits on Redis to the waiter threads, which resume the
 * connection with its answer: true, or false when they are stopping:
 * nothing done, the caller runs the route itself. */
static int waiter_hand_over(struct conn_state *st, const struct svc_request *req)
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

/* Hands an order that waits for its batch to the loop's engine; the
 * connection is resumed once its ticket is done (order_done). */
static void order_hand_over(struct MHD_Connection *conn, struct conn_state *st)
{
    /* Suspended before it is queued, so that the batch thread can only
     * resume a suspended connection. */
    st->pending = PENDING_ORDER;
    st->ticket.done = order_done;
    st->ticket.owner = st;
    st->loop = tls_loop;
    MHD_suspend_connection(conn);
    inv_engine_submit(tls_loop->engine, &st->ticket);
}

/* The request is all in: answers it now, or hands it over (waiter threads,
 * the engine) to be answered once resumed. */
static enum MHD_Result request_serve(struct svc_app *app, struct MHD_Connection *conn,
                                     struct conn_state *st, const char *method)
{
    struct svc_response res = {0};
    if (!refused(st, &res)) {
        struct svc_request req = request_of(app, conn, st, method);
        if ((st->route->flags & ROUTE_WAITS) && waiter_hand_over(st, &req))
            return MHD_YES;
        svc_route_run(st->route, &req, &res);
        if (res.pending) {
            order_hand_over(conn, st);
            return MHD_YES;
        }
    }
    return answer(conn, st, method, &res);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    struct svc_app *app = cls;
    struct conn_state *st = *con_cls;
    if (!st) {
        st = conn_state_new(conn, url, method);
        if (!st)
            return MHD_NO;
        *con_cls = st;
        atomic_fetch_add(&app->inflight, 1);
        /* A body declared over the cap is refused before it is read (MHD then
         * closes the connection): a client that announces 1 GB gets its 413 at
         * once instead of after sending it, or never when it sends nothing. */
        if (!st->too_large)
            return MHD_YES;
    } else if (st->pending != PENDING_NONE) {
        return answer_resumed(conn, st, method);
    } else if (*upload_data_size) {
        body_append(st, upload_data, upload_data_size);
        return MHD_YES;
    }
    return request_serve(app, conn, st, method);
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s in place like MHD's default, except the escapes of '/' and
 * NUL, which stay as written: decoded, "%2F" would split a path segment (POST
 * /skus/tv%2Forders would order SKU tv) and "%00" would cut the path short
 * (/orders/1%00x would read order 1). Left alone, their '%' is refused by every
 * id check further on. Returns the new length. */
static size_t unescape_url(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls, (void)conn;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hex_value(r[1]) : -1;
        int lo = hi >= 0 ? hex_value(r[2]) : -1;
        int c = hi * 16 + lo;
        if (lo >= 0 && c != '/' && c != 0) {
            *w++ = (char)c;
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn, (void)toe;
    struct svc_app *app = cls;
    if (*con_cls) {
        free(*con_cls);
        *con_cls = NULL;
        atomic_fetch_sub(&app->inflight, 1);
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[256];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_event(LOG_WARN, "http", "detail=\"%s\"", msg);
}

/* The connection limit, with headroom: the descriptor limit is raised to its
 * hard maximum, and connections may use all but SERVER_FD_RESERVE of it, so
 * that a flood of connections is refused by the limit, not by a failing
 * accept() or Redis connect. */
static unsigned int connection_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 512;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    rlim_t usable = rl.rlim_cur > 2 * SERVER_FD_RESERVE ? rl.rlim_cur - SERVER_FD_RESERVE
                                                        : rl.rlim_cur / 2;
    return usable < SERVER_CONN_LIMIT ? (unsigned int)usable : SERVER_CONN_LIMIT;
}

/* Runs MHD's pending work, then sets the timer for its next timeout. */
static void mhd_step(struct svc_loop *l)
{
    MHD_run(l->daemon);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(l->daemon, &ms) == MHD_YES) {
        struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                             .tv_usec = (suseconds_t)(ms % 1000) * 1000};
        evtimer_add(l->mhd_timer, &tv);
    } else {
        evtimer_del(l->mhd_timer);
    }
}

static void on_mhd(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    mhd_step(arg);
}

static void on_quiesce(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct svc_loop *l = arg;
    MHD_quiesce_daemon(l->daemon); /* the shared socket stays open until all have */
    pthread_mutex_lock(&l->srv->mu);
    l->srv->quiesced++;
    pthread_cond_broadcast(&l->srv->cv);
    pthread_mutex_unlock(&l->srv->mu);
}

static void *loop_main(void *arg)
{
    struct svc_loop *l = arg;
    tls_loop = l;
    mhd_step(l);
    event_base_dispatch(l->base);
    return NULL;
}

/* The listening socket every loop's daemon accepts from: non-blocking, so
 * that a loop that lost the race for a connection goes on. -1 on failure. */
static int listen_socket(const struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0 ||
        listen(fd, 1024) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sets loop l up; its thread starts later (svc_server_start). */
static int loop_new(struct svc_server *srv, struct svc_loop *l, unsigned int conn_limit)
{
    struct svc_app *app = srv->app;
    const struct svc_config *cfg = app->cfg;
    l->srv = srv;
    l->base = event_base_new();
    if (!l->base)
        return -1;
    unsigned int flags =
        MHD_USE_EPOLL | MHD_USE_TURBO | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    l->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, app, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)srv->lsock,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)SERVER_CONN_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, conn_limit, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)SERVER_CONN_MEMORY, MHD_OPTION_NOTIFY_COMPLETED, on_completed, app,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL, MHD_OPTION_END);
    if (!l->daemon)
        return -1;
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    l->mhd_ready = event_new(l->base, info->epoll_fd, EV_READ | EV_PERSIST, on_mhd, l);
    l->mhd_timer = evtimer_new(l->base, on_mhd, l);
    l->quiesce = event_new(l->base, -1, 0, on_quiesce, l);
    l->nudge = event_new(l->base, -1, 0, on_mhd, l);
    if (!l->mhd_ready || !l->mhd_timer || !l->quiesce || !l->nudge ||
        event_add(l->mhd_ready, NULL))
        abort();
    struct inv_engine_config ec = {.redis_host = cfg->redis.host,
                                   .redis_port = cfg->redis.port,
                                   .redis_password = cfg->redis_password,
                                   .timeout_ms = 1000,
                                   .batch = cfg->batch,
                                   .wait_ms = cfg->wait_ms,
                                   .cluster = app->cluster,
                                   .seeds = cfg->redis_seed,
                                   .nseeds = cfg->redis_seeds};
    l->engine = inv_engine_new(app->inv, l->base, &ec, app->batcher);
    return 0;
}

static void loops_quiesce(struct svc_server *srv)
{
    for (int i = 0; i < srv->nloops; i++)
        event_active(srv->loops[i].quiesce, 0, 0);
    pthread_mutex_lock(&srv->mu);
    while (srv->quiesced < srv->nloops)
        pthread_cond_wait(&srv->cv, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
}

/* Stops and frees the loops [0, n): each thread first (when running), then
 * what it ran, every engine before any daemon (an engine answers the orders
 * in flight, which resumes their connections; MHD stops no suspended one). */
static void loops_free(struct svc_server *srv, int n, int running)
{
    for (int i = 0; running && i < n; i++) {
        event_base_loopbreak(srv->loops[i].base);
        pthread_join(srv->loops[i].tid, NULL);
    }
    for (int i = 0; i < n; i++)
        inv_engine_free(srv->loops[i].engine);
    for (int i = 0; i < n; i++) {
        struct svc_loop *l = &srv->loops[i];
        if (l->daemon)
            MHD_stop_daemon(l->daemon);
        event_free(l->mhd_ready);
        event_free(l->mhd_timer);
        event_free(l->quiesce);
        event_free(l->nudge);
        event_base_free(l->base);
    }
}

struct svc_server *svc_server_start(struct svc_app *app, char *err, size_t errlen)
{
    const struct svc_config *cfg = app->cfg;
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)cfg->listen.port)};
    const char *host =
        strcmp(cfg->listen.host, "localhost") == 0 ? "127.0.0.1" : cfg->listen.host;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "--listen: '%s' is not an IPv4 address", cfg->listen.host);
        return NULL;
    }
    static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
    pthread_once(&threads_once, (void (*)(void))evthread_use_pthreads);
    struct svc_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        abort();
    srv->app = app;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    srv->lsock = listen_socket(&addr);
    if (srv->lsock < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d (%s)", cfg->listen.host,
                 cfg->listen.port, strerror(errno));
        free(srv);
        return NULL;
    }
    srv->nloops = cfg->threads;
    srv->loops = calloc((size_t)srv->nloops, sizeof(*srv->loops));
    if (!srv->loops)
        abort();
    srv->engines = calloc((size_t)srv->nloops, sizeof(*srv->engines));
    if (!srv->engines)
        abort();
    unsigned int per_loop = connection_limit() / (unsigned int)srv->nloops;
    for (int i = 0; i < srv->nloops; i++) {
        if (loop_new(srv, &srv->loops[i], per_loop ? per_loop : 1) != 0) {
            snprintf(err, errlen, "cannot start event loop %d", i);
            loops_free(srv, i, 0);
            close(srv->lsock);
            free(srv->engines);
            free(srv->loops);
            free(srv);
            return NULL;
        }
        srv->engines[i] = srv->loops[i].engine;
    }
    inv_engine_link(srv->engines, srv->nloops);
    waiters_start(srv);
    for (int i = 0; i < srv->nloops; i++)
        if (pthread_create(&srv->loops[i].tid, NULL, loop_main, &srv->loops[i]) != 0)
            abort();
    return srv;
}

void svc_server_stop(struct svc_server *srv, int grace_ms, int wait_ms)
{
    if (!srv)
        return;
    struct svc_app *app = srv->app;
    atomic_store(&app->draining, 1);
    log_event(LOG_INFO, "draining", "grace_ms=%d inflight=%d", grace_ms,
              atomic_load(&app->inflight));
    /* Let the balancer see /readyz fail before refusing connections. Nothing
     * to wait on here but time: the balancer's health check is elsewhere. */
    if (grace_ms > 0)
        clock_sleep_us((int64_t)grace_ms * 1000);
    loops_quiesce(srv);
    close(srv->lsock);
    for (int waited = 0; atomic_load(&app->inflight) > 0 && waited < wait_ms;
         waited += 10)
        clock_sleep_us(10000);
    /* Orders still queued are served now, so that no suspended connection
     * outlives the daemon. */
    inv_batcher_stop(app->batcher);
    waiters_stop(srv);
    int left = atomic_load(&app->inflight);
    loops_free(srv, srv->nloops, 1);
    waiters_free(srv);
    log_event(LOG_INFO, "stopped", "inflight_left=%d", left);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv->engines);
    free(srv->loops);
    free(srv);
}
