#include "cluster.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint16_t cluster_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int cluster_keyslot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);
        if (close && close > open + 1) /* "{}" is no tag: the whole key */
            return cluster_crc16(open + 1, (size_t)(close - open - 1)) % CLUSTER_SLOTS;
    }
    return cluster_crc16(key, len) % CLUSTER_SLOTS;
}

static void map_clear(struct cluster_map *m)
{
    m->nmasters = 0;
    for (int i = 0; i < CLUSTER_SLOTS; i++)
        m->owner[i] = CLUSTER_NO_MASTER;
}

/* A slot number: an integer, or (CLUSTER SHARDS on 7.0.x) a string. */
static long slot_number(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return (long)r->integer;
    if (r->type != REDIS_REPLY_STRING)
        return -1;
    char *end;
    long v = strtol(r->str, &end, 10);
    return *end || end == r->str ? -1 : v;
}

/* Marks slots from..to as served by master i. -1 when out of range. */
static int serve(struct cluster_map *m, long from, long to, int i)
{
    if (from < 0 || to >= CLUSTER_SLOTS || from > to)
        return -1;
    for (long s = from; s <= to; s++)
        m->owner[s] = (uint16_t)i;
    return 0;
}

/* The value of field name in a flat [name, value, ...] array, or NULL. */
static const redisReply *field(const redisReply *r, const char *name)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1];
    return NULL;
}

static int field_is(const redisReply *node, const char *name, const char *value)
{
    const redisReply *v = field(node, name);
    return v && v->type == REDIS_REPLY_STRING && strcmp(v->str, value) == 0;
}

/* Adds master id at host:port to m. Its index, or -1 when m is full. */
static int master_add(struct cluster_map *m, const char *id, const char *host, int port,
                      int replicas)
{
    if (m->nmasters == CLUSTER_MAX_MASTERS)
        return -1;
    struct cluster_master *cm = &m->masters[m->nmasters];
    snprintf(cm->id, sizeof(cm->id), "%s", id);
    snprintf(cm->host, sizeof(cm->host), "%s", host);
    cm->port = port;
    cm->replicas = replicas;
    return m->nmasters++;
}

/* Adds the master of one shard's node list to m: the node whose role is
 * master (a healthy one first). Its index, or -1 when none is listed. */
static int shard_master(struct cluster_map *m, const redisReply *nodes)
{
    const redisReply *master = NULL;
    int replicas = 0;
    for (size_t i = 0; i < nodes->elements; i++) {
        const redisReply *n = nodes->element[i];
        if (!field_is(n, "role", "master")) {
            replicas++;
            continue;
        }
        if (!master || field_is(master, "health", "fail"))
            master = n;
    }
    const redisReply *id = master ? field(master, "id") : NULL;
    const redisReply *port = master ? field(master, "port") : NULL;
    const redisReply *host = master ? field(master, "endpoint") : NULL;
    if (!host || host->type != REDIS_REPLY_STRING || !strcmp(host->str, "?"))
        host = master ? field(master, "ip") : NULL;
    if (!id || id->type != REDIS_REPLY_STRING || !port ||
        port->type != REDIS_REPLY_INTEGER || !host || host->type != REDIS_REPLY_STRING)
        return -1;
    return master_add(m, id->str, host->str, (int)port->integer, replicas);
}

rconn_status cluster_map_from_shards(struct cluster_map *m, const redisReply *r)
{
    map_clear(m);
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return RCONN_ERR;
    for (size_t s = 0; s < r->elements; s++) {
        const redisReply *shard = r->element[s];
        const redisReply *slots = field(shard, "slots");
        const redisReply *nodes = field(shard, "nodes");
        if (!slots || slots->type != REDIS_REPLY_ARRAY || !nodes ||
            nodes->type != REDIS_REPLY_ARRAY || slots->elements % 2)
            return RCONN_ERR;
        if (slots->elements == 0)
            continue; /* a master without slots serves nothing */
        int i = shard_master(m, nodes);
        if (i < 0)
            return RCONN_ERR;
        for (size_t k = 0; k < slots->elements; k += 2)
            if (serve(m, slot_number(slots->element[k]),
                      slot_number(slots->element[k + 1]), i) != 0)
                return RCONN_ERR;
    }
    return RCONN_OK;
}

/* The master of [ip, port, id] in m, added when new. -1 when malformed. */
static int slots_master(struct cluster_map *m, const redisReply *node)
{
    if (node->type != REDIS_REPLY_ARRAY || node->elements < 3 ||
        node->element[0]->type != REDIS_REPLY_STRING ||
        node->element[1]->type != REDIS_REPLY_INTEGER ||
        node->element[2]->type != REDIS_REPLY_STRING)
        return -1;
    for (int i = 0; i < m->nmasters; i++)
        if (strcmp(m->masters[i].id, node->element[2]->str) == 0)
            return i;
    return master_add(m, node->element[2]->str, node->element[0]->str,
                      (int)node->element[1]->integer, 0);
}

rconn_status cluster_map_from_slots(struct cluster_map *m, const redisReply *r)
{
    map_clear(m);
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return RCONN_ERR;
    for (size_t s = 0; s < r->elements; s++) {
        const redisReply *range = r->element[s];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3)
            return RCONN_ERR;
        int i = slots_master(m, range->element[2]);
        if (i < 0 || serve(m, slot_number(range->element[0]),
                           slot_number(range->element[1]), i) != 0)
            return RCONN_ERR;
        m->masters[i].replicas = (int)range->elements - 3;
    }
    return RCONN_OK;
}

int cluster_map_unserved(const struct cluster_map *m)
{
    int n = 0;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        n += m->owner[s] == CLUSTER_NO_MASTER;
    return n;
}

/* "MOVED 3999 127.0.0.1:6381" (or ASK): the slot and the node. */
static int parse_target(const char *text, int *slot, char *host, size_t hostlen,
                        int *port)
{
    const char *sp = strchr(text, ' ');
    if (!sp)
        return -1;
    char *end;
    long s = strtol(sp + 1, &end, 10);
    const char *addr = end + 1;
    const char *colon = *end == ' ' ? strrchr(addr, ':') : NULL;
    if (!colon || s < 0 || s >= CLUSTER_SLOTS || (size_t)(colon - addr) >= hostlen)
        return -1;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *slot = (int)s;
    *port = (int)p;
    return 0;
}

cluster_redirect cluster_redirection(const redisReply *r, int *slot, char *host,
                                     size_t hostlen, int *port)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return CLUSTER_ANSWER;
    if (strncmp(r->str, "MOVED ", 6) == 0)
        return parse_target(r->str, slot, host, hostlen, port) == 0 ? CLUSTER_MOVED
                                                                    : CLUSTER_ANSWER;
    if (strncmp(r->str, "ASK ", 4) == 0)
        return parse_target(r->str, slot, host, hostlen, port) == 0 ? CLUSTER_ASK
                                                                    : CLUSTER_ANSWER;
    if (strncmp(r->str, "TRYAGAIN", 8) == 0 || strncmp(r->str, "CLUSTERDOWN", 11) == 0)
        return CLUSTER_RETRY;
    return CLUSTER_ANSWER;
}

/* The table of genes' tags, made once: the first decimal numbers, written
 * "t<n>", to land in each run of slots. */
static char gene_tags[CLUSTER_GENES][12];
static int gene_slots[CLUSTER_GENES];
static pthread_once_t genes_once = PTHREAD_ONCE_INIT;

static void genes_make(void)
{
    int left = CLUSTER_GENES;
    for (int n = 0; left > 0; n++) {
        char tag[12];
        int len = snprintf(tag, sizeof(tag), "t%d", n);
        int slot = cluster_keyslot(tag, (size_t)len);
        int g = slot / (CLUSTER_SLOTS / CLUSTER_GENES);
        if (gene_tags[g][0] == '\0') {
            memcpy(gene_tags[g], tag, (size_t)len + 1);
            gene_slots[g] = slot;
            left--;
        }
    }
}

const char *cluster_gene_tag(int g)
{
    pthread_once(&genes_once, genes_make);
    return gene_tags[g & (CLUSTER_GENES - 1)];
}

int cluster_gene_slot(int g)
{
    pthread_once(&genes_once, genes_make);
    return gene_slots[g & (CLUSTER_GENES - 1)];
}

int cluster_sku_genes(const struct cluster_map *m, const char *sku, int *genes)
{
    if (m->nmasters < 1)
        return -1;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = sku; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    for (int i = 0; i < m->nmasters; i++) {
        int mine[CLUSTER_GENES], n = 0;
        for (int g = 0; g < CLUSTER_GENES; g++)
            if (m->owner[cluster_gene_slot(g)] == i)
                mine[n++] = g;
        if (n == 0)
            return -1;
        genes[i] = mine[h % (uint32_t)n];
    }
    return m->nmasters;
}
