#include "room_routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "answers.h"
#include "request.h"
#include "room.h"
#include "room_page.h"

#define POLL_MIN_MS 500
#define POLL_MAX_MS 2000
/* A waiting buyer polls again at most this long after the soonest moment the
 * SKU could sell out (soldout_soonest_ms): with the instances' delay in
 * learning it (a tick of 100 ms and the news read: ~140 ms measured) and the
 * poll's own time, every waiting buyer hears of a sell-out within a second. */
#define POLL_NEAR_MS 500

/* svc_pass_admits: room_routes.h. */
int svc_pass_admits(const struct svc_request *req, const char *user,
                    struct svc_response *res)
{
    struct svc_app *app = req->app;
    struct inv_room_view room;
    if (!app->rooms)
        return 1;
    if (!inv_rooms_ready(app->rooms)) {
        svc_error(res, 503, "unavailable",
                  "the waiting rooms were not read from Redis yet; retry");
        res->retry_after = 1;
        return 0;
    }
    if (!inv_rooms_view(app->rooms, req->params[0], -1, &room))
        return 1;
    room_pass_status st = room_pass_admits(app->room_key, req->pass, req->params[0], user,
                                           inv_rooms_now_ms(app->rooms), room.epoch);
    if (st == ROOM_PASS_OK)
        return 1;
    atomic_fetch_add_explicit(&app->passes_refused[st], 1, memory_order_relaxed);
    static const char *const why[ROOM_PASS_NSTATUS] = {
        "",
        "missing: this SKU has a waiting room; join it (POST /skus/{sku}/queue) and send "
        "the pass it gives in header Seckill-Pass",
        "forged: the Seckill-Pass header is not a pass of this service",
        "expired: the pass has expired",
        "another user's: the pass was given to another user",
        "another SKU's: the pass was given for another SKU",
        "reset: the SKU was reset since the pass was given (another queue); join again",
    };
    svc_error(res, 403, "not_admitted", why[st]);
    return 0;
}

/* The soonest the room v could be sold out, in ms from now (Redis's clock):
 * every unit left beyond the live passes must first be admitted, at most the
 * tokens banked at once and rate_per_s a second after (a unit that comes back
 * or a slower pace only makes it later), and none before the sale's start;
 * 0 while paused (a pending unit paid ends it) or once nothing is left to
 * admit (a pass holder's order may end it); -1 when the pacer does not
 * publish what is left (an older build). */
static long long soldout_soonest_ms(const struct inv_room_view *v, long long now)
{
    if (v->state == INV_ROOM_PAUSED)
        return 0;
    if (v->to_admit < 0 || v->tokens < 0 || v->spec.rate_per_s <= 0)
        return -1;
    if (v->state == INV_ROOM_BEFORE && v->starts_ms > now) {
        /* nothing sells before the start; then the second's burst banked by it */
        long long left = v->to_admit - v->spec.rate_per_s;
        return v->starts_ms - now + (left > 0 ? left * 1000 / v->spec.rate_per_s : 0);
    }
    long long left = v->to_admit - v->tokens - 1; /* o is the tokens' floor */
    if (left <= 0)
        return 0;
    long long ms = left * 1000 / v->spec.rate_per_s - (now - v->news_ms);
    return ms > 0 ? ms : 0;
}

/* The answer to a join or a poll of ticket t: {"state", "position", "eta_ms",
 * "poll_after_ms"}, and once admitted "pass" and "pass_expires_at"; from what
 * this instance knows of the room only. */
static void room_answer(const struct svc_app *app, const struct room_ticket *t,
                        int status, struct svc_response *res)
{
    struct inv_room_view v;
    if (!inv_rooms_view(app->rooms, t->sku, t->place, &v)) {
        if (status == 202) { /* Redis has the room; this instance learns it next tick */
            res->status = status;
            res->json = json_pack("{s:s, s:I, s:i, s:i}", "state", "waiting", "position",
                                  (json_int_t)(t->rank + 1), "eta_ms", 0, "poll_after_ms",
                                  POLL_MIN_MS);
        } else if (!inv_rooms_ready(app->rooms)) {
            svc_error(res, 503, "unavailable",
                      "the waiting rooms were not read from Redis yet; retry");
            res->retry_after = 1;
        } else {
            svc_inv_error(res, INV_NO_ROOM);
        }
        return;
    }
    long long now = inv_rooms_now_ms(app->rooms);
    const char *state = inv_room_state_name(v.state);
    long long position = 0, eta = 0, poll = 1000, expires = 0;
    if (v.epoch != 0 && v.epoch != t->epoch) {
        state = "expired"; /* the SKU was reset: another queue */
    } else if (v.abandoned) {
        state = "expired"; /* skipped: its owner had stopped polling */
    } else if (v.state == INV_ROOM_SOLD_OUT) {
        state = "sold_out";
    } else if (v.cursor >= 0 && t->place <= v.cursor) {
        expires = v.admitted_at_ms > 0 ? v.admitted_at_ms + v.spec.pass_ttl_ms : 0;
        state = expires > now ? "admitted" : "expired";
    } else {
        /* a pre-queue place's rank is drawn: its share of those drawn */
        long long rank =
            t->place < INV_ROOM_DRAWS && v.pre > 0
                ? (long long)((double)t->place / (double)INV_ROOM_DRAWS * (double)v.pre)
                : t->rank - v.skipped_before; /* those before it who left */
        position = rank - v.admitted + 1 > 1 ? rank - v.admitted + 1 : 1;
        inv_rooms_polled(app->rooms, t->sku, t->place); /* not abandoned */
        double rate = v.rate > 0 ? v.rate : (double)v.spec.rate_per_s;
        eta = (long long)((double)position * 1000.0 / rate);
        poll = eta / 2 < POLL_MIN_MS   ? POLL_MIN_MS
               : eta / 2 > POLL_MAX_MS ? POLL_MAX_MS
                                       : eta / 2;
        /* near a possible sell-out, sooner: the next poll comes at most
         * POLL_NEAR_MS after it */
        long long soonest = soldout_soonest_ms(&v, now);
        if (soonest >= 0 && soonest + POLL_NEAR_MS < poll)
            poll = soonest + POLL_NEAR_MS;
    }
    res->status = status;
    res->json = json_pack("{s:s, s:I, s:I, s:I}", "state", state, "position",
                          (json_int_t)position, "eta_ms", (json_int_t)eta,
                          "poll_after_ms", (json_int_t)poll);
    if (strcmp(state, "admitted") == 0) {
        struct room_pass p = {.epoch = t->epoch, .expires_ms = expires};
        char pass[ROOM_TOKEN_MAX + 1];
        snprintf(p.sku, sizeof(p.sku), "%s", t->sku);
        snprintf(p.user, sizeof(p.user), "%s", t->user);
        if (room_pass_sign(app->room_key, &p, pass, sizeof(pass)) > 0)
            json_object_set_new(res->json, "pass", json_string(pass));
        svc_time_set(res->json, "pass_expires_at", expires);
    }
}

/* A pre-queue draw: uniform in [0, INV_ROOM_DRAWS) (rejection sampling:
 * no value likelier than another). */
static long long room_draw(void)
{
    const uint64_t top = UINT64_MAX - UINT64_MAX % (uint64_t)INV_ROOM_DRAWS;
    uint64_t v;
    do {
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
            abort(); /* only on a broken kernel */
    } while (v >= top);
    return (long long)(v % (uint64_t)INV_ROOM_DRAWS);
}

/* POST /skus/{sku}/queue: the user joins the room, or finds its place
 * again: a join ticket for the loop's engine (svc_join_finish answers). */
void svc_queue_post(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    char user[INV_ID_MAX + 1], detail[200], buyer[INV_ID_MAX + 1];
    if (!svc_buyer_of(req, res, buyer))
        return;
    if (req_parse_join(req->body, req->body_len, user, sizeof(user), detail,
                       sizeof(detail)) != REQ_OK) {
        svc_error(res, 400, "bad_request", detail);
        return;
    }
    if (!svc_buyer_is(buyer, user, res)) /* with buyer tokens: the buyer's own place */
        return;
    inv_join_open(req->ticket, req->params[0], user, room_draw());
    res->pending = 1;
}

void svc_join_finish(const struct svc_app *app, const struct inv_ticket *j,
                     struct svc_response *res)
{
    if (j->st != INV_OK) {
        svc_inv_error(res, j->st);
        return;
    }
    struct room_ticket t = {
        .epoch = j->room.epoch, .place = j->room.place, .rank = j->room.rank};
    snprintf(t.sku, sizeof(t.sku), "%s", j->sku);
    snprintf(t.user, sizeof(t.user), "%s", j->user_id);
    char ticket[ROOM_TOKEN_MAX + 1];
    if (room_ticket_sign(app->room_key, &t, ticket, sizeof(ticket)) == 0) {
        svc_error(res, 503, "unavailable", "the ticket could not be signed");
        return;
    }
    room_answer(app, &t, 202, res);
    if (res->json && res->status == 202)
        json_object_set_new(res->json, "ticket", json_string(ticket));
}

/* GET /skus/{sku}/room: the buyer's page (room_page.h), for a SKU whose room
 * this instance knows. */
void svc_room_get(const struct svc_request *req, struct svc_response *res)
{
    struct inv_room_spec room;
    if (!svc_sku_param_ok(req, res))
        return;
    if (!inv_rooms_spec(req->app->rooms, req->params[0], &room)) {
        svc_inv_error(res, INV_NO_ROOM);
        return;
    }
    res->status = 200;
    res->text = strdup(svc_room_page);
    res->content_type = "text/html; charset=utf-8";
}

/* GET /skus/{sku}/queue/{ticket}: where the ticket stands, from memory. */
void svc_queue_get(const struct svc_request *req, struct svc_response *res)
{
    if (!svc_sku_param_ok(req, res))
        return;
    struct room_ticket t;
    if (room_ticket_check(req->app->room_key, req->params[1], &t) != 0 ||
        strcmp(t.sku, req->params[0]) != 0) {
        svc_error(res, 400, "bad_request",
                  "not a ticket of this SKU's waiting room (malformed, forged, signed "
                  "with another key, or another SKU's)");
        return;
    }
    room_answer(req->app, &t, 200, res);
}
