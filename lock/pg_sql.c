/* pg_sql: the pg lock's statements (see pg_sql.h).
 *
 * The plain lock, one row per key (lock_pg.c says how it is taken):
 *
 *   seckill_locks (key text PRIMARY KEY, owner text, expires_at timestamptz,
 *                  version bigint NOT NULL DEFAULT 0)
 *
 * The read-write lock, one row per key in a table of its own, so that a
 * table of the plain lock made before it (by any version) is used as it is
 * and no statement of one lock can see the other's rows:
 *
 *   seckill_rwlocks (key text PRIMARY KEY,
 *                    writer text, writer_expires timestamptz,  the write side
 *                    version bigint NOT NULL DEFAULT 0,        its token
 *                    intent text, intent_expires timestamptz,  a waiting writer
 *                    readers jsonb NOT NULL DEFAULT '{}')      owner -> lease end
 *
 * Each reader is a member of readers, its value the end of its own lease
 * (microseconds since the epoch, on the database's clock): a reader's lease
 * runs out by itself, and whoever takes the row next leaves the run-out
 * members behind. Every attempt is one conditional UPDATE of the key's row,
 * so that two of them on one key are ordered by its row lock (and the second
 * one's condition read again on the row the first one left: READ COMMITTED's
 * rule for an UPDATE that waited):
 * - a read is granted when no writer's lease and no waiting writer's intent
 *   is live: its member is added (run-out members dropped);
 * - a write is granted when no writer's lease (but its own, an earlier try
 *   of the same acquire) and no reader's is live: the row becomes its
 *   (version moved on, as the plain lock's: the token; readers emptied; its
 *   own intent cleared). Not granted and waiting, it leaves its intent
 *   (unless another writer's is live) for a short lease each attempt
 *   renews: new readers are refused while it lives (writer preference).
 * A release, and a writer's intent let go, NOTIFY the key as the plain
 * lock's release does, waking readers and writers alike. */
#include "pg_sql.h"

#include "pg_lease.h" /* PG_CHANNEL */

/* Now and the database's clock in microseconds since the epoch. */
#define NOW_US "(extract(epoch FROM now()) * 1000000)::bigint"
#define CLOCK_US "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
#define MS "* interval '1 millisecond'"
#define NOTIFY "RETURNING pg_notify('" PG_CHANNEL "', key)"

static const struct pg_sql plain = {
    .table = "CREATE TABLE IF NOT EXISTS seckill_locks (key text PRIMARY KEY, "
             "owner text, expires_at timestamptz, version bigint NOT NULL DEFAULT 0)",
    .row = "INSERT INTO seckill_locks (key) VALUES ($1) ON CONFLICT DO NOTHING",
    .acquire =
        "WITH prev AS (SELECT owner, expires_at FROM seckill_locks WHERE key = $1), "
        "got AS (UPDATE seckill_locks SET owner = $2, "
        "expires_at = now() + $3::int " MS ", "
        "version = greatest(version + 1, " CLOCK_US ") "
        "WHERE key = $1 AND (owner IS NULL OR expires_at < now() OR owner = $2) "
        "RETURNING version) "
        "SELECT (SELECT version FROM got), (SELECT count(*) FROM prev), "
        "(SELECT ceil(extract(epoch FROM expires_at - now()) * 1000)::bigint "
        "FROM prev WHERE owner IS NOT NULL)",
    .nparams = 3,
    .release = "UPDATE seckill_locks SET owner = NULL, expires_at = NULL "
               "WHERE key = $1 AND owner = $2 AND version = $3::bigint " NOTIFY,
    .let_go = "UPDATE seckill_locks SET owner = NULL, expires_at = NULL "
              "WHERE key = $1 AND owner = $2 " NOTIFY,
    .renew = "UPDATE seckill_locks SET expires_at = now() + $4::int " MS " "
             "WHERE key = $1 AND owner = $2 AND version = $3::bigint "
             "AND expires_at >= now() RETURNING version",
};

#define RW_TABLE                                                                         \
    "CREATE TABLE IF NOT EXISTS seckill_rwlocks (key text PRIMARY KEY, writer text, "    \
    "writer_expires timestamptz, version bigint NOT NULL DEFAULT 0, intent text, "       \
    "intent_expires timestamptz, readers jsonb NOT NULL DEFAULT '{}')"
#define RW_ROW "INSERT INTO seckill_rwlocks (key) VALUES ($1) ON CONFLICT DO NOTHING"
/* A reader's lease still runs (e: a member of readers). */
#define LIVE "(e.v)::bigint >= " NOW_US

static const struct pg_sql read_side = {
    .table = RW_TABLE,
    .row = RW_ROW,
    .acquire =
        "WITH prev AS (SELECT writer_expires, intent_expires FROM seckill_rwlocks "
        "WHERE key = $1), "
        "got AS (UPDATE seckill_rwlocks SET readers = "
        "(SELECT coalesce(jsonb_object_agg(e.k, e.v), '{}'::jsonb) "
        "FROM jsonb_each(readers) AS e(k, v) WHERE " LIVE ") "
        "|| jsonb_build_object($2::text, " NOW_US " + $3::bigint * 1000) "
        "WHERE key = $1 AND (writer IS NULL OR writer_expires < now()) "
        "AND (intent IS NULL OR intent_expires < now()) RETURNING 1) "
        "SELECT (SELECT 1 FROM got), (SELECT count(*) FROM prev), "
        "(SELECT ceil(extract(epoch FROM greatest("
        "CASE WHEN writer_expires >= now() THEN writer_expires END, "
        "CASE WHEN intent_expires >= now() THEN intent_expires END) - now()) * 1000)"
        "::bigint FROM prev)",
    .nparams = 3,
    .release = "UPDATE seckill_rwlocks SET readers = readers - $2::text "
               "WHERE key = $1 AND readers ? $2::text AND $3::bigint IS NOT NULL " NOTIFY,
    .let_go = "UPDATE seckill_rwlocks SET readers = readers - $2::text "
              "WHERE key = $1 AND readers ? $2::text " NOTIFY,
    .renew = "UPDATE seckill_rwlocks SET readers = jsonb_set(readers, ARRAY[$2::text], "
             "to_jsonb(" NOW_US " + $4::bigint * 1000)) "
             "WHERE key = $1 AND $3::bigint IS NOT NULL "
             "AND (readers ->> $2::text)::bigint >= " NOW_US " RETURNING version",
};

/* Two updates of one row in one statement: got takes it, wait (only when got
 * did not) leaves the intent. */
static const struct pg_sql write_side = {
    .table = RW_TABLE,
    .row = RW_ROW,
    .acquire =
        "WITH prev AS (SELECT writer_expires, readers FROM seckill_rwlocks "
        "WHERE key = $1), "
        "got AS (UPDATE seckill_rwlocks SET writer = $2, "
        "writer_expires = now() + $3::int " MS ", "
        "version = greatest(version + 1, " CLOCK_US "), readers = '{}', "
        "intent = CASE WHEN intent = $2 THEN NULL ELSE intent END, "
        "intent_expires = CASE WHEN intent = $2 THEN NULL ELSE intent_expires END "
        "WHERE key = $1 AND (writer IS NULL OR writer_expires < now() OR writer = $2) "
        "AND NOT EXISTS (SELECT 1 FROM jsonb_each(readers) AS e(k, v) WHERE " LIVE ") "
        "RETURNING version), "
        "wait AS (UPDATE seckill_rwlocks SET intent = $2, "
        "intent_expires = now() + $4::int " MS " "
        "WHERE key = $1 AND $4::int > 0 AND NOT EXISTS (SELECT 1 FROM got) "
        "AND (intent IS NULL OR intent_expires < now() OR intent = $2) RETURNING 1) "
        "SELECT (SELECT version FROM got), (SELECT count(*) FROM prev), "
        "(SELECT ceil(greatest("
        "CASE WHEN writer_expires >= now() "
        "THEN extract(epoch FROM writer_expires - now()) * 1000 END, "
        "(SELECT max((e.v)::bigint) - " NOW_US " FROM jsonb_each(readers) AS e(k, v) "
        "WHERE " LIVE ") / 1000.0))::bigint FROM prev)",
    .nparams = 4,
    .release = "UPDATE seckill_rwlocks SET writer = NULL, writer_expires = NULL "
               "WHERE key = $1 AND writer = $2 AND version = $3::bigint " NOTIFY,
    .let_go = "UPDATE seckill_rwlocks SET "
              "writer = CASE WHEN writer = $2 THEN NULL ELSE writer END, "
              "writer_expires = CASE WHEN writer = $2 THEN NULL ELSE writer_expires END, "
              "intent = CASE WHEN intent = $2 THEN NULL ELSE intent END, "
              "intent_expires = CASE WHEN intent = $2 THEN NULL ELSE intent_expires END "
              "WHERE key = $1 AND (writer = $2 OR intent = $2) " NOTIFY,
    .renew = "UPDATE seckill_rwlocks SET writer_expires = now() + $4::int " MS " "
             "WHERE key = $1 AND writer = $2 AND version = $3::bigint "
             "AND writer_expires >= now() RETURNING version",
};

const struct pg_sql *pg_sql_of(lock_side side)
{
    return side == LOCK_READ ? &read_side : side == LOCK_WRITE ? &write_side : &plain;
}
