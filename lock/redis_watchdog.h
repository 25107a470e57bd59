/* redis_watchdog: the lease watchdog of the redis lock (lock_redis.c, its only
 * caller). A timer on the event loop the lock is attached to (lock_attach)
 * renews every held lease at ttl/3 with an owner-checked PEXPIRE
 * (lock/lua/redis_renew.lua, by SHA), in batches auto-pipelined on an async
 * connection of its own (aconn, made on the first lease to the node of the
 * lease's data connection). It stops renewing a lease
 * on release, when the lease turns out lost (counted in leases_lost), and at
 * max_lease_ms after the grant. Validity is kept on the monotonic clock: a
 * renewal sent at t with lease L is valid until t + L. Which grant a lease
 * belongs to, re-entry and the hand-off are lock_redis.c's.
 *
 * Threads: the session threads of a redis lock (every event loop that
 * runs its steps, and the blocking calls of the tests and tools) call redis_watchdog_add, _drop, _extend, _lose
 * and _valid_until; the loop the watchdog is attached to renews. Both sides
 * take the watchdog's mutex, and nobody holds it on the network: a lease
 * added re-arms the timer (evtimer_add is thread-safe under libevent's
 * pthreads locking) only when it is due before the timer. redis_watchdog_new
 * and _free come with the lock (create, destroy), no session left. Without
 * an attached loop nothing is renewed: leases run out after one ttl. */
#ifndef SECKILL_REDIS_WATCHDOG_H
#define SECKILL_REDIS_WATCHDOG_H

#include <stdint.h>

struct event_base;
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
 * grant (at least ttl_ms), counting renewals and lost leases in counters;
 * password (may be NULL) is the data Redis's AUTH. Nothing runs before
 * redis_watchdog_attach. Aborts when out of memory. */
struct redis_watchdog *redis_watchdog_new(int ttl_ms, int max_lease_ms,
                                          const char *password,
                                          struct lock_counters *counters);

/* Renews on base from now on: from any thread, base running or not yet;
 * the connection is made on base's thread at the first renewal. A watchdog
 * is attached to one base at a time (a second call is ignored). */
void redis_watchdog_attach(struct redis_watchdog *wd, struct event_base *base);
/* Stops renewing and closes the connection (renewals in flight count as
 * failed). On the attached base's thread, or once that base no longer runs.
 * No-op when not attached. */
void redis_watchdog_detach(struct redis_watchdog *wd);

/* Detaches (same rule), frees the leases still tracked (of sessions freed
 * without releasing). NULL is a no-op. */
void redis_watchdog_free(struct redis_watchdog *wd);

/* Starts tracking l, a new hold granted at start (monotonic): valid for one
 * ttl from start, renewed from start + ttl/3 unless max_lease_ms is no
 * longer than ttl. l (key, owner, depth filled in by the caller, heap
 * allocated) is the watchdog's to free from now on (see redis_watchdog_drop).
 * The first call names the node renewals go to: data's (the caller's
 * connection). */
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
