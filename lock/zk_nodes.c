/* zk_nodes: the nodes the ZooKeeper client keeps track of besides its
 * requests (see zk_conn.h): orphans (nodes of ours that may exist but are
 * no longer wanted, found by their guid and deleted in the background) and
 * the parents known to exist. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"
#include "zk_call.h"
#include "zk_loop.h"

/* A parent known to exist (st->parents). */
struct zk_parent {
    struct zk_parent *next;
    char path[];
};

/* ---- orphans ----------------------------------------------------------- */

int zk_has_guid(const char *name, const char *guid)
{
    size_t plen = strlen(ZK_GUID_PREFIX);
    return strncmp(name, ZK_GUID_PREFIX, plen) == 0 &&
           strncmp(name + plen, guid, 32) == 0 && name[plen + 32] == '-';
}

/* Puts o back on c's list, or frees it when the session is gone (and its
 * ephemeral nodes with it). */
static void orphan_requeue(struct zk_conn *c, struct zk_orphan *o)
{
    pthread_mutex_lock(&c->st->mu);
    if (!c->closing && !c->expired) {
        o->next = c->orphans;
        c->orphans = o;
        o = NULL;
    }
    pthread_mutex_unlock(&c->st->mu);
    free(o);
}

static void sweep_deleted(int rc, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    if (zk_rc_uncertain(rc)) {
        orphan_requeue(call->conn, call->orphan);
        call->orphan = NULL;
    }
    zk_call_free(call);
}

static void sweep_listed(int rc, const struct String_vector *strings, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;
    struct zk_conn *c = call->conn;
    if (rc == ZOK && strings) {
        for (int i = 0; i < strings->count; i++) {
            if (!zk_has_guid(strings->data[i], call->orphan->guid))
                continue;
            char node[ZK_PATH_MAX];
            snprintf(node, sizeof(node), "%s/%s", call->orphan->parent, strings->data[i]);
            rc = zoo_adelete(c->zh, node, -1, sweep_deleted, call);
            if (rc == ZOK)
                return; /* sweep_deleted carries on */
            break;
        }
    }
    if (zk_rc_uncertain(rc)) {
        orphan_requeue(c, call->orphan);
        call->orphan = NULL;
    }
    zk_call_free(call);
}

/* The sweep, on c's loop. */
static void sweep_here(struct zk_conn *c)
{
    pthread_mutex_lock(&c->st->mu);
    struct zk_orphan *list = NULL;
    if (c->connected && !c->closing && !c->expired && c->zh) {
        list = c->orphans;
        c->orphans = NULL;
    }
    pthread_mutex_unlock(&c->st->mu);
    while (list) {
        struct zk_orphan *o = list;
        list = o->next;
        struct zk_call *call = zk_call_new(c, OP_SWEEP, 0);
        call->orphan = o;
        if (zoo_aget_children(c->zh, o->parent, 0, sweep_listed, call) != ZOK) {
            orphan_requeue(c, o);
            call->orphan = NULL;
            zk_call_free(call);
        }
    }
}

/* A sweep asked from another thread: holds a reference to c. */
static void sweep_job(void *arg)
{
    struct zk_conn *c = arg;
    sweep_here(c);
    zk_conn_arm(c);
    zk_conn_put(c);
}

/* Looks for every orphan of c by its guid and deletes it, in the background:
 * at once on c's loop, else as a job (not once c is closing). */
void zk_orphans_sweep(struct zk_conn *c)
{
    struct zk_state *st = c->st;
    if (zk_loop_here(st->loop)) {
        sweep_here(c);
        return;
    }
    pthread_mutex_lock(&st->mu);
    int go = !c->closing && !c->expired && c->orphans;
    if (go)
        c->refs++;
    pthread_mutex_unlock(&st->mu);
    if (go)
        zk_loop_post(st->loop, sweep_job, c);
}

void zk_orphan_add(struct zk_conn *c, const char *parent, const char *guid)
{
    if (!guid[0])
        return;
    size_t len = strlen(parent);
    struct zk_orphan *o = xcalloc(1, sizeof(*o) + len + 1);
    snprintf(o->guid, sizeof(o->guid), "%s", guid);
    memcpy(o->parent, parent, len + 1);
    orphan_requeue(c, o);
    zk_orphans_sweep(c);
}

/* ---- parents ----------------------------------------------------------- */

static unsigned parent_bucket(const char *path)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % ZK_PARENT_BUCKETS;
}

int zk_parent_known(struct zk_state *st, const char *path)
{
    pthread_mutex_lock(&st->mu);
    struct zk_parent *p = st->parents[parent_bucket(path)];
    while (p && strcmp(p->path, path) != 0)
        p = p->next;
    pthread_mutex_unlock(&st->mu);
    return p != NULL;
}

void zk_parent_remember(struct zk_state *st, const char *path, int known)
{
    unsigned b = parent_bucket(path);
    pthread_mutex_lock(&st->mu);
    struct zk_parent **pp = &st->parents[b];
    while (*pp && strcmp((*pp)->path, path) != 0)
        pp = &(*pp)->next;
    if (known && !*pp) {
        size_t len = strlen(path);
        struct zk_parent *p = xcalloc(1, sizeof(*p) + len + 1);
        memcpy(p->path, path, len + 1);
        *pp = p;
    } else if (!known && *pp) {
        struct zk_parent *p = *pp;
        *pp = p->next;
        free(p);
    }
    pthread_mutex_unlock(&st->mu);
}

/* Creates /seckill, /seckill/locks and parent unless parent is known to
 * exist. */
int zk_parents_ensure(struct zk_conn *c, const char *parent, int64_t deadline_us)
{
    struct zk_state *st = c->st;
    if (zk_parent_known(st, parent))
        return ZOK;
    const char *levels[] = {ZK_ROOT, ZK_LOCKS, parent};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        int rc = zk_create_parent(c, levels[i], deadline_us);
        if (rc != ZOK)
            return rc;
    }
    zk_parent_remember(st, parent, 1);
    return ZOK;
}

void zk_parents_free(struct zk_state *st)
{
    for (int i = 0; i < ZK_PARENT_BUCKETS; i++) {
        while (st->parents[i]) {
            struct zk_parent *p = st->parents[i];
            st->parents[i] = p->next;
            free(p);
        }
    }
}
