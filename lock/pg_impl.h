/* pg_impl: what the pg lock's blocking form and lease watchdog (lock_pg.c) and
 * its steps for an event loop (pg_steps.c) share. Private to lock/. */
#ifndef SECKILL_PG_IMPL_H
#define SECKILL_PG_IMPL_H

#include <libpq-fe.h>
#include <pthread.h>

#include "lock_impl.h"

struct apg;
struct event;
struct pg_state;
struct pg_session;

/* The channel every release NOTIFYs, with the lock's key as payload. */
#define PG_CHANNEL "seckill_locks"

/* The statements (lock_pg.c says what each does). */
extern const char pg_sql_table[];   /* the table, if missing */
extern const char pg_sql_insert[];  /* $1 key: its row, if missing */
extern const char pg_sql_acquire[]; /* $1 key, $2 owner, $3 ttl ms */
extern const char pg_sql_release[]; /* $1 key, $2 owner, $3 version */
extern const char pg_sql_let_go[];  /* $1 key, $2 owner */
extern const char pg_sql_renew[];   /* $1 key, $2 owner, $3 version, $4 ttl ms */

/* What an acquire's answer says. */
enum pg_try { PG_TRY_GRANTED, PG_TRY_TAKEN, PG_TRY_NO_ROW, PG_TRY_FAILED };
/* Reads the answer r of pg_sql_acquire: GRANTED with *version; TAKEN with
 * *left_ms, the holder's lease left on the database's clock (-1: unknown);
 * NO_ROW (the key has no row yet); FAILED (an error: a missing table is
 * remembered, to be made again). */
enum pg_try pg_try_read(struct pg_state *st, const PGresult *r, uint64_t *version,
                        long long *left_ms);

/* One key held by one lock_session, perhaps re-entered. */
struct pg_hold {
    struct pg_hold *next;     /* the lock's list, for the watchdog (under st->mu) */
    struct pg_hold *snext;    /* the session's list (session thread only) */
    struct pg_session *owner; /* the session that took it */
    char *key;
    char token[33]; /* the row's owner while held */
    uint64_t version;
    int depth;    /* grants not yet released (session thread only) */
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
    _Atomic int table_ready; /* the table was seen or made */
    pthread_mutex_t mu;      /* holds' list and lease fields, the watchdog */
    struct pg_hold *holds;
    struct pg_loop *loops; /* the loops that steps run on */
    struct event *tick;    /* the watchdog, on the attached base */
    struct apg *wd_conn;   /* its connection (the attached base's thread) */
};

struct pg_job;

/* One event loop's connections, shared by the sessions whose steps run on
 * it (its thread only, but for refs and next). */
struct pg_loop {
    struct pg_state *st;
    struct pg_loop *next; /* st->loops (under st->mu) */
    int refs;             /* sessions on it (under st->mu) */
    struct event_base *base;
    struct apg *aconn;    /* the queries */
    struct apg *listener; /* LISTEN PG_CHANNEL */
    int heard;            /* the listener LISTENed (or lost it, or was waited for) */
    struct pg_job *jobs;  /* acquires going on, for the notifications */
    int closing;
};

struct pg_session {
    struct pg_state *st;
    struct pg_hold *holds;
    PGconn *conn; /* blocking, LISTENing; NULL until needed, and after a failure */
    struct pg_loop *loop; /* steps: the loop's connections, from the first step on */
};

struct pg_hold *pg_hold_find(struct pg_session *s, const char *key);
/* A hold of key by s, granted as version to token by an acquire sent at
 * sent_us; on the watchdog's list. */
struct pg_hold *pg_hold_new(struct pg_session *s, const char *key, const char *token,
                            uint64_t version, int64_t sent_us);
/* Off its lists and freed. */
void pg_hold_free(struct pg_hold *h);
/* 1 while h's lease is known valid; a lease found run out while held is
 * counted lost (once). */
int pg_hold_alive(struct pg_state *st, struct pg_hold *h);
void pg_hold_releasing(struct pg_state *st, struct pg_hold *h);
void pg_grant_fill(struct pg_state *st, struct pg_hold *h, int contended,
                   struct lock_grant *g);
/* A release of g that needs no statement, or whose statement is sent
 * unwaited (let_go: pg_steps_let_go): a re-entered grant, a lost one. */
lock_status pg_release_in_memory(struct pg_session *s, const char *key,
                                 struct lock_grant *g, int let_go);

/* pg_steps.c */
void pg_try_cmd(void *session, const char *key, struct lock_step *st);
lock_status pg_try_done(void *session, const char *key, struct lock_step *st,
                        struct lock_grant *g);
void pg_release_cmd(void *session, const char *key, struct lock_grant *g,
                    struct lock_step *st);
lock_status pg_release_done(void *session, const char *key, struct lock_grant *g,
                            struct lock_step *st);
void pg_step_start(void *session, const char *key, struct lock_step *st,
                   struct event_base *base, lock_step_cb *done, void *arg);
void pg_step_cancel(void *session, struct lock_step *st);
/* Sends the owner-checked release of key's row held by token, unwaited, on
 * the loop's connection (nothing when NULL, or closing). 1 when sent. */
int pg_steps_let_go(struct pg_loop *loop, const char *key, const char *token);
/* s leaves its loop; the last session on it closes the loop's connections
 * (on its thread, or once it stopped). */
void pg_steps_close(struct pg_session *s);

#endif
