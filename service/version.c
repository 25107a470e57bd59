#include "version.h"

#ifndef SECKILL_VERSION
#define SECKILL_VERSION "unknown"
#endif
#ifndef SECKILL_COMMIT
#define SECKILL_COMMIT "unknown"
#endif

const char *svc_version(void)
{
    return SECKILL_VERSION;
}

const char *svc_commit(void)
{
    return SECKILL_COMMIT;
}
