/* log: one event per line on stdout, key=value. */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Notes the file stdout goes to, when it is one, for log_reopen. Call once at
 * start, before any thread. */
void log_open(void);
/* Opens the file noted by log_open again, by its name, as stdout (logrotate
 * renamed it, then sent SIGHUP): 1 done, 0 stdout is no file (nothing to
 * reopen), -1 it could not be opened (errno; the log goes on where it was). */
int log_reopen(void);
/* The file noted by log_open, "" for none. */
const char *log_file(void);
/* A budget of lines per second for one kind of event, so that a flood of it
 * (a warning per aborted connection) cannot flood the log. Static, any
 * thread: LOG_LIMIT_INIT(n) allows n lines a second. */
struct log_limit {
    pthread_mutex_t mu;
    int per_second;
    int64_t window_us; /* start of the second being counted */
    int used;          /* lines written in it */
    uint64_t dropped;  /* dropped since the last line written */
};
#define LOG_LIMIT_INIT(n)                                                                \
    {                                                                                    \
        PTHREAD_MUTEX_INITIALIZER, (n), 0, 0, 0                                          \
    }

/* 1 when a line may be written now: *suppressed is then how many were dropped
 * since the last one written, for that line to say. 0: drop it (counted,
 * here and in log_suppressed_total). */
int log_limit_take(struct log_limit *l, uint64_t *suppressed);
/* Lines dropped by every limit since the start (/metrics). */
uint64_t log_suppressed_total(void);

/* Parses "debug", "info", "warn", "error"; -1 when unknown. */
int log_level_parse(const char *text);
/* The name of a level, as log_level_parse takes it. */
const char *log_level_name(int level);
void log_set_level(int level);
int log_enabled(int level);
/* Copies text into dst (of size len, truncated) fit for a quoted value,
 * key="...": '"' and '\' become '\'', control characters a blank, which
 * would break the one-line key=value format. Returns dst. */
char *log_quote(char *dst, size_t len, const char *text);
/* Writes "ts=<iso8601> level=<l> event=<event> <fields>\n"; fields is a
 * printf format for the rest of the line, already key=value. */
void log_event(int level, const char *event, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

#endif
