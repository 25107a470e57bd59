/* Unit tests of the sink's batch (service/sink_batch.h): the outbox's events
 * as the JSON rows of the statement that applies them, and the events that
 * are not the scripts' skipped, counted, kept as dead letters and still
 * acknowledged. The rows are
 * read back with jansson, as PostgreSQL's json_to_recordset would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_batch.h"
#include "testutil.h"

/* Adds an event of stream si (fields NULL: a deleted entry's). */
static void add(struct sink_batch *b, int si, const char *id, const char *fields)
{
    struct test_entry e;
    sink_batch_add(b, si, "sk:{p}:out", id, fields ? test_entry_of(&e, fields) : NULL);
}

#define PENDING "o=42 s=pending k=phone u=alice q=1 g=7 b=1700000000000"

static const char *field(json_t *rows, size_t i, const char *name)
{
    return json_string_value(json_object_get(json_array_get(rows, i), name));
}

/* One script's events go as one entry (outbox.lua): an event at each field
 * named o. Each is a row of its own, the entry's id for the first and
 * "<id>/<k>" for the k-th after it (PostgreSQL keeps each by stream and id),
 * each acknowledged by the entry's id; one that is not valid is a dead letter
 * alone, its neighbours go on. */
static void test_an_entry_of_several_events(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    add(&b, 1, "1700000000000-3",
        "o=41 s=placed k=tv u=ann q=1 g=7 e=0 "
        "o=42 s=pending k=tv u=bob q=2 g=7 e=1 b=1700000002000 "
        "o=43 s=placed k=tv q=1 g=7 e=0 " /* no user: not an event */
        "o=44 s=placed k=tv u=dan q=3 g=7 e=2 m=2:2,0:1");
    add(&b, 1, "1700000000001-0", "o=41 s=paid k=tv u=ann q=1 g=7 e=0");
    assert_int_equal(b.n, 5);
    assert_int_equal(b.valid, 4);
    assert_int_equal(b.skipped, 1);
    for (int i = 0; i < 4; i++)
        assert_string_equal(b.id[i], "1700000000000-3");
    assert_string_equal(b.id[4], "1700000000001-0");
    json_t *rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_non_null(rows);
    assert_int_equal(json_array_size(rows), 4);
    assert_string_equal(field(rows, 0, "i"), "1700000000000-3");
    assert_string_equal(field(rows, 0, "o"), "41");
    assert_null(field(rows, 0, "b"));
    assert_string_equal(field(rows, 1, "i"), "1700000000000-3/1");
    assert_string_equal(field(rows, 1, "u"), "bob");
    assert_string_equal(field(rows, 1, "b"), "1700000002000");
    assert_string_equal(field(rows, 2, "i"), "1700000000000-3/3");
    assert_string_equal(field(rows, 2, "o"), "44");
    assert_string_equal(field(rows, 2, "m"), "2:2,0:1");
    assert_string_equal(field(rows, 3, "i"), "1700000000001-0");
    assert_null(field(rows, 1, "m"));
    json_decref(rows);
    assert_string_equal(sink_batch_settled(&b, 0), "41");
    assert_null(sink_batch_settled(&b, 1)); /* pending */
    assert_null(sink_batch_settled(&b, 2)); /* not stored */
    assert_string_equal(sink_batch_settled(&b, 3), "44");
    char *dead = sink_batch_dead_rows(&b);
    json_t *d = json_loads(dead, 0, NULL);
    assert_int_equal(json_array_size(d), 1);
    assert_string_equal(field(d, 0, "i"), "1700000000000-3/2");
    json_decref(d);
    free(dead);
    sink_batch_free(&b);
}

static void test_rows_are_the_events(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    add(&b, 0, "1700000000000-0", PENDING);
    add(&b, 3, "1700000000001-0", "o=42 s=paid k=phone u=alice q=1 g=7 p=pay-1");
    assert_int_equal(b.n, 2);
    assert_int_equal(b.valid, 2);
    assert_int_equal(b.skipped, 0);
    assert_int_equal(b.stream[1], 3);
    assert_string_equal(b.id[1], "1700000000001-0");

    json_t *rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_non_null(rows);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(field(rows, 0, "x"), "sk:{p}:out");
    assert_string_equal(field(rows, 0, "i"), "1700000000000-0");
    assert_string_equal(field(rows, 0, "o"), "42");
    assert_string_equal(field(rows, 0, "s"), "pending");
    assert_string_equal(field(rows, 0, "k"), "phone");
    assert_string_equal(field(rows, 0, "u"), "alice");
    assert_string_equal(field(rows, 0, "q"), "1");
    assert_string_equal(field(rows, 0, "g"), "7");
    assert_string_equal(field(rows, 0, "b"), "1700000000000");
    assert_null(field(rows, 0, "p"));
    assert_string_equal(field(rows, 1, "p"), "pay-1");
    assert_null(field(rows, 1, "b"));
    json_decref(rows);
    sink_batch_free(&b);
}

/* Each of these would fail the transaction every time: skipped, counted, and
 * acknowledged all the same (in n, with its id). */
static void test_what_is_not_an_event_is_skipped(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "o=42 s=paid k=phone q=1 g=7",            /* no user */
        "o=42 s=shipped k=phone u=a q=1 g=7",     /* no such state */
        "o=4x2 s=paid k=phone u=a q=1 g=7",       /* an order id not a number */
        "o=42 s=paid k=phone u=a q=-1 g=7",       /* units not a number */
        "o=42 s=paid k=phone u=a q=1 g=7 b=soon", /* pay_by not a number */
        "o=123456789012345678901 s=paid k=phone u=a q=1 g=7", /* past 19 digits */
        "o=42 s=paid k=ph\"one u=a q=1 g=7",                  /* JSON would escape it */
        "o=42 s=paid k=phone u=a\n q=1 g=7",                  /* a control character */
    };
    struct sink_batch b = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        add(&b, 0, "1-0", bad[i]);
    add(&b, 0, "2-0", NULL); /* a deleted entry */
    assert_int_equal(b.skipped, 9);
    assert_int_equal(b.valid, 0);
    assert_int_equal(b.n, 9);
    assert_string_equal(b.id[8], "2-0");
    /* a stream key, or an id, that JSON would have to escape */
    struct test_entry e;
    sink_batch_add(&b, 0, "sk:\"x", "3-0", test_entry_of(&e, PENDING));
    sink_batch_add(&b, 0, "sk:x", "3-\\0", test_entry_of(&e, PENDING));
    assert_int_equal(b.skipped, 11);
    /* one event among them is written, alone */
    add(&b, 0, "4-0", PENDING);
    assert_int_equal(b.valid, 1);
    json_t *rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(field(rows, 0, "i"), "4-0");
    json_decref(rows);
    sink_batch_free(&b);
}

/* After a failed statement the same rows are sent again; rows that outgrow
 * the first allocation stay one array; the next round has its own rows. */
static void test_reopen_grow_clear(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    add(&b, 0, "1-0", PENDING);
    char first[256];
    snprintf(first, sizeof(first), "%s", sink_batch_close(&b));
    sink_batch_reopen(&b);
    assert_string_equal(sink_batch_close(&b), first);
    sink_batch_reopen(&b);
    for (int i = 0; i < 3000; i++) /* about 300 KB of rows; 64 KB at first */
        add(&b, i % 5, "1-1", PENDING);
    json_t *rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_non_null(rows);
    assert_int_equal(json_array_size(rows), 3001);
    json_decref(rows);

    sink_batch_clear(&b);
    assert_int_equal(b.n + b.valid + b.skipped, 0);
    add(&b, 0, "5-0", PENDING);
    rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(field(rows, 0, "i"), "5-0");
    json_decref(rows);
    sink_batch_free(&b);
}

/* What cannot be stored is kept as a dead letter: the skipped entries at
 * once (their fields escaped to ASCII), an event the database refused when
 * killed (its row, and the error), forgotten again by sink_batch_unkill
 * (the skipped stay); an event alone is its row in an array of one. */
static void test_dead_letters(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    add(&b, 0, "1-0", "o=42 s=shipped k=phone u=a\\b q=1 g=7");
    add(&b, 0, "2-0", PENDING);
    add(&b, 0, "3-0", "o=43 s=paid k=phone u=bob q=1 g=7");
    assert_int_equal(b.skipped, 1);
    assert_int_equal(b.ndead, 1);
    assert_int_equal(b.dead[0].event, 0);
    assert_string_equal(b.dead[0].fields, "o=42 s=shipped k=phone u=a\\x5cb q=1 g=7");
    assert_string_equal(b.dead[0].error, "not an event of the outbox scripts");

    char *one = sink_batch_row(&b, 1);
    json_t *rows = json_loads(one, 0, NULL);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(field(rows, 0, "i"), "3-0");
    assert_string_equal(field(rows, 0, "o"), "43");
    json_decref(rows);
    free(one);

    sink_batch_kill(&b, 1, "sk:{p}:out", "value \"43\" is \x01 out of range");
    assert_int_equal(b.ndead, 2);
    assert_int_equal(b.dead[1].event, 2);
    assert_string_equal(b.dead[1].error, "value \"43\" is \\x01 out of range");
    char *dead = sink_batch_dead_rows(&b);
    rows = json_loads(dead, 0, NULL);
    assert_non_null(rows);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(field(rows, 0, "i"), "1-0");
    assert_string_equal(field(rows, 1, "i"), "3-0");
    assert_string_equal(field(rows, 1, "x"), "sk:{p}:out");
    assert_non_null(strstr(field(rows, 1, "f"), "\"o\":\"43\""));
    json_decref(rows);
    free(dead);

    sink_batch_unkill(&b);
    assert_int_equal(b.ndead, 1);
    sink_batch_clear(&b);
    assert_int_equal(b.ndead, 0);
    sink_batch_free(&b);
}

/* The segments ride along (e, m: an order of several segments); a segment or
 * segments that are not what record.lua writes are no event. An event of a
 * final state settles its order (sink_batch_settled: the records whose
 * retention starts once the batch committed), a pending one does not, nor
 * one that is a dead letter. */
static void test_segments_and_settled(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    add(&b, 0, "1-0", "o=42 s=pending k=phone u=a q=3 g=7 b=1700000000000 e=2 m=2:2,5:1");
    add(&b, 0, "2-0", "o=42 s=paid k=phone u=a q=3 g=7 e=2 m=2:2,5:1");
    add(&b, 0, "3-0", "o=43 s=placed k=phone u=b q=1 g=7 e=4");
    add(&b, 0, "4-0", "o=44 s=cancelled k=phone u=c q=1 g=7"); /* before schema 3 */
    add(&b, 0, "5-0", "o=45 s=expired k=phone u=d q=1 g=7 e=x1");     /* no event */
    add(&b, 0, "6-0", "o=46 s=expired k=phone u=d q=1 g=7 e=1 m=1;1"); /* no event */
    add(&b, 0, "7-0", "o=47 s=expired k=phone u=e q=1 g=7 e=0");
    assert_int_equal(b.valid, 5);
    assert_int_equal(b.skipped, 2);
    json_t *rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_string_equal(field(rows, 0, "e"), "2");
    assert_string_equal(field(rows, 0, "m"), "2:2,5:1");
    assert_string_equal(field(rows, 2, "e"), "4");
    assert_null(field(rows, 2, "m"));
    assert_null(field(rows, 3, "e"));
    json_decref(rows);
    sink_batch_reopen(&b);

    assert_null(sink_batch_settled(&b, 0)); /* pending */
    assert_string_equal(sink_batch_settled(&b, 1), "42");
    assert_string_equal(sink_batch_settled(&b, 2), "43");
    assert_string_equal(sink_batch_settled(&b, 3), "44");
    assert_null(sink_batch_settled(&b, 4)); /* skipped */
    assert_null(sink_batch_settled(&b, 5));
    assert_string_equal(sink_batch_settled(&b, 6), "47");
    sink_batch_kill(&b, 4, "sk:{p}:out", "refused"); /* valid event 4: 7-0 */
    assert_null(sink_batch_settled(&b, 6));
    sink_batch_unkill(&b);
    assert_string_equal(sink_batch_settled(&b, 6), "47");
    sink_batch_free(&b);
}

/* A merchant's change (outbox_stock: its first field c) is one row of its
 * own with its fields, settling no order; one that is not the script's (a
 * kind it does not write, units missing or not a number, paused not 0 or 1,
 * an o among them: not an order's event either) is a dead letter. */
static void test_stock_changes(void **state)
{
    (void)state;
    struct sink_batch b = {0};
    add(&b, 0, "1700000000000-0", "c=stock k=tv g=7 a=20 w=0");
    add(&b, 0, "1700000000001-0", "c=stock k=tv g=7 a=0 w=3 z=1 n=1700000009000");
    add(&b, 0, "1700000000002-0", "c=price k=tv g=7 a=0 w=3");
    add(&b, 0, "1700000000003-0", "c=stock k=tv g=7 a=5");
    add(&b, 0, "1700000000004-0", "c=stock k=tv g=7 a=x w=0");
    add(&b, 0, "1700000000005-0", "c=stock k=tv g=7 a=1 w=0 z=yes");
    add(&b, 0, "1700000000006-0", "c=stock o=41 s=placed k=tv u=ann q=1 g=7 a=1 w=0");
    assert_int_equal(b.n, 7);
    assert_int_equal(b.valid, 2);
    assert_int_equal(b.skipped, 5);
    json_t *rows = json_loads(sink_batch_close(&b), 0, NULL);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(field(rows, 0, "c"), "stock");
    assert_string_equal(field(rows, 0, "a"), "20");
    assert_null(field(rows, 0, "z"));
    assert_null(field(rows, 0, "o"));
    assert_string_equal(field(rows, 1, "w"), "3");
    assert_string_equal(field(rows, 1, "z"), "1");
    assert_string_equal(field(rows, 1, "n"), "1700000009000");
    assert_string_equal(field(rows, 1, "i"), "1700000000001-0");
    json_decref(rows);
    assert_null(sink_batch_settled(&b, 0));
    assert_null(sink_batch_settled(&b, 1));
    sink_batch_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_are_the_events),
        cmocka_unit_test(test_an_entry_of_several_events),
        cmocka_unit_test(test_what_is_not_an_event_is_skipped),
        cmocka_unit_test(test_reopen_grow_clear),
        cmocka_unit_test(test_dead_letters),
        cmocka_unit_test(test_segments_and_settled),
        cmocka_unit_test(test_stock_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
