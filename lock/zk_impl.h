/* zk_impl: the zk lock's recipe pieces that its blocking form (lock_zk.c)
 * and its steps for an event loop (zk_steps.c) share. Private to lock/. */
#ifndef SECKILL_ZK_IMPL_H
#define SECKILL_ZK_IMPL_H

#include "lock_impl.h"
#include "zk_conn.h"

/* One key held by one lock_session, perhaps re-entered. */
struct zk_hold {
    struct zk_session *owner; /* the session that took it, whose list it is on */
    struct zk_hold *snext;    /* the session's list (session thread only) */
    struct zk_conn_hold cl;   /* the conn's list, lost: the session expired */
    struct zk_conn *conn;     /* referenced */
    int depth;                /* grants not yet released (session thread only) */
    int detached;             /* found lost by an acquire that made a new hold */
    uint64_t fence;
    char guid[33];
    char *key;
    char node[ZK_PATH_MAX];
};

struct zk_session {
    struct zk_state *st;
    struct zk_hold *holds;
};

/* The parent node of key's lock into out; -1 when the key is too long. */
int zk_key_path(const char *key, char *out, size_t len);
/* Which of kids[0..n-1] (children of parent) precedes our node (its path):
 * ZOK with pred its path, "" when ours is the lowest; ZNONODE when ours is
 * not among them. Deletes (on c) any other node carrying our guid. */
int zk_predecessor(struct zk_conn *c, char **kids, int n, const char *parent,
                   const char *node, const char *guid, char *pred, size_t len);

/* s's hold of key, NULL when none (session thread only). */
struct zk_hold *zk_hold_find(struct zk_session *s, const char *key);
/* A hold of key by s of node (guid's, czxid its token); takes over the
 * caller's reference to c. */
struct zk_hold *zk_hold_new(struct zk_session *s, const char *key, struct zk_conn *c,
                            int64_t czxid, const char *guid, const char *node);
/* Off its lists and freed. */
void zk_hold_free(struct zk_hold *h);
/* 1 while h's session lives (it may be disconnected). */
int zk_hold_alive(struct zk_state *st, const struct zk_hold *h);
/* g as a grant of h. */
void zk_grant_fill(struct zk_state *st, struct zk_hold *h, int contended,
                   struct lock_grant *g);
/* Releases g (key's): its node deleted by the last release, waited for
 * (as lock_release answers) or, without wait, sent and left to finish in
 * the background (LOCK_RELEASED once sent; a lost answer leaves the node to
 * the orphan sweep). */
lock_status zk_hold_release(struct zk_session *s, const char *key, struct lock_grant *g,
                            int wait);

/* The steps (zk_steps.c), plugged into lock_backend_zk. */
void zk_try_cmd(void *session, const char *key, struct lock_step *st);
lock_status zk_try_done(void *session, const char *key, struct lock_step *st,
                        struct lock_grant *g);
void zk_step_start(void *session, const char *key, struct lock_step *st,
                   struct event_base *base, lock_step_cb *done, void *arg);
void zk_step_cancel(void *session, struct lock_step *st);
void zk_release_cmd(void *session, const char *key, struct lock_grant *g,
                    struct lock_step *st);
lock_status zk_release_done(void *session, const char *key, struct lock_grant *g,
                            struct lock_step *st);
/* Waits (at most the request timeout) until every job of a step is gone: a
 * cancelled one may still wait for a request's answer. Before st goes. */
void zk_steps_drain(struct zk_state *st);

#endif
