#ifndef SECKILL_TEXT_H
#define SECKILL_TEXT_H

#include <stddef.h>
#include <string.h>

/* Copies src into dst of cap (> 0) bytes: cut to cap - 1 bytes and always
 * terminated, as snprintf(dst, cap, "%s", src) is, without a format to read
 * (the order path's copies: printf's machinery was a few % of an instance's
 * CPU). Returns the length written. */
static inline size_t text_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return n;
}

#endif
