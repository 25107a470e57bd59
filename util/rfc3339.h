/* rfc3339: RFC 3339 date-times (the sale window's starts_at and ends_at) to and
 * from milliseconds since the Unix epoch. Pure functions, no locale, no TZ. */
#ifndef SECKILL_RFC3339_H
#define SECKILL_RFC3339_H

#include <stddef.h>

/* "2026-11-27T15:00:00Z", "2026-11-27T15:00:00.250+01:00", 'T' or 't' or ' ',
 * 'Z' or 'z' or a numeric offset; years 1970..9999, a leap second (:60) read
 * as :59.999. Fractions beyond milliseconds are cut. Returns 0 and *ms, or -1
 * when text is not such a date-time (nothing trails it). */
int rfc3339_parse(const char *text, long long *ms);

/* Writes ms (>= 0) as UTC, "2026-11-27T15:00:00Z", with ".250" when ms has a
 * fraction. Returns the length, or -1 when it does not fit in len. */
int rfc3339_format(long long ms, char *out, size_t len);

#define RFC3339_MAX 32 /* room for what rfc3339_format writes */

#endif
