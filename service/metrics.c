/* /stats (JSON) and /metrics (Prometheus text format 0.0.4), both rendered
 * from the route table's counters, the inventory's and the lock's, plus stock
 * gauges of the SKUs this instance served lately (read at scrape time). */
#include <dirent.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "conns.h"
#include "log.h"
#include "metrics.h"
#include "version.h"

const int route_codes[ROUTE_NCODES] = {200, 201, 202, 204, 400, 401, 403, 404,
                                       405, 408, 409, 413, 422, 501, 503, 0};
const double route_bucket_s[ROUTE_NBUCKETS - 1] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

/* ---- SKUs seen: the stock gauges' subjects ------------------------------
 *
 * The order path only notes the SKU's name here (no Redis call); a scrape
 * reads the figures of at most METRICS_SKUS of them, the most recently used,
 * one pipelined read each. The table is small and a thread that keeps serving
 * the same SKU (the flash-sale case) touches the lock only every
 * SEEN_REFRESH_EVERY orders. */
#define METRICS_SKUS 32
#define SEEN_REFRESH_EVERY 256

static struct {
    pthread_mutex_t mu;
    char sku[METRICS_SKUS][INV_ID_MAX + 1];
    uint64_t used[METRICS_SKUS]; /* clock value of the last use; 0 = free slot */
    uint64_t clock;
} seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local char seen_last[INV_ID_MAX + 1];
static _Thread_local unsigned seen_last_skips;

void svc_metrics_sku_seen(const char *sku)
{
    if (seen_last_skips > 0 && strcmp(seen_last, sku) == 0) {
        seen_last_skips--;
        return;
    }
    pthread_mutex_lock(&seen.mu);
    int slot = -1, oldest = 0;
    for (int i = 0; i < METRICS_SKUS && slot < 0; i++) {
        if (seen.used[i] && strcmp(seen.sku[i], sku) == 0)
            slot = i;
        else if (seen.used[i] < seen.used[oldest])
            oldest = i;
    }
    if (slot < 0) {
        slot = oldest;
        snprintf(seen.sku[slot], sizeof(seen.sku[slot]), "%s", sku);
    }
    seen.used[slot] = ++seen.clock;
    pthread_mutex_unlock(&seen.mu);
    snprintf(seen_last, sizeof(seen_last), "%s", sku);
    seen_last_skips = SEEN_REFRESH_EVERY;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Copies the names of the SKUs seen, sorted; returns how many. */
static int seen_copy(char names[METRICS_SKUS][INV_ID_MAX + 1])
{
    int n = 0;
    pthread_mutex_lock(&seen.mu);
    for (int i = 0; i < METRICS_SKUS; i++)
        if (seen.used[i])
            memcpy(names[n++], seen.sku[i], INV_ID_MAX + 1);
    pthread_mutex_unlock(&seen.mu);
    qsort(names, (size_t)n, INV_ID_MAX + 1, cmp_name);
    return n;
}

/* ---- The inventory's counters as /stats and /metrics show them ---------
 *
 * Taken from INV_COUNTERS, in its order: the outcomes, the other order
 * counters (together /stats' "orders"), then the commit counters. */
struct inv_counter_view {
    const char *key, *metric, *help;
    size_t offset; /* of its field in struct inv_stats */
};

#define VIEW(field, key, metric, help)                                                   \
    {key, metric, help, offsetof(struct inv_stats, field)},
static const struct inv_counter_view inv_views[] = {INV_COUNTERS(VIEW)};
#undef VIEW

#define VIEW_ONE(field, key, metric, help) +1
enum {
    NOUTCOME_VIEWS = 0 INV_OUTCOME_COUNTERS(VIEW_ONE),
    NORDER_VIEWS = NOUTCOME_VIEWS INV_ORDER_COUNTERS(VIEW_ONE),
    NVIEWS = sizeof(inv_views) / sizeof(inv_views[0])
};
#undef VIEW_ONE

static uint64_t inv_view_value(const struct inv_stats *is,
                               const struct inv_counter_view *v)
{
    return *(const uint64_t *)((const char *)is + v->offset);
}

/* Sets key: value in obj for the counters inv_views[from..to-1]. */
static void inv_counters_json(json_t *obj, const struct inv_stats *is, int from, int to)
{
    for (int i = from; i < to; i++)
        json_object_set_new(obj, inv_views[i].key,
                            json_integer((json_int_t)inv_view_value(is, &inv_views[i])));
}

static json_t *lock_stats_json(struct svc_app *app)
{
    if (!app->lock)
        return json_null();
    struct lock_stats ls;
    lock_stats(app->lock, &ls);
    json_t *hist = json_object();
    for (int b = 0; b < LOCK_WAIT_BUCKETS; b++) {
        char le[32];
        if (b < LOCK_WAIT_BUCKETS - 1)
            snprintf(le, sizeof(le), "le_%lldus", (long long)lock_wait_bucket_us[b]);
        else
            snprintf(le, sizeof(le), "le_inf");
        json_object_set_new(hist, le, json_integer((json_int_t)ls.wait_buckets[b]));
    }
    json_t *stats = json_pack("{s:s}", "mode", lock_name(app->lock));
#define LOCK_STAT_JSON(field, kind, help)                                                \
    json_object_set_new(stats, #field, json_integer((json_int_t)ls.field));
    LOCK_STATS(LOCK_STAT_JSON)
#undef LOCK_STAT_JSON
    json_object_set_new(stats, "wait_histogram", hist);
    return stats;
}

json_t *svc_stats_json(struct svc_app *app, const struct svc_route_view *routes, size_t n)
{
    struct inv_stats is;
    inv_stats(app->inv, &is);
    json_t *requests = json_object();
    for (size_t i = 0; i <= n; i++) {
        const struct svc_route_view *r = &routes[i];
        json_t *codes = json_object();
        for (int c = 0; c < ROUTE_NCODES; c++) {
            uint64_t v = atomic_load(&r->counters->answers[c]);
            if (!v)
                continue;
            char code[8];
            snprintf(code, sizeof(code), "%d", route_codes[c]);
            json_object_set_new(codes, route_codes[c] ? code : "other",
                                json_integer((json_int_t)v));
        }
        json_object_set_new(requests, r->name, codes);
    }
    json_t *orders = json_object();
    inv_counters_json(orders, &is, 0, NORDER_VIEWS);
    struct inv_batch_stats bs;
    inv_batch_stats(app->inv, &bs);
    json_t *batches =
        json_pack("{s:I, s:I, s:I, s:I, s:i}", "holds", (json_int_t)bs.holds, "orders",
                  (json_int_t)bs.orders, "queued", (json_int_t)bs.queued, "queues",
                  (json_int_t)bs.queues, "most", app->cfg->batch);
    json_t *stats = json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "instance_id",
                              orderid_worker(app->ids), "lock_mode", app->cfg->lock_mode,
                              "requests", requests, "orders", orders, "batches", batches,
                              "lock", lock_stats_json(app));
    inv_counters_json(stats, &is, NORDER_VIEWS, NVIEWS);
    json_object_set_new(stats, "inflight", json_integer(atomic_load(&app->inflight)));
    json_object_set_new(stats, "draining", json_boolean(atomic_load(&app->draining)));
    if (app->sink) {
        struct svc_sink_stats st;
        svc_sink_stats(app->sink, &st);
        json_object_set_new(
            stats, "sink",
            json_pack("{s:I, s:f, s:b, s:I, s:I, s:I, s:I, s:I, s:I}", "lag_events",
                      (json_int_t)st.lag_events, "lag_seconds", st.lag_seconds, "up",
                      st.up, "events", (json_int_t)st.events, "batches",
                      (json_int_t)st.batches, "claimed", (json_int_t)st.claimed, "errors",
                      (json_int_t)st.errors, "skipped", (json_int_t)st.skipped,
                      "dead_letters", (json_int_t)st.dead_letters));
    }
    return stats;
}

/* ---- /metrics: one writer per metric family ----------------------------- */

static void family(FILE *f, const char *name, const char *help, const char *type)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    family(f, name, help, "counter");
    fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(FILE *f, const char *name, const char *help, long long v)
{
    family(f, name, help, "gauge");
    fprintf(f, "%s %lld\n", name, v);
}

/* One histogram's series: labels is "" or `key="value"`; buckets holds
 * non-cumulative counts, bounds_s the upper bounds of all but the last
 * bucket (+Inf). */
static void histogram_series(FILE *f, const char *name, const char *labels,
                             const double *bounds_s, const uint64_t *buckets,
                             int nbuckets, double sum_s)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    for (int b = 0; b < nbuckets; b++) {
        cum += buckets[b];
        if (b < nbuckets - 1)
            fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds_s[b],
                    (unsigned long long)cum);
        else
            fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                    (unsigned long long)cum);
    }
    if (labels[0])
        fprintf(f, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels, sum_s, name,
                labels, (unsigned long long)cum);
    else
        fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, sum_s, name,
                (unsigned long long)cum);
}

/* A counter family by route and status, unmatched requests too: of each
 * route's counters, the array at offset field (ROUTE_NCODES of them, by
 * route_codes), the status labelled status_label. */
static void by_route_status(FILE *f, const char *name, const char *help,
                            const char *status_label, size_t field,
                            const struct svc_route_view *routes, size_t n)
{
    family(f, name, help, "counter");
    for (size_t i = 0; i <= n; i++) {
        const _Atomic uint64_t *v =
            (const _Atomic uint64_t *)((const char *)routes[i].counters + field);
        for (int c = 0; c < ROUTE_NCODES; c++) {
            char code[8];
            snprintf(code, sizeof(code), "%d", route_codes[c]);
            fprintf(f, "%s{route=\"%s\",%s=\"%s\"} %llu\n", name, routes[i].name,
                    status_label, route_codes[c] ? code : "other",
                    (unsigned long long)atomic_load(&v[c]));
        }
    }
}

/* seckill_http_request_duration_seconds: the routes' (not unmatched). */
static void http_durations(FILE *f, const struct svc_route_view *routes, size_t n)
{
    const char *name = "seckill_http_request_duration_seconds";
    family(f, name, "Time to answer, by route.", "histogram");
    for (size_t i = 0; i < n; i++) {
        const struct svc_route_counters *c = routes[i].counters;
        uint64_t buckets[ROUTE_NBUCKETS];
        for (int b = 0; b < ROUTE_NBUCKETS; b++)
            buckets[b] = atomic_load(&c->duration_buckets[b]);
        char labels[64];
        snprintf(labels, sizeof(labels), "route=\"%s\"", routes[i].name);
        histogram_series(f, name, labels, route_bucket_s, buckets, ROUTE_NBUCKETS,
                         (double)atomic_load(&c->duration_sum_us) / 1e6);
    }
}

/* seckill_orders_total: order outcomes. */
static void order_outcomes(FILE *f, const struct inv_stats *is)
{
    family(f, "seckill_orders_total", "Order outcomes.", "counter");
    for (int i = 0; i < NOUTCOME_VIEWS; i++)
        fprintf(f, "seckill_orders_total{outcome=\"%s\"} %llu\n", inv_views[i].key,
                (unsigned long long)inv_view_value(is, &inv_views[i]));
}

/* seckill_batch_*: the loops' group commits and their queues. */
static void batches(FILE *f, const struct inv *inv)
{
    struct inv_batch_stats bs;
    inv_batch_stats(inv, &bs);
    counter(f, "seckill_batch_holds_total",
            "Lock holds that served a batch of queued orders.", bs.holds);
    counter(f, "seckill_batch_orders_total", "Orders those holds took up.", bs.orders);
    gauge(f, "seckill_batch_queued", "Orders waiting for their batch now.",
          (long long)bs.queued);
}

/* The counter of its own that the inventory's counter at `offset` in struct
 * inv_stats has on /metrics (INV_COUNTERS' metric, not NULL). */
static void inv_counter(FILE *f, const struct inv_stats *is, size_t offset)
{
    for (int i = 0; i < NVIEWS; i++)
        if (inv_views[i].offset == offset && inv_views[i].metric)
            counter(f, inv_views[i].metric, inv_views[i].help,
                    inv_view_value(is, &inv_views[i]));
}
#define STATS_COUNTER(f, is, field) inv_counter(f, is, offsetof(struct inv_stats, field))

/* The order counters besides the outcomes, the group commits' among them, in the
 * order /metrics always had (not INV_COUNTERS'). */
static void order_counters(FILE *f, const struct svc_app *app, const struct inv_stats *is)
{
    STATS_COUNTER(f, is, spilled);
    batches(f, app->inv);
    STATS_COUNTER(f, is, sold_out_local);
    STATS_COUNTER(f, is, unacked);
    STATS_COUNTER(f, is, paid);
    STATS_COUNTER(f, is, cancelled);
    STATS_COUNTER(f, is, expired);
    STATS_COUNTER(f, is, units_returned);
    STATS_COUNTER(f, is, id_collisions);
    STATS_COUNTER(f, is, fenced_off);
    STATS_COUNTER(f, is, malformed);
    STATS_COUNTER(f, is, sweep_malformed);
    STATS_COUNTER(f, is, sweep_deferred);
}

/* seckill_lock_wait_seconds. */
static void lock_waits(FILE *f, const struct lock_stats *ls)
{
    const char *name = "seckill_lock_wait_seconds";
    double bounds_s[LOCK_WAIT_BUCKETS - 1];
    for (int b = 0; b < LOCK_WAIT_BUCKETS - 1; b++)
        bounds_s[b] = (double)lock_wait_bucket_us[b] / 1e6;
    family(f, name, "Time spent waiting for a segment lock.", "histogram");
    histogram_series(f, name, "", bounds_s, ls->wait_buckets, LOCK_WAIT_BUCKETS,
                     (double)ls->wait_sum_us / 1e6);
}

/* seckill_lock_*: the lock's counters (none in atomic mode). */
static void locks(FILE *f, struct lock *lock)
{
    if (!lock)
        return;
    struct lock_stats ls;
    lock_stats(lock, &ls);
    const struct {
        const char *field, *help;
        lock_stat_kind kind;
        uint64_t v;
    } figures[] = {
#define LOCK_STAT_FIGURE(field, kind, help) {#field, help, kind, ls.field},
        LOCK_STATS(LOCK_STAT_FIGURE)
#undef LOCK_STAT_FIGURE
    };
    for (size_t i = 0; i < sizeof(figures) / sizeof(figures[0]); i++) {
        char name[64];
        if (figures[i].kind == LOCK_STAT_COUNTER) {
            snprintf(name, sizeof(name), "seckill_lock_%s_total", figures[i].field);
            counter(f, name, figures[i].help, figures[i].v);
        } else if (figures[i].kind == LOCK_STAT_GAUGE) {
            snprintf(name, sizeof(name), "seckill_lock_%s", figures[i].field);
            gauge(f, name, figures[i].help, (long long)figures[i].v);
        }
    }
    lock_waits(f, &ls);
}

/* seckill_inflight_requests, seckill_draining, seckill_redis_durable,
 * seckill_ready, seckill_redis_evicting. */
static void lifecycle(FILE *f, struct svc_app *app)
{
    gauge(f, "seckill_inflight_requests", "Requests being answered now.",
          atomic_load(&app->inflight));
    gauge(f, "seckill_draining", "1 while the instance drains for shutdown.",
          atomic_load(&app->draining) != 0);
    gauge(f, "seckill_redis_durable",
          "1 when an acknowledged order survives a crash of the data Redis (AOF with "
          "appendfsync always, or replicas acknowledge each order: "
          "--min-replicas-acked), else 0, also when its settings could not be read.",
          svc_durability_durable(app->durability) || app->replicas_acked > 0);
    gauge(f, "seckill_ready",
          "1 when /readyz answers 200: not draining, the order-id lease held, the data "
          "Redis answering with a policy that does not evict.",
          !atomic_load(&app->draining) &&
              (!app->lease || orderid_lease_valid(app->lease)) &&
              svc_health_ok(app->health) && !svc_durability_refused(app->durability, NULL, 0));
    gauge(f, "seckill_redis_evicting",
          "1 when the data Redis's maxmemory-policy is not noeviction: it may evict "
          "orders and locks, and the instance is not ready.",
          svc_durability_refused(app->durability, NULL, 0));
}

/* The sink's families (--postgres): its lag, what it wrote, its failures. */
/* The waiting rooms' figures, one series a room (roompace.h): buffered
 * first, since a family's lines come together. */
struct room_lines {
    FILE *waiting, *admitted, *live, *lag;
    char *text[4];
    size_t len[4];
    long long now;
};

static void room_line(void *arg, const char *sku, const struct inv_room_view *v)
{
    struct room_lines *l = arg;
    fprintf(l->waiting, "seckill_room_waiting{sku=\"%s\"} %lld\n", sku, v->waiting);
    fprintf(l->admitted, "seckill_room_admitted_total{sku=\"%s\"} %lld\n", sku,
            v->admitted);
    fprintf(l->live, "seckill_room_passes_live{sku=\"%s\"} %lld\n", sku, v->live);
    double lag = v->news_ms > 0 && l->now > v->news_ms ? (l->now - v->news_ms) / 1e3 : 0;
    fprintf(l->lag, "seckill_room_pacer_lag_seconds{sku=\"%s\"} %.3f\n", sku, lag);
}

static void room_figures(FILE *f, struct svc_app *app)
{
    if (!app->rooms)
        return;
    struct room_lines l = {.now = inv_rooms_now_ms(app->rooms)};
    FILE **files[4] = {&l.waiting, &l.admitted, &l.live, &l.lag};
    for (int i = 0; i < 4; i++)
        *files[i] = open_memstream(&l.text[i], &l.len[i]);
    if (l.waiting && l.admitted && l.live && l.lag)
        inv_rooms_each(app->rooms, room_line, &l);
    static const char *const fam[4][3] = {
        {"seckill_room_waiting",
         "Places in a waiting room's queue not admitted yet, as "
         "its pacer last published (by SKU).",
         "gauge"},
        {"seckill_room_admitted_total", "Places a waiting room admitted (by SKU).",
         "counter"},
        {"seckill_room_passes_live",
         "A waiting room's passes unexpired and unused, as its "
         "pacer last counted (by SKU).",
         "gauge"},
        {"seckill_room_pacer_lag_seconds",
         "Age of the last news of a room's pacer this instance read (a heartbeat a "
         "second: "
         "above about 1 s the pacer or this instance's reads are late).",
         "gauge"},
    };
    for (int i = 0; i < 4; i++) {
        if (*files[i])
            fclose(*files[i]);
        family(f, fam[i][0], fam[i][1], fam[i][2]);
        if (l.text[i])
            fputs(l.text[i], f);
        free(l.text[i]);
    }
    family(f, "seckill_room_passes_refused_total",
           "Orders of a waiting room's SKU refused 403 not_admitted, by reason.",
           "counter");
    for (int st = 1; st < ROOM_PASS_NSTATUS; st++)
        fprintf(f, "seckill_room_passes_refused_total{reason=\"%s\"} %llu\n",
                room_pass_status_name((room_pass_status)st),
                (unsigned long long)atomic_load(&app->passes_refused[st]));
    gauge(f, "seckill_room_pacer",
          "1 while this instance holds the waiting rooms' pacer lease.",
          inv_rooms_pacing(app->rooms));
}

static void sink_figures(FILE *f, struct svc_app *app)
{
    if (!app->sink)
        return;
    struct svc_sink_stats st;
    svc_sink_stats(app->sink, &st);
    gauge(f, "seckill_sink_lag_events",
          "Order changes in the outbox streams not yet in PostgreSQL (every stream, as "
          "this instance last measured, once a second).",
          (long long)st.lag_events);
    family(f, "seckill_sink_lag_seconds",
           "Age of the oldest order change not yet in PostgreSQL (0: none).", "gauge");
    fprintf(f, "seckill_sink_lag_seconds %.3f\n", st.lag_seconds);
    gauge(f, "seckill_sink_up", "1 when PostgreSQL took this sink's last transaction.",
          st.up);
    counter(f, "seckill_sink_events_total",
            "Order changes this instance's sink wrote to PostgreSQL (committed).",
            st.events);
    counter(f, "seckill_sink_batches_total",
            "Transactions this instance's sink committed in PostgreSQL.", st.batches);
    counter(f, "seckill_sink_claimed_total",
            "Order changes this sink claimed from a consumer that left them pending.",
            st.claimed);
    counter(f, "seckill_sink_errors_total",
            "Transactions of this sink that failed (tried again).", st.errors);
    counter(f, "seckill_sink_skipped_total",
            "Stream entries that were no event of the outbox scripts: acknowledged, not "
            "written (logged, kept as dead letters).",
            st.skipped);
    counter(f, "seckill_sink_dead_letters_total",
            "Events this sink could not store, put in seckill_dead_letters with their "
            "error and acknowledged: the skipped entries and the events PostgreSQL "
            "refused for their data.",
            st.dead_letters);
}

/* seckill_build_info: what --version says, as a constant 1 with labels. */
static void build_info(FILE *f)
{
    family(f, "seckill_build_info",
           "The version and commit of this build (as seckill --version says), always 1.",
           "gauge");
    fprintf(f, "seckill_build_info{version=\"%s\",commit=\"%s\"} 1\n", svc_version(),
            svc_commit());
}

/* This process's fields of /proc/self/stat from the state on (the third
 * field; what precedes it, the name, may hold spaces): fields[i] is field i+3.
 * How many were read, 0 on failure. */
static int proc_stat_fields(unsigned long long fields[22])
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return 0;
    p += 3; /* the state, a letter */
    fields[0] = 0;
    int i = 1;
    for (p = strchr(p, ' '); p && i < 22; i++)
        fields[i] = strtoull(p, &p, 10);
    return i;
}

/* The boot time, seconds since the epoch (/proc/stat btime); 0 if unknown. */
static long long boot_time_s(void)
{
    char line[256];
    long long btime = 0;
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &btime) == 1)
            break;
    fclose(f);
    return btime;
}

/* The process_* families as Prometheus client libraries export them on Linux
 * (client_golang's process collector): descriptors, memory, CPU, start time.
 * A figure that cannot be read is left out. */
static void process_figures(FILE *f)
{
    int open_fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            open_fds += e->d_name[0] != '.';
        closedir(d);
        gauge(f, "process_open_fds", "Number of open file descriptors.",
              open_fds - 1 /* the one reading the directory */);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        gauge(f, "process_max_fds", "Maximum number of open file descriptors.",
              (long long)rl.rlim_cur);
    long long size_pages = 0, resident_pages = 0, page = sysconf(_SC_PAGESIZE);
    FILE *statm = fopen("/proc/self/statm", "re");
    if (statm) {
        if (fscanf(statm, "%lld %lld", &size_pages, &resident_pages) == 2) {
            gauge(f, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                  size_pages * page);
            gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.",
                  resident_pages * page);
        }
        fclose(statm);
    }
    unsigned long long st[22];
    double tick = (double)sysconf(_SC_CLK_TCK);
    long long btime = boot_time_s();
    if (proc_stat_fields(st) == 22 && tick > 0) {
        /* fields 14, 15: utime, stime; 22: starttime, in ticks since boot */
        family(f, "process_cpu_seconds_total",
               "Total user and system CPU time spent in seconds.", "counter");
        fprintf(f, "process_cpu_seconds_total %.2f\n", (double)(st[11] + st[12]) / tick);
        if (btime > 0) {
            family(f, "process_start_time_seconds",
                   "Start time of the process since unix epoch in seconds.", "gauge");
            fprintf(f, "process_start_time_seconds %.2f\n",
                    (double)btime + (double)st[19] / tick);
        }
    }
}

struct sku_figures {
    const char *sku;
    long long initial, remaining, sold, oversold, orders;
};

/* Reads the figures of the SKUs seen (names: filled) into figs, *nfigs of
 * them. A SKU that no longer exists is left out; the first failed read ends
 * the reading (Redis is down: the scrape must not wait a timeout per SKU).
 * Returns 1 when every read succeeded, else 0. */
static int sku_figures_read(struct inv_session *inv,
                            char names[METRICS_SKUS][INV_ID_MAX + 1],
                            struct sku_figures figs[METRICS_SKUS], int *nfigs)
{
    int n = inv ? seen_copy(names) : 0;
    *nfigs = 0;
    if (!n)
        return 1;
    struct inv_sku_report *report = malloc(sizeof(*report));
    if (!report)
        return 0;
    int read_ok = 1;
    for (int i = 0; i < n; i++) {
        inv_status st = inv_sku_get(inv, names[i], report);
        if (st == INV_NOT_FOUND)
            continue;
        if (st != INV_OK) {
            read_ok = 0;
            break;
        }
        figs[(*nfigs)++] =
            (struct sku_figures){names[i],     report->initial,  report->remaining,
                                 report->sold, report->oversold, report->orders};
    }
    free(report);
    return read_ok;
}

/* seckill_sku_*: the stock gauges, one read per SKU seen;
 * seckill_sku_stock_read_ok (one series, no sku label: it is there also before
 * any SKU was seen, and the reads stop at the first that fails, leaving the
 * others unknown) says 0 when a read failed. */
static void sku_gauges(FILE *f, struct inv_session *inv)
{
    char names[METRICS_SKUS][INV_ID_MAX + 1];
    struct sku_figures figs[METRICS_SKUS];
    int nfigs;
    int read_ok = sku_figures_read(inv, names, figs, &nfigs);
    const struct {
        const char *name, *help;
        size_t offset;
    } gauges[] = {
        {"seckill_sku_initial", "Initial stock of the SKU since its last reset.",
         offsetof(struct sku_figures, initial)},
        {"seckill_sku_remaining", "Units left in all segments of the SKU.",
         offsetof(struct sku_figures, remaining)},
        {"seckill_sku_sold", "Units sold since the SKU's last reset (all instances).",
         offsetof(struct sku_figures, sold)},
        {"seckill_sku_oversold", "Units sold beyond the initial stock.",
         offsetof(struct sku_figures, oversold)},
        {"seckill_sku_orders",
         "Orders placed since the SKU's last reset (all instances).",
         offsetof(struct sku_figures, orders)},
    };
    for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
        char help[256];
        snprintf(help, sizeof(help),
                 "%s Read from Redis at scrape time, for the %d SKUs this instance "
                 "served most recently.",
                 gauges[g].help, METRICS_SKUS);
        family(f, gauges[g].name, help, "gauge");
        for (int i = 0; i < nfigs; i++)
            fprintf(f, "%s{sku=\"%s\"} %lld\n", gauges[g].name, figs[i].sku,
                    *(const long long *)((const char *)&figs[i] + gauges[g].offset));
    }
    gauge(f, "seckill_sku_stock_read_ok",
          "1 when the stock gauges of every SKU seen were read from Redis in this "
          "scrape, 0 when Redis failed.",
          read_ok);
}

char *svc_metrics_text(struct svc_app *app, struct inv_session *inv,
                       const struct svc_route_view *routes, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    struct inv_stats is;
    inv_stats(app->inv, &is);
    by_route_status(f, "seckill_http_requests_total", "HTTP answers by route and status.",
                    "code", offsetof(struct svc_route_counters, answers), routes, n);
    /* answers made but never delivered whole: the connection closed first */
    by_route_status(f, "seckill_answers_undelivered_total",
                    "Answers the client never got whole (its connection closed first), "
                    "by route and status; a 201 here is an order placed and not "
                    "acknowledged.",
                    "status", offsetof(struct svc_route_counters, undelivered), routes,
                    n);
    counter(f, "seckill_request_timeouts_total",
            "Requests whose headers and body did not arrive whole within "
            "--request-timeout-ms: answered 408 and closed.",
            conns_timeouts_total());
    counter(f, "seckill_connections_refused_total",
            "Connections shut down at accept: their client address already had "
            "--max-conns-per-ip open.",
            conns_refused_total());
    http_durations(f, routes, n);
    order_outcomes(f, &is);
    order_counters(f, app, &is);
    locks(f, app->lock);
    lifecycle(f, app);
    sink_figures(f, app);
    room_figures(f, app);
    build_info(f);
    counter(f, "seckill_log_lines_suppressed_total",
            "Log lines dropped by a rate limit (libmicrohttpd's warnings, e.g. one per "
            "aborted connection, at most 5 a second); the next line written says how "
            "many as suppressed=N.",
            log_suppressed_total());
    sku_gauges(f, inv);
    process_figures(f);
    fclose(f);
    return buf;
}
