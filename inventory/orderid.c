#include "orderid.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acluster.h"
#include "aconn.h"
#include "clock.h"
#include "duty.h"
#include "lock.h"
#include "rcluster.h"
#include "xalloc.h"

int64_t orderid_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void orderid_init(struct orderid_gen *gen, int worker, int64_t (*now_ms)(void),
                  int64_t floor_ms)
{
    pthread_mutex_init(&gen->mu, NULL);
    gen->worker = worker;
    gen->now_ms = now_ms ? now_ms : orderid_wall_ms;
    gen->last_ms = floor_ms > ORDERID_EPOCH_MS ? floor_ms - ORDERID_EPOCH_MS : 0;
    gen->seq = -1; /* the first id of last_ms gets sequence 0 */
    gen->ceiling_ms = INT64_MAX;
    gen->clock_backwards = 0;
    gen->gene_bits = 0;
}

void orderid_use_genes(struct orderid_gen *gen)
{
    pthread_mutex_lock(&gen->mu);
    gen->gene_bits = ORDERID_GENE_BITS;
    pthread_mutex_unlock(&gen->mu);
}

uint64_t orderid_with_gene(uint64_t id, int g)
{
    uint64_t mask = (UINT64_C(1) << ORDERID_GENE_BITS) - 1;
    return (id & ~mask) | ((uint64_t)g & mask);
}

int orderid_gene_of(uint64_t id)
{
    return (int)(id & ((UINT64_C(1) << ORDERID_GENE_BITS) - 1));
}

uint64_t orderid_next(struct orderid_gen *gen)
{
    pthread_mutex_lock(&gen->mu);
    int64_t now = gen->now_ms() - ORDERID_EPOCH_MS;
    int64_t ms = gen->last_ms;
    int seq = gen->seq;
    if (now > ms) {
        ms = now;
        seq = 0;
    } else {
        if (now < ms)
            gen->clock_backwards++;
        /* Same millisecond, or the clock went back: keep counting from the
         * last millisecond used, and borrow the next one when it is full. */
        if (++seq >= (1 << (ORDERID_SEQ_BITS - gen->gene_bits))) {
            ms++;
            seq = 0;
        }
    }
    if (ms >= gen->ceiling_ms) {
        pthread_mutex_unlock(&gen->mu);
        return 0;
    }
    gen->last_ms = ms;
    gen->seq = seq;
    uint64_t id = ((uint64_t)ms << (ORDERID_SEQ_BITS + ORDERID_WORKER_BITS)) |
                  ((uint64_t)gen->worker << ORDERID_SEQ_BITS) |
                  ((uint64_t)seq << gen->gene_bits);
    pthread_mutex_unlock(&gen->mu);
    return id;
}

int orderid_worker(struct orderid_gen *gen)
{
    pthread_mutex_lock(&gen->mu);
    int worker = gen->worker;
    pthread_mutex_unlock(&gen->mu);
    return worker;
}

int64_t orderid_last_unix_ms(struct orderid_gen *gen)
{
    pthread_mutex_lock(&gen->mu);
    int64_t last = gen->last_ms + ORDERID_EPOCH_MS;
    pthread_mutex_unlock(&gen->mu);
    return last;
}

int orderid_worker_of(uint64_t id)
{
    return (int)((id >> ORDERID_SEQ_BITS) & ORDERID_MAX_WORKER);
}

int64_t orderid_unix_ms_of(uint64_t id)
{
    return (int64_t)(id >> (ORDERID_SEQ_BITS + ORDERID_WORKER_BITS)) + ORDERID_EPOCH_MS;
}

/* ---- worker id lease ---------------------------------------------------- */

/* inventory/lua/worker_renew.lua: 1 when renewed, 0 when no longer ours. */
extern const struct rscript_source lua_inventory_worker_renew;
static struct rscript renew_script =
    RSCRIPT_INIT("worker_renew", lua_inventory_worker_renew);

/* lock/lua/del_if_owner.lua (the lock library's owner-checked delete): deletes
 * the lease if still ours. */
extern const struct rscript_source lua_lock_del_if_owner;
static struct rscript drop_script = RSCRIPT_INIT("worker_drop", lua_lock_del_if_owner);

/* What a step of the lease found. */
typedef enum {
    LEASE_HELD,    /* taken, or renewed: ours for another ttl */
    LEASE_REFUSED, /* someone else's: renewing, lost; taking, every id leased */
    LEASE_ERROR,   /* Redis failed: l->err says why */
} lease_outcome;

/* Where the lease is kept: one Redis, or a Redis Cluster by its seeds. */
struct lease_where {
    char host[256];
    int port;
    char *password;
    struct rconn_addr *seeds;
    int nseeds; /* > 0: a Redis Cluster */
};

/* What the renewal timer has on its way (the attached loop's only). */
typedef enum {
    LEASE_IDLE = 0,   /* nothing: the timer is armed */
    LEASE_RENEWING,   /* worker_renew.lua for the id held */
    LEASE_TAKING,     /* SET NX PX of candidate id `probe` (after a loss) */
    LEASE_MARKING,    /* GET of the taken id's high-water mark */
    LEASE_CONFIRMING, /* the first renewal of the taken id */
} lease_step;

struct orderid_lease {
    struct lease_where at;
    /* Blocking connections: at start and at stop only (main thread). */
    struct rconn *rc;
    struct rcluster *cl; /* a Redis Cluster: the key's master instead of rc */
    struct orderid_gen *gen;
    int leased; /* 0: a fixed id given by the operator, nothing to renew */
    char token[33];
    int worker;
    int ttl_ms, renew_ms;
    _Atomic int64_t valid_until_us; /* monotonic */
    char err[128];                  /* why the last step was LEASE_ERROR */
    void (*on_event)(orderid_lease_event ev, int worker);
    /* On the attached loop (orderid_lease_attach), its thread only. */
    struct duty duty; /* every renew_ms, its connection to the Redis or Cluster */
    lease_step step;
    int probe, probed;     /* LEASE_TAKING: the candidate id, how many tried */
    int64_t sent_us, mark; /* the renewal on its way: when, which mark */
};

/* The lease of worker and its high-water mark; on a cluster the two share
 * a hash tag, so that one script renews both. */
static void lease_keys(const struct orderid_lease *l, int worker, char *key, char *hwm,
                       size_t len)
{
    int cluster = l->at.nseeds > 0;
    snprintf(key, len, cluster ? "seckill:worker:{%d}" : "seckill:worker:%d", worker);
    snprintf(hwm, len, cluster ? "seckill:worker:{%d}:hwm" : "seckill:worker:%d:hwm",
             worker);
}

/* Opens the blocking connections (start and stop). */
static void lease_open(struct orderid_lease *l)
{
    l->rc = rconn_new(l->at.host, l->at.port, l->at.password, 1000);
    if (l->at.nseeds > 0)
        l->cl = rcluster_new(l->at.seeds, l->at.nseeds, l->at.password, 1000);
}

static void lease_close(struct orderid_lease *l)
{
    rconn_free(l->rc);
    rcluster_free(l->cl);
    l->rc = NULL;
    l->cl = NULL;
}

/* The connection for key: rc, or on a cluster its master's (NULL: none
 * known now). */
static struct rconn *lease_conn(struct orderid_lease *l, const char *key)
{
    return l->cl ? rcluster_conn(l->cl, cluster_keyslot(key, strlen(key))) : l->rc;
}

/* Records why r, rc's answer to a lease step (NULL: none), is a failure, if
 * it is one; on a cluster, an answer that is none or a redirection refreshes
 * the map (a failover) for the next step. */
static void lease_failed(struct orderid_lease *l, struct rconn *rc, const redisReply *r)
{
    if (!r)
        snprintf(l->err, sizeof(l->err), "%s",
                 rc ? rconn_errstr(rc) : "no master known for the lease's slot");
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(l->err, sizeof(l->err), "%s", r->str);
    if (l->cl && rcluster_stale(r))
        rcluster_refresh(l->cl);
}

/* A command on key's connection (see lease_failed). */
static redisReply *lease_command(struct orderid_lease *l, const char *key, int argc,
                                 const char **argv)
{
    struct rconn *rc = lease_conn(l, key);
    redisReply *r = rc ? rconn_command_argv(rc, argc, argv, NULL) : NULL;
    lease_failed(l, rc, r);
    return r;
}

/* Takes a worker id, the first free one from a random point, into *worker. */
static lease_outcome lease_take(struct orderid_lease *l, int *worker)
{
    char key[64], hwm[64], ttl[16], head[9];
    snprintf(ttl, sizeof(ttl), "%d", l->ttl_ms);
    /* Probe from a random point (the token is random hex), so that instances
     * starting together do not all race for the same ids. */
    snprintf(head, sizeof(head), "%.8s", l->token);
    int start = (int)(strtoul(head, NULL, 16) % (ORDERID_MAX_WORKER + 1));
    for (int n = 0; n <= ORDERID_MAX_WORKER; n++) {
        *worker = (start + n) % (ORDERID_MAX_WORKER + 1);
        lease_keys(l, *worker, key, hwm, sizeof(key));
        const char *argv[] = {"SET", key, l->token, "NX", "PX", ttl};
        redisReply *r = lease_command(l, key, 6, argv);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            if (r)
                freeReplyObject(r);
            return LEASE_ERROR;
        }
        int won = r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (won)
            return LEASE_HELD;
    }
    snprintf(l->err, sizeof(l->err), "every worker id 0..%d is leased",
             ORDERID_MAX_WORKER);
    return LEASE_REFUSED;
}

/* The high-water mark recorded for worker's ids (0: none yet), into *mark. */
static lease_outcome lease_hwm(struct orderid_lease *l, int worker, int64_t *mark)
{
    char key[64], hwm[64];
    lease_keys(l, worker, key, hwm, sizeof(key));
    const char *argv[] = {"GET", hwm};
    redisReply *r = lease_command(l, hwm, 2, argv);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r)
            freeReplyObject(r);
        return LEASE_ERROR;
    }
    *mark = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return LEASE_HELD;
}

/* Lets gen issue ids up to (not including) unix ms `ceiling`: only ever
 * raised here, after a mark at least that high is recorded in Redis. 0 stops
 * it at once (the lease is lost or being replaced). */
static void gen_set_ceiling(struct orderid_gen *gen, int64_t ceiling)
{
    pthread_mutex_lock(&gen->mu);
    gen->ceiling_ms = ceiling > 0 ? ceiling - ORDERID_EPOCH_MS : 0;
    pthread_mutex_unlock(&gen->mu);
}

/* The arguments of a renewal of l's worker id (key, hwm, token, ttl, mark;
 * keys, ttl and mark_text are the caller's buffers of 64, 64, 16 and 24
 * bytes), and the mark it records: a whole lease ahead of the generator's
 * clock, and above every id issued. */
static int64_t renew_args(struct orderid_lease *l, const char **argv, char *key,
                          char *hwm, char *ttl, char *mark_text)
{
    lease_keys(l, l->worker, key, hwm, 64);
    snprintf(ttl, 16, "%d", l->ttl_ms);
    int64_t high = orderid_last_unix_ms(l->gen) + 1;
    int64_t now = l->gen->now_ms();
    int64_t mark = (high > now ? high : now) + l->ttl_ms;
    snprintf(mark_text, 24, "%lld", (long long)mark);
    argv[0] = key;
    argv[1] = hwm;
    argv[2] = l->leased ? l->token : "";
    argv[3] = ttl;
    argv[4] = mark_text;
    return mark;
}

/* What r, the answer to a renewal sent at `sent` recording `mark`, means
 * (NULL: none came); applies it: a renewed lease is valid for another ttl
 * minus a period and the generator may issue ids up to the mark (only once
 * Redis holds it); a lost one stops the generator at once. */
static lease_outcome renew_taken(struct orderid_lease *l, const redisReply *r,
                                 int64_t sent, int64_t mark)
{
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r && r->type != REDIS_REPLY_ERROR)
            snprintf(l->err, sizeof(l->err), "unexpected answer to the lease's renewal");
        return LEASE_ERROR;
    }
    int ok = r->integer == 1;
    if (ok) {
        atomic_store(&l->valid_until_us,
                     sent + (int64_t)(l->ttl_ms - l->renew_ms) * 1000);
        if (l->leased)
            gen_set_ceiling(l->gen, mark);
    } else if (l->leased) {
        gen_set_ceiling(l->gen, 0);
    }
    return ok ? LEASE_HELD : LEASE_REFUSED;
}

/* Renews the lease and the high-water mark, blocking (LEASE_REFUSED: the
 * lease was lost). */
static lease_outcome lease_renew(struct orderid_lease *l)
{
    char key[64], hwm[64], ttl[16], mark_text[24];
    const char *argv[5];
    int64_t mark = renew_args(l, argv, key, hwm, ttl, mark_text);
    int64_t sent = clock_now_us();
    struct rconn *rc = lease_conn(l, key);
    redisReply *r = rc ? rconn_eval(rc, &renew_script, 2, 3, argv, NULL) : NULL;
    lease_failed(l, rc, r);
    lease_outcome got = renew_taken(l, r, sent, mark);
    if (r)
        freeReplyObject(r);
    return got;
}

/* Moves the generator onto worker, above floor_ms (its recorded mark). */
static void gen_move(struct orderid_lease *l, int worker, int64_t floor_ms)
{
    pthread_mutex_lock(&l->gen->mu);
    if (l->leased)
        l->gen->ceiling_ms = 0; /* nothing under the new id before its mark */
    l->gen->worker = worker;
    if (floor_ms - ORDERID_EPOCH_MS > l->gen->last_ms) {
        l->gen->last_ms = floor_ms - ORDERID_EPOCH_MS;
        l->gen->seq = -1;
    }
    pthread_mutex_unlock(&l->gen->mu);
    l->worker = worker;
}

/* Takes a (new) worker id and moves the generator onto it above its mark,
 * blocking (at start). */
static lease_outcome lease_acquire(struct orderid_lease *l)
{
    int worker = l->worker;
    lease_outcome got = l->leased ? lease_take(l, &worker) : LEASE_HELD;
    int64_t floor_ms = 0;
    if (got == LEASE_HELD)
        got = lease_hwm(l, worker, &floor_ms);
    if (got != LEASE_HELD)
        return got;
    gen_move(l, worker, floor_ms);
    got = lease_renew(l);
    if (got == LEASE_REFUSED)
        snprintf(l->err, sizeof(l->err), "worker id %d was taken meanwhile", worker);
    return got;
}

/* ---- the renewal, on an event loop ---------------------------------------
 *
 * A timer every renew_ms sends the renewal (LEASE_RENEWING). When Redis says
 * the id is no longer ours, the loss is reported (worker_lease_lost), the
 * lease is invalid at once (inv answers unavailable) and a new id is taken
 * as at start: SET NX PX of each candidate from a random point
 * (LEASE_TAKING), the taken id's mark (LEASE_MARKING), its first renewal
 * (LEASE_CONFIRMING: worker_lease_taken). A failure on the way leaves it to
 * the next tick, which starts with a renewal of the id held, as before. */

static void lease_report(struct orderid_lease *l, orderid_lease_event ev)
{
    if (l->on_event)
        l->on_event(ev, l->worker);
}

static void on_lease_answer(void *arg, aconn_result res, redisReply *r);

/* Queues argv (a script when s is set) for key on the loop's connection.
 * 0, or -1 when refused at once. */
static int lease_send(struct orderid_lease *l, const char *key, struct rscript *s,
                      int nkeys, int argc, const char **argv)
{
    rconn_status rc = duty_send(&l->duty, cluster_keyslot(key, strlen(key)),
                                on_lease_answer, l, s, nkeys, argc, argv);
    return rc == RCONN_OK ? 0 : -1;
}

/* Sends the renewal of the id held; step is LEASE_RENEWING or
 * LEASE_CONFIRMING. */
static void renew_send(struct orderid_lease *l, lease_step step)
{
    char key[64], hwm[64], ttl[16], mark_text[24];
    const char *argv[5];
    l->mark = renew_args(l, argv, key, hwm, ttl, mark_text);
    l->sent_us = clock_now_us();
    l->step = step;
    if (lease_send(l, key, &renew_script, 2, 5, argv) != 0)
        l->step = LEASE_IDLE;
}

/* Sends the SET NX PX of the next candidate id, or gives up (LEASE_IDLE)
 * when every id was tried. */
static void take_send(struct orderid_lease *l)
{
    if (l->probed > ORDERID_MAX_WORKER) {
        snprintf(l->err, sizeof(l->err), "every worker id 0..%d is leased",
                 ORDERID_MAX_WORKER);
        l->step = LEASE_IDLE;
        return;
    }
    char key[64], hwm[64], ttl[16];
    l->probe = (l->probe + (l->probed ? 1 : 0)) % (ORDERID_MAX_WORKER + 1);
    l->probed++;
    lease_keys(l, l->probe, key, hwm, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%d", l->ttl_ms);
    const char *argv[] = {"SET", key, l->token, "NX", "PX", ttl};
    l->step = LEASE_TAKING;
    if (lease_send(l, key, NULL, 0, 6, argv) != 0)
        l->step = LEASE_IDLE;
}

/* The lease was found lost: stop, then take a new id. */
static void lease_lost(struct orderid_lease *l)
{
    lease_report(l, ORDERID_LEASE_LOST);
    atomic_store(&l->valid_until_us, 0);
    char head[9];
    snprintf(head, sizeof(head), "%.8s", l->token);
    l->probe = (int)(strtoul(head, NULL, 16) % (ORDERID_MAX_WORKER + 1));
    l->probed = 0;
    take_send(l);
}

static void on_lease_answer(void *arg, aconn_result res, redisReply *r)
{
    struct orderid_lease *l = arg;
    if (res != ACONN_REPLY)
        r = NULL;
    if (r && r->type == REDIS_REPLY_ERROR)
        snprintf(l->err, sizeof(l->err), "%s", r->str);
    lease_step step = l->step;
    l->step = LEASE_IDLE;
    switch (step) {
    case LEASE_RENEWING:
        if (renew_taken(l, r, l->sent_us, l->mark) == LEASE_REFUSED && l->leased)
            lease_lost(l);
        break;
    case LEASE_TAKING:
        if (r && r->type == REDIS_REPLY_STATUS) { /* won: read its mark */
            char key[64], hwm[64];
            lease_keys(l, l->probe, key, hwm, sizeof(key));
            const char *argv[] = {"GET", hwm};
            l->step = LEASE_MARKING;
            if (lease_send(l, hwm, NULL, 0, 2, argv) != 0)
                l->step = LEASE_IDLE;
        } else if (r && r->type == REDIS_REPLY_NIL) {
            take_send(l);
        }
        break;
    case LEASE_MARKING:
        if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL)) {
            gen_move(l, l->probe,
                     r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0);
            renew_send(l, LEASE_CONFIRMING);
        }
        break;
    case LEASE_CONFIRMING:
        if (renew_taken(l, r, l->sent_us, l->mark) == LEASE_HELD)
            lease_report(l, ORDERID_LEASE_TAKEN);
        break;
    case LEASE_IDLE:
        break;
    }
}

static void on_lease_tick(void *arg)
{
    struct orderid_lease *l = arg;
    if (l->step == LEASE_IDLE) /* else the last step is still on its way */
        renew_send(l, LEASE_RENEWING);
}

void orderid_lease_attach(struct orderid_lease *l, struct event_base *base)
{
    if (!l || !l->leased)
        return; /* a fixed id: nothing to renew */
    struct duty_target to = {.host = l->at.host,
                             .port = l->at.port,
                             .seeds = l->at.seeds,
                             .nseeds = l->at.nseeds,
                             .password = l->at.password,
                             .timeout_ms = 1000};
    duty_start(&l->duty, base, &to, l->renew_ms, on_lease_tick, l);
}

void orderid_lease_detach(struct orderid_lease *l)
{
    if (!l || !duty_running(&l->duty))
        return;
    /* A step on its way is answered now, as failed (nothing more is sent:
     * the connection is closing). */
    duty_stop(&l->duty);
    l->step = LEASE_IDLE;
}

struct orderid_lease *orderid_lease_start(const struct orderid_lease_config *cfg,
                                          struct orderid_gen *gen, char *err,
                                          size_t errlen)
{
    struct orderid_lease *l = xcalloc(1, sizeof(*l));
    snprintf(l->at.host, sizeof(l->at.host), "%s", cfg->host);
    l->at.port = cfg->port;
    l->at.password = cfg->password && *cfg->password ? xstrdup(cfg->password) : NULL;
    if (cfg->nseeds > 0) {
        l->at.seeds = xcalloc((size_t)cfg->nseeds, sizeof(*l->at.seeds));
        memcpy(l->at.seeds, cfg->seeds, sizeof(*l->at.seeds) * (size_t)cfg->nseeds);
        l->at.nseeds = cfg->nseeds;
    }
    l->on_event = cfg->on_event;
    l->gen = gen;
    l->leased = cfg->fixed < 0;
    l->worker = cfg->fixed;
    l->ttl_ms = cfg->ttl_ms > 0 ? cfg->ttl_ms : ORDERID_LEASE_TTL_MS;
    l->renew_ms = l->ttl_ms / 5 > 0 ? l->ttl_ms / 5 : 1;
    lock_token_new(l->token);
    lease_open(l);
    lease_outcome got = lease_acquire(l);
    lease_close(l);
    if (got != LEASE_HELD) {
        snprintf(err, errlen, "%s", l->err);
        free(l->at.password);
        free(l->at.seeds);
        free(l);
        return NULL;
    }
    return l;
}

int orderid_lease_valid(struct orderid_lease *l)
{
    return !l->leased || clock_now_us() < atomic_load(&l->valid_until_us);
}

void orderid_lease_stop(struct orderid_lease *l)
{
    if (!l)
        return;
    orderid_lease_detach(l);
    lease_open(l);
    lease_renew(l); /* leave the high-water mark for whoever takes the id next */
    if (l->leased) {
        char key[64], hwm[64];
        lease_keys(l, l->worker, key, hwm, sizeof(key));
        const char *argv[] = {key, l->token};
        struct rconn *rc = lease_conn(l, key);
        redisReply *r = rc ? rconn_eval(rc, &drop_script, 1, 1, argv, NULL) : NULL;
        if (r)
            freeReplyObject(r);
    }
    lease_close(l);
    free(l->at.password);
    free(l->at.seeds);
    free(l);
}
