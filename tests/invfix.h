/* invfix: one instance's inventory for tests, on a real redis-server: a lock
 * of one mode (none for atomic), an inv, a data-Redis connection and a
 * session, fenced, with a 3 s lease and a 5 s wait. Shared by the tests of
 * the group commit and of orders across segments. */
#ifndef SECKILL_INVFIX_H
#define SECKILL_INVFIX_H

#include <pthread.h>
#include <stddef.h>

#include "inventory.h"
#include "testutil.h"

/* The redis-server and the order ids (worker 7) that a test binary's
 * fixtures share. invfix_setup, a cmocka group set-up, starts the server;
 * invfix_teardown stops it. */
extern struct test_redis invfix_redis;
extern struct orderid_gen invfix_ids;
/* The ZooKeeper ensemble of the zk mode ("H:P"), set by a test that starts one. */
extern const char *invfix_zk_hosts;
int invfix_setup(void **state);
int invfix_teardown(void **state);

/* How long a placer waits for a command's answer. Slack: CI under stress with
 * two more test runs beside it (load average 23) took longer than 1 s, and
 * orders answered unavailable; a lost connection (a test's proxy) still
 * answers at once. */
#define INVFIX_TIMEOUT_MS 5000

/* Places orders one at a time, as a server's event loop does: an engine of
 * its own on a loop of its own, driven on the calling thread. One per thread. */
struct invfix_placer;

/* A placer of inv's orders on the Redis (or proxy) on port; one lock hold
 * serves at most batch orders; a command's answer is waited for timeout_ms. */
struct invfix_placer *invfix_placer_new(struct inv *inv, int port, int batch,
                                        int timeout_ms);
/* Frees the engine (which answers what it has in flight), then the loop. */
void invfix_placer_free(struct invfix_placer *p);
/* Places an order of qty units of sku for user (key: its Idempotency-Key, or
 * NULL) and waits for its answer: its status, and *o (when not NULL) the
 * order as the ticket ends with it. */
inv_status invfix_place(struct invfix_placer *p, const char *sku, const char *user,
                        int qty, const char *key, struct inv_order *o);

struct invfix {
    struct lock *lock;
    struct inv *inv;
    struct rconn *rc;
    struct inv_session *s;
    struct invfix_placer *p; /* orders, through an engine on the same Redis as rc */
};

/* Opens f in lock mode `mode` with work_us of work per hold, connected to
 * the Redis (or proxy) on port, drawing order ids from ids. */
void invfix_open(struct invfix *f, const char *mode, int work_us, int port,
                 struct orderid_gen *ids);
/* The same on the shared server (invfix_redis) with the shared ids. */
void invfix_open_shared(struct invfix *f, const char *mode, int work_us);
/* The same with the lock's nodes (redlock; borrowed, kept until close). */
void invfix_open_nodes(struct invfix *f, const char *mode, int work_us, int port,
                       struct orderid_gen *ids, const struct rconn_addr *nodes,
                       int nnodes);
void invfix_close(struct invfix *f);

/* A user id whose home segment among k is `home`: the nth such "u<i>". */
void invfix_user_with_home(int home, int k, int nth, char *out, size_t len);

/* Asserts the SKU's figures (sold, remaining) and that its audit counts the
 * same units and is consistent: records, per-segment counters and the stock
 * index agree. */
void invfix_assert_sold(struct invfix *f, const char *sku, long long sold,
                        long long remaining);

/* Waits up to timeout_ms until segment 0 of each of the n SKUs is locked at
 * once (one EXISTS of their lock keys through rc). Returns 1 when they are. */
int invfix_wait_locked(struct rconn *rc, const char *const *skus, int n, int timeout_ms);

/* Another holder takes segment seg of sku over, as when the holder's lease
 * ran out: its lock key is deleted (it must exist), then f's lock acquires
 * and releases it, which moves the fence on. */
void invfix_take_over(struct invfix *f, const char *sku, int seg);

/* Counts the answers of the tickets it owns (t->owner = w, t->done =
 * invfix_on_done), so that a test waits on a condition, not a clock. */
struct invfix_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};
#define INVFIX_WAITER_INIT                                                               \
    {                                                                                    \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0                           \
    }

void invfix_on_done(struct inv_ticket *t);
/* Waits until w counted n answers. */
void invfix_wait_done(struct invfix_waiter *w, int n);

/* Opens t as an order of qty units of sku for user, answered to w. */
void invfix_ticket(struct inv *inv, struct inv_ticket *t, const char *sku,
                   const char *user, int qty, struct invfix_waiter *w);
/* The same for t[0..n), one unit each, ordered by the users "<prefix>0" to
 * "<prefix><n-1>". */
void invfix_tickets(struct inv *inv, struct inv_ticket *t, int n, const char *sku,
                    const char *prefix, struct invfix_waiter *w);
/* Serves t[0..n), opened (invfix_ticket), as a server's event loop does: an
 * engine of its own (group commits of at most batch) on the fixture's Redis,
 * driven on this thread until w counted n answers. */
void invfix_serve(struct inv *inv, struct inv_ticket *t, int n, int batch,
                  struct invfix_waiter *w);
/* How many of t[0..n) answered st. */
int invfix_count(const struct inv_ticket *t, int n, inv_status st);

#endif
