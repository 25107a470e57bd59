#include "xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Formatted on the stack and written whole: stdio may itself need memory. */
static void out_of_memory(size_t bytes)
{
    char line[64];
    int n = snprintf(line, sizeof(line), "seckill: out of memory (%zu bytes)\n", bytes);
    if (n > 0)
        (void)!write(STDERR_FILENO, line, (size_t)n);
    abort();
}

void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        out_of_memory(size);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        out_of_memory(SIZE_MAX);
    void *p = bytes ? calloc(n, size) : calloc(1, 1);
    if (!p)
        out_of_memory(bytes);
    return p;
}

void *xrealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (!p)
        out_of_memory(size);
    return p;
}

char *xstrdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *copy = xmalloc(len);
    memcpy(copy, s, len);
    return copy;
}
