#include "apg.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "xalloc.h"

enum apg_state { APG_DOWN, APG_CONNECTING, APG_LISTENING, APG_READY };

/* One query owed a result. Until it leaves (the connection is not up yet) it
 * keeps its own copy of the text and the parameters. */
struct apg_query {
    struct apg_query *next;
    apg_cb *cb;
    void *arg;
    PGresult *res; /* its first result (or first failure), kept until its sync point */
    int sent;
    char *sql; /* unsent only: copies, freed once sent */
    int nparams;
    char **params;
};

struct apg {
    struct event_base *base;
    char *conninfo;
    int timeout_ms;
    PGconn *conn;
    enum apg_state state;
    struct event *io;    /* the socket: connecting, reading and writing */
    struct event *watch; /* no sign of life within timeout_ms: dropped */
    struct event *retry; /* a listener's next connection */
    int io_fd;
    int64_t last_attempt_us;
    int64_t watch_from_us; /* the last sign of life the watch counts from */
    struct apg_query *head, *tail;
    int pending;
    int closing;   /* apg_free: no query, no connection any more */
    char *channel; /* a listener's */
    apg_notify_cb *notify;
    void *notify_arg;
    char errstr[256];
};

static void on_io(evutil_socket_t fd, short what, void *arg);

static void set_err(struct apg *c, const char *why)
{
    apg_line(why, c->errstr, sizeof(c->errstr));
}

const char *apg_line(const char *m, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", (int)strcspn(m, "\n"), m);
    return buf;
}

const char *apg_result_error(const PGresult *r, char *buf, size_t len)
{
    return apg_line(r ? PQresultErrorMessage(r) : "", buf, len);
}

/* Waits on the socket for what (EV_READ, EV_WRITE or both): a new event when
 * the socket or the wish changed. */
static void io_want(struct apg *c, short what)
{
    int fd = PQsocket(c->conn);
    if (c->io && c->io_fd == fd &&
        (event_get_events(c->io) & (EV_READ | EV_WRITE)) == what)
        return;
    if (c->io)
        event_free(c->io);
    c->io_fd = fd;
    c->io = event_new(c->base, fd, what | EV_PERSIST, on_io, c);
    event_add(c->io, NULL);
}

static void watch_arm(struct apg *c)
{
    if (c->pending == 0) {
        evtimer_del(c->watch);
        return;
    }
    struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
    c->watch_from_us = clock_now_us();
    evtimer_add(c->watch, &tv);
}

static void query_free(struct apg_query *q)
{
    if (q->res)
        PQclear(q->res);
    free(q->sql);
    for (int i = 0; i < q->nparams && q->params; i++)
        free(q->params[i]);
    free(q->params);
    free(q);
}

/* Takes the first query off the queue and answers it. */
static void query_done(struct apg *c, apg_outcome res)
{
    struct apg_query *q = c->head;
    c->head = q->next;
    if (!c->head)
        c->tail = NULL;
    c->pending--;
    PGresult *r = res == APG_RESULT ? q->res : NULL;
    q->cb(q->arg, res, r);
    query_free(q);
}

static void listen_again_later(struct apg *c)
{
    struct timeval tv = {0, APG_RETRY_MS * 1000};
    if (c->channel && !evtimer_pending(c->retry, NULL))
        evtimer_add(c->retry, &tv);
}

/* The connection failed: every query still owed gets its answer, a listener
 * hears of the loss and connects again later. */
static void drop(struct apg *c, const char *why)
{
    int was_listening = c->state == APG_READY && c->channel;
    if (why)
        set_err(c, why);
    if (c->io) {
        event_free(c->io);
        c->io = NULL;
    }
    if (c->conn) {
        PQfinish(c->conn);
        c->conn = NULL;
    }
    c->state = APG_DOWN;
    evtimer_del(c->watch);
    /* The queue is taken whole first: a callback that queues again (a retry)
     * starts a new queue, which this loss does not answer. */
    struct apg_query *q = c->head;
    c->head = c->tail = NULL;
    c->pending = 0;
    while (q) {
        struct apg_query *next = q->next;
        q->cb(q->arg, q->sent ? APG_LOST : APG_NOT_SENT, NULL);
        query_free(q);
        q = next;
    }
    if (was_listening && c->notify)
        c->notify(c->notify_arg, NULL, NULL);
    listen_again_later(c);
}

static int send_one(struct apg *c, struct apg_query *q, const char *sql, int nparams,
                    const char *const *params)
{
    if (!PQsendQueryParams(c->conn, sql, nparams, NULL, params, NULL, NULL, 0) ||
        !PQpipelineSync(c->conn))
        return -1;
    q->sent = 1;
    return 0;
}

/* Writes what libpq holds; waits for the socket to take the rest. */
static void flush(struct apg *c)
{
    int r = PQflush(c->conn);
    if (r < 0) {
        drop(c, PQerrorMessage(c->conn));
        return;
    }
    io_want(c, r == 1 ? EV_READ | EV_WRITE : EV_READ);
}

/* Up: the queries that waited for the connection leave now. */
static void sent_waiting(struct apg *c)
{
    for (struct apg_query *q = c->head; q; q = q->next) {
        if (q->sent)
            continue;
        if (send_one(c, q, q->sql, q->nparams, (const char *const *)q->params) < 0) {
            drop(c, PQerrorMessage(c->conn));
            return;
        }
        free(q->sql);
        q->sql = NULL;
    }
    flush(c);
    watch_arm(c);
}

static void on_listening(void *arg, apg_outcome res, PGresult *r)
{
    struct apg *c = arg;
    if (res != APG_RESULT)
        return; /* drop() runs the retry */
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        char buf[256];
        drop(c, apg_result_error(r, buf, sizeof(buf)));
        return;
    }
    c->state = APG_READY;
    if (c->notify) /* listening (again): what was notified meanwhile is lost */
        c->notify(c->notify_arg, NULL, "");
}

static void queue_push(struct apg *c, struct apg_query *q)
{
    if (c->tail)
        c->tail->next = q;
    else
        c->head = q;
    c->tail = q;
    c->pending++;
}

static struct apg_query *query_copy(apg_cb *cb, void *arg, const char *sql, int nparams,
                                    const char *const *params)
{
    struct apg_query *q = xcalloc(1, sizeof(*q));
    q->cb = cb;
    q->arg = arg;
    q->sql = xstrdup(sql);
    q->nparams = nparams;
    if (nparams > 0) {
        q->params = xcalloc((size_t)nparams, sizeof(char *));
        for (int i = 0; i < nparams; i++)
            q->params[i] = params[i] ? xstrdup(params[i]) : NULL;
    }
    return q;
}

/* The connection is made: pipeline mode, then (a listener) its LISTEN ahead of
 * whatever waited. */
static void connected(struct apg *c)
{
    if (PQsetnonblocking(c->conn, 1) != 0 || !PQenterPipelineMode(c->conn)) {
        drop(c, PQerrorMessage(c->conn));
        return;
    }
    if (c->channel) {
        char *id = PQescapeIdentifier(c->conn, c->channel, strlen(c->channel));
        char sql[256];
        snprintf(sql, sizeof(sql), "LISTEN %s", id ? id : "\"\"");
        PQfreemem(id);
        struct apg_query *q = query_copy(on_listening, c, sql, 0, NULL);
        q->next = c->head; /* first */
        c->head = q;
        if (!c->tail)
            c->tail = q;
        c->pending++;
        c->state = APG_LISTENING;
    } else {
        c->state = APG_READY;
    }
    sent_waiting(c);
}

static void connect_step(struct apg *c)
{
    switch (PQconnectPoll(c->conn)) {
    case PGRES_POLLING_READING:
        io_want(c, EV_READ);
        break;
    case PGRES_POLLING_WRITING:
        io_want(c, EV_WRITE);
        break;
    case PGRES_POLLING_OK:
        connected(c);
        break;
    default:
        drop(c, PQerrorMessage(c->conn));
        break;
    }
}

static void quiet(void *arg, const char *message)
{
    (void)arg, (void)message;
}

static void connect_start(struct apg *c)
{
    c->last_attempt_us = clock_now_us();
    c->conn = PQconnectStart(c->conninfo);
    if (!c->conn || PQstatus(c->conn) == CONNECTION_BAD) {
        drop(c, c->conn ? PQerrorMessage(c->conn) : "out of memory");
        return;
    }
    /* notices ("already exists, skipping"; the server's shutdown message)
     * are no errors: not written to stderr, outside the log */
    PQsetNoticeProcessor(c->conn, quiet, NULL);
    c->state = APG_CONNECTING;
    /* the connection attempt is bounded like a query */
    struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
    c->watch_from_us = c->last_attempt_us;
    evtimer_add(c->watch, &tv);
    connect_step(c);
}

static void notifications(struct apg *c)
{
    PGnotify *n;
    while (c->conn && (n = PQnotifies(c->conn)) != NULL) {
        if (c->notify)
            c->notify(c->notify_arg, n->relname, n->extra);
        PQfreemem(n);
    }
}

/* True when r says the query failed. */
static int result_failed(const PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    return st == PGRES_FATAL_ERROR || st == PGRES_PIPELINE_ABORTED ||
           st == PGRES_BAD_RESPONSE;
}

/* Reads what came: every result up to a query's sync point is read, and the
 * query is answered there with its first result, or with its first failure
 * when one came after it (an error reported at the commit). */
static void read_results(struct apg *c)
{
    if (!PQconsumeInput(c->conn)) {
        drop(c, PQerrorMessage(c->conn));
        return;
    }
    int progressed = 0, nulls = 0;
    while (c->conn && c->head && c->head->sent && !PQisBusy(c->conn)) {
        PGresult *r = PQgetResult(c->conn);
        if (!r) {
            /* the end of one query's results; its sync follows. Twice in a
             * row: nothing more to read (a broken connection says so) */
            if (++nulls > 1)
                break;
            continue;
        }
        nulls = 0;
        progressed = 1;
        if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            query_done(c, APG_RESULT);
        } else if (!c->head->res || (!result_failed(c->head->res) && result_failed(r))) {
            /* the first result, or the first failure after it: an error at
             * the commit (a deferred constraint, a serialization failure)
             * comes after the statement's own result, and is the answer */
            if (c->head->res)
                PQclear(c->head->res);
            c->head->res = r;
        } else {
            PQclear(r); /* a statement's further results: not asked for */
        }
    }
    notifications(c);
    if (c->conn && PQstatus(c->conn) == CONNECTION_BAD)
        drop(c, PQerrorMessage(c->conn));
    else if (c->conn && progressed)
        watch_arm(c);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct apg *c = arg;
    if (c->state == APG_CONNECTING) {
        connect_step(c);
        return;
    }
    if (what & EV_WRITE) {
        flush(c);
        if (!c->conn)
            return;
    }
    if (what & EV_READ)
        read_results(c);
}

static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct apg *c = arg;
    /* A timer that fires late (the process was stopped, the loop was busy)
     * may come with the answer it waited for already read: the time since
     * the last sign of life decides, not the timer alone. */
    int64_t left = c->watch_from_us + (int64_t)c->timeout_ms * 1000 - clock_now_us();
    if (left > 0) {
        struct timeval tv = {.tv_sec = left / 1000000, .tv_usec = left % 1000000};
        evtimer_add(c->watch, &tv);
        return;
    }
    if (c->state == APG_CONNECTING)
        drop(c, "timed out connecting");
    else if (c->pending > 0)
        drop(c, "timed out waiting for a result");
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct apg *c = arg;
    if (c->state == APG_DOWN && !c->closing)
        connect_start(c);
}

struct apg *apg_new(struct event_base *base, const char *conninfo, int timeout_ms)
{
    struct apg *c = xcalloc(1, sizeof(*c));
    c->base = base;
    c->conninfo = xstrdup(conninfo);
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    c->watch = evtimer_new(base, on_watch, c);
    c->retry = evtimer_new(base, on_retry, c);
    c->io_fd = -1;
    return c;
}

void apg_free(struct apg *c)
{
    if (!c)
        return;
    c->closing = 1; /* a callback's query is refused, not connected anew */
    free(c->channel);
    c->channel = NULL; /* no retry, no notification of the loss */
    c->notify = NULL;
    drop(c, NULL);
    event_free(c->watch);
    event_free(c->retry);
    free(c->conninfo);
    free(c);
}

apg_status apg_query(struct apg *c, apg_cb *cb, void *arg, const char *sql, int nparams,
                     const char *const *params)
{
    if (c->closing)
        return APG_ERR;
    if (c->state == APG_DOWN) {
        if (clock_now_us() - c->last_attempt_us < (int64_t)APG_RETRY_MS * 1000 &&
            c->last_attempt_us != 0)
            return APG_ERR;
        connect_start(c);
        if (c->state == APG_DOWN)
            return APG_ERR;
    }
    if (c->state == APG_CONNECTING) {
        queue_push(c, query_copy(cb, arg, sql, nparams, params));
        return APG_OK;
    }
    struct apg_query *q = xcalloc(1, sizeof(*q));
    q->cb = cb;
    q->arg = arg;
    if (send_one(c, q, sql, nparams, params) < 0) {
        free(q);
        return APG_ERR;
    }
    queue_push(c, q);
    flush(c);
    if (c->conn && c->pending == 1)
        watch_arm(c);
    return APG_OK;
}

void apg_listen(struct apg *c, const char *channel, apg_notify_cb *cb, void *arg)
{
    c->channel = xstrdup(channel);
    c->notify = cb;
    c->notify_arg = arg;
    connect_start(c);
}

int apg_up(const struct apg *c)
{
    return c->state == APG_READY;
}

int apg_pending(const struct apg *c)
{
    return c->pending;
}

const char *apg_errstr(const struct apg *c)
{
    return c->errstr;
}
