#include "duty.h"

#include <event2/event.h>
#include <stdlib.h>

#include "acluster.h"
#include "aconn.h"

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct duty *d = arg;
    d->fn(d->arg);
}

static void connect_to(struct duty *d)
{
    const struct duty_target *to = &d->to;
    if (to->nseeds > 0)
        d->cluster =
            acluster_new(d->base, to->seeds, to->nseeds, to->password, to->timeout_ms);
    else if (to->host)
        d->conn = aconn_new(d->base, to->host, to->port, to->password, to->timeout_ms);
}

/* Closes the connection, taken from d first: its callbacks run now and see
 * none. */
static void disconnect(struct duty *d)
{
    struct aconn *conn = d->conn;
    struct acluster *cluster = d->cluster;
    d->conn = NULL;
    d->cluster = NULL;
    aconn_free(conn);
    acluster_free(cluster);
}

void duty_start(struct duty *d, struct event_base *base, const struct duty_target *to,
                int every_ms, void (*fn)(void *arg), void *arg)
{
    if (d->tick)
        return;
    d->base = base;
    d->to = to ? *to : (struct duty_target){0};
    d->fn = fn;
    d->arg = arg;
    connect_to(d);
    struct timeval every = {.tv_sec = every_ms / 1000, .tv_usec = every_ms % 1000 * 1000};
    d->tick = event_new(base, -1, EV_PERSIST, on_tick, d);
    if (!d->tick || event_add(d->tick, &every) != 0)
        abort();
}

void duty_stop(struct duty *d)
{
    if (!d->tick)
        return;
    event_free(d->tick);
    d->tick = NULL;
    disconnect(d);
}

void duty_reconnect(struct duty *d)
{
    disconnect(d);
    connect_to(d);
}

int duty_running(const struct duty *d)
{
    return d->tick != NULL;
}

int duty_connected(const struct duty *d)
{
    return d->conn || d->cluster;
}

rconn_status duty_send(struct duty *d, int slot, aconn_cb *cb, void *arg,
                       struct rscript *script, int nkeys, int argc, const char **argv)
{
    if (d->cluster)
        return script
                   ? acluster_eval(d->cluster, slot, cb, arg, script, nkeys, argc, argv)
                   : acluster_command(d->cluster, slot, cb, arg, argc, argv);
    if (!d->conn)
        return RCONN_ERR;
    return script ? aconn_eval(d->conn, cb, arg, script, nkeys, argc, argv)
                  : aconn_command(d->conn, cb, arg, argc, argv, NULL);
}
