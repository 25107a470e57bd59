/* libFuzzer target: everything a client controls before Redis is touched —
 * order, SKU, pay and cancel bodies, the Idempotency-Key, order ids and
 * request paths.
 * Build and run: make fuzz (FUZZ_SECONDS=N). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "routes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char detail[256];
    struct req_order order;
    if (req_parse_order((const char *)data, size, &order, detail, sizeof(detail)) ==
        REQ_OK) {
        /* what was accepted must satisfy the contract */
        if (!inv_id_valid(order.user_id) || order.qty < 1 || order.qty > INV_MAX_LIMIT)
            abort();
    }
    struct req_sku sku;
    if (req_parse_sku((const char *)data, size, 16, &sku, detail, sizeof(detail)) ==
        REQ_OK) {
        if (sku.stock < 0 || sku.stock > INV_MAX_STOCK || sku.segments < 1 ||
            sku.segments > INV_MAX_SEGMENTS || sku.limit < 1 || sku.pay_ms < 0 ||
            sku.pay_ms > INV_MAX_PAY_WITHIN_MS || sku.starts_ms < 0 || sku.ends_ms < 0 ||
            (sku.starts_ms && sku.ends_ms && sku.starts_ms >= sku.ends_ms))
            abort();
    }
    char user[INV_ID_MAX + 1], payment[INV_IDEM_MAX + 1];
    if (req_parse_cancel((const char *)data, size, user, sizeof(user), detail,
                         sizeof(detail)) == REQ_OK &&
        !inv_id_valid(user))
        abort();
    if (req_parse_pay((const char *)data, size, payment, sizeof(payment), detail,
                      sizeof(detail)) == REQ_OK &&
        payment[0] && !req_idem_key_valid(payment))
        abort();
    /* the same bytes as a NUL-terminated header value and as a path */
    char text[600];
    size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    req_idem_key_valid(text);
    uint64_t id;
    req_order_id_parse(text, &id);
    const char *params[SVC_MAX_PARAMS];
    int known;
    struct svc_route *r = svc_route_find("POST", text, params, &known);
    if (r && r->pattern[0] != '/')
        abort();
    char allow[64];
    memcpy(text, data, n);
    text[n] = '\0';
    svc_route_allowed(text, allow, sizeof(allow));
    return 0;
}
