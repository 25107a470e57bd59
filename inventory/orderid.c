#include "orderid.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
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

struct orderid_lease {
    struct rconn *rc;
    struct rcluster *cl; /* a Redis Cluster: the key's master instead of rc */
    struct orderid_gen *gen;
    int leased; /* 0: a fixed id given by the operator, nothing to renew */
    char token[33];
    int worker;
    int ttl_ms, renew_ms;
    _Atomic int64_t valid_until_us; /* monotonic */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int stopping;
    char err[128]; /* why the last step was LEASE_ERROR */
};

/* The lease of worker and its high-water mark; on a cluster the two share
 * a hash tag, so that one script renews both. */
static void lease_keys(const struct orderid_lease *l, int worker, char *key, char *hwm,
                       size_t len)
{
    const char *form = l->cl ? "seckill:worker:{%d}" : "seckill:worker:%d";
    snprintf(key, len, form, worker);
    snprintf(hwm, len, l->cl ? "seckill:worker:{%d}:hwm" : "seckill:worker:%d:hwm",
             worker);
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

/* Renews the lease and the high-water mark (LEASE_REFUSED: the lease was
 * lost). The mark is a whole lease ahead of the generator's clock (and above
 * every id issued); once Redis holds it, the generator may issue ids up to it. */
static lease_outcome lease_renew(struct orderid_lease *l)
{
    char key[64], hwm[64], ttl[16], mark_text[24];
    lease_keys(l, l->worker, key, hwm, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%d", l->ttl_ms);
    int64_t high = orderid_last_unix_ms(l->gen) + 1;
    int64_t now = l->gen->now_ms();
    int64_t mark = (high > now ? high : now) + l->ttl_ms;
    snprintf(mark_text, sizeof(mark_text), "%lld", (long long)mark);
    const char *argv[] = {key, hwm, l->leased ? l->token : "", ttl, mark_text};
    int64_t sent = clock_now_us();
    struct rconn *rc = lease_conn(l, key);
    redisReply *r = rc ? rconn_eval(rc, &renew_script, 2, 3, argv, NULL) : NULL;
    lease_failed(l, rc, r);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r && r->type != REDIS_REPLY_ERROR)
            snprintf(l->err, sizeof(l->err), "unexpected answer to the lease's renewal");
        if (r)
            freeReplyObject(r);
        return LEASE_ERROR;
    }
    int ok = r->integer == 1;
    freeReplyObject(r);
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

/* Takes a (new) worker id and moves the generator onto it above its mark. */
static lease_outcome lease_acquire(struct orderid_lease *l)
{
    int worker = l->worker;
    lease_outcome got = l->leased ? lease_take(l, &worker) : LEASE_HELD;
    int64_t floor_ms = 0;
    if (got == LEASE_HELD)
        got = lease_hwm(l, worker, &floor_ms);
    if (got != LEASE_HELD)
        return got;
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
    got = lease_renew(l);
    if (got == LEASE_REFUSED)
        snprintf(l->err, sizeof(l->err), "worker id %d was taken meanwhile", worker);
    return got;
}

static void *lease_loop(void *arg)
{
    struct orderid_lease *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stopping) {
        clock_cond_wait_until(&l->wake, &l->mu,
                              clock_now_us() + (int64_t)l->renew_ms * 1000);
        if (l->stopping)
            break;
        pthread_mutex_unlock(&l->mu);
        if (lease_renew(l) == LEASE_REFUSED && l->leased) {
            fprintf(stdout, "level=error event=worker_lease_lost worker=%d\n", l->worker);
            fflush(stdout);
            atomic_store(&l->valid_until_us, 0);
            if (lease_acquire(l) == LEASE_HELD)
                fprintf(stdout, "level=warn event=worker_lease_taken worker=%d\n",
                        l->worker);
            fflush(stdout);
        }
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

struct orderid_lease *orderid_lease_start(const struct orderid_lease_config *cfg,
                                          struct orderid_gen *gen, char *err,
                                          size_t errlen)
{
    struct orderid_lease *l = xcalloc(1, sizeof(*l));
    l->rc = rconn_new(cfg->host, cfg->port, cfg->password, 1000);
    if (cfg->nseeds > 0)
        l->cl = rcluster_new(cfg->seeds, cfg->nseeds, cfg->password, 1000);
    l->gen = gen;
    l->leased = cfg->fixed < 0;
    l->worker = cfg->fixed;
    l->ttl_ms = cfg->ttl_ms > 0 ? cfg->ttl_ms : ORDERID_LEASE_TTL_MS;
    l->renew_ms = l->ttl_ms / 5 > 0 ? l->ttl_ms / 5 : 1;
    lock_token_new(l->token);
    if (lease_acquire(l) != LEASE_HELD) {
        snprintf(err, errlen, "%s", l->err);
        rconn_free(l->rc);
        rcluster_free(l->cl);
        free(l);
        return NULL;
    }
    clock_cond_init(&l->wake);
    pthread_mutex_init(&l->mu, NULL);
    if (pthread_create(&l->thread, NULL, lease_loop, l) != 0)
        abort();
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
    pthread_mutex_lock(&l->mu);
    l->stopping = 1;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
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
    rconn_free(l->rc);
    rcluster_free(l->cl);
    pthread_cond_destroy(&l->wake);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
