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

/* Steps: nothing to send, and every answer is a grant or a release. */
static lock_status none_try_done(void *session, const char *key, struct lock_step *st,
                                 struct lock_grant *g)
{
    (void)session, (void)key, (void)st, (void)g;
    return LOCK_ACQUIRED;
}

static lock_status none_release_done(void *session, const char *key, struct lock_grant *g,
                                     struct lock_step *st)
{
    (void)session, (void)key, (void)g, (void)st;
    return LOCK_RELEASED;
}

const struct lock_backend lock_backend_none = {
    .name = "none",
    .fenced = 0,
    .create = none_create,
    .destroy = none_destroy,
    .session_new = none_session_new,
    .session_free = none_session_free,
    .try_cmd = lock_step_nothing,
    .step_answer = lock_answer_nothing,
    .try_done = none_try_done,
    .release_cmd = lock_release_nothing,
    .release_done = none_release_done,
    .rw = 1, /* nothing is locked: every side is granted at once */
};
