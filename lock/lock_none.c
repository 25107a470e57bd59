/* none: no lock at all. Every acquire succeeds at once, so the critical section
 * races: the baseline that shows what the locks are for. */
#include "lock_impl.h"

static char none_state;

static void *none_create(const struct lock_config *cfg, struct lock_counters *counters,
                         char *err, size_t errlen)
{
    (void)cfg, (void)counters, (void)err, (void)errlen;
    return &none_state;
}

static void none_destroy(void *state)
{
    (void)state;
}

static void *none_session_new(void *state, struct rconn *data)
{
    (void)data;
    return state;
}

static void none_session_free(void *session)
{
    (void)session;
}

static lock_status none_acquire(void *session, const char *key, int64_t deadline_us,
                                struct lock_grant *g)
{
    (void)session, (void)key, (void)deadline_us, (void)g;
    return LOCK_ACQUIRED;
}

static lock_status none_release(void *session, const char *key, struct lock_grant *g)
{
    (void)session, (void)key, (void)g;
    return LOCK_RELEASED;
}

/* Steps: nothing to send, and every answer is a grant or a release. */
static void none_step(void *session, const char *key, struct lock_step *st)
{
    (void)session, (void)key, (void)st;
}

static void none_release_step(void *session, const char *key, const struct lock_grant *g,
                              struct lock_step *st)
{
    (void)g;
    none_step(session, key, st);
}

static lock_status none_try_answer(void *session, const char *key, struct lock_step *st,
                                   const redisReply *r, struct lock_grant *g)
{
    (void)session, (void)key, (void)st, (void)r, (void)g;
    return LOCK_ACQUIRED;
}

static lock_status none_release_answer(void *session, const char *key,
                                       struct lock_grant *g, const redisReply *r)
{
    (void)r;
    return none_release(session, key, g);
}

const struct lock_backend lock_backend_none = {
    .name = "none",
    .fenced = 0,
    .create = none_create,
    .destroy = none_destroy,
    .session_new = none_session_new,
    .session_free = none_session_free,
    .acquire = none_acquire,
    .release = none_release,
    .try_cmd = none_step,
    .try_answer = none_try_answer,
    .release_cmd = none_release_step,
    .release_answer = none_release_answer,
};
