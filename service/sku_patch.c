/* sku_patch.c: PATCH /skus/{sku} (admin), a merchant's change of a live
 * sale: the body parsed (req_parse_patch), the change made
 * (inv_sku_patch: one script, under the SKU's write lock in the lock-guarded
 * modes), and the SKU answered as GET /skus/{sku} reads it, with the units
 * withdrawn. Runs on a thread that may wait, as PUT does. */
#include <jansson.h>

#include "answers.h"
#include "log.h"
#include "request.h"
#include "routes.h"

void svc_sku_patch(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    struct inv_patch p;
    char detail[200];
    if (req_parse_patch(req->body, req->body_len, &p, detail, sizeof(detail)) != REQ_OK) {
        svc_error(res, 400, "bad_request", detail);
        return;
    }
    long long withdrawn = 0;
    inv_status st = inv_sku_patch(req->worker->inv, req->params[0], &p, &withdrawn);
    if (st != INV_OK) {
        svc_inv_error(res, st);
        return;
    }
    log_event(LOG_INFO, "sku_patched",
              "sku=%s add=%lld withdraw=%lld withdrawn=%lld paused=%d ends_ms=%lld",
              req->params[0], p.add, p.withdraw, withdrawn, p.paused, p.ends_ms);
    svc_sku_get(req, res);
    if (res->status == 200 && res->json)
        json_object_set_new(res->json, "withdrawn", json_integer(withdrawn));
}
