/* roompace: the waiting rooms' pacer, and what this instance knows of each
 * room (issue 48; docs/api.md, "Waiting room").
 *
 * A duty on loop 0 (as the reservations' sweep): every INV_ROOM_TICK_MS one
 * command (room_lease.lua) takes or renews the pacer's lease
 * (INV_ROOM_LEASE_KEY, SET NX PX on Redis's clock) and reads the rooms'
 * registry (INV_ROOMS_KEY); the holder then runs room_pace.lua for each room
 * (admits the next places, publishes an entry in the room's news stream);
 * and every instance reads each room's news that it has not seen (XRANGE),
 * one read a room a tick. A poll is then answered from this memory, with no
 * Redis command (inv_rooms_view), and an order's pass is checked against the
 * rooms known here (inv_rooms_spec) and Redis's clock as known here
 * (inv_rooms_now_ms).
 *
 * On a Redis Cluster the duty reads the registry and the news (in the slot of
 * each {sku}: the directory's master) but does not pace: room_pace.lua reads
 * the SKU's meta and buyers, which live in its shards there (not built yet).
 *
 * Abandoned places: a poll of a waiting place is noted here (inv_rooms_polled,
 * no Redis command) and every tick one ZADD per room tells Redis the places
 * polled (the room's seen set); the pacer takes out of the queue a place not
 * admitted whose owner has not joined or polled for INV_ROOM_ABANDON_MS, and
 * its news names the places skipped, which each instance keeps (a poll of one
 * answers expired: join again, at the back).
 *
 * Thread safety: the duty runs on loop 0; the readers (polls, orders,
 * /metrics) on any thread, under the table's read lock. */
#ifndef SECKILL_ROOMPACE_H
#define SECKILL_ROOMPACE_H

#include "inventory.h"
#include "rconn.h"

#define INV_ROOM_TICK_MS 100
/* The pacer's lease: a dead pacer's successor paces within this and a tick.
 * Short enough that the one second's burst the tokens bank covers the whole
 * gap (800 ms + a tick of 100 ms): the rate loses nothing when the pacer dies
 * (loadtest/room.sh --kill-pacer; a longer gap would lose its excess, as
 * admitting it after would break invariant 12's one second's burst). */
#define INV_ROOM_LEASE_MS 800
#define INV_ROOM_LEASE_KEY "seckill:{rooms}:pacer" /* in INV_ROOMS_KEY's slot */
#define INV_ROOMS_MAX 256 /* rooms known at once; more are not served */
/* A place not polled for this long is abandoned (5 times the longest
 * poll_after_ms the service gives, 2 s: a page that polls as told is never
 * skipped, one that stopped is within 10 s and a tick). */
#define INV_ROOM_ABANDON_MS 10000
/* Polls of a room one instance notes a tick at most (more are not noted:
 * their places are noted at their next poll). */
#define INV_ROOM_POLLS_MAX 8192

struct event_base;
struct inv_rooms;

/* A room's state, as its pacer last published it. */
typedef enum {
    INV_ROOM_UNKNOWN = 0, /* no news read yet */
    INV_ROOM_BEFORE,      /* the sale has not started: places wait (pre-queue) */
    INV_ROOM_OPEN,        /* admitting */
    INV_ROOM_PAUSED,      /* no unit left, reservations pending that may return */
    INV_ROOM_SOLD_OUT,    /* no unit left for good */
} inv_room_state;

/* What this instance knows of a room, and of one place in it. */
struct inv_room_view {
    struct inv_room_spec spec; /* from the registry */
    inv_room_state state;
    long long epoch;    /* the SKU's, whose queue the news is of */
    long long admitted; /* places admitted so far */
    long long cursor;   /* the last place admitted; -1: none */
    long long waiting;  /* places not admitted yet */
    long long pre;      /* places drawn before the start */
    long long live;     /* unexpired unused passes */
    long long news_ms;  /* Redis's clock at the last news read */
    double rate;        /* places admitted a second, measured over the last 10 s */
    long long skipped;  /* places skipped as abandoned so far */
    /* admissions left before the room can admit no more (units that remain
     * beyond the live passes) and the whole tokens banked, at news_ms; -1:
     * not published (a pacer of an older build) */
    long long to_admit, tokens;
    long long starts_ms; /* the sale's start (Redis ms); 0: none; -1: not published */
    /* for the place asked: the Redis time it was admitted at (its pass
     * expires spec.pass_ttl_ms later); 0 when not admitted or not known */
    long long admitted_at_ms;
    int abandoned;            /* for the place asked: skipped as abandoned */
    long long skipped_before; /* for the place asked: places before it skipped */
};

/* A room table and its duty, to one Redis (host, port) or a Redis Cluster
 * (nseeds > 0: seeds, copied; it does not pace there). owner: this
 * instance's token for the lease (copied). Never NULL. */
struct inv_rooms *inv_rooms_new(const char *host, int port,
                                const struct rconn_addr *seeds, int nseeds,
                                const char *password, const char *owner);
void inv_rooms_attach(struct inv_rooms *r, struct event_base *base);
void inv_rooms_detach(struct inv_rooms *r); /* on its loop, or once it stopped */
void inv_rooms_free(struct inv_rooms *r);   /* NULL is a no-op */

/* Reads the registry once, now, on rc (blocking; one Redis, not a cluster's:
 * there is no room there), so that an instance knows its rooms before it takes
 * its first request (an order of a SKU whose room is unknown answers 503):
 * before inv_rooms_attach. 0, or -1 when Redis did not answer (the first tick
 * reads it then). */
int inv_rooms_prime(struct inv_rooms *r, struct rconn *rc);
/* True once the registry was read (a room SKU is then known as one). */
int inv_rooms_ready(struct inv_rooms *r);
/* Redis's clock as this instance knows it (ms): the last tick's reading
 * moved on by the local clock; 0 before the first. */
long long inv_rooms_now_ms(struct inv_rooms *r);
/* sku's room into *spec: 1; 0 when sku has none (or is not known). */
int inv_rooms_spec(struct inv_rooms *r, const char *sku, struct inv_room_spec *spec);
/* Makes sku's room known at once (after a PUT on this instance), before the
 * next tick reads it; rate_per_s 0 forgets it. */
void inv_rooms_note(struct inv_rooms *r, const char *sku,
                    const struct inv_room_spec *spec);
/* sku's room as known here, and when place was admitted: 1, or 0 when sku
 * has no room known here. */
int inv_rooms_view(struct inv_rooms *r, const char *sku, long long place,
                   struct inv_room_view *out);
/* Notes that the owner of place polled sku's room (told to Redis at the next
 * tick: the place is not abandoned). No Redis command, no allocation. */
void inv_rooms_polled(struct inv_rooms *r, const char *sku, long long place);
/* Calls fn for each room known (under the read lock: fn must not call back). */
void inv_rooms_each(struct inv_rooms *r,
                    void (*fn)(void *arg, const char *sku, const struct inv_room_view *v),
                    void *arg);
/* True while this instance holds the pacer's lease. */
int inv_rooms_pacing(struct inv_rooms *r);
/* The name of a state as the API says it ("waiting" for BEFORE and OPEN). */
const char *inv_room_state_name(inv_room_state st);

#endif
