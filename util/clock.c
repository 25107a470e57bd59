#include "clock.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

int64_t clock_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void clock_sleep_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int64_t clock_jitter_us(int64_t backoff_us, unsigned int *seed)
{
    return backoff_us / 2 + rand_r(seed) % (backoff_us / 2 + 1);
}

void clock_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
}

int clock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_us)
{
    struct timespec ts = {.tv_sec = deadline_us / 1000000,
                          .tv_nsec = (long)(deadline_us % 1000000) * 1000};
    return pthread_cond_timedwait(cond, mu, &ts);
}
