#include "soldout.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aconn.h"
#include "clock.h"
#include "xalloc.h"

#define SLOTS 64 /* SKUs remembered at once; a newer one takes an older one's slot */
#define SKU_MAX 64

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
    pthread_mutex_t mu; /* the table */
    struct entry table[SLOTS];
    struct aconn *listener; /* the attached loop's thread only; NULL: detached */
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

/* Every push of the subscription, on the attached loop's thread: the
 * confirmation (after each connection), a reset's message, or the loss of
 * the subscription. Each makes what is remembered old: anything noted before
 * a (re)subscription may have missed a reset published during the gap. */
static void on_push(void *arg, aconn_result res, redisReply *r)
{
    struct soldout *so = arg;
    if (res != ACONN_REPLY) {
        atomic_store(&so->listening, 0);
        forget(so);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0) {
        forget(so);
        atomic_store(&so->listening, 1);
    } else if (strcmp(r->element[0]->str, "message") == 0) {
        forget(so);
    }
}

struct soldout *soldout_new(const char *host, int port, const char *password)
{
    struct soldout *so = xcalloc(1, sizeof(*so));
    snprintf(so->host, sizeof(so->host), "%s", host);
    so->port = port;
    so->password = password && *password ? xstrdup(password) : NULL;
    atomic_store(&so->generation, 1);
    pthread_mutex_init(&so->mu, NULL);
    return so;
}

void soldout_attach(struct soldout *so, struct event_base *base)
{
    if (so->listener)
        return;
    so->listener = aconn_new(base, so->host, so->port, so->password, 1000);
    aconn_subscribe(so->listener, SOLDOUT_CHANNEL, on_push, so);
}

void soldout_detach(struct soldout *so)
{
    if (!so || !so->listener)
        return;
    aconn_free(so->listener); /* no callback from here */
    so->listener = NULL;
    atomic_store(&so->listening, 0);
    forget(so);
}

void soldout_free(struct soldout *so)
{
    if (!so)
        return;
    soldout_detach(so);
    pthread_mutex_destroy(&so->mu);
    free(so->password);
    free(so);
}
