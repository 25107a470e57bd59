/* zk_loop: the thread that drives the zk lock's sessions (see zk_loop.h). */
#include "zk_loop.h"

#include "xalloc.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdlib.h>

struct zk_job {
    struct zk_job *next;
    void (*run)(void *arg);
    void *arg;
};

struct zk_loop {
    struct event_base *base;
    struct event *wake; /* activated by zk_loop_post */
    pthread_t thread;
    pthread_mutex_t mu; /* the inbox and stop */
    struct zk_job *head, **tail;
    int stop;
};

/* Runs the inbox, oldest first; breaks the loop once asked to stop and the
 * inbox is empty. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct zk_loop *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        struct zk_job *j = l->head;
        if (j) {
            l->head = j->next;
            if (!l->head)
                l->tail = &l->head;
        }
        int stop = l->stop && !j;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            event_base_loopbreak(l->base);
        if (!j)
            return;
        j->run(j->arg);
        free(j);
    }
}

static void *loop_main(void *arg)
{
    struct zk_loop *l = arg;
    pthread_setname_np(pthread_self(), "sk-zk");
    event_base_loop(l->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

struct zk_loop *zk_loop_new(void)
{
    static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
    pthread_once(&threads_once, (void (*)(void))evthread_use_pthreads);
    struct zk_loop *l = xcalloc(1, sizeof(*l));
    pthread_mutex_init(&l->mu, NULL);
    l->tail = &l->head;
    l->base = event_base_new();
    l->wake = l->base ? event_new(l->base, -1, 0, on_wake, l) : NULL;
    int rc = l->wake ? pthread_create(&l->thread, NULL, loop_main, l) : ENOMEM;
    if (rc != 0) {
        if (l->wake)
            event_free(l->wake);
        if (l->base)
            event_base_free(l->base);
        pthread_mutex_destroy(&l->mu);
        free(l);
        errno = rc;
        return NULL;
    }
    return l;
}

void zk_loop_free(struct zk_loop *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_mutex_unlock(&l->mu);
    event_active(l->wake, 0, 0);
    pthread_join(l->thread, NULL);
    event_free(l->wake);
    event_base_free(l->base);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

struct event_base *zk_loop_base(struct zk_loop *l)
{
    return l->base;
}

int zk_loop_here(const struct zk_loop *l)
{
    return pthread_equal(pthread_self(), l->thread);
}

void zk_loop_post(struct zk_loop *l, void (*run)(void *arg), void *arg)
{
    struct zk_job *j = xcalloc(1, sizeof(*j));
    j->run = run;
    j->arg = arg;
    pthread_mutex_lock(&l->mu);
    *l->tail = j;
    l->tail = &j->next;
    pthread_mutex_unlock(&l->mu);
    event_active(l->wake, 0, 0);
}

/* A job waited for (zk_loop_call): the caller's, on its stack. */
struct zk_sync {
    struct zk_loop *loop;
    void (*run)(void *arg);
    void *arg;
    int done;
    pthread_cond_t cond;
};

static void sync_run(void *arg)
{
    struct zk_sync *s = arg;
    s->run(s->arg);
    pthread_mutex_lock(&s->loop->mu);
    s->done = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->loop->mu);
}

void zk_loop_call(struct zk_loop *l, void (*run)(void *arg), void *arg)
{
    if (zk_loop_here(l)) {
        run(arg);
        return;
    }
    struct zk_sync s = {.loop = l, .run = run, .arg = arg};
    pthread_cond_init(&s.cond, NULL);
    zk_loop_post(l, sync_run, &s);
    pthread_mutex_lock(&l->mu);
    while (!s.done)
        pthread_cond_wait(&s.cond, &l->mu);
    pthread_mutex_unlock(&l->mu);
    pthread_cond_destroy(&s.cond);
}
