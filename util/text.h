#ifndef SECKILL_TEXT_H
#define SECKILL_TEXT_H

#include <stddef.h>
#include <stdint.h>
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

/* Writes v in decimal at p, unterminated; returns the end (at most 20 bytes). */
static inline char *text_put_u64(char *p, uint64_t v)
{
    char d[20];
    int n = 0;
    do
        d[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n > 0)
        *p++ = d[--n];
    return p;
}

#endif
