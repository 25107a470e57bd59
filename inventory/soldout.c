#include "soldout.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "xalloc.h"

#define SLOTS 64 /* SKUs remembered at once; a newer one takes an older one's slot */
#define SKU_MAX 64
#define RETRY_MS 200

struct entry {
    char sku[SKU_MAX + 1];
    int limit; /* the SKU's per-user limit, 0 when not known */
    uint64_t generation;
    int64_t noted_us; /* monotonic */
};

struct soldout {
    char host[256];
    int port;
    char *password;
    _Atomic uint64_t generation; /* moves on every reset message and (re)subscription */
    _Atomic int listening;
    pthread_mutex_t mu; /* the table, fd and stopping */
    struct entry table[SLOTS];
    int fd; /* the listener's socket, -1 when none: shut down to stop it */
    int stopping;
    pthread_cond_t wake;
    pthread_t thread;
};

static unsigned slot_of(const char *sku)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)sku; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % SLOTS;
}

static void forget(struct soldout *so)
{
    atomic_fetch_add(&so->generation, 1);
}

uint64_t soldout_generation(struct soldout *so)
{
    return so && atomic_load(&so->listening) ? atomic_load(&so->generation) : 0;
}

int soldout_listening(struct soldout *so)
{
    return atomic_load(&so->listening);
}

int soldout_known(struct soldout *so, const char *sku, int *limit)
{
    uint64_t now_gen = soldout_generation(so);
    if (!now_gen)
        return 0;
    int64_t now = clock_now_us();
    struct entry *e = &so->table[slot_of(sku)];
    pthread_mutex_lock(&so->mu);
    int known = e->generation == now_gen && strcmp(e->sku, sku) == 0 &&
                now - e->noted_us < (int64_t)SOLDOUT_MAX_AGE_MS * 1000;
    *limit = known ? e->limit : 0;
    pthread_mutex_unlock(&so->mu);
    return known;
}

void soldout_note(struct soldout *so, const char *sku, int limit, uint64_t generation)
{
    if (!so || !generation || strlen(sku) > SKU_MAX)
        return;
    struct entry *e = &so->table[slot_of(sku)];
    pthread_mutex_lock(&so->mu);
    /* Checked under the lock: the listener moves the generation without it,
     * but an entry noted with an old generation is never trusted anyway. */
    if (soldout_generation(so) == generation) {
        strcpy(e->sku, sku);
        e->limit = limit;
        e->generation = generation;
        e->noted_us = clock_now_us();
    }
    pthread_mutex_unlock(&so->mu);
}

void soldout_forget(struct soldout *so)
{
    if (so)
        forget(so);
}

/* Waits up to ms or until stopping; returns stopping. */
static int pause_ms(struct soldout *so, int ms)
{
    int64_t until = clock_now_us() + (int64_t)ms * 1000;
    pthread_mutex_lock(&so->mu);
    if (!so->stopping)
        clock_cond_wait_until(&so->wake, &so->mu, until);
    int stopping = so->stopping;
    pthread_mutex_unlock(&so->mu);
    return stopping;
}

/* Connects, AUTHs and publishes the socket so that a stop can cut it. NULL when
 * Redis cannot be reached or we are stopping. */
static redisContext *listener_connect(struct soldout *so)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout(so->host, so->port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c);
    pthread_mutex_lock(&so->mu);
    int stopping = so->stopping;
    if (!stopping)
        so->fd = c->fd;
    pthread_mutex_unlock(&so->mu);
    if (stopping) {
        redisFree(c);
        return NULL;
    }
    if (so->password) {
        redisReply *r = redisCommand(c, "AUTH %s", so->password);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (!ok)
            return c; /* the caller drops it */
    }
    return c;
}

static int is_message(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
           r->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(r->element[0]->str, "message") == 0;
}

/* Subscribed: every message makes what is remembered old. Returns when the
 * connection fails (or is cut by soldout_free). */
static void listener_serve(struct soldout *so, redisContext *c)
{
    redisReply *r = redisCommand(c, "SUBSCRIBE %s", SOLDOUT_CHANNEL);
    int subscribed = r && r->type == REDIS_REPLY_ARRAY;
    if (r)
        freeReplyObject(r);
    if (!subscribed)
        return;
    forget(so); /* anything noted before this subscription may have missed a reset */
    atomic_store(&so->listening, 1);
    void *reply;
    while (redisGetReply(c, &reply) == REDIS_OK) {
        if (is_message(reply))
            forget(so);
        freeReplyObject(reply);
    }
    atomic_store(&so->listening, 0);
    forget(so);
}

static void *listener_main(void *arg)
{
    struct soldout *so = arg;
    do {
        redisContext *c = listener_connect(so);
        if (c) {
            if (!c->err)
                listener_serve(so, c);
            pthread_mutex_lock(&so->mu);
            so->fd = -1;
            pthread_mutex_unlock(&so->mu);
            redisFree(c);
        }
    } while (!pause_ms(so, RETRY_MS));
    return NULL;
}

struct soldout *soldout_new(const char *host, int port, const char *password)
{
    struct soldout *so = xcalloc(1, sizeof(*so));
    snprintf(so->host, sizeof(so->host), "%s", host);
    so->port = port;
    so->password = password && *password ? strdup(password) : NULL;
    so->fd = -1;
    atomic_store(&so->generation, 1);
    pthread_mutex_init(&so->mu, NULL);
    clock_cond_init(&so->wake);
    if (pthread_create(&so->thread, NULL, listener_main, so) != 0)
        abort();
    return so;
}

void soldout_free(struct soldout *so)
{
    if (!so)
        return;
    pthread_mutex_lock(&so->mu);
    so->stopping = 1;
    if (so->fd >= 0)
        shutdown(so->fd, SHUT_RDWR); /* wakes the blocked read */
    pthread_cond_signal(&so->wake);
    pthread_mutex_unlock(&so->mu);
    pthread_join(so->thread, NULL);
    pthread_cond_destroy(&so->wake);
    pthread_mutex_destroy(&so->mu);
    free(so->password);
    free(so);
}
