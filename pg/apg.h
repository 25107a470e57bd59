/* apg: one event loop's asynchronous connection to PostgreSQL.
 *
 * libpq's asynchronous API on a libevent base, in pipeline mode: queries
 * queued during one turn of the loop leave together, each with its own sync
 * point (its own implicit transaction: one query that fails takes no other
 * with it), and their results come back in order.
 *
 * The connection is made on demand and again after any failure, at most once
 * per APG_RETRY_MS: a query queued while it is down and not due for a retry
 * is refused at once. A query that gets no result within timeout_ms of the
 * last sign of life drops the connection: its callback, and those of every
 * query queued behind it, run with no result.
 *
 * A listener (apg_listen) stays connected: it connects again APG_RETRY_MS
 * after every loss and LISTENs anew, and its callback runs for every
 * notification, once per loss and once each time it LISTENs (nothing
 * notified in between is seen: the caller looks again).
 *
 * Thread safety: none. An apg belongs to the thread that runs its base. */
#ifndef SECKILL_APG_H
#define SECKILL_APG_H

#include <libpq-fe.h>
#include <stddef.h>

#define APG_RETRY_MS 100

struct event_base;
struct apg;

typedef enum { APG_OK = 0, APG_ERR = -1 } apg_status;

/* What became of a query. */
typedef enum {
    APG_RESULT = 0, /* r is the query's result (maybe an error: PQresultStatus);
                       an error reported at the commit, after the statement's
                       own result, is the result (never the success before it) */
    APG_NOT_SENT,   /* the connection was never up: the query did not run */
    APG_LOST,       /* the connection failed after the query could have left: it
                       may have run (and committed) */
} apg_outcome;

/* Called once per query, on the loop thread. r is valid during the call only
 * (apg clears it); NULL unless res is APG_RESULT. */
typedef void apg_cb(void *arg, apg_outcome res, PGresult *r);

/* A notification on a channel the connection LISTENs to (channel and payload
 * valid during the call); or, channel NULL, a change of the listening itself:
 * payload NULL, the listening connection was lost; payload "", it LISTENs
 * (again). Whatever was notified between the two is not seen: the caller
 * looks again. */
typedef void apg_notify_cb(void *arg, const char *channel, const char *payload);

/* A connection to the database conninfo names (a libpq connection string or
 * URI), attached to base; not yet connected. Never returns NULL. */
struct apg *apg_new(struct event_base *base, const char *conninfo, int timeout_ms);
/* Closes the connection: the callbacks of queries still owed a result run
 * first (APG_LOST or APG_NOT_SENT). NULL is a no-op. Not from inside one of
 * this connection's callbacks. */
void apg_free(struct apg *c);

/* Queues sql with nparams text parameters (NULL: SQL NULL). APG_OK: cb
 * will be called once; APG_ERR: refused (the connection is down and not due
 * for a retry, or libpq would not take the query), cb will not be called. */
apg_status apg_query(struct apg *c, apg_cb *cb, void *arg, const char *sql, int nparams,
                       const char *const *params);

/* Makes c a listener on channel (c new, nothing queued): it connects now and
 * stays connected (see above); cb runs for each notification and each loss.
 * Queries may still be queued on it. */
void apg_listen(struct apg *c, const char *channel, apg_notify_cb *cb, void *arg);

/* True when the connection is up (connected and not failed since); for a
 * listener: and LISTENing. */
int apg_up(const struct apg *c);
/* Queries queued and not answered yet. */
int apg_pending(const struct apg *c);
/* Why the connection last failed ("" if it never did). */
const char *apg_errstr(const struct apg *c);

/* The first line of libpq's message m into buf (len bytes), for logs: buf. */
const char *apg_line(const char *m, char *buf, size_t len);

/* The first line of a result's error message ("" for none), for logs. */
const char *apg_result_error(const PGresult *r, char *buf, size_t len);

#endif
