/* answers: what the route handlers share (routes.c, room_routes.c): error
 * answers, the buyer a request acts for, the SKU parameter's check, a time
 * field. Calls no other file of service/ (so that both callers may call it
 * without a ring); http.c and waiters.c answer their own errors with
 * svc_error. */
#ifndef SECKILL_ANSWERS_H
#define SECKILL_ANSWERS_H

#include <jansson.h>

#include "inventory.h"
#include "routes.h"

/* Fills res as an error answer {"error": code, "detail": detail}; a json
 * already in res is freed. */
void svc_error(struct svc_response *res, int status, const char *code,
               const char *detail);

/* Fills res with the answer of an inventory status that is not a success
 * (404 not_found, 409 sold_out, 503 unavailable with Retry-After, ...). */
void svc_inv_error(struct svc_response *res, inv_status st);

/* With --buyer-key-file, the buyer the request's Seckill-Buyer token names,
 * into user; false, res answered 401, when it carries none valid. Without
 * the flag: true, user "" (user ids are trusted: the gateway authenticates). */
int svc_buyer_of(const struct svc_request *req, struct svc_response *res,
                 char user[INV_ID_MAX + 1]);

/* A body's user_id against the token's buyer (svc_buyer_of; "": none, any):
 * false, res answered 403 forbidden, when they differ. */
int svc_buyer_is(const char *buyer, const char *user_id, struct svc_response *res);

/* True when the path's SKU (req->params[0]) is a valid id; else false, res
 * answered 400. */
int svc_sku_param_ok(const struct svc_request *req, struct svc_response *res);

/* Sets j's field name to the RFC 3339 form of ms, when ms is a time (> 0);
 * nothing else. */
void svc_time_set(json_t *j, const char *name, long long ms);

#endif
