/* inv_impl.h: what the files of inventory/ share: the core (inventory.c),
 * the layout cache (layout.c), one order by itself (order.c), the atomic
 * mode (atomic.c), group commits (hold.c), a ticket's life (ticket.c), a
 * SKU's records (sku.c) and a SKU over a cluster's shards (shards.c).
 * Internal to inventory/: the rest of the tree sees inventory.h only. */
#ifndef SECKILL_INV_IMPL_H
#define SECKILL_INV_IMPL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cluster.h"
#include "inventory.h"
#include "path.h"
#include "hold.h"
#include "lock.h"
#include "rcluster.h"
#include "rconn.h"

struct inv_counters {
#define INV_COUNTERS_FIELD(field, key, metric, help) _Atomic uint64_t field;
    INV_COUNTERS(INV_COUNTERS_FIELD)
#undef INV_COUNTERS_FIELD
};

/* What a peek taught about a SKU, so that a ticket finds its home segment and
 * a batch its epoch without asking Redis: a cache of LAYOUT_SLOTS entries in
 * sets of LAYOUT_WAYS by a hash of the name, the least recently used of a set
 * given to a SKU it lacks (a shop of 10,000 SKUs sells many side by side: in a
 * direct-mapped cache of 256, SKUs of one slot took it from each other at
 * every step). A reset forgets the entry here at once; a reset by another
 * instance shows as a batch refused for its epoch, which forgets it too.
 * Segments a hold found empty stay empty in the epoch (stock only goes down),
 * so tickets whose home is one of them are routed elsewhere without asking. */
#define LAYOUT_SLOTS 4096
#define LAYOUT_WAYS 4

struct sku_layout {
    char sku[INV_ID_MAX + 1]; /* "" for an empty slot */
    int segments;
    long long initial;
    char epoch[24];
    int nempty;
    uint64_t empty[INV_MAX_SEGMENTS / 64]; /* bit i: segment i seen empty */
    int nshards; /* on a cluster: segment i lives in shard i % nshards, */
    uint8_t genes[CLUSTER_MAX_MASTERS]; /* whose gene is genes[i % nshards] */
    uint64_t used;                      /* inv->layout_clock when last read or learnt */
};

struct inv {
    struct inv_config cfg;
    char crash_after[32]; /* a test's SECKILL_TEST_CRASH: the step to die after */
    struct inv_counters counters;
    /* the group commits' (inv_batch_stats) */
    _Atomic uint64_t batch_holds, batch_orders;
    _Atomic int64_t queued, queues;
    /* The sweep's hints (life.c), one per deadline index (0: one Redis's; on a
     * cluster 1 + gene): the earliest pay_by (ms, Redis's clock) of a
     * reservation placed here since the sweep last read that index; 0: none. */
    _Atomic int64_t due_hint[1 + CLUSTER_GENES];
    pthread_mutex_t layout_mu; /* guards the two below */
    uint64_t layout_clock;
    struct sku_layout layouts[LAYOUT_SLOTS];
};

/* Most masters' connections one session keeps on a cluster: the masters of
 * a map and those of the one before a failover. */
#define INV_SHARD_SESSIONS (2 * CLUSTER_MAX_MASTERS)

struct inv_session {
    struct inv *inv;
    struct rconn *rc;
    struct lock_session *lock;
    /* On a cluster, the thread's session routes (cl) and does nothing on rc
     * itself: each piece of work runs on the session of the master that
     * serves its shard (inv_shard_session), whose rc is that master's and whose
     * gene names the shard. On one Redis gene is -1. */
    int gene;
    struct rcluster *cl;
    struct inv_session *shard[INV_SHARD_SESSIONS];
    int nshards;
};

/* The Redis keys of one SKU, or on a cluster of one shard of it: the
 * SKU's own keys, where its order records go (the prefix of order:<id>) and
 * its segments' locks (the prefix of ...:lock:<segment>); and the deadline
 * index its shard shares with every SKU there (dues: INV_DUE_INDEX, on a
 * cluster one per gene, in the gene's slot). */
struct sku_keys {
    char meta[96], stock[96], init[96], sold[96], buyers[96], orders[96], idem[96],
        avail[96], xout[96], xin[96], order[24], lock[96], back[96], due[96], life[96],
        events[40], dues[40];
};

/* On a cluster, a read that found the map stale (a failover, a slot moved)
 * is asked once more, of the map learnt meanwhile (inv_shard_outcome). */
#define READ_TRIES 2

static inline void count(_Atomic uint64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* The keys of sku: on one Redis (gene -1) under the tag {sku}; on a cluster
 * those of its shard of gene `gene`, under the gene's tag. */
void inv_keys_init(struct sku_keys *k, const char *sku, int gene);

/* Copies sku's layout to *out; 0, or -1 when not known. */
int inv_layout_get(struct inv *inv, const char *sku, struct sku_layout *out);

/* Learns sku's layout; what was known of its empty segments stays while the
 * epoch does. */
void inv_layout_put(struct inv *inv, const char *sku, int segments, long long initial,
                    const char *epoch, const int *genes, int nshards);

void inv_layout_forget(struct inv *inv, const char *sku);

long long inv_reply_ll(const redisReply *r, long long dflt);

/* ---- a Redis Cluster's transfers of units between shards (shards.c) ----
 *
 * Most times an order short in its shard has units brought and tries again
 * (other orders may take them first). */
#define INV_REFILL_ROUNDS 3
/* A test's kill -9 between the steps of a transfer (SECKILL_TEST_CRASH:
 * "transfer-out", "transfer-in"). */
void inv_crash_point(const struct inv *inv, const char *step);
extern struct rscript inv_xfer_out_script, inv_xfer_in_script;
/* A call of xfer_out.lua (xin 0: args epoch, id, units wanted, receiving
 * gene, receiving segment, giving segment) or xfer_in.lua (xin 1: epoch, id,
 * units, segment) on segment seg of the shard of gene, fenced by grant g
 * (NULL: unfenced, token '0' until set); args are borrowed. */
struct inv_xfer_call {
    struct sku_keys k;
    char lkey[128], fkey[160], token[LOCK_FENCE_TEXT];
    const char *argv[16];
    struct rcmd cmd;
};
void inv_xfer_call_init(struct inv_xfer_call *c, const struct inv *inv, const char *sku,
                        int gene, int seg, int xin, int nargs, const char *const *args,
                        const struct lock_grant *g);
/* A transfer script's answer r (NULL: none): INV_OK with *got (units taken,
 * 1 or 0 applied now or before, -1 the SKU was reset since), INV_BUSY
 * (fenced off: nothing written), INV_MALFORMED (nothing written; o, unless
 * NULL, says what), INV_UNAVAILABLE. */
inv_status inv_xfer_answer(const redisReply *r, long long *got, struct inv_order *o);
/* A transfer's step as its script's answer (res, r: aconn_cb's) ends it:
 * INV_PLACED (*got units moved now, or 1: applied now), INV_SOLD_OUT (none:
 * the segment held none, or applied before), INV_NOT_FOUND (the SKU was
 * reset since), INV_BUSY (fenced off), INV_MALFORMED (o->malformed says
 * what), INV_UNAVAILABLE, INV_OUTCOME_UNKNOWN (no answer: it may have run). */
inv_status inv_xfer_outcome(aconn_result res, const redisReply *r, long long *got,
                            struct inv_order *o);
/* Reads a transfer record's text ("<gene> <segment> <units>", xfer_out.lua)
 * of a SKU laid out as l; 0, or -1 when it does not parse or names no shard
 * of l. */
int inv_xfer_record_read(const struct sku_layout *l, const redisReply *text, int *to,
                         int *seg, long long *units);

/* The session for the shard of gene `gene`: s itself on one Redis; on a
 * cluster the session on the connection to the master that serves the
 * shard now, made on first need. NULL when no master is known for it. */
struct inv_session *inv_shard_session(struct inv_session *s, int gene);

/* After work on a cluster that failed for want of Redis: the map may be
 * stale (a failover, slots moved), so learn it again for the next. */
inv_status inv_shard_outcome(struct inv_session *s, inv_status st);

/* The fencing token of grant g as the commit scripts take it: '0' without
 * fencing. */
void inv_fence_text(const struct inv *inv, const struct lock_grant *g, char *buf,
                    size_t len);

/* The report of sku as its shard on s holds it (on one Redis: whole). */
inv_status inv_sku_get_shard(struct inv_session *s, const char *sku,
                             struct inv_sku_report *out);

/* Creates or resets sku's shard `shard` of nshards (on one Redis the only
 * one, 0 of 1): the stock of its segments (those i with i % nshards ==
 * shard; the others 0 here), its order records cleared, its epoch `epoch`
 * ("" for one more), its sale window spec's. The check before its first
 * write (reset.lua): INV_PUT_CHECKED spec->reset's (INV_EXISTS or
 * INV_NOT_SETTLED, nothing written), INV_PUT_CHECK_ONLY that check and no
 * write (INV_OK when it passed), INV_PUT_UNCHECKED none. */
enum inv_put_check { INV_PUT_CHECKED, INV_PUT_CHECK_ONLY, INV_PUT_UNCHECKED };
inv_status inv_sku_put_shard(struct inv_session *s, const char *sku,
                             const struct inv_sku_spec *spec, int shard, int nshards,
                             const char *epoch, enum inv_put_check check);

/* The audit of sku's shard on s (on one Redis: of the SKU). */
inv_status inv_audit_shard(struct inv_session *s, const char *sku, struct inv_audit *out);
/* Retires sku's shard on s (inv_sku_retire; on one Redis the whole SKU),
 * leaving its summary in sk:{sku}:retired when `summary` (one Redis without
 * the outbox). INV_OK with sums[7] (initial, sold, orders, paid, returned,
 * cancelled, expired), INV_NOT_FOUND (none, or retired before),
 * INV_NOT_SETTLED (nothing written), INV_UNAVAILABLE. */
#define INV_RETIRE_SUMS 7
inv_status inv_sku_retire_shard(struct inv_session *s, const char *sku, int summary,
                                long long sums[INV_RETIRE_SUMS]);

/* ---- the order path's shared steps ------------------------------------------ */

/* Most fresh ids an order draws when it finds its id taken. */
#define INV_ID_TRIES 4

/* Reads an order's record, the answer r (NULL: none) of
 * "HMGET order:<id> sku user_id qty segment segments state pay_by [payment_id
 * paid_at]", into *out: INV_OK,
 * INV_NOT_FOUND, or INV_UNAVAILABLE. */
inv_status inv_order_read(const redisReply *r, uint64_t id, struct inv_order *out);
/* Remembers sku as sold out (soldout.h) when Redis said so after `seen` was
 * taken. Not from a shard of a cluster: its SKU may hold units elsewhere
 * (shards_refill notes a SKU whose shards are all empty). */
void inv_note_sold_out(struct inv *inv, const char *sku, int limit, uint64_t seen);
/* Answers from memory an order for a SKU this instance saw sold out in its
 * current epoch: INV_SOLD_OUT (or INV_BAD_QTY above a known limit), or INV_OK
 * when Redis must be asked. A keyed order always asks: its key may name an
 * order placed before the sell-out, whose replay is the answer. */
inv_status inv_soldout_answer(struct inv *inv, const char *sku, int qty,
                              const char *idem_key);
/* Draws the order's id: 0, or -1 when none can be issued now (the worker
 * lease is not held, or its high-water mark does not cover another id). */
int inv_order_new_id(struct inv *inv, struct inv_order *order);
/* The id the commit found taken was issued twice: the order takes a fresh
 * one and is still on its way (INV_PENDING), else INV_UNAVAILABLE. Nothing
 * was written. */
inv_status inv_order_id_taken(struct inv *inv, struct inv_order *order);
/* Sets o's state from a placing script's answer pay_by ('' or NULL: none,
 * placed; else pending until then, and the sweep is told when gene's deadline
 * index (-1: one Redis's) has it due). */
void inv_order_placed(struct inv *inv, int gene, struct inv_order *o,
                      const redisReply *pay_by);
/* The sale window's refusal in a script's answer (inventory/lua/window.lua):
 * code -10, detail "<starts_ms> <wait_ms>", is INV_NOT_STARTED with *w set;
 * -11 is INV_SALE_ENDED; -12 INV_PAUSED (the merchant's PATCH); any other code
 * INV_PENDING (not the window's: the answer is read on). */
inv_status inv_window_refusal(long long code, const redisReply *detail,
                              struct inv_window *w);
/* The refusals the commit scripts share ({-4} the limit, {-8} the key's
 * mismatch, the sale window's -10 and -11, -17 a malformed value) as a
 * status; anything else INV_UNAVAILABLE (a replay's {-3, id} is read before,
 * by the caller). */
inv_status inv_commit_refusal(const redisReply *r, struct inv_order *order);
/* A script's {-17, '<key> <field>'} (inventory/lua/malformed.lua): nothing
 * was written. Copies detail (NULL or not text: "?") into o->malformed;
 * returns INV_MALFORMED. */
inv_status inv_malformed(struct inv_order *o, const redisReply *detail);
/* Counts an order's answer. */
void inv_count_outcome(struct inv *inv, inv_status st);
/* Gives t, or t[0..n-1], the final status st, counted as an answer. */
/* Makes t a fresh ticket, undecided: its order empty, nothing routed, sent or
 * acknowledged yet, not a pay or a cancel; its wait counts from now. The
 * caller fills what it is (inv_ticket_open, inv_end_open). */
void inv_ticket_clear(struct inv_ticket *t);
void inv_ticket_finish(struct inv *inv, struct inv_ticket *t, inv_status st);
void inv_tickets_finish(struct inv *inv, struct inv_ticket **t, int n, inv_status st);
/* Notes segment seg of sku as found empty in epoch (ignored if the layout
 * moved on). */
void inv_layout_mark_empty(struct inv *inv, const char *sku, const char *epoch, int seg);
/* The stock a segment's read (read.lua, fence_read.lua) answered, and in
 * *back its units given back; -1 when Redis did not answer one. */
long long inv_stock_of(const redisReply *r, long long *back);
/* inventory/lua/read.lua: the read under a lock of the other modes. */
extern struct rscript inv_read_script;
/* inventory/lua/rec_read.lua: an order's record's fields, as an HMGET. */
extern struct rscript inv_rec_read_script;
/* inventory/lua/fence_read.lua: the read under a lock whose tokens come from
 * outside the data Redis (zk), which raises the segment's high-water token. */
extern struct rscript inv_fence_read_script;

/* Empties o; its parts are not touched (nparts says how many hold anything). */
void inv_order_clear(struct inv_order *o);
/* Sets o's segment and parts: the order took all its units from seg. */
void inv_order_one_part(struct inv_order *o, int seg);

#endif
