/* zk_loop: the thread and libevent base that drive the ZooKeeper sessions of
 * the zk lock on the single-threaded client (libzookeeper_st), whose handle
 * may be touched by one thread only: zoo_a*() calls, zookeeper_interest,
 * zookeeper_process, completions and watchers all run here.
 *
 * Other threads hand work over as jobs (a function and its argument): a
 * FIFO inbox under a mutex and an event_active wake-up. Jobs run in the
 * order they were posted, on the loop's thread, and must not block.
 *
 * Callers: zk_conn.c only (one zk_loop per struct lock, that is per process:
 * one thread where libzookeeper_mt had two). */
#ifndef SECKILL_ZK_LOOP_H
#define SECKILL_ZK_LOOP_H

struct event_base;
struct zk_loop;

/* A loop with its thread running; NULL (errno set) when the thread or the
 * base could not be made. */
struct zk_loop *zk_loop_new(void);

/* Runs every job posted so far, then stops and joins the thread, and frees
 * the loop. NULL is a no-op. Not from the loop's thread. */
void zk_loop_free(struct zk_loop *l);

/* The loop's base, for events of its thread (zk_conn's session I/O). */
struct event_base *zk_loop_base(struct zk_loop *l);

/* 1 on the loop's thread. */
int zk_loop_here(const struct zk_loop *l);

/* Queues run(arg) to run on the loop's thread after the jobs posted before
 * it. Any thread, also the loop's own (then after the current callback). */
void zk_loop_post(struct zk_loop *l, void (*run)(void *arg), void *arg);

/* Runs run(arg) on the loop's thread and waits until it ran: at once when
 * called there. */
void zk_loop_call(struct zk_loop *l, void (*run)(void *arg), void *arg);

#endif
