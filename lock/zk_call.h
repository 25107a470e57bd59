/* zk_call.h: zk_conn's requests, for the files of the ZooKeeper client
 * (zk_conn.c, zk_nodes.c). Private to lock/. A request is asynchronous; a
 * caller that waits for it does so on its condition variable with a
 * deadline (zk_call_finish). */
#ifndef SECKILL_ZK_CALL_H
#define SECKILL_ZK_CALL_H

#include <pthread.h>

#include "zk_conn.h"

/* A node of ours that may exist but is no longer wanted: found by its guid
 * under parent once connected, and deleted. */
struct zk_orphan {
    struct zk_orphan *next;
    char guid[33];
    char parent[];
};

enum zk_op {
    OP_CREATE,
    OP_PARENT,
    OP_CHILDREN,
    OP_EXISTS,
    OP_WATCH,
    OP_DELETE,
    OP_SWEEP
};

/* One asynchronous request: shared by the caller waiting for it and the
 * completion, and freed by whichever of the two is last (refs under st->mu).
 * A caller that stops waiting leaves the completion to clean up. */
struct zk_call {
    struct zk_conn *conn;
    enum zk_op op;
    int refs;
    int done;
    int rc;
    pthread_cond_t cond;
    char *created; /* OP_CREATE: the node's path */
    int64_t czxid; /* OP_CREATE, OP_EXISTS */
    char **kids;   /* OP_CHILDREN */
    int nkids;
    struct zk_orphan *orphan; /* OP_SWEEP */
    /* OP_CREATE, OP_DELETE: the node's guid and parent, to find it later */
    char guid[33];
    char parent[ZK_PATH_MAX];
    char path[ZK_PATH_MAX]; /* the node the request is about */
    int watch;              /* OP_CHILDREN: set a child watch too */
};

struct zk_call *zk_call_new(struct zk_conn *c, enum zk_op op, int waited);
void zk_call_free(struct zk_call *call);
/* Sends call on its connection's loop (at once when called there). */
void zk_call_send(struct zk_call *call);
/* Waits for call until deadline_us and hands its results over; its rc. */
int zk_call_finish(struct zk_call *call, int64_t deadline_us, char **created,
                   int64_t *czxid, char ***kids, int *nkids);
/* Whether a request that failed with rc may have been carried out all the
 * same (its answer lost with the connection). */
int zk_rc_uncertain(int rc);
/* Creates the persistent node path; ZOK also when it was there. */
int zk_create_parent(struct zk_conn *c, const char *path, int64_t deadline_us);

#endif
