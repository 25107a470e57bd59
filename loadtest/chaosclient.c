/* chaosclient: the honest buyer of loadtest/chaos.sh, one process per client loop.
 *
 *   chaosclient C PORT PATH STOP_FILE PACE_MS [PAY_PCT CANCEL_PCT DEADLINE_PORTS]
 *
 * Orders by fresh users uC-1, uC-2, ... with Idempotency-Keys kC-1, kC-2, ... posted
 * to 127.0.0.1:PORT PATH over one kept-alive connection, until STOP_FILE exists; a new
 * order starts PACE_MS after the previous one started at the earliest. An undecided
 * answer (503 outcome_unknown or unavailable, 502, 504, or none within 5 s: "000") is
 * asked again with the same key and body 50 ms later, 200 tries at most, on a new
 * connection after any error. One line per final answer on stdout:
 *
 *   STATUS KEY ORDER_ID ERROR TRIES      ("-" for an id or error the answer lacks)
 *
 * With PAY_PCT (the lifecycle: the SKU has a payment window), a buyer whose order is
 * pending draws what it does, from C's own sequence: PAY_PCT in 100 pay it
 * (POST /orders/{id}/pay, payment_id pC-N) and CANCEL_PCT cancel it, each at a random
 * moment in the first 80% of the window; the rest walk away (it expires). With
 * DEADLINE_PORTS (ports, comma-separated, "-" for none), one payer in 4 pays at pay_by
 * itself instead (within 3 ms either side, by this machine's clock, which is the data
 * Redis's), the same pay sent at once to each of those ports, each over a connection
 * opened before. A pay or cancel undecided is asked again as an order is. Lines:
 *
 *   pay STATUS KEY ORDER_ID ERROR TRIES PORT
 *   cancel STATUS KEY ORDER_ID ERROR TRIES PORT
 *   dpay STATUS KEY ORDER_ID ERROR TRIES PORT OFFSET_MS   (sent OFFSET_MS after pay_by)
 *
 * The actions due are done before the next order; once STOP_FILE exists none is done.
 *
 * The environment, for loadtest/jepsen.sh: CHAOS_HOST, an IPv4 address to buy from
 * instead of 127.0.0.1 (a network namespace's); CHAOS_TOKEN, the admin token
 * (--admin-token) sent with every request (a pay is the admin's); CHAOS_USERS=N,
 * buyers drawn from N users uC-1..uC-N (so that the per-user limit is met) instead of
 * a new user per order; CHAOS_HISTORY=FILE, every try of every request also written to
 * FILE as Jepsen records a history (loadtest/jepsen/checker.py reads it), a JSON line
 * when the request is sent and one when its answer came or did not:
 *
 *   {"process":P,"type":"invoke","f":"order","time":MS,"key":K,"user":U,"qty":1}
 *   {"process":P,"type":"ok|fail|info","f":"order","time":MS,"key":K,"user":U,
 *    "qty":1,"status":S,"error":E|null,"order_id":ID|null}
 *   pay and cancel: "f":"pay|cancel","order_id":ID (cancel also "user")
 *
 * P is C (C*100+1+I for the deadline pay sent to the I-th deadline port, which runs
 * beside C's own), MS this machine's wall clock in milliseconds (the faults' times in
 * run.json are too), S the status (0: no answer). ok is a 201 to an order or a 200 to
 * a pay or cancel; info an undecided answer but 503 unavailable, which placed
 * nothing (the order may or may not have been made); fail every other answer.
 * The client the matrix ran with before (curl forked per order) cost ~57 ms of CPU per
 * order; on 2 cores that, not the service, set the pace of the sale.
 * CHAOS_ROOM=WALK_PCT,THIEF_PCT: the waiting room's buyers instead (PATH's SKU has a
 * room): a new user uC-N joins (POST /skus/{sku}/queue) every PACE_MS and polls its
 * ticket as poll_after_ms says, one request at a time across this process's buyers;
 * once admitted it orders with its pass (Seckill-Pass, key kC-N) or, WALK_PCT in 100,
 * walks away with it unused; THIEF_PCT in 100 first order as user uC-xN (key kC-xN)
 * with that pass, which must be refused 403 not_admitted. Sold out or expired: done.
 * The history gains "f":"join" and "f":"poll" ("user"; the completion's "status",
 * "error", "ticket", "state", "pass", "pass_expires_at" (null when absent),
 * "position", "poll_after_ms" (-1 when absent); ok for 202 / 200), and an order's
 * "pass" (the one it sent). A poll is tried once (a buyer polls again anyway).
 * Exit 0, or 2 on a usage error. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>

#include "rfc3339.h"

#define ANSWER_MAX 8192
#define TIMEOUT_MS 5000
#define RETRY_MS 50
#define TRIES_MAX 200

#define ACTIONS_MAX 4096 /* pays and cancels waiting for their moment */
#define DEADLINE_PORTS_MAX 8

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Milliseconds of this machine's wall clock (pay_by's). */
static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connected socket to the port, or -1. */
static struct in_addr host = {.s_addr = 0}; /* CHAOS_HOST; 0: loopback */

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = host.s_addr ? host.s_addr : htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

struct answer {
    int status;
    int keep; /* the connection may serve the next request */
    char body[ANSWER_MAX];
};

/* One answer read from fd by the deadline (Content-Length framed, or to the
 * connection's end). 0, or -1 when none came whole. */
static int read_answer(int fd, long long deadline, struct answer *a)
{
    char buf[ANSWER_MAX];
    size_t n = 0;
    char *head_end = NULL;
    long body_len = -1;
    for (;;) {
        if (head_end) {
            size_t have = n - (size_t)(head_end + 4 - buf);
            if (body_len >= 0 && have >= (size_t)body_len)
                break;
        }
        int left = (int)(deadline - now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0 || n == sizeof(buf) - 1)
            return -1;
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (r < 0)
            return -1;
        if (r == 0) { /* closed: whole only when unframed */
            if (!head_end || body_len >= 0)
                return -1;
            a->keep = 0;
            break;
        }
        n += (size_t)r;
        buf[n] = '\0';
        if (!head_end && (head_end = strstr(buf, "\r\n\r\n"))) {
            *head_end = '\0';
            if (strncmp(buf, "HTTP/1.", 7) != 0 || n < 12)
                return -1;
            a->status = atoi(buf + 9);
            a->keep = strcasestr(buf, "\r\nConnection: close") == NULL;
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            body_len = cl ? strtol(cl + 17, NULL, 10) : -1;
            if (strcasestr(buf, "\r\nTransfer-Encoding:"))
                return -1; /* not spoken here; neither seckill nor nginx send it */
        }
    }
    size_t off = (size_t)(head_end + 4 - buf), len = n - off;
    if (body_len >= 0 && len > (size_t)body_len)
        len = (size_t)body_len;
    memcpy(a->body, buf + off, len);
    a->body[len] = '\0';
    return 0;
}

/* The string value of "name":"..." in a flat JSON body, into out ("-" without). */
static void field(const char *body, const char *name, char *out, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":\"", name);
    const char *p = strstr(body, pat);
    snprintf(out, len, "-");
    if (!p)
        return;
    p += strlen(pat);
    size_t i = 0;
    while (p[i] && p[i] != '"' && i + 1 < len) {
        out[i] = p[i];
        i++;
    }
    out[i] = '\0';
}

/* The integer value of "name":N in a flat JSON body, or -1 without. */
static long long number(const char *body, const char *name)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", name);
    const char *p = strstr(body, pat);
    return p && (p[strlen(pat)] == '-' ||
                 (p[strlen(pat)] >= '0' && p[strlen(pat)] <= '9'))
               ? atoll(p + strlen(pat))
               : -1;
}

static int undecided(int status, const char *err)
{
    if (status == 0 || status == 502 || status == 504)
        return 1;
    return status == 503 &&
           (!strcmp(err, "outcome_unknown") || !strcmp(err, "unavailable"));
}

/* One request as the history names it (CHAOS_HISTORY). */
struct op {
    int process;
    const char *f;   /* order, pay, cancel, join, poll */
    const char *key; /* an order's Idempotency-Key */
    const char *user;
    const char *id;   /* a pay's or cancel's order */
    const char *pass; /* an order's Seckill-Pass (room mode) */
    int ok;           /* the status that is ok (0: 201 for an order, else 200) */
};

static FILE *history;

static void hist_head(const struct op *o, const char *type)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(history, "{\"process\":%d,\"type\":\"%s\",\"f\":\"%s\",\"time\":%lld.%03ld",
            o->process, type, o->f, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
            ts.tv_nsec / 1000 % 1000);
    if (o->key)
        fprintf(history, ",\"key\":\"%s\",\"qty\":1", o->key);
    if (o->user)
        fprintf(history, ",\"user\":\"%s\"", o->user);
    if (o->id)
        fprintf(history, ",\"order_id\":\"%s\"", o->id);
    if (o->pass)
        fprintf(history, ",\"pass\":\"%s\"", o->pass);
}

static void hist_invoke(const struct op *o)
{
    if (!history)
        return;
    hist_head(o, "invoke");
    fputs("}\n", history);
    fflush(history);
}

/* The try's outcome: a 201 to an order or a 200 to a pay or cancel happened; an
 * undecided answer may have (but 503 unavailable: nothing was done); any other did
 * not. */
static const char *outcome(const struct op *o, int status, const char *err)
{
    if (status == (o->ok ? o->ok : o->key ? 201 : 200))
        return "ok";
    if (status == 503 && !strcmp(err, "unavailable"))
        return "fail";
    return undecided(status, err) ? "info" : "fail";
}

/* A join's or poll's answer in the history: its ticket, state, pass and
 * pass_expires_at (null when absent), position and poll_after_ms (-1). */
static void hist_room(const char *body)
{
    static const char *names[] = {"ticket", "state", "pass", "pass_expires_at"};
    char v[512];
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
        field(body, names[i], v, sizeof(v));
        fprintf(history, strcmp(v, "-") ? ",\"%s\":\"%s\"" : ",\"%s\":null", names[i], v);
    }
    fprintf(history, ",\"position\":%lld,\"poll_after_ms\":%lld",
            number(body, "position"), number(body, "poll_after_ms"));
}

static void hist_complete(const struct op *o, const struct answer *a, const char *err)
{
    if (!history)
        return;
    struct op done = *o;
    char id[32];
    field(a->body, "order_id", id, sizeof(id));
    if (o->key)
        done.id = NULL; /* an order's id is its answer's */
    hist_head(&done, outcome(o, a->status, err));
    fprintf(history, ",\"status\":%d", a->status);
    fprintf(history, strcmp(err, "-") ? ",\"error\":\"%s\"" : ",\"error\":null", err);
    if (o->key)
        fprintf(history, strcmp(id, "-") ? ",\"order_id\":\"%s\"" : ",\"order_id\":null",
                id);
    if (o->ok) /* a join's or poll's: what the room said */
        hist_room(a->body);
    fputs("}\n", history);
    fflush(history);
}

/* A kept-alive connection to one port. */
struct conn {
    int port;
    int fd; /* -1 when none */
};

static void conn_drop(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* One try of req over c (a connection made when it has none): *a its answer, status 0
 * when none came whole; the connection dropped when it cannot serve another. */
static void exchange_once(struct conn *c, const char *req, size_t len, struct answer *a)
{
    a->status = 0;
    if (c->fd < 0)
        c->fd = dial(c->port);
    if (c->fd < 0 || send_all(c->fd, req, len) != 0 ||
        read_answer(c->fd, now_ms() + TIMEOUT_MS, a) != 0) {
        a->status = 0;
        a->body[0] = '\0';
    }
    if (a->status == 0 || !a->keep)
        conn_drop(c);
}

/* req over c until its answer is final (undecided ones asked again, TRIES_MAX tries at
 * most); err the answer's error ("-" without); each try recorded as o. The number of
 * tries. */
static int exchange(struct conn *c, const char *req, size_t len, struct answer *a,
                    int tries, char *err, size_t errlen, const struct op *o)
{
    for (;;) {
        if (tries > 0)
            sleep_ms(RETRY_MS);
        tries++;
        hist_invoke(o);
        exchange_once(c, req, len, a);
        field(a->body, "error", err, errlen);
        hist_complete(o, a, err);
        if (!undecided(a->status, err) || tries >= TRIES_MAX)
            return tries;
    }
}

static const char *token; /* CHAOS_TOKEN: the admin token, for the pays */

/* A POST of body to path (a GET when body is NULL) as an HTTP/1.1 request into req,
 * with a Seckill-Pass when pass is not NULL; its length. */
static size_t request(char *req, size_t cap, const char *path, const char *key,
                      const char *pass, const char *body)
{
    int n = snprintf(req, cap,
                     "%s %s HTTP/1.1\r\nHost: chaos\r\n%s%s%s%s%s%s%s%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     body ? "POST" : "GET", path, key ? "Idempotency-Key: " : "",
                     key ? key : "", key ? "\r\n" : "",
                     token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "", pass ? "Seckill-Pass: " : "", pass ? pass : "",
                     pass ? "\r\n" : "", body ? strlen(body) : 0, body ? body : "");
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static size_t post(char *req, size_t cap, const char *path, const char *key,
                   const char *body)
{
    return request(req, cap, path, key, NULL, body);
}

/* pay_by (RFC 3339, util/rfc3339.c) as wall milliseconds; -1 when it is none. */
static long long pay_by_ms(const char *t)
{
    long long ms;
    return rfc3339_parse(t, &ms) == 0 ? ms : -1;
}

/* A buyer's next step for a pending order, at wall time at. */
enum act_kind { ACT_PAY, ACT_CANCEL, ACT_DEADLINE_PAY };
struct action {
    enum act_kind kind;
    long long at;
    long n; /* the buyer's number: user uC-N, key kC-N */
    char id[32];
};

static struct action actions[ACTIONS_MAX];
static int nactions;
static const char *client; /* C */
static int process;        /* C as a number: its history's process */
static int deadline_ports[DEADLINE_PORTS_MAX], ndeadline;

static long users; /* CHAOS_USERS; 0: a new user per order */

/* The user of buyer n: uC-n, or one of uC-1..uC-users. */
static void user_of(long n, char *out, size_t len)
{
    snprintf(out, len, "u%s-%ld", client, users > 0 ? (n - 1) % users + 1 : n);
}

/* The op of x as the history names it, for process p. */
static struct op action_op(const struct action *x, int p, char *user, size_t len)
{
    user_of(x->n, user, len);
    int cancel = x->kind == ACT_CANCEL;
    return (struct op){.process = p,
                       .f = cancel ? "cancel" : "pay",
                       .user = cancel ? user : NULL,
                       .id = x->id};
}

/* The state's own random sequence (xorshift), so a client's choices replay. */
static uint64_t rng_state;
static unsigned draw(unsigned below)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % below);
}

/* x's request (a pay, payment id pC-N, or a cancel by its buyer) into req; its
 * length. */
static size_t action_request(const struct action *x, char *req, size_t cap)
{
    char path[80], body[80];
    int cancel = x->kind == ACT_CANCEL;
    char user[40];
    user_of(x->n, user, sizeof(user));
    snprintf(path, sizeof(path), "/orders/%s/%s", x->id, cancel ? "cancel" : "pay");
    if (cancel)
        snprintf(body, sizeof(body), "{\"user_id\":\"%s\"}", user);
    else
        snprintf(body, sizeof(body), "{\"payment_id\":\"p%s-%ld\"}", client, x->n);
    return post(req, cap, path, NULL, body);
}

/* The pay of order id at pay_by, sent at once to every deadline port over
 * connections opened first; a line per port. An undecided answer is asked again
 * on that port alone. */
static void deadline_pay(const struct action *x)
{
    static struct conn c[DEADLINE_PORTS_MAX];
    static struct answer a[DEADLINE_PORTS_MAX];
    char req[512], err[48];
    size_t len = action_request(x, req, sizeof(req));
    for (int i = 0; i < ndeadline; i++) {
        c[i].port = deadline_ports[i];
        c[i].fd = dial(c[i].port);
    }
    long long at = x->at + (long long)draw(7) - 3;
    while (wall_ms() < at)
        sleep_ms(1);
    long long offset = wall_ms() - x->at;
    int sent[DEADLINE_PORTS_MAX];
    struct op o[DEADLINE_PORTS_MAX];
    char user[40];
    for (int i = 0; i < ndeadline; i++) {
        o[i] = action_op(x, process * 100 + 1 + i, user, sizeof(user));
        hist_invoke(&o[i]);
        sent[i] = c[i].fd >= 0 && send_all(c[i].fd, req, len) == 0;
    }
    for (int i = 0; i < ndeadline; i++) {
        a[i].status = 0;
        if (!sent[i] || read_answer(c[i].fd, now_ms() + TIMEOUT_MS, &a[i]) != 0)
            a[i].status = 0, a[i].body[0] = '\0';
        conn_drop(&c[i]);
        field(a[i].body, "error", err, sizeof(err));
        hist_complete(&o[i], &a[i], err);
        int tries = 1;
        if (undecided(a[i].status, err))
            tries = exchange(&c[i], req, len, &a[i], 1, err, sizeof(err), &o[i]);
        conn_drop(&c[i]);
        printf("dpay %03d k%s-%ld %s %s %d %d %lld\n", a[i].status, client, x->n, x->id,
               err, tries, c[i].port, offset);
    }
}

/* A pay or cancel of x->id over c, and its line. */
static void act(struct conn *c, const struct action *x)
{
    static struct answer a;
    char req[512], err[48];
    int pay = x->kind == ACT_PAY;
    char user[40];
    size_t len = action_request(x, req, sizeof(req));
    struct op o = action_op(x, process, user, sizeof(user));
    int tries = exchange(c, req, len, &a, 0, err, sizeof(err), &o);
    printf("%s %03d k%s-%ld %s %s %d %d\n", pay ? "pay" : "cancel", a.status, client,
           x->n, x->id, err, tries, c->port);
}

/* What buyer n does with its pending order (the answer's body): maybe an action. */
static void plan(long n, const char *body, int pay_pct, int cancel_pct, long long window)
{
    char state[16], id[32], pay_by[40];
    field(body, "state", state, sizeof(state));
    field(body, "order_id", id, sizeof(id));
    field(body, "pay_by", pay_by, sizeof(pay_by));
    long long by = pay_by_ms(pay_by);
    if (strcmp(state, "pending") != 0 || by < 0 || nactions == ACTIONS_MAX)
        return;
    unsigned r = draw(100);
    struct action *x = &actions[nactions];
    x->n = n;
    snprintf(x->id, sizeof(x->id), "%s", id);
    long long span = window * 8 / 10;
    if (span < 1)
        span = 1;
    if (r < (unsigned)pay_pct && ndeadline > 0 && draw(4) == 0) {
        x->kind = ACT_DEADLINE_PAY;
        x->at = by;
    } else if (r < (unsigned)pay_pct) {
        x->kind = ACT_PAY;
        x->at = wall_ms() + (long long)draw((unsigned)span);
    } else if (r < (unsigned)(pay_pct + cancel_pct)) {
        x->kind = ACT_CANCEL;
        x->at = wall_ms() + (long long)draw((unsigned)span);
    } else {
        return; /* walks away */
    }
    nactions++;
}

/* The index of the action due first, or -1 when none waits. */
static int next_action(void)
{
    int best = -1;
    for (int i = 0; i < nactions; i++)
        if (best < 0 || actions[i].at < actions[best].at)
            best = i;
    return best;
}

/* ---- room mode (CHAOS_ROOM) ---- */

#define BUYERS_MAX 2048

/* A buyer of the waiting room: joined, polling until admitted or turned away. */
struct buyer {
    long n;            /* user uC-N */
    char ticket[256];  /* "" once done */
    long long poll_at; /* monotonic ms */
};

static struct buyer buyers[BUYERS_MAX];
static int nbuyers;

/* An order of user (key) with pass over c; its line. The status. */
static int room_order(struct conn *c, const char *path, const char *user, const char *key,
                      const char *pass)
{
    static struct answer a;
    char body[96], req[1024], err[48], id[32];
    snprintf(body, sizeof(body), "{\"user_id\":\"%s\"}", user);
    size_t len = request(req, sizeof(req), path, key, pass, body);
    struct op o = {
        .process = process, .f = "order", .key = key, .user = user, .pass = pass};
    int tries = exchange(c, req, len, &a, 0, err, sizeof(err), &o);
    field(a.body, "order_id", id, sizeof(id));
    printf("%03d %s %s %s %d\n", a.status, key, id, err, tries);
    return a.status;
}

/* Buyer b's poll over c: admitted, it buys with its pass (or walks away, walk_pct in
 * 100); a thief (thief_pct in 100) first orders as user uC-xN with that pass, which
 * must be refused 403. Waiting or paused: polled again as told; else done. */
static void room_poll(struct conn *c, const char *base, struct buyer *b, int walk_pct,
                      int thief_pct)
{
    static struct answer a;
    char path[512], req[1024], err[48], state[16], pass[512], user[40];
    snprintf(path, sizeof(path), "%s/queue/%s", base, b->ticket);
    size_t len = request(req, sizeof(req), path, NULL, NULL, NULL);
    user_of(b->n, user, sizeof(user));
    struct op o = {.process = process, .f = "poll", .user = user, .ok = 200};
    hist_invoke(&o);
    exchange_once(c, req, len, &a);
    field(a.body, "error", err, sizeof(err));
    hist_complete(&o, &a, err);
    field(a.body, "state", state, sizeof(state));
    long long after = number(a.body, "poll_after_ms");
    if (a.status != 200 || !strcmp(state, "waiting") || !strcmp(state, "paused")) {
        b->poll_at = now_ms() + (a.status == 200 && after > 0 ? after : 500);
        return;
    }
    b->ticket[0] = '\0'; /* done: admitted, sold out or expired */
    if (strcmp(state, "admitted") != 0 || draw(100) < (unsigned)walk_pct)
        return;
    field(a.body, "pass", pass, sizeof(pass));
    char opath[512], key[48], thief[40];
    snprintf(opath, sizeof(opath), "%s/orders", base);
    if (draw(100) < (unsigned)thief_pct) {
        snprintf(thief, sizeof(thief), "u%s-x%ld", client, b->n);
        snprintf(key, sizeof(key), "k%s-x%ld", client, b->n);
        room_order(c, opath, thief, key, pass);
    }
    snprintf(key, sizeof(key), "k%s-%ld", client, b->n);
    room_order(c, opath, user, key, pass);
}

/* The room mode: a new buyer joins every pace ms (POST BASE/queue, asked again while
 * undecided), each polls as told; until stop exists. */
static void room_run(struct conn *c, const char *base, const char *stop, long long pace,
                     int walk_pct, int thief_pct)
{
    static struct answer a;
    long long next_join = now_ms();
    for (long n = 1; access(stop, F_OK) != 0;) {
        struct buyer *due = NULL;
        for (int i = 0; i < nbuyers; i++)
            if (buyers[i].ticket[0] && (!due || buyers[i].poll_at < due->poll_at))
                due = &buyers[i];
        if (due && due->poll_at <= now_ms()) {
            room_poll(c, base, due, walk_pct, thief_pct);
            continue;
        }
        if (now_ms() < next_join || nbuyers == BUYERS_MAX) {
            sleep_ms(due && due->poll_at < next_join ? due->poll_at - now_ms() : 5);
            continue;
        }
        next_join = now_ms() + pace;
        char path[512], req[1024], err[48], user[40], body[96];
        struct buyer *b = &buyers[nbuyers];
        b->n = n++;
        user_of(b->n, user, sizeof(user));
        snprintf(path, sizeof(path), "%s/queue", base);
        snprintf(body, sizeof(body), "{\"user_id\":\"%s\"}", user);
        size_t len = post(req, sizeof(req), path, NULL, body);
        struct op o = {.process = process, .f = "join", .user = user, .ok = 202};
        exchange(c, req, len, &a, 0, err, sizeof(err), &o);
        field(a.body, "ticket", b->ticket, sizeof(b->ticket));
        if (a.status != 202 || !strcmp(b->ticket, "-"))
            continue; /* not joined: no buyer */
        long long after = number(a.body, "poll_after_ms");
        b->poll_at = now_ms() + (after > 0 ? after : 500);
        nbuyers++;
    }
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 9) {
        fprintf(stderr, "usage: chaosclient C PORT PATH STOP_FILE PACE_MS "
                        "[PAY_PCT CANCEL_PCT DEADLINE_PORTS]\n");
        return 2;
    }
    const char *path = argv[3], *stop = argv[4];
    client = argv[1];
    process = atoi(client);
    struct conn conn = {.port = atoi(argv[2]), .fd = -1};
    long long pace = atoll(argv[5]);
    int pay_pct = argc == 9 ? atoi(argv[6]) : 0,
        cancel_pct = argc == 9 ? atoi(argv[7]) : 0;
    if (argc == 9 && strcmp(argv[8], "-") != 0) {
        char *ports = argv[8], *save = NULL;
        for (char *p = strtok_r(ports, ",", &save); p && ndeadline < DEADLINE_PORTS_MAX;
             p = strtok_r(NULL, ",", &save))
            deadline_ports[ndeadline++] = atoi(p);
    }
    rng_state =
        0x9e3779b97f4a7c15ULL ^ (uint64_t)strtoull(client, NULL, 10) * 0x100000001b3ULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *env = getenv("CHAOS_HOST");
    if (env && *env && inet_pton(AF_INET, env, &host) != 1) {
        fprintf(stderr, "chaosclient: CHAOS_HOST %s is no IPv4 address\n", env);
        return 2;
    }
    token = getenv("CHAOS_TOKEN");
    if (token && !*token)
        token = NULL;
    env = getenv("CHAOS_USERS");
    users = env ? atol(env) : 0;
    env = getenv("CHAOS_HISTORY");
    if (env && *env && !(history = fopen(env, "a"))) {
        perror(env);
        return 2;
    }
    env = getenv("CHAOS_ROOM");
    if (env && *env) {
        char base[256];
        snprintf(base, sizeof(base), "%s", path);
        char *tail = strstr(base, "/orders");
        if (tail)
            *tail = '\0';
        room_run(&conn, base, stop, pace, atoi(env),
                 strchr(env, ',') ? atoi(strchr(env, ',') + 1) : 0);
        conn_drop(&conn);
        if (history)
            fclose(history);
        return 0;
    }
    static struct answer a;
    long long next_order = now_ms(), window = 0;
    for (long n = 1; access(stop, F_OK) != 0;) {
        int due = next_action();
        if (due >= 0 &&
            actions[due].at <=
                wall_ms() + (actions[due].kind == ACT_DEADLINE_PAY ? 20 : 0)) {
            struct action x = actions[due];
            actions[due] = actions[--nactions];
            if (x.kind == ACT_DEADLINE_PAY)
                deadline_pay(&x);
            else
                act(&conn, &x);
            continue;
        }
        if (now_ms() < next_order) {
            long long wait = next_order - now_ms();
            if (due >= 0 && actions[due].at - wall_ms() < wait)
                wait = actions[due].at - wall_ms();
            sleep_ms(wait < 1 ? 1 : wait > 20 ? 20 : wait);
            continue;
        }
        long long started = now_ms();
        char body[96], req[512], key[48], id[32], err[48], by[40];
        char user[40];
        user_of(n, user, sizeof(user));
        snprintf(body, sizeof(body), "{\"user_id\":\"%s\"}", user);
        snprintf(key, sizeof(key), "k%s-%ld", client, n);
        size_t len = post(req, sizeof(req), path, key, body);
        struct op o = {.process = process, .f = "order", .key = key, .user = user};
        int tries = exchange(&conn, req, len, &a, 0, err, sizeof(err), &o);
        field(a.body, "order_id", id, sizeof(id));
        printf("%03d k%s-%ld %s %s %d\n", a.status, client, n, id, err, tries);
        if (pay_pct + cancel_pct > 0 && a.status == 201) {
            field(a.body, "pay_by", by, sizeof(by));
            if (window == 0 && pay_by_ms(by) > 0) /* the window, from the first pay_by */
                window = pay_by_ms(by) - wall_ms();
            plan(n, a.body, pay_pct, cancel_pct, window > 0 ? window : 1000);
        }
        n++;
        next_order = started + pace;
    }
    conn_drop(&conn);
    if (history)
        fclose(history);
    return 0;
}
