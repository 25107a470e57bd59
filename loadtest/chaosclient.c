/* chaosclient: the honest buyer of loadtest/chaos.sh, one process per client loop.
 *
 *   chaosclient C PORT PATH STOP_FILE PACE_MS
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
 * The client the matrix ran with before (curl forked per order) cost ~57 ms of CPU per
 * order; on 2 cores that, not the service, set the pace of the sale.
 * Exit 0, or 2 on a usage error. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ANSWER_MAX 8192
#define TIMEOUT_MS 5000
#define RETRY_MS 50
#define TRIES_MAX 200

static int port;

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

/* A connected socket to the port, or -1. */
static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
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

static int undecided(int status, const char *err)
{
    if (status == 0 || status == 502 || status == 504)
        return 1;
    return status == 503 && (!strcmp(err, "outcome_unknown") || !strcmp(err, "unavailable"));
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: chaosclient C PORT PATH STOP_FILE PACE_MS\n");
        return 2;
    }
    const char *c = argv[1], *path = argv[3], *stop = argv[4];
    port = atoi(argv[2]);
    long long pace = atoll(argv[5]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = -1;
    static struct answer a;
    for (long n = 1; access(stop, F_OK) != 0; n++) {
        long long started = now_ms();
        char body[96], req[512], id[32], err[48];
        int blen = snprintf(body, sizeof(body), "{\"user_id\":\"u%s-%ld\"}", c, n);
        int rlen = snprintf(req, sizeof(req),
                            "POST %s HTTP/1.1\r\nHost: chaos\r\nIdempotency-Key: k%s-%ld\r\n"
                            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                            path, c, n, blen, body);
        int tries = 0;
        for (;;) {
            tries++;
            a.status = 0;
            if (fd < 0)
                fd = dial();
            if (fd < 0 || send_all(fd, req, (size_t)rlen) != 0 ||
                read_answer(fd, now_ms() + TIMEOUT_MS, &a) != 0) {
                a.status = 0;
                a.body[0] = '\0';
            }
            if (a.status == 0 || !a.keep) {
                if (fd >= 0)
                    close(fd);
                fd = -1;
            }
            field(a.body, "order_id", id, sizeof(id));
            field(a.body, "error", err, sizeof(err));
            if (undecided(a.status, err) && tries < TRIES_MAX) {
                sleep_ms(RETRY_MS);
                continue;
            }
            break;
        }
        printf("%03d k%s-%ld %s %s %d\n", a.status, c, n, id, err, tries);
        sleep_ms(started + pace - now_ms());
    }
    if (fd >= 0)
        close(fd);
    return 0;
}
