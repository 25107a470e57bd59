/* test_sink_pg: the sink's statements (service/sink_batch.h, sink.h) and
 * its connection (pg/apg.h) against a real PostgreSQL, one per binary:
 *
 *   - an error PostgreSQL reports at the commit itself (a deferred
 *     constraint), after the statement's own result, is the query's answer:
 *     apg never reports such a query as done, and the queries pipelined
 *     with it get their own answers;
 *   - pay_by reaches the order's row whatever the order its events arrive
 *     in: a reservation's pending event and its end in one batch, the end in
 *     one batch and the pending event in a later one, or in order;
 *   - an event PostgreSQL cannot store (an order id beyond bigint, units
 *     beyond int, a pay_by beyond to_timestamp's range) fails its statement,
 *     and any batch with it, with a data error (SQLSTATE class 22), which the
 *     sink tells from a database that is away; the dead letters' statement
 *     stores what cannot be stored, with its error, once;
 *   - an order's segments (schema 3) reach its row whatever the order its
 *     events arrive in, also for a row made before schema 3; the migration
 *     from schema 2 keeps the rows; and the row reads back (store.h) as the
 *     order GET /orders/{id} answers: pay_by to the millisecond, a row
 *     without segments as not known, an order never stored, a database away;
 *   - a merchant's change (PATCH's event, schema 4) in a batch with orders'
 *     events is stored once, applied again (a claim after a crash) changes
 *     nothing, and the store reads a generation's changes as their sums. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apg.h"
#include "clock.h"
#include "sink.h"
#include "sink_batch.h"
#include "store.h"
#include "testutil.h"

static struct test_pg pg;

/* Runs q on the test server (a connection of its own); its first value, or ""
 * (static buffer). Fails the test on an error. */
static const char *sql(const char *q)
{
    static char out[256];
    out[0] = '\0';
    PGconn *c = PQconnectdb(pg.url);
    PGresult *r = PQexec(c, q);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(out, sizeof(out), "%s", PQgetvalue(r, 0, 0));
    else if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", q, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return out;
}

static int group_setup(void **state)
{
    (void)state;
    test_pg_start(&pg, NULL);
    sql(SINK_SCHEMA_SQL);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    test_pg_stop(&pg, 0, 0);
    return 0;
}

/* ---- apg: every result up to the sync point ------------------------------- */

/* What became of one query. */
struct answer {
    int done;
    apg_outcome res;
    ExecStatusType status;
    char sqlstate[6];
    char value[64]; /* the first value of a row, if any */
};

static void on_answer(void *arg, apg_outcome res, PGresult *r)
{
    struct answer *a = arg;
    a->done = 1;
    a->res = res;
    if (res != APG_RESULT)
        return;
    a->status = PQresultStatus(r);
    const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(a->sqlstate, sizeof(a->sqlstate), "%s", st ? st : "");
    if (a->status == PGRES_TUPLES_OK && PQntuples(r) > 0)
        snprintf(a->value, sizeof(a->value), "%s", PQgetvalue(r, 0, 0));
}

/* Queues the n queries together (one turn: one pipeline) on a new connection
 * and drives its loop until each has its answer (10 s: a busy machine's
 * connection and statements take well under 1 s). */
static void run_queries(const char *const *queries, struct answer *a, int n)
{
    struct event_base *base = event_base_new();
    struct apg *c = apg_new(base, pg.url, 5000);
    for (int i = 0; i < n; i++) {
        a[i] = (struct answer){0};
        assert_int_equal(apg_query(c, on_answer, &a[i], queries[i], 0, NULL), APG_OK);
    }
    int64_t deadline = clock_now_us() + 10000000;
    while (!a[n - 1].done && clock_now_us() < deadline) {
        struct timeval tv = {0, 50000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    for (int i = 0; i < n; i++)
        assert_true(a[i].done);
    apg_free(c);
    event_base_free(base);
}

/* A deferred foreign key is checked at the commit, after the INSERT's own
 * result (INSERT 0 1) came: the commit fails and the row is not there. The
 * query's answer must be that failure, never the INSERT's success (the sink
 * would acknowledge events whose transaction was rolled back); the query
 * behind it in the same pipeline runs, and answers, by itself. */
static void test_commit_error_is_the_answer(void **state)
{
    (void)state;
    sql("CREATE TABLE apg_deferred (id int PRIMARY KEY, ref int REFERENCES apg_deferred "
        "DEFERRABLE INITIALLY DEFERRED)");
    const char *q[] = {
        "SELECT 41 + 1",
        "INSERT INTO apg_deferred VALUES (1, 2)", /* no row 2: refused at the commit */
        "INSERT INTO apg_deferred VALUES (3, 3)", /* refers to itself: commits */
        "SELECT count(*) FROM apg_deferred",
    };
    struct answer a[4];
    run_queries(q, a, 4);
    assert_int_equal(a[0].res, APG_RESULT);
    assert_int_equal(a[0].status, PGRES_TUPLES_OK);
    assert_string_equal(a[0].value, "42");
    assert_int_equal(a[1].res, APG_RESULT);
    if (a[1].status == PGRES_COMMAND_OK)
        fail_msg("a commit that failed (deferred foreign key) was answered as done");
    assert_int_equal(a[1].status, PGRES_FATAL_ERROR);
    assert_string_equal(a[1].sqlstate, "23503");
    assert_int_equal(a[2].res, APG_RESULT);
    assert_int_equal(a[2].status, PGRES_COMMAND_OK);
    assert_int_equal(a[3].status, PGRES_TUPLES_OK);
    assert_string_equal(a[3].value, "1");
    assert_string_equal(sql("SELECT count(*) FROM apg_deferred WHERE id = 1"), "0");
    sql("DROP TABLE apg_deferred");
}


/* ---- the batch's statement -------------------------------------------------- */

/* Applies one batch of events (ids[i], fields[i]) of stream "sk:{t}:events"
 * as the sink does (SINK_APPLY_SQL); the statement's status, and its SQLSTATE
 * in sqlstate (6 bytes) when it failed. */
static ExecStatusType apply(int n, const char *const *ids, const char *const *fields,
                            char *sqlstate)
{
    struct sink_batch b = {0};
    for (int i = 0; i < n; i++) {
        struct test_entry e;
        sink_batch_add(&b, 0, "sk:{t}:events", ids[i], test_entry_of(&e, fields[i]));
    }
    assert_int_equal(b.valid, n);
    const char *params[] = {sink_batch_close(&b)};
    PGconn *c = PQconnectdb(pg.url);
    PGresult *r = PQexecParams(c, SINK_APPLY_SQL, 1, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (sqlstate)
        snprintf(sqlstate, 6, "%s", code ? code : "");
    if (st != PGRES_COMMAND_OK && !sqlstate)
        fail_msg("the batch failed: %s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
    sink_batch_free(&b);
    return st;
}

/* What expression what says of order id's row (static buffer, as sql's). */
static const char *order_says(const char *what, long long id)
{
    char q[512];
    snprintf(q, sizeof(q), "SELECT %s FROM seckill_orders WHERE order_id = %lld", what, id);
    return sql(q);
}

/* The order's row: "state pay_by-in-ms payment_id" (pay_by "-" when NULL). */
static const char *order_row(long long id)
{
    return order_says("state || ' ' || coalesce((extract(epoch FROM pay_by) * "
                      "1000)::bigint::text, '-') || ' ' || coalesce(payment_id, '-')",
                      id);
}

#define EV(o, s, extra) "o=" #o " s=" s " k=t u=alice q=1 g=1" extra
#define PAY_BY " b=1700000004000"

/* A reservation's pending event and its end, in one batch (a backlog after
 * an outage, a claim): the row is the end's, with the pending event's
 * pay_by. */
static void test_pay_by_pending_and_end_in_one_batch(void **state)
{
    (void)state;
    const char *ids[] = {"1700000000000-0", "1700000001000-0"};
    const char *f1[] = {EV(101, "pending", PAY_BY), EV(101, "expired", "")};
    apply(2, ids, f1, NULL);
    assert_string_equal(order_row(101), "expired 1700000004000 -");
    const char *f2[] = {EV(102, "pending", PAY_BY), EV(102, "paid", " p=pay-102")};
    const char *ids2[] = {"1700000000000-1", "1700000001000-1"};
    apply(2, ids2, f2, NULL);
    assert_string_equal(order_row(102), "paid 1700000004000 pay-102");
}

/* The end first (its pending event claimed later from a consumer that died
 * with it), then the pending event: the row keeps the end's state and
 * payment, and takes the pay_by. Then both again (a replay): nothing
 * changes. */
static void test_pay_by_end_before_pending(void **state)
{
    (void)state;
    const char *end_id[] = {"1700000001000-2"}, *end[] = {EV(103, "paid", " p=pay-103")};
    const char *pend_id[] = {"1700000000000-2"}, *pend[] = {EV(103, "pending", PAY_BY)};
    apply(1, end_id, end, NULL);
    assert_string_equal(order_row(103), "paid - pay-103");
    apply(1, pend_id, pend, NULL);
    assert_string_equal(order_row(103), "paid 1700000004000 pay-103");
    const char *both_id[] = {"1700000000000-2", "1700000001000-2"};
    const char *both[] = {pend[0], end[0]};
    apply(2, both_id, both, NULL);
    assert_string_equal(order_row(103), "paid 1700000004000 pay-103");
    assert_string_equal(sql("SELECT count(*) FROM seckill_events WHERE order_id = 103"), "2");
}

/* In order, in two batches: pending, then cancelled. And a placed order (no
 * payment window) has no pay_by. */
static void test_pay_by_in_order(void **state)
{
    (void)state;
    const char *id1[] = {"1700000000000-3"}, *f1[] = {EV(104, "pending", PAY_BY)};
    const char *id2[] = {"1700000001000-3"}, *f2[] = {EV(104, "cancelled", "")};
    apply(1, id1, f1, NULL);
    assert_string_equal(order_row(104), "pending 1700000004000 -");
    apply(1, id2, f2, NULL);
    assert_string_equal(order_row(104), "cancelled 1700000004000 -");
    const char *id3[] = {"1700000000000-4"}, *f3[] = {EV(105, "placed", "")};
    apply(1, id3, f3, NULL);
    assert_string_equal(order_row(105), "placed - -");
}

/* ---- what cannot be stored ------------------------------------------------- */

/* Each of these passes the sink's own checks (19 digits at most) and is
 * refused by PostgreSQL for its data (SQLSTATE class 22), alone and with a
 * good event beside it: the batch's statement fails whole, every time. */
static void test_poison_events_are_data_errors(void **state)
{
    (void)state;
    static const char *const poison[] = {
        "o=9223372036854775808 s=placed k=t u=alice q=1 g=1",   /* 2^63: beyond bigint */
        "o=201 s=placed k=t u=alice q=2147483648 g=1",          /* 2^31: beyond int */
        "o=202 s=pending k=t u=alice q=1 g=1 b=9223372036854775807", /* no timestamp */
    };
    char code[6];
    for (size_t i = 0; i < sizeof(poison) / sizeof(poison[0]); i++) {
        const char *ids[] = {"1700000000000-9", "1700000000001-9"};
        const char *one[] = {poison[i]};
        assert_int_equal(apply(1, ids, one, code), PGRES_FATAL_ERROR);
        assert_memory_equal(code, "22", 2);
        const char *two[] = {EV(203, "placed", ""), poison[i]};
        assert_int_equal(apply(2, ids, two, code), PGRES_FATAL_ERROR);
        assert_memory_equal(code, "22", 2);
    }
    assert_string_equal(sql("SELECT count(*) FROM seckill_orders WHERE order_id IN (201, 202, 203)"),
                        "0");
}

/* The dead letters' statement stores each once, with its error: one event
 * the sink skipped (bytes JSON would escape, not UTF-8) and one the database
 * refused (its row as sent). */
static void test_dead_letters_stored_once(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    struct test_entry e;
    sink_batch_add(&b, 0, "sk:{t}:events", "1700000000000-7",
                   test_entry_of(&e, "o=204 s=placed k=t u=a\"\xff\\ q=1 g=1"));
    sink_batch_add(&b, 0, "sk:{t}:events", "1700000000001-7",
                   test_entry_of(&e, "o=9223372036854775808 s=placed k=t u=alice q=1 g=1"));
    assert_int_equal(b.skipped, 1);
    assert_int_equal(b.valid, 1);
    sink_batch_kill(&b, 0, "sk:{t}:events", "value \"9223372036854775808\" is out of range");
    char *rows = sink_batch_dead_rows(&b);
    const char *params[] = {rows};
    for (int i = 0; i < 2; i++) {
        PGconn *c = PQconnectdb(pg.url);
        PGresult *r = PQexecParams(c, SINK_DEAD_SQL, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            fail_msg("dead letters: %s", PQresultErrorMessage(r));
        PQclear(r);
        PQfinish(c);
    }
    free(rows);
    sink_batch_free(&b);
    assert_string_equal(sql("SELECT count(*) FROM seckill_dead_letters"), "2");
    assert_string_equal(
        sql("SELECT fields || ' | ' || error FROM seckill_dead_letters WHERE event_id = "
            "'1700000000000-7'"),
        "o=204 s=placed k=t u=a\"\\xff\\x5c q=1 g=1 | not an event of the outbox scripts");
    assert_string_equal(
        sql("SELECT error FROM seckill_dead_letters WHERE event_id = '1700000000001-7'"),
        "value \"9223372036854775808\" is out of range");
    assert_string_equal(sql("SELECT fields LIKE '%\"o\":\"9223372036854775808\"%' FROM "
                            "seckill_dead_letters WHERE event_id = '1700000000001-7'"),
                        "t");
    sql("DELETE FROM seckill_dead_letters");
}

/* ---- the segments (schema 3) and the order read back ------------------------- */

#define SEG " e=3 m=3:2,7:1"

/* The row's "segment segments" ("-" for NULL). */
static const char *segments_of(long long id)
{
    return order_says("coalesce(segment::text, '-') || ' ' || coalesce(segments, '-')", id);
}

/* Every event carries them: in one batch, the end first, or a row whose
 * first events came from a build before schema 3 (none) and whose end
 * brings them. */
static void test_segments_whatever_the_order(void **state)
{
    (void)state;
    const char *ids[] = {"1700000000000-20", "1700000001000-20"};
    const char *both[] = {EV(301, "pending", PAY_BY SEG), EV(301, "paid", SEG)};
    apply(2, ids, both, NULL);
    assert_string_equal(segments_of(301), "3 3:2,7:1");
    const char *end_id[] = {"1700000001000-21"}, *end[] = {EV(302, "cancelled", " e=5")};
    const char *pend_id[] = {"1700000000000-21"}, *pend[] = {EV(302, "pending", PAY_BY " e=5")};
    apply(1, end_id, end, NULL);
    apply(1, pend_id, pend, NULL);
    assert_string_equal(segments_of(302), "5 -");
    assert_string_equal(order_row(302), "cancelled 1700000004000 -");
    const char *old_id[] = {"1700000000000-22"}, *old[] = {EV(303, "pending", PAY_BY)};
    apply(1, old_id, old, NULL);
    assert_string_equal(segments_of(303), "- -");
    const char *new_id[] = {"1700000001000-22"}, *now[] = {EV(303, "expired", " e=1")};
    apply(1, new_id, now, NULL);
    assert_string_equal(segments_of(303), "1 -");
    assert_string_equal(order_row(303), "expired 1700000004000 -");
}

/* A database of schema 2 (no segments) takes schema 3 with its rows kept;
 * the schema sent again changes nothing. */
static void test_schema_2_to_3(void **state)
{
    (void)state;
    sql("ALTER TABLE seckill_orders DROP COLUMN segment, DROP COLUMN segments");
    sql("DELETE FROM seckill_schema WHERE version = 3");
    sql("INSERT INTO seckill_orders (order_id, sku, user_id, qty, generation, state, rank, "
        "changed_at) VALUES (304, 't', 'alice', 1, '1', 'placed', 1, now())");
    char *quiet; /* without its "already exists" notices */
    assert_true(asprintf(&quiet, "SET client_min_messages = warning; %s", SINK_SCHEMA_SQL) > 0);
    sql(quiet);
    sql(quiet);
    free(quiet);
    assert_string_equal(sql("SELECT string_agg(version::text, ',' ORDER BY version) FROM "
                            "seckill_schema"),
                        "1,2,3,4");
    assert_string_equal(segments_of(304), "- -");
    assert_string_equal(order_row(304), "placed - -");
}

/* A row as GET /orders/{id} answers it (store.h): the order's fields, its
 * pay_by to the millisecond, its parts; a row stored before schema 3 with
 * its segment not known (-1); an id never stored; a database away: said at
 * once, and not tried again within STORE_BACKOFF_MS. */
static void test_store_reads_an_order(void **state)
{
    (void)state;
    const char *ids[] = {"1700000000000-23", "1700000001000-23"};
    const char *f[] = {"o=305 s=pending k=phone u=bob q=3 g=1 b=1700000004321 e=3 m=3:2,7:1",
                       "o=305 s=paid k=phone u=bob q=3 g=1 e=3 m=3:2,7:1 p=pay-305"};
    apply(2, ids, f, NULL);
    struct svc_store *st = svc_store_new(pg.url);
    struct inv_order o;
    char err[256];
    assert_int_equal(svc_store_order(st, 305, &o, err, sizeof(err)), STORE_FOUND);
    assert_int_equal(o.id, 305);
    assert_string_equal(o.sku, "phone");
    assert_string_equal(o.user_id, "bob");
    assert_int_equal(o.qty, 3);
    assert_int_equal(o.segment, 3);
    assert_int_equal(o.state, INV_STATE_PAID);
    assert_int_equal(o.pay_by_ms, 1700000004321LL);
    assert_int_equal(o.nparts, 2);
    assert_int_equal(o.parts[1].segment, 7);
    assert_int_equal(o.parts[1].qty, 1);
    assert_int_equal(svc_store_order(st, 304, &o, err, sizeof(err)), STORE_FOUND);
    assert_int_equal(o.segment, -1);
    assert_int_equal(o.state, INV_STATE_PLACED);
    assert_int_equal(o.pay_by_ms, 0);
    assert_int_equal(svc_store_order(st, 999, &o, err, sizeof(err)), STORE_NOT_FOUND);
    assert_int_equal(svc_store_order(st, UINT64_MAX, &o, err, sizeof(err)),
                     STORE_NOT_FOUND);
    svc_store_free(st);

    st = svc_store_new("postgresql://postgres@127.0.0.1:1/postgres");
    err[0] = '\0';
    assert_int_equal(svc_store_order(st, 305, &o, err, sizeof(err)), STORE_UNAVAILABLE);
    assert_true(err[0] != '\0');
    int64_t t0 = clock_now_us();
    for (int i = 0; i < 100; i++)
        assert_int_equal(svc_store_order(st, 305, &o, err, sizeof(err)),
                         STORE_UNAVAILABLE);
    assert_true(clock_now_us() - t0 < STORE_BACKOFF_MS * 1000LL / 2); /* no connect */
    svc_store_free(st);
}

/* A merchant's changes (outbox_stock: c first) among orders' events in one
 * batch: each is a row of seckill_stock_events, the orders' rows are made as
 * ever; the batch applied again (a claim after a crash between commit and
 * acknowledgement) changes nothing; the store reads the generation's changes
 * as their sums in the same statement as its orders. */
static void test_stock_changes_once(void **state)
{
    (void)state;
    const char *ids[] = {"1700000000000-40", "1700000000500-40", "1700000001000-40",
                         "1700000002000-40"};
    const char *f[] = {
        "c=stock k=rs g=7 a=20 w=0", "o=401 s=placed k=rs u=ann q=2 g=7 e=0",
        "c=stock k=rs g=7 a=0 w=5 z=1 n=1700000009000", "c=stock k=rs g=6 a=100 w=0"};
    for (int round = 0; round < 2; round++) {
        apply(4, ids, f, NULL);
        assert_string_equal(
            sql("SELECT count(*) || ' ' || sum(added) || ' ' || "
                "sum(withdrawn) FROM seckill_stock_events WHERE sku = 'rs' "
                "AND generation = '7'"),
            "2 20 5");
        assert_string_equal(order_row(401), "placed - -");
    }
    assert_string_equal(sql("SELECT paused || ' ' || (extract(epoch FROM ends_at) * "
                            "1000)::bigint FROM seckill_stock_events WHERE event_id = "
                            "'1700000001000-40'"),
                        "true 1700000009000");
    struct svc_store *st = svc_store_new(pg.url);
    long long orders[INV_NSTATES], units[INV_NSTATES];
    struct store_stock stock;
    char err[256];
    assert_int_equal(
        svc_store_counts(st, "rs", "7", orders, units, &stock, err, sizeof(err)), 0);
    assert_int_equal(stock.changes, 2);
    assert_int_equal(stock.added, 20);
    assert_int_equal(stock.withdrawn, 5);
    assert_int_equal(units[INV_STATE_PLACED], 2);
    assert_int_equal(
        svc_store_counts(st, "rs", "8", orders, units, &stock, err, sizeof(err)), 0);
    assert_int_equal(stock.changes, 0);
    svc_store_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_error_is_the_answer),
        cmocka_unit_test(test_pay_by_pending_and_end_in_one_batch),
        cmocka_unit_test(test_pay_by_end_before_pending),
        cmocka_unit_test(test_pay_by_in_order),
        cmocka_unit_test(test_poison_events_are_data_errors),
        cmocka_unit_test(test_dead_letters_stored_once),
        cmocka_unit_test(test_segments_whatever_the_order),
        cmocka_unit_test(test_schema_2_to_3),
        cmocka_unit_test(test_store_reads_an_order),
        cmocka_unit_test(test_stock_changes_once),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
