/* lock_impl: what a lock backend implements. Private to lock/. */
#ifndef SECKILL_LOCK_IMPL_H
#define SECKILL_LOCK_IMPL_H

#include <stdatomic.h>

#include "lock.h"

struct lock_counters;

/* A fenced backend whose grants come without their token (no `fences`) gets
 * it from lock.c, in a step of its own after the grant: fence_take.lua on
 * "<key>:fence" on the data Redis (not atomic with the grant: backends that
 * can, take it inside their acquire script). */
struct event_base;

struct lock_backend {
    const char *name;
    int fenced;         /* grants carry fencing tokens when lock_config.fencing is on */
    int fence_external; /* the tokens come from outside the data Redis (see
                           lock_fence_external) */
    /* Backend state for a new lock; NULL with err set when unusable. */
    void *(*create)(const struct lock_config *cfg, struct lock_counters *counters,
                    char *err, size_t errlen);
    void (*destroy)(void *state);
    /* Optional: background work (lease renewals) on base from now on; stops
     * it (see lock_attach, lock_detach). */
    void (*attach)(void *state, struct event_base *base);
    void (*detach)(void *state);
    /* Per-thread state; data is borrowed. */
    void *(*session_new)(void *state, struct rconn *data);
    void (*session_free)(void *session);
    /* The steps (see lock_try_step), the only form of an acquire and a
     * release: lock.c runs them itself for the blocking calls. try_cmd
     * fills st with an attempt (st->cmd, st->node, st->ncmd, st->last: a
     * grant by it is complete but for the fencing token, which lock.c takes
     * in a step of its own unless `fences`; or st->async: done elsewhere,
     * step_start); step_answer takes one answer of the step in flight
     * (st->answered came before it; NULL: none), attempt's or release's;
     * try_done says what the attempt's answers mean, as lock_try_done (a
     * BUSY that polls sets st->retry_us, lock.c bounds it by the wait);
     * release_done the release's (st NULL: never sent). handoff_cmd and
     * handoff_answer only for a mode that queues its waiters (st->entry). */
    void (*try_cmd)(void *session, const char *key, struct lock_step *st);
    void (*step_answer)(void *session, const char *key, struct lock_step *st,
                        const redisReply *r);
    lock_status (*try_done)(void *session, const char *key, struct lock_step *st,
                            struct lock_grant *g);
    void (*handoff_cmd)(void *session, const char *key, int64_t wait_us,
                        struct lock_step *st);
    lock_status (*handoff_answer)(void *session, const char *key, struct lock_step *st,
                                  const redisReply *r, struct lock_grant *g);
    void (*release_cmd)(void *session, const char *key, struct lock_grant *g,
                        struct lock_step *st);
    lock_status (*release_done)(void *session, const char *key, struct lock_grant *g,
                                struct lock_step *st);
    /* A mode whose steps are done elsewhere (st->async; see lock_step_start). */
    void (*step_start)(void *session, const char *key, struct lock_step *st,
                       struct event_base *base, lock_step_cb *done, void *arg);
    void (*step_cancel)(void *session, struct lock_step *st);
    int has_nodes; /* it locks on lock_config's nodes (see lock_nodes) */
    int fences;    /* its grants carry their fencing token (steps: no INCR after) */
    /* The read-write lock (lock.h): try_cmd reads st->side, release_cmd
     * g->side. A mode without leaves rw 0. read_taken and read_dropped
     * (redis only) make a grant of the read side taken in a caller's
     * script (lock_rw_read_args); read_args fills the arguments. */
    int rw;
    int (*read_args)(void *session, const char *key, struct lock_rw_args *a);
    lock_status (*read_taken)(void *session, const char *key, long long taken,
                              int64_t sent_us, struct lock_grant *g);
    lock_status (*read_dropped)(void *session, const char *key, const long long *left,
                                struct lock_grant *g);
    /* Optional: the grant's current validity (see lock_valid_until_us). */
    int64_t (*valid_until)(void *session, const struct lock_grant *g);
};

/* Counters a backend may bump (renewals, leases lost, watch wake-ups); the rest
 * are kept by lock.c. */
struct lock_counters {
#define LOCK_COUNTERS_FIELD(field, kind, help) _Atomic uint64_t field;
    LOCK_STATS(LOCK_COUNTERS_FIELD)
#undef LOCK_COUNTERS_FIELD
    _Atomic uint64_t wait_buckets[LOCK_WAIT_BUCKETS];
};

struct lock {
    const struct lock_backend *be;
    void *state;
    struct lock_config cfg;
    struct lock_counters counters;
};

/* The timeout of one command on a lock node: a twentieth of the lease, at
 * least 50 ms, at most cfg's command timeout. Short against the lease, as
 * Redlock asks (a slow node must not eat the validity), but not so short
 * that a loaded machine's scheduling delay reads as a dead node. */
int lock_node_timeout_ms(const struct lock_config *cfg);

/* Empties st for a step of phase (no commands, nothing answered yet). */
void lock_step_clear(struct lock_step *st, int phase);
/* A polling step's pause after a taken lock: st->backoff_us starts at
 * first_us and doubles up to max_us; the pause is that, or with seed a
 * jittered one between its half and it. */
int64_t lock_step_backoff(struct lock_step *st, int64_t first_us, int64_t max_us,
                          unsigned int *seed);

/* Steps of a backend with nothing to send (none, local): it decides in
 * try_done and release_done. */
void lock_step_nothing(void *session, const char *key, struct lock_step *st);
void lock_release_nothing(void *session, const char *key, struct lock_grant *g,
                          struct lock_step *st);
void lock_answer_nothing(void *session, const char *key, struct lock_step *st,
                         const redisReply *r);

/* For backends that renew leases (the counters come with create). */
void lock_count_renewal(struct lock_counters *c);
void lock_count_lost(struct lock_counters *c);
/* For backends whose waiters sleep on a watch: one waiter woken by one, and
 * delta (+1, -1) waiters asleep on one. */
void lock_count_wakeup(struct lock_counters *c);
void lock_count_watch_waiter(struct lock_counters *c, int delta);

extern const struct lock_backend lock_backend_none;
extern const struct lock_backend lock_backend_local;
extern const struct lock_backend lock_backend_setnx;
extern const struct lock_backend lock_backend_redis;
extern const struct lock_backend lock_backend_redlock;
extern const struct lock_backend lock_backend_zk;
extern const struct lock_backend lock_backend_pg;

#endif
