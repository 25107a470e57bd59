#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apg.h"
#include "clock.h"
#include "xalloc.h"

/* A query that takes longer is cancelled by the database: a route that waits
 * on it holds the main thread. */
#define STORE_STATEMENT_TIMEOUT "5s"
/* The most a query (or the set-up of a connection) waits for the database's
 * answer: the statement timeout and a second. A server that says nothing for
 * that long is stalled (stopped, or cut off without a reset, when the kernel
 * would wait for minutes): its connection is dropped and the route answers
 * 503, instead of the main thread, and every route behind it, waiting for as
 * long as the stall lasts. */
#define STORE_DEADLINE_MS 6000

struct svc_store {
    char *conninfo;
    pthread_mutex_t mu;
    PGconn *conn;
    int64_t retry_us; /* no connection tried before this (clock_now_us); 0: any time */
    char why[256];    /* why the last connection failed */
};

struct svc_store *svc_store_new(const char *conninfo)
{
    struct svc_store *st = xcalloc(1, sizeof(*st));
    st->conninfo = xstrdup(conninfo);
    pthread_mutex_init(&st->mu, NULL);
    return st;
}

void svc_store_free(struct svc_store *st)
{
    if (!st)
        return;
    if (st->conn)
        PQfinish(st->conn);
    pthread_mutex_destroy(&st->mu);
    free(st->conninfo);
    free(st);
}

/* The result of sql with params on c, waited for until deadline_us
 * (clock_now_us); the last result when there are several. NULL when it could
 * not be sent, the connection failed, or the deadline came first (*late set:
 * the connection must not be used again). */
static PGresult *exec_by(PGconn *c, const char *sql, int nparams,
                         const char *const *params, int64_t deadline_us, int *late)
{
    *late = 0;
    if (!PQsendQueryParams(c, sql, nparams, NULL, params, NULL, NULL, 0))
        return NULL;
    PGresult *last = NULL;
    for (;;) {
        /* while PQgetResult would block: wait, but not past the deadline */
        while (PQisBusy(c)) {
            int64_t left_us = deadline_us - clock_now_us();
            if (left_us <= 0) {
                *late = 1;
                PQclear(last);
                return NULL;
            }
            struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
            int n = poll(&p, 1, (int)((left_us + 999) / 1000));
            if ((n < 0 && errno != EINTR) || (n > 0 && !PQconsumeInput(c))) {
                PQclear(last);
                return NULL;
            }
        }
        PGresult *r = PQgetResult(c);
        if (!r)
            return last;
        PQclear(last);
        last = r;
    }
}

/* The connection, made (again) when it is not up; NULL with why in err when
 * it cannot be, or was not within STORE_BACKOFF_MS. Under st->mu. */
static PGconn *store_conn(struct svc_store *st, char *err, size_t errlen)
{
    if (st->conn && PQstatus(st->conn) == CONNECTION_OK)
        return st->conn;
    if (st->conn)
        PQfinish(st->conn);
    st->conn = NULL;
    if (st->retry_us && clock_now_us() < st->retry_us) {
        snprintf(err, errlen, "%s", st->why);
        return NULL;
    }
    const char *keys[] = {"dbname", "connect_timeout", NULL};
    const char *vals[] = {st->conninfo, "2", NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1); /* dbname expands conninfo */
    PGresult *r = NULL;
    int late = 0;
    if (PQstatus(c) == CONNECTION_OK)
        r = exec_by(c, "SET statement_timeout = '" STORE_STATEMENT_TIMEOUT "'", 0, NULL,
                    clock_now_us() + (int64_t)STORE_DEADLINE_MS * 1000, &late);
    if (r && PQresultStatus(r) == PGRES_COMMAND_OK) {
        PQclear(r);
        st->conn = c;
        st->retry_us = 0;
        return c;
    }
    PQclear(r);
    if (late)
        snprintf(st->why, sizeof(st->why), "no answer within %d ms", STORE_DEADLINE_MS);
    else
        apg_line(PQerrorMessage(c), st->why, sizeof(st->why));
    PQfinish(c);
    st->retry_us = clock_now_us() + (int64_t)STORE_BACKOFF_MS * 1000;
    snprintf(err, errlen, "%s", st->why);
    return NULL;
}

/* The rows of sql with params (the caller clears them), or NULL with why in
 * err. A connection found broken by the query (the database restarted) is made
 * again and the query sent once more; one that did not answer by
 * STORE_DEADLINE_MS is dropped, and none is tried for STORE_BACKOFF_MS. Takes
 * st->mu. */
static PGresult *store_query(struct svc_store *st, const char *sql, int nparams,
                             const char *const *params, char *err, size_t errlen)
{
    PGresult *rows = NULL;
    pthread_mutex_lock(&st->mu);
    for (int tries = 0; tries < 2 && !rows; tries++) {
        PGconn *c = store_conn(st, err, errlen);
        if (!c)
            break;
        int late;
        PGresult *r = exec_by(c, sql, nparams, params,
                              clock_now_us() + (int64_t)STORE_DEADLINE_MS * 1000, &late);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            rows = r;
            break;
        }
        if (late) { /* stalled: not waited for again before the back-off */
            snprintf(st->why, sizeof(st->why), "no answer within %d ms",
                     STORE_DEADLINE_MS);
            snprintf(err, errlen, "%s", st->why);
            PQfinish(c);
            st->conn = NULL;
            st->retry_us = clock_now_us() + (int64_t)STORE_BACKOFF_MS * 1000;
            break;
        }
        if (r)
            apg_result_error(r, err, errlen);
        else
            apg_line(PQerrorMessage(c), err, errlen);
        PQclear(r);
        if (PQstatus(c) == CONNECTION_OK)
            break;
    }
    pthread_mutex_unlock(&st->mu);
    return rows;
}

int svc_store_counts(struct svc_store *st, const char *sku, const char *generation,
                     long long orders[INV_NSTATES], long long units[INV_NSTATES],
                     struct store_stock *stock, char *err, size_t errlen)
{
    memset(orders, 0, sizeof(long long) * INV_NSTATES);
    memset(units, 0, sizeof(long long) * INV_NSTATES);
    struct store_stock none;
    if (!stock)
        stock = &none;
    memset(stock, 0, sizeof(*stock));
    const char *params[] = {sku, generation};
    /* the changes' row has no state (NULL): count, added, withdrawn */
    PGresult *r = store_query(st,
                              "SELECT state, count(*), coalesce(sum(qty), 0), 0 FROM "
                              "seckill_orders WHERE sku = $1 AND generation = $2 "
                              "GROUP BY state UNION ALL SELECT NULL, count(*), "
                              "coalesce(sum(added), 0), coalesce(sum(withdrawn), 0) "
                              "FROM seckill_stock_events WHERE sku = $1 AND "
                              "generation = $2",
                              2, params, err, errlen);
    for (int i = 0; r && i < PQntuples(r); i++) {
        if (PQgetisnull(r, i, 0)) {
            stock->changes = strtoll(PQgetvalue(r, i, 1), NULL, 10);
            stock->added = strtoll(PQgetvalue(r, i, 2), NULL, 10);
            stock->withdrawn = strtoll(PQgetvalue(r, i, 3), NULL, 10);
            continue;
        }
        inv_state s = inv_state_parse(PQgetvalue(r, i, 0));
        orders[s] += strtoll(PQgetvalue(r, i, 1), NULL, 10);
        units[s] += strtoll(PQgetvalue(r, i, 2), NULL, 10);
    }
    int rc = r ? 0 : -1;
    PQclear(r);
    return rc;
}

/* The row's column i as text; NULL when it is NULL. */
static const char *column(const PGresult *r, int i)
{
    return PQgetisnull(r, 0, i) ? NULL : PQgetvalue(r, 0, i);
}

store_status svc_store_order(struct svc_store *st, uint64_t id, struct inv_order *out,
                             char *err, size_t errlen)
{
    if (id > INT64_MAX)
        return STORE_NOT_FOUND; /* beyond bigint: never stored */
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, id);
    const char *params[] = {text};
    /* pay_by went in as milliseconds / 1000.0 (SINK_APPLY_SQL): back exact */
    PGresult *r = store_query(st,
                              "SELECT sku, user_id, qty, segment, segments, state, "
                              "round(extract(epoch FROM pay_by) * 1000)::bigint, "
                              "payment_id, "
                              "round(extract(epoch FROM changed_at) * 1000)::bigint "
                              "FROM seckill_orders WHERE order_id = $1",
                              1, params, err, errlen);
    store_status rc = !r                  ? STORE_UNAVAILABLE
                      : PQntuples(r) == 0 ? STORE_NOT_FOUND
                                          : STORE_FOUND;
    if (rc == STORE_FOUND) {
        const char *seg = column(r, 3), *by = column(r, 6);
        inv_order_fill(out, id, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1),
                       atoi(PQgetvalue(r, 0, 2)), seg ? atoi(seg) : -1, column(r, 4),
                       PQgetvalue(r, 0, 5), by ? strtoll(by, NULL, 10) : 0);
        /* a paid row changed last when it was paid: changed_at is paid_at (the
         * event's t, SINK_APPLY_SQL) */
        const char *payment = column(r, 7), *changed = column(r, 8);
        if (payment)
            snprintf(out->payment_id, sizeof(out->payment_id), "%s", payment);
        if (out->state == INV_STATE_PAID && changed)
            out->paid_at_ms = strtoll(changed, NULL, 10);
    }
    PQclear(r);
    return rc;
}
