#include "worker.h"

#include <pthread.h>
#include <stdlib.h>

#include "xalloc.h"

static pthread_key_t worker_key;
static pthread_once_t worker_key_once = PTHREAD_ONCE_INIT;
static _Thread_local struct svc_worker *tls_worker;

static void worker_free(void *p)
{
    struct svc_worker *w = p;
    inv_session_free(w->inv);
    rconn_free(w->rc);
    free(w);
}

static void worker_key_init(void)
{
    pthread_key_create(&worker_key, worker_free);
}

struct svc_worker *svc_worker_get(struct svc_app *app)
{
    if (tls_worker)
        return tls_worker;
    struct svc_worker *w = xcalloc(1, sizeof(*w));
    const struct svc_config *cfg = app->cfg;
    w->rc = rconn_new(cfg->redis.host, cfg->redis.port, cfg->redis_password, 1000);
    w->inv = inv_session_new(app->inv, w->rc);
    pthread_once(&worker_key_once, worker_key_init);
    pthread_setspecific(worker_key, w);
    tls_worker = w;
    return w;
}

void svc_worker_release(void)
{
    if (!tls_worker)
        return;
    pthread_setspecific(worker_key, NULL);
    worker_free(tls_worker);
    tls_worker = NULL;
}
