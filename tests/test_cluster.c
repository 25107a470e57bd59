/* test_cluster: the Redis Cluster routing (redis/cluster.h) against a real
 * cluster of three masters started here: every key's slot is the one the
 * servers compute, the map from CLUSTER SHARDS and from CLUSTER SLOTS says
 * which master serves each slot, the redirections the servers answer are
 * read (MOVED to the owner, ASK during a migration, CLUSTERDOWN while slots
 * are unserved), and a SKU's segment tags land on the masters chosen. The
 * router of an event loop (acluster.h) sends each command to its slot's
 * master from one seed, follows MOVED and ASK as a slot moves, and answers
 * a command it cannot send (no reachable seed) on the loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "acluster.h"
#include "cluster.h"
#include "rconn.h"
#include "testutil.h"

#define MASTERS 3

static struct test_redis node[MASTERS];
static struct rconn *rc[MASTERS];

static redisReply *cmd(int i, const char *fmt, const char *arg)
{
    redisReply *r = rconn_command(rc[i], fmt, arg);
    assert_non_null(r);
    return r;
}

static void ok(int i, const char *fmt, const char *arg)
{
    redisReply *r = cmd(i, fmt, arg);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("node %d: %s", i, r->str);
    freeReplyObject(r);
}

/* Every node says cluster_state:ok. */
static int cluster_ok(void *arg)
{
    (void)arg;
    for (int i = 0; i < MASTERS; i++) {
        redisReply *r = rconn_command(rc[i], "CLUSTER INFO");
        int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
        if (r)
            freeReplyObject(r);
        if (!up)
            return 0;
    }
    return 1;
}

/* Master i serves the slots [i * 16384 / 3, (i + 1) * 16384 / 3). */
static int first_slot(int i)
{
    return i * CLUSTER_SLOTS / MASTERS;
}

/* The master that serves key. */
static int owner_of(const char *key)
{
    int slot = cluster_keyslot(key, strlen(key)), i = 0;
    while (slot >= first_slot(i + 1))
        i++;
    return i;
}

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                          NULL};
    for (int i = 0; i < MASTERS; i++) {
        test_redis_start(&node[i], args);
        rc[i] = rconn_new("127.0.0.1", node[i].port, NULL, 2000);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < MASTERS; i++) {
        rconn_free(rc[i]);
        test_redis_stop(&node[i], 0, 0);
    }
    return 0;
}

/* Before the slots are served, a command is refused with CLUSTERDOWN: a
 * retry later, not an answer. Then the slots are split and the nodes meet. */
static void test_unserved_slots_say_retry(void **state)
{
    (void)state;
    redisReply *r = cmd(0, "GET %s", "k");
    int slot;
    char host[64];
    int port;
    assert_int_equal(cluster_redirection(r, &slot, host, sizeof(host), &port),
                     CLUSTER_RETRY);
    freeReplyObject(r);

    char range[32], meet[32];
    for (int i = 0; i < MASTERS; i++) {
        snprintf(range, sizeof(range), "%d %d", first_slot(i), first_slot(i + 1) - 1);
        redisReply *a = rconn_command(rc[i], "CLUSTER ADDSLOTSRANGE %d %d", first_slot(i),
                                      first_slot(i + 1) - 1);
        assert_non_null(a);
        if (a->type == REDIS_REPLY_ERROR)
            fail_msg("ADDSLOTSRANGE %s: %s", range, a->str);
        freeReplyObject(a);
    }
    for (int i = 1; i < MASTERS; i++) {
        snprintf(meet, sizeof(meet), "%d", node[i].port);
        redisReply *m = rconn_command(rc[0], "CLUSTER MEET 127.0.0.1 %s", meet);
        assert_non_null(m);
        freeReplyObject(m);
    }
    if (!test_wait_for(cluster_ok, NULL, 20000))
        fail_msg("the cluster did not reach cluster_state:ok");
}

/* The slot of every key, with and without hash tags, is the server's. */
static void test_keyslot_is_the_servers(void **state)
{
    (void)state;
    const char *keys[] = {"foo",
                          "bar",
                          "{user1000}.following",
                          "{user1000}.followers",
                          "foo{}{bar}",
                          "foo{{bar}}zap",
                          "foo{bar}{zap}",
                          "{}",
                          "{",
                          "}{",
                          "a{b",
                          "sk:{hot}:stock",
                          "sk:{hot:3.17}:lock:3",
                          "",
                          "123456789"};
    assert_int_equal(cluster_crc16("123456789", 9), 0x31c3);
    char key[32];
    for (size_t i = 0; i < sizeof(keys) / sizeof(*keys) + 300; i++) {
        const char *k = keys[i % (sizeof(keys) / sizeof(*keys))];
        if (i >= sizeof(keys) / sizeof(*keys)) {
            snprintf(key, sizeof(key), "k%zu{t%zu}x", i, i % 7);
            k = key;
        }
        redisReply *r = cmd(0, "CLUSTER KEYSLOT %s", k);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (cluster_keyslot(k, strlen(k)) != r->integer)
            fail_msg("'%s': slot %d, the server says %lld", k,
                     cluster_keyslot(k, strlen(k)), r->integer);
        freeReplyObject(r);
    }
}

/* Asserts that m has the three masters, each serving its third. */
static void assert_map(const struct cluster_map *m)
{
    assert_int_equal(m->nmasters, MASTERS);
    assert_int_equal(cluster_map_unserved(m), 0);
    for (int i = 0; i < MASTERS; i++)
        for (int s = first_slot(i); s < first_slot(i + 1); s += 997) {
            const struct cluster_master *cm = &m->masters[m->owner[s]];
            if (cm->port != node[i].port || strcmp(cm->host, "127.0.0.1") != 0)
                fail_msg("slot %d: %s:%d, not node %d (port %d)", s, cm->host, cm->port,
                         i, node[i].port);
        }
}

static void test_map_from_shards_and_slots(void **state)
{
    (void)state;
    struct cluster_map *m = malloc(sizeof(*m));
    assert_non_null(m);
    for (int i = 0; i < MASTERS; i++) {
        redisReply *r = cmd(i, "CLUSTER SHARDS", NULL);
        assert_int_equal(cluster_map_from_shards(m, r), RCONN_OK);
        freeReplyObject(r);
        assert_map(m);
        r = cmd(i, "CLUSTER SLOTS", NULL);
        assert_int_equal(cluster_map_from_slots(m, r), RCONN_OK);
        freeReplyObject(r);
        assert_map(m);
    }
    redisReply *r = cmd(0, "PING", NULL); /* not a topology: refused */
    assert_int_equal(cluster_map_from_shards(m, r), RCONN_ERR);
    assert_int_equal(cluster_map_from_slots(m, r), RCONN_ERR);
    freeReplyObject(r);
    free(m);
}

/* A key asked of a node that does not serve it: MOVED to the one that does. */
static void test_moved_names_the_owner(void **state)
{
    (void)state;
    for (int k = 0; k < 30; k++) {
        char key[16];
        snprintf(key, sizeof(key), "m%d", k);
        int owner = owner_of(key);
        int other = (owner + 1) % MASTERS;
        redisReply *r = cmd(other, "GET %s", key);
        int slot, port;
        char host[64];
        assert_int_equal(cluster_redirection(r, &slot, host, sizeof(host), &port),
                         CLUSTER_MOVED);
        assert_int_equal(slot, cluster_keyslot(key, strlen(key)));
        assert_int_equal(port, node[owner].port);
        assert_string_equal(host, "127.0.0.1");
        freeReplyObject(r);
        r = cmd(owner, "GET %s", key);
        assert_int_equal(cluster_redirection(r, &slot, host, sizeof(host), &port),
                         CLUSTER_ANSWER);
        freeReplyObject(r);
    }
}

/* A slot migrating from node 0 to node 1: a key node 0 no longer has is
 * asked of node 1 (ASK), which answers it after ASKING. */
static void test_ask_during_a_migration(void **state)
{
    (void)state;
    const char *key = "{mig}k";
    int slot = cluster_keyslot(key, strlen(key));
    int from = owner_of(key);
    int to = (from + 1) % MASTERS;
    char s[16], id[64];
    snprintf(s, sizeof(s), "%d", slot);
    redisReply *r = cmd(to, "CLUSTER MYID", NULL);
    snprintf(id, sizeof(id), "%s", r->str);
    freeReplyObject(r);
    redisReply *from_id = cmd(from, "CLUSTER MYID", NULL);
    r = rconn_command(rc[to], "CLUSTER SETSLOT %s IMPORTING %s", s, from_id->str);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    freeReplyObject(from_id);
    r = rconn_command(rc[from], "CLUSTER SETSLOT %s MIGRATING %s", s, id);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);

    r = cmd(from, "GET %s", key);
    int got_slot, port;
    char host[64];
    assert_int_equal(cluster_redirection(r, &got_slot, host, sizeof(host), &port),
                     CLUSTER_ASK);
    assert_int_equal(got_slot, slot);
    assert_int_equal(port, node[to].port);
    freeReplyObject(r);
    ok(to, "ASKING", NULL);
    r = cmd(to, "SET %s v", key);
    assert_int_equal(cluster_redirection(r, &got_slot, host, sizeof(host), &port),
                     CLUSTER_ANSWER);
    freeReplyObject(r);
    /* back as it was: the slot stays with from */
    r = rconn_command(rc[to], "DEL %s", key);
    freeReplyObject(r);
    r = rconn_command(rc[from], "CLUSTER SETSLOT %s STABLE", s);
    freeReplyObject(r);
    r = rconn_command(rc[to], "CLUSTER SETSLOT %s STABLE", s);
    freeReplyObject(r);
}

/* A SKU's shards over 3 masters: one gene per master, each gene's tag in a
 * slot that master serves (the server agrees), and two SKUs need not share
 * a tag; the genes' tags cover the runs of slots they stand for. */
static void test_sku_genes_put_a_shard_on_every_master(void **state)
{
    (void)state;
    struct cluster_map *m = malloc(sizeof(*m));
    assert_non_null(m);
    redisReply *r = cmd(1, "CLUSTER SHARDS", NULL);
    assert_int_equal(cluster_map_from_shards(m, r), RCONN_OK);
    freeReplyObject(r);
    for (int g = 0; g < CLUSTER_GENES; g++)
        assert_int_equal(cluster_gene_slot(g) / (CLUSTER_SLOTS / CLUSTER_GENES), g);
    int genes[CLUSTER_MAX_MASTERS], other[CLUSTER_MAX_MASTERS], differ = 0;
    assert_int_equal(cluster_sku_genes(m, "hot", genes), MASTERS);
    for (int i = 0; i < MASTERS; i++) {
        char key[96];
        snprintf(key, sizeof(key), "sk:{%s}:hot:stock", cluster_gene_tag(genes[i]));
        int slot = cluster_keyslot(key, strlen(key));
        assert_int_equal(slot, cluster_gene_slot(genes[i]));
        assert_int_equal(m->owner[slot], i);
        redisReply *g = rconn_command(rc[0], "GET %s", key);
        int s2, port;
        char host[64];
        cluster_redirect rd = cluster_redirection(g, &s2, host, sizeof(host), &port);
        int served_by = rd == CLUSTER_MOVED ? port : node[0].port;
        assert_int_equal(served_by, m->masters[i].port);
        freeReplyObject(g);
    }
    for (int n = 0; n < 20 && !differ; n++) {
        char sku[16];
        snprintf(sku, sizeof(sku), "sku%d", n);
        assert_int_equal(cluster_sku_genes(m, sku, other), MASTERS);
        differ = memcmp(genes, other, sizeof(int) * MASTERS) != 0;
    }
    assert_true(differ);
    /* a master that serves no gene's slot has no shard to hold */
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        if (m->owner[s] == 2)
            m->owner[s] = 1;
    assert_int_equal(cluster_sku_genes(m, "hot", genes), -1);
    free(m);
}

/* ---- the event loop's router ----------------------------------------------- */

/* An event loop with a router on it and the answers of its commands. */
struct router {
    struct event_base *base;
    struct acluster *ac;
    int answered, ok;
    char last[64]; /* the last answer, as text */
    aconn_result last_res;
};

static void router_open(struct router *r, int seed_port)
{
    memset(r, 0, sizeof(*r));
    r->base = event_base_new();
    assert_non_null(r->base);
    struct rconn_addr seed = {.port = seed_port};
    snprintf(seed.host, sizeof(seed.host), "127.0.0.1");
    r->ac = acluster_new(r->base, &seed, 1, NULL, 500);
}

static void router_close(struct router *r)
{
    acluster_free(r->ac);
    event_base_free(r->base);
}

static void on_routed(void *arg, aconn_result res, redisReply *reply)
{
    struct router *r = arg;
    r->answered++;
    r->last_res = res;
    r->last[0] = '\0';
    if (reply && (reply->type == REDIS_REPLY_STATUS ||
                  reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_ERROR))
        snprintf(r->last, sizeof(r->last), "%s", reply->str);
    else if (reply && reply->type == REDIS_REPLY_INTEGER)
        snprintf(r->last, sizeof(r->last), "%lld", reply->integer);
    r->ok += res == ACONN_REPLY && reply && reply->type != REDIS_REPLY_ERROR;
}

/* Runs the loop until n answers came (at most 5 s). */
static void router_wait(struct router *r, int n)
{
    for (int i = 0; i < 5000 && r->answered < n; i++) {
        struct timeval ms = {.tv_usec = 1000};
        event_base_loopexit(r->base, &ms);
        event_base_dispatch(r->base);
    }
    if (r->answered < n)
        fail_msg("%d of %d answers", r->answered, n);
}

static void route(struct router *r, const char *a0, const char *key, const char *a2);

/* A router that has learnt the map (one command answered through it). */
static void router_learnt(struct router *r)
{
    router_open(r, node[0].port);
    route(r, "SET", "warm", "up");
    router_wait(r, 1);
}

static void route(struct router *r, const char *a0, const char *key, const char *a2)
{
    const char *argv[] = {a0, key, a2};
    assert_int_equal(acluster_command(r->ac, cluster_keyslot(key, strlen(key)), on_routed,
                                      r, a2 ? 3 : 2, argv),
                     0);
}

/* From one seed, every key goes to its slot's master: 60 SETs answered OK,
 * each value found on the master that serves the key, no redirection. */
static void test_router_sends_each_key_to_its_master(void **state)
{
    (void)state;
    struct router r;
    router_open(&r, node[2].port);
    char key[16], val[16];
    for (int k = 0; k < 60; k++) {
        snprintf(key, sizeof(key), "r%d", k);
        snprintf(val, sizeof(val), "v%d", k);
        route(&r, "SET", key, val);
    }
    router_wait(&r, 60);
    assert_int_equal(r.ok, 60);
    for (int k = 0; k < 60; k++) {
        snprintf(key, sizeof(key), "r%d", k);
        redisReply *g = cmd(owner_of(key), "GET %s", key);
        assert_int_equal(g->type, REDIS_REPLY_STRING);
        snprintf(val, sizeof(val), "v%d", k);
        assert_string_equal(g->str, val);
        freeReplyObject(g);
    }
    struct acluster_stats st;
    acluster_stats(r.ac, &st);
    assert_int_equal(st.moved + st.ask + st.retries, 0);
    assert_true(st.refreshes >= 1);
    assert_int_equal(acluster_map(r.ac)->nmasters, MASTERS);
    router_close(&r);
}

/* Sets slot's owner to node `to` on every node (the slot holds no key). */
static void slot_to(int slot, int to)
{
    redisReply *id = cmd(to, "CLUSTER MYID", NULL);
    char s[16];
    snprintf(s, sizeof(s), "%d", slot);
    for (int i = 0; i < MASTERS; i++) {
        redisReply *r = rconn_command(rc[i], "CLUSTER SETSLOT %s NODE %s", s, id->str);
        assert_non_null(r);
        if (r->type == REDIS_REPLY_ERROR)
            fail_msg("SETSLOT %s NODE on %d: %s", s, i, r->str);
        freeReplyObject(r);
    }
    freeReplyObject(id);
}

/* A slot moved to another master after the router learnt the map: the
 * command goes to the old one, MOVED, and is sent again to the new one,
 * which then has the value. */
static void test_router_follows_moved(void **state)
{
    (void)state;
    struct router r;
    router_learnt(&r);
    const char *key = "{moving}k";
    int slot = cluster_keyslot(key, strlen(key)), from = owner_of(key);
    int to = (from + 1) % MASTERS;
    slot_to(slot, to);
    route(&r, "SET", key, "moved");
    router_wait(&r, 2);
    assert_string_equal(r.last, "OK");
    struct acluster_stats st;
    acluster_stats(r.ac, &st);
    assert_int_equal(st.moved, 1);
    redisReply *g = cmd(to, "GET %s", key);
    assert_int_equal(g->type, REDIS_REPLY_STRING);
    assert_string_equal(g->str, "moved");
    freeReplyObject(g);
    freeReplyObject(cmd(to, "DEL %s", key)); /* back as it was */
    slot_to(slot, from);
    router_close(&r);
}

/* A slot migrating, its key already on the target: the source answers ASK,
 * and the router asks the target behind ASKING, once. */
static void test_router_follows_ask(void **state)
{
    (void)state;
    struct router r;
    router_learnt(&r);
    const char *key = "{asking}k";
    int slot = cluster_keyslot(key, strlen(key)), from = owner_of(key);
    int to = (from + 1) % MASTERS;
    char s[16];
    snprintf(s, sizeof(s), "%d", slot);
    redisReply *from_id = cmd(from, "CLUSTER MYID", NULL);
    redisReply *to_id = cmd(to, "CLUSTER MYID", NULL);
    freeReplyObject(
        rconn_command(rc[to], "CLUSTER SETSLOT %s IMPORTING %s", s, from_id->str));
    freeReplyObject(
        rconn_command(rc[from], "CLUSTER SETSLOT %s MIGRATING %s", s, to_id->str));
    ok(to, "ASKING", NULL);
    ok(to, "SET {asking}k there", NULL);
    route(&r, "GET", key, NULL);
    router_wait(&r, 2);
    assert_string_equal(r.last, "there");
    struct acluster_stats st;
    acluster_stats(r.ac, &st);
    assert_int_equal(st.ask, 1);
    ok(to, "ASKING", NULL);
    ok(to, "DEL {asking}k", NULL);
    freeReplyObject(rconn_command(rc[from], "CLUSTER SETSLOT %s STABLE", s));
    freeReplyObject(rconn_command(rc[to], "CLUSTER SETSLOT %s STABLE", s));
    freeReplyObject(from_id);
    freeReplyObject(to_id);
    router_close(&r);
}

/* No seed answers: the command is answered "not sent", on the loop and not
 * inside the call that queued it. */
static void test_router_without_a_seed(void **state)
{
    (void)state;
    struct router r;
    router_open(&r, test_free_port());
    route(&r, "GET", "k", NULL);
    assert_int_equal(r.answered, 0);
    router_wait(&r, 1);
    assert_int_equal(r.last_res, ACONN_NOT_SENT);
    router_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unserved_slots_say_retry),
        cmocka_unit_test(test_keyslot_is_the_servers),
        cmocka_unit_test(test_map_from_shards_and_slots),
        cmocka_unit_test(test_moved_names_the_owner),
        cmocka_unit_test(test_ask_during_a_migration),
        cmocka_unit_test(test_sku_genes_put_a_shard_on_every_master),
        cmocka_unit_test(test_router_sends_each_key_to_its_master),
        cmocka_unit_test(test_router_follows_moved),
        cmocka_unit_test(test_router_follows_ask),
        cmocka_unit_test(test_router_without_a_seed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
