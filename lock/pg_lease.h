/* pg_lease: the leases of the pg lock (lock_pg.c, its only caller): the holds
 * of its sessions, what is known of each one's lease, and the watchdog that
 * renews them. Below the recipe: nothing here calls lock_pg.c. Private to
 * lock/.
 *
 * Threads: a hold's session fields (snext, depth, detached) are its session
 * thread's; its lease fields and the lock's list of holds are under st->mu,
 * which the watchdog (on the attached base's thread) takes too. */
#ifndef SECKILL_PG_LEASE_H
#define SECKILL_PG_LEASE_H

#include <pthread.h>
#include <stdatomic.h>

#include "lock_impl.h"

struct apg;
struct event;
struct pg_loop;
struct pg_session;

/* The channel every release NOTIFYs, with the lock's key as payload. */
#define PG_CHANNEL "seckill_locks"

/* One key held by one lock_session on one side, perhaps re-entered. */
struct pg_hold {
    struct pg_hold *next;     /* the lock's list, for the watchdog (under st->mu) */
    struct pg_hold *snext;    /* the session's list (session thread only) */
    struct pg_session *owner; /* the session that took it */
    char *key;
    char token[33]; /* the row's owner while held */
    uint64_t version;
    int depth;    /* grants not yet released (session thread only) */
    int reads;    /* a write hold's read grants (session thread only) */
    lock_side side; /* its row's table and what it holds there (pg_sql.h) */
    char *readers;  /* a write side's readers' prefix (pg_sql_over), NULL: none */
    char nreaders[12]; /* and their count */
    int detached; /* found lost by an acquire that made a new hold */
    /* under st->mu: */
    int64_t valid_until_us; /* the lease as known here; 0: lost */
    int64_t acquired_us;
    int64_t renewed_us; /* when the last renewal (or the acquire) was sent */
    int renewing;       /* a renewal is on its way */
    int releasing;      /* its release is on its way: a renewal finding it
                           gone is no lost lease */
};

struct pg_state {
    char *conninfo;
    int ttl_ms, max_lease_ms, timeout_ms;
    char ttl_text[16];
    struct lock_counters *counters;
    _Atomic int table_ready;    /* the table was seen or made */
    _Atomic int rw_table_ready; /* the read-write lock's */
    pthread_mutex_t mu;      /* holds' list and lease fields, the watchdog, loops */
    struct pg_hold *holds;
    struct pg_loop *loops; /* the loops that steps run on (lock_pg.c's) */
    struct event *tick;    /* the watchdog, on the attached base */
    struct apg *wd_conn;   /* its connection (the attached base's thread) */
};

struct pg_session {
    struct pg_state *st;
    struct pg_hold *holds;
    struct pg_loop *loop; /* the loop's connections, from the first step on */
};

/* s's hold of side of key, NULL when none (session thread only). */
struct pg_hold *pg_hold_find(struct pg_session *s, const char *key, lock_side side);
/* The live hold that a grant of side of key re-enters (no statement): the
 * session's hold of that side, or for a read its write (the writer reads);
 * NULL when none. A hold of that side found lost is detached, left to its
 * grants (they release as NOT_HELD): the grant is a new one. */
struct pg_hold *pg_hold_reentered(struct pg_session *s, const char *key, lock_side side);
/* Counts one more grant of side on h (re-entered). */
void pg_hold_enter(struct pg_hold *h, lock_side side);
/* Counts a grant of side on h released; returns the grants of h left (0:
 * its row is to be let go). */
int pg_hold_leave(struct pg_hold *h, lock_side side);
/* The grants of h not yet released. */
int pg_hold_grants(const struct pg_hold *h);
/* A hold of side of key by s, granted as version to token by an acquire
 * sent at sent_us; on the watchdog's list. */
struct pg_hold *pg_hold_new(struct pg_session *s, const char *key, lock_side side,
                            const char *token, uint64_t version, int64_t sent_us);
/* h is a write side over the readers "<prefix>0".."<prefix>(n - 1)": its
 * release and renewals mark them too (pg_sql_over). */
void pg_hold_readers(struct pg_hold *h, const char *prefix, const char *n);
/* The statements of h's release and renewals. */
const struct pg_sql *pg_hold_sql(const struct pg_hold *h);
/* Off its lists and freed; its lease runs out, not renewed any more. */
void pg_hold_free(struct pg_hold *h);
/* 1 while h's lease is known valid; a lease found run out while held is
 * counted lost (once). */
int pg_hold_alive(struct pg_state *st, struct pg_hold *h);
/* h's release is on its way: a renewal that finds the row gone is no loss. */
void pg_hold_releasing(struct pg_state *st, struct pg_hold *h);
/* g as a grant of side of h (a read of a write hold: the writer reads). A
 * read carries no token. */
void pg_grant_fill(struct pg_state *st, struct pg_hold *h, lock_side side, int contended,
                   struct lock_grant *g);
/* The monotonic time until which h's lease is known valid; 0 once lost. */
int64_t pg_hold_valid_until(struct pg_state *st, const struct pg_hold *h);

/* The watchdog: renews the held leases at ttl/3 from base's thread from now
 * on, on a connection of its own (lock_attach); stops (lock_detach: on that
 * thread, or once base no longer runs). */
void pg_watchdog_attach(struct pg_state *st, struct event_base *base);
void pg_watchdog_detach(struct pg_state *st);

#endif
