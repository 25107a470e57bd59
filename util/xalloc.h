/* xalloc: memory allocation that does not fail: malloc, calloc, realloc and
 * strdup for every layer, which on failure print one line to stderr
 * ("seckill: out of memory (N bytes)") and abort().
 *
 * Allocation failure is not an outcome callers branch on in this tree: the
 * process aborts. Use these, not malloc/calloc/realloc/strdup + abort. Any
 * thread. */
#ifndef SECKILL_XALLOC_H
#define SECKILL_XALLOC_H

#include <stddef.h>

/* malloc(size), never NULL. size 0 gives a distinct block that may be freed. */
void *xmalloc(size_t size);

/* calloc(n, size): n zeroed elements, never NULL. n * size overflowing is a
 * failure like any other (reported as SIZE_MAX bytes). n or size 0 gives a
 * distinct block that may be freed. */
void *xcalloc(size_t n, size_t size);

/* realloc(ptr, size), never NULL; ptr NULL allocates. size 0 keeps a
 * distinct block (never frees ptr and returns NULL, as realloc may). */
void *xrealloc(void *ptr, size_t size);

/* A copy of s (not NULL), never NULL; the caller frees it. */
char *xstrdup(const char *s);

#endif
