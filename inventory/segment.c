#include "segment.h"

long long seg_initial(long long stock, int k, int i)
{
    return stock / k + (i < stock % k ? 1 : 0);
}

uint64_t seg_user_hash(const char *user_id)
{
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)user_id; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    /* FNV-1a's low bits mix poorly for short keys that differ in the last
     * character; fold the high half in before taking a modulus. */
    return h ^ (h >> 32);
}

uint32_t seg_route(const char *user_id)
{
    return (uint32_t)(seg_user_hash(user_id) & 0x7fffffffu);
}

int seg_home(const char *user_id, int k)
{
    return (int)(seg_route(user_id) % (uint32_t)k);
}

uint32_t seg_queue_hash(const char *sku, int seg)
{
    uint32_t h = 2166136261u;
    for (const char *p = sku; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return (h ^ (uint32_t)seg) * 16777619u;
}
