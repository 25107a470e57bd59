/* request: parsing and validation of what clients send. Pure functions: no
 * I/O, no state; the fuzz target drives them directly. */
#ifndef SECKILL_REQUEST_H
#define SECKILL_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "inventory.h"

#define REQ_BODY_MAX 4096 /* bytes; a larger body is 413 */

struct req_order {
    char user_id[INV_ID_MAX + 1];
    int qty;
    /* REQ_INVALID because qty is an integer outside 1..INV_MAX_LIMIT: the
     * SKU's per_user_limit says the range it may take (the caller reads it) */
    int qty_range;
};

struct req_sku {
    long long stock;
    int segments;
    int limit;
    long long starts_ms, ends_ms; /* the sale window (RFC 3339 in the body); 0: none */
    long long pay_ms;             /* pay_within_ms: 0, orders final at 201 */
    struct inv_room_spec room;    /* "room"; rate_per_s 0: none */
};

/* A request part parsed (REQ_OK), or not (REQ_INVALID: the caller's detail
 * buffer says why, for a 400). */
typedef enum { REQ_OK = 0, REQ_INVALID = -1 } req_status;

/* Parses an order body {"user_id": "...", "qty": N}. qty is optional (1) and
 * must be an integer >= 1 (its upper bound, the SKU's limit, is checked by the
 * inventory). REQ_INVALID with a human-readable reason in detail. */
req_status req_parse_order(const char *body, size_t len, struct req_order *out,
                           char *detail, size_t detail_len);

/* Parses a SKU body {"stock": N, "segments": K, "per_user_limit": L,
 * "pay_within_ms": P, "starts_at": T0, "ends_at": T1}: stock 0..INV_MAX_STOCK,
 * segments 1..1024 (default default_segments), limit 1..INV_MAX_LIMIT
 * (default 1), P 0..INV_MAX_PAY_WITHIN_MS (0, the default: orders final at
 * 201), T0 and T1 RFC 3339 date-times or null (none), T0 before T1, and
 * "room": {"rate_per_s": R, "max_active": A, "pass_ttl_ms": T} or null (none):
 * R 1..INV_ROOM_MAX_RATE (required), A 1..INV_ROOM_MAX_ACTIVE (default R),
 * T INV_ROOM_MIN_PASS_TTL_MS..INV_ROOM_MAX_PASS_TTL_MS (default 60000).
 * REQ_INVALID with detail. */
req_status req_parse_sku(const char *body, size_t len, int default_segments,
                         struct req_sku *out, char *detail, size_t detail_len);

/* Parses a PATCH body {"add": N, "withdraw": N, "paused": true/false,
 * "ends_at": T1} into *out (inventory.h's struct inv_patch): at least one
 * field, no other; add and withdraw 1..INV_MAX_STOCK, paused a boolean,
 * ends_at an RFC 3339 date-time (not null: a PATCH moves the end, never
 * removes it). REQ_INVALID with detail. */
req_status req_parse_patch(const char *body, size_t len, struct inv_patch *out,
                           char *detail, size_t detail_len);

/* Parses a cancel body {"user_id": "..."} (the buyer's, required) into
 * user_id (user_len >= INV_ID_MAX + 1). REQ_INVALID with detail. */
req_status req_parse_cancel(const char *body, size_t len, char *user_id, size_t user_len,
                            char *detail, size_t detail_len);

/* Parses a waiting room's join body {"user_id": "..."} (required), as a
 * cancel body. REQ_INVALID with detail. */
req_status req_parse_join(const char *body, size_t len, char *user_id, size_t user_len,
                          char *detail, size_t detail_len);

/* Parses a pay body, optional: empty, or {"payment_id": "..."} (optional,
 * 1..128 characters of [A-Za-z0-9_.:-]) into payment_id ("" for none;
 * id_len >= INV_IDEM_MAX + 1). REQ_INVALID with detail. */
req_status req_parse_pay(const char *body, size_t len, char *payment_id, size_t id_len,
                         char *detail, size_t detail_len);

/* An Idempotency-Key: 1..128 characters of [A-Za-z0-9_.:-]. */
int req_idem_key_valid(const char *key);

/* An order id in a path: a decimal uint64 without sign, spaces or leading
 * zeros: REQ_OK and *id set, or REQ_INVALID. */
req_status req_order_id_parse(const char *text, uint64_t *id);

#endif
