/* aconn: one event loop's asynchronous connection to one Redis node.
 *
 * hiredis's async API on a libevent base. Commands queued during one turn of
 * the loop leave in one write when the socket is next writable, and their
 * answers are read together: concurrent requests share round trips without
 * asking (auto-pipelining, as ioredis does).
 *
 * The connection is made on demand and again after any failure, at most once
 * per ACONN_RETRY_MS: a command queued while it is down and not due for a
 * retry is refused at once (the caller answers "unavailable" instead of
 * waiting). A command that gets no answer within timeout_ms of the last sign
 * of life of the connection drops it: its callback, and those of every
 * command queued behind it, run with no reply.
 *
 * Scripts go by EVALSHA once this process knows their SHA; before that by
 * EVAL, with a SCRIPT LOAD beside it to learn the SHA. Each connection made
 * loads every script the process knows first (another master of a cluster,
 * or a Redis restarted empty, has none). A script's error
 * names its .lua file and line (rscript_locate_error).
 *
 * Thread safety: none. An aconn belongs to the thread that runs its base; it
 * is never touched from another thread (see STYLE.md, event-driven code). */
#ifndef SECKILL_ACONN_H
#define SECKILL_ACONN_H

#include <hiredis/hiredis.h>

#include "rconn.h"

#define ACONN_RETRY_MS 50

struct event_base;
struct aconn;

/* What became of a command. */
typedef enum {
    ACONN_REPLY = 0, /* r is Redis's answer (maybe an error reply) */
    ACONN_NOT_SENT,  /* the connection was never up: the command did not run */
    ACONN_LOST,      /* the connection failed after the command could have left:
                        it may have run */
} aconn_result;

/* Called once per command, on the loop thread. r is valid during the call
 * only (aconn frees it); NULL unless res is ACONN_REPLY. */
typedef void aconn_cb(void *arg, aconn_result res, redisReply *r);

/* A connection to host:port, attached to base; not yet connected. password
 * may be NULL. Never returns NULL. */
struct aconn *aconn_new(struct event_base *base, const char *host, int port,
                        const char *password, int timeout_ms);
/* Closes the connection: the callbacks of commands still owed an answer run
 * first (ACONN_LOST or ACONN_NOT_SENT). NULL is a no-op. Not from inside one
 * of this connection's callbacks. */
void aconn_free(struct aconn *c);

/* Queues argv. RCONN_OK: cb will be called once; RCONN_ERR: refused (the connection is
 * down and not due for a retry), cb will not be called. */
rconn_status aconn_command(struct aconn *c, aconn_cb *cb, void *arg, int argc,
                           const char **argv, const size_t *argvlen);
/* Queues a call of script s: nkeys KEYS then ARGV, argc strings in all. As
 * aconn_command. A NOSCRIPT answer (Redis lost its cache) comes back as it
 * is; nothing ran, and the next call of s sends it whole again. */
rconn_status aconn_eval(struct aconn *c, aconn_cb *cb, void *arg, struct rscript *s,
                        int nkeys, int argc, const char **argv);

/* Subscribe mode: turns c, a new connection on which nothing was queued, into
 * a subscriber to channel, for good. It connects now, and again
 * ACONN_RETRY_MS after every loss, subscribing each time. cb runs on the
 * loop thread with ACONN_REPLY for every push: the subscription's
 * confirmation (["subscribe", channel, 1]) after each (re)connection, then
 * each message (["message", channel, payload]), or an error reply when the
 * SUBSCRIBE was refused; and with ACONN_LOST (r NULL) once when a confirmed
 * subscription is lost: messages published from then until the next
 * confirmation are never seen. No answer is owed, so the timeout does not
 * apply (an idle subscriber is not dropped; TCP keepalive notices a vanished
 * peer). Not called back from aconn_free. c takes no commands afterwards
 * (aconn_command refuses). RCONN_ERR: c was not new. */
rconn_status aconn_subscribe(struct aconn *c, const char *channel, aconn_cb *cb,
                             void *arg);
/* True while the subscription is confirmed on the connection up now. */
int aconn_subscribed(const struct aconn *c);

/* True when the connection is up (connected and not failed since). */
int aconn_up(const struct aconn *c);
/* The link (rconn.h) the connection is up on; 0 while it is down. In a
 * callback with ACONN_REPLY: the link that carried the reply. */
uint64_t aconn_link(const struct aconn *c);
/* The node it connects to. */
const char *aconn_host(const struct aconn *c);
int aconn_port(const struct aconn *c);
/* Commands queued and not answered yet. */
int aconn_pending(const struct aconn *c);
/* Why the connection last failed ("" if it never did). */
const char *aconn_errstr(const struct aconn *c);

#endif
