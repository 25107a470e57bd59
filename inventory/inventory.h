/* inventory: SKUs split into segments, and the order critical section.
 *
 * A `struct inv` is the process-wide configuration (lock mode, wait, work,
 * fencing, order-id generator); each thread opens an `struct inv_session`
 * with its own data-Redis connection (SKUs, reads, the audit). Orders are
 * tickets, placed on the event loops (engine.h); the lock mode only changes
 * the guard around the critical section:
 *
 *   read the segment's stock -> check stock and the user's limit ->
 *   --work-us of business work -> write the new stock and record the order
 *
 * The write is one Lua script (the commit) that also refuses the write when
 * the SKU was reset since the order started (the SKU epoch: the shared side of
 * the SKU's read-write lock, for free) or, with fencing, when the segment's
 * lock was granted to someone else since (a stale holder). The `atomic` mode
 * has no lock: one script checks, decrements and records.
 *
 * Redis keys of SKU s (the {s} hash tag keeps them on one cluster slot):
 *   sk:{s}:meta    hash  initial segments limit epoch sold orders remaining
 *   sk:{s}:stock   hash  segment index -> remaining
 *   sk:{s}:avail   zset  segment index -> remaining, the segments holding any
 *                        (with meta's remaining: the index that spares every
 *                        order path a scan of the K segments)
 *   sk:{s}:init    hash  segment index -> initial
 *   sk:{s}:sold    hash  segment index -> units sold
 *   sk:{s}:buyers  hash  user id -> units bought
 *   sk:{s}:orders  list  "id user qty segment", one per order (the audit trail);
 *                        an order of several segments adds " seg:units,..."
 *   sk:{s}:idem    hash  Idempotency-Key -> "order-id qty user-id"
 *   sk:{s}:lock:i  the segment lock (and ...:fence its fencing counter)
 *   order:<id>     hash  sku user_id qty segment [segments "seg:units,..."]
 *
 * An order is served by one segment when one can: its home (user hash mod
 * K), else one chosen by the user hash among those holding enough, so that
 * the orders that leave an emptied home spread over what is left. When no
 * single segment holds qty but the SKU does, it takes units from several:
 * it locks them in ascending segment order (two such orders cannot each
 * hold what the other waits for) and one commit, fenced on each, writes
 * them all or nothing. */
#ifndef SECKILL_INVENTORY_H
#define SECKILL_INVENTORY_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "lock.h"
#include "orderid.h"
#include "segment.h"
#include "soldout.h"

#define INV_ID_MAX 64 /* SKU and user ids: 1..64 chars of [A-Za-z0-9_.:-] */
#define INV_IDEM_MAX 128
#define INV_MAX_STOCK 1000000000LL
#define INV_MAX_LIMIT 1000000
#define INV_MAX_PAY_WITHIN_MS 86400000LL /* a day */
/* A waiting room's bounds (docs/api.md, PUT's "room"). */
#define INV_ROOM_MAX_RATE 100000           /* rate_per_s: passes a second */
#define INV_ROOM_MAX_ACTIVE 10000000       /* max_active: unused passes at once */
#define INV_ROOM_MIN_PASS_TTL_MS 1000LL    /* pass_ttl_ms: a second .. */
#define INV_ROOM_MAX_PASS_TTL_MS 3600000LL /* .. an hour */
#define INV_MALFORMED_MAX 240 /* "<key> <field>": a SKU's key and an Idempotency-Key */
/* The deadline index: a sorted set of the SKUs with pending reservations,
 * each scored by (at most) its earliest pay_by, which the placing scripts
 * lower (ZADD LT) and the sweep's due.lua sets anew; every instance sweeps
 * the SKUs it says are due, so a round costs what is due, not what exists.
 * On a Redis Cluster one per gene, INV_DUE_INDEX ":{<gene tag>}", in the
 * slot of the SKU shards of that gene. */
#define INV_DUE_INDEX "seckill:due"
/* The outbox: the stream every SKU's events go to, one per shard
 * (inventory/lua/outbox.lua): INV_EVENTS_KEY on one Redis; on a Redis Cluster
 * one per gene, INV_EVENTS_KEY ":{<gene tag>}", in the slot of that gene's SKU
 * shards. So the sink reads at most one stream per gene, however many SKUs
 * there are. */
#define INV_EVENTS_KEY "seckill:events"
/* The set of outbox streams that the sink reads (at most one per gene); in its
 * own slot. */
#define INV_STREAMS_KEY "seckill:streams"
/* The rooms' registry: a hash, SKU -> "<rate_per_s> <max_active> <pass_ttl_ms>",
 * of every SKU with a waiting room (written with the SKU by reset.lua; on a
 * cluster by shards.c after the directory). Every instance reads it each
 * tick (roompace.h): an order of a SKU listed there needs a pass. */
#define INV_ROOMS_KEY "seckill:{rooms}"
/* The sink's consumer group on each stream. */
#define INV_SINK_GROUP "seckill-sink"
/* Order records, many to a hash (inventory/lua/rec.lua): an order's record
 * is the field <id> of the hash named by the records' prefix ("order:", or
 * "o:{<gene tag>}:" on a cluster) and the id's digits but the last
 * INV_REC_DIGITS ("0" for a shorter id). */
#define INV_REC_DIGITS 9
/* The key of id's (decimal text) hash of records under prefix, into out (len
 * bytes; an id of INV_ID_MAX or fewer digits and a prefix of up to 24 fit in
 * 64). Pure. */
void inv_record_key(char *out, size_t len, const char *prefix, const char *id);
/* The key of the hash of the record of order id (decimal text) whose events
 * go to stream (INV_EVENTS_KEY, or INV_EVENTS_KEY ":{<gene tag>}" on a Redis
 * Cluster): "order:<digits>", or "o:{<gene tag>}:<digits>", in the stream's
 * slot. 0, or -1 when stream is no outbox stream or out (len bytes) is too
 * short. Pure. */
int inv_order_key_of(const char *stream, const char *id, char *out, size_t len);
/* inventory/lua/sink_lag.lua: a stream's events not yet in the database. */
extern struct rscript inv_sink_lag_script;

typedef enum {
    INV_PLACED = 0,    /* a new order was recorded */
    INV_REPLAYED,      /* Idempotency-Key seen before: *order is the first answer */
    INV_OK,            /* read or admin operation done */
    INV_CREATED,       /* PUT made a new SKU */
    INV_NOT_FOUND,     /* unknown SKU or order */
    INV_SOLD_OUT,      /* no segment holds the quantity */
    INV_LIMIT,         /* the user already bought per_user_limit units */
    INV_BAD_QTY,       /* qty outside 1..per_user_limit */
    INV_BUSY,          /* no segment lock within the wait, or the commit was fenced off */
    INV_UNAVAILABLE,   /* Redis unreachable or failing; nothing can have been written */
    INV_IDEM_MISMATCH, /* Idempotency-Key used before for another user or qty */
    INV_NOT_STARTED,   /* before the SKU's starts_at: order->window says when */
    INV_SALE_ENDED,    /* at or after the SKU's ends_at */
    INV_NOT_PENDING,   /* pay or cancel of an order final at once (placed) */
    INV_CANCELLED,     /* pay of a cancelled order */
    INV_EXPIRED,       /* pay or cancel at or after the order's pay_by */
    INV_PAID,          /* cancel of a paid order */
    INV_FORBIDDEN,     /* cancel of another user's order */
    INV_NOT_SETTLED,   /* a retirement while units are pending, on their way
                          between shards, or events have not reached the database */
    INV_OUTCOME_UNKNOWN, /* the commit was sent but its answer never came: order->id
                            may exist (inv_order_get tells) */
    INV_GONE, /* a pay's or a cancel's order, or a replay's first order, has no record
                 in Redis: never placed, or settled and gone (--order-retention, its
                 SKU retired): the system of record may have it (order->id) */
    INV_MALFORMED,   /* a value the script reads in Redis is malformed (order->
                        malformed names it): nothing was written; answered as
                        unavailable */
    INV_NO_ROOM,     /* a waiting room's call on a SKU without one (room.h) */
    INV_PENDING,     /* a ticket still on its way: not decided yet */
    INV_EXISTS,      /* PUT, no reset, of a SKU with orders: nothing written */
    INV_BAD_CURSOR,  /* a listing's cursor that no page gave */
    INV_PAUSED,      /* the merchant paused the SKU's sale (PATCH): nothing placed */
    INV_BAD_WINDOW,  /* PATCH: ends_at not after the sale's starts_at; nothing written */
    INV_UNSUPPORTED, /* PATCH on a Redis Cluster, or under a lock mode without a
                        read-write lock (setnx, redlock): nothing written */
} inv_status;

struct inv_config {
    struct lock *lock; /* NULL for the atomic mode */
    int wait_ms;       /* longest wait for a segment lock */
    int work_us;       /* simulated work inside the critical section */
    int fencing;       /* fenced commits (needs a fenced lock) */
    struct orderid_gen *ids;
    struct orderid_lease *lease; /* NULL: ids need no lease check */
    struct soldout *soldout;     /* NULL: every order asks Redis (soldout.h) */
    /* A placed order is answered only once this many replicas of the data
     * Redis acknowledged it (WAIT), else outcome unknown; 0: at once. */
    int min_replicas_acked;
    int acked_wait_ms; /* how long WAIT waits for them */
    /* A Redis Cluster (seeds[0..nseeds-1]) instead of one Redis: a session
     * then routes its work to the masters itself (the rconn it is given is
     * not used) and a SKU is kept in one shard per master. */
    int cluster;
    const struct rconn_addr *seeds;
    int nseeds;
    const char *password;
    int timeout_ms;
    /* --postgres: a SKU created or reset here has its orders' changes
     * appended to its outbox streams (inventory/lua/outbox.lua), which the
     * sink (sink.h) carries to PostgreSQL. */
    int outbox;
};

/* Units of an order taken from one segment. */
struct inv_part {
    int segment;
    int qty;
};

/* An order's state. Without a payment window an order is placed, final at
 * once; with one it is pending until paid, cancelled by its buyer, or expired
 * at its pay_by (the last two give its units back). */
typedef enum {
    INV_STATE_PLACED = 0,
    INV_STATE_PENDING,
    INV_STATE_PAID,
    INV_STATE_CANCELLED,
    INV_STATE_EXPIRED,
} inv_state;
#define INV_NSTATES 5
/* "placed", "pending", ... */
const char *inv_state_name(inv_state st);
/* The state named text; INV_STATE_PLACED for anything else. */
inv_state inv_state_parse(const char *text);

/* What the sale window said of a refused order (INV_NOT_STARTED), by the
 * data Redis's clock: when the sale starts, and how long until then. */
struct inv_window {
    long long starts_ms, wait_ms;
};

struct inv_order {
    uint64_t id;
    char sku[INV_ID_MAX + 1];
    char user_id[INV_ID_MAX + 1];
    int qty;
    int segment;              /* the (first) segment it was served from */
    int nparts;               /* segments it drew from: 1, or more (parts lists them) */
    struct inv_window window; /* INV_NOT_STARTED only */
    inv_state state;
    long long pay_by_ms; /* pending (and after): its deadline by Redis's clock */
    /* paid: the pay's payment id ("" when it named none) and Redis's clock
     * then (0: not known, an order paid before builds kept it); a pay
     * refused INV_PAID: the payment id that paid the order */
    char payment_id[INV_IDEM_MAX + 1];
    long long paid_at_ms;
    /* INV_MALFORMED only: "<key> <field>" (or the order record's key) that a
     * script found malformed, for the log. */
    char malformed[INV_MALFORMED_MAX];
    struct inv_part parts[INV_MAX_SEGMENTS];
};

struct inv_segment_report {
    long long initial, remaining, sold;
};

/* A SKU's waiting room (docs/api.md): rate_per_s 0 for none, then the others
 * are 0 too. Kept in the SKU's meta hash (every shard's, on a cluster, as the
 * sale window is), written by reset.lua with the SKU. */
struct inv_room_spec {
    long long rate_per_s;  /* passes handed out a second, 1..INV_ROOM_MAX_RATE */
    long long max_active;  /* unexpired unused passes at once, 1..INV_ROOM_MAX_ACTIVE */
    long long pass_ttl_ms; /* a pass's life */
};

struct inv_sku_report {
    char sku[INV_ID_MAX + 1];
    long long initial, remaining, sold, oversold, orders;
    long long starts_ms, ends_ms;      /* the sale window; 0: none */
    long long pay_ms;                  /* the payment window; 0: none */
    long long pending, paid, returned; /* units */
    long long added, withdrawn; /* by PATCH: the books are initial + added - withdrawn */
    int paused;                 /* PATCH paused the sale */
    struct inv_room_spec room;         /* the waiting room; rate_per_s 0: none */
    int limit;
    int nsegments;
    struct inv_segment_report segments[INV_MAX_SEGMENTS];
};

struct inv_audit {
    char sku[INV_ID_MAX + 1];
    long long initial, orders, sold, oversold, limit_breaches, duplicate_order_ids;
    long long remaining; /* the stock left in its segments (with units given back) */
    long long added, withdrawn; /* by PATCH (meta's): sold + remaining must be
                                   initial + added - withdrawn */
    /* Reservations, from the records and the life list ("<id> <state>"):
     * units pending, paid and given back; orders cancelled and expired; orders
     * whose life says two ends (paid and cancelled or expired, or paid twice)
     * and orders given back twice. The last two are 0 in every correct mode. */
    long long pending, paid, cancelled, expired, returned, state_conflicts,
        returned_twice;
    int consistent; /* the records agree with the counters, segment by segment,
                       the stock index with the stock, sold + remaining with the
                       initial stock, and no invariant is broken */
    /* Orders and units by state (inv_state), from the records. */
    long long state_orders[INV_NSTATES], state_units[INV_NSTATES];
    /* The outbox (INV_STREAMS_KEY): the SKU's generation in the database
     * (meta's outbox field, "" when its changes do not go there) and the
     * events of its streams not yet in the database. */
    char generation[24];
    long long outbox_lag;
};

/* The order path's counters, process-wide, each declared here once. Each is
 * X(field, key, metric, help): a field of struct inv_stats (and of the atomic
 * counters inventory/ bumps), its key on /stats, the name of its own counter
 * on /metrics (NULL: none) and what it counts (that counter's HELP). The
 * lists are in the order of /stats.
 *
 * The outcomes: one per answer an order gets; in /stats' "orders", and on
 * /metrics as seckill_orders_total{outcome="<key>"}. */
#define INV_OUTCOME_COUNTERS(X)                                                          \
    X(placed, "placed", NULL, "Orders placed.")                                          \
    X(replayed, "replayed", NULL, "Orders answered again for their Idempotency-Key.")    \
    X(sold_out, "sold_out", NULL, "Orders no segment held the quantity for.")            \
    X(limit, "limit_reached", NULL, "Orders beyond the user's per_user_limit.")          \
    X(busy, "busy", NULL,                                                                \
      "Orders that got no lock within the wait, or whose commit was refused.")           \
    X(unavailable, "unavailable", NULL, "Orders refused for want of Redis.")             \
    X(outcome_unknown, "outcome_unknown", NULL,                                          \
      "Orders whose commit was sent but whose answer never came.")                       \
    X(idem_mismatch, "idempotency_mismatch", NULL,                                       \
      "Orders whose Idempotency-Key was used before for another user or qty.")           \
    X(not_started, "not_started", NULL, "Orders before the sale's starts_at.")           \
    X(sale_ended, "sale_ended", NULL, "Orders at or after the sale's ends_at.")          \
    X(paused, "paused", NULL, "Orders while the merchant paused the sale (PATCH).")
/* What else befell orders; in /stats' "orders" too. */
#define INV_ORDER_COUNTERS(X)                                                            \
    X(spilled, "spilled", "seckill_orders_spilled_total",                                \
      "Orders served by a segment other than home.")                                     \
    X(id_collisions, "order_id_collisions", "seckill_order_id_collisions_total",         \
      "Order ids found issued before at commit; the order drew a fresh one.")            \
    X(sold_out_local, "sold_out_from_memory",                                            \
      "seckill_orders_sold_out_from_memory_total",                                       \
      "Sold-out answers given without Redis (SKU seen sold out this epoch).")            \
    X(paid, "paid", "seckill_orders_paid_total", "Reservations paid (POST .../pay).")    \
    X(cancelled, "cancelled", "seckill_orders_cancelled_total",                          \
      "Reservations cancelled by their buyer.")                                          \
    X(expired, "expired", "seckill_orders_expired_total",                                \
      "Reservations this instance found past their pay_by (its sweep, a pay, a "         \
      "cancel).")                                                                        \
    X(units_returned, "units_returned", "seckill_units_returned_total",                  \
      "Units given back by the cancelled and expired orders this instance ended.")       \
    X(malformed, "malformed", "seckill_orders_malformed_total",                          \
      "Orders, pays and cancels refused (503 unavailable, nothing written) because a "  \
      "value their script reads in Redis was malformed; the log names the key.")       \
    X(sweep_malformed, "sweep_malformed", "seckill_sweep_malformed_total",               \
      "Due reservations whose record the sweep found malformed and left as they are "   \
      "(counted each round it finds them).")                                             \
    X(sweep_deferred, "sweep_deferred", "seckill_sweep_deferred_total",                  \
      "SKUs with a reservation due that a sweep round left for the next, at least "     \
      "(a round serves 256 at most, the earliest due first).")                          \
    X(unacked, "unacknowledged_by_replicas", "seckill_orders_unacknowledged_total",      \
      "Orders placed, paid or cancelled that the replicas did not acknowledge in "       \
      "time: answered outcome_unknown (--min-replicas-acked).")
/* Commits refused, or made late; at the top level of /stats. */
#define INV_COMMIT_COUNTERS(X)                                                           \
    X(fenced_off, "fenced_off_commits", "seckill_fenced_commits_refused_total",          \
      "Commits refused because the lock was granted to someone else since.")             \
    X(epoch_changed, "epoch_changed_commits", NULL,                                      \
      "Commits refused because the SKU was reset since the order began.")                \
    X(commits_after_lease, "commits_after_lease_lost", NULL,                             \
      "Orders committed under a lock whose lease was found lost at release.")
#define INV_COUNTERS(X)                                                                  \
    INV_OUTCOME_COUNTERS(X) INV_ORDER_COUNTERS(X) INV_COMMIT_COUNTERS(X)

/* The order path's counters, a copy (inv_stats). */
struct inv_stats {
#define INV_STATS_FIELD(field, key, metric, help) uint64_t field;
    INV_COUNTERS(INV_STATS_FIELD)
#undef INV_STATS_FIELD
};

struct inv;
struct inv_session;

/* Validates an id (SKU or user): 1..64 chars of [A-Za-z0-9_.:-]. */
int inv_id_valid(const char *id);

struct inv *inv_new(const struct inv_config *cfg);
void inv_free(struct inv *inv); /* NULL is a no-op; sessions must be freed first */
void inv_stats(const struct inv *inv, struct inv_stats *out);

/* The group commits of every event loop (hold.h): critical sections run and
 * the tickets they held, tickets waiting in a segment's queue now, and the
 * queues kept (one per SKU segment sold from). */
struct inv_batch_stats {
    uint64_t holds, orders;
    int64_t queued, queues;
};
void inv_batch_stats(const struct inv *inv, struct inv_batch_stats *out);

/* A session for the calling thread; rc (borrowed) is its data-Redis connection. */
struct inv_session *inv_session_new(struct inv *inv, struct rconn *rc);
void inv_session_free(struct inv_session *s); /* NULL is a no-op */

/* What a ticket that is not an order does: to an order placed before, or
 * in a SKU's waiting room. */
typedef enum {
    INV_END_NONE = 0,
    INV_END_PAY,    /* pays it */
    INV_END_CANCEL, /* its buyer cancels it */
    INV_END_JOIN,   /* its user joins the SKU's waiting room (room.h inv_join_open) */
} inv_end;

/* Where a user stands in a room's queue (room.h). */
struct inv_room_place {
    long long epoch; /* the SKU's: a reset starts another queue */
    long long place; /* the score: a draw before the start, Redis's us after */
    long long rank;  /* 0: first, when it first joined */
    int joined;      /* 1: joined now; 0: had joined before */
};

/* ---- tickets: orders on their way through the runners ----------------------
 *
 * An order the service places is a ticket. The HTTP side opens it
 * (inv_ticket_open: what memory can answer, the order id, its route) and hands
 * it to its loop's engine (engine.h), which answers it through done(). How it
 * is placed on the way is inventory/'s own business (path.h). */
struct inv_ticket {
    char sku[INV_ID_MAX + 1];
    char user_id[INV_ID_MAX + 1];
    char idem_key[INV_IDEM_MAX + 1]; /* "" for none */
    int qty;
    int home;         /* home segment; -1 while the SKU's segment count is unknown */
    int gene;         /* on a cluster, the gene of the home segment's shard, which
                         holds the order (-1 while unknown, and on one Redis) */
    int seg;          /* the segment whose queue it waits in: home, unless home
                         is known empty or a batch sent it on; -1 as home */
    int hops;         /* batches that sent it on to another segment */
    int64_t start_us; /* when it was opened (clock_now_us): its wait counts from here */
    inv_status st;    /* the outcome; INV_PENDING while undecided */
    struct inv_order order;
    void (*done)(struct inv_ticket *t); /* called once when st is final */
    void *owner;                        /* the caller's */
    struct inv_ticket *next;            /* the batcher's queue */
    /* the event-driven path's (engine.c) */
    void *engine;
    uint64_t link; /* the link (rconn.h) that carried its commit; 0: none known */
    uint64_t seen; /* the sold-out memory's generation when its script was sent */
    int tries;     /* sends so far */
    int way;       /* pending when its machine is over: where it goes (path.h inv_way) */
    int refills;   /* on a cluster: times units were brought to its shard */
    int xfer;      /* not an order: a step of a transfer of units between
                      shards (engine_refill.c), never counted as an answer */
    inv_end end;   /* not an order: a pay or a cancel of order.id (inv_end_open),
                      or a join of the SKU's room (inv_join_open) */
    long long draw;             /* a join's: its pre-queue draw */
    struct inv_room_place room; /* a join's: the place it got */
};

/* Fills t for an order of qty units of sku for user_id; idem_key (may be
 * NULL) makes a retry by the same user for the same qty answer the first
 * order (INV_REPLAYED; INV_GONE when the first order's record has left
 * Redis, t->order.id naming it), and the key used before by another user or
 * for another qty INV_IDEM_MISMATCH. Returns INV_PENDING when the
 * ticket must go to Redis (t->home set, -1 when unknown), else the final
 * status (sold out from memory, no order id without the worker lease), which
 * is counted as an answer already. */
inv_status inv_ticket_open(struct inv *inv, struct inv_ticket *t, const char *sku,
                           const char *user_id, int qty, const char *idem_key);
/* Creates (INV_CREATED) or resets (INV_OK) sku: stock split over segments,
 * orders, buyers and idempotency keys cleared, in one atomic step. In-flight
 * orders of the previous epoch are refused at commit. A reset, as
 * inv_sku_set with .reset = 1 (INV_NOT_SETTLED, nothing written, while the
 * SKU's events have not reached PostgreSQL). */
inv_status inv_sku_put(struct inv_session *s, const char *sku, long long stock,
                       int segments, int limit);

/* A SKU as PUT /skus/{sku} sets it. The sale window's ends are milliseconds
 * since the Unix epoch (0: none), compared with the data Redis's clock (TIME)
 * by every script that places an order: no order is placed before starts_ms
 * or at or after ends_ms, whatever the instances' clocks say. */
struct inv_sku_spec {
    long long stock;
    int segments, limit;
    long long starts_ms, ends_ms;
    long long pay_ms; /* the payment window: > 0, orders pending until paid */
    /* 0: a SKU that has orders is refused (INV_EXISTS); 1: it is reset, its
     * orders cleared, refused (INV_NOT_SETTLED) while its events have not all
     * reached PostgreSQL. The check and the writes are one script's step
     * (reset.lua); either refusal writes nothing. */
    int reset;
    struct inv_room_spec room; /* the waiting room; rate_per_s 0: none */
};
/* A page of the SKUs there are (GET /skus), walked with SCAN (catalog.c):
 * their names into *names (*n of them; malloc'd, the caller frees; NULL when
 * none), and the cursor of the next page into next ("" when this page was the
 * last). cursor "" or NULL: the first page; else a next an earlier page gave
 * (INV_BAD_CURSOR when it cannot be one). limit: about how many a page holds
 * (SCAN decides: a few more, or fewer, and a page may be empty while next is
 * not). INV_OK, INV_BAD_CURSOR, INV_UNAVAILABLE (nothing in *names). */
inv_status inv_sku_list(struct inv_session *s, const char *cursor, int limit,
                        char (**names)[INV_ID_MAX + 1], int *n, char *next,
                        size_t nextlen);

/* inv_sku_put with a sale window: INV_CREATED, INV_OK, INV_EXISTS,
 * INV_NOT_SETTLED, INV_UNAVAILABLE (on a cluster, see shards.c). */
inv_status inv_sku_set(struct inv_session *s, const char *sku,
                       const struct inv_sku_spec *spec);

/* Opens t as the pay (arg: the payment id, "" for none) or the cancel (arg:
 * the buyer's user id) of order id, to hand to a loop's engine like an order
 * (inv_engine_submit): the order's record is read, then pay.lua or
 * cancel.lua changes it, and the change waits for its replicas like a
 * commit (--min-replicas-acked). t->done once t->st is final:
 *   INV_OK with t->order the order, paid or cancelled (also when it was so
 *   before: the replicas must have that earlier change too);
 *   pay: INV_EXPIRED at or after its pay_by by Redis's clock (its units come
 *   back now if no sweep brought them yet), INV_CANCELLED, INV_NOT_PENDING
 *   (an order final at once);
 *   cancel: INV_FORBIDDEN for another user (nothing changed or told),
 *   INV_PAID, INV_EXPIRED, INV_NOT_PENDING;
 *   either: INV_GONE (no record in Redis: the caller may ask the system of
 *   record, else it is not found), INV_UNAVAILABLE (nothing ran), INV_OUTCOME_UNKNOWN
 *   (the script was sent and no answer came, or its replicas did not
 *   acknowledge it in time). */
void inv_end_open(struct inv_ticket *t, inv_end end, uint64_t id, const char *arg);

/* The sweep that expires reservations past their pay_by (inventory/life.c):
 * every INV_SWEEP_MS on the event loop it is attached to (on a Redis Cluster
 * every INV_SWEEP_CLUSTER_MS: a round reads its 64 deadline indexes), over the
 * SKUs with a reservation due, on a connection of its own to the data Redis (or
 * its own router over a Redis Cluster: inv_sweep_new_cluster, seeds copied).
 * Every instance sweeps; an order expires once whoever finds it. */
#define INV_SWEEP_MS 100
#define INV_SWEEP_CLUSTER_MS 250
struct inv_sweep;
struct event_base;
struct inv_sweep *inv_sweep_new(struct inv *inv, const char *host, int port,
                                const char *password);
struct rconn_addr;
struct inv_sweep *inv_sweep_new_cluster(struct inv *inv, const struct rconn_addr *seeds,
                                        int nseeds, const char *password);
void inv_sweep_attach(struct inv_sweep *sw, struct event_base *base);
void inv_sweep_detach(struct inv_sweep *sw); /* on its loop, or once it stopped */
void inv_sweep_free(struct inv_sweep *sw);   /* NULL is a no-op */

inv_status inv_sku_get(struct inv_session *s, const char *sku,
                       struct inv_sku_report *out);
inv_status inv_order_get(struct inv_session *s, uint64_t id, struct inv_order *out);
/* Fills out with order id as its fields say (a record's, or its row in the
 * database): segment the one it is answered with (-1: not known), segments
 * the record's "<seg>:<units>,..." (NULL for one), state NULL for placed,
 * pay_by_ms 0 for none. */
void inv_order_fill(struct inv_order *out, uint64_t id, const char *sku,
                    const char *user_id, int qty, int segment, const char *segments,
                    const char *state, long long pay_by_ms);
/* Recomputes the SKU's figures from its order records, not from the counters. */
inv_status inv_audit(struct inv_session *s, const char *sku, struct inv_audit *out);
/* Retires sku (DELETE /skus/{sku}): every key of it leaves Redis (its order
 * records, segments' lock keys and fence marks, its entry in the deadline
 * index; on a cluster on every shard, then its directory; its events leave
 * the shard's shared outbox stream as the sink carries them), and each
 * instance forgets it. Without the outbox (no
 * --postgres) a one-key summary is left, sk:{sku}:retired (initial, sold,
 * orders, paid, returned, cancelled, expired). INV_OK, INV_NOT_FOUND,
 * INV_NOT_SETTLED (nothing written on one Redis; on a cluster the shards
 * that were settled are retired: a repeat finishes), INV_UNAVAILABLE. */
inv_status inv_sku_retire(struct inv_session *s, const char *sku);

/* A merchant's change (PATCH /skus/{sku}, inventory/patch.c): add > 0 units
 * to put on sale, withdraw > 0 units to take off (up to that many unsold),
 * paused 1 or 0 (-1 unchanged), ends_ms > 0 the new end of the sale (0
 * unchanged). */
struct inv_patch {
    long long add, withdraw, ends_ms;
    int paused;
};
/* Applies p to sku in one script, under the write side of the SKU's
 * read-write lock (inv_patch_lock_key) in the lock-guarded modes; *withdrawn
 * the units taken off. INV_OK, INV_NOT_FOUND, INV_BAD_WINDOW, INV_BUSY (the
 * write side not had within its wait, or fenced off), INV_MALFORMED,
 * INV_UNSUPPORTED, INV_UNAVAILABLE (the script may have run). Nothing is
 * written on a refusal. One Redis only. */
inv_status inv_sku_patch(struct inv_session *s, const char *sku,
                         const struct inv_patch *p, long long *withdrawn);
/* The key of sku's read-write lock: its segment locks' prefix + "rw", in
 * the SKU's slot. */
void inv_patch_lock_key(const char *sku, char *buf, size_t len);

/* True when Redis answers PING. */
int inv_ping(struct inv_session *s);

#endif
