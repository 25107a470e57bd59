#include "conns.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "log.h"

/* Where a connection is, as far as the deadline goes. */
enum conn_phase {
    CONN_READING, /* a request is coming in: its clock runs */
    CONN_SERVING, /* the request is all in, its answer not sent yet */
    CONN_IDLE,    /* answered, kept alive, no byte of a next request seen */
    CONN_CLOSING, /* shut down here (deadline, address limit): MHD closes it */
};

struct conn_entry {
    struct conns_sweep *sweep; /* NULL: not swept (opened off the loops) */
    struct MHD_Connection *conn;
    unsigned char addr[16]; /* the client's address, IPv4 as ::ffff:a.b.c.d */
    int counted;            /* in its address's count */
    enum conn_phase phase;
    int64_t since_us; /* READING: the request's start; IDLE: the answer's */
    struct conn_entry *prev, *next;
};

struct conns_sweep {
    struct event *timer;
    int64_t timeout_us;
    void (*timed_out)(int64_t waited_us); /* counts a 408 (server.c's) */
    struct conn_entry *head;
};

static _Atomic uint64_t timeouts_total, refused_total;
static _Atomic int64_t open_total; /* connections open now, every loop */

/* The open connections of each client address, across the loops. */
#define ADDR_BUCKETS 1024
struct addr_count {
    unsigned char addr[16];
    int open;
    struct addr_count *next;
};
static struct {
    pthread_mutex_t mu;
    int max; /* 0: no limit */
    struct addr_count *bucket[ADDR_BUCKETS];
} addrs = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* A request past its deadline is told so when its socket takes it. */
static const char timeout_answer[] = "HTTP/1.1 408 Request Timeout\r\n"
                                     "Connection: close\r\n"
                                     "Content-Type: application/json\r\n"
                                     "Content-Length: 79\r\n"
                                     "\r\n"
                                     "{\"error\":\"request_timeout\",\"detail\":\"the "
                                     "request did not arrive whole in time\"}";

/* Lines a second, at most, about expired requests and about refused
 * connections: any client can make them by the thousand. */
#define CONNS_LOG_PER_S 5
static struct log_limit timeout_log = LOG_LIMIT_INIT(CONNS_LOG_PER_S);
static struct log_limit refused_log = LOG_LIMIT_INIT(CONNS_LOG_PER_S);

void conns_limit_per_addr(int max_per_addr)
{
    addrs.max = max_per_addr;
}

/* conn's client address as 16 bytes (IPv4 mapped). 0 when it has none that
 * counts (not IP). */
static int addr_of(struct MHD_Connection *conn, unsigned char addr[16])
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return 0;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) {
        memcpy(addr, v4_mapped, 12);
        memcpy(addr + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 1;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 1;
    }
    return 0;
}

/* Where addr's count is, or would be. Under addrs.mu. */
static struct addr_count **addr_slot(const unsigned char addr[16])
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ addr[i]) * 16777619u;
    struct addr_count **p = &addrs.bucket[h % ADDR_BUCKETS];
    while (*p && memcmp((*p)->addr, addr, 16) != 0)
        p = &(*p)->next;
    return p;
}

/* Counts one more connection of addr: 1, or 0 when addr is at the limit.
 * Out of memory, the connection is admitted uncounted (-1). */
static int addr_admit(const unsigned char addr[16])
{
    int ok = 1;
    pthread_mutex_lock(&addrs.mu);
    struct addr_count **p = addr_slot(addr);
    if (!*p && (*p = calloc(1, sizeof(**p))) != NULL)
        memcpy((*p)->addr, addr, 16);
    if (!*p)
        ok = -1;
    else if (addrs.max > 0 && (*p)->open >= addrs.max)
        ok = 0;
    else
        (*p)->open++;
    pthread_mutex_unlock(&addrs.mu);
    return ok;
}

static void addr_release(const unsigned char addr[16])
{
    pthread_mutex_lock(&addrs.mu);
    struct addr_count **p = addr_slot(addr);
    if (*p && --(*p)->open <= 0) {
        struct addr_count *gone = *p;
        *p = gone->next;
        free(gone);
    }
    pthread_mutex_unlock(&addrs.mu);
}

static int conn_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

static struct conn_entry *entry_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* c's address is at its limit: shut down before anything is read (MHD sees
 * the close at its first read and cleans up). */
static void refuse(struct conn_entry *c)
{
    c->phase = CONN_CLOSING;
    atomic_fetch_add_explicit(&refused_total, 1, memory_order_relaxed);
    int fd = conn_fd(c->conn);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    uint64_t suppressed;
    if (!log_enabled(LOG_WARN) || !log_limit_take(&refused_log, &suppressed))
        return;
    char text[INET6_ADDRSTRLEN] = "?";
    int v4 = memcmp(c->addr, v4_mapped, 12) == 0;
    inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? c->addr + 12 : c->addr, text, sizeof(text));
    log_event(LOG_WARN, "connection_refused", "addr=%s limit=%d suppressed=%llu", text,
              addrs.max, (unsigned long long)suppressed);
}

/* c's request is past its deadline: a 408, and the socket shut down. */
static void expire(struct conns_sweep *s, struct conn_entry *c, int64_t now_us)
{
    int fd = conn_fd(c->conn);
    c->phase = CONN_CLOSING;
    atomic_fetch_add_explicit(&timeouts_total, 1, memory_order_relaxed);
    if (fd < 0)
        return;
    /* Best effort: a client that reads nothing gets the close alone. */
    ssize_t sent =
        send(fd, timeout_answer, sizeof(timeout_answer) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(fd, SHUT_RDWR);
    s->timed_out(now_us - c->since_us);
    uint64_t suppressed;
    if (log_enabled(LOG_INFO) && log_limit_take(&timeout_log, &suppressed))
        log_event(LOG_INFO, "request_timeout", "ms=%lld answered=%d suppressed=%llu",
                  (long long)((now_us - c->since_us) / 1000),
                  sent == (ssize_t)sizeof(timeout_answer) - 1,
                  (unsigned long long)suppressed);
}

/* The kernel's receive time is in jiffies (4 ms at HZ=250, 10 ms at HZ=100):
 * data this close after the answer may be the answered request's. */
#define CONNS_JIFFY_US 20000

/* An idle connection whose next request has begun: the kernel saw data
 * after the answer. Its start is taken as the last data seen, at most one
 * sweep later than the first byte. */
static void idle_check(struct conn_entry *c, int64_t now_us)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int fd = conn_fd(c->conn);
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return;
    int64_t last_data_us = now_us - (int64_t)ti.tcpi_last_data_recv * 1000;
    if (last_data_us > c->since_us + CONNS_JIFFY_US) {
        c->phase = CONN_READING;
        c->since_us = last_data_us;
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct conns_sweep *s = arg;
    int64_t now = clock_now_us();
    for (struct conn_entry *c = s->head; c; c = c->next) {
        if (c->phase == CONN_IDLE)
            idle_check(c, now);
        if (c->phase == CONN_READING && now - c->since_us >= s->timeout_us)
            expire(s, c, now);
    }
}

struct conns_sweep *conns_sweep_new(struct event_base *base, int timeout_ms,
                                    void (*timed_out)(int64_t waited_us))
{
    struct conns_sweep *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->timeout_us = (int64_t)timeout_ms * 1000;
    s->timed_out = timed_out;
    s->timer = event_new(base, -1, EV_PERSIST, on_sweep, s);
    int period_ms = timeout_ms / 4;
    period_ms = period_ms < 50 ? 50 : period_ms > 1000 ? 1000 : period_ms;
    struct timeval tv = {.tv_sec = period_ms / 1000,
                         .tv_usec = (period_ms % 1000) * 1000};
    if (!s->timer || event_add(s->timer, &tv) != 0) {
        if (s->timer)
            event_free(s->timer);
        free(s);
        return NULL;
    }
    return s;
}

void conns_sweep_free(struct conns_sweep *s)
{
    if (!s)
        return;
    event_free(s->timer);
    free(s);
}

void conns_opened(struct conns_sweep *s, struct MHD_Connection *conn,
                  void **socket_context)
{
    struct conn_entry *c = calloc(1, sizeof(*c));
    *socket_context = c;
    if (!c) /* out of memory: neither counted nor timed */
        return;
    atomic_fetch_add_explicit(&open_total, 1, memory_order_relaxed);
    c->conn = conn;
    c->phase = CONN_READING;
    c->since_us = clock_now_us();
    if (addr_of(conn, c->addr)) {
        int admitted = addr_admit(c->addr);
        c->counted = admitted == 1;
        if (admitted == 0) {
            refuse(c);
            return;
        }
    }
    if (!s)
        return;
    c->sweep = s;
    c->next = s->head;
    if (s->head)
        s->head->prev = c;
    s->head = c;
}

void conns_closed(void **socket_context)
{
    struct conn_entry *c = *socket_context;
    if (!c)
        return;
    atomic_fetch_sub_explicit(&open_total, 1, memory_order_relaxed);
    if (c->counted)
        addr_release(c->addr);
    if (c->sweep) {
        if (c->prev)
            c->prev->next = c->next;
        else
            c->sweep->head = c->next;
        if (c->next)
            c->next->prev = c->prev;
    }
    free(c);
    *socket_context = NULL;
}

void conns_headers_in(struct MHD_Connection *conn)
{
    struct conn_entry *c = entry_of(conn);
    if (c && c->phase == CONN_IDLE) {
        c->phase = CONN_READING;
        c->since_us = clock_now_us();
    }
}

void conns_request_in(struct MHD_Connection *conn)
{
    struct conn_entry *c = entry_of(conn);
    if (c && (c->phase == CONN_READING || c->phase == CONN_IDLE))
        c->phase = CONN_SERVING;
}

void conns_answer_sent(struct MHD_Connection *conn)
{
    struct conn_entry *c = entry_of(conn);
    if (c && c->phase != CONN_CLOSING) {
        c->phase = CONN_IDLE;
        c->since_us = clock_now_us();
    }
}

uint64_t conns_timeouts_total(void)
{
    return atomic_load_explicit(&timeouts_total, memory_order_relaxed);
}

uint64_t conns_refused_total(void)
{
    return atomic_load_explicit(&refused_total, memory_order_relaxed);
}

int64_t conns_open(void)
{
    return atomic_load_explicit(&open_total, memory_order_relaxed);
}
