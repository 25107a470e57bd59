#include "answers.h"

#include <string.h>
#include <time.h>

#include "buyer.h"
#include "rfc3339.h"

void svc_error(struct svc_response *res, int status, const char *code, const char *detail)
{
    res->status = status;
    json_decref(res->json);
    res->json = json_pack("{s:s, s:s}", "error", code, "detail", detail);
}

/* Answers an inventory status that is not a success. */
void svc_inv_error(struct svc_response *res, inv_status st)
{
    switch (st) {
    case INV_NOT_FOUND:
    case INV_GONE: /* without --postgres: the records are all there is */
        svc_error(res, 404, "not_found", "no such SKU or order");
        break;
    case INV_SOLD_OUT:
        svc_error(res, 409, "sold_out", "no segment has enough stock left");
        break;
    case INV_LIMIT:
        svc_error(res, 409, "limit_reached",
                  "the user already bought the per-user limit");
        break;
    case INV_BAD_QTY: /* svc_order_bad_qty says the SKU's number */
        svc_error(res, 400, "bad_request",
                  "qty must be an integer from 1 to the SKU's per_user_limit");
        break;
    case INV_BUSY:
        svc_error(res, 503, "busy", "the segment is busy; nothing was placed, retry");
        res->retry_after = 1;
        break;
    case INV_IDEM_MISMATCH:
        svc_error(
            res, 422, "idempotency_mismatch",
            "this Idempotency-Key was used for another request; nothing was placed");
        break;
    case INV_NOT_STARTED: /* the caller adds starts_at and Retry-After */
        svc_error(res, 409, "not_started", "the sale has not started yet");
        break;
    case INV_SALE_ENDED:
        svc_error(res, 409, "sale_ended", "the sale has ended");
        break;
    case INV_BAD_WINDOW:
        svc_error(res, 400, "bad_request",
                  "ends_at must be after the sale's starts_at; nothing was changed");
        break;
    case INV_UNSUPPORTED:
        svc_error(
            res, 501, "not_implemented",
            "PATCH needs one Redis and a lock mode with a read-write lock (redis, zk, "
            "pg, local, none) or the atomic mode; nothing was changed");
        break;
    case INV_PAUSED:
        svc_error(res, 409, "paused", "the merchant paused the sale; nothing was placed");
        break;
    case INV_NOT_PENDING:
        svc_error(res, 409, "not_pending",
                  "the order is final: its SKU has no payment window");
        break;
    case INV_CANCELLED:
        svc_error(res, 409, "cancelled", "the order was cancelled");
        break;
    case INV_EXPIRED:
        svc_error(res, 409, "expired", "the order was not paid by its pay_by");
        break;
    case INV_PAID:
        svc_error(res, 409, "paid", "the order is paid");
        break;
    case INV_FORBIDDEN:
        svc_error(res, 403, "forbidden", "not this user's order");
        break;
    case INV_NOT_SETTLED:
        svc_error(res, 409, "not_settled",
                  "units are pending or on their way between shards, or events have not "
                  "reached PostgreSQL yet; retry once they are settled");
        break;
    case INV_EXISTS:
        svc_error(res, 409, "exists",
                  "the SKU has orders; PUT /skus/{sku}?reset=true clears them and "
                  "starts it anew, PATCH changes a live sale; nothing was changed");
        break;
    case INV_MALFORMED:
        svc_error(res, 503, "unavailable",
                  "a record this needs in Redis is malformed (the log names it); nothing "
                  "was written");
        res->retry_after = 1;
        break;
    case INV_NO_ROOM:
        svc_error(res, 404, "no_room", "this SKU has no waiting room: order it directly");
        break;
    case INV_OUTCOME_UNKNOWN: /* a pay or a cancel (an order's is order_answer's) */
        svc_error(res, 503, "outcome_unknown",
                  "the change was sent to Redis but its answer, or the replicas' "
                  "acknowledgement, never came: it may have been made; a retry is safe");
        res->retry_after = 1;
        break;
    default:
        svc_error(res, 503, "unavailable",
                  "Redis or the lock service is unreachable; nothing was placed");
        res->retry_after = 1;
        break;
    }
}

/* With --buyer-key-file, the buyer the request's Seckill-Buyer token names,
 * into user; false (answered 401) when it carries none valid. Without the
 * flag: true, user "" (user ids are trusted: the gateway authenticates). */
int svc_buyer_of(const struct svc_request *req, struct svc_response *res,
                 char user[INV_ID_MAX + 1])
{
    const struct svc_config *cfg = req->app->cfg;
    user[0] = '\0';
    if (!cfg->buyer_key.mac.len)
        return 1;
    switch (buyer_check(&cfg->buyer_key, req->buyer, (long long)time(NULL), user)) {
    case BUYER_OK:
        return 1;
    case BUYER_MISSING:
        svc_error(
            res, 401, "unauthorized",
            "a buyer's request needs Seckill-Buyer: <user_id>.<expiry>.<signature>");
        return 0;
    case BUYER_EXPIRED:
        svc_error(res, 401, "unauthorized", "the Seckill-Buyer token has expired");
        return 0;
    default:
        svc_error(res, 401, "unauthorized", "the Seckill-Buyer token is not valid");
        return 0;
    }
}

/* A body's user_id against the token's buyer (svc_buyer_of; "": none, any):
 * false, answered 403, when they differ. */
int svc_buyer_is(const char *buyer, const char *user_id, struct svc_response *res)
{
    if (!buyer[0] || strcmp(buyer, user_id) == 0)
        return 1;
    svc_error(res, 403, "forbidden", "user_id is not the Seckill-Buyer token's user");
    return 0;
}

int svc_sku_param_ok(const struct svc_request *req, struct svc_response *res)
{
    if (inv_id_valid(req->params[0]))
        return 1;
    svc_error(res, 400, "bad_request", "sku must be 1..64 characters of [A-Za-z0-9_.:-]");
    return 0;
}

/* Sets j's field name to the RFC 3339 form of ms, when ms is a time (> 0). */
void svc_time_set(json_t *j, const char *name, long long ms)
{
    char text[RFC3339_MAX];
    if (ms > 0 && rfc3339_format(ms, text, sizeof(text)) > 0)
        json_object_set_new(j, name, json_string(text));
}
