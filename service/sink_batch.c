#include "sink_batch.h"

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inventory.h"
#include "sink.h"
#include "xalloc.h"

/* A merchant's change (c: outbox_stock) goes to seckill_stock_events, once
 * (keyed by its stream and id, as an order's event: applied again, nothing
 * changes); the order's events are the rest. The events new to the database
 * are recorded, and each order takes the
 * furthest state among them, only forward (rank: placed and pending 1, the
 * ends 2). Only a pending event carries pay_by (b): the row takes it from
 * whichever of the batch's new events has it, and a row that has none yet
 * takes it later too, though its state is further already (the end came
 * first, or in the same batch). The segments (e, m: every event of schema 3's
 * scripts has them) are taken the same way, so that a row whose events came
 * before schema 3 gets them from its first one after. */
const char SINK_APPLY_SQL[] =
    "WITH ev AS (SELECT * FROM json_to_recordset($1::json) AS e(x text, i text, "
    "  o bigint, s text, k text, u text, q int, g text, b bigint, p text, e int, "
    "  m text, t bigint, c text, a bigint, w bigint, z int, n bigint)), "
    "stock AS (INSERT INTO seckill_stock_events (stream, event_id, sku, generation, "
    "  added, withdrawn, paused, ends_at, at) "
    "  SELECT x, i, k, g, a, w, z = 1, to_timestamp(n / 1000.0), "
    "  to_timestamp(split_part(i, '-', 1)::bigint / 1000.0) FROM ev WHERE c IS NOT NULL "
    "  ON CONFLICT DO NOTHING), "
    "fresh AS (INSERT INTO seckill_events (stream, event_id, order_id, state, at) "
    "  SELECT x, i, o, s, to_timestamp(split_part(i, '-', 1)::bigint / 1000.0) FROM ev "
    "  WHERE c IS NULL ON CONFLICT DO NOTHING RETURNING stream, event_id), "
    "latest AS (SELECT DISTINCT ON (ev.o) ev.*, "
    "  max(ev.b) OVER (PARTITION BY ev.o) AS pb, "
    "  max(ev.e) OVER (PARTITION BY ev.o) AS pe, "
    "  max(ev.m) OVER (PARTITION BY ev.o) AS pm, "
    "  CASE WHEN ev.s IN ('placed', 'pending') THEN 1 ELSE 2 END AS r "
    "  FROM ev JOIN fresh ON fresh.stream = ev.x AND fresh.event_id = ev.i "
    "  ORDER BY ev.o, r DESC) "
    "INSERT INTO seckill_orders AS t (order_id, sku, user_id, qty, generation, state, "
    "  rank, pay_by, payment_id, changed_at, segment, segments) "
    "SELECT o, k, u, q, g, s, r, to_timestamp(pb / 1000.0), p, "
    "  to_timestamp(coalesce(t, split_part(i, '-', 1)::bigint) / 1000.0), pe, pm "
    "FROM latest "
    "ON CONFLICT (order_id) DO UPDATE SET "
    "  state = CASE WHEN t.rank < EXCLUDED.rank THEN EXCLUDED.state ELSE t.state END, "
    "  rank = greatest(t.rank, EXCLUDED.rank), "
    "  pay_by = coalesce(t.pay_by, EXCLUDED.pay_by), "
    "  payment_id = CASE WHEN t.rank < EXCLUDED.rank "
    "    THEN coalesce(EXCLUDED.payment_id, t.payment_id) ELSE t.payment_id END, "
    "  changed_at = CASE WHEN t.rank < EXCLUDED.rank THEN EXCLUDED.changed_at "
    "    ELSE t.changed_at END, "
    "  segment = coalesce(t.segment, EXCLUDED.segment), "
    "  segments = coalesce(t.segments, EXCLUDED.segments) "
    "WHERE t.rank < EXCLUDED.rank OR (t.pay_by IS NULL AND EXCLUDED.pay_by IS NOT NULL) "
    "  OR (t.segment IS NULL AND EXCLUDED.segment IS NOT NULL)";

const char SINK_DEAD_SQL[] =
    "INSERT INTO seckill_dead_letters (stream, event_id, fields, error) "
    "SELECT x, i, f, e FROM json_to_recordset($1::json) AS d(x text, i text, f text, e text) "
    "ON CONFLICT DO NOTHING";

/* Most of an entry's fields a dead letter keeps (bytes of its text). */
#define DEAD_FIELDS_MAX 4096

static void dead_free(struct sink_dead *d)
{
    free(d->stream);
    free(d->fields);
    free(d->error);
}

void sink_batch_clear(struct sink_batch *b)
{
    b->len = 0;
    b->valid = 0;
    b->n = 0;
    b->skipped = 0;
    for (int i = 0; i < b->ndead; i++)
        dead_free(&b->dead[i]);
    b->ndead = 0;
}

/* True when text is a decimal number (what the scripts write). */
static int digits(const char *text)
{
    if (!text || !*text || strlen(text) > 19)
        return 0;
    return text[strspn(text, "0123456789")] == '\0';
}

/* True when text goes into a JSON string as it is: printable ASCII without
 * '"' or '\\' (every value the scripts write: ids of [A-Za-z0-9_.:-],
 * numbers, state names). */
static int json_plain(const char *text)
{
    for (const unsigned char *c = (const unsigned char *)text; *c; c++)
        if (*c < 0x20 || *c > 0x7e || *c == '"' || *c == '\\')
            return 0;
    return 1;
}

/* An event's fields, by their one-letter names (outbox.lua): order, state,
 * SKU, user, units, generation, pay_by, payment id, segment, segments, the
 * time of the change (paid_at; else the event id's). */
static const char EVENT_FIELDS[] = "oskuqgbpemt";
#define EVENT_NFIELDS (sizeof(EVENT_FIELDS) - 1)

/* True when text is a record's segments, "<seg>:<units>,..." (digits,
 * colons and commas: what record.lua writes). */
static int spread_valid(const char *text)
{
    return *text && strlen(text) <= 8192 && text[strspn(text, "0123456789:,")] == '\0';
}

/* True when v (by EVENT_FIELDS) is what an event of the outbox scripts has:
 * an order id, a state, a SKU, a user, units and a generation, numbers where
 * numbers go, nothing that JSON would have to escape (the segments, absent
 * from the events of builds before schema 3, are optional). Anything else
 * (written by hand, or by another version) would fail the batch's
 * transaction every time: it is skipped, counted and acknowledged. */
static int event_valid(const char *const v[EVENT_NFIELDS])
{
    for (size_t i = 0; i < EVENT_NFIELDS; i++)
        if ((i < 6 && !v[i]) || (v[i] && !json_plain(v[i])))
            return 0;
    int known = 0;
    for (int st = 0; st < INV_NSTATES; st++)
        known |= strcmp(v[1], inv_state_name((inv_state)st)) == 0;
    return known && digits(v[0]) && digits(v[4]) && (!v[6] || digits(v[6])) &&
           (!v[8] || digits(v[8])) && (!v[9] || spread_valid(v[9])) &&
           (!v[10] || digits(v[10]));
}

/* Appends n bytes of text to *out (length *len, room *room), NUL-ended. */
static void text_put(char **out, size_t *len, size_t *room, const char *text, size_t n)
{
    if (*len + n + 1 > *room) {
        *room = *room ? 2 * *room : 256;
        while (*len + n + 1 > *room)
            *room *= 2;
        *out = xrealloc(*out, *room);
    }
    memcpy(*out + *len, text, n);
    *len += n;
    (*out)[*len] = '\0';
}

/* Appends n bytes of text as ASCII: a byte outside printable ASCII, and a
 * backslash, as \xHH. */
static void text_escaped(char **out, size_t *len, size_t *room, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        char hex[5];
        if (c >= 0x20 && c <= 0x7e && c != '\\') {
            text_put(out, len, room, (const char *)&c, 1);
        } else {
            snprintf(hex, sizeof(hex), "\\x%02x", c);
            text_put(out, len, room, hex, 4);
        }
    }
}

static char *escaped(const char *text)
{
    char *out = NULL;
    size_t len = 0, room = 0;
    text_put(&out, &len, &room, "", 0);
    text_escaped(&out, &len, &room, text, strlen(text));
    return out;
}

/* Event e of stream key becomes a dead letter: fields and error are kept
 * (escaped). */
static void dead_add(struct sink_batch *b, int e, const char *key, char *fields,
                     const char *error)
{
    if (b->ndead == b->dead_cap) {
        b->dead_cap = b->dead_cap ? 2 * b->dead_cap : 16;
        b->dead = xrealloc(b->dead, sizeof(*b->dead) * (size_t)b->dead_cap);
    }
    b->dead[b->ndead++] = (struct sink_dead){
        .event = e, .stream = escaped(key), .fields = fields, .error = escaped(error)};
}

/* An entry's fields as text, "name=value ..." (escaped, at most about
 * DEAD_FIELDS_MAX bytes); "" for a deleted entry's. */
static char *fields_text(const struct redisReply *f)
{
    char *out = NULL;
    size_t len = 0, room = 0;
    text_put(&out, &len, &room, "", 0);
    for (size_t j = 0; f && f->type == REDIS_REPLY_ARRAY && j < f->elements; j++) {
        const redisReply *e = f->element[j];
        if (len > DEAD_FIELDS_MAX) {
            text_put(&out, &len, &room, " ...", 4);
            break;
        }
        if (j > 0)
            text_put(&out, &len, &room, j % 2 ? "=" : " ", 1);
        if (e->type == REDIS_REPLY_STRING)
            text_escaped(&out, &len, &room, e->str,
                         e->len > DEAD_FIELDS_MAX ? DEAD_FIELDS_MAX : e->len);
        else
            text_put(&out, &len, &room, "?", 1);
    }
    return out;
}

/* Appends n bytes of text to the batch's rows. */
static void rows_put(struct sink_batch *b, const char *text, size_t n)
{
    if (b->len + n + 1 > b->room) {
        b->room = b->room ? 2 * b->room : 64 * 1024;
        while (b->len + n + 1 > b->room)
            b->room *= 2;
        b->rows = xrealloc(b->rows, b->room);
    }
    memcpy(b->rows + b->len, text, n);
    b->len += n;
    b->rows[b->len] = '\0';
}

/* Appends ,"name":"value" (the first field without the comma). */
static void rows_field(struct sink_batch *b, char name, const char *value, int first)
{
    char head[6] = {',', '"', name, '"', ':', '"'};
    rows_put(b, first ? head + 1 : head, first ? 5 : 6);
    rows_put(b, value, strlen(value));
    rows_put(b, "\"", 1);
}

/* Room for one more event. */
static void batch_room(struct sink_batch *b)
{
    if (b->n < b->cap)
        return;
    b->cap = b->cap ? 2 * b->cap : SINK_BATCH;
    b->stream = xrealloc(b->stream, sizeof(*b->stream) * (size_t)b->cap);
    b->id = xrealloc(b->id, sizeof(*b->id) * (size_t)b->cap);
    b->eid = xrealloc(b->eid, sizeof(*b->eid) * (size_t)b->cap);
    b->row = xrealloc(b->row, sizeof(*b->row) * (size_t)b->cap);
    b->row_event = xrealloc(b->row_event, sizeof(*b->row_event) * (size_t)b->cap);
    b->settles = xrealloc(b->settles, sizeof(*b->settles) * (size_t)b->cap);
}

/* The k-th event of entry id (k from 0): its place in the batch. */
static void event_place(struct sink_batch *b, int si, const char *id, int k)
{
    batch_room(b);
    b->stream[b->n] = si;
    snprintf(b->id[b->n], sizeof(b->id[0]), "%s", id);
    if (k == 0)
        snprintf(b->eid[b->n], sizeof(b->eid[0]), "%s", id);
    else
        snprintf(b->eid[b->n], sizeof(b->eid[0]), "%s/%d", id, k);
    b->settles[b->n][0] = '\0';
    b->n++;
}

/* The last event placed is not valid: f (the entry's fields) a dead letter;
 * the skipped come first among the dead letters (sink_batch_unkill). */
static void event_skip(struct sink_batch *b, const char *key, const struct redisReply *f)
{
    dead_add(b, b->n - 1, key, fields_text(f), "not an event of the outbox scripts");
    b->skipped++;
}

/* The last event placed, valid, as a row: its stream and id, then v's fields
 * named by names (those set). */
static void event_row(struct sink_batch *b, const char *key, const char *names,
                      const char *const *v)
{
    rows_put(b, b->valid ? ",{" : "[{", 2);
    b->row[b->valid][0] = b->len - 1;
    b->row_event[b->valid] = b->n - 1;
    rows_field(b, 'x', key, 1);
    rows_field(b, 'i', b->eid[b->n - 1], 0);
    for (size_t i = 0; names[i]; i++)
        if (v[i])
            rows_field(b, names[i], v[i], 0);
    rows_put(b, "}", 1);
    b->row[b->valid][1] = b->len;
    b->valid++;
}

/* The k-th event of entry id (k from 0), its fields v (by EVENT_FIELDS), f
 * the entry's (for a dead letter). */
static void event_add(struct sink_batch *b, int si, const char *key, const char *id,
                      int k, const char *const v[EVENT_NFIELDS],
                      const struct redisReply *f)
{
    event_place(b, si, id, k);
    if (!event_valid(v) || !json_plain(key) || !json_plain(id)) {
        event_skip(b, key, f);
        return;
    }
    if (inv_state_parse(v[1]) != INV_STATE_PENDING) /* placed, paid, cancelled, expired */
        snprintf(b->settles[b->n - 1], sizeof(b->settles[0]), "%s", v[0]);
    event_row(b, key, EVENT_FIELDS, v);
}

/* A merchant's change's fields (outbox_stock): the kind, SKU, generation,
 * units added and withdrawn, paused, ends_ms. */
static const char STOCK_FIELDS[] = "ckgawzn";
#define STOCK_NFIELDS (sizeof(STOCK_FIELDS) - 1)

/* True when v (by STOCK_FIELDS) is a change outbox_stock writes. */
static int stock_valid(const char *const v[STOCK_NFIELDS])
{
    for (size_t i = 0; i < STOCK_NFIELDS; i++)
        if ((i < 5 && !v[i]) || (v[i] && !json_plain(v[i])))
            return 0;
    return strcmp(v[0], "stock") == 0 && digits(v[3]) && digits(v[4]) &&
           (!v[5] || strcmp(v[5], "0") == 0 || strcmp(v[5], "1") == 0) &&
           (!v[6] || digits(v[6]));
}

/* Entry id of stream si, a merchant's change (its first field c): one event. */
static void stock_add(struct sink_batch *b, int si, const char *key, const char *id,
                      const struct redisReply *f)
{
    const char *v[STOCK_NFIELDS] = {0};
    int other = 0; /* a field outbox_stock does not write: not its entry */
    for (size_t j = 0; j + 1 < f->elements; j += 2) {
        const redisReply *name = f->element[j], *val = f->element[j + 1];
        const char *at = name->type == REDIS_REPLY_STRING && name->len == 1
                             ? strchr(STOCK_FIELDS, name->str[0])
                             : NULL;
        if (!at || !*at || val->type != REDIS_REPLY_STRING ||
            strlen(val->str) != val->len)
            other = 1;
        else
            v[at - STOCK_FIELDS] = val->str;
    }
    event_place(b, si, id, 0);
    if (other || !stock_valid(v) || !json_plain(key) || !json_plain(id))
        event_skip(b, key, f);
    else
        event_row(b, key, STOCK_FIELDS, v);
}

/* To be written when valid, acknowledged in any case: an entry carries one
 * event, or several (one script's: a new one at each field named o, the
 * first field of each). The row is written as text straight away (jansson's
 * objects were most of the sink's CPU in the instance). */
void sink_batch_add(struct sink_batch *b, int si, const char *key, const char *id,
                    const struct redisReply *f)
{
    const char *v[EVENT_NFIELDS] = {0};
    int k = 0, any = 0;
    if (f && f->type == REDIS_REPLY_ARRAY && f->elements >= 2 &&
        f->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(f->element[0]->str, "c") == 0) {
        stock_add(b, si, key, id, f);
        return;
    }
    for (size_t j = 0; f && f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements; j += 2) {
        const redisReply *name = f->element[j], *val = f->element[j + 1];
        if (name->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING ||
            name->len != 1 || strlen(val->str) != val->len)
            continue;
        if (name->str[0] == 'o' && any) { /* the next event of the entry */
            event_add(b, si, key, id, k++, v, f);
            memset(v, 0, sizeof(v));
        }
        const char *at = strchr(EVENT_FIELDS, name->str[0]);
        if (at && *at) {
            v[at - EVENT_FIELDS] = val->str;
            any = 1;
        }
    }
    event_add(b, si, key, id, k, v, f); /* the last, or a deleted entry's (NULL) */
}

const char *sink_batch_close(struct sink_batch *b)
{
    rows_put(b, "]", 1);
    return b->rows;
}

void sink_batch_reopen(struct sink_batch *b)
{
    b->rows[--b->len] = '\0';
}

void sink_batch_free(struct sink_batch *b)
{
    sink_batch_clear(b);
    free(b->rows);
    free(b->stream);
    free(b->id);
    free(b->eid);
    free(b->row);
    free(b->row_event);
    free(b->settles);
    free(b->dead);
    *b = (struct sink_batch){0};
}

char *sink_batch_row(const struct sink_batch *b, int v)
{
    size_t n = b->row[v][1] - b->row[v][0];
    char *out = xmalloc(n + 3);
    out[0] = '[';
    memcpy(out + 1, b->rows + b->row[v][0], n);
    memcpy(out + 1 + n, "]", 2);
    return out;
}

void sink_batch_kill(struct sink_batch *b, int v, const char *key, const char *error)
{
    size_t n = b->row[v][1] - b->row[v][0];
    char *row = xmalloc(n + 1);
    memcpy(row, b->rows + b->row[v][0], n); /* plain ASCII (json_plain) */
    row[n] = '\0';
    dead_add(b, b->row_event[v], key, row, error);
}

void sink_batch_unkill(struct sink_batch *b)
{
    while (b->ndead > b->skipped)
        dead_free(&b->dead[--b->ndead]);
}

const char *sink_batch_settled(const struct sink_batch *b, int e)
{
    if (!b->settles[e][0])
        return NULL;
    for (int i = 0; i < b->ndead; i++)
        if (b->dead[i].event == e)
            return NULL; /* not in the database */
    return b->settles[e];
}

char *sink_batch_dead_rows(const struct sink_batch *b)
{
    json_t *rows = json_array();
    for (int i = 0; i < b->ndead; i++) {
        const struct sink_dead *d = &b->dead[i];
        char *id = escaped(b->eid[d->event]); /* "ms-seq[/k]": escaped all the same */
        json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:s}", "x", d->stream, "i",
                                              id, "f", d->fields, "e", d->error));
        free(id);
    }
    char *text = json_dumps(rows, JSON_COMPACT);
    json_decref(rows);
    return text;
}
