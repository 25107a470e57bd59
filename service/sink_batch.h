/* sink_batch: the events of one round of the sink (sink.h), as the one
 * statement that applies them takes them (SINK_APPLY_SQL): a JSON array of
 * flat objects, written as text as the events are read, with each event's
 * stream and id kept for the acknowledgements.
 *
 * An event is what inventory/lua/outbox.lua appends: fields of one letter
 * (o order, s state, k SKU, u user, q units, g generation, b pay_by, p payment
 * id). One that is not (a field missing, a number that is not one, a state no
 * script writes, text JSON would have to escape) would fail the transaction
 * every time: it is skipped and counted, and acknowledged like the rest.
 * Not thread-safe: one batch per sink, on its loop. */
#ifndef SECKILL_SINK_BATCH_H
#define SECKILL_SINK_BATCH_H

#include <stddef.h>

struct redisReply;

struct sink_batch {
    char *rows; /* "[{...},{...}": the valid events, the array still open */
    size_t len, room;
    int valid;      /* events in rows */
    int n;          /* events, valid or not (all acknowledged) */
    int skipped;    /* events not valid */
    int *stream;    /* per event: its stream's index */
    char (*id)[32]; /* per event: its id */
    int cap;
};

/* Empty again (its memory kept for the next round). */
void sink_batch_clear(struct sink_batch *b);
/* Adds the event id of stream si (named key), f its [field, value, ...]
 * array (NULL: a deleted entry's). */
void sink_batch_add(struct sink_batch *b, int si, const char *key, const char *id,
                    const struct redisReply *f);
/* The rows as the statement's parameter: the array closed. Until
 * sink_batch_reopen, nothing is added. */
const char *sink_batch_close(struct sink_batch *b);
/* Open for more rows again, after a failed statement. */
void sink_batch_reopen(struct sink_batch *b);
void sink_batch_free(struct sink_batch *b);

/* One statement, one transaction: the batch's events new to the database are
 * recorded, and each order takes the furthest state among them ($1: the
 * rows). */
extern const char SINK_APPLY_SQL[];

#endif
