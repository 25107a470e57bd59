/* order.h: the steps of one order by itself, which the order machine of an
 * event loop (single.c) sends: what it learns before any lock (peek.lua), and
 * its commit over the parts it holds (commit.lua), each as a call to send and
 * the reading of its answer. Private to inventory/. */
#ifndef SECKILL_ORDER_H
#define SECKILL_ORDER_H

#include "inv_impl.h"

#define PEEK_CANDIDATES 4

/* What the order learned before taking any lock (peek.lua). */
struct order_view {
    int segments, limit, home;
    char epoch[24];
    long long bought, remaining, initial;
    char first_id[24]; /* idempotent replay: the first order's id, or "" */
    int cand[PEEK_CANDIDATES];
    int ncand;
    int nplan; /* > 0: no segment held qty alone; plan[] hold it together */
    int plan[INV_MAX_SEGMENTS];
    struct inv_window window; /* when the peek found the sale not started */
};

/* One order on its way through the lock-guarded path. */
struct order_ctx {
    struct inv_session *s;
    struct sku_keys k;
    int gene;                             /* the SKU's shard (a cluster's), or -1 */
    const char *sku, *user_id, *idem_key; /* idem_key "" for none */
    int qty;
    struct inv_order *order;
    struct order_view v;
};

/* One segment of an order's critical section: its lock, the stock read under
 * it, and the units the order takes from it. */
struct part_hold {
    int seg;
    char lkey[128];
    struct lock_grant g;
    long long stock; /* read under the lock */
    long long back;  /* the units given back to it, not folded yet */
    int take;
};

/* peek.lua's call for c (c->k, sku, user, qty, key): cmd, whose strings live
 * in the struct. */
struct peek_call {
    char route[12], qty[12], most[12];
    const char *argv[11];
    struct rcmd cmd;
};
void order_peek_call(const struct order_ctx *c, struct peek_call *p);
/* Reads peek.lua's answer r (NULL: none) into *v: INV_OK, INV_NOT_FOUND,
 * INV_IDEM_MISMATCH, INV_MALFORMED (o->malformed says what) or
 * INV_UNAVAILABLE. */
inv_status order_view_read(struct order_view *v, const redisReply *r, struct inv_order *o);

/* Most parts whose commit arguments live in struct commit_call itself. */
#define PARTS_INLINE 4

/* The commit arguments of one part. */
struct part_text {
    char fkey[160], seg[12], take[12], stock[24], fence[LOCK_FENCE_TEXT];
};

/* commit.lua's call for c's order over p[0..n-1], every lock held and each
 * take set, each part fenced by its grant: cmd. Freed by commit_call_free. */
struct commit_call {
    char qty[12], id[24], okey[40], nparts[12];
    struct part_text inline_text[PARTS_INLINE], *text;
    const char *inline_argv[19 + 5 * PARTS_INLINE], **argv;
    struct rcmd cmd;
};
void commit_call_init(struct commit_call *cc, struct order_ctx *c,
                      const struct part_hold *p, int n);
void commit_call_free(struct commit_call *cc);
/* What commit.lua's answer r means for c's order over p[0..n-1], r neither
 * NOSCRIPT nor a replay's {-3, id} (the caller's, each needing a round trip
 * of its own); rs is the release's status. INV_PLACED or a final status;
 * *again when the order drew a fresh id for one found taken (nothing was
 * written: the same parts are worth another try). */
inv_status commit_read(struct order_ctx *c, const struct part_hold *p, int n,
                       const redisReply *r, lock_status rs, int *again);

/* The order's id a replay's {-3, id} names, into buf; 0, or -1 for another
 * answer. */
int commit_replay_id(const redisReply *r, char *buf, size_t len);

#endif
