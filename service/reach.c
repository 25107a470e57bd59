/* reach: one log line per change of a dependency's reachability (reach.h). */
#include "reach.h"

#include <stdio.h>

#include "clock.h"
#include "log.h"

void svc_reach_init(struct svc_reach *r, const char *kind, const char *addr)
{
    r->kind = kind;
    snprintf(r->addr, sizeof(r->addr), "%s", addr);
    r->down = 0;
    r->down_us = 0;
}

void svc_reach_ok(struct svc_reach *r)
{
    if (!r->down)
        return;
    r->down = 0;
    char event[32];
    snprintf(event, sizeof(event), "%s_up", r->kind);
    log_event(LOG_INFO, event, "addr=%s down_ms=%lld", r->addr,
              (long long)((clock_now_us() - r->down_us) / 1000));
}

void svc_reach_failed(struct svc_reach *r, const char *reason)
{
    if (r->down)
        return;
    r->down = 1;
    r->down_us = clock_now_us();
    char event[32];
    snprintf(event, sizeof(event), "%s_down", r->kind);
    log_event(LOG_WARN, event, "addr=%s reason=\"%s\"", r->addr, reason);
}
