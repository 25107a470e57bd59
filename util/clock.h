/* clock: time for every layer: the monotonic clock, sleeping, jittered backoff
 * and condition variables that wait on the monotonic clock.
 *
 * Every deadline and duration in this tree is on clock_now_us's clock, so that
 * a wall clock stepped back or forth changes no timeout. Any thread. */
#ifndef SECKILL_CLOCK_H
#define SECKILL_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* The monotonic clock, in microseconds. */
int64_t clock_now_us(void);

/* Sleeps us microseconds (whole: a signal does not cut it short). us <= 0
 * returns at once. For threads that may block; never in an event callback. */
void clock_sleep_us(int64_t us);

/* A pause of about backoff_us with jitter, so that waiters that collided do
 * not collide again: uniform in [backoff_us / 2, backoff_us]. seed is the
 * caller's rand_r state. */
int64_t clock_jitter_us(int64_t backoff_us, unsigned int *seed);

/* Initialises cond to time its waits on clock_now_us's clock. */
void clock_cond_init(pthread_cond_t *cond);

/* Waits on cond (mu held, as pthread_cond_timedwait) until deadline_us on
 * clock_now_us's clock; cond must come from clock_cond_init. Returns
 * pthread_cond_timedwait's result (ETIMEDOUT once the deadline passed). */
int clock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_us);

#endif
