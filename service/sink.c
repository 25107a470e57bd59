#include "sink.h"

#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acluster.h"
#include "aconn.h"
#include "apg.h"
#include "cluster.h"
#include "inventory.h"
#include "log.h"
#include "sink_batch.h"
#include "xalloc.h"

#define SINK_TICK_MS 1000 /* the registry read again, claims, the lag measured */
#define SINK_BLOCK_MS 500 /* one Redis: a read waits this long for events */
/* A cluster's streams are read one by one (a command's keys share one slot), up
 * to one per gene, and only those with news: a stream whose read found nothing
 * is read again once the tick's measurement finds events in it (within
 * SINK_TICK_MS). Reading every stream every 250 ms was 500 reads a second for
 * 3 instances on an idle shop's 42 streams, besides the measurement. */
#define SINK_RETRY_MS 250 /* a failed transaction is tried again after this */
#define SINK_TIMEOUT_MS 5000
#define SINK_MAX_STREAMS 4096

extern const struct rscript_source lua_inventory_sink_ack;
/* inventory/lua/sink_ack.lua: acknowledged, and the stream trimmed below. */
static struct rscript ack_script = RSCRIPT_INIT("sink_ack", lua_inventory_sink_ack);

const char SINK_SCHEMA_SQL[] =
    "DO $$ BEGIN "
    "PERFORM pg_advisory_xact_lock(7305141); "
    "CREATE TABLE IF NOT EXISTS seckill_schema (version int PRIMARY KEY, "
    "  applied_at timestamptz NOT NULL DEFAULT now()); "
    "CREATE TABLE IF NOT EXISTS seckill_orders (order_id bigint PRIMARY KEY, "
    "  sku text NOT NULL, user_id text NOT NULL, qty int NOT NULL, "
    "  generation text NOT NULL, state text NOT NULL, rank smallint NOT NULL, "
    "  pay_by timestamptz, payment_id text, changed_at timestamptz NOT NULL); "
    "CREATE INDEX IF NOT EXISTS seckill_orders_sku ON seckill_orders (sku, generation); "
    "CREATE TABLE IF NOT EXISTS seckill_events (stream text NOT NULL, "
    "  event_id text NOT NULL, order_id bigint NOT NULL, state text NOT NULL, "
    "  at timestamptz NOT NULL, PRIMARY KEY (stream, event_id)); "
    "INSERT INTO seckill_schema (version) VALUES (1) ON CONFLICT DO NOTHING; "
    /* 2: the events that cannot be stored */
    "CREATE TABLE IF NOT EXISTS seckill_dead_letters (stream text NOT NULL, "
    "  event_id text NOT NULL, fields text NOT NULL, error text NOT NULL, "
    "  at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (stream, event_id)); "
    "INSERT INTO seckill_schema (version) VALUES (2) ON CONFLICT DO NOTHING; "
    /* 3: an order's segments, so that GET /orders/{id} answers from here once
     * its record left Redis (--order-retention); NULL for a row whose every
     * event came before (an ALTER locks the table: only once) */
    "IF NOT EXISTS (SELECT 1 FROM seckill_schema WHERE version = 3) THEN "
    "  ALTER TABLE seckill_orders ADD COLUMN IF NOT EXISTS segment int, "
    "    ADD COLUMN IF NOT EXISTS segments text; "
    "  INSERT INTO seckill_schema (version) VALUES (3) ON CONFLICT DO NOTHING; "
    "END IF; "
    /* 4: the merchants' changes (PATCH /skus/{sku}: outbox_stock), the stock's
     * history: initial + sum(added) - sum(withdrawn) is what the books of a
     * SKU's generation balance against */
    "CREATE TABLE IF NOT EXISTS seckill_stock_events (stream text NOT NULL, "
    "  event_id text NOT NULL, sku text NOT NULL, generation text NOT NULL, "
    "  added bigint NOT NULL, withdrawn bigint NOT NULL, paused boolean, "
    "  ends_at timestamptz, at timestamptz NOT NULL, PRIMARY KEY (stream, event_id)); "
    "CREATE INDEX IF NOT EXISTS seckill_stock_events_sku "
    "  ON seckill_stock_events (sku, generation); "
    "INSERT INTO seckill_schema (version) VALUES (4) ON CONFLICT DO NOTHING; "
    "END $$";

/* Where a round is. */
enum sink_phase {
    SINK_IDLE = 0, /* between rounds: a timer */
    SINK_READING,  /* XREADGROUP or XAUTOCLAIM on its way */
    SINK_WRITING,  /* the transaction on its way */
    SINK_SPLITTING, /* the database refused the batch's data: each event alone */
    SINK_BURYING,   /* the dead letters on their way */
    SINK_ACKING,    /* the acknowledgements on their way */
};

/* One event of a batch the database refused, sent alone. */
struct sink_single {
    struct svc_sink *k;
    int v; /* its index among the batch's valid events */
};

/* A stream the registry lists. */
struct sink_stream {
    struct svc_sink *k;
    char *key;
    int grouped;       /* XGROUP CREATE answered (created now or before) */
    int news;          /* a cluster's: may have events to read (its last read
                          found some, or the tick measured some since) */
    long long pending; /* events delivered and not acknowledged, last measured */
};

struct svc_sink {
    char *conninfo;
    long long retention_ms; /* a settled order's record expires this long after
                               its final event committed; 0: kept */
    char host[256];
    int port;
    struct rconn_addr *seeds;
    int nseeds;
    char *password;
    char consumer[64];
    char crash_at[32]; /* SECKILL_TEST_CRASH: a test's kill -9 at a point of a round */
    struct event_base *base;
    struct aconn *rd;    /* one Redis: the blocking reads */
    struct aconn *ac;    /* one Redis: everything else */
    struct acluster *cl; /* a cluster: everything */
    struct apg *db;
    struct event *tick, *wake;
    struct sink_stream **streams; /* each its own allocation: replies point at it */
    int nstreams;
    int listing; /* SMEMBERS on its way */
    enum sink_phase phase;
    int claim_next;  /* a cluster's or a claim pass's next stream; -1: no pass */
    int read_next;   /* a cluster's next stream to read */
    int schema_sent; /* the schema went ahead on this connection */
    int acks_owed;
    struct sink_batch b;
    struct sink_single *singles; /* a split's, one per valid event */
    int singles_cap, singles_owed, split_failed;
    char split_why[256]; /* why a split's event failed, otherwise than for its data */
    int lag_owed;
    int64_t lag_events_sum, lag_oldest_ms;
    _Atomic uint64_t events, batches, claimed, errors, skipped, dead_letters;
    _Atomic int64_t lag_events;
    _Atomic int64_t lag_age_ms; /* the oldest's age when measured, 0: none */
    _Atomic int up;
    int was_up;               /* for the log: said once per change */
};

static void round_start(struct svc_sink *k);

/* A test's kill -9 at step (SECKILL_TEST_CRASH): "sink-before-commit" (the
 * batch read, its transaction not sent) or "sink-after-commit" (committed,
 * not acknowledged). */
static void crash_point(const struct svc_sink *k, const char *step)
{
    if (strcmp(k->crash_at, step) == 0)
        raise(SIGKILL);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int attached(const struct svc_sink *k)
{
    return k->tick != NULL;
}

/* A command to the node of key (NULL: any; one Redis: the command
 * connection). */
static rconn_status send_cmd(struct svc_sink *k, const char *key, aconn_cb *cb, void *arg,
                             struct rscript *script, int nkeys, int argc,
                             const char **argv)
{
    if (k->cl) {
        int slot = key ? cluster_keyslot(key, strlen(key)) : 0;
        return script ? acluster_eval(k->cl, slot, cb, arg, script, nkeys, argc, argv)
                      : acluster_command(k->cl, slot, cb, arg, argc, argv);
    }
    return script ? aconn_eval(k->ac, cb, arg, script, nkeys, argc, argv)
                  : aconn_command(k->ac, cb, arg, argc, argv, NULL);
}

static void wake_after(struct svc_sink *k, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    k->phase = SINK_IDLE;
    evtimer_add(k->wake, &tv);
}

/* ---- the batch ------------------------------------------------------------- */

/* Adds the entries of r ([[id, [field, value...]], ...]) of stream si. */
static void batch_entries(struct svc_sink *k, int si, const redisReply *r)
{
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            continue; /* a deleted entry still pending: nothing to write */
        sink_batch_add(&k->b, si, k->streams[si]->key, e->element[0]->str, e->element[1]);
    }
}

/* ---- acknowledging ---------------------------------------------------------- */

static void on_acked(void *arg, aconn_result res, redisReply *r)
{
    (void)res, (void)r;
    struct svc_sink *k = arg;
    if (!attached(k))
        return;
    if (--k->acks_owed == 0) {
        sink_batch_clear(&k->b);
        round_start(k);
    }
}

/* sink_ack.lua on each stream of the batch, with its entries' ids: one call per
 * run of events of one stream (a read adds a stream's events together, so a
 * stream is one run), and with a retention, per entry, the hashes of the
 * records of the orders its events settled and how many in each (each hash in
 * its stream's slot: inventory/lua/rec.lua). An acknowledgement lost on the
 * way leaves its events pending: claimed and written again later, which
 * changes nothing (and counts their records then). */
static void ack_all(struct svc_sink *k)
{
    struct sink_batch *b = &k->b;
    int keep = k->retention_ms > 0;
    const char **argv = xmalloc(sizeof(*argv) * (size_t)(3 * b->n + 3));
    char(*rec)[96] = keep ? xmalloc(sizeof(*rec) * (size_t)b->n) : NULL;
    int *count = keep ? xmalloc(sizeof(*count) * (size_t)b->n) : NULL;
    char *spec = keep ? xmalloc((size_t)b->n * 24 + 1) : NULL;
    char retention[24];
    snprintf(retention, sizeof(retention), "%lld", k->retention_ms);
    k->phase = SINK_ACKING;
    k->acks_owed = 1; /* this loop's own, released below */
    for (int i = 0, j; i < b->n; i = j) {
        const char *stream = k->streams[b->stream[i]]->key;
        for (j = i; j < b->n && b->stream[j] == b->stream[i]; j++)
            ;
        int nrec = 0, argc = 0, keys = 1;
        argv[argc++] = stream;
        argc += j - i; /* room for the hashes, the most there can be */
        argv[argc++] = INV_SINK_GROUP;
        argv[argc++] = retention;
        size_t at = 0;
        for (int e = i; e < j; e++) {
            if (e > i && strcmp(b->id[e], b->id[e - 1]) == 0)
                continue; /* an entry's events: its id once */
            argv[argc++] = b->id[e];
            char *mine = spec ? spec + at : NULL;
            if (mine)
                *mine = '\0';
            for (int f = e; keep && f < j && strcmp(b->id[f], b->id[e]) == 0; f++) {
                const char *id = sink_batch_settled(b, f);
                char key[96];
                if (!id || inv_order_key_of(stream, id, key, sizeof(key)) != 0)
                    continue;
                int r = 0;
                while (r < nrec && strcmp(rec[r], key) != 0)
                    r++;
                if (r == nrec) {
                    memcpy(rec[nrec], key, sizeof(key));
                    argv[keys + nrec] = rec[nrec];
                    count[nrec++] = 0;
                }
                count[r]++;
            }
            for (int r = 0; keep && r < nrec; r++) {
                if (count[r] == 0)
                    continue;
                at += (size_t)sprintf(spec + at, "%s%d:%d", *mine ? "," : "",
                                      keys + 1 + r, count[r]);
                count[r] = 0;
            }
            argv[argc++] = mine ? mine : "";
            if (mine)
                at++;
        }
        /* the hashes sit behind the stream: close the gap left for them */
        int gap = (j - i) - nrec;
        memmove(argv + 1 + nrec, argv + 1 + (j - i),
                sizeof(*argv) * (size_t)(argc - 1 - (j - i)));
        argc -= gap;
        k->acks_owed++;
        if (send_cmd(k, stream, on_acked, k, &ack_script, 1 + nrec, argc, argv) !=
            RCONN_OK)
            k->acks_owed--;
    }
    free(spec);
    free(count);
    free(rec);
    free(argv);
    on_acked(k, ACONN_REPLY, NULL);
}

/* ---- writing ---------------------------------------------------------------- */

static void db_state(struct svc_sink *k, int up, const char *why)
{
    atomic_store(&k->up, up);
    if (up == k->was_up)
        return;
    k->was_up = up;
    if (up) {
        log_event(LOG_INFO, "sink_up", "consumer=%s", k->consumer);
    } else {
        char q[300];
        log_event(LOG_WARN, "sink_down", "consumer=%s error=\"%s\"", k->consumer,
                  log_quote(q, sizeof(q), why));
    }
}

static void write_batch(struct svc_sink *k);

/* The batch's events that were not valid, counted and logged (they are
 * dead letters, acknowledged with the rest). */
static void skipped_count(struct svc_sink *k)
{
    if (k->b.skipped == 0)
        return;
    atomic_fetch_add(&k->skipped, (uint64_t)k->b.skipped);
    log_event(LOG_WARN, "sink_event_skipped",
              "consumer=%s events=%d detail=\"not an event of the outbox scripts: "
              "kept as a dead letter, acknowledged, not written\"",
              k->consumer, k->b.skipped);
}

/* True when r failed because of the data it was given (SQLSTATE class 22,
 * data exception: a number beyond its column's range, a time beyond
 * to_timestamp's; 23, integrity constraint violation): the same events
 * would fail the same way every time. Anything else (the connection, a
 * serialization failure, a missing table) passes. */
static int data_refused(apg_outcome res, const PGresult *r)
{
    const char *st = res == APG_RESULT ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return st && (strncmp(st, "22", 2) == 0 || strncmp(st, "23", 2) == 0);
}

/* Why a statement failed: the database's error, or the connection's. */
static const char *failure(const struct svc_sink *k, apg_outcome res, const PGresult *r,
                           char *buf, size_t len)
{
    if (res == APG_RESULT)
        return apg_result_error(r, buf, len);
    snprintf(buf, len, "%s", apg_errstr(k->db));
    return buf;
}

/* A statement of the round failed (why) and will pass again, maybe: the
 * same batch again after SINK_RETRY_MS (write_batch). */
static void round_failed(struct svc_sink *k, const char *why)
{
    atomic_fetch_add(&k->errors, 1);
    k->schema_sent = 0;
    db_state(k, 0, why);
    k->phase = SINK_WRITING;
    struct timeval tv = {0, SINK_RETRY_MS * 1000};
    evtimer_add(k->wake, &tv); /* the same batch again */
}

static void on_buried(void *arg, apg_outcome res, PGresult *r)
{
    struct svc_sink *k = arg;
    if (!attached(k))
        return;
    if (res != APG_RESULT || PQresultStatus(r) != PGRES_COMMAND_OK) {
        char why[256];
        round_failed(k, failure(k, res, r, why, sizeof(why)));
        return;
    }
    db_state(k, 1, NULL);
    skipped_count(k);
    atomic_fetch_add(&k->dead_letters, (uint64_t)k->b.ndead);
    if (k->b.ndead > k->b.skipped) {
        char q[300];
        log_event(LOG_WARN, "sink_dead_letters",
                  "consumer=%s events=%d error=\"%s\" detail=\"refused by the database: "
                  "kept in seckill_dead_letters, acknowledged\"",
                  k->consumer, k->b.ndead - k->b.skipped,
                  log_quote(q, sizeof(q), k->b.dead[k->b.skipped].error));
    }
    crash_point(k, "sink-after-commit");
    ack_all(k);
}

/* The batch is in the database, but for its dead letters: they go to
 * seckill_dead_letters, then every event is acknowledged. */
static void bury(struct svc_sink *k)
{
    if (k->b.ndead == 0) {
        crash_point(k, "sink-after-commit");
        ack_all(k);
        return;
    }
    k->phase = SINK_BURYING;
    char *rows = sink_batch_dead_rows(&k->b);
    const char *params[] = {rows};
    apg_status st = apg_query(k->db, on_buried, k, SINK_DEAD_SQL, 1, params);
    free(rows);
    if (st != APG_OK)
        on_buried(k, APG_NOT_SENT, NULL);
}

/* Every event of a split answered (or was not sent): on to the dead
 * letters, or the whole batch again when one failed otherwise than for its
 * data. */
static void split_over(struct svc_sink *k)
{
    if (k->split_failed) {
        round_failed(k, k->split_why);
        return;
    }
    db_state(k, 1, NULL);
    bury(k);
}

/* One event of a split answered: written, or refused for its data (a dead
 * letter), or failed otherwise (the whole batch again, later). */
static void on_single(void *arg, apg_outcome res, PGresult *r)
{
    struct sink_single *one = arg;
    struct svc_sink *k = one->k;
    if (!attached(k))
        return;
    char why[256];
    if (res == APG_RESULT && PQresultStatus(r) == PGRES_COMMAND_OK) {
        atomic_fetch_add(&k->batches, 1);
        atomic_fetch_add(&k->events, 1);
    } else if (data_refused(res, r)) {
        const struct sink_batch *b = &k->b;
        sink_batch_kill(&k->b, one->v, k->streams[b->stream[b->row_event[one->v]]]->key,
                        failure(k, res, r, why, sizeof(why)));
    } else if (!k->split_failed) {
        k->split_failed = 1;
        failure(k, res, r, k->split_why, sizeof(k->split_why));
    }
    if (--k->singles_owed == 0)
        split_over(k);
}

/* The database refused the batch for its data: each event is sent alone,
 * all at once (one pipeline, each its own transaction), so that those it
 * refuses become dead letters and hold up none of the others. */
static void split(struct svc_sink *k)
{
    struct sink_batch *b = &k->b;
    k->phase = SINK_SPLITTING;
    if (b->valid > k->singles_cap) {
        k->singles_cap = b->valid;
        k->singles = xrealloc(k->singles, sizeof(*k->singles) * (size_t)k->singles_cap);
    }
    k->split_failed = 0;
    k->singles_owed = b->valid; /* all of them: none answers the split before the last */
    for (int v = 0; v < b->valid; v++) {
        k->singles[v] = (struct sink_single){.k = k, .v = v};
        char *row = sink_batch_row(b, v);
        const char *params[] = {row};
        apg_status st =
            apg_query(k->db, on_single, &k->singles[v], SINK_APPLY_SQL, 1, params);
        free(row);
        if (st != APG_OK) { /* those sent still answer; this one and the rest do not */
            if (!k->split_failed) {
                k->split_failed = 1;
                snprintf(k->split_why, sizeof(k->split_why), "%s", apg_errstr(k->db));
            }
            k->singles_owed -= b->valid - v;
            if (k->singles_owed == 0)
                split_over(k);
            return;
        }
    }
}

static void on_schema(void *arg, apg_outcome res, PGresult *r)
{
    struct svc_sink *k = arg;
    if (res != APG_RESULT || PQresultStatus(r) != PGRES_COMMAND_OK)
        k->schema_sent = 0; /* again, ahead of the next transaction */
}

static void on_written(void *arg, apg_outcome res, PGresult *r)
{
    struct svc_sink *k = arg;
    if (!attached(k))
        return;
    if (res == APG_RESULT && PQresultStatus(r) == PGRES_COMMAND_OK) {
        db_state(k, 1, NULL);
        atomic_fetch_add(&k->batches, 1);
        atomic_fetch_add(&k->events, (uint64_t)k->b.valid);
        bury(k);
        return;
    }
    if (data_refused(res, r)) {
        split(k);
        return;
    }
    char why[256];
    round_failed(k, failure(k, res, r, why, sizeof(why)));
}

/* The batch in one transaction (the schema ahead of it on a new connection);
 * then its dead letters; then the acknowledgements. Also the same batch
 * again after a failure, from the start. */
static void write_batch(struct svc_sink *k)
{
    k->phase = SINK_WRITING;
    sink_batch_unkill(&k->b);
    if (!k->schema_sent &&
        apg_query(k->db, on_schema, k, SINK_SCHEMA_SQL, 0, NULL) == APG_OK)
        k->schema_sent = 1;
    if (k->b.valid == 0) { /* nothing valid: only dead letters, if any */
        bury(k);
        return;
    }
    const char *params[] = {sink_batch_close(&k->b)};
    crash_point(k, "sink-before-commit");
    apg_status st = apg_query(k->db, on_written, k, SINK_APPLY_SQL, 1, params);
    sink_batch_reopen(&k->b); /* the same batch again after a failure */
    if (st != APG_OK)
        on_written(k, APG_NOT_SENT, NULL);
}

/* ---- reading ---------------------------------------------------------------- */

static int stream_index(const struct svc_sink *k, const char *key)
{
    for (int i = 0; i < k->nstreams; i++)
        if (strcmp(k->streams[i]->key, key) == 0)
            return i;
    return -1;
}

/* A round's events came (or none): written, or the next read. */
static void read_done(struct svc_sink *k)
{
    if (k->b.n > 0)
        write_batch(k);
    else
        round_start(k);
}

/* XREADGROUP's answer: [[stream, [[id, fields]...]]...], or nil (none). */
static void on_read(void *arg, aconn_result res, redisReply *r)
{
    struct sink_stream *one = arg; /* a cluster's: the stream read */
    struct svc_sink *k = one->k;
    if (!attached(k))
        return;
    if (res != ACONN_REPLY ||
        (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_NIL)) {
        /* Redis away; or a stream and its group gone (a Redis restarted
         * empty): the tick makes the groups again */
        if (res == ACONN_REPLY && r->type == REDIS_REPLY_ERROR &&
            strncmp(r->str, "NOGROUP", 7) == 0)
            for (int i = 0; i < k->nstreams; i++)
                k->streams[i]->grouped = 0;
        wake_after(k, SINK_RETRY_MS);
        return;
    }
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *s = r->element[i];
        if (s->type != REDIS_REPLY_ARRAY || s->elements != 2 ||
            s->element[0]->type != REDIS_REPLY_STRING)
            continue;
        int si = stream_index(k, s->element[0]->str);
        if (si >= 0)
            batch_entries(k, si, s->element[1]);
    }
    if (k->cl && k->b.n == 0)
        one->news = 0;
    read_done(k);
}

/* XAUTOCLAIM's answer: [next, [[id, fields]...], [deleted ids]]. */
static void on_claimed(void *arg, aconn_result res, redisReply *r)
{
    struct svc_sink *k = arg;
    if (!attached(k))
        return;
    int si = k->claim_next++;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        batch_entries(k, si, r->element[1]);
        atomic_fetch_add(&k->claimed, (uint64_t)k->b.n);
    }
    if (k->claim_next >= k->nstreams)
        k->claim_next = -1;
    if (k->b.n > 0)
        write_batch(k);
    else
        round_start(k);
}

/* The next read: a claim pass's next stream (XAUTOCLAIM); else one Redis:
 * every grouped stream at once, waiting up to SINK_BLOCK_MS; a cluster: the
 * next stream, without waiting. */
static void round_start(struct svc_sink *k)
{
    k->phase = SINK_READING;
    char count[12], idle[12];
    snprintf(count, sizeof(count), "%d", SINK_BATCH);
    snprintf(idle, sizeof(idle), "%d", SINK_CLAIM_IDLE_MS);
    /* only streams with events pending (last measured) may have some to claim */
    while (
        k->claim_next >= 0 && k->claim_next < k->nstreams &&
        (!k->streams[k->claim_next]->grouped || k->streams[k->claim_next]->pending == 0))
        k->claim_next++;
    if (k->claim_next >= 0 && k->claim_next < k->nstreams) {
        const char *key = k->streams[k->claim_next]->key;
        const char *argv[] = {"XAUTOCLAIM", key,   INV_SINK_GROUP, k->consumer,
                              idle,         "0-0", "COUNT",        count};
        if (send_cmd(k, key, on_claimed, k, NULL, 0, 8, argv) != RCONN_OK)
            wake_after(k, SINK_RETRY_MS);
        return;
    }
    k->claim_next = -1;
    if (k->nstreams == 0) {
        k->phase = SINK_IDLE; /* the tick starts the first round */
        return;
    }
    if (k->cl) { /* the next stream with news, round robin; none: the tick wakes */
        struct sink_stream *s = NULL;
        for (int i = 0; i < k->nstreams && !s; i++) {
            struct sink_stream *c = k->streams[k->read_next++ % k->nstreams];
            if (c->grouped && c->news)
                s = c;
        }
        if (!s) {
            k->phase = SINK_IDLE;
            return;
        }
        const char *argv[] = {"XREADGROUP", "GROUP", INV_SINK_GROUP,
                              k->consumer,  "COUNT", count,
                              "STREAMS",    s->key,  ">"};
        if (acluster_command(k->cl, cluster_keyslot(s->key, strlen(s->key)), on_read, s,
                             9, argv) != RCONN_OK)
            wake_after(k, SINK_RETRY_MS);
        return;
    }
    const char **argv = xmalloc(sizeof(*argv) * (size_t)(10 + 2 * k->nstreams));
    char block[12];
    snprintf(block, sizeof(block), "%d", SINK_BLOCK_MS);
    int argc = 0, n = 0;
    const char *head[] = {"XREADGROUP", "GROUP", INV_SINK_GROUP, k->consumer, "COUNT",
                          count,        "BLOCK", block,          "STREAMS"};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        argv[argc++] = head[i];
    for (int i = 0; i < k->nstreams; i++)
        if (k->streams[i]->grouped)
            argv[argc++] = k->streams[i]->key, n++;
    for (int i = 0; i < n; i++)
        argv[argc++] = ">";
    /* on_read's stream: any (one Redis reads them all at once) */
    rconn_status st = n > 0
                          ? aconn_command(k->rd, on_read, k->streams[0], argc, argv, NULL)
                          : RCONN_ERR;
    free(argv);
    if (st != RCONN_OK)
        wake_after(k, n > 0 ? SINK_RETRY_MS : SINK_TICK_MS);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct svc_sink *k = arg;
    if (k->phase == SINK_WRITING)
        write_batch(k);
    else
        round_start(k);
}

/* ---- the tick: the registry, the groups, the claims, the lag ---------------- */

static void on_grouped(void *arg, aconn_result res, redisReply *r)
{
    struct sink_stream *s = arg;
    struct svc_sink *k = s->k;
    /* created, or BUSYGROUP: it was there */
    if (res == ACONN_REPLY &&
        (r->type == REDIS_REPLY_STATUS ||
         (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) == 0)))
        s->grouped = 1;
    /* a new stream's events are read now, not at the next tick */
    if (s->grouped && attached(k) && k->phase == SINK_IDLE)
        wake_after(k, 0);
}

static void on_listed(void *arg, aconn_result res, redisReply *r)
{
    struct svc_sink *k = arg;
    if (!attached(k))
        return;
    k->listing = 0;
    for (size_t i = 0; res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY &&
                       i < r->elements && k->nstreams < SINK_MAX_STREAMS;
         i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING || stream_index(k, e->str) >= 0)
            continue;
        if (k->nstreams % 64 == 0)
            k->streams =
                xrealloc(k->streams, sizeof(*k->streams) * (size_t)(k->nstreams + 64));
        struct sink_stream *s = xcalloc(1, sizeof(*s));
        s->k = k;
        s->key = xstrdup(e->str);
        s->news = 1;
        k->streams[k->nstreams++] = s;
    }
    for (int i = 0; i < k->nstreams; i++) {
        struct sink_stream *s = k->streams[i];
        if (s->grouped)
            continue;
        const char *argv[] = {"XGROUP",       "CREATE", s->key,
                              INV_SINK_GROUP, "0",      "MKSTREAM"};
        send_cmd(k, s->key, on_grouped, s, NULL, 0, 6, argv);
    }
    if (k->phase == SINK_IDLE && !evtimer_pending(k->wake, NULL))
        wake_after(k, 0);
}

/* One answer of a tick's measurement came (or will not): the figures are
 * published once the last did. */
static void lag_done(struct svc_sink *k)
{
    if (--k->lag_owed == 0) {
        int64_t age = k->lag_oldest_ms > 0 ? wall_ms() - k->lag_oldest_ms : 0;
        atomic_store(&k->lag_events, k->lag_events_sum);
        atomic_store(&k->lag_age_ms, age > 0 ? age : 0);
    }
}

/* sink_lag.lua's answer for one stream: {events, oldest ms, pending}. */
static void on_lag(void *arg, aconn_result res, redisReply *r)
{
    struct sink_stream *s = arg;
    struct svc_sink *k = s->k;
    if (!attached(k))
        return;
    if (res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        k->lag_events_sum += r->element[0]->integer;
        long long oldest = r->element[1]->integer;
        if (oldest > 0 && (k->lag_oldest_ms == 0 || oldest < k->lag_oldest_ms))
            k->lag_oldest_ms = oldest;
        s->pending = r->element[2]->integer;
        if (r->element[0]->integer > s->pending) { /* some not delivered yet */
            s->news = 1;
            if (k->phase == SINK_IDLE && !evtimer_pending(k->wake, NULL))
                wake_after(k, 0);
        }
    }
    lag_done(k);
}

/* A number field of a group's XINFO GROUPS entry [name, value, ...]; -1 when
 * it is not there or not a number (a lag Redis cannot tell is nil). */
static long long group_field(const redisReply *g, const char *name)
{
    for (size_t i = 0; i + 1 < g->elements; i += 2)
        if (g->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(g->element[i]->str, name) == 0)
            return g->element[i + 1]->type == REDIS_REPLY_INTEGER
                       ? g->element[i + 1]->integer
                       : -1;
    return -1;
}

/* XINFO GROUPS of one stream: an idle one (the sink's group has no event
 * undelivered nor unacknowledged) is measured at that, in one plain command;
 * any other by sink_lag.lua, which finds the oldest's time. */
static void on_groups(void *arg, aconn_result res, redisReply *r)
{
    struct sink_stream *s = arg;
    struct svc_sink *k = s->k;
    if (!attached(k))
        return;
    for (size_t i = 0;
         res == ACONN_REPLY && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *g = r->element[i];
        if (g->type != REDIS_REPLY_ARRAY || g->elements < 2 ||
            g->element[1]->type != REDIS_REPLY_STRING ||
            strcmp(g->element[1]->str, INV_SINK_GROUP) != 0)
            continue;
        if (group_field(g, "lag") == 0 && group_field(g, "pending") == 0) {
            s->pending = 0;
            lag_done(k);
            return;
        }
    }
    const char *argv[] = {s->key, INV_SINK_GROUP};
    if (send_cmd(k, s->key, on_lag, s, &inv_sink_lag_script, 1, 2, argv) != RCONN_OK)
        lag_done(k);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct svc_sink *k = arg;
    if (!k->listing) {
        const char *argv[] = {"SMEMBERS", INV_STREAMS_KEY};
        k->listing =
            send_cmd(k, INV_STREAMS_KEY, on_listed, k, NULL, 0, 2, argv) == RCONN_OK;
    }
    if (k->claim_next < 0)
        k->claim_next = 0; /* a claim pass with the next round */
    if (k->lag_owed == 0) {
        k->lag_events_sum = 0;
        k->lag_oldest_ms = 0;
        k->lag_owed = 1;
        for (int i = 0; i < k->nstreams; i++) {
            const char *argv[] = {"XINFO", "GROUPS", k->streams[i]->key};
            k->lag_owed++;
            if (send_cmd(k, argv[2], on_groups, k->streams[i], NULL, 0, 3, argv) !=
                RCONN_OK)
                k->lag_owed--;
        }
        lag_done(k);
    }
}

/* ---- the handle -------------------------------------------------------------- */

struct svc_sink *svc_sink_new(const char *conninfo, const char *host, int port,
                              const struct rconn_addr *seeds, int nseeds,
                              const char *password, const char *consumer,
                              long long retention_ms)
{
    struct svc_sink *k = xcalloc(1, sizeof(*k));
    k->conninfo = xstrdup(conninfo);
    k->retention_ms = retention_ms > 0 ? retention_ms : 0;
    snprintf(k->host, sizeof(k->host), "%s", host ? host : "");
    k->port = port;
    if (nseeds > 0) {
        k->seeds = xmalloc(sizeof(*seeds) * (size_t)nseeds);
        memcpy(k->seeds, seeds, sizeof(*seeds) * (size_t)nseeds);
        k->nseeds = nseeds;
    }
    k->password = password && *password ? xstrdup(password) : NULL;
    snprintf(k->consumer, sizeof(k->consumer), "%s", consumer);
    const char *crash = getenv("SECKILL_TEST_CRASH");
    snprintf(k->crash_at, sizeof(k->crash_at), "%s", crash ? crash : "");
    k->claim_next = -1;
    k->was_up = -1;
    return k;
}

void svc_sink_attach(struct svc_sink *k, struct event_base *base)
{
    if (!k || k->tick)
        return;
    k->base = base;
    if (k->nseeds > 0) {
        k->cl = acluster_new(base, k->seeds, k->nseeds, k->password, SINK_TIMEOUT_MS);
    } else {
        k->ac = aconn_new(base, k->host, k->port, k->password, SINK_TIMEOUT_MS);
        k->rd = aconn_new(base, k->host, k->port, k->password,
                          SINK_BLOCK_MS + SINK_TIMEOUT_MS);
    }
    k->db = apg_new(base, k->conninfo, SINK_TIMEOUT_MS);
    /* the schema at the start (again before a transaction if this failed) */
    k->schema_sent = apg_query(k->db, on_schema, k, SINK_SCHEMA_SQL, 0, NULL) == APG_OK;
    k->wake = evtimer_new(base, on_wake, k);
    struct timeval every = {SINK_TICK_MS / 1000, (SINK_TICK_MS % 1000) * 1000};
    k->tick = event_new(base, -1, EV_PERSIST, on_tick, k);
    if (!k->tick || !k->wake || event_add(k->tick, &every) != 0)
        abort();
    event_active(k->tick, EV_TIMEOUT, 0);
}

void svc_sink_detach(struct svc_sink *k)
{
    if (!k || !k->tick)
        return;
    event_free(k->tick);
    k->tick = NULL; /* callbacks from here on find it detached */
    event_free(k->wake);
    k->wake = NULL;
    aconn_free(k->rd);
    aconn_free(k->ac);
    acluster_free(k->cl);
    apg_free(k->db);
    k->rd = k->ac = NULL;
    k->cl = NULL;
    k->db = NULL;
    sink_batch_clear(&k->b);
    k->phase = SINK_IDLE;
    k->listing = 0;
    k->lag_owed = 0;
}

void svc_sink_free(struct svc_sink *k)
{
    if (!k)
        return;
    svc_sink_detach(k);
    for (int i = 0; i < k->nstreams; i++) {
        free(k->streams[i]->key);
        free(k->streams[i]);
    }
    free(k->streams);
    sink_batch_free(&k->b);
    free(k->singles);
    free(k->seeds);
    free(k->password);
    free(k->conninfo);
    free(k);
}

void svc_sink_stats(const struct svc_sink *k, struct svc_sink_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!k)
        return;
    out->events = atomic_load(&k->events);
    out->batches = atomic_load(&k->batches);
    out->claimed = atomic_load(&k->claimed);
    out->errors = atomic_load(&k->errors);
    out->skipped = atomic_load(&k->skipped);
    out->dead_letters = atomic_load(&k->dead_letters);
    out->lag_events = atomic_load(&k->lag_events);
    out->lag_seconds = (double)atomic_load(&k->lag_age_ms) / 1000.0;
    out->up = atomic_load(&k->up);
}
