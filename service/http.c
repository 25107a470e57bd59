#include "http.h"

#include <event2/event.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "answers.h"
#include "clock.h"
#include "conns.h"
#include "log.h"
#include "text.h"
#include "waiters.h"
#include "worker.h"
#include "xalloc.h"

#define SERVER_CONN_TIMEOUT_S 15
/* MHD's memory pool per connection: room for a request's headers (a 10 KB
 * header still gets the route's own 400) and the 4 KiB body. MHD clears the
 * pool for each request of a kept-alive connection: at 32 KiB that memset
 * was 7 % of an instance's CPU under load (perf), at 16 KiB 4 %. */
#define SERVER_CONN_MEMORY (16 * 1024)

/* res's body, its JSON released; when it cannot be made, res becomes a 503
 * and the body says so. NULL only when not even that can be had. */
static char *response_body(struct svc_response *res)
{
    char *body = res->text;
    if (!body && res->json)
        body = json_dumps(res->json, JSON_COMPACT);
    json_decref(res->json);
    res->json = NULL;
    if (!body) {
        res->status = 503;
        body = strdup("{\"error\":\"unavailable\",\"detail\":\"out of memory\"}");
    }
    return body;
}

/* The headers an answer carries beside Content-Type. */
struct extra_header {
    const char *name;
    char value[64];
};
#define EXTRA_HEADERS_MAX 3

/* Fills h with st's answer res's extra headers; returns how many. */
static int extra_headers(const struct conn_state *st, const struct svc_response *res,
                         struct extra_header h[EXTRA_HEADERS_MAX])
{
    int n = 0;
    if (res->retry_after > 0) {
        h[n].name = MHD_HTTP_HEADER_RETRY_AFTER;
        snprintf(h[n++].value, sizeof(h[0].value), "%d", res->retry_after);
    }
    if (res->status == 401) { /* RFC 7235: a 401 names the scheme it wants */
        h[n].name = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        snprintf(h[n++].value, sizeof(h[0].value), "Bearer realm=\"seckill\"");
    }
    if (res->status == 405) {
        h[n].name = MHD_HTTP_HEADER_ALLOW;
        svc_route_allowed(st->path, h[n++].value, sizeof(h[0].value));
    }
    return n;
}

static enum MHD_Result send_response(struct MHD_Connection *conn, struct conn_state *st,
                                     struct svc_response *res)
{
    char *body = response_body(res);
    if (!body)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    if (res->status != 204) /* no content, no type */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                res->content_type ? res->content_type : "application/json");
    struct extra_header h[EXTRA_HEADERS_MAX];
    int nh = extra_headers(st, res, h);
    for (int i = 0; i < nh; i++)
        MHD_add_response_header(r, h[i].name, h[i].value);
    /* Draining, no longer accepting: the connection closes after this answer,
     * so that a balancer does not keep it to send a request the instance will
     * not read (svc_server_stop waits for the connections to close). */
    if (tls_loop && atomic_load(&tls_loop->srv->app->draining) == SVC_DRAIN_CLOSED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned int)res->status, r);
    MHD_destroy_response(r);
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
    st->answered = 0;
    st->order_id[0] = '\0';
    size_t len = strlen(url);
    if (len >= SERVER_PATH_MAX) { /* no route's path is so long: a SKU over 64 */
        memcpy(st->path, "/", 2);
        st->status_hint = 400;
        return st;
    }
    memcpy(st->path, url, len + 1);
    memcpy(st->split, url, len + 1);
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

void http_conn_resume(struct conn_state *st)
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

/* The loop's engine is done with the ticket. */
static void order_done(struct inv_ticket *t)
{
    http_conn_resume(t->owner);
}

/* Notes what st's answer is, for on_completed to name it should it never
 * reach the client. */
static void answer_note(struct conn_state *st, const struct svc_response *res)
{
    st->answered = res->status;
    if (res->order_id) { /* a text answer (the 201 of an order) has no json */
        *text_put_u64(st->order_id, res->order_id) = '\0';
        return;
    }
    const char *id = json_string_value(json_object_get(res->json, "order_id"));
    text_copy(st->order_id, sizeof(st->order_id), id ? id : "");
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
    answer_note(st, res);
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

static struct svc_request request_of(struct svc_app *app, struct MHD_Connection *conn,
                                     struct conn_state *st, const char *method);

/* st's connection was resumed: a waiter's answer is ready, or the order's
 * ticket is done. A pay's, a cancel's or a replay's order whose record has
 * left Redis goes on to the main thread, which asks the system of record
 * (svc_order_stored). */
static enum MHD_Result answer_resumed(struct svc_app *app, struct MHD_Connection *conn,
                                      struct conn_state *st, const char *method)
{
    int pending = st->pending;
    st->pending = PENDING_NONE;
    if (pending == PENDING_WAITER)
        return answer(conn, st, method, &st->res);
    if (st->ticket.st == INV_GONE && app->store) {
        struct svc_request req = request_of(app, conn, st, method);
        if (waiters_hand_over(st, &req, svc_order_stored))
            return MHD_YES;
    }
    if (st->ticket.st == INV_BAD_QTY && !st->ticket.end) { /* the SKU's range told */
        struct svc_request req = request_of(app, conn, st, method);
        if (waiters_hand_over(st, &req, svc_order_bad_qty))
            return MHD_YES;
    }
    struct svc_response res = {0};
    svc_order_finish(app, &st->ticket, &res);
    return answer(conn, st, method, &res);
}

/* Fills res when st is refused before any route runs (404, 405, 413).
 * Returns 1 when it is, 0 when its route is to run. */
static int refused(const struct conn_state *st, struct svc_response *res)
{
    if (st->status_hint == 400)
        svc_error(
            res, 400, "bad_request",
            "the path is too long (a SKU is 1..64 characters of [A-Za-z0-9_.:-], an "
            "order id a decimal number)");
    else if (st->status_hint == 404)
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
        .worker = svc_worker_get(app),
        .method = method,
        .params = {st->params[0], st->params[1]},
        .body = st->body,
        .body_len = st->body_len,
        .idem_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key"),
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_AUTHORIZATION),
        .reset = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "reset"),
        .cursor = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "cursor"),
        .buyer = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Seckill-Buyer"),
        .limit = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit"),
        .pass = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Seckill-Pass"),
        .ticket = &st->ticket,
    };
}

/* Hands an order that waits for its batch to the loop's engine; the
 * connection is resumed once its ticket is done (order_done). */
static void order_hand_over(struct MHD_Connection *conn, struct conn_state *st)
{
    /* Suspended before it is queued, so that the engine can only resume a
     * suspended connection. */
    st->pending = PENDING_ORDER;
    st->ticket.done = order_done;
    st->ticket.owner = st;
    st->loop = tls_loop;
    MHD_suspend_connection(conn);
    inv_engine_submit(tls_loop->engine, &st->ticket);
}

/* The request is all in: answers it now, or hands it over (the main thread,
 * the engine) to be answered once resumed. */
static enum MHD_Result request_serve(struct svc_app *app, struct MHD_Connection *conn,
                                     struct conn_state *st, const char *method)
{
    struct svc_response res = {0};
    conns_request_in(conn);
    if (!refused(st, &res)) {
        struct svc_request req = request_of(app, conn, st, method);
        if ((st->route->flags & ROUTE_WAITS) && waiters_hand_over(st, &req, NULL))
            return MHD_YES;
        svc_route_run(st->route, &req, &res);
        if (res.pending) {
            order_hand_over(conn, st);
            return MHD_YES;
        }
        if (res.again && waiters_hand_over(st, &req, res.again)) {
            json_decref(res.json);
            free(res.text);
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
        conns_headers_in(conn);
        /* A body declared over the cap is refused before it is read (MHD then
         * closes the connection): a client that announces 1 GB gets its 413 at
         * once instead of after sending it, or never when it sends nothing. */
        if (!st->too_large)
            return MHD_YES;
    } else if (st->pending != PENDING_NONE) {
        return answer_resumed(app, conn, st, method);
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

/* Writes res whole on the socket fd as an HTTP/1.1 answer that closes the
 * connection, without blocking. 1 when the kernel took all of it; 0 when the
 * socket refused (the client is gone) or is full. Frees res's body. */
static int answer_write(int fd, const struct conn_state *st, struct svc_response *res)
{
    char *body = response_body(res);
    if (!body)
        return 0;
    const char *reason = MHD_get_reason_phrase_for((unsigned int)res->status);
    struct extra_header h[EXTRA_HEADERS_MAX];
    int nh = extra_headers(st, res, h);
    char head[512], extra[EXTRA_HEADERS_MAX * 96] = "";
    for (int i = 0, at = 0; i < nh; i++)
        at += snprintf(extra + at, sizeof(extra) - (size_t)at, "%s: %s\r\n", h[i].name,
                       h[i].value);
    size_t blen = strlen(body);
    int hlen =
        snprintf(head, sizeof(head),
                 "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: %s\r\n"
                 "Content-Length: %zu\r\n%s\r\n",
                 res->status, reason && *reason ? reason : "Unknown",
                 res->content_type ? res->content_type : "application/json", blen, extra);
    struct iovec iov[2] = {{head, (size_t)hlen}, {body, blen}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    free(body);
    return n == (ssize_t)((size_t)hlen + blen);
}

/* Answers that never reached their client: a line a second at most each,
 * as for libmicrohttpd's warnings (a client can make them by the thousand). */
#define HTTP_UNDELIVERED_PER_S 5
static struct log_limit undelivered_log = LOG_LIMIT_INIT(HTTP_UNDELIVERED_PER_S);

/* What libmicrohttpd says ended a request, for the log. */
static const char *toe_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return "completed";
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
        return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client_abort";
    }
    return "other";
}

/* Counts and logs st's answer as undelivered. */
static void answer_lost(const struct conn_state *st, enum MHD_RequestTerminationCode toe)
{
    struct svc_route *route = st->route ? st->route : svc_route_unmatched();
    svc_route_count_undelivered(route, st->answered);
    uint64_t suppressed;
    if (!log_enabled(LOG_WARN) || !log_limit_take(&undelivered_log, &suppressed))
        return;
    log_event(LOG_WARN, "answer_undelivered",
              "route=%s status=%d order_id=%s closed=%s suppressed=%llu", route->name,
              st->answered, st->order_id[0] ? st->order_id : "-", toe_name(toe),
              (unsigned long long)suppressed);
}

/* st's connection was resumed with its answer ready, and libmicrohttpd
 * closed it before asking for it: it read the end of the client's sending
 * side (a half-close, nc -N) and closes on that once a request is all in,
 * answer or not (libmicrohttpd 0.9.75: a resumed connection is read first,
 * and a read of 0 bytes past MHD_CONNECTION_FULL_REQ_RECEIVED closes it with
 * MHD_REQUEST_TERMINATED_WITH_ERROR). The socket is still open here (its
 * shutdown and close come after this callback): the answer is written on it
 * directly, counted and logged as undelivered when the socket refuses it. */
static void answer_closing(const struct svc_app *app, struct MHD_Connection *conn,
                           struct conn_state *st, enum MHD_RequestTerminationCode toe)
{
    struct svc_response res = {0};
    if (st->pending == PENDING_WAITER)
        res = st->res;
    else
        svc_order_finish(app, &st->ticket, &res);
    st->pending = PENDING_NONE;
    svc_route_count(st->route ? st->route : svc_route_unmatched(), res.status,
                    clock_now_us() - st->start_us);
    answer_note(st, &res);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci && answer_write(ci->connect_fd, st, &res)) {
        if (log_enabled(LOG_DEBUG))
            log_event(LOG_DEBUG, "answer_on_close",
                      "path=%s status=%d order_id=%s closed=%s", st->path, st->answered,
                      st->order_id[0] ? st->order_id : "-", toe_name(toe));
        return;
    }
    if (!ci) {
        free(res.text);
        json_decref(res.json);
    }
    answer_lost(st, toe);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct svc_app *app = cls;
    struct conn_state *st = *con_cls;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        conns_answer_sent(conn);
    if (!st)
        return;
    if (st->pending != PENDING_NONE)
        answer_closing(app, conn, st, toe);
    else if (st->answered && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        answer_lost(st, toe); /* queued, not sent whole */
    free(st);
    *con_cls = NULL;
    atomic_fetch_sub(&app->inflight, 1);
}

/* A connection opened or closed: its address's count and its request
 * deadline (conns.h). Called on its loop's thread, or by MHD_stop_daemon
 * once the loops are gone. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        conns_opened(tls_loop ? tls_loop->sweep : NULL, conn, socket_context);
    else
        conns_closed(socket_context);
}

/* libmicrohttpd's warnings a second, at most: one comes per aborted
 * connection, which any client can make by the thousand. */
#define HTTP_WARNINGS_PER_S 5
static struct log_limit http_warnings = LOG_LIMIT_INIT(HTTP_WARNINGS_PER_S);

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    uint64_t suppressed;
    if (!log_enabled(LOG_WARN) || !log_limit_take(&http_warnings, &suppressed))
        return;
    char msg[256];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    if (suppressed)
        log_event(LOG_WARN, "http", "detail=\"%s\" suppressed=%llu", msg,
                  (unsigned long long)suppressed);
    else
        log_event(LOG_WARN, "http", "detail=\"%s\"", msg);
}

struct MHD_Daemon *http_daemon_start(struct svc_app *app, int lsock,
                                     unsigned int conn_limit)
{
    unsigned int flags =
        MHD_USE_EPOLL | MHD_USE_TURBO | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    return MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, app, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log,
        NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lsock, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)SERVER_CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, conn_limit,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVER_CONN_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, app, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, app, MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
        MHD_OPTION_END);
}
