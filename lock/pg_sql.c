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
 * lock's release does, waking readers and writers alike.
 *
 * Plain locks that are readers of a read-write lock (a SKU's segment locks,
 * lock_step_read_of) keep the read side in their own row: seckill_locks has
 * writer_until, added where an older build made the table without it. A
 * write side over them (lock_rw_write_over: over, below) marks their rows,
 * and such a lock's attempt (reader) is refused while its row's mark runs.
 * The mark is on the reader's own row, not in the read-write lock's: a
 * reader's UPDATE that read another table could miss a writer that
 * committed after its snapshot (write skew under READ COMMITTED); two
 * UPDATEs of one row cannot. */
#include "pg_sql.h"

#include "pg_lease.h" /* PG_CHANNEL */

/* Now and the database's clock in microseconds since the epoch. */
#define NOW_US "(extract(epoch FROM now()) * 1000000)::bigint"
#define CLOCK_US "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
#define MS "* interval '1 millisecond'"
#define NOTIFY "RETURNING pg_notify('" PG_CHANNEL "', key)"

/* The plain lock's table, and its writer_until where a table made before it
 * has none (a column nothing of an older build names): one statement, which
 * takes no lock on a table that has the column. */
#define PLAIN_TABLE                                                                      \
    "DO $d$ BEGIN CREATE TABLE IF NOT EXISTS seckill_locks (key text PRIMARY KEY, "      \
    "owner text, expires_at timestamptz, version bigint NOT NULL DEFAULT 0, "            \
    "writer_until timestamptz); "                                                        \
    "IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "                        \
    "'seckill_locks'::regclass AND attname = 'writer_until' AND NOT attisdropped) "      \
    "THEN ALTER TABLE seckill_locks ADD COLUMN IF NOT EXISTS writer_until timestamptz; " \
    "END IF; END $d$"
#define PLAIN_ROW "INSERT INTO seckill_locks (key) VALUES ($1) ON CONFLICT DO NOTHING"
#define PLAIN_RELEASE                                                                    \
    "UPDATE seckill_locks SET owner = NULL, expires_at = NULL "                          \
    "WHERE key = $1 AND owner = $2 AND version = $3::bigint " NOTIFY
#define PLAIN_LET_GO                                                                     \
    "UPDATE seckill_locks SET owner = NULL, expires_at = NULL "                          \
    "WHERE key = $1 AND owner = $2 " NOTIFY
#define PLAIN_RENEW                                                                      \
    "UPDATE seckill_locks SET expires_at = now() + $4::int " MS " "                      \
    "WHERE key = $1 AND owner = $2 AND version = $3::bigint "                            \
    "AND expires_at >= now() RETURNING version"

static const struct pg_sql plain = {
    .table = PLAIN_TABLE,
    .row = PLAIN_ROW,
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
    .release = PLAIN_RELEASE,
    .let_go = PLAIN_LET_GO,
    .renew = PLAIN_RENEW,
};

/* The plain lock as a reader of a read-write lock (lock_step_read_of): also
 * refused while its row's writer_until runs, which a writer that waits for
 * it or holds sets (over, below) in the same row: the writer's statement and
 * this one are ordered by the row's lock, and whichever comes second reads
 * the first one's row (READ COMMITTED reads an UPDATE's condition again on
 * the row a concurrent one left). Its own earlier try's grant (owner = $2)
 * is its already. */
static const struct pg_sql reader = {
    .table = PLAIN_TABLE,
    .row = PLAIN_ROW,
    .acquire =
        "WITH prev AS (SELECT owner, expires_at, writer_until FROM seckill_locks "
        "WHERE key = $1), "
        "got AS (UPDATE seckill_locks SET owner = $2, "
        "expires_at = now() + $3::int " MS ", "
        "version = greatest(version + 1, " CLOCK_US ") "
        "WHERE key = $1 AND (owner IS NULL OR expires_at < now() OR owner = $2) "
        "AND (writer_until IS NULL OR writer_until < now() "
        "OR (owner = $2 AND expires_at >= now())) "
        "RETURNING version) "
        "SELECT (SELECT version FROM got), (SELECT count(*) FROM prev), "
        "(SELECT ceil(extract(epoch FROM greatest("
        "CASE WHEN owner IS NOT NULL THEN expires_at END, "
        "CASE WHEN writer_until >= now() THEN writer_until END) - now()) * 1000)::bigint "
        "FROM prev)",
    .nparams = 3,
    .release = PLAIN_RELEASE,
    .let_go = PLAIN_LET_GO,
    .renew = PLAIN_RENEW,
};

#define RW_TABLE                                                                         \
    "CREATE TABLE IF NOT EXISTS seckill_rwlocks (key text PRIMARY KEY, writer text, "    \
    "writer_expires timestamptz, version bigint NOT NULL DEFAULT 0, intent text, "       \
    "intent_expires timestamptz, readers jsonb NOT NULL DEFAULT '{}')"
#define RW_ROW "INSERT INTO seckill_rwlocks (key) VALUES ($1) ON CONFLICT DO NOTHING"
/* A reader's lease still runs (e: a member of readers). */
#define LIVE "(e.v)::bigint >= " NOW_US
/* A plain lock's row is held. */
#define HELD "owner IS NOT NULL AND expires_at >= now()"

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

/* The write side's pieces, its own statements' and over's (below): the
 * grant's SET; its condition on the key's row (cond: the readers' of over);
 * wait, which leaves the intent (only when got did not take the row: two
 * updates of one row in one statement); the lease left of the writer and of
 * the readers in the row (prev); the let-go's SET and condition. */
#define WRITE_GOT(cond)                                                                  \
    "got AS (UPDATE seckill_rwlocks SET writer = $2, "                                   \
    "writer_expires = now() + $3::int " MS ", "                                          \
    "version = greatest(version + 1, " CLOCK_US "), readers = '{}', "                    \
    "intent = CASE WHEN intent = $2 THEN NULL ELSE intent END, "                         \
    "intent_expires = CASE WHEN intent = $2 THEN NULL ELSE intent_expires END "          \
    "WHERE key = $1 AND (writer IS NULL OR writer_expires < now() OR writer = $2) "      \
    "AND NOT EXISTS (SELECT 1 FROM jsonb_each(readers) AS e(k, v) WHERE " LIVE ") " cond \
    "RETURNING version), "
#define WRITE_WAIT                                                                       \
    "wait AS (UPDATE seckill_rwlocks SET intent = $2, "                                  \
    "intent_expires = now() + $4::int " MS " "                                           \
    "WHERE key = $1 AND $4::int > 0 AND NOT EXISTS (SELECT 1 FROM got) "                 \
    "AND (intent IS NULL OR intent_expires < now() OR intent = $2) RETURNING 1) "
#define WRITE_LEFT                                                                       \
    "CASE WHEN writer_expires >= now() "                                                 \
    "THEN extract(epoch FROM writer_expires - now()) * 1000 END, "                       \
    "(SELECT max((e.v)::bigint) - " NOW_US " FROM jsonb_each(readers) AS e(k, v) "       \
    "WHERE " LIVE ") / 1000.0"
#define WRITE_LET_GO                                                                     \
    "UPDATE seckill_rwlocks SET "                                                        \
    "writer = CASE WHEN writer = $2 THEN NULL ELSE writer END, "                         \
    "writer_expires = CASE WHEN writer = $2 THEN NULL ELSE writer_expires END, "         \
    "intent = CASE WHEN intent = $2 THEN NULL ELSE intent END, "                         \
    "intent_expires = CASE WHEN intent = $2 THEN NULL ELSE intent_expires END "          \
    "WHERE key = $1 AND (writer = $2 OR intent = $2) "

/* Two updates of one row in one statement: got takes it, wait (only when got
 * did not) leaves the intent. */
static const struct pg_sql write_side = {
    .table = RW_TABLE,
    .row = RW_ROW,
    .acquire = "WITH prev AS (SELECT writer_expires, readers FROM seckill_rwlocks "
               "WHERE key = $1), " WRITE_GOT("") WRITE_WAIT
    "SELECT (SELECT version FROM got), (SELECT count(*) FROM prev), "
    "(SELECT ceil(greatest(" WRITE_LEFT "))::bigint FROM prev)",
    .nparams = 4,
    .release = "UPDATE seckill_rwlocks SET writer = NULL, writer_expires = NULL "
               "WHERE key = $1 AND writer = $2 AND version = $3::bigint " NOTIFY,
    .let_go = WRITE_LET_GO NOTIFY,
    .renew = "UPDATE seckill_rwlocks SET writer_expires = now() + $4::int " MS " "
             "WHERE key = $1 AND writer = $2 AND version = $3::bigint "
             "AND writer_expires >= now() RETURNING version",
};

/* The plain locks "<$p>0".."<$p>($n - 1)": the readers a write side counts. */
#define SEGS(p, n)                                                                       \
    "(SELECT " p "::text || i FROM generate_series(0, " n "::int - 1) AS i)"
#define NOTIFY_KEY(t) "pg_notify('" PG_CHANNEL "', " t "key)"
/* What a writer's release or let_go leaves on its readers' rows (rel: the
 * key's row as it left it): the lease of a writer that holds, or the intent
 * of one that waits, or nothing. Exact: a mark above them is of a writer
 * that no longer holds or waits. */
#define MARK_LEFT                                                                        \
    "(SELECT greatest(CASE WHEN writer IS NOT NULL AND writer_expires >= now() "         \
    "THEN writer_expires END, CASE WHEN intent IS NOT NULL AND intent_expires >= now() " \
    "THEN intent_expires END) FROM rel)"
/* The end of a release's or a let-go's statement, after its UPDATE of the
 * key's row (rel): the readers' rows ("<$p>0".."<$p>($n - 1)") marked down to
 * MARK_LEFT, and every key NOTIFYed; a row when the key's row changed. */
#define OFF_MARKS(p, n)                                                                  \
    "RETURNING key, writer, writer_expires, intent, intent_expires, " NOTIFY_KEY(        \
        "") "), clr AS (UPDATE seckill_locks SET writer_until = " MARK_LEFT " "          \
            "WHERE key IN " SEGS(p, n) " AND EXISTS (SELECT 1 FROM rel) "                \
                                       "RETURNING " NOTIFY_KEY("") ") SELECT 1 FROM rel"

/* The write side over readers that are plain locks (lock_rw_write_over):
 * the write side's statements, each also on the readers' rows, which it
 * locks after the key's row. An attempt locks the readers' rows, is granted
 * only when none is held, and marks them (writer_until) for its lease when
 * granted, for its intent when it waits: a reader's attempt is refused
 * while the mark runs (reader, above). The watchdog's renewal moves the
 * marks on with the lease; a release, and a let_go (a writer that ends
 * without its grant, or a grant nobody took), set them to what is left of
 * the writers (another's lease or intent: MARK_LEFT) and NOTIFY each
 * reader's key. Every statement here locks the key's row before the
 * readers' (an attempt's readers only once prev has it; a release's, a
 * let_go's and a renewal's once rel or rn changed it): writers of one key
 * take turns on that row, and a reader locks only its own row, so no two
 * of them wait for each other round a ring. */
/* clang-format off */
static const struct pg_sql over = {
    .table = RW_TABLE,
    .row = "WITH r AS (INSERT INTO seckill_locks (key) SELECT k FROM " SEGS("$2", "$3")
           " AS s(k) ON CONFLICT DO NOTHING) " RW_ROW,
    .acquire =
        "WITH prev AS (SELECT writer_expires, readers FROM seckill_rwlocks "
        "WHERE key = $1 FOR UPDATE), "
        "lk AS (SELECT count(*) FILTER (WHERE " HELD ") AS busy, "
        "max(expires_at) FILTER (WHERE " HELD ") AS until FROM "
        "(SELECT owner, expires_at FROM seckill_locks WHERE key IN " SEGS("$5", "$6")
        " AND EXISTS (SELECT 1 FROM prev) ORDER BY key FOR UPDATE) AS s), "
        WRITE_GOT("AND (SELECT busy FROM lk) = 0 ") WRITE_WAIT ", "
        "marks AS (UPDATE seckill_locks SET writer_until = greatest(writer_until, now() + "
        "CASE WHEN EXISTS (SELECT 1 FROM got) THEN $3::int ELSE $4::int END " MS ") "
        "WHERE key IN " SEGS("$5", "$6") " AND EXISTS (SELECT 1 FROM prev) "
        "AND (EXISTS (SELECT 1 FROM got) OR $4::int > 0) RETURNING 1) "
        "SELECT (SELECT version FROM got), (SELECT count(*) FROM prev), "
        "(SELECT ceil(greatest(" WRITE_LEFT ", "
        "(SELECT extract(epoch FROM until - now()) * 1000 FROM lk)))::bigint FROM prev)",
    .nparams = 6,
    .release =
        "WITH rel AS (UPDATE seckill_rwlocks SET writer = NULL, writer_expires = NULL "
        "WHERE key = $1 AND writer = $2 AND version = $3::bigint "
        OFF_MARKS("$4", "$5"),
    .let_go =
        "WITH rel AS (" WRITE_LET_GO OFF_MARKS("$3", "$4"),
    .renew =
        "WITH rn AS (UPDATE seckill_rwlocks SET writer_expires = now() + $4::int " MS " "
        "WHERE key = $1 AND writer = $2 AND version = $3::bigint "
        "AND writer_expires >= now() RETURNING version, writer_expires), "
        "mk AS (UPDATE seckill_locks SET writer_until = greatest(writer_until, "
        "(SELECT writer_expires FROM rn)) WHERE key IN " SEGS("$5", "$6")
        " AND EXISTS (SELECT 1 FROM rn)) "
        "SELECT version FROM rn",
    .segs = 1,
};
/* clang-format on */

const struct pg_sql *pg_sql_of(lock_side side)
{
    return side == LOCK_READ ? &read_side : side == LOCK_WRITE ? &write_side : &plain;
}

const struct pg_sql *pg_sql_reading(void)
{
    return &reader;
}

const struct pg_sql *pg_sql_over(void)
{
    return &over;
}
