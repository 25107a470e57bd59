/* Unit tests: request validation and route matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "request.h"
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
        assert_int_equal(
            req_parse_order(bad[i], strlen(bad[i]), &o, detail, sizeof(detail)),
            REQ_INVALID);
        assert_true(detail[0] != '\0'); /* every refusal says why */
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
    assert_null(svc_route_find("DELETE", path, params, &known));
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
    assert_string_equal(allow, "PUT, GET, HEAD");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_body),
        cmocka_unit_test(test_sku_body),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_ids_and_keys),
        cmocka_unit_test(test_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
