/* roompace.c: the rooms' duty on loop 0 and the table the readers see
 * (roompace.h). A round: room_lease.lua (the lease, the registry), then for
 * each room room_pace.lua when this instance paces, and XRANGE of the news it
 * has not read, on the same connection behind it (so it sees this tick's
 * entry); the next round only once all answered. */
#include "roompace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acluster.h"
#include "aconn.h"
#include "clock.h"
#include "cluster.h"
#include "duty.h"
#include "xalloc.h"

extern const struct rscript_source lua_inventory_room_lease, lua_inventory_room_pace;
/* inventory/lua/room_lease.lua: the lease and the registry. */
static struct rscript lease_script =
    RSCRIPT_INIT("inv_room_lease", lua_inventory_room_lease);
/* inventory/lua/room_pace.lua: a room's tick. */
static struct rscript pace_script =
    RSCRIPT_INIT("inv_room_pace", lua_inventory_room_pace);

#define RATE_WINDOW_MS 10000 /* the measured rate's window */
#define NEWS_READ 2000       /* news entries one read takes at most */

/* Places in (from, cursor] admitted at at_ms (from -1: every place up to
 * cursor); admitted: the room's count after. */
struct room_batch {
    long long from, cursor, at_ms, admitted;
};

struct room {
    char sku[INV_ID_MAX + 1];
    int listed; /* in the registry at the last read */
    struct inv_room_view v;
    struct room_batch *batch; /* by cursor, ascending; those of the last ttl */
    size_t nbatch, cap;
    char last_id[48]; /* the last news entry read; "" for none */
    long long *skipped; /* places skipped as abandoned, ascending (news 'k') */
    size_t nskipped, skipcap;
    long long *polled;      /* places polled since the last tick (INV_ROOM_POLLS_MAX) */
    _Atomic size_t npolled; /* taken under the read lock; reset under the write */
};

struct inv_rooms {
    pthread_rwlock_t mu; /* over rooms[] and nrooms */
    struct room rooms[INV_ROOMS_MAX];
    int nrooms;
    _Atomic int ready, pacing;
    _Atomic long long redis_ms, local_us; /* Redis's clock read at local_us */
    /* the duty's own (loop 0) */
    char host[256];
    int port;
    struct rconn_addr *seeds;
    int nseeds;
    char *password;
    char owner[64];
    struct duty duty;
    int owed;
};

/* A call's context: the table and the room's name (rooms may move in the
 * table between the call and its answer). */
struct room_call {
    struct inv_rooms *r;
    char sku[INV_ID_MAX + 1];
};

static struct room *room_find(struct inv_rooms *r, const char *sku)
{
    for (int i = 0; i < r->nrooms; i++)
        if (strcmp(r->rooms[i].sku, sku) == 0)
            return &r->rooms[i];
    return NULL;
}

/* sku's room, made when absent (NULL when the table is full); write lock held. */
static struct room *room_get(struct inv_rooms *r, const char *sku)
{
    struct room *rm = room_find(r, sku);
    if (rm || r->nrooms == INV_ROOMS_MAX)
        return rm;
    rm = &r->rooms[r->nrooms++];
    memset(rm, 0, sizeof(*rm));
    snprintf(rm->sku, sizeof(rm->sku), "%s", sku);
    rm->v.cursor = -1;
    rm->v.to_admit = rm->v.tokens = rm->v.starts_ms = -1;
    rm->polled = xmalloc(INV_ROOM_POLLS_MAX * sizeof(*rm->polled));
    return rm;
}

/* Takes room i out; write lock held. */
static void room_drop(struct inv_rooms *r, int i)
{
    free(r->rooms[i].batch);
    free(r->rooms[i].skipped);
    free(r->rooms[i].polled);
    r->rooms[i] = r->rooms[--r->nrooms];
}

static long long number(const redisReply *e)
{
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    if (e->type != REDIS_REPLY_STRING || e->len == 0)
        return -1;
    char *end;
    long long v = strtoll(e->str, &end, 10);
    return *end ? -1 : v;
}

/* "<rate> <max> <ttl>" into spec: 0, or -1 when it is not that. */
static int spec_parse(const char *text, struct inv_room_spec *spec)
{
    return sscanf(text, "%lld %lld %lld", &spec->rate_per_s, &spec->max_active,
                  &spec->pass_ttl_ms) == 3 &&
                   spec->rate_per_s > 0
               ? 0
               : -1;
}

static int attached(const struct inv_rooms *r)
{
    return duty_connected(&r->duty);
}

/* Sends argv (a call of script when not NULL) to the master of key's slot
 * (the one Redis); counted as owed when sent. */
static void send(struct inv_rooms *r, const char *key, aconn_cb *cb, void *arg,
                 struct rscript *script, int nkeys, int argc, const char **argv)
{
    r->owed++; /* first: an answer may come before the call returns */
    rconn_status st = duty_send(&r->duty, cluster_keyslot(key, strlen(key)), cb, arg,
                                script, nkeys, argc, argv);
    if (st != RCONN_OK) {
        r->owed--;
        free(arg);
    }
}

static void answered(struct inv_rooms *r)
{
    r->owed--;
}

/* The measured rate of rm: places admitted a second over the last
 * RATE_WINDOW_MS of its batches; the room's rate while there are too few. */
static double measured_rate(const struct room *rm, long long now)
{
    if (rm->nbatch < 2)
        return (double)rm->v.spec.rate_per_s;
    const struct room_batch *last = &rm->batch[rm->nbatch - 1], *base = &rm->batch[0];
    for (size_t i = 0; i + 1 < rm->nbatch; i++)
        if (rm->batch[i].at_ms <= now - RATE_WINDOW_MS)
            base = &rm->batch[i];
    long long span = now - base->at_ms;
    if (span < 1000)
        return (double)rm->v.spec.rate_per_s;
    return (double)(last->admitted - base->admitted) * 1000.0 / (double)span;
}

static int place_cmp(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* The places of a news entry's k (space-separated) added to rm's skipped,
 * kept ascending; write lock held. */
static void skipped_add(struct room *rm, const char *k)
{
    for (const char *p = k; *p;) {
        char *end;
        long long place = strtoll(p, &end, 10);
        if (end == p)
            break;
        if (rm->nskipped == rm->skipcap) {
            rm->skipcap = rm->skipcap ? 2 * rm->skipcap : 256;
            rm->skipped = xrealloc(rm->skipped, rm->skipcap * sizeof(*rm->skipped));
        }
        rm->skipped[rm->nskipped++] = place;
        p = end;
        while (*p == ' ')
            p++;
    }
    qsort(rm->skipped, rm->nskipped, sizeof(*rm->skipped), place_cmp);
}

/* How many of rm's skipped places are below place; read lock held. */
static size_t skipped_below(const struct room *rm, long long place)
{
    size_t lo = 0, hi = rm->nskipped;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rm->skipped[mid] < place)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One news entry's fields (f v f v ...) applied to rm; write lock held. */
static void news_apply(struct room *rm, const redisReply *fields)
{
    long long e = -1, n = -1, b = -1, c = -1, at = -1, w = -1, p = -1, l = -1, x = -1,
              u = -1, o = -1, st = -1;
    const char *s = "", *k = NULL;
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *f = fields->element[i], *v = fields->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || f->len < 1 || v->type != REDIS_REPLY_STRING)
            continue;
        switch (f->str[0]) {
        case 'e':
            e = number(v);
            break;
        case 'n':
            n = number(v);
            break;
        case 'b':
            b = number(v);
            break;
        case 'c':
            c = number(v);
            break;
        case 'a':
            at = number(v);
            break;
        case 's':
            s = v->str;
            break;
        case 'w':
            w = number(v);
            break;
        case 'p':
            p = number(v);
            break;
        case 'l':
            l = number(v);
            break;
        case 'x':
            x = number(v);
            break;
        case 'k':
            k = v->str;
            break;
        case 'u':
            u = number(v);
            break;
        case 'o':
            o = number(v);
            break;
        case 'f':
            st = number(v);
            break;
        default:
            break;
        }
    }
    if (e < 0 || n < 0 || at < 0)
        return;
    if (e != rm->v.epoch) { /* another queue: what was known of the old goes */
        rm->nbatch = 0;
        rm->v.admitted = 0;
        rm->v.cursor = -1;
        rm->v.epoch = e;
        rm->nskipped = 0;
    }
    if (k)
        skipped_add(rm, k);
    rm->v.skipped = x >= 0 ? x : rm->v.skipped;
    if (n > rm->v.admitted && c >= 0) {
        if (rm->nbatch == rm->cap) {
            rm->cap = rm->cap ? 2 * rm->cap : 64;
            rm->batch = xrealloc(rm->batch, rm->cap * sizeof(*rm->batch));
        }
        rm->batch[rm->nbatch++] = (struct room_batch){b, c, at, n};
        rm->v.cursor = c;
    }
    rm->v.admitted = n;
    rm->v.state = strcmp(s, "open") == 0       ? INV_ROOM_OPEN
                  : strcmp(s, "before") == 0   ? INV_ROOM_BEFORE
                  : strcmp(s, "paused") == 0   ? INV_ROOM_PAUSED
                  : strcmp(s, "sold_out") == 0 ? INV_ROOM_SOLD_OUT
                                               : rm->v.state;
    rm->v.waiting = w >= 0 ? w : rm->v.waiting;
    rm->v.pre = p >= 0 ? p : rm->v.pre;
    rm->v.live = l >= 0 ? l : rm->v.live;
    rm->v.news_ms = at;
    rm->v.to_admit = u;
    rm->v.tokens = o;
    rm->v.starts_ms = st;
}

/* Drops the batches whose passes are over (and 10 s more), keeping the
 * last: it says where the cursor is. Write lock held. */
static void batches_trim(struct room *rm, long long now)
{
    size_t drop = 0;
    long long keep_ms = rm->v.spec.pass_ttl_ms + RATE_WINDOW_MS;
    while (drop + 1 < rm->nbatch && rm->batch[drop].at_ms < now - keep_ms)
        drop++;
    if (drop) {
        memmove(rm->batch, rm->batch + drop, (rm->nbatch - drop) * sizeof(*rm->batch));
        rm->nbatch -= drop;
    }
}

static void on_news(void *arg, aconn_result res, redisReply *reply)
{
    struct room_call *call = arg;
    struct inv_rooms *r = call->r;
    if (attached(r) && res == ACONN_REPLY && reply->type == REDIS_REPLY_ARRAY) {
        long long now = inv_rooms_now_ms(r);
        pthread_rwlock_wrlock(&r->mu);
        struct room *rm = room_find(r, call->sku);
        for (size_t i = 0; rm && i < reply->elements; i++) {
            const redisReply *entry = reply->element[i];
            if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2 ||
                entry->element[0]->type != REDIS_REPLY_STRING ||
                entry->element[1]->type != REDIS_REPLY_ARRAY)
                continue;
            snprintf(rm->last_id, sizeof(rm->last_id), "%s", entry->element[0]->str);
            news_apply(rm, entry->element[1]);
        }
        if (rm) {
            batches_trim(rm, now);
            rm->v.rate = measured_rate(rm, now);
        }
        pthread_rwlock_unlock(&r->mu);
    }
    free(call);
    answered(r);
}

static void on_paced(void *arg, aconn_result res, redisReply *reply)
{
    struct room_call *call = arg;
    (void)res;
    (void)reply; /* what it did is in the news, read behind it */
    answered(call->r);
    free(call);
}

/* Sends what the round does for room sku: its tick when this instance
 * paces, then the read of its news. */
static void room_round(struct inv_rooms *r, const char *sku, const char *last_id,
                       int pace, const long long *polled, size_t npolled)
{
    char queue[96], hash[96], live[96], news[96], meta[96], buyers[96], ranks[96],
        seen[96], from[64];
    snprintf(seen, sizeof(seen), "sk:{%s}:room:seen", sku);
    if (npolled > 0) { /* the places polled: seen now (XX: not one taken out) */
        const char **argv = xmalloc((4 + 2 * npolled) * sizeof(*argv));
        char(*places)[24] = xmalloc(npolled * sizeof(*places));
        char now[24];
        snprintf(now, sizeof(now), "%lld", inv_rooms_now_ms(r));
        argv[0] = "ZADD", argv[1] = seen, argv[2] = "XX", argv[3] = "GT";
        for (size_t i = 0; i < npolled; i++) {
            snprintf(places[i], sizeof(places[i]), "%lld", polled[i]);
            argv[4 + 2 * i] = now;
            argv[5 + 2 * i] = places[i];
        }
        struct room_call *c = xmalloc(sizeof(*c));
        c->r = r;
        snprintf(c->sku, sizeof(c->sku), "%s", sku);
        send(r, seen, on_paced, c, NULL, 0, (int)(4 + 2 * npolled), argv);
        free(places);
        free(argv);
    }
    snprintf(meta, sizeof(meta), "sk:{%s}:meta", sku);
    snprintf(queue, sizeof(queue), "sk:{%s}:room:q", sku);
    snprintf(hash, sizeof(hash), "sk:{%s}:room", sku);
    snprintf(live, sizeof(live), "sk:{%s}:room:live", sku);
    snprintf(news, sizeof(news), "sk:{%s}:room:news", sku);
    snprintf(buyers, sizeof(buyers), "sk:{%s}:buyers", sku);
    snprintf(ranks, sizeof(ranks), "sk:{%s}:room:rank", sku);
    if (pace) {
        struct room_call *c = xmalloc(sizeof(*c));
        c->r = r;
        snprintf(c->sku, sizeof(c->sku), "%s", sku);
        char abandon[16];
        snprintf(abandon, sizeof(abandon), "%d", INV_ROOM_ABANDON_MS);
        const char *argv[] = {
            INV_ROOM_LEASE_KEY, meta,  queue, hash,     live, buyers, news,
            INV_ROOMS_KEY,      ranks, seen,  r->owner, sku,  abandon};
        send(r, news, on_paced, c, &pace_script, 10, 13, argv);
    }
    struct room_call *c = xmalloc(sizeof(*c));
    c->r = r;
    snprintf(c->sku, sizeof(c->sku), "%s", sku);
    snprintf(from, sizeof(from), "(%s", last_id);
    char count[16];
    snprintf(count, sizeof(count), "%d", NEWS_READ);
    const char *argv[] = {"XRANGE", news, last_id[0] ? from : "-", "+", "COUNT", count};
    send(r, news, on_news, c, NULL, 0, 6, argv);
}

/* room_lease.lua's answer: is it one (an array of its shape)? */
static int lease_reply(const redisReply *reply)
{
    return reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2 &&
           reply->elements % 2 == 0;
}

/* The registry in room_lease.lua's answer reply (one, lease_reply), with
 * Redis's clock: rooms listed are kept or made, the others go. With r->mu
 * held for writing; the caller unlocks. */
static void registry_read(struct inv_rooms *r, const redisReply *reply)
{
    atomic_store(&r->redis_ms, number(reply->element[1]));
    atomic_store(&r->local_us, (long long)clock_now_us());
    pthread_rwlock_wrlock(&r->mu);
    for (int i = 0; i < r->nrooms; i++)
        r->rooms[i].listed = 0;
    for (size_t i = 2; i + 1 < reply->elements; i += 2) {
        const redisReply *k = reply->element[i], *v = reply->element[i + 1];
        struct inv_room_spec spec;
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            !inv_id_valid(k->str) || spec_parse(v->str, &spec) != 0)
            continue;
        struct room *rm = room_get(r, k->str);
        if (!rm)
            continue;
        rm->listed = 1;
        rm->v.spec = spec;
    }
    for (int i = r->nrooms - 1; i >= 0; i--)
        if (!r->rooms[i].listed)
            room_drop(r, i);
}

int inv_rooms_prime(struct inv_rooms *r, struct rconn *rc)
{
    const char *argv[] = {INV_ROOM_LEASE_KEY, INV_ROOMS_KEY, r->owner, ""};
    redisReply *reply = rconn_eval(rc, &lease_script, 2, 2, argv, NULL);
    int ok = reply && lease_reply(reply);
    if (ok) {
        registry_read(r, reply);
        pthread_rwlock_unlock(&r->mu);
        atomic_store(&r->ready, 1);
    }
    if (reply)
        freeReplyObject(reply);
    return ok ? 0 : -1;
}

static void on_lease(void *arg, aconn_result res, redisReply *reply)
{
    struct room_call *call = arg;
    struct inv_rooms *r = call->r;
    free(call);
    if (!attached(r) || res != ACONN_REPLY || !lease_reply(reply)) {
        atomic_store(&r->pacing, 0); /* unknown: not pacing, as far as we know */
        answered(r);
        return;
    }
    int mine = number(reply->element[0]) == 1;
    atomic_store(&r->pacing, mine);
    struct {
        char sku[INV_ID_MAX + 1];
        char last_id[48];
        long long *polled;
        size_t npolled;
    } *round = xmalloc(sizeof(*round) * INV_ROOMS_MAX);
    int n = 0;
    registry_read(r, reply); /* r->mu held */
    for (int i = 0; i < r->nrooms; i++) {
        snprintf(round[n].sku, sizeof(round[n].sku), "%s", r->rooms[i].sku);
        snprintf(round[n].last_id, sizeof(round[n].last_id), "%s", r->rooms[i].last_id);
        size_t np = atomic_load(&r->rooms[i].npolled);
        np = np < INV_ROOM_POLLS_MAX ? np : INV_ROOM_POLLS_MAX;
        round[n].polled = np ? xmalloc(np * sizeof(long long)) : NULL;
        if (np)
            memcpy(round[n].polled, r->rooms[i].polled, np * sizeof(long long));
        round[n].npolled = np;
        atomic_store(&r->rooms[i].npolled, 0);
        n++;
    }
    pthread_rwlock_unlock(&r->mu);
    atomic_store(&r->ready, 1);
    for (int i = 0; i < n; i++) {
        room_round(r, round[i].sku, round[i].last_id, mine && !r->duty.cluster,
                   round[i].polled, round[i].npolled);
        free(round[i].polled);
    }
    free(round);
    answered(r);
}

static void on_tick(void *arg)
{
    struct inv_rooms *r = arg;
    if (r->owed > 0) /* the last round is still on its way */
        return;
    struct room_call *c = xmalloc(sizeof(*c));
    c->r = r;
    c->sku[0] = '\0';
    char lease[16];
    snprintf(lease, sizeof(lease), "%d", INV_ROOM_LEASE_MS);
    /* on a cluster the registry only: no pacing there (roompace.h) */
    const char *argv[] = {INV_ROOM_LEASE_KEY, INV_ROOMS_KEY, r->owner,
                          r->nseeds > 0 ? "" : lease};
    send(r, INV_ROOMS_KEY, on_lease, c, &lease_script, 2, 4, argv);
}

struct inv_rooms *inv_rooms_new(const char *host, int port,
                                const struct rconn_addr *seeds, int nseeds,
                                const char *password, const char *owner)
{
    struct inv_rooms *r = xcalloc(1, sizeof(*r));
    pthread_rwlock_init(&r->mu, NULL);
    snprintf(r->host, sizeof(r->host), "%s", host ? host : "");
    r->port = port;
    if (nseeds > 0) {
        r->seeds = xmalloc(sizeof(*seeds) * (size_t)nseeds);
        memcpy(r->seeds, seeds, sizeof(*seeds) * (size_t)nseeds);
        r->nseeds = nseeds;
    }
    r->password = password && *password ? xstrdup(password) : NULL;
    snprintf(r->owner, sizeof(r->owner), "%s", owner);
    return r;
}

void inv_rooms_attach(struct inv_rooms *r, struct event_base *base)
{
    if (!r)
        return;
    struct duty_target to = {.host = r->host,
                             .port = r->port,
                             .seeds = r->seeds,
                             .nseeds = r->nseeds,
                             .password = r->password,
                             .timeout_ms = 1000};
    duty_start(&r->duty, base, &to, INV_ROOM_TICK_MS, on_tick, r);
}

void inv_rooms_detach(struct inv_rooms *r)
{
    if (!r)
        return;
    duty_stop(&r->duty); /* answers what is on its way, as failed */
    r->owed = 0;
    atomic_store(&r->pacing, 0);
}

void inv_rooms_free(struct inv_rooms *r)
{
    if (!r)
        return;
    inv_rooms_detach(r);
    while (r->nrooms > 0)
        room_drop(r, r->nrooms - 1); /* each room's buffers */
    pthread_rwlock_destroy(&r->mu);
    free(r->seeds);
    free(r->password);
    free(r);
}

int inv_rooms_ready(struct inv_rooms *r)
{
    return atomic_load(&r->ready);
}

int inv_rooms_pacing(struct inv_rooms *r)
{
    return atomic_load(&r->pacing);
}

long long inv_rooms_now_ms(struct inv_rooms *r)
{
    long long at = atomic_load(&r->redis_ms);
    if (at == 0)
        return 0;
    return at + ((long long)clock_now_us() - atomic_load(&r->local_us)) / 1000;
}

int inv_rooms_spec(struct inv_rooms *r, const char *sku, struct inv_room_spec *spec)
{
    pthread_rwlock_rdlock(&r->mu);
    struct room *rm = room_find(r, sku);
    if (rm)
        *spec = rm->v.spec;
    pthread_rwlock_unlock(&r->mu);
    return rm != NULL;
}

void inv_rooms_note(struct inv_rooms *r, const char *sku,
                    const struct inv_room_spec *spec)
{
    pthread_rwlock_wrlock(&r->mu);
    if (spec->rate_per_s > 0) {
        struct room *rm = room_get(r, sku);
        if (rm)
            rm->v.spec = *spec;
    } else {
        for (int i = 0; i < r->nrooms; i++)
            if (strcmp(r->rooms[i].sku, sku) == 0)
                room_drop(r, i);
    }
    pthread_rwlock_unlock(&r->mu);
}

int inv_rooms_view(struct inv_rooms *r, const char *sku, long long place,
                   struct inv_room_view *out)
{
    pthread_rwlock_rdlock(&r->mu);
    struct room *rm = room_find(r, sku);
    if (rm) {
        *out = rm->v;
        out->admitted_at_ms = 0;
        size_t below = place >= 0 ? skipped_below(rm, place) : 0;
        out->skipped_before = (long long)below;
        out->abandoned = below < rm->nskipped && rm->skipped[below] == place;
        if (place >= 0 && place <= rm->v.cursor) { /* the first batch that took it */
            size_t lo = 0, hi = rm->nbatch;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (rm->batch[mid].cursor < place)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            /* a place before the batches known (their passes are over) has none */
            if (lo < rm->nbatch && place > rm->batch[lo].from)
                out->admitted_at_ms = rm->batch[lo].at_ms;
        }
    }
    pthread_rwlock_unlock(&r->mu);
    return rm != NULL;
}

void inv_rooms_polled(struct inv_rooms *r, const char *sku, long long place)
{
    pthread_rwlock_rdlock(&r->mu);
    struct room *rm = room_find(r, sku);
    if (rm) {
        size_t i = atomic_fetch_add_explicit(&rm->npolled, 1, memory_order_relaxed);
        if (i < INV_ROOM_POLLS_MAX)
            rm->polled[i] = place;
    }
    pthread_rwlock_unlock(&r->mu);
}

void inv_rooms_each(struct inv_rooms *r,
                    void (*fn)(void *arg, const char *sku, const struct inv_room_view *v),
                    void *arg)
{
    pthread_rwlock_rdlock(&r->mu);
    for (int i = 0; i < r->nrooms; i++)
        fn(arg, r->rooms[i].sku, &r->rooms[i].v);
    pthread_rwlock_unlock(&r->mu);
}

const char *inv_room_state_name(inv_room_state st)
{
    switch (st) {
    case INV_ROOM_PAUSED:
        return "paused";
    case INV_ROOM_SOLD_OUT:
        return "sold_out";
    default:
        return "waiting";
    }
}
