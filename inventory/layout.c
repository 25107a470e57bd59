/* layout.c: what this process knows of a SKU's segments (inv_impl.h, struct
 * sku_layout), and routing a ticket by it. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "inv_impl.h"

/* The set of sku's entry: LAYOUT_WAYS entries. */
static struct sku_layout *layout_set(struct inv *inv, const char *sku)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = sku; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    return &inv->layouts[h % (LAYOUT_SLOTS / LAYOUT_WAYS) * LAYOUT_WAYS];
}

/* The entry of sku, or NULL; with layout_mu held. */
static struct sku_layout *layout_find(struct inv *inv, const char *sku)
{
    struct sku_layout *set = layout_set(inv, sku);
    for (int i = 0; i < LAYOUT_WAYS; i++)
        if (strcmp(set[i].sku, sku) == 0)
            return &set[i];
    return NULL;
}

/* The entry sku is to take: its own, an empty one of its set, else the set's
 * least recently used; with layout_mu held. */
static struct sku_layout *layout_take(struct inv *inv, const char *sku)
{
    struct sku_layout *l = layout_find(inv, sku);
    if (l)
        return l;
    struct sku_layout *set = layout_set(inv, sku);
    l = &set[0];
    for (int i = 0; i < LAYOUT_WAYS && l->sku[0]; i++)
        if (!set[i].sku[0] || set[i].used < l->used)
            l = &set[i];
    return l;
}

/* Copies sku's layout to *out; 0, or -1 when not known. */
int inv_layout_get(struct inv *inv, const char *sku, struct sku_layout *out)
{
    pthread_mutex_lock(&inv->layout_mu);
    struct sku_layout *l = layout_find(inv, sku);
    if (l) {
        l->used = ++inv->layout_clock;
        *out = *l;
    }
    pthread_mutex_unlock(&inv->layout_mu);
    return l ? 0 : -1;
}

/* Learns sku's layout; what was known of its empty segments stays while the
 * epoch does. */
void inv_layout_put(struct inv *inv, const char *sku, int segments, long long initial,
                    const char *epoch, const int *genes, int nshards)
{
    pthread_mutex_lock(&inv->layout_mu);
    struct sku_layout *l = layout_take(inv, sku);
    if (strcmp(l->sku, sku) != 0 || strcmp(l->epoch, epoch) != 0 ||
        l->segments != segments || l->nshards != nshards) {
        snprintf(l->sku, sizeof(l->sku), "%s", sku);
        l->segments = segments;
        l->initial = initial;
        snprintf(l->epoch, sizeof(l->epoch), "%s", epoch);
        l->nempty = 0;
        memset(l->empty, 0, sizeof(l->empty));
        l->nshards = nshards;
        for (int i = 0; i < nshards; i++)
            l->genes[i] = (uint8_t)genes[i];
    }
    l->used = ++inv->layout_clock;
    pthread_mutex_unlock(&inv->layout_mu);
}

/* Notes segment seg of sku as found empty in epoch (ignored if the layout
 * moved on). */
void inv_layout_mark_empty(struct inv *inv, const char *sku, const char *epoch, int seg)
{
    pthread_mutex_lock(&inv->layout_mu);
    struct sku_layout *l = layout_find(inv, sku);
    uint64_t bit = UINT64_C(1) << (seg % 64);
    if (l && strcmp(l->epoch, epoch) == 0 && seg < l->segments &&
        !(l->empty[seg / 64] & bit)) {
        l->empty[seg / 64] |= bit;
        l->nempty++;
    }
    pthread_mutex_unlock(&inv->layout_mu);
}

/* The n-th (from 0) segment of l not known empty; l has more than n. */
static int layout_nth_stocked(const struct sku_layout *l, int n)
{
    for (int w = 0;; w++) {
        uint64_t stocked = ~l->empty[w];
        if (w == l->segments / 64)
            stocked &= (UINT64_C(1) << (l->segments % 64)) - 1;
        int c = __builtin_popcountll(stocked);
        if (n < c) {
            for (;; stocked &= stocked - 1)
                if (n-- == 0)
                    return w * 64 + __builtin_ctzll(stocked);
        }
        n -= c;
    }
}

void inv_layout_forget(struct inv *inv, const char *sku)
{
    pthread_mutex_lock(&inv->layout_mu);
    struct sku_layout *l = layout_find(inv, sku);
    if (l)
        l->sku[0] = '\0';
    pthread_mutex_unlock(&inv->layout_mu);
}

long long inv_segment_bound(struct inv *inv, const char *sku, int seg)
{
    struct sku_layout l;
    if (inv_layout_get(inv, sku, &l) != 0 || seg < 0 || seg >= l.segments)
        return -1;
    if (l.empty[seg / 64] & (UINT64_C(1) << (seg % 64)))
        return 0;
    return seg_initial(l.initial, l.segments, seg);
}

/* Routes t within its home segment's shard (a cluster's): segment i is in
 * shard i % l->nshards. When home is known empty, another segment of the
 * shard not known empty, chosen by the routing number; home when there is
 * none (the shard's commit answers then). */
static void route_in_shard(const struct sku_layout *l, struct inv_ticket *t,
                           uint32_t route)
{
    int shard = t->home % l->nshards, stocked = 0;
    t->gene = l->genes[shard];
    t->order.id = orderid_with_gene(t->order.id, t->gene);
    for (int i = shard; i < l->segments; i += l->nshards)
        stocked += !(l->empty[i / 64] & (UINT64_C(1) << (i % 64)));
    if (!(l->empty[t->home / 64] & (UINT64_C(1) << (t->home % 64))) || stocked == 0)
        return;
    int n = (int)(route % (uint32_t)stocked);
    for (int i = shard; i < l->segments; i += l->nshards)
        if (!(l->empty[i / 64] & (UINT64_C(1) << (i % 64))) && n-- == 0)
            t->seg = i;
}

int inv_ticket_route(struct inv *inv, struct inv_ticket *t)
{
    struct sku_layout l;
    if (inv_layout_get(inv, t->sku, &l) != 0)
        return t->home = t->seg = -1;
    uint32_t route = seg_route(t->user_id);
    t->home = t->seg = (int)(route % (uint32_t)l.segments);
    if (l.nshards > 0)
        route_in_shard(&l, t, route);
    else if (l.empty[t->home / 64] & (UINT64_C(1) << (t->home % 64)) &&
             l.nempty < l.segments)
        t->seg = layout_nth_stocked(&l, (int)(route % (uint32_t)(l.segments - l.nempty)));
    return t->seg;
}
