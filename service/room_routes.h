/* room_routes: the waiting room's routes (issue 48), which routes.c puts in
 * its table, and the pass check of an order, which its order route calls.
 * A join costs one Redis command (room_join.lua); a poll and a pass check
 * none: they read what this instance knows of the room (roompace.h) and
 * check signatures locally (roomtoken.h). Calls answers.c only. */
#ifndef SECKILL_ROOM_ROUTES_H
#define SECKILL_ROOM_ROUTES_H

#include "routes.h"

/* True when user may order the SKU of req (req->params[0]): this instance
 * runs no rooms, the SKU has no waiting room, or header Seckill-Pass holds a
 * valid pass for this user, SKU and the SKU's epoch. Else false, res is the
 * refusal (403 not_admitted, counted by reason in app->passes_refused; 503
 * while the rooms were never read). No Redis command. */
int svc_pass_admits(const struct svc_request *req, const char *user,
                    struct svc_response *res);

/* POST /skus/{sku}/queue: joins the room, or finds the user's place again:
 * one Redis command, on the loop's engine (res->pending, req->ticket a join:
 * room.h), pipelined with the loop's others; svc_join_finish answers. */
void svc_queue_post(const struct svc_request *req, struct svc_response *res);

/* The answer of join ticket j, done: 202 with its signed ticket and where
 * it stands, or the join's refusal. */
void svc_join_finish(const struct svc_app *app, const struct inv_ticket *j,
                     struct svc_response *res);

/* GET /skus/{sku}/queue/{ticket}: where the ticket stands, from memory. */
void svc_queue_get(const struct svc_request *req, struct svc_response *res);

/* GET /skus/{sku}/room: the buyer's page (room_page.h), for a SKU whose room
 * this instance knows; 404 no_room else. */
void svc_room_get(const struct svc_request *req, struct svc_response *res);

#endif
