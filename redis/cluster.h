/* cluster: what seckill needs of the Redis Cluster protocol, thin.
 *
 * hiredis 0.14 speaks RESP to one node and knows nothing of clusters (and
 * hiredis-cluster needs hiredis 1.x), so the routing is here: the slot of a
 * key (CRC16-XMODEM of its hash tag, mod 16384, as the cluster spec says),
 * the map of which master serves which slot (from CLUSTER SHARDS, or CLUSTER
 * SLOTS on servers without it), what a redirection answer asks for (MOVED:
 * the map is stale; ASK: one command to another node, after ASKING) and
 * which errors are worth a bounded retry (TRYAGAIN, CLUSTERDOWN).
 *
 * And where a SKU's segments live: each segment's keys share a hash tag, and
 * the tags are chosen by computing their slots, so that K segments spread
 * evenly over the masters instead of landing wherever their names hash.
 *
 * Thread safety: pure functions; a cluster_map is a plain value. */
#ifndef SECKILL_CLUSTER_H
#define SECKILL_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "rconn.h"

#define CLUSTER_SLOTS 16384
#define CLUSTER_MAX_MASTERS 64
#define CLUSTER_NO_MASTER 0xffff

/* CRC16-XMODEM (polynomial 0x1021, initial 0) of buf[0..len-1]. */
uint16_t cluster_crc16(const char *buf, size_t len);
/* The slot of key[0..len-1]: of its hash tag (what is between the first '{'
 * and the first '}' after it, when not empty), else of the whole key. */
int cluster_keyslot(const char *key, size_t len);

struct cluster_master {
    char id[41]; /* the node id */
    char host[64];
    int port;
    int replicas; /* replicas the topology listed for it */
};

/* Which master serves each slot. */
struct cluster_map {
    int nmasters;
    struct cluster_master masters[CLUSTER_MAX_MASTERS];
    uint16_t owner[CLUSTER_SLOTS]; /* index into masters, or CLUSTER_NO_MASTER */
};

/* Fills m from the answer to CLUSTER SHARDS (Redis 7: slot numbers as
 * integers, or on 7.0.x as strings; both are read): RCONN_OK, or RCONN_ERR when r is not
 * such an answer (an error: the server may not have the command). */
rconn_status cluster_map_from_shards(struct cluster_map *m, const redisReply *r);
/* The same from CLUSTER SLOTS, for servers before 7. */
rconn_status cluster_map_from_slots(struct cluster_map *m, const redisReply *r);
/* Slots no master serves. */
int cluster_map_unserved(const struct cluster_map *m);

typedef enum {
    CLUSTER_ANSWER = 0, /* not a redirection: the command's own answer */
    CLUSTER_MOVED,      /* the slot lives elsewhere now: refresh the map, resend */
    CLUSTER_ASK,        /* the slot is migrating: ASKING, then resend once there */
    CLUSTER_RETRY,      /* TRYAGAIN or CLUSTERDOWN: resend after a pause, a few times */
} cluster_redirect;

/* What r asks for; on MOVED and ASK, *slot and the node (host, port) to go
 * to. */
cluster_redirect cluster_redirection(const redisReply *r, int *slot, char *host,
                                     size_t hostlen, int *port);

/* Genes: the hash tags of a SKU's shards. A SKU sold on a cluster keeps its
 * keys in one shard per master, each under one of CLUSTER_GENES fixed tags
 * ("{g<n>}"), tag g being the first of its kind whose slot lies in the g-th
 * of CLUSTER_GENES equal runs of slots: so every master of an even split
 * serves some, and an order id can name its shard's tag in a few bits (the
 * gene, orderid.h) for GET /orders/{id} to find it. */
#define CLUSTER_GENE_BITS 6
#define CLUSTER_GENES (1 << CLUSTER_GENE_BITS)

/* The hash tag of gene g (0..CLUSTER_GENES-1), without braces: a static
 * string, the same in every process. */
const char *cluster_gene_tag(int g);

/* The slot of gene g's tag. */
int cluster_gene_slot(int g);

/* Picks a SKU's genes: one per master of m, genes[i] a gene whose slot
 * master i serves, chosen among those by a hash of sku so that SKUs spread
 * over a master's slots. Returns the number of shards (m->nmasters), or -1
 * when some master serves no gene's slot (give it more slots) or m has no
 * master. genes holds CLUSTER_MAX_MASTERS. */
int cluster_sku_genes(const struct cluster_map *m, const char *sku, int *genes);

#endif
