/* setnx: placeholder until the backend lands. */
#include "lock_impl.h"

#include <stdio.h>

static void *setnx_create(const struct lock_config *cfg, struct lock_counters *counters,
                          char *err, size_t errlen)
{
    (void)cfg, (void)counters;
    snprintf(err, errlen, "lock mode 'setnx' is not implemented yet");
    return NULL;
}

const struct lock_backend lock_backend_setnx = {
    .name = "setnx",
    .create = setnx_create,
};
