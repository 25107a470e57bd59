/* catalog.c: the SKUs there are, a page at a time (GET /skus). No registry is
 * kept: a SKU is its keys, so the pages walk the keyspace with SCAN, on one
 * Redis its meta keys (sk:{<sku>}:meta), on a Redis Cluster the SKU
 * directories (sk:{<sku>}:dir, shards.c) of each master in turn. What SCAN
 * promises, a listing promises: a SKU that exists from the first page to the
 * last is listed (at least once: a rehash meanwhile may list it twice); one
 * made or retired meanwhile may be or not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "inv_impl.h"
#include "rcluster.h"
#include "xalloc.h"

/* The SKU of key "sk:{<sku>}<suffix>" into name; 0, or -1 when key is not
 * one (a SKU is an id: no braces in it). */
static int sku_of_key(const char *key, const char *suffix, char name[INV_ID_MAX + 1])
{
    size_t n = strlen(key), s = strlen(suffix);
    if (n <= 5 + s || strncmp(key, "sk:{", 4) != 0 || strcmp(key + n - s, suffix) != 0 ||
        key[n - s - 1] != '}')
        return -1;
    size_t len = n - 5 - s; /* between "sk:{" and "}<suffix>" */
    if (len == 0 || len > INV_ID_MAX)
        return -1;
    memcpy(name, key + 4, len);
    name[len] = '\0';
    return inv_id_valid(name) ? 0 : -1;
}

/* One SCAN of rc from *cursor (updated: 0 when the walk is over) asking for
 * about count keys; the SKUs of the keys matching "sk:{*}<suffix>" appended to
 * *names (*n of them, room for *cap; grown, the caller frees). 0, or -1 when
 * Redis failed. */
static int scan_step(struct rconn *rc, unsigned long long *cursor, const char *suffix,
                     int count, char (**names)[INV_ID_MAX + 1], int *n, int *cap)
{
    char match[32];
    snprintf(match, sizeof(match), "sk:{*}%s", suffix);
    redisReply *r =
        rc ? rconn_command(rc, "SCAN %llu MATCH %s COUNT %d", *cursor, match, count)
           : NULL;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_ARRAY;
    for (size_t i = 0; ok && i < r->element[1]->elements; i++) {
        const redisReply *key = r->element[1]->element[i];
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *names = xrealloc(*names, sizeof(**names) * (size_t)*cap);
        }
        if (key->type == REDIS_REPLY_STRING &&
            sku_of_key(key->str, suffix, (*names)[*n]) == 0)
            (*n)++;
    }
    if (ok)
        *cursor = strtoull(r->element[0]->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

inv_status inv_sku_list(struct inv_session *s, const char *cursor, int limit,
                        char (**names)[INV_ID_MAX + 1], int *n, char *next,
                        size_t nextlen)
{
    int cap = 0;
    *names = NULL;
    *n = 0;
    next[0] = '\0';
    /* the cursor: "<master>.<scan cursor>" on a cluster, "<scan cursor>" else */
    unsigned long long at = 0;
    int master = 0;
    if (cursor && *cursor) {
        char *end;
        if (s->cl) {
            master = (int)strtol(cursor, &end, 10);
            if (*end != '.' || master < 0 || master >= CLUSTER_MAX_MASTERS)
                return INV_BAD_CURSOR;
            cursor = end + 1;
        }
        if (!*cursor || cursor[strspn(cursor, "0123456789")] != '\0' ||
            strlen(cursor) > 19)
            return INV_BAD_CURSOR;
        at = strtoull(cursor, NULL, 10);
    }
    int masters = 1;
    if (s->cl) {
        const struct cluster_map *m = rcluster_map(s->cl);
        masters = m ? m->nmasters : 0;
        if (masters < 1)
            return inv_shard_outcome(s, INV_UNAVAILABLE);
        if (master >= masters)
            return INV_OK; /* the map shrank since: nothing beyond */
    } else {
        rconn_check(s->rc);
    }
    const char *suffix = s->cl ? ":dir" : ":meta";
    while (*n < limit) {
        struct rconn *rc = s->cl ? rcluster_master(s->cl, master) : s->rc;
        /* a SKU has a dozen keys and more: (limit - n) * 16 keys hold about the SKUs
         * wanted, in one SCAN's work (bounded) */
        int count = (limit - *n) * 16 < 1000 ? (limit - *n) * 16 : 1000;
        if (scan_step(rc, &at, suffix, count, names, n, &cap) != 0) {
            free(*names);
            *names = NULL;
            *n = 0;
            return inv_shard_outcome(s, INV_UNAVAILABLE);
        }
        if (at == 0 && ++master >= masters)
            return INV_OK; /* the walk is over: no next page */
    }
    if (s->cl)
        snprintf(next, nextlen, "%d.%llu", master, at);
    else
        snprintf(next, nextlen, "%llu", at);
    return INV_OK;
}
