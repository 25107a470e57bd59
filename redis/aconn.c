#include "aconn.h"

#include <event2/event.h>
#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "text.h"
#include "xalloc.h"

/* One queued command: what to call back, and on which connection attempt it
 * was queued (to tell "never sent" from "lost"). Pooled per connection. */
struct areq {
    struct aconn *c;
    aconn_cb *cb;
    void *arg;
    struct rscript *script; /* sent as EVALSHA: reload it on NOSCRIPT */
    unsigned attempt;
    struct areq *next_free;
};

struct aconn {
    struct event_base *base;
    char host[256];
    int port;
    char *password;
    int timeout_ms;
    redisAsyncContext *ac; /* NULL while down */
    unsigned attempt;      /* connection attempts made */
    unsigned up_attempt;   /* the latest attempt that got connected */
    int up;
    uint64_t link;    /* ac's link id (rconn_link_new) */
    int64_t tried_us; /* when the latest attempt began */
    int pending;
    int closing;           /* aconn_free: no new connection */
    int64_t alive_us;      /* the latest sign of life while commands are owed */
    struct event *watch;   /* fires when the owed answers are overdue */
    struct areq *free_req; /* the pool */
    /* Subscribe mode (aconn_subscribe): the one channel, its callback, and
     * the timer that connects again after a loss. */
    char *channel;
    aconn_cb *sub_cb;
    void *sub_arg;
    int subscribed;      /* the current connection confirmed the subscription */
    struct event *resub; /* connects again ACONN_RETRY_MS after a loss */
    char errstr[128];
    char *out; /* command_format's buffer */
    size_t out_room;
};

static void on_push(redisAsyncContext *ac, void *reply, void *privdata);
static void resub_arm(struct aconn *c);

static void set_err(struct aconn *c, const char *why)
{
    snprintf(c->errstr, sizeof(c->errstr), "%s:%d: %s", c->host, c->port, why);
}

/* The context failed or is being closed: nothing more goes out on it. */
static void mark_down(struct aconn *c, const redisAsyncContext *ac)
{
    if (c->ac != ac)
        return;
    if (ac->err)
        set_err(c, ac->errstr);
    c->ac = NULL;
    c->up = 0;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct aconn *c = ac->data;
    if (status == REDIS_OK && c->ac == ac) {
        c->up = 1;
        c->up_attempt = c->attempt;
        return;
    }
    mark_down(c, ac); /* hiredis frees ac after this */
    if (c->channel)
        resub_arm(c);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    struct aconn *c = ac->data;
    mark_down(c, ac);
    if (c->channel)
        resub_arm(c);
}

static void on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    redisReply *r = reply;
    if (r && r->type == REDIS_REPLY_ERROR)
        set_err(ac->data, r->str); /* the commands behind it get NOAUTH */
}

/* ---- hiredis on the loop ---------------------------------------------------
 * hiredis's own libevent adapter arms a one-shot read event that it adds
 * again after every read, and a write event for every command queued: two
 * epoll_ctl calls per read and two per write, and the write waits for the
 * next round of the loop. This one keeps the read event armed (persistent)
 * and writes what the loop's callbacks queued when they are done, in the
 * same round (an activated event: no system call); it waits for the socket
 * to be writable only when the kernel's buffer was full, or while the
 * connection is being made. */
struct aev {
    redisAsyncContext *ac;
    struct event *rev, *wev, *flush;
    int queued;  /* flush is active */
    int writing; /* inside redisAsyncHandleWrite */
    int dead;    /* cleaned up while writing: freed once it returns */
};

static void aev_write(struct aev *e)
{
    e->writing = 1;
    redisAsyncHandleWrite(e->ac);
    e->writing = 0;
    if (e->dead)
        free(e);
}

static void aev_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    redisAsyncHandleRead(((struct aev *)arg)->ac);
}

static void aev_on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    aev_write(arg);
}

static void aev_on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct aev *e = arg;
    e->queued = 0;
    aev_write(e);
}

static void aev_add_read(void *p)
{
    struct aev *e = p;
    if (!event_pending(e->rev, EV_READ, NULL))
        event_add(e->rev, NULL);
}

static void aev_del_read(void *p)
{
    event_del(((struct aev *)p)->rev);
}

static void aev_add_write(void *p)
{
    struct aev *e = p;
    if (e->writing || !(e->ac->c.flags & REDIS_CONNECTED)) {
        event_add(e->wev, NULL); /* the buffer was full, or the connect is on */
    } else if (!e->queued) {
        e->queued = 1;
        event_active(e->flush, EV_WRITE, 1);
    }
}

static void aev_del_write(void *p)
{
    event_del(((struct aev *)p)->wev);
}

static void aev_cleanup(void *p)
{
    struct aev *e = p;
    event_free(e->rev);
    event_free(e->wev);
    event_free(e->flush);
    if (e->writing)
        e->dead = 1;
    else
        free(e);
}

static int aev_attach(redisAsyncContext *ac, struct event_base *base)
{
    struct aev *e = xcalloc(1, sizeof(*e));
    e->ac = ac;
    e->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, aev_on_read, e);
    e->wev = event_new(base, ac->c.fd, EV_WRITE, aev_on_writable, e);
    e->flush = event_new(base, -1, 0, aev_on_flush, e);
    if (!e->rev || !e->wev || !e->flush) {
        if (e->rev)
            event_free(e->rev);
        if (e->wev)
            event_free(e->wev);
        if (e->flush)
            event_free(e->flush);
        free(e);
        return -1;
    }
    ac->ev.data = e;
    ac->ev.addRead = aev_add_read;
    ac->ev.delRead = aev_del_read;
    ac->ev.addWrite = aev_add_write;
    ac->ev.delWrite = aev_del_write;
    ac->ev.cleanup = aev_cleanup;
    event_add(e->rev, NULL);
    event_add(e->wev, NULL); /* the connect's end */
    return 0;
}

/* Starts a connection attempt. 0, or -1 when it failed at once. */
static int connect_now(struct aconn *c)
{
    c->attempt++;
    c->link = rconn_link_new();
    c->tried_us = clock_now_us();
    redisAsyncContext *ac = redisAsyncConnect(c->host, c->port);
    if (!ac)
        abort();
    if (ac->err) {
        set_err(c, ac->errstr);
        redisAsyncFree(ac);
        return -1;
    }
    ac->data = c;
    if (aev_attach(ac, c->base) != 0) {
        redisAsyncFree(ac);
        set_err(c, "cannot attach to the event loop");
        return -1;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    if (c->password)
        redisAsyncCommand(ac, on_auth, NULL, "AUTH %s", c->password);
    /* Every script this process knows, ahead of any command: a node that
     * never saw one (another master of a cluster, a Redis restarted empty)
     * runs the EVALSHA of its first call instead of answering NOSCRIPT. */
    if (c->channel) {
        /* A subscriber sends nothing else: no script to load. Keepalive, as
         * an idle subscriber would not notice a peer that vanished. */
        redisEnableKeepAlive(&ac->c);
        redisAsyncCommand(ac, on_push, c, "SUBSCRIBE %s", c->channel);
        return 0;
    }
    for (struct rscript *s = rscript_loaded(); s; s = s->next_loaded)
        redisAsyncCommand(ac, NULL, NULL, "SCRIPT LOAD %s", s->source->text);
    return 0;
}

/* Drops the connection now: every owed callback runs (with no reply). */
static void drop(struct aconn *c, const char *why)
{
    redisAsyncContext *ac = c->ac;
    if (!ac)
        return;
    set_err(c, why);
    c->ac = NULL;
    c->up = 0;
    redisAsyncFree(ac);
}

static void watch_arm(struct aconn *c, int64_t in_us)
{
    struct timeval tv = {.tv_sec = in_us / 1000000, .tv_usec = in_us % 1000000};
    evtimer_add(c->watch, &tv);
}

static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct aconn *c = arg;
    if (c->pending == 0)
        return;
    int64_t overdue = c->alive_us + (int64_t)c->timeout_ms * 1000 - clock_now_us();
    if (overdue > 0)
        watch_arm(c, overdue);
    else
        drop(c, "no answer within the timeout");
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct areq *q = privdata;
    struct aconn *c = q->c;
    redisReply *r = reply;
    aconn_result res = ACONN_REPLY;
    c->pending--;
    if (r) {
        c->alive_us = clock_now_us();
        rscript_locate_error(r);
        if (q->script && rconn_is_noscript(r) && c->ac == ac)
            /* Redis lost its script cache: load it again, ahead of
             * everything queued after this answer. */
            redisAsyncCommand(ac, NULL, NULL, "SCRIPT LOAD %s", q->script->source->text);
    } else {
        mark_down(c, ac);
        res = q->attempt == c->up_attempt ? ACONN_LOST : ACONN_NOT_SENT;
    }
    aconn_cb *cb = q->cb;
    void *arg = q->arg;
    q->next_free = c->free_req;
    c->free_req = q;
    cb(arg, res, r);
}

static void on_learn(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    if (reply)
        rscript_learn(privdata, reply);
}

/* ---- subscribe mode ------------------------------------------------------- */

/* Every answer on the subscription: the confirmation and each message; NULL
 * when the connection is gone (hiredis runs a subscription's callback with
 * no reply when it frees the context). */
static void on_push(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct aconn *c = privdata;
    redisReply *r = reply;
    if (r) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "subscribe") == 0)
            c->subscribed = 1;
        else if (r->type == REDIS_REPLY_ERROR) /* refused (NOAUTH, ...) */
            set_err(c, r->str);
        c->sub_cb(c->sub_arg, ACONN_REPLY, r);
        return;
    }
    mark_down(c, ac);
    int was = c->subscribed;
    c->subscribed = 0;
    if (c->closing)
        return;
    resub_arm(c);
    if (was)
        c->sub_cb(c->sub_arg, ACONN_LOST, NULL);
}

static void on_resub(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct aconn *c = arg;
    if (c->closing || c->ac)
        return;
    if (connect_now(c) != 0)
        resub_arm(c);
}

/* Connects again (and so subscribes again) in ACONN_RETRY_MS, once. */
static void resub_arm(struct aconn *c)
{
    if (c->closing || evtimer_pending(c->resub, NULL))
        return;
    struct timeval tv = {.tv_sec = 0, .tv_usec = ACONN_RETRY_MS * 1000};
    evtimer_add(c->resub, &tv);
}

rconn_status aconn_subscribe(struct aconn *c, const char *channel, aconn_cb *cb,
                             void *arg)
{
    if (c->channel || c->ac || c->pending || c->closing)
        return RCONN_ERR;
    c->channel = xstrdup(channel);
    c->sub_cb = cb;
    c->sub_arg = arg;
    c->resub = evtimer_new(c->base, on_resub, c);
    if (!c->resub)
        abort();
    if (connect_now(c) != 0)
        resub_arm(c);
    return RCONN_OK;
}

int aconn_subscribed(const struct aconn *c)
{
    return c->subscribed;
}

struct aconn *aconn_new(struct event_base *base, const char *host, int port,
                        const char *password, int timeout_ms)
{
    struct aconn *c = xcalloc(1, sizeof(*c));
    c->base = base;
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    c->password = password && *password ? xstrdup(password) : NULL;
    c->timeout_ms = timeout_ms;
    c->watch = evtimer_new(base, on_watch, c);
    if (!c->watch)
        abort();
    return c;
}

void aconn_free(struct aconn *c)
{
    if (!c)
        return;
    c->closing = 1;
    drop(c, "closed");
    event_free(c->watch);
    if (c->resub)
        event_free(c->resub);
    free(c->channel);
    for (struct areq *q = c->free_req, *next; q; q = next) {
        next = q->next_free;
        free(q);
    }
    free(c->password);
    free(c->out);
    free(c);
}

static struct areq *req_new(struct aconn *c, aconn_cb *cb, void *arg)
{
    struct areq *q = c->free_req;
    if (q)
        c->free_req = q->next_free;
    else
        q = xmalloc(sizeof(*q));
    *q = (struct areq){.c = c, .cb = cb, .arg = arg, .attempt = c->attempt};
    return q;
}

/* The context to queue on, connecting when due. NULL: refused. */
static redisAsyncContext *usable(struct aconn *c)
{
    if (c->closing || c->channel)
        return NULL;
    if (!c->ac && clock_now_us() - c->tried_us >= (int64_t)ACONN_RETRY_MS * 1000)
        connect_now(c);
    return c->ac;
}

/* The command in the protocol's form, into c->out (grown as needed): what
 * redisAsyncCommandArgv would format into a new sds with sdscatfmt, written
 * with copies into a buffer the connection keeps. Returns its length. */
static size_t command_format(struct aconn *c, int argc, const char **argv,
                             const size_t *argvlen)
{
    size_t need = 32;
    for (int i = 0; i < argc; i++)
        need += (argvlen ? argvlen[i] : strlen(argv[i])) + 32;
    if (need > c->out_room) {
        c->out_room = need;
        c->out = xrealloc(c->out, need);
    }
    char *p = c->out;
    *p++ = '*';
    p = text_put_u64(p, (uint64_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    for (int i = 0; i < argc; i++) {
        size_t len = argvlen ? argvlen[i] : strlen(argv[i]);
        *p++ = '$';
        p = text_put_u64(p, len);
        *p++ = '\r';
        *p++ = '\n';
        memcpy(p, argv[i], len);
        p += len;
        *p++ = '\r';
        *p++ = '\n';
    }
    /* hiredis looks one byte past the command's first argument to see
     * whether another follows, as in the sds it formats itself */
    *p = '\0';
    return (size_t)(p - c->out);
}

static rconn_status queue(struct aconn *c, struct areq *q, int argc, const char **argv,
                          const size_t *argvlen)
{
    size_t len = command_format(c, argc, argv, argvlen);
    if (redisAsyncFormattedCommand(c->ac, on_reply, q, c->out, len) != REDIS_OK) {
        q->next_free = c->free_req;
        c->free_req = q;
        return RCONN_ERR;
    }
    /* The watch runs while anything is owed. A command queued while a drop
     * answers the old connection's (pending still > 0, the watch spent)
     * arms it too, or a new connection that never answers is never dropped. */
    if (c->pending++ == 0 || !evtimer_pending(c->watch, NULL)) {
        c->alive_us = clock_now_us();
        watch_arm(c, (int64_t)c->timeout_ms * 1000);
    }
    return RCONN_OK;
}

rconn_status aconn_command(struct aconn *c, aconn_cb *cb, void *arg, int argc,
                           const char **argv, const size_t *argvlen)
{
    if (!usable(c))
        return RCONN_ERR;
    return queue(c, req_new(c, cb, arg), argc, argv, argvlen);
}

/* Most arguments of a script call whose vector lives on the stack. */
#define EVAL_ARGV_INLINE 64

rconn_status aconn_eval(struct aconn *c, aconn_cb *cb, void *arg, struct rscript *s,
                        int nkeys, int argc, const char **argv)
{
    if (!usable(c))
        return RCONN_ERR;
    int known = atomic_load_explicit(&s->loaded, memory_order_acquire);
    if (!known) /* learn the SHA beside this call, which goes whole */
        redisAsyncCommand(c->ac, on_learn, s, "SCRIPT LOAD %s", s->source->text);
    const char *inline_v[EVAL_ARGV_INLINE], **v = inline_v;
    int n = argc + 3;
    if (n > EVAL_ARGV_INLINE)
        v = xmalloc(sizeof(*v) * (size_t)n);
    char numkeys[12];
    snprintf(numkeys, sizeof(numkeys), "%d", nkeys);
    v[0] = known ? "EVALSHA" : "EVAL";
    v[1] = known ? s->sha : s->source->text;
    v[2] = numkeys;
    memcpy(v + 3, argv, sizeof(*argv) * (size_t)argc);
    struct areq *q = req_new(c, cb, arg);
    q->script = known ? s : NULL;
    rconn_status rc = queue(c, q, n, v, NULL);
    if (v != inline_v)
        free(v);
    return rc;
}

int aconn_up(const struct aconn *c)
{
    return c->up;
}

uint64_t aconn_link(const struct aconn *c)
{
    return c->up ? c->link : 0;
}

const char *aconn_host(const struct aconn *c)
{
    return c->host;
}

int aconn_port(const struct aconn *c)
{
    return c->port;
}

int aconn_pending(const struct aconn *c)
{
    return c->pending;
}

const char *aconn_errstr(const struct aconn *c)
{
    return c->errstr;
}
