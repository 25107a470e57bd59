/* blocking.c: an event loop's connections for blocking commands (blocking.h). */
#include "blocking.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

struct blocking_conn {
    struct aconn *c;
    char host[64];
    int port;
};

struct blocking_pool {
    struct event_base *base;
    const char *password;
    int timeout_ms;
    struct blocking_conn *all, *idle; /* every connection, and the idle ones */
    int nall, nidle;
    int closing; /* the pool is going: nothing is put back */
};

struct blocking_pool *blocking_pool_new(struct event_base *base, const char *password,
                                        int timeout_ms)
{
    struct blocking_pool *p = xcalloc(1, sizeof(*p));
    p->base = base;
    p->password = password;
    p->timeout_ms = timeout_ms;
    return p;
}

void blocking_pool_free(struct blocking_pool *p)
{
    if (!p)
        return;
    p->closing = 1;
    for (int i = 0; i < p->nall; i++)
        aconn_free(p->all[i].c);
    free(p->all);
    free(p->idle);
    free(p);
}

struct aconn *blocking_get(struct blocking_pool *p, const char *host, int port)
{
    for (int i = 0; i < p->nidle; i++)
        if (p->idle[i].port == port && strcmp(p->idle[i].host, host) == 0) {
            struct aconn *c = p->idle[i].c;
            p->idle[i] = p->idle[--p->nidle];
            return c;
        }
    p->all = xrealloc(p->all, sizeof(*p->all) * (size_t)(p->nall + 1));
    p->idle = xrealloc(p->idle, sizeof(*p->idle) * (size_t)(p->nall + 1));
    struct blocking_conn *b = &p->all[p->nall++];
    b->c = aconn_new(p->base, host, port, p->password, p->timeout_ms);
    snprintf(b->host, sizeof(b->host), "%s", host);
    b->port = port;
    return b->c;
}

void blocking_put(struct blocking_pool *p, struct aconn *c)
{
    if (p->closing)
        return;
    for (int i = 0; i < p->nall; i++)
        if (p->all[i].c == c)
            p->idle[p->nidle++] = p->all[i];
}
