#include "request.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rfc3339.h"

/* Loads a JSON object; NULL with detail when the body is not one. */
static json_t *load_object(const char *body, size_t len, char *detail, size_t detail_len)
{
    if (len == 0) {
        snprintf(detail, detail_len, "empty body: a JSON object is required");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(detail, detail_len, "malformed JSON at position %d: %s", jerr.position,
                 jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        snprintf(detail, detail_len, "the body must be a JSON object");
        json_decref(root);
        return NULL;
    }
    return root;
}

/* The longest part of an unknown field's name that a detail repeats. */
#define REQ_FIELD_SHOWN 64

/* REQ_OK when every field of root is one of known (NULL-terminated), else
 * REQ_INVALID with detail naming the first other one, in the body's order: a
 * misspelt field ("qtty") must not pass for an absent one, which has a
 * default. */
static req_status fields_known(json_t *root, const char *const known[], char *detail,
                               size_t detail_len)
{
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value)
    {
        size_t i = 0;
        while (known[i] && strcmp(known[i], name) != 0)
            i++;
        if (known[i])
            continue;
        size_t used =
            (size_t)snprintf(detail, detail_len, "unknown field '%.*s'; the body takes",
                             REQ_FIELD_SHOWN, name);
        for (i = 0; known[i] && used < detail_len; i++)
            used += (size_t)snprintf(detail + used, detail_len - used, "%s %s",
                                     i ? "," : "", known[i]);
        return REQ_INVALID;
    }
    return REQ_OK;
}

/* An optional integer field in [min, max]; absent leaves *out as it is. */
static req_status int_field(json_t *root, const char *name, long long min, long long max,
                            long long *out, char *detail, size_t detail_len)
{
    json_t *v = json_object_get(root, name);
    if (!v)
        return REQ_OK;
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > max) {
        snprintf(detail, detail_len, "%s must be an integer in %lld..%lld", name, min,
                 max);
        return REQ_INVALID;
    }
    *out = json_integer_value(v);
    return REQ_OK;
}

/* The text of v when it is a JSON string, without a NUL inside, that valid
 * accepts; else NULL. */
static const char *valid_string(const json_t *v, int (*valid)(const char *))
{
    if (!v || !json_is_string(v) || json_string_length(v) != strlen(json_string_value(v)))
        return NULL;
    return valid(json_string_value(v)) ? json_string_value(v) : NULL;
}

req_status req_parse_order(const char *body, size_t len, struct req_order *out,
                           char *detail, size_t detail_len)
{
    out->qty_range = 0; /* read by the caller whatever the answer */
    json_t *root = load_object(body, len, detail, detail_len);
    if (!root)
        return REQ_INVALID;
    static const char *const known[] = {"user_id", "qty", NULL};
    req_status rc = REQ_INVALID;
    json_t *user = json_object_get(root, "user_id");
    long long qty = 1;
    if (fields_known(root, known, detail, detail_len) != REQ_OK) {
        /* detail names it */
    } else if (!user) {
        snprintf(detail, detail_len, "user_id is required");
    } else if (!valid_string(user, inv_id_valid)) {
        snprintf(detail, detail_len,
                 "user_id must be 1..64 characters of [A-Za-z0-9_.:-]");
    } else if (int_field(root, "qty", 1, INV_MAX_LIMIT, &qty, detail, detail_len) ==
               REQ_OK) {
        snprintf(out->user_id, sizeof(out->user_id), "%s", json_string_value(user));
        out->qty = (int)qty;
        rc = REQ_OK;
    } else {
        out->qty_range = json_is_integer(json_object_get(root, "qty"));
    }
    json_decref(root);
    return rc;
}

/* An optional RFC 3339 date-time field; absent or null leaves *ms 0. */
static req_status time_field(json_t *root, const char *name, long long *ms, char *detail,
                             size_t detail_len)
{
    json_t *v = json_object_get(root, name);
    *ms = 0;
    if (!v || json_is_null(v))
        return REQ_OK;
    if (!json_is_string(v) || json_string_length(v) != strlen(json_string_value(v)) ||
        rfc3339_parse(json_string_value(v), ms) != 0 || *ms == 0) {
        snprintf(detail, detail_len,
                 "%s must be an RFC 3339 date-time after 1970, such as "
                 "\"2026-11-27T15:00:00Z\", or null",
                 name);
        return REQ_INVALID;
    }
    return REQ_OK;
}

/* The optional "room" object of a SKU body into *room (rate_per_s 0 when
 * absent or null). REQ_INVALID with detail. */
static req_status room_field(json_t *root, struct inv_room_spec *room, char *detail,
                             size_t detail_len)
{
    json_t *v = json_object_get(root, "room");
    memset(room, 0, sizeof(*room));
    if (!v || json_is_null(v))
        return REQ_OK;
    static const char *const known[] = {"rate_per_s", "max_active", "pass_ttl_ms", NULL};
    long long rate = 0, active = 0, ttl = 60000;
    char why[160];
    if (!json_is_object(v)) {
        snprintf(detail, detail_len,
                 "room must be an object {\"rate_per_s\", \"max_active\", "
                 "\"pass_ttl_ms\"} or null");
        return REQ_INVALID;
    }
    if (fields_known(v, known, why, sizeof(why)) != REQ_OK ||
        int_field(v, "rate_per_s", 1, INV_ROOM_MAX_RATE, &rate, why, sizeof(why)) !=
            REQ_OK ||
        int_field(v, "max_active", 1, INV_ROOM_MAX_ACTIVE, &active, why, sizeof(why)) !=
            REQ_OK ||
        int_field(v, "pass_ttl_ms", INV_ROOM_MIN_PASS_TTL_MS, INV_ROOM_MAX_PASS_TTL_MS,
                  &ttl, why, sizeof(why)) != REQ_OK) {
        snprintf(detail, detail_len, "room: %s", why);
        return REQ_INVALID;
    }
    if (rate == 0) {
        snprintf(detail, detail_len, "room: rate_per_s is required");
        return REQ_INVALID;
    }
    room->rate_per_s = rate;
    room->max_active = active ? active : rate;
    room->pass_ttl_ms = ttl;
    return REQ_OK;
}

req_status req_parse_sku(const char *body, size_t len, int default_segments,
                         struct req_sku *out, char *detail, size_t detail_len)
{
    json_t *root = load_object(body, len, detail, detail_len);
    if (!root)
        return REQ_INVALID;
    static const char *const known[] = {"stock",         "segments",  "per_user_limit",
                                        "pay_within_ms", "starts_at", "ends_at",
                                        "room",          NULL};
    long long stock = -1, segments = default_segments, limit = 1, pay = 0, starts, ends;
    struct inv_room_spec room;
    req_status rc = REQ_INVALID;
    if (fields_known(root, known, detail, detail_len) != REQ_OK)
        ; /* detail names it */
    else if (!json_object_get(root, "stock"))
        snprintf(detail, detail_len, "stock is required");
    else if (int_field(root, "stock", 0, INV_MAX_STOCK, &stock, detail, detail_len) !=
                 REQ_OK ||
             int_field(root, "segments", 1, INV_MAX_SEGMENTS, &segments, detail,
                       detail_len) != REQ_OK ||
             int_field(root, "per_user_limit", 1, INV_MAX_LIMIT, &limit, detail,
                       detail_len) != REQ_OK ||
             int_field(root, "pay_within_ms", 0, INV_MAX_PAY_WITHIN_MS, &pay, detail,
                       detail_len) != REQ_OK ||
             time_field(root, "starts_at", &starts, detail, detail_len) != REQ_OK ||
             time_field(root, "ends_at", &ends, detail, detail_len) != REQ_OK ||
             room_field(root, &room, detail, detail_len) != REQ_OK)
        ; /* detail names it */
    else if (starts && ends && starts >= ends)
        snprintf(detail, detail_len, "starts_at must be before ends_at");
    else {
        out->stock = stock;
        out->segments = (int)segments;
        out->limit = (int)limit;
        out->starts_ms = starts;
        out->ends_ms = ends;
        out->pay_ms = pay;
        out->room = room;
        rc = REQ_OK;
    }
    json_decref(root);
    return rc;
}

req_status req_parse_cancel(const char *body, size_t len, char *user_id, size_t user_len,
                            char *detail, size_t detail_len)
{
    json_t *root = load_object(body, len, detail, detail_len);
    if (!root)
        return REQ_INVALID;
    static const char *const known[] = {"user_id", NULL};
    req_status rc = REQ_INVALID;
    const char *user = valid_string(json_object_get(root, "user_id"), inv_id_valid);
    if (fields_known(root, known, detail, detail_len) != REQ_OK) {
        /* detail names it */
    } else if (!user) {
        snprintf(detail, detail_len,
                 "user_id (the buyer's) is required: 1..64 characters of "
                 "[A-Za-z0-9_.:-]");
    } else {
        snprintf(user_id, user_len, "%s", user);
        rc = REQ_OK;
    }
    json_decref(root);
    return rc;
}

req_status req_parse_join(const char *body, size_t len, char *user_id, size_t user_len,
                          char *detail, size_t detail_len)
{
    return req_parse_cancel(body, len, user_id, user_len, detail, detail_len);
}

req_status req_parse_pay(const char *body, size_t len, char *payment_id, size_t id_len,
                         char *detail, size_t detail_len)
{
    payment_id[0] = '\0';
    if (len == 0)
        return REQ_OK; /* the body is optional */
    json_t *root = load_object(body, len, detail, detail_len);
    if (!root)
        return REQ_INVALID;
    static const char *const known[] = {"payment_id", NULL};
    req_status rc = REQ_INVALID;
    json_t *id = json_object_get(root, "payment_id");
    const char *text = valid_string(id, req_idem_key_valid);
    if (fields_known(root, known, detail, detail_len) != REQ_OK) {
        /* detail names it */
    } else if (id && !text) {
        snprintf(detail, detail_len,
                 "payment_id must be 1..128 characters of [A-Za-z0-9_.:-]");
    } else {
        if (text)
            snprintf(payment_id, id_len, "%s", text);
        rc = REQ_OK;
    }
    json_decref(root);
    return rc;
}

int req_idem_key_valid(const char *key)
{
    size_t n = strlen(key);
    if (n == 0 || n > INV_IDEM_MAX)
        return 0;
    for (const char *p = key; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

req_status req_order_id_parse(const char *text, uint64_t *id)
{
    size_t n = strlen(text);
    if (n == 0 || n > 20 || (text[0] == '0' && n > 1))
        return REQ_INVALID;
    for (size_t i = 0; i < n; i++)
        if (text[i] < '0' || text[i] > '9')
            return REQ_INVALID;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno)
        return REQ_INVALID;
    *id = v;
    return REQ_OK;
}

req_status req_parse_patch(const char *body, size_t len, struct inv_patch *out,
                           char *detail, size_t detail_len)
{
    json_t *root = load_object(body, len, detail, detail_len);
    if (!root)
        return REQ_INVALID;
    static const char *const known[] = {"add", "withdraw", "paused", "ends_at", NULL};
    memset(out, 0, sizeof(*out));
    out->paused = -1;
    json_t *paused = json_object_get(root, "paused"),
           *ends = json_object_get(root, "ends_at");
    req_status rc = REQ_INVALID;
    if (fields_known(root, known, detail, detail_len) != REQ_OK)
        ; /* detail names it */
    else if (json_object_size(root) == 0)
        snprintf(detail, detail_len,
                 "a PATCH needs at least one of add, withdraw, paused, ends_at");
    else if (int_field(root, "add", 1, INV_MAX_STOCK, &out->add, detail, detail_len) !=
                 REQ_OK ||
             int_field(root, "withdraw", 1, INV_MAX_STOCK, &out->withdraw, detail,
                       detail_len) != REQ_OK)
        ; /* detail says which */
    else if (paused && !json_is_boolean(paused))
        snprintf(detail, detail_len, "paused must be true or false");
    else if (ends && json_is_null(ends))
        snprintf(
            detail, detail_len,
            "ends_at must be an RFC 3339 date-time: a PATCH moves the end of a sale, "
            "it does not remove it");
    else if (time_field(root, "ends_at", &out->ends_ms, detail, detail_len) == REQ_OK)
        rc = REQ_OK;
    if (rc == REQ_OK && paused)
        out->paused = json_is_true(paused);
    json_decref(root);
    return rc;
}
