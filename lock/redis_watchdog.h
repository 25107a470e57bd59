/* redis_watchdog: the lease watchdog of the redis lock (lock_redis.c, its only
 * caller). One thread per lock, started on the first lease, renews every held
 * lease at ttl/3 with an owner-checked PEXPIRE (lock/lua/redis_renew.lua),
 * pipelined in batches, on a connection of its own. It stops renewing a lease
 * on release, when the lease turns out lost (counted in leases_lost), and at
 * max_lease_ms after the grant. Validity is kept on the monotonic clock: a
 * renewal sent at t with lease L is valid until t + L. Which grant a lease
 * belongs to, re-entry and the hand-off are lock_redis.c's.
 *
 * Threads: the session threads of a redis lock (and the event loop thread
 * that runs its steps) call redis_watchdog_add, _drop, _extend, _lose and
 * _valid_until; the watchdog's own thread renews. Both sides take the
 * watchdog's mutex, and nobody holds it on the network. redis_watchdog_new
 * and _free come with the lock (create, destroy), no session left. */
#ifndef SECKILL_REDIS_WATCHDOG_H
#define SECKILL_REDIS_WATCHDOG_H

#include <stdint.h>

struct lock_counters;
struct rconn;
struct redis_watchdog;

/* One key held by one session; shared with the watchdog (under its mutex).
 * The session's fields (snext, depth) are the session thread's only; key and
 * owner never change while the lease exists. */
struct lease {
    struct lease *prev, *next; /* the watchdog's list */
    struct lease *snext;       /* the session's list (session thread only) */
    int depth;                 /* grants of this session not yet released */
    int lost;                  /* renewal found another owner (or none) */
    int in_flight;             /* the watchdog is renewing it right now */
    int orphan;                /* released while in flight: the watchdog frees it */
    int64_t valid_until_us;
    int64_t renew_at_us; /* INT64_MAX: no more renewals */
    int64_t max_until_us;
    char owner[33];
    char key[];
};

/* A watchdog for leases of ttl_ms, renewed up to max_lease_ms after their
 * grant (at least ttl_ms), counting renewals and lost leases in counters.
 * Its thread and connection wait for the first lease. Aborts when out of
 * memory. */
struct redis_watchdog *redis_watchdog_new(int ttl_ms, int max_lease_ms,
                                          struct lock_counters *counters);

/* Stops and joins the thread, frees the leases still tracked (of sessions
 * freed without releasing) and the connection. NULL is a no-op. */
void redis_watchdog_free(struct redis_watchdog *wd);

/* Starts tracking l, a new hold granted at start (monotonic): valid for one
 * ttl from start, renewed from start + ttl/3 unless max_lease_ms is no
 * longer than ttl. l (key, owner, depth filled in by the caller, heap
 * allocated) is the watchdog's to free from now on (see redis_watchdog_drop).
 * The first call starts the thread, on a clone of data (the caller's
 * connection); aborts when the thread cannot start. */
void redis_watchdog_add(struct redis_watchdog *wd, struct lease *l, int64_t start,
                        struct rconn *data);

/* Stops tracking l (its last grant is released) and frees it: now, or when
 * the renewal in flight for it comes back. l is not to be used after. */
void redis_watchdog_drop(struct redis_watchdog *wd, struct lease *l);

/* Extends l's validity to until (monotonic), for a re-entry granted with a
 * fresh lease; no effect when l is lost or already valid longer. */
void redis_watchdog_extend(struct redis_watchdog *wd, struct lease *l, int64_t until);

/* Marks l lost, found so by its session (a new grant of the same key while
 * l was thought held): no validity left, no more renewals, counted once in
 * leases_lost. l stays tracked until redis_watchdog_drop. */
void redis_watchdog_lose(struct redis_watchdog *wd, struct lease *l);

/* The monotonic time until which l is known to be valid; 0 once it is
 * known to be lost. */
int64_t redis_watchdog_valid_until(struct redis_watchdog *wd, const struct lease *l);

#endif
