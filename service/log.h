/* log: one event per line on stdout, key=value. */
#ifndef SECKILL_LOG_H
#define SECKILL_LOG_H

enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Parses "debug", "info", "warn", "error"; -1 when unknown. */
int log_level_parse(const char *text);
void log_set_level(int level);
int log_enabled(int level);
/* Writes "ts=<iso8601> level=<l> event=<event> <fields>\n"; fields is a
 * printf format for the rest of the line, already key=value. */
void log_event(int level, const char *event, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

#endif
