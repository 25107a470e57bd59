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
 *     beyond int, a pay_by beyond to_timestamp's range) fails its statement
 *     with a data error that names it, so that the sink can tell it from a
 *     database that is away. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_error_is_the_answer),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
