#include "rfc3339.h"

#include <stdio.h>

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar (Howard
 * Hinnant's days_from_civil), so that no libc time zone state is touched. */
static long long days_from_civil(long long y, int m, int d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(long long z, long long *y, int *m, int *d)
{
    z += 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* n digits at *p into *v; advances *p. */
static int digits(const char **p, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return -1;
        *v = *v * 10 + (**p - '0');
    }
    return 0;
}

static int expect(const char **p, char c)
{
    return *(*p)++ == c ? 0 : -1;
}

static int leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int rfc3339_parse(const char *text, long long *ms)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const char *p = text;
    int y, mo, d, h, mi, s, frac = 0;
    if (digits(&p, 4, &y) || expect(&p, '-') || digits(&p, 2, &mo) || expect(&p, '-') ||
        digits(&p, 2, &d))
        return -1;
    if (*p != 'T' && *p != 't' && *p != ' ')
        return -1;
    p++;
    if (digits(&p, 2, &h) || expect(&p, ':') || digits(&p, 2, &mi) || expect(&p, ':') ||
        digits(&p, 2, &s))
        return -1;
    if (*p == '.') {
        p++;
        int n = 0;
        for (; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 3)
                frac = frac * 10 + (*p - '0');
        if (n == 0)
            return -1;
        for (; n < 3; n++)
            frac *= 10;
    }
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 ||
        d > mdays[mo - 1] + (mo == 2 && leap(y)) || h > 23 || mi > 59 || s > 60)
        return -1;
    if (s == 60) { /* a leap second: the last moment of its minute */
        s = 59;
        frac = 999;
    }
    long long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om;
        if (digits(&p, 2, &oh) || expect(&p, ':') || digits(&p, 2, &om) || oh > 23 ||
            om > 59)
            return -1;
        offset = sign * (oh * 3600LL + om * 60LL);
    } else {
        return -1;
    }
    if (*p)
        return -1;
    long long secs =
        days_from_civil(y, mo, d) * 86400 + h * 3600LL + mi * 60LL + s - offset;
    if (secs < 0)
        return -1;
    *ms = secs * 1000 + frac;
    return 0;
}

int rfc3339_format(long long ms, char *out, size_t len)
{
    if (ms < 0)
        return -1;
    long long secs = ms / 1000, days = secs / 86400, y;
    int rem = (int)(secs % 86400), m, d, n;
    civil_from_days(days, &y, &m, &d);
    if (ms % 1000)
        n = snprintf(out, len, "%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d,
                     rem / 3600, rem / 60 % 60, rem % 60, (int)(ms % 1000));
    else
        n = snprintf(out, len, "%04lld-%02d-%02dT%02d:%02d:%02dZ", y, m, d, rem / 3600,
                     rem / 60 % 60, rem % 60);
    return n < 0 || (size_t)n >= len ? -1 : n;
}
