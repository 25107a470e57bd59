/* redlock: placeholder until the backend lands. */
#include "lock_impl.h"

#include <stdio.h>

static void *redlock_create(const struct lock_config *cfg, struct lock_counters *counters,
                          char *err, size_t errlen)
{
    (void)cfg, (void)counters;
    snprintf(err, errlen, "lock mode 'redlock' is not implemented yet");
    return NULL;
}

const struct lock_backend lock_backend_redlock = {
    .name = "redlock",
    .create = redlock_create,
};
