/* roomclient: the buyers of the waiting room's demo (loadtest/room.sh), all of them in
 * one process on one libevent loop, so that 20,000 of them stay light on two cores.
 *
 *   roomclient HOST PORT SKU BUYERS SPREAD_MS CONNS OUT
 *
 * Buyer i (0..BUYERS-1, user b<i>) arrives SPREAD_MS * i / BUYERS after the start and
 * joins SKU's room (POST /skus/SKU/queue), then polls its ticket
 * (GET /skus/SKU/queue/TICKET) when each answer's poll_after_ms says, until the answer
 * is admitted (it orders at once with the pass in Seckill-Pass, Idempotency-Key k-b<i>,
 * and is done), sold_out or expired (done). An answer that is no answer (a connection
 * error, a 5xx, none within 10 s) is asked again 200 ms later, counted as an error.
 * Requests go over kept-alive connections to HOST:PORT, one request at a time on each:
 * joins over CONNS of their own, polls and orders over CONNS others, each set taking
 * its requests first come first served. Apart because a join waits on Redis (the
 * instances run joins one at a time on their main thread) and a poll does not: 20,000
 * browsers would not wait for each other's joins to poll, and neither do these.
 *
 * OUT gets one tab-separated line per buyer once every buyer is done (or after 300 s:
 * those not done say so), times in ms of this machine's wall clock (the data Redis's on
 * one machine), 0 for never:
 *
 *   i join_sent join_answered position admitted order_sent order_answered order_status
 *   end soldout_answered soldout_sent last_wait_sent polls errors queued_max ticket
 *   soldout_held
 *
 * end: bought (201), refused (another order answer), sold_out, expired, unfinished;
 * last_wait_sent: when the last poll answered waiting or paused was sent; queued_max:
 * the longest a poll or an order of the buyer waited here for a connection (what the
 * client, not the service, added to its times); soldout_held: how long the request that
 * said sold_out waited here for a connection; ticket: the ticket's payload (base64url
 * of "t|epoch|place|rank|sku|user", inventory/roomtoken.c), "-" for none. A summary
 * line goes to stderr, and OUT.polls the polls sent in each second from the first
 * buyer's arrival ("second polls" lines). Exit 0; 1 when a buyer was unfinished; 2 on a
 * usage error. */
#include <event2/event.h>
#include <event2/http.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum step { ARRIVING, JOINING, WAITING, ORDERING, DONE };

struct buyer {
    int i;
    enum step step;
    char *ticket, *pass;
    struct event *timer;
    long long join_sent, join_answered, position, admitted, order_sent, order_answered;
    long long soldout_answered, soldout_sent, last_wait_sent, sent, queued, queued_max;
    long long soldout_held; /* how long the client held the request that said sold_out */
    int order_status, polls, errors, conn;
    const char *end;
    struct buyer *next; /* in its pool's queue */
};

/* A set of connections, each carrying one request at a time, and the buyers whose
 * request waits for one, first come first served. */
struct pool {
    struct evhttp_connection **conns;
    int *idle, nidle;
    struct buyer *head, *tail;
};

static struct event_base *base;
static struct pool joins, others;
static int nconns, done, nbuyers;
static const char *host, *sku;
#define SECONDS_MAX 300               /* the run's limit */
static int polls_in[SECONDS_MAX + 1]; /* polls sent in each second of the run */
static long long t_start;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void later(struct buyer *b, long long ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_add(b->timer, &tv);
}

static void finish(struct buyer *b, const char *end)
{
    b->step = DONE;
    b->end = end;
    if (++done == nbuyers)
        event_base_loopexit(base, NULL);
}

static void on_answer(struct evhttp_request *req, void *arg);
static void send_now(struct buyer *b, int conn);

static struct pool *pool_of(const struct buyer *b)
{
    return b->step == JOINING ? &joins : &others;
}

/* Sends the queued requests of p while it has idle connections. */
static void pump(struct pool *p)
{
    while (p->head && p->nidle > 0) {
        struct buyer *b = p->head;
        p->head = b->next;
        if (!p->head)
            p->tail = NULL;
        send_now(b, p->idle[--p->nidle]);
    }
}

/* Queues b's next request (its join, a poll, or its order) in its pool. */
static void send_next(struct buyer *b)
{
    struct pool *p = pool_of(b);
    b->queued = now_ms();
    b->next = NULL;
    if (p->tail)
        p->tail->next = b;
    else
        p->head = b;
    p->tail = b;
    pump(p);
}

static void send_now(struct buyer *b, int conn)
{
    char uri[1024], body[128];
    struct evhttp_request *req = evhttp_request_new(on_answer, b);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", host);
    enum evhttp_cmd_type method = EVHTTP_REQ_GET;
    b->sent = now_ms();
    if (b->step != JOINING && b->sent - b->queued > b->queued_max)
        b->queued_max = b->sent - b->queued;
    if (b->step == JOINING || b->step == ORDERING) {
        method = EVHTTP_REQ_POST;
        snprintf(uri, sizeof(uri), "/skus/%s/%s", sku,
                 b->step == JOINING ? "queue" : "orders");
        snprintf(body, sizeof(body), "{\"user_id\":\"b%d\"}", b->i);
        evhttp_add_header(h, "Content-Type", "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
        if (b->step == ORDERING) {
            char key[32];
            snprintf(key, sizeof(key), "k-b%d", b->i);
            evhttp_add_header(h, "Seckill-Pass", b->pass);
            evhttp_add_header(h, "Idempotency-Key", key);
            if (!b->order_sent)
                b->order_sent = b->sent;
        } else if (!b->join_sent) {
            b->join_sent = b->sent;
        }
    } else {
        snprintf(uri, sizeof(uri), "/skus/%s/queue/%s", sku, b->ticket);
        b->polls++;
        long long sec = (b->sent - t_start) / 1000;
        polls_in[sec < 0 ? 0 : sec > SECONDS_MAX ? SECONDS_MAX : sec]++;
    }
    struct pool *p = pool_of(b);
    b->conn = conn;
    if (evhttp_make_request(p->conns[conn], req, method, uri) != 0) {
        p->idle[p->nidle++] = conn;
        b->errors++;
        later(b, 200);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct buyer *b = arg;
    if (b->step == ARRIVING)
        b->step = JOINING;
    send_next(b);
}

static void on_answer(struct evhttp_request *req, void *arg)
{
    struct buyer *b = arg;
    struct pool *p = pool_of(b);
    p->idle[p->nidle++] = b->conn; /* free again: the next waiting request goes */
    pump(p);
    long long t = now_ms();
    int status = req ? evhttp_request_get_response_code(req) : 0;
    json_t *j = NULL;
    if (req && status > 0) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        j = json_loadb((const char *)evbuffer_pullup(in, (ssize_t)n), n, 0, NULL);
    }
    if (status == 0 || status >= 500 || !j) { /* no answer: asked again */
        b->errors++;
        json_decref(j);
        later(b, 200);
        return;
    }
    if (b->step == ORDERING) {
        b->order_answered = t;
        b->order_status = status;
        finish(b, status == 201 ? "bought" : "refused");
        json_decref(j);
        return;
    }
    const char *state = json_string_value(json_object_get(j, "state"));
    long long poll_after = json_integer_value(json_object_get(j, "poll_after_ms"));
    if (b->step == JOINING) {
        const char *ticket = json_string_value(json_object_get(j, "ticket"));
        if (status != 202 || !ticket) {
            fprintf(stderr, "roomclient: b%d's join answered %d\n", b->i, status);
            finish(b, "refused");
            json_decref(j);
            return;
        }
        b->join_answered = t;
        b->position = json_integer_value(json_object_get(j, "position"));
        b->ticket = strdup(ticket);
        b->step = WAITING;
    }
    if (!state) {
        state = "";
    }
    if (strcmp(state, "admitted") == 0) {
        const char *pass = json_string_value(json_object_get(j, "pass"));
        b->admitted = t;
        b->pass = strdup(pass ? pass : "");
        b->step = ORDERING;
        send_next(b);
    } else if (strcmp(state, "sold_out") == 0) {
        b->soldout_answered = t;
        b->soldout_sent = b->sent;
        b->soldout_held = b->sent - b->queued;
        finish(b, "sold_out");
    } else if (strcmp(state, "waiting") == 0 || strcmp(state, "paused") == 0) {
        b->last_wait_sent = b->sent;
        later(b, poll_after > 0 ? poll_after : 500);
    } else {
        finish(b, "expired");
    }
    json_decref(j);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
    event_base_loopexit(base, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: roomclient HOST PORT SKU BUYERS SPREAD_MS CONNS OUT\n");
        return 2;
    }
    host = argv[1];
    int port = atoi(argv[2]);
    sku = argv[3];
    nbuyers = atoi(argv[4]);
    long long spread = atoll(argv[5]);
    nconns = atoi(argv[6]);
    if (port <= 0 || port > 65535 || nbuyers <= 0 || spread < 0 || nconns <= 0) {
        fprintf(stderr, "roomclient: PORT 1..65535, BUYERS > 0, SPREAD_MS >= 0, "
                        "CONNS > 0\n");
        return 2;
    }
    FILE *out = fopen(argv[7], "w");
    if (!out) {
        perror(argv[7]);
        return 2;
    }
    base = event_base_new();
    struct pool *pools[] = {&joins, &others};
    for (int k = 0; k < 2; k++) {
        struct pool *p = pools[k];
        p->conns = calloc((size_t)nconns, sizeof(*p->conns));
        p->idle = calloc((size_t)nconns, sizeof(*p->idle));
        for (int c = 0; c < nconns; c++) {
            p->conns[c] =
                evhttp_connection_base_new(base, NULL, host, (unsigned short)port);
            evhttp_connection_set_timeout(p->conns[c], 10);
            p->idle[p->nidle++] = c;
        }
    }
    t_start = now_ms() + 100; /* the first buyer's arrival */
    struct buyer *bs = calloc((size_t)nbuyers, sizeof(*bs));
    for (int i = 0; i < nbuyers; i++) {
        bs[i].i = i;
        bs[i].end = "unfinished";
        bs[i].timer = evtimer_new(base, on_timer, &bs[i]);
        later(&bs[i], 100 + spread * i / nbuyers);
    }
    struct timeval limit = {.tv_sec = 300};
    event_base_once(base, -1, EV_TIMEOUT, on_deadline, NULL, &limit);
    event_base_dispatch(base);

    int unfinished = 0, polls = 0, errors = 0;
    for (int i = 0; i < nbuyers; i++) {
        struct buyer *b = &bs[i];
        unfinished += b->step != DONE;
        polls += b->polls;
        errors += b->errors;
        fprintf(out,
                "%d\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%d\t%s\t%lld\t%lld\t%lld\t%d\t%"
                "d\t%lld\t%.*s\t%lld\n",
                b->i, b->join_sent, b->join_answered, b->position, b->admitted,
                b->order_sent, b->order_answered, b->order_status, b->end,
                b->soldout_answered, b->soldout_sent, b->last_wait_sent, b->polls,
                b->errors, b->queued_max, b->ticket ? (int)strcspn(b->ticket, ".") : 1,
                b->ticket ? b->ticket : "-", b->soldout_held);
    }
    fclose(out);
    char path[4096];
    snprintf(path, sizeof(path), "%s.polls", argv[7]);
    FILE *pf = fopen(path, "w");
    for (int s = 0; pf && s <= SECONDS_MAX; s++)
        if (polls_in[s])
            fprintf(pf, "%d %d\n", s, polls_in[s]);
    if (pf)
        fclose(pf);
    fprintf(stderr, "roomclient: %d buyers, %d polls, %d errors, %d unfinished\n",
            nbuyers, polls, errors, unfinished);
    return unfinished ? 1 : 0;
}
