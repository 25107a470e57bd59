/* test_aconn: aconn's subscribe mode against a real redis-server: messages
 * arrive, an idle subscriber outlives the command timeout, a restart of Redis
 * is reported as a loss and followed by a new subscription without the
 * caller's help. The loop runs on the test's own thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aconn.h"
#include "clock.h"
#include "rconn.h"
#include "testutil.h"

#define CHANNEL "t:chan"

static struct test_redis srv;

/* What the subscriber's callback saw. */
struct seen {
    int confirmations;
    int messages;
    int losses;
    char last[64];
};

static void on_push(void *arg, aconn_result res, redisReply *r)
{
    struct seen *s = arg;
    if (res != ACONN_REPLY) {
        s->losses++;
        return;
    }
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    if (strcmp(r->element[0]->str, "subscribe") == 0) {
        s->confirmations++;
    } else if (strcmp(r->element[0]->str, "message") == 0) {
        s->messages++;
        snprintf(s->last, sizeof(s->last), "%s", r->element[2]->str);
    }
}

/* Turns the loop until *counter reaches want or ms pass; true when it did. */
static int run_until(struct event_base *base, const int *counter, int want, int ms)
{
    int64_t until = clock_now_us() + (int64_t)ms * 1000;
    struct timeval tick = {0, 10000};
    while (*counter < want && clock_now_us() < until) {
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
    return *counter >= want;
}

/* Publishes payload on CHANNEL; how many subscribers got it. */
static long long publish(const char *payload)
{
    struct rconn *rc = rconn_new("127.0.0.1", srv.port, NULL, 2000);
    redisReply *r = rconn_command(rc, "PUBLISH %s %s", CHANNEL, payload);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long n = r->integer;
    freeReplyObject(r);
    rconn_free(rc);
    return n;
}

static void test_messages_arrive_and_idle_is_not_dropped(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct aconn *c = aconn_new(base, "127.0.0.1", srv.port, NULL, 100);
    struct seen s = {0};
    assert_int_equal(aconn_subscribe(c, CHANNEL, on_push, &s), RCONN_OK);
    assert_true(run_until(base, &s.confirmations, 1, 2000));
    assert_true(aconn_subscribed(c));
    /* A subscriber takes no commands. */
    const char *ping[] = {"PING"};
    assert_int_equal(aconn_command(c, on_push, &s, 1, ping, NULL), RCONN_ERR);

    assert_int_equal(publish("one"), 1);
    assert_true(run_until(base, &s.messages, 1, 2000));
    assert_string_equal(s.last, "one");

    /* Idle for several command timeouts: still the same subscription. */
    int never = 0;
    run_until(base, &never, 1, 500);
    assert_int_equal(s.losses, 0);
    assert_int_equal(publish("two"), 1);
    assert_true(run_until(base, &s.messages, 2, 2000));
    assert_string_equal(s.last, "two");
    assert_int_equal(s.confirmations, 1);

    aconn_free(c); /* no callback from here */
    assert_int_equal(s.losses, 0);
    event_base_free(base);
}

static void test_restart_is_a_loss_then_subscribes_again(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct aconn *c = aconn_new(base, "127.0.0.1", srv.port, NULL, 1000);
    struct seen s = {0};
    assert_int_equal(aconn_subscribe(c, CHANNEL, on_push, &s), RCONN_OK);
    assert_true(run_until(base, &s.confirmations, 1, 2000));

    test_redis_stop(&srv, 1, 1);
    assert_true(run_until(base, &s.losses, 1, 2000));
    assert_false(aconn_subscribed(c));
    /* Down for a while: the retries fail quietly, no second loss. */
    int never = 0;
    run_until(base, &never, 1, 300);
    assert_int_equal(s.losses, 1);

    test_redis_restart(&srv, NULL);
    assert_true(run_until(base, &s.confirmations, 2, 3000));
    assert_true(aconn_subscribed(c));
    assert_int_equal(publish("after"), 1);
    assert_true(run_until(base, &s.messages, 1, 2000));
    assert_string_equal(s.last, "after");

    aconn_free(c);
    event_base_free(base);
}

static void test_nothing_reachable_keeps_trying(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    int port = test_free_port();
    struct aconn *c = aconn_new(base, "127.0.0.1", port, NULL, 1000);
    struct seen s = {0};
    assert_int_equal(aconn_subscribe(c, CHANNEL, on_push, &s), RCONN_OK);
    int never = 0;
    run_until(base, &never, 1, 200);
    assert_int_equal(s.confirmations + s.losses, 0); /* never subscribed: no loss */
    assert_false(aconn_subscribed(c));
    aconn_free(c);
    event_base_free(base);
}

int main(void)
{
    test_redis_start(&srv, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_arrive_and_idle_is_not_dropped),
        cmocka_unit_test(test_restart_is_a_loss_then_subscribes_again),
        cmocka_unit_test(test_nothing_reachable_keeps_trying),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    test_redis_stop(&srv, 1, 0);
    return failed;
}
