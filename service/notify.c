/* notify: sd_notify for Type=notify (notify.h). */
#include "notify.h"

#include <string.h>
#include <systemd/sd-daemon.h>

#include "log.h"

/* Sends state; a failure is logged (the unit would time out waiting for
 * READY=1 and say nothing of why). */
static void notify(const char *state, const char *what)
{
    int rc = sd_notify(0, state);
    if (rc < 0)
        log_event(LOG_WARN, "sd_notify_failed", "state=%s reason=\"%s\"", what,
                  strerror(-rc));
    else if (rc > 0)
        log_event(LOG_DEBUG, "sd_notify", "state=%s", what);
}

void svc_notify_ready(void)
{
    notify("READY=1\nSTATUS=serving", "ready");
}

void svc_notify_stopping(void)
{
    notify("STOPPING=1\nSTATUS=draining", "stopping");
}
