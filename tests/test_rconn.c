/* test_rconn: a script that fails says where, in the .lua file that the line
 * came from (also a line of a piece another script includes), against a real
 * redis-server. The expected lines are read from the .lua files themselves:
 * run from the repository root, as tests/run.sh does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rconn.h"
#include "testutil.h"

/* Real scripts, as the build embedded them. */
extern const struct rscript_source lua_inventory_reset, lua_inventory_commit,
    lua_lock_redis_renew;
static struct rscript reset_script = RSCRIPT_INIT("t_reset", lua_inventory_reset);
static struct rscript commit_script = RSCRIPT_INIT("t_commit", lua_inventory_commit);
static struct rscript renew_script = RSCRIPT_INIT("t_renew", lua_lock_redis_renew);
/* Never loaded: appending it to a pipeline must fail the pipeline. */
static struct rscript unloaded_script = RSCRIPT_INIT("t_unloaded", lua_inventory_reset);

/* A script whose second line, from a made-up piece, does not compile. */
static const char *const broken_files[] = {"tests/broken.lua", "tests/broken_piece.lua"};
static const struct rscript_line broken_lines[] = {{0, 1}, {1, 7}, {0, 2}};
static const struct rscript_source broken_source = {
    .text = "local a = 1\nlocal b = = 2\nreturn a\n",
    .files = broken_files,
    .nfiles = 2,
    .lines = broken_lines,
    .nlines = 3,
};
static struct rscript broken_script = RSCRIPT_INIT("t_broken", broken_source);

static struct test_redis srv;
static struct rconn *rc;

static int group_setup(void **state)
{
    (void)state;
    test_redis_start(&srv, NULL);
    rc = rconn_new("127.0.0.1", srv.port, NULL, 2000);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rconn_free(rc);
    test_redis_stop(&srv, 1, 0);
    return 0;
}

/* "path:N" where N is the only line of path (from the repository root) that
 * contains needle. */
static void where(const char *path, const char *needle, char *out, size_t outlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: run from the repository root", path);
    char line[512];
    int n = 0, found = 0;
    while (fgets(line, sizeof(line), f)) {
        n++;
        if (strstr(line, needle)) {
            assert_int_equal(found, 0); /* the needle must be unique */
            found = n;
        }
    }
    fclose(f);
    if (!found)
        fail_msg("%s has no line with \"%s\"", path, needle);
    snprintf(out, outlen, "%s:%d", path, found);
}

/* Runs a command given as words separated by single spaces. */
static void cmd(const char *text)
{
    char buf[256];
    const char *argv[16];
    int argc = 0;
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *save, *w = strtok_r(buf, " ", &save); w && argc < 16;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    redisReply *r = rconn_command_argv(rc, argc, argv, NULL);
    assert_non_null(r);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}

/* The reply is an error naming at (ERR <at>: ... and @<at>), and the script's
 * own file after "script: "; no "user_script" is left. */
static void assert_located(const redisReply *r, const char *at, const char *own)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_int_equal(r->len, strlen(r->str));
    char want[300];
    snprintf(want, sizeof(want), "ERR %s: ", at);
    if (strncmp(r->str, want, strlen(want)) != 0)
        fail_msg("\"%s\" does not start with \"%s\"", r->str, want);
    snprintf(want, sizeof(want), "on @%s.", at);
    if (!strstr(r->str, want))
        fail_msg("\"%s\" lacks \"%s\"", r->str, want);
    snprintf(want, sizeof(want), "script: %s ", own);
    if (!strstr(r->str, want))
        fail_msg("\"%s\" lacks \"%s\"", r->str, want);
    assert_null(strstr(r->str, "user_script"));
}

/* A Lua error on a line of the script's own file; also when the script runs
 * by EVAL after Redis lost its script cache. */
static void test_runtime_error_names_file_and_line(void **state)
{
    (void)state;
    char at[300];
    where("inventory/lua/reset.lua", "local check = ARGV[12 + k]", at, sizeof(at));
    /* segments "x": tonumber gives nil, and the first ARGV[12 + k] fails */
    const char *argv[] = {"t:meta",   "t:stock", "t:init",  "t:sold",   "t:buyers",
                          "t:orders", "t:idem",  "t:avail", "t:xout",   "t:xin",
                          "t:back",   "t:due",   "t:life",  "t:paying", "10",
                          "x",        "1"};
    for (int round = 0; round < 2; round++) {
        redisReply *r = rconn_eval(rc, &reset_script, 14, 3, argv, NULL);
        assert_located(r, at, "inventory/lua/reset.lua");
        assert_non_null(strstr(r->str, "arithmetic on local 'k'"));
        freeReplyObject(r);
        cmd("SCRIPT FLUSH"); /* the second round falls back to EVAL */
    }
}

/* The failing line is in limit.lua, which commit.lua includes: the error
 * names limit.lua's line, and commit.lua as the script. */
static void test_error_in_included_piece(void **state)
{
    (void)state;
    char at[300];
    where("inventory/lua/limit.lua", "have + qty > limit", at, sizeof(at));
    cmd("HSET t:meta epoch 1 limit 1");
    /* qty "x": tonumber gives nil, and the limit check's sum fails */
    const char *argv[] = {"t:meta",  "t:stock", "t:sold",  "t:buyers", "t:orders",
                          "order:1", "t:idem",  "t:avail", "t:fence",  "1",
                          "x",       "u1",      "1",       "t",        "",
                          "1",       "0",       "1",       "5",        "0"};
    redisReply *r = rconn_eval(rc, &commit_script, 9, 11, argv, NULL);
    assert_located(r, at, "inventory/lua/commit.lua");
    assert_non_null(strstr(r->str, "arithmetic on local 'qty'"));
    freeReplyObject(r);

    /* The same through a pipeline: the reply is collected by rpipe_collect. */
    struct rcmd commit = {.script = &commit_script, .nkeys = 9, .argc = 20, .argv = argv};
    assert_int_equal(rconn_prepare(rc, &commit), RCONN_OK);
    struct rpipe p;
    assert_int_equal(rpipe_begin(&p, rc), RCONN_OK);
    assert_int_equal(rpipe_append(&p, &commit), RCONN_OK);
    r = rpipe_collect(&p);
    rpipe_end(&p);
    assert_located(r, at, "inventory/lua/commit.lua");
    freeReplyObject(r);
    r = rconn_command(rc, "EXISTS t:stock t:sold order:1");
    assert_int_equal(r->integer, 0); /* it wrote nothing */
    freeReplyObject(r);
}

/* A command the script calls fails: Redis names the line of the call. */
static void test_failed_redis_call_names_its_line(void **state)
{
    (void)state;
    char at[300];
    where("lock/lua/redis_renew.lua", "redis.call('PEXPIRE'", at, sizeof(at));
    cmd("HSET t:lock owner 1");
    const char *argv[] = {"t:lock", "owner", "soon"}; /* lease "soon": not a number */
    redisReply *r = rconn_eval(rc, &renew_script, 1, 2, argv, NULL);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    char want[400];
    snprintf(want, sizeof(want), "script: lock/lua/redis_renew.lua %s, on @%s.",
             renew_script.sha, at);
    if (!strstr(r->str, want))
        fail_msg("\"%s\" lacks \"%s\"", r->str, want);
    freeReplyObject(r);
}

/* SCRIPT LOAD of a script that does not compile: the error names the file
 * and line the bad line came from. */
static void test_compile_error_names_file_and_line(void **state)
{
    (void)state;
    assert_int_equal(rconn_script_load(rc, &broken_script), RCONN_ERR);
    const char *err = rconn_errstr(rc);
    if (!strstr(err, "t_broken") || !strstr(err, "tests/broken_piece.lua:7:") ||
        strstr(err, "user_script"))
        fail_msg("\"%s\"", err);
}

/* A script this process did not load (no line map for it) and errors that
 * are not a script's are left as Redis wrote them. */
static void test_other_errors_untouched(void **state)
{
    (void)state;
    redisReply *r = rconn_command(rc, "EVAL %s 0", "local a = 1\nreturn a + nil\n");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r->str, "ERR user_script:2: "));
    freeReplyObject(r);
    cmd("HSET t:hash field 1");
    r = rconn_command(rc, "INCR t:hash");
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, "WRONGTYPE Operation against a key holding the wrong "
                                "kind of value");
    freeReplyObject(r);
}

/* How many of the keys exist, asked on a connection of its own. */
static long long existing(const char *keys)
{
    struct rconn *other = rconn_new("127.0.0.1", srv.port, NULL, 2000);
    redisReply *r = rconn_command(other, "EXISTS %s", keys);
    assert_non_null(r);
    long long n = r->integer;
    freeReplyObject(r);
    rconn_free(other);
    return n;
}

/* A pipeline whose connection was replaced under it fails whole: it does not
 * carry on over the new connection, and none of its commands runs. */
static void test_pipeline_never_moves_connection(void **state)
{
    (void)state;
    struct rpipe p;
    assert_int_equal(rpipe_begin(&p, rc), RCONN_OK);
    assert_int_equal(rpipe_appendf(&p, "SET t:p1 1"), RCONN_OK);
    rconn_drop(rc, "test: connection lost");
    redisReply *r = rconn_command(rc, "PING"); /* a new connection */
    assert_non_null(r);
    assert_string_equal(r->str, "PONG");
    freeReplyObject(r);
    assert_int_equal(rpipe_appendf(&p, "SET t:p2 1"), RCONN_ERR);
    assert_null(rpipe_collect(&p));
    rpipe_end(&p);
    assert_int_equal(existing("t:p1 t:p2"), 0);
}

/* A pipeline that fails after commands were appended leaves none of them on
 * the connection: they do not run, and the next command gets its own answer. */
static void test_failed_pipeline_leaves_nothing_behind(void **state)
{
    (void)state;
    struct rpipe p;
    struct rcmd unloaded = {.script = &unloaded_script, .nkeys = 0, .argc = 0};
    assert_int_equal(rpipe_begin(&p, rc), RCONN_OK);
    assert_int_equal(rpipe_appendf(&p, "SET t:p3 1"), RCONN_OK);
    assert_int_equal(rpipe_append(&p, &unloaded), RCONN_ERR);
    assert_int_equal(rpipe_appendf(&p, "SET t:p4 1"), RCONN_ERR);
    assert_null(rpipe_collect(&p));
    rpipe_end(&p);
    redisReply *r = rconn_command(rc, "ECHO mine");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "mine");
    freeReplyObject(r);
    assert_int_equal(existing("t:p3 t:p4"), 0);

    /* A whole one answers in order. */
    assert_int_equal(rpipe_begin(&p, rc), RCONN_OK);
    assert_int_equal(rpipe_appendf(&p, "SET t:p5 a"), RCONN_OK);
    assert_int_equal(rpipe_appendf(&p, "GET t:p5"), RCONN_OK);
    r = rpipe_collect(&p);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    r = rpipe_collect(&p);
    assert_string_equal(r->str, "a");
    freeReplyObject(r);
    assert_null(rpipe_collect(&p)); /* none owed */
    rpipe_end(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runtime_error_names_file_and_line),
        cmocka_unit_test(test_error_in_included_piece),
        cmocka_unit_test(test_failed_redis_call_names_its_line),
        cmocka_unit_test(test_compile_error_names_file_and_line),
        cmocka_unit_test(test_other_errors_untouched),
        cmocka_unit_test(test_pipeline_never_moves_connection),
        cmocka_unit_test(test_failed_pipeline_leaves_nothing_behind),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
