/* redis_impl: what the redis lock's two halves share, the plain lock
 * (lock_redis.c) and the read-write lock (rwlock_redis.c): the session, and
 * its leases and grants (redis_lease.c). Private to those files. */
#ifndef SECKILL_REDIS_IMPL_H
#define SECKILL_REDIS_IMPL_H

#include "lock_impl.h"

#define KEY_MAX 600

struct redis_state {
    int ttl_ms;
    int fencing;
    char ttl_arg[16];
    struct redis_watchdog *watchdog; /* renews the sessions' leases */
};

/* One per lock_session; the owner is the field of its holds in Redis. */
struct redis_session {
    struct redis_state *st;
    struct rconn *data;
    struct lease *mine;
    char owner[33];
};

/* A wait that polls, for a writer (the read-write lock's, or its intent that
 * keeps a reader's plain lock out): a pause from 1 ms, doubling, to 20 ms. */
#define RW_POLL_FIRST_US 1000
#define RW_POLL_MAX_US 20000

/* The phases of the steps (lock_step.phase). */
enum { REDIS_PHASE_TRY, REDIS_PHASE_RELEASE, REDIS_PHASE_LEAVE };

/* Stops tracking l (its last grant is released); l is freed. */
void redis_lease_end(struct redis_session *s, struct lease *l);
/* The session's live lease on key (the plain lock's key, or the read-write
 * lock's hash), or NULL. */
struct lease *redis_lease_find(struct redis_session *s, const char *key);
/* Records a grant of key that s got at start (monotonic), with its fence:
 * one more hold of the session's lease when reentered and it has one, else
 * a new lease, which the watchdog renews. */
void redis_grant_fill(struct redis_session *s, const char *key, int reentered,
                      long long fence, int64_t start, struct lock_grant *g);
/* The grant is finished whatever the release answered (r: an integer >= 0
 * released, < 0 not held; NULL or else an error; not freed here): forgets
 * it locally. A grant of another key is not ours to touch. */
lock_status redis_release_finish(struct redis_session *s, const char *key,
                                 struct lock_grant *g, const redisReply *r);

/* The read-write lock's steps (rwlock_redis.c), which lock_redis.c's hand
 * over to for a side other than LOCK_EXCLUSIVE (st->side, g->side). */
void rwlock_redis_try_cmd(struct redis_session *s, const char *key, struct lock_step *st);
void rwlock_redis_answer(struct redis_session *s, const char *key, struct lock_step *st,
                         const redisReply *r);
lock_status rwlock_redis_try_done(struct redis_session *s, struct lock_step *st,
                                  struct lock_grant *g);
void rwlock_redis_release_cmd(struct redis_session *s, const char *key,
                              struct lock_grant *g, struct lock_step *st);
/* lock_rw_read_args, lock_rw_read_taken, lock_rw_read_dropped. */
int rwlock_redis_read_args(void *session, const char *key, struct lock_rw_args *a);
lock_status rwlock_redis_read_taken(void *session, const char *key, long long taken,
                                    int64_t sent_us, struct lock_grant *g);
lock_status rwlock_redis_read_dropped(void *session, const char *key,
                                      const long long *left, struct lock_grant *g);

#endif
