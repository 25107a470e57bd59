/* local: a mutex per key inside this process. Exclusive between the threads of
 * one instance, invisible to every other instance: two instances each "hold"
 * the same segment at once, which is how an in-process lock oversells in a
 * cluster. A waiter polls (steps: a loop must not sleep on a mutex).
 *
 * The read-write lock (lock.h) is the same, a key's entry counting its
 * readers (or marked written): readers share it, a writer has it alone. As
 * the plain lock, not reentrant (the sessions of a process are one holder
 * here, and a second read simply shares) and without writer preference:
 * within one process it is here to be measured, not relied on. */
#include "lock_impl.h"
#include "xalloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LOCAL_STRIPES 64

struct held_key {
    struct held_key *next;
    int readers; /* > 0: held by that many readers; 0: by one writer */
    char key[];
};

struct stripe {
    pthread_mutex_t mu;
    struct held_key *held;
};

struct local_state {
    struct stripe stripes[LOCAL_STRIPES];
};

static uint32_t key_hash(const char *key)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *key; key++)
        h = (h ^ (unsigned char)*key) * 16777619u;
    return h;
}

static void *local_create(const struct lock_config *cfg, struct lock_counters *counters,
                          char *err, size_t errlen)
{
    (void)cfg, (void)counters, (void)err, (void)errlen;
    struct local_state *st = xcalloc(1, sizeof(*st));
    for (int i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_init(&st->stripes[i].mu, NULL);
    return st;
}

static void local_destroy(void *state)
{
    struct local_state *st = state;
    for (int i = 0; i < LOCAL_STRIPES; i++) {
        struct held_key *h = st->stripes[i].held;
        while (h) {
            struct held_key *next = h->next;
            free(h);
            h = next;
        }
        pthread_mutex_destroy(&st->stripes[i].mu);
    }
    free(st);
}

static void *local_session_new(void *state, struct rconn *data)
{
    (void)data;
    return state;
}

static void local_session_free(void *session)
{
    (void)session;
}

static struct held_key **find_held(struct stripe *s, const char *key)
{
    struct held_key **p = &s->held;
    while (*p && strcmp((*p)->key, key) != 0)
        p = &(*p)->next;
    return p;
}

/* Takes side of key for the caller when nobody holds it (a read: when no
 * writer does): LOCK_ACQUIRED, or LOCK_BUSY. */
static lock_status take(struct local_state *st, const char *key, lock_side side,
                        struct lock_grant *g)
{
    struct stripe *s = &st->stripes[key_hash(key) % LOCAL_STRIPES];
    size_t keylen = strlen(key);
    struct held_key *mine = xmalloc(sizeof(*mine) + keylen + 1);
    memcpy(mine->key, key, keylen + 1);
    mine->readers = side == LOCK_READ;
    pthread_mutex_lock(&s->mu);
    struct held_key *h = *find_held(s, key);
    if (h && side == LOCK_READ && h->readers > 0) {
        h->readers++;
        pthread_mutex_unlock(&s->mu);
        free(mine);
        lock_token_new(g->token);
        g->valid_until_us = INT64_MAX;
        return LOCK_ACQUIRED;
    }
    if (h) {
        pthread_mutex_unlock(&s->mu);
        free(mine);
        return LOCK_BUSY;
    }
    mine->next = s->held;
    s->held = mine;
    pthread_mutex_unlock(&s->mu);
    lock_token_new(g->token);
    g->valid_until_us = INT64_MAX; /* an in-process mutex has no lease */
    return LOCK_ACQUIRED;
}

/* Steps: nothing to send; an attempt takes the key if it is free, and polls
 * while another session of this process holds it. */
static lock_status local_try_done(void *session, const char *key, struct lock_step *st,
                                  struct lock_grant *g)
{
    lock_status res = take(session, key, st->side, g);
    if (res == LOCK_BUSY)
        st->retry_us = lock_step_backoff(st, 100, 5000, NULL);
    return res;
}

static lock_status local_release_done(void *session, const char *key,
                                      struct lock_grant *g, struct lock_step *step)
{
    (void)step;
    struct local_state *st = session;
    struct stripe *s = &st->stripes[key_hash(key) % LOCAL_STRIPES];
    pthread_mutex_lock(&s->mu);
    struct held_key **p = find_held(s, key);
    struct held_key *h = *p;
    lock_status res =
        h && (g->side == LOCK_READ) == (h->readers > 0) ? LOCK_RELEASED : LOCK_NOT_HELD;
    if (res == LOCK_RELEASED && h->readers > 1) {
        h->readers--;
        h = NULL; /* other readers keep it */
    } else if (res == LOCK_RELEASED) {
        *p = h->next;
    } else {
        h = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(h);
    return res;
}

const struct lock_backend lock_backend_local = {
    .name = "local",
    .fenced = 0,
    .create = local_create,
    .destroy = local_destroy,
    .session_new = local_session_new,
    .session_free = local_session_free,
    .try_cmd = lock_step_nothing,
    .step_answer = lock_answer_nothing,
    .try_done = local_try_done,
    .release_cmd = lock_release_nothing,
    .release_done = local_release_done,
    .rw = 1,
};
