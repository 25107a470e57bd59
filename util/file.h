/* file.h: a small file read whole, for the secrets and keys the flags name
 * (service/config.c, service/buyer.c). Any thread may call it. */
#ifndef SECKILL_FILE_H
#define SECKILL_FILE_H

#include <stddef.h>

/* Reads up to cap bytes of file path into buf (*n of them: a longer file is
 * cut there, for the caller to refuse). 0, or -1 with why in err (errno's
 * words, never the content; buf and *n then say nothing). */
int file_read(const char *path, void *buf, size_t cap, size_t *n, char *err,
              size_t errlen);

#endif
