#include "file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int file_read(const char *path, void *buf, size_t cap, size_t *n, char *err,
              size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot read it (%s)", strerror(errno));
        return -1;
    }
    *n = fread(buf, 1, cap, f);
    int failed = ferror(f);
    int saved = errno;
    fclose(f);
    if (failed) {
        snprintf(err, errlen, "cannot read it (%s)", strerror(saved));
        return -1;
    }
    return 0;
}
