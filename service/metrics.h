/* metrics: the per-route answer counters, the SKUs seen lately, and the
 * renderers of /stats (JSON) and /metrics (Prometheus text format 0.0.4).
 *
 * The dependency is one-way: routes calls metrics (to note a SKU, to render)
 * and lends it its table as read-only data (struct svc_route_view); metrics
 * knows nothing of routes. */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "app.h"

/* Status codes counted per route; anything else counts as "other". */
#define ROUTE_NCODES 16
extern const int route_codes[ROUTE_NCODES]; /* last entry 0 = other */
#define ROUTE_NBUCKETS 13
extern const double route_bucket_s[ROUTE_NBUCKETS - 1]; /* last bucket +Inf */

/* One route's answers: by status (route_codes) and a duration histogram
 * (route_bucket_s). Updated with relaxed atomics from any thread. */
struct svc_route_counters {
    _Atomic uint64_t answers[ROUTE_NCODES];
    _Atomic uint64_t duration_buckets[ROUTE_NBUCKETS];
    _Atomic uint64_t duration_sum_us;
    _Atomic uint64_t undelivered[ROUTE_NCODES]; /* answers the client never got */
};

/* What the renderers read of one route: its label and its counters. */
struct svc_route_view {
    const char *name;
    const struct svc_route_counters *counters;
};

/* The renderers. routes[0..n-1] are the route table's, routes[n] the
 * pseudo-route of requests that matched none (counted, not timed). */

/* /stats: this instance's counters as a new JSON object (NULL out of memory). */
json_t *svc_stats_json(struct svc_app *app, const struct svc_route_view *routes,
                       size_t n);
/* /metrics: the text, malloc'ed (the caller frees it), or NULL out of memory.
 * The stock gauges are read through inv (the scraping thread's session; NULL
 * leaves them out). */
char *svc_metrics_text(struct svc_app *app, struct inv_session *inv,
                       const struct svc_route_view *routes, size_t n);

/* Notes that sku exists and was just used, for the stock gauges. Cheap, no
 * Redis call: call it from the order path. */
void svc_metrics_sku_seen(const char *sku);

#endif
