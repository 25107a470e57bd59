/* routes: the route table and its handlers.
 *
 * A route is {method, path pattern, handler, flags} plus its own counters
 * (answers by status, a duration histogram), as Redis keeps call counters in
 * its command table; /stats and /metrics are rendered from the table, which
 * routes lends to metrics as read-only data (metrics.h). */
#ifndef SECKILL_ROUTES_H
#define SECKILL_ROUTES_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "app.h"
#include "metrics.h"

/* One thread's connections. */
struct svc_worker {
    struct rconn *rc;
    struct inv_session *inv;
};

#define SVC_MAX_PARAMS 2

struct svc_request {
    struct svc_app *app;
    struct svc_worker *worker;
    const char *method;
    const char *params[SVC_MAX_PARAMS]; /* the path's '*' segments */
    const char *body;
    size_t body_len;
    const char *idem_key;      /* Idempotency-Key header or NULL */
    const char *authorization; /* Authorization header or NULL */
    const char *reset;         /* the query's reset (PUT /skus/{sku}) or NULL */
    const char *cursor, *limit; /* the query's (GET /skus) or NULL */
    const char *buyer;          /* Seckill-Buyer header or NULL */
    const char *pass;           /* Seckill-Pass header (a waiting room's) or NULL */
    struct inv_ticket *ticket; /* where an order that waits for its batch lives */
};

struct svc_response {
    int status;
    json_t *json;             /* owned; serialised as the body */
    char *text;               /* owned (malloc); used instead of json when set */
    uint64_t order_id;        /* the order a text answer names (0: none, or see json's
                                 order_id), for the log of an answer never delivered */
    const char *content_type; /* default application/json */
    int retry_after;          /* seconds; 0 for none */
    int pending;              /* no answer yet: req->ticket goes to app->batcher, and
                                 svc_order_finish answers once it is done */
    /* Set: the request runs this on the main thread (waiters.c), which may
     * wait on Redis, and it answers; the answer here is for when it cannot
     * (the server going down). */
    void (*again)(const struct svc_request *req, struct svc_response *res);
};

typedef void (*svc_handler)(const struct svc_request *req, struct svc_response *res);

/* GET /skus/{sku}: the SKU's report (routes.c); PATCH answers with it too. */
void svc_sku_get(const struct svc_request *req, struct svc_response *res);
/* PATCH /skus/{sku} (admin): a merchant's change of a live sale (sku_patch.c). */
void svc_sku_patch(const struct svc_request *req, struct svc_response *res);

#define ROUTE_ADMIN 1
/* The handler waits on Redis: it runs on the main thread, never on an
 * event loop (waiters.c; the connection is suspended meanwhile). */
#define ROUTE_WAITS 2
/* With ROUTE_WAITS, for a costly read (the audit): requests for the same path
 * waiting together get one answer, computed after all of them arrived, and
 * they wait until the other waiting routes queued meanwhile are served. Not
 * for admin routes (the answer is shared whatever each request's token). */
#define ROUTE_SHARED 4
/* With ROUTE_ADMIN: with --pay-token, that token and not the admin token. */
#define ROUTE_PAY 8

struct svc_route {
    const char *method;
    const char *pattern; /* '/'-separated; a '*' segment matches one path segment */
    const char *name;    /* label in metrics */
    svc_handler handler;
    int flags;
    struct svc_route_counters counters;
};

/* Finds the route of method + path. Fills params with pointers into `path`,
 * which is modified (segments are NUL-terminated in place). Returns the route,
 * or NULL with *path_known set when the path exists under another method
 * (405) and clear when it does not exist (404). HEAD finds GET routes. */
struct svc_route *svc_route_find(const char *method, char *path,
                                 const char *params[SVC_MAX_PARAMS], int *path_known);
/* Methods allowed on a path that exists (for the Allow header). */
void svc_route_allowed(const char *path, char *buf, size_t len);

/* The pseudo-route counting requests that matched no route. */
struct svc_route *svc_route_unmatched(void);

/* Runs r's handler for req (refusing admin routes without the token). res is
 * always filled afterwards. */
void svc_route_run(struct svc_route *r, const struct svc_request *req,
                   struct svc_response *res);

/* Fills res with the answer of an order (or a pay, a cancel, a join) whose
 * ticket is done. */
void svc_order_finish(const struct svc_app *app, const struct inv_ticket *t,
                      struct svc_response *res);
/* The same for a ticket done INV_GONE (req->ticket: a pay's, a cancel's, a
 * replay's order without a record in Redis), from the order's row in the
 * system of record (req->app->store), as pay.lua, cancel.lua and a replay
 * answer a settled order: blocking, on the main thread (ROUTE_WAITS). */
void svc_order_stored(const struct svc_request *req, struct svc_response *res);
/* On the main thread, an order refused for its qty (INV_BAD_QTY, or an
 * integer the parse refused): 400 whose detail says the SKU's own range,
 * 1..its per_user_limit, read from Redis (404 for an unknown SKU). */
void svc_order_bad_qty(const struct svc_request *req, struct svc_response *res);

/* Counts an answer of route r. */
void svc_route_count(struct svc_route *r, int status, int64_t duration_us);

/* Counts an answer of r with status that could not be delivered: the
 * connection closed before it was written whole. */
void svc_route_count_undelivered(struct svc_route *r, int status);

#endif
