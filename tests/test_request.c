/* Unit tests: request validation and route matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "request.h"
#include "rfc3339.h"
#include "routes.h"

static req_status order(const char *body, struct req_order *o)
{
    char detail[200];
    return req_parse_order(body, strlen(body), o, detail, sizeof(detail));
}

static void test_order_body(void **state)
{
    (void)state;
    struct req_order o;
    assert_int_equal(order("{\"user_id\":\"alice\"}", &o), REQ_OK);
    assert_string_equal(o.user_id, "alice");
    assert_int_equal(o.qty, 1);
    assert_int_equal(order("{\"user_id\":\"a.b:c-d_9\",\"qty\":3}", &o), REQ_OK);
    assert_int_equal(o.qty, 3);
    const char *bad[] = {
        "",                                                 /* empty */
        "{",                                                /* truncated */
        "[1,2]",                                            /* not an object */
        "\"alice\"",                                        /* not an object */
        "{\"qty\":1}",                                      /* no user */
        "{\"user_id\":\"\"}",                               /* empty user */
        "{\"user_id\":\"has space\"}",                      /* bad charset */
        "{\"user_id\":\"caf\xc3\xa9\"}",                    /* non-ASCII */
        "{\"user_id\":\"a\\u0000b\"}",                      /* embedded NUL */
        "{\"user_id\":12}",                                 /* not a string */
        "{\"user_id\":\"u\",\"qty\":0}",                    /* qty too small */
        "{\"user_id\":\"u\",\"qty\":-1}",                   /* negative */
        "{\"user_id\":\"u\",\"qty\":1.5}",                  /* not an integer */
        "{\"user_id\":\"u\",\"qty\":\"1\"}",                /* a string */
        "{\"user_id\":\"u\",\"qty\":true}",                 /* a bool */
        "{\"user_id\":\"u\",\"qty\":99999999999999999999}", /* overflow */
        "{\"user_id\":\"u\",\"user_id\":\"v\"}",            /* duplicate key */
        "{\"user_id\":\"u\"} trailing",                     /* trailing junk */
        "\xff\xfe\x00\x01",                                 /* binary */
        "{\"user_id\":"
        "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", /* 65 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char detail[200] = "";
        memset(&o, 0xff, sizeof(o)); /* what the caller's stack held */
        assert_int_equal(
            req_parse_order(bad[i], strlen(bad[i]), &o, detail, sizeof(detail)),
            REQ_INVALID);
        assert_true(detail[0] != '\0'); /* every refusal says why */
        /* only an integer qty out of range asks for the SKU's own range (the
         * handler reads it whatever the refusal: not JSON at all included) */
        int range = strstr(bad[i], "\"qty\":0") || strstr(bad[i], "\"qty\":-1");
        assert_int_equal(o.qty_range, range);
    }
    /* 64 characters is the most a user id may have */
    assert_int_equal(
        order("{\"user_id\":"
              "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
              &o),
        0);
}

static req_status sku(const char *body, struct req_sku *s)
{
    char detail[200];
    return req_parse_sku(body, strlen(body), 16, s, detail, sizeof(detail));
}

static void test_sku_body(void **state)
{
    (void)state;
    struct req_sku s;
    assert_int_equal(sku("{\"stock\":100}", &s), REQ_OK);
    assert_int_equal(s.stock, 100);
    assert_int_equal(s.segments, 16);
    assert_int_equal(s.limit, 1);
    assert_int_equal(sku("{\"stock\":0,\"segments\":1024,\"per_user_limit\":5}", &s),
                     REQ_OK);
    assert_int_equal(s.segments, 1024);
    assert_int_equal(s.limit, 5);
    assert_int_equal(sku("{}", &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":-1}", &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":1000000001}", &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":10,\"segments\":0}", &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":10,\"segments\":1025}", &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":10,\"per_user_limit\":0}", &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":\"10\"}", &s), REQ_INVALID);
}

/* The sale window: RFC 3339 in, milliseconds since the epoch out; bad ones and
 * a window that ends before it starts refused; null is none. */
static void test_sku_window(void **state)
{
    (void)state;
    struct req_sku s;
    assert_int_equal(sku("{\"stock\":1}", &s), REQ_OK);
    assert_int_equal(s.starts_ms, 0);
    assert_int_equal(s.ends_ms, 0);
    assert_int_equal(sku("{\"stock\":1,\"starts_at\":\"2026-11-27T15:00:00Z\","
                         "\"ends_at\":\"2026-11-27T16:00:00.25+01:00\"}",
                         &s),
                     REQ_OK);
    assert_int_equal(s.starts_ms, 1795791600000LL);
    assert_int_equal(s.ends_ms, 1795791600250LL); /* 16:00 at +01:00 is 15:00Z */
    assert_int_equal(sku("{\"stock\":1,\"starts_at\":null,\"ends_at\":null,"
                         "\"pay_within_ms\":0}",
                         &s),
                     REQ_OK);
    assert_int_equal(s.starts_ms, 0);
    const char *bad[] = {
        "{\"stock\":1,\"starts_at\":\"2026-11-27\"}",
        "{\"stock\":1,\"starts_at\":\"2026-11-27T15:00:00\"}",  /* no zone */
        "{\"stock\":1,\"starts_at\":\"2026-02-29T15:00:00Z\"}", /* not a leap year */
        "{\"stock\":1,\"starts_at\":\"2026-11-27T24:00:00Z\"}",
        "{\"stock\":1,\"starts_at\":\"2026-11-27T15:00:00Zjunk\"}",
        "{\"stock\":1,\"starts_at\":\"1969-12-31T23:59:59Z\"}",
        "{\"stock\":1,\"starts_at\":1795791600000}",
        "{\"stock\":1,\"starts_at\":\"2026-11-27T16:00:00Z\","
        "\"ends_at\":\"2026-11-27T15:00:00Z\"}",
        "{\"stock\":1,\"starts_at\":\"2026-11-27T15:00:00Z\","
        "\"ends_at\":\"2026-11-27T15:00:00Z\"}",
        "{\"stock\":1,\"pay_within_ms\":86400001}", /* over a day */
        "{\"stock\":1,\"pay_within_ms\":-1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(sku(bad[i], &s), REQ_INVALID);
    assert_int_equal(sku("{\"stock\":1,\"starts_at\":\"2028-02-29T00:00:00Z\"}", &s),
                     REQ_OK);
    assert_int_equal(sku("{\"stock\":1,\"pay_within_ms\":2000}", &s), REQ_OK);
    assert_int_equal(s.pay_ms, 2000);
}

/* The waiting room: its three numbers, defaults for two, bounds, unknown
 * fields and a room that is not an object refused; null or absent is none. */
static void test_sku_room(void **state)
{
    (void)state;
    struct req_sku s;
    assert_int_equal(sku("{\"stock\":1}", &s), REQ_OK);
    assert_int_equal(s.room.rate_per_s, 0);
    assert_int_equal(sku("{\"stock\":1,\"room\":null}", &s), REQ_OK);
    assert_int_equal(s.room.rate_per_s, 0);
    assert_int_equal(sku("{\"stock\":1,\"room\":{\"rate_per_s\":50,\"max_active\":200,"
                         "\"pass_ttl_ms\":30000}}",
                         &s),
                     REQ_OK);
    assert_int_equal(s.room.rate_per_s, 50);
    assert_int_equal(s.room.max_active, 200);
    assert_int_equal(s.room.pass_ttl_ms, 30000);
    assert_int_equal(sku("{\"stock\":1,\"room\":{\"rate_per_s\":7}}", &s), REQ_OK);
    assert_int_equal(s.room.max_active, 7);      /* one second's worth */
    assert_int_equal(s.room.pass_ttl_ms, 60000); /* a minute */
    const char *bad[] = {
        "{\"stock\":1,\"room\":{}}", /* rate_per_s is required */
        "{\"stock\":1,\"room\":true}",
        "{\"stock\":1,\"room\":[1,2,3]}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":0}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":100001}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":1.5}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":\"5\"}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":5,\"max_active\":0}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":5,\"pass_ttl_ms\":999}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":5,\"pass_ttl_ms\":3600001}}",
        "{\"stock\":1,\"room\":{\"rate_per_s\":5,\"rate\":5}}", /* unknown */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char detail[200] = "";
        assert_int_equal(
            req_parse_sku(bad[i], strlen(bad[i]), 16, &s, detail, sizeof(detail)),
            REQ_INVALID);
        assert_non_null(strstr(detail, "room"));
    }
}

/* The pay and cancel bodies: what they take, what they refuse. */
static void test_life_bodies(void **state)
{
    (void)state;
    char id[INV_IDEM_MAX + 1], user[INV_ID_MAX + 1], detail[200];
#define PAY(b) req_parse_pay(b, strlen(b), id, sizeof(id), detail, sizeof(detail))
#define CANCEL(b)                                                                        \
    req_parse_cancel(b, strlen(b), user, sizeof(user), detail, sizeof(detail))
    assert_int_equal(PAY(""), REQ_OK);
    assert_string_equal(id, "");
    assert_int_equal(PAY("{}"), REQ_OK);
    assert_int_equal(PAY("{\"payment_id\":\"psp:42\"}"), REQ_OK);
    assert_string_equal(id, "psp:42");
    assert_int_equal(PAY("{\"payment_id\":\"a b\"}"), REQ_INVALID);
    assert_int_equal(PAY("{\"payment_id\":7}"), REQ_INVALID);
    assert_int_equal(PAY("{\"paymentid\":\"x\"}"), REQ_INVALID);
    assert_non_null(strstr(detail, "paymentid"));
    assert_int_equal(PAY("[]"), REQ_INVALID);
    assert_int_equal(CANCEL("{\"user_id\":\"ann\"}"), REQ_OK);
    assert_string_equal(user, "ann");
    assert_int_equal(CANCEL(""), REQ_INVALID);
    assert_int_equal(CANCEL("{}"), REQ_INVALID);
    assert_int_equal(CANCEL("{\"user_id\":\"a/b\"}"), REQ_INVALID);
    assert_int_equal(CANCEL("{\"user_id\":\"ann\",\"qty\":1}"), REQ_INVALID);
#undef PAY
#undef CANCEL
}

static void test_rfc3339(void **state)
{
    (void)state;
    long long ms;
    char text[RFC3339_MAX];
    assert_int_equal(rfc3339_parse("1970-01-01T00:00:00Z", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(rfc3339_parse("2026-11-27t15:00:00.123456z", &ms), 0);
    assert_int_equal(ms, 1795791600123LL); /* beyond milliseconds: cut */
    assert_int_equal(rfc3339_parse("2026-11-27 15:00:00-05:30", &ms), 0);
    assert_int_equal(ms, 1795791600000LL + 5 * 3600000LL + 1800000LL);
    assert_int_equal(rfc3339_parse("2016-12-31T23:59:60Z", &ms), 0); /* a leap second */
    assert_int_equal(ms, 1483228799999LL);
    assert_int_equal(rfc3339_parse("2026-11-27T15:00:00.Z", &ms), -1);
    assert_int_equal(rfc3339_parse("2026-11-27T15:00:00+0100", &ms), -1);
    assert_int_equal(rfc3339_parse("", &ms), -1);
    assert_int_equal(rfc3339_format(1795791600000LL, text, sizeof(text)), 20);
    assert_string_equal(text, "2026-11-27T15:00:00Z");
    assert_int_equal(rfc3339_format(1795791600250LL, text, sizeof(text)), 24);
    assert_string_equal(text, "2026-11-27T15:00:00.250Z");
    assert_int_equal(rfc3339_format(253402300799999LL, text, sizeof(text)), 24);
    assert_string_equal(text, "9999-12-31T23:59:59.999Z");
    assert_int_equal(rfc3339_format(0, text, 10), -1); /* does not fit */
    /* what it writes, it reads back */
    for (long long t = 0; t < 253402300799999LL; t += 86399999LL * 37) {
        assert_true(rfc3339_format(t, text, sizeof(text)) > 0);
        assert_int_equal(rfc3339_parse(text, &ms), 0);
        assert_int_equal(ms, t);
    }
}

/* A field the body does not take is refused, named in the detail: a misspelt
 * one ("qtty") must not be taken for an absent one, which has a default. */
static void test_unknown_fields(void **state)
{
    (void)state;
    struct req_order o;
    struct req_sku s;
    char detail[200] = "";
    const char *order_body = "{\"user_id\":\"carol\",\"qtty\":2}";
    assert_int_equal(
        req_parse_order(order_body, strlen(order_body), &o, detail, sizeof(detail)),
        REQ_INVALID);
    assert_non_null(strstr(detail, "qtty"));
    const char *sku_body = "{\"stock\":5,\"per_user_limt\":3}";
    detail[0] = '\0';
    assert_int_equal(
        req_parse_sku(sku_body, strlen(sku_body), 16, &s, detail, sizeof(detail)),
        REQ_INVALID);
    assert_non_null(strstr(detail, "per_user_limt"));
    /* an unknown field wins over a missing one: the detail names the typo */
    detail[0] = '\0';
    const char *typo = "{\"usr_id\":\"a\"}";
    assert_int_equal(req_parse_order(typo, strlen(typo), &o, detail, sizeof(detail)),
                     REQ_INVALID);
    assert_non_null(strstr(detail, "usr_id"));
    /* every known field is still taken */
    assert_int_equal(order("{\"qty\":2,\"user_id\":\"carol\"}", &o), REQ_OK);
    assert_int_equal(o.qty, 2);
    assert_int_equal(sku("{\"per_user_limit\":3,\"segments\":2,\"stock\":5}", &s),
                     REQ_OK);
    assert_int_equal(s.limit, 3);
    /* a long name is cut in the detail, which stays a sentence */
    char body[400];
    snprintf(body, sizeof(body), "{\"user_id\":\"a\",\"%0300d\":1}", 0);
    detail[0] = '\0';
    assert_int_equal(req_parse_order(body, strlen(body), &o, detail, sizeof(detail)),
                     REQ_INVALID);
    assert_true(strlen(detail) < sizeof(detail) - 1);
}

static void test_ids_and_keys(void **state)
{
    (void)state;
    uint64_t id;
    assert_int_equal(req_order_id_parse("382742028233994240", &id), REQ_OK);
    assert_true(id == 382742028233994240ull);
    assert_int_equal(req_order_id_parse("18446744073709551615", &id), REQ_OK);
    assert_int_equal(req_order_id_parse("18446744073709551616", &id), REQ_INVALID);
    assert_int_equal(req_order_id_parse("", &id), REQ_INVALID);
    assert_int_equal(req_order_id_parse("-1", &id), REQ_INVALID);
    assert_int_equal(req_order_id_parse("012", &id), REQ_INVALID);
    assert_int_equal(req_order_id_parse("12a", &id), REQ_INVALID);
    assert_true(req_idem_key_valid("retry-1:abc.def_2"));
    assert_false(req_idem_key_valid(""));
    assert_false(req_idem_key_valid("has space"));
    assert_true(inv_id_valid("sku-1"));
    assert_false(inv_id_valid("sku/1"));
    assert_false(inv_id_valid("{sku}"));
}

static void test_routes(void **state)
{
    (void)state;
    const char *params[SVC_MAX_PARAMS];
    int known;
    char path[128];
    struct svc_route *r;

    strcpy(path, "/skus/phone/orders");
    r = svc_route_find("POST", path, params, &known);
    assert_non_null(r);
    assert_string_equal(r->name, "order_post");
    assert_string_equal(params[0], "phone");

    strcpy(path, "/skus/phone");
    r = svc_route_find("HEAD", path, params, &known); /* HEAD finds GET */
    assert_non_null(r);
    assert_string_equal(r->name, "sku_get");

    strcpy(path, "/skus/phone");
    r = svc_route_find("DELETE", path, params, &known);
    assert_non_null(r);
    assert_string_equal(r->name, "sku_delete");

    strcpy(path, "/skus/phone");
    assert_null(svc_route_find("POST", path, params, &known));
    assert_true(known); /* 405, not 404 */

    strcpy(path, "/skus/phone/orders/extra");
    assert_null(svc_route_find("POST", path, params, &known));
    assert_false(known);
    strcpy(path, "/skus/");
    assert_null(svc_route_find("GET", path, params, &known));
    assert_false(known);
    strcpy(path, "/skus//orders");
    assert_null(svc_route_find("POST", path, params, &known));
    strcpy(path, "/orders/12");
    r = svc_route_find("GET", path, params, &known);
    assert_non_null(r);
    assert_string_equal(params[0], "12");

    char allow[64];
    svc_route_allowed("/skus/x", allow, sizeof(allow));
    assert_string_equal(allow, "PUT, GET, HEAD, PATCH, DELETE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_body),     cmocka_unit_test(test_sku_body),
        cmocka_unit_test(test_sku_window),     cmocka_unit_test(test_sku_room),
        cmocka_unit_test(test_rfc3339),        cmocka_unit_test(test_life_bodies),
        cmocka_unit_test(test_unknown_fields), cmocka_unit_test(test_ids_and_keys),
        cmocka_unit_test(test_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
