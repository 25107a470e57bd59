#include "log.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* Read by every thread, set by the main thread (a SIGHUP's reload). */
static atomic_int log_threshold = LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* The file stdout was opened by at start, "" when it is no file (a pipe, a
 * terminal, the journal). Set once by log_open, before any thread starts. */
static char log_path[PATH_MAX];

void log_open(void)
{
    struct stat st;
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/fd/1", path, sizeof(path) - 1);
    if (n <= 0 || fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    path[n] = '\0';
    snprintf(log_path, sizeof(log_path), "%s", path);
}

int log_reopen(void)
{
    if (!log_path[0])
        return 0;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        return -1;
    fflush(stdout);
    /* dup2 swaps fd 1 in one step: a line written meanwhile by another thread
     * goes whole to the old file or whole to the new one. */
    int rc = dup2(fd, STDOUT_FILENO) < 0 ? -1 : 1;
    close(fd);
    return rc;
}

const char *log_file(void)
{
    return log_path;
}

static atomic_ullong suppressed_total;

int log_limit_take(struct log_limit *l, uint64_t *suppressed)
{
    int64_t now = clock_now_us();
    pthread_mutex_lock(&l->mu);
    if (now - l->window_us >= 1000000) {
        l->window_us = now;
        l->used = 0;
    }
    int ok = l->used < l->per_second;
    if (ok) {
        l->used++;
        *suppressed = l->dropped;
        l->dropped = 0;
    } else {
        l->dropped++;
    }
    pthread_mutex_unlock(&l->mu);
    if (!ok)
        atomic_fetch_add_explicit(&suppressed_total, 1, memory_order_relaxed);
    return ok;
}

uint64_t log_suppressed_total(void)
{
    return atomic_load_explicit(&suppressed_total, memory_order_relaxed);
}

int log_level_parse(const char *text)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(text, level_names[i]) == 0)
            return i;
    return -1;
}

const char *log_level_name(int level)
{
    return level >= LOG_DEBUG && level <= LOG_ERROR ? level_names[level] : "unknown";
}

void log_set_level(int level)
{
    atomic_store_explicit(&log_threshold, level, memory_order_relaxed);
}

int log_enabled(int level)
{
    return level >= atomic_load_explicit(&log_threshold, memory_order_relaxed);
}

char *log_quote(char *dst, size_t len, const char *text)
{
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < len; p++)
        dst[n++] = *p == '"' || *p == '\\' ? '\'' : (unsigned char)*p < 32 ? ' ' : *p;
    if (len > 0)
        dst[n] = '\0';
    return dst;
}

void log_event(int level, const char *event, const char *fields, ...)
{
    if (!log_enabled(level))
        return;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], event);
    if (fields && *fields && n < (int)sizeof(line) - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fields);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fields, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stdout); /* one write per line: lines never interleave */
    fflush(stdout);
}
