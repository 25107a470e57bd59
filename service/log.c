#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int log_threshold = LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

int log_level_parse(const char *text)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(text, level_names[i]) == 0)
            return i;
    return -1;
}

void log_set_level(int level)
{
    log_threshold = level;
}

int log_enabled(int level)
{
    return level >= log_threshold;
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
