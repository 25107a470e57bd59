/* sink_batch: the events of one round of the sink (sink.h), as the one
 * statement that applies them takes them (SINK_APPLY_SQL): a JSON array of
 * flat objects, written as text as the events are read, with each event's
 * stream and id kept for the acknowledgements.
 *
 * An event is what inventory/lua/outbox.lua appends: fields of one letter
 * (o order, s state, k SKU, u user, q units, g generation, b pay_by, p payment
 * id, e segment, m segments), or a merchant's change (outbox_stock: c
 * first, then k SKU, g generation, a added, w withdrawn, z paused, n ends_ms),
 * which goes to seckill_stock_events. One that is not (a field missing, a number
 * that is not one, a state no script writes, text JSON would have to escape)
 * would fail the transaction every time: it is not written, but counted
 * (skipped) and kept as a dead letter, and acknowledged like the rest. So is
 * an event the database refuses by itself (a number beyond its column's
 * range: sink_batch_kill), with the database's error.
 * Not thread-safe: one batch per sink, on its loop. */
#ifndef SECKILL_SINK_BATCH_H
#define SECKILL_SINK_BATCH_H

#include <stddef.h>

struct redisReply;

/* An event that cannot be stored, as the dead-letter table takes it
 * (SINK_DEAD_SQL). Its texts are ASCII: a byte outside printable ASCII, and
 * a backslash, written \xHH. */
struct sink_dead {
    int event;    /* its index among the batch's events */
    char *stream; /* the stream's key */
    char *fields; /* the entry's fields ("name=value ..."), or its row */
    char *error;  /* why it cannot be stored */
};

struct sink_batch {
    char *rows; /* "[{...},{...}": the valid events, the array still open */
    size_t len, room;
    int valid;           /* events in rows */
    int n;               /* events, valid or not (all acknowledged) */
    int skipped;         /* events not valid (the first dead letters) */
    int *stream;         /* per event: its stream's index */
    char (*id)[32];      /* per event: its entry's id (what XACK takes) */
    char (*eid)[40];     /* per event: its own id, the entry's, and for the k-th
                            (k > 0) of an entry of several "<entry id>/<k>" */
    size_t (*row)[2];    /* per valid event: where its object starts and ends in rows */
    int *row_event;      /* per valid event: its index among the events */
    char (*settles)[21]; /* per event: its order's id when the event is its final
                          * state (placed, paid, cancelled, expired), else "" */
    int cap;
    struct sink_dead *dead; /* the skipped events, then those killed */
    int ndead, dead_cap;
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

/* The valid event v (0 .. valid-1) alone, as the statement's parameter
 * ("[{...}]"); the caller frees it. */
char *sink_batch_row(const struct sink_batch *b, int v);
/* The valid event v, of stream key, cannot be stored: the database refused
 * it by itself with error. It becomes a dead letter (its row stays in rows:
 * a batch tried again from the start, after sink_batch_unkill, sends it
 * again). */
void sink_batch_kill(struct sink_batch *b, int v, const char *key, const char *error);
/* Forgets the events killed (the skipped ones stay): before the batch is
 * tried again from the start. */
void sink_batch_unkill(struct sink_batch *b);
/* The id (decimal) of the order that event e (0 .. n-1) settles: a valid
 * event of a final state (placed, paid, cancelled, expired), not a dead
 * letter; else NULL. Once the batch committed, that order's final state is in
 * the database. Points into the batch. */
const char *sink_batch_settled(const struct sink_batch *b, int e);
/* The dead letters as SINK_DEAD_SQL's parameter (a JSON array); the caller
 * frees it. */
char *sink_batch_dead_rows(const struct sink_batch *b);

/* The dead letters ($1: sink_batch_dead_rows) into seckill_dead_letters,
 * each once (keyed by stream and id). */
extern const char SINK_DEAD_SQL[];

/* One statement, one transaction: the batch's events new to the database are
 * recorded, and each order takes the furthest state among them ($1: the
 * rows). */
extern const char SINK_APPLY_SQL[];

#endif
