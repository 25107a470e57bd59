#include "routes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "answers.h"
#include "log.h"
#include "metrics.h"
#include "request.h"
#include "rfc3339.h"
#include "room_routes.h"
#include "text.h"

/* True when the route may run: no token configured, or the Authorization
 * header is "Bearer <token>", the scheme in any case and followed by one or
 * more spaces (RFC 7235). The scheme is no secret; the token is compared in
 * time that depends on the configured token's length only, never on where
 * the header first differs. */
static int token_allowed(const struct svc_request *req, const char *token)
{
    if (!token[0])
        return 1;
    const char *got = req->authorization ? req->authorization : "";
    const char *cred = "";
    if (strncasecmp(got, "Bearer ", 7) == 0)
        for (cred = got + 7; *cred == ' ';)
            cred++;
    size_t wn = strlen(token), gn = strlen(cred);
    unsigned char diff = (unsigned char)(gn != wn);
    for (size_t i = 0; i < wn; i++)
        diff |= (unsigned char)token[i] ^ (unsigned char)(i < gn ? cred[i] : 0);
    return diff == 0;
}

/* Sets j's "room" to a SKU's waiting room, when it has one. */
static void room_set(json_t *j, const struct inv_room_spec *room)
{
    if (room->rate_per_s > 0)
        json_object_set_new(j, "room",
                            json_pack("{s:I, s:I, s:I}", "rate_per_s",
                                      (json_int_t)room->rate_per_s, "max_active",
                                      (json_int_t)room->max_active, "pass_ttl_ms",
                                      (json_int_t)room->pass_ttl_ms));
}

static json_t *order_json(const struct inv_order *o)
{
    char id[24];
    snprintf(id, sizeof(id), "%" PRIu64, o->id);
    json_t *j = json_pack("{s:s, s:s, s:s, s:i}", "order_id", id, "sku", o->sku,
                          "user_id", o->user_id, "qty", o->qty);
    if (o->segment >= 0) /* else a row stored before schema 3: not known */
        json_object_set_new(j, "segment", json_integer(o->segment));
    json_object_set_new(j, "state", json_string(inv_state_name(o->state)));
    svc_time_set(j, "pay_by", o->pay_by_ms);
    if (o->state == INV_STATE_PAID) { /* null: paid by a pay that named none */
        json_object_set_new(j, "payment_id",
                            o->payment_id[0] ? json_string(o->payment_id) : json_null());
        svc_time_set(j, "paid_at", o->paid_at_ms);
    }
    if (o->nparts > 1) { /* served from several segments */
        json_t *parts = json_array();
        for (int i = 0; i < o->nparts; i++)
            json_array_append_new(parts,
                                  json_pack("{s:i, s:i}", "index", o->parts[i].segment,
                                            "qty", o->parts[i].qty));
        json_object_set_new(j, "segments", parts);
    }
    return j;
}

/* Appends s at p; returns the end. */
static char *put(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

/* order_json's text, written straight for the answer every order gets (one
 * segment): the same bytes json_dumps writes, without building the object
 * (an instance's jansson and printf were 8 % of its CPU under S1). Its
 * strings are ids of [A-Za-z0-9_.:-] (inv_id_valid): nothing to escape.
 * NULL for what it does not cover (several segments, an id that would need
 * escaping, a paid order's payment, no memory): order_json then. */
static char *order_text(const struct inv_order *o)
{
    if (o->nparts > 1 || o->qty < 0 || o->segment < 0 || !inv_id_valid(o->sku) ||
        !inv_id_valid(o->user_id) || o->state == INV_STATE_PAID)
        return NULL;
    char pay_by[RFC3339_MAX] = "";
    if (o->pay_by_ms > 0 && rfc3339_format(o->pay_by_ms, pay_by, sizeof(pay_by)) <= 0)
        return NULL;
    char *buf = malloc(256 + strlen(o->sku) + strlen(o->user_id));
    if (!buf)
        return NULL;
    char *p = put(buf, "{\"order_id\":\"");
    p = text_put_u64(p, o->id);
    p = put(put(put(p, "\",\"sku\":\""), o->sku), "\",\"user_id\":\"");
    p = put(put(p, o->user_id), "\",\"qty\":");
    p = text_put_u64(p, (uint64_t)o->qty);
    p = put(p, ",\"segment\":");
    p = text_put_u64(p, (uint64_t)o->segment);
    p = put(put(put(p, ",\"state\":\""), inv_state_name(o->state)), "\"");
    if (pay_by[0])
        p = put(put(put(p, ",\"pay_by\":\""), pay_by), "\"");
    *put(p, "}") = '\0';
    return buf;
}

static void h_sku_put(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    int reset = 0;
    if (req->reset && strcmp(req->reset, "true") != 0 &&
        strcmp(req->reset, "false") != 0) {
        svc_error(res, 400, "bad_request", "reset must be true or false");
        return;
    }
    if (req->reset)
        reset = strcmp(req->reset, "true") == 0;
    struct req_sku body;
    char detail[200];
    if (req_parse_sku(req->body, req->body_len, req->app->cfg->segments, &body, detail,
                      sizeof(detail)) != REQ_OK) {
        svc_error(res, 400, "bad_request", detail);
        return;
    }
    if (body.room.rate_per_s > 0 && req->app->cluster) {
        svc_error(
            res, 400, "bad_request",
            "room: a waiting room needs one Redis; on a Redis Cluster nothing paces "
            "it yet (docs/operations.md, Waiting rooms)");
        return;
    }
    struct inv_sku_spec spec = {.stock = body.stock,
                                .segments = body.segments,
                                .limit = body.limit,
                                .starts_ms = body.starts_ms,
                                .ends_ms = body.ends_ms,
                                .pay_ms = body.pay_ms,
                                .reset = reset,
                                .room = body.room};
    inv_status st = inv_sku_set(req->worker->inv, req->params[0], &spec);
    if (st != INV_OK && st != INV_CREATED) {
        svc_inv_error(res, st);
        return;
    }
    svc_metrics_sku_seen(req->params[0]);
    inv_rooms_note(req->app->rooms, req->params[0], &body.room); /* known here at once */
    log_event(LOG_INFO, "sku_reset",
              "sku=%s stock=%lld segments=%d limit=%d starts_ms=%lld ends_ms=%lld "
              "pay_ms=%lld room_rate=%lld room_max=%lld room_ttl_ms=%lld created=%d",
              req->params[0], body.stock, body.segments, body.limit, body.starts_ms,
              body.ends_ms, body.pay_ms, body.room.rate_per_s, body.room.max_active,
              body.room.pass_ttl_ms, st == INV_CREATED);
    res->status = st == INV_CREATED ? 201 : 200;
    res->json =
        json_pack("{s:s, s:I, s:i, s:i, s:i}", "sku", req->params[0], "stock",
                  (json_int_t)body.stock, "segments", body.segments, "per_user_limit",
                  body.limit, "pay_within_ms", (json_int_t)body.pay_ms);
    svc_time_set(res->json, "starts_at", body.starts_ms);
    svc_time_set(res->json, "ends_at", body.ends_ms);
    room_set(res->json, &body.room);
}

/* The RFC 3339 form of ms, or null when ms is no time (0). */
static json_t *time_or_null(long long ms)
{
    char text[RFC3339_MAX];
    if (ms > 0 && rfc3339_format(ms, text, sizeof(text)) > 0)
        return json_string(text);
    return json_null();
}

/* GET /skus (admin): a page of the SKUs (inv_sku_list), each with its state
 * as GET /skus/{sku} reads it; one retired meanwhile is left out. */
static void h_sku_list(const struct svc_request *req, struct svc_response *res)
{
    long limit = 100;
    if (req->limit) {
        char *end;
        limit = strtol(req->limit, &end, 10);
        if (!req->limit[0] || *end || limit < 1 || limit > 1000) {
            svc_error(res, 400, "bad_request", "limit must be an integer in 1..1000");
            return;
        }
    }
    char(*names)[INV_ID_MAX + 1];
    char next[48];
    int n;
    inv_status st = inv_sku_list(req->worker->inv, req->cursor, (int)limit, &names, &n,
                                 next, sizeof(next));
    if (st == INV_BAD_CURSOR) {
        svc_error(res, 400, "bad_request", "cursor must be the next of an earlier page");
        return;
    }
    if (st != INV_OK) {
        svc_inv_error(res, st);
        return;
    }
    static _Thread_local struct inv_sku_report report; /* 24 KiB: not on the stack */
    json_t *skus = json_array();
    for (int i = 0; i < n && st == INV_OK; i++) {
        inv_status one = inv_sku_get(req->worker->inv, names[i], &report);
        if (one == INV_NOT_FOUND) /* retired since the walk saw it */
            continue;
        if (one != INV_OK) {
            st = one;
            break;
        }
        json_t *sku =
            json_pack("{s:s, s:I, s:I, s:I, s:b}", "sku", names[i], "remaining",
                      (json_int_t)report.remaining, "sold", (json_int_t)report.sold,
                      "pending", (json_int_t)report.pending, "paused", report.paused);
        json_object_set_new(sku, "starts_at", time_or_null(report.starts_ms));
        json_object_set_new(sku, "ends_at", time_or_null(report.ends_ms));
        json_array_append_new(skus, sku);
    }
    free(names);
    if (st != INV_OK) {
        json_decref(skus);
        svc_inv_error(res, st);
        return;
    }
    res->status = 200;
    res->json = json_pack("{s:o, s:o}", "skus", skus, "next",
                          next[0] ? json_string(next) : json_null());
}

/* DELETE /skus/{sku}: the SKU retired (inv_sku_retire), 204 with no body. */
static void h_sku_delete(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    inv_status st = inv_sku_retire(req->worker->inv, req->params[0]);
    if (st != INV_OK) {
        svc_inv_error(res, st);
        return;
    }
    log_event(LOG_INFO, "sku_retired", "sku=%s", req->params[0]);
    res->status = 204;
    res->text = strdup("");
}

void svc_sku_get(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    static _Thread_local struct inv_sku_report report; /* 24 KiB: not on the stack */
    inv_status st = inv_sku_get(req->worker->inv, req->params[0], &report);
    if (st != INV_OK) {
        svc_inv_error(res, st);
        return;
    }
    svc_metrics_sku_seen(req->params[0]);
    json_t *segs = json_array();
    for (int i = 0; i < report.nsegments; i++) {
        const struct inv_segment_report *s = &report.segments[i];
        json_array_append_new(segs, json_pack("{s:i, s:I, s:I, s:I}", "index", i,
                                              "initial", (json_int_t)s->initial,
                                              "remaining", (json_int_t)s->remaining,
                                              "sold", (json_int_t)s->sold));
    }
    res->status = 200;
    res->json = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:o}", "sku", report.sku,
        "initial", (json_int_t)report.initial, "remaining", (json_int_t)report.remaining,
        "sold", (json_int_t)report.sold, "oversold", (json_int_t)report.oversold,
        "orders", (json_int_t)report.orders, "pending", (json_int_t)report.pending,
        "paid", (json_int_t)report.paid, "returned", (json_int_t)report.returned,
        "per_user_limit", report.limit, "pay_within_ms", (json_int_t)report.pay_ms,
        "segments", segs);
    json_object_set_new(res->json, "added_total", json_integer(report.added));
    json_object_set_new(res->json, "withdrawn_total", json_integer(report.withdrawn));
    json_object_set_new(res->json, "paused", json_boolean(report.paused));
    svc_time_set(res->json, "starts_at", report.starts_ms);
    svc_time_set(res->json, "ends_at", report.ends_ms);
    room_set(res->json, &report.room);
}

/* The answer to an order of sku that ended in st. */
static void order_answer(const char *sku, inv_status st, const struct inv_order *order,
                         struct svc_response *res)
{
    if (st != INV_NOT_FOUND && st != INV_UNAVAILABLE)
        svc_metrics_sku_seen(sku); /* the SKU exists */
    if (st == INV_OUTCOME_UNKNOWN) {
        char id[24];
        snprintf(id, sizeof(id), "%" PRIu64, order->id);
        svc_error(res, 503, "outcome_unknown",
                  "the order was sent to Redis but no answer came: it may exist; "
                  "GET /orders/{order_id} tells, and a retry with the same "
                  "Idempotency-Key is safe");
        json_object_set_new(res->json, "order_id", json_string(id));
        res->retry_after = 1;
        return;
    }
    if (st != INV_PLACED && st != INV_REPLAYED) {
        svc_inv_error(res, st);
        if (st == INV_NOT_STARTED) {
            svc_time_set(res->json, "starts_at", order->window.starts_ms);
            long long wait = order->window.wait_ms, day = 86400000;
            /* a day at most: a client comes back to learn more */
            res->retry_after =
                wait <= 0 ? 1 : (int)((wait < day ? wait : day) + 999) / 1000;
        }
        return;
    }
    res->status = 201;
    res->order_id = order->id;
    res->text = order_text(order);
    if (!res->text)
        res->json = order_json(order);
}

static void h_order_post(const struct svc_request *req, struct svc_response *res)
{
    char buyer[INV_ID_MAX + 1];
    if (!svc_sku_param_ok(req, res) || !svc_buyer_of(req, res, buyer))
        return;
    struct req_order body;
    char detail[200];
    if (req_parse_order(req->body, req->body_len, &body, detail, sizeof(detail)) !=
        REQ_OK) {
        svc_error(res, 400, "bad_request", detail);
        if (body.qty_range) /* the SKU's range, not INV_MAX_LIMIT's */
            res->again = svc_order_bad_qty;
        return;
    }
    if (!svc_buyer_is(buyer, body.user_id, res))
        return;
    if (req->idem_key && !req_idem_key_valid(req->idem_key)) {
        svc_error(res, 400, "bad_request",
                  "Idempotency-Key must be 1..128 characters of [A-Za-z0-9_.:-]");
        return;
    }
    if (!svc_pass_admits(req, body.user_id, res))
        return;
    struct inv_ticket *t = req->ticket;
    inv_status st = inv_ticket_open(req->app->inv, t, req->params[0], body.user_id,
                                    body.qty, req->idem_key);
    if (st == INV_PENDING)
        res->pending = 1; /* the batch answers: svc_order_finish */
    else
        order_answer(req->params[0], st, &t->order, res);
    if (st == INV_BAD_QTY)
        res->again = svc_order_bad_qty;
}

void svc_order_bad_qty(const struct svc_request *req, struct svc_response *res)
{
    static _Thread_local struct inv_sku_report report; /* 24 KiB: not on the stack */
    inv_status st = inv_sku_get(req->worker->inv, req->params[0], &report);
    if (st != INV_OK) {
        svc_inv_error(res, st == INV_NOT_FOUND ? st : INV_BAD_QTY);
        return;
    }
    char detail[120];
    snprintf(detail, sizeof(detail),
             "qty must be an integer in 1..%d (the SKU's per_user_limit)", report.limit);
    svc_error(res, 400, "bad_request", detail);
}

/* A script refused t for a malformed value in Redis: one warning (a few a
 * second at most) names the SKU and the key, for an operator to repair. */
static void malformed_log(const struct inv_ticket *t)
{
    static struct log_limit limit = LOG_LIMIT_INIT(10);
    uint64_t suppressed;
    if (!log_enabled(LOG_WARN) || !log_limit_take(&limit, &suppressed))
        return;
    char key[2 * INV_MALFORMED_MAX];
    log_event(LOG_WARN, "malformed_record", "sku=%s key=\"%s\" op=%s suppressed=%llu",
              t->order.sku[0] ? t->order.sku : t->sku,
              log_quote(key, sizeof(key), t->order.malformed),
              t->end == INV_END_PAY      ? "pay"
              : t->end == INV_END_CANCEL ? "cancel"
                                         : "order",
              (unsigned long long)suppressed);
}

/* svc_inv_error, and a pay refused because another payment paid the order
 * names that payment (the payment service refunds this one). */
static void paid_error(struct svc_response *res, inv_status st, inv_end end,
                       const struct inv_order *o)
{
    svc_inv_error(res, st);
    if (st == INV_PAID && end == INV_END_PAY)
        json_object_set_new(res->json, "payment_id",
                            o->payment_id[0] ? json_string(o->payment_id) : json_null());
}

void svc_order_finish(const struct svc_app *app, const struct inv_ticket *t,
                      struct svc_response *res)
{
    if (t->end == INV_END_JOIN) {
        svc_join_finish(app, t, res);
        return;
    }
    if (t->st == INV_MALFORMED)
        malformed_log(t);
    if (!t->end) {
        order_answer(t->sku, t->st, &t->order, res);
    } else if (t->st != INV_OK) {
        paid_error(res, t->st, t->end, &t->order);
    } else {
        res->status = 200;
        res->json = order_json(&t->order);
    }
}

/* Order id from the system of record into *o; STORE_UNAVAILABLE answered
 * (503) and logged. */
static store_status stored_order(const struct svc_request *req, uint64_t id,
                                 struct inv_order *o, struct svc_response *res)
{
    char err[256];
    store_status got = svc_store_order(req->app->store, id, o, err, sizeof(err));
    if (got == STORE_UNAVAILABLE) {
        char q[300];
        log_event(LOG_WARN, "order_store_unavailable", "order_id=%" PRIu64 " error=\"%s\"",
                  id, log_quote(q, sizeof(q), err));
        svc_error(res, 503, "unavailable",
                  "the order is not in Redis and PostgreSQL is unreachable: retry");
        res->retry_after = 1;
    }
    return got;
}

/* What pay.lua or cancel.lua (end) answers for an order of state st that is
 * not pending, by user (a cancel's) or payment (a pay's, "" for none):
 * INV_OK (paid before by this payment or a pay naming none, cancelled
 * before), else its refusal. A pending order has a record while it is
 * pending: one found only in the database was cleared by a reset. */
static inv_status settled_end(inv_end end, const struct inv_order *o, const char *user,
                              const char *payment)
{
    if (end == INV_END_CANCEL && strcmp(o->user_id, user) != 0)
        return INV_FORBIDDEN;
    switch (o->state) {
    case INV_STATE_PLACED:
        return INV_NOT_PENDING;
    case INV_STATE_PAID:
        if (end == INV_END_PAY)
            return !payment[0] || strcmp(payment, o->payment_id) == 0 ? INV_OK : INV_PAID;
        return INV_PAID;
    case INV_STATE_CANCELLED:
        return end == INV_END_CANCEL ? INV_OK : INV_CANCELLED;
    case INV_STATE_EXPIRED:
        return INV_EXPIRED;
    default:
        return INV_NOT_FOUND;
    }
}

void svc_order_stored(const struct svc_request *req, struct svc_response *res)
{
    const struct inv_ticket *t = req->ticket;
    struct inv_order o;
    store_status got = stored_order(req, t->order.id, &o, res);
    if (got == STORE_UNAVAILABLE)
        return;
    if (!t->end) { /* a replay: the first order, as it is now */
        int same = got == STORE_FOUND && strcmp(o.sku, t->sku) == 0;
        order_answer(t->sku, same ? INV_REPLAYED : INV_NOT_FOUND, &o, res);
        return;
    }
    inv_status st = got == STORE_FOUND ? settled_end(t->end, &o, t->user_id, t->idem_key)
                                       : INV_NOT_FOUND;
    if (st != INV_OK) {
        paid_error(res, st, t->end, &o);
        return;
    }
    res->status = 200;
    res->json = order_json(&o);
}

/* The order id of the path; false (answered 400) when malformed. */
static int order_param(const struct svc_request *req, struct svc_response *res,
                       uint64_t *id)
{
    if (req_order_id_parse(req->params[0], id) == REQ_OK)
        return 1;
    svc_error(res, 400, "bad_request", "order id must be a decimal number");
    return 0;
}

static void h_order_get(const struct svc_request *req, struct svc_response *res)
{
    uint64_t id;
    char buyer[INV_ID_MAX + 1] = "";
    const struct svc_config *cfg = req->app->cfg;
    /* with buyer tokens: the buyer's own orders only, or any with the admin token */
    int admin =
        cfg->admin_token[0] && req->authorization && token_allowed(req, cfg->admin_token);
    if (!order_param(req, res, &id) || (!admin && !svc_buyer_of(req, res, buyer)))
        return;
    struct inv_order order;
    inv_status st = inv_order_get(req->worker->inv, id, &order);
    if (st == INV_NOT_FOUND && req->app->store) {
        /* its record gone (--order-retention, its SKU retired): the database */
        store_status got = stored_order(req, id, &order, res);
        if (got == STORE_UNAVAILABLE)
            return;
        st = got == STORE_FOUND ? INV_OK : INV_NOT_FOUND;
    }
    if (st == INV_OK && buyer[0] && strcmp(order.user_id, buyer) != 0)
        st = INV_NOT_FOUND; /* another buyer's: nothing of it told */
    if (st != INV_OK) {
        svc_inv_error(res, st);
        return;
    }
    res->status = 200;
    res->json = order_json(&order);
}

/* A pay or a cancel of the path's order: its body read by parse (into arg,
 * arg_len bytes), then handed to the loop's engine as a ticket (inv_end_open),
 * answered with the order once done (svc_order_finish). */
static void order_end(const struct svc_request *req, struct svc_response *res,
                      req_status (*parse)(const char *, size_t, char *, size_t, char *,
                                          size_t),
                      inv_end end)
{
    uint64_t id;
    char arg[INV_IDEM_MAX + 1], detail[200], buyer[INV_ID_MAX + 1] = "";
    if (!order_param(req, res, &id) ||
        (end == INV_END_CANCEL && !svc_buyer_of(req, res, buyer)))
        return;
    if (parse(req->body, req->body_len, arg, sizeof(arg), detail, sizeof(detail)) !=
        REQ_OK) {
        svc_error(res, 400, "bad_request", detail);
        return;
    }
    if (end == INV_END_CANCEL && !svc_buyer_is(buyer, arg, res))
        return;
    inv_end_open(req->ticket, end, id, arg);
    res->pending = 1;
}

static void h_order_pay(const struct svc_request *req, struct svc_response *res)
{
    order_end(req, res, req_parse_pay, INV_END_PAY);
}

static void h_order_cancel(const struct svc_request *req, struct svc_response *res)
{
    order_end(req, res, req_parse_cancel, INV_END_CANCEL);
}

/* The audit's store block (--postgres): the SKU's orders and units by state
 * in PostgreSQL against the records in Redis (a), the merchants' changes
 * there (units added and withdrawn) against meta's, the stock left by
 * PostgreSQL's books (initial + added - withdrawn - the units placed,
 * pending and paid) against the segments', the events not yet there, and
 * whether the two agree. The database unreadable: its orders, by_state and
 * the changes' figures null, matches false, and why. */
static json_t *audit_store(struct svc_store *db, const struct inv_audit *a)
{
    long long orders[INV_NSTATES], units[INV_NSTATES];
    struct store_stock stock;
    char err[256] = "";
    int ok = svc_store_counts(db, a->sku, a->generation, orders, units, &stock, err,
                              sizeof(err)) == 0;
    json_t *store = json_pack("{s:I}", "lag_events", (json_int_t)a->outbox_lag);
    if (!ok) {
        json_object_set_new(store, "orders", json_null());
        json_object_set_new(store, "by_state", json_null());
        const char *unread[] = {"changes", "added", "withdrawn", "remaining"};
        for (size_t i = 0; i < sizeof(unread) / sizeof(unread[0]); i++)
            json_object_set_new(store, unread[i], json_null());
        json_object_set_new(store, "matches", json_false());
        json_object_set_new(store, "error", json_string(err));
        return store;
    }
    json_t *by = json_object();
    long long total = 0;
    int matches = 1;
    for (int st = 0; st < INV_NSTATES; st++) {
        json_object_set_new(by, inv_state_name((inv_state)st),
                            json_pack("{s:I, s:I}", "orders", (json_int_t)orders[st],
                                      "units", (json_int_t)units[st]));
        total += orders[st];
        matches &= orders[st] == a->state_orders[st] && units[st] == a->state_units[st];
    }
    /* invariant 11 by the database's books: what is not sold nor held is left */
    long long left = a->initial + stock.added - stock.withdrawn -
                     units[INV_STATE_PLACED] - units[INV_STATE_PENDING] -
                     units[INV_STATE_PAID];
    matches &= stock.added == a->added && stock.withdrawn == a->withdrawn &&
               left == a->remaining;
    json_object_set_new(store, "orders", json_integer(total));
    json_object_set_new(store, "by_state", by);
    json_object_set_new(store, "changes", json_integer(stock.changes));
    json_object_set_new(store, "added", json_integer(stock.added));
    json_object_set_new(store, "withdrawn", json_integer(stock.withdrawn));
    json_object_set_new(store, "remaining", json_integer(left));
    json_object_set_new(store, "matches", json_boolean(matches && a->generation[0]));
    return store;
}

static void h_audit(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    struct inv_audit a;
    inv_status st = inv_audit(req->worker->inv, req->params[0], &a);
    if (st != INV_OK) {
        svc_inv_error(res, st);
        return;
    }
    res->status = 200;
    res->json = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
        "s:b}",
        "sku", a.sku, "initial", (json_int_t)a.initial, "orders", (json_int_t)a.orders,
        "sold", (json_int_t)a.sold, "remaining", (json_int_t)a.remaining, "oversold",
        (json_int_t)a.oversold, "limit_breaches", (json_int_t)a.limit_breaches,
        "duplicate_order_ids", (json_int_t)a.duplicate_order_ids, "pending",
        (json_int_t)a.pending, "paid", (json_int_t)a.paid, "cancelled",
        (json_int_t)a.cancelled, "expired", (json_int_t)a.expired, "returned",
        (json_int_t)a.returned, "state_conflicts", (json_int_t)a.state_conflicts,
        "returned_twice", (json_int_t)a.returned_twice, "consistent", a.consistent);
    json_object_set_new(res->json, "added", json_integer(a.added));
    json_object_set_new(res->json, "withdrawn", json_integer(a.withdrawn));
    if (req->app->store)
        json_object_set_new(res->json, "store", audit_store(req->app->store, &a));
}

static void h_livez(const struct svc_request *req, struct svc_response *res)
{
    (void)req;
    res->status = 200;
    res->json = json_pack("{s:s}", "status", "live");
}

static void h_readyz(const struct svc_request *req, struct svc_response *res)
{
    struct svc_app *app = req->app;
    char why[200];
    if (atomic_load(&app->draining)) {
        svc_error(res, 503, "unavailable", "draining");
    } else if (app->lease && !orderid_lease_valid(app->lease)) {
        svc_error(res, 503, "unavailable", "order-id worker lease not held");
    } else if (!svc_health_ok(app->health)) {
        svc_error(res, 503, "unavailable", "Redis is unreachable");
    } else if (app->rooms && !inv_rooms_ready(app->rooms)) {
        svc_error(res, 503, "unavailable",
                  "the waiting rooms were not read from Redis yet");
    } else if (svc_durability_refused(app->durability, why, sizeof(why))) {
        svc_error(res, 503, "unavailable", why);
    } else {
        /* Ready; a data Redis that can lose acknowledged orders in a crash is
         * allowed (a site may accept it: a staging shop, a sale that can
         * be replayed), and the answer says so and why. */
        const char *loss = svc_durability_loss(app->durability);
        int durable = !loss || app->replicas_acked > 0;
        res->status = 200;
        res->json = json_pack("{s:s, s:b}", "status", "ready", "durable", durable);
        if (!durable) {
            char detail[400];
            snprintf(detail, sizeof(detail),
                     "%s (no AOF with appendfsync always and --min-replicas-acked 0); "
                     "allowed: served as asked, seckill_redis_durable is 0",
                     loss);
            json_object_set_new(res->json, "detail", json_string(detail));
        }
    }
}

/* They render the table itself (after it). */
static void h_stats(const struct svc_request *req, struct svc_response *res);
static void h_metrics(const struct svc_request *req, struct svc_response *res);

static struct svc_route routes[] = {
    {"GET", "/skus", "sku_list", h_sku_list, ROUTE_ADMIN | ROUTE_WAITS},
    {"PUT", "/skus/*", "sku_put", h_sku_put, ROUTE_ADMIN | ROUTE_WAITS},
    {"GET", "/skus/*", "sku_get", svc_sku_get, ROUTE_WAITS},
    {"PATCH", "/skus/*", "sku_patch", svc_sku_patch, ROUTE_ADMIN | ROUTE_WAITS},
    {"DELETE", "/skus/*", "sku_delete", h_sku_delete, ROUTE_ADMIN | ROUTE_WAITS},
    {"POST", "/skus/*/orders", "order_post", h_order_post, 0},
    {"POST", "/skus/*/queue", "queue_post", svc_queue_post, 0},
    {"GET", "/skus/*/queue/*", "queue_get", svc_queue_get, 0},
    {"GET", "/skus/*/room", "room_page", svc_room_get, 0},
    {"GET", "/skus/*/audit", "audit", h_audit, ROUTE_WAITS | ROUTE_SHARED},
    {"GET", "/orders/*", "order_get", h_order_get, ROUTE_WAITS},
    {"POST", "/orders/*/pay", "order_pay", h_order_pay, ROUTE_ADMIN | ROUTE_PAY},
    {"POST", "/orders/*/cancel", "order_cancel", h_order_cancel, 0},
    {"GET", "/stats", "stats", h_stats, 0},
    {"GET", "/metrics", "metrics", h_metrics, ROUTE_WAITS},
    {"GET", "/livez", "livez", h_livez, 0},
    {"GET", "/readyz", "readyz", h_readyz, 0},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

static struct svc_route unmatched = {"", "", "unmatched", NULL, 0};

struct svc_route *svc_route_unmatched(void)
{
    return &unmatched;
}

/* Lends the table to the renderers, read-only: views[0..NROUTES-1] are the
 * routes, views[NROUTES] the unmatched pseudo-route. */
static void route_views(struct svc_route_view views[NROUTES + 1])
{
    for (size_t i = 0; i <= NROUTES; i++) {
        const struct svc_route *r = i < NROUTES ? &routes[i] : &unmatched;
        views[i] = (struct svc_route_view){r->name, &r->counters};
    }
}

static void h_stats(const struct svc_request *req, struct svc_response *res)
{
    struct svc_route_view views[NROUTES + 1];
    route_views(views);
    res->status = 200;
    res->json = svc_stats_json(req->app, views, NROUTES);
}

static void h_metrics(const struct svc_request *req, struct svc_response *res)
{
    struct svc_route_view views[NROUTES + 1];
    route_views(views);
    res->status = 200;
    res->text = svc_metrics_text(req->app, req->worker->inv, views, NROUTES);
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* Matches path (already split into segs) against pattern. */
static int pattern_match(const char *pattern, char **segs, int nsegs,
                         const char *params[SVC_MAX_PARAMS])
{
    int i = 0, np = 0;
    const char *p = pattern;
    while (*p == '/') {
        p++;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (i >= nsegs)
            return 0;
        if (len == 1 && *p == '*') {
            if (np < SVC_MAX_PARAMS && params)
                params[np] = segs[i];
            np++;
        } else if (strlen(segs[i]) != len || strncmp(segs[i], p, len) != 0) {
            return 0;
        }
        i++;
        p += len;
    }
    return i == nsegs;
}

#define MAX_SEGS 8

/* Splits "/a/b/c" in place into {"a","b","c"}; -1 when not a clean path. */
static int split_path(char *path, char **segs)
{
    if (path[0] != '/')
        return -1;
    int n = 0;
    char *p = path + 1;
    while (*p) {
        if (n == MAX_SEGS)
            return -1;
        segs[n++] = p;
        char *slash = strchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
        p = slash + 1;
        if (!*p)
            return -1; /* a trailing slash names nothing */
    }
    for (int i = 0; i < n; i++)
        if (!segs[i][0])
            return -1;
    return n;
}

struct svc_route *svc_route_find(const char *method, char *path,
                                 const char *params[SVC_MAX_PARAMS], int *path_known)
{
    char *segs[MAX_SEGS];
    *path_known = 0;
    int n = split_path(path, segs);
    if (n < 0)
        return NULL;
    const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
    for (size_t i = 0; i < NROUTES; i++) {
        if (!pattern_match(routes[i].pattern, segs, n, params))
            continue;
        if (strcmp(routes[i].method, m) == 0)
            return &routes[i];
        *path_known = 1;
    }
    return NULL;
}

void svc_route_allowed(const char *path, char *buf, size_t len)
{
    char copy[512], *segs[MAX_SEGS];
    snprintf(copy, sizeof(copy), "%s", path);
    int n = split_path(copy, segs);
    buf[0] = '\0';
    for (size_t i = 0; n >= 0 && i < NROUTES; i++) {
        if (!pattern_match(routes[i].pattern, segs, n, NULL))
            continue;
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", used ? ", " : "", routes[i].method);
        if (strcmp(routes[i].method, "GET") == 0) {
            used = strlen(buf);
            snprintf(buf + used, len - used, ", HEAD");
        }
    }
}

void svc_route_count(struct svc_route *r, int status, int64_t duration_us)
{
    int c = 0;
    while (c < ROUTE_NCODES - 1 && route_codes[c] != status)
        c++;
    atomic_fetch_add_explicit(&r->counters.answers[c], 1, memory_order_relaxed);
    int b = 0;
    while (b < ROUTE_NBUCKETS - 1 && (double)duration_us / 1e6 > route_bucket_s[b])
        b++;
    atomic_fetch_add_explicit(&r->counters.duration_buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->counters.duration_sum_us, (uint64_t)duration_us,
                              memory_order_relaxed);
}

void svc_route_count_undelivered(struct svc_route *r, int status)
{
    int c = 0;
    while (c < ROUTE_NCODES - 1 && route_codes[c] != status)
        c++;
    atomic_fetch_add_explicit(&r->counters.undelivered[c], 1, memory_order_relaxed);
}

/* Runs the route's handler after the admin check. */
void svc_route_run(struct svc_route *r, const struct svc_request *req,
                   struct svc_response *res)
{
    const struct svc_config *cfg = req->app->cfg;
    const char *token =
        (r->flags & ROUTE_PAY) && cfg->pay_token[0] ? cfg->pay_token : cfg->admin_token;
    if ((r->flags & ROUTE_ADMIN) && !token_allowed(req, token)) {
        svc_error(res, 401, "unauthorized", "admin route: Authorization: Bearer <token>");
        return;
    }
    r->handler(req, res);
    if (!res->json && !res->text && !res->pending)
        svc_error(res, 503, "unavailable", "out of memory");
}
