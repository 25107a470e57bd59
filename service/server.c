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
#include "conns.h"
#include "engine.h"
#include "http.h"
#include "log.h"
#include "waiters.h"
#include "xalloc.h"

#define SERVER_CONN_LIMIT 8192
/* Descriptors kept free of HTTP connections: Redis contexts (one per worker
 * thread, lock nodes), the listen socket, epoll, logs. */
#define SERVER_FD_RESERVE 128

/* The loop of this thread (NULL off the loops). */
_Thread_local struct svc_loop *tls_loop;

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
    pthread_setname_np(pthread_self(), "sk-loop"); /* top -H, /proc/PID/task/N/comm */
    mhd_step(l);
    event_base_dispatch(l->base);
    return NULL;
}

/* The listening socket every loop's daemon accepts from: non-blocking, so
 * that a loop that lost the race for a connection goes on. IPv4 or IPv6 ("[::]"
 * takes IPv4 too unless the system's net.ipv6.bindv6only says otherwise). -1 on
 * failure, errno kept. */
static int listen_socket(const struct sockaddr *addr, socklen_t addrlen)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, addr, addrlen) != 0 || listen(fd, 1024) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* Sets loop l up; its thread starts later (svc_server_start). */
/* A request the sweep timed out (408): no route took it, so it is counted as
 * the unmatched pseudo-route's. */
static void count_timeout(int64_t waited_us)
{
    svc_route_count(svc_route_unmatched(), 408, waited_us);
}

static int loop_new(struct svc_server *srv, struct svc_loop *l, unsigned int conn_limit)
{
    struct svc_app *app = srv->app;
    const struct svc_config *cfg = app->cfg;
    l->srv = srv;
    l->base = event_base_new();
    if (!l->base)
        return -1;
    l->sweep = conns_sweep_new(l->base, cfg->request_timeout_ms, count_timeout);
    if (!l->sweep)
        return -1;
    l->daemon = http_daemon_start(app, srv->lsock, conn_limit);
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
    l->engine = inv_engine_new(app->inv, l->base, &ec);
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
 * the duties on loop 0 (app.h), then what each loop ran, every engine before any daemon
 * (an engine answers the orders in flight, which resumes their connections; MHD stops no
 * suspended one). */
static void loops_free(struct svc_server *srv, int n, int running)
{
    for (int i = 0; running && i < n; i++) {
        event_base_loopbreak(srv->loops[i].base);
        pthread_join(srv->loops[i].tid, NULL);
    }
    if (running && srv->app->duties_detach)
        srv->app->duties_detach(srv->app);
    for (int i = 0; i < n; i++)
        inv_engine_free(srv->loops[i].engine);
    for (int i = 0; i < n; i++) {
        struct svc_loop *l = &srv->loops[i];
        if (l->daemon)
            MHD_stop_daemon(l->daemon);
        conns_sweep_free(l->sweep); /* its connections are closed */
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
    static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
    pthread_once(&threads_once, (void (*)(void))evthread_use_pthreads);
    struct svc_server *srv = xcalloc(1, sizeof(*srv));
    srv->app = app;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    srv->lsock = listen_socket((const struct sockaddr *)&cfg->listen_addr,
                               cfg->listen_addrlen);
    if (srv->lsock < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d (%s)", cfg->listen.host,
                 cfg->listen.port, strerror(errno));
        free(srv);
        return NULL;
    }
    srv->nloops = cfg->threads;
    conns_limit_per_addr(cfg->max_conns_per_ip);
    srv->loops = xcalloc((size_t)srv->nloops, sizeof(*srv->loops));
    srv->engines = xcalloc((size_t)srv->nloops, sizeof(*srv->engines));
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
    if (app->duties_attach)
        app->duties_attach(app, srv->loops[0].base);
    waiters_init(srv, http_conn_resume);
    for (int i = 0; i < srv->nloops; i++)
        if (pthread_create(&srv->loops[i].tid, NULL, loop_main, &srv->loops[i]) != 0)
            abort();
    return srv;
}

int svc_server_serve(struct svc_server *srv, int signal_fd)
{
    return waiters_serve(srv, signal_fd, 0);
}

void svc_server_stop(struct svc_server *srv, int grace_ms, int wait_ms)
{
    if (!srv)
        return;
    struct svc_app *app = srv->app;
    atomic_store(&app->draining, SVC_DRAIN_GRACE);
    log_event(LOG_INFO, "draining", "grace_ms=%d inflight=%d", grace_ms,
              atomic_load(&app->inflight));
    /* Let the balancer see /readyz fail before refusing connections. Nothing
     * to wait on here but time (the balancer's health check is elsewhere);
     * the routes that wait on Redis are still served meanwhile. */
    if (grace_ms > 0)
        waiters_serve(srv, -1, clock_now_us() + (int64_t)grace_ms * 1000);
    loops_quiesce(srv);
    close(srv->lsock);
    atomic_store(&app->draining, SVC_DRAIN_CLOSED);
    /* The requests in flight answered, and the connections closed: each
     * answer now closes its connection (http.c), and a balancer closes its
     * idle kept-alive ones after its keepalive_timeout (deploy/nginx: 4 s),
     * so none is cut while a request it carries is on its way. */
    int64_t until = clock_now_us() + (int64_t)wait_ms * 1000;
    while ((atomic_load(&app->inflight) > 0 || conns_open() > 0) && clock_now_us() < until)
        waiters_serve(srv, -1, clock_now_us() + 10000);
    waiters_stop(srv);
    int left = atomic_load(&app->inflight);
    long long conns_left = (long long)conns_open();
    loops_free(srv, srv->nloops, 1);
    waiters_free(srv);
    log_event(LOG_INFO, "stopped", "inflight_left=%d connections_left=%lld", left,
              conns_left);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv->engines);
    free(srv->loops);
    free(srv);
}
