/* edgeclient: test-only HTTP clients that behave as real ones do at the edge
 * of the protocol, for tests/it_edge.sh. On 127.0.0.1.
 *
 *   edgeclient halfclose PORT SKU TAG N C
 *       N orders (users TAG-0..TAG-N-1) by C clients at once, each on its own
 *       connection: the whole request, then shutdown(SHUT_WR) (as nc -N does),
 *       then the answer read to its end. Prints one line per answer status
 *       seen, "STATUS COUNT" ("none" for a connection closed without one).
 *   edgeclient gone PORT SKU TAG N WAIT_MS
 *       N orders one after the other, each connection closed WAIT_MS after its
 *       request was sent, with a reset (SO_LINGER 0): a client that is gone
 *       before its answer. Prints nothing.
 *   edgeclient keepalive PORT IDLE_MS
 *       GET /livez, then IDLE_MS of silence on the kept-alive connection, then
 *       GET /livez again. Prints the two answers' statuses ("none" without).
 *   edgeclient trickle PORT BYTE_MS
 *       A POST trickled one byte every BYTE_MS (an idle timeout never fires).
 *       Prints "MS STATUS": when the server closed the connection, and the
 *       answer's status ("none" without one); "never 0" after 60 s.
 *
 * Exit 0, or 2 on a usage or socket error. */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;
static const char *sku, *tag;
static int total;
static int next_order;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

#define MAX_STATUSES 16
static struct {
    int status; /* 0: none */
    int count;
} seen[MAX_STATUSES];

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("connect");
        exit(2);
    }
    return fd;
}

static int order_request(char *buf, size_t len, int i)
{
    char body[128];
    int blen = snprintf(body, sizeof(body), "{\"user_id\":\"%s-%d\"}", tag, i);
    return snprintf(buf, len,
                    "POST /skus/%s/orders HTTP/1.1\r\nHost: edge\r\n"
                    "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                    sku, blen, body);
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            perror("send");
            exit(2);
        }
        p += w;
        n -= (size_t)w;
    }
}

/* The status of the answer in buf ("HTTP/1.1 201 ..."), 0 for none. */
static int status_of(const char *buf, size_t n)
{
    if (n < 12 || strncmp(buf, "HTTP/1.", 7) != 0)
        return 0;
    return atoi(buf + 9);
}

/* Reads fd to its end (10 s at most); the answer's status, 0 for none. */
static int read_answer(int fd)
{
    char buf[4096];
    size_t n = 0;
    long long until = now_ms() + 10000;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(until - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == sizeof(buf) - 1)
            break;
    }
    return status_of(buf, n);
}

static void count(int status)
{
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < MAX_STATUSES - 1 && seen[i].count && seen[i].status != status)
        i++;
    seen[i].status = status;
    seen[i].count++;
    pthread_mutex_unlock(&mu);
}

static void *halfclose_client(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        int i = next_order < total ? next_order++ : -1;
        pthread_mutex_unlock(&mu);
        if (i < 0)
            return NULL;
        char req[512];
        int fd = dial();
        send_all(fd, req, (size_t)order_request(req, sizeof(req), i));
        shutdown(fd, SHUT_WR);
        count(read_answer(fd));
        close(fd);
    }
}

static int halfclose(int clients)
{
    pthread_t t[64];
    if (clients < 1 || clients > 64)
        return 2;
    for (int i = 0; i < clients; i++)
        pthread_create(&t[i], NULL, halfclose_client, NULL);
    for (int i = 0; i < clients; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < MAX_STATUSES && seen[i].count; i++) {
        if (seen[i].status)
            printf("%d %d\n", seen[i].status, seen[i].count);
        else
            printf("none %d\n", seen[i].count);
    }
    return 0;
}

static int gone(int wait_ms)
{
    for (int i = 0; i < total; i++) {
        char req[512];
        int fd = dial();
        send_all(fd, req, (size_t)order_request(req, sizeof(req), i));
        usleep((useconds_t)wait_ms * 1000);
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        close(fd);
    }
    return 0;
}

static int trickle(int byte_ms)
{
    static const char req[] = "POST /skus/edge/orders HTTP/1.1\r\nHost: edge\r\n"
                              "Content-Length: 24\r\n\r\n{\"user_id\":\"trickler\"}  ";
    int fd = dial();
    long long t0 = now_ms();
    char buf[1024];
    size_t n = 0, sent = 0;
    while (now_ms() - t0 < 60000) {
        if (sent < sizeof(req) - 1 && send(fd, req + sent, 1, MSG_NOSIGNAL) == 1)
            sent++;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, byte_ms) > 0) {
            ssize_t r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
            if (r > 0) {
                n += (size_t)r;
                continue;
            }
            int st = status_of(buf, n);
            if (st)
                printf("%lld %d\n", now_ms() - t0, st);
            else
                printf("%lld none\n", now_ms() - t0);
            return 0;
        }
    }
    printf("never 0\n");
    return 0;
}

/* One answer on a kept-alive connection: what one read brings within 5 s
 * (a short answer on loopback comes in one piece). */
static int read_one(int fd)
{
    char buf[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) <= 0)
        return 0;
    ssize_t r = recv(fd, buf, sizeof(buf) - 1, 0);
    return r > 0 ? status_of(buf, (size_t)r) : 0;
}

static int keepalive(int idle_ms)
{
    static const char req[] = "GET /livez HTTP/1.1\r\nHost: edge\r\n\r\n";
    int fd = dial();
    send_all(fd, req, sizeof(req) - 1);
    int first = read_one(fd);
    usleep((useconds_t)idle_ms * 1000);
    int second = 0;
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1)
        second = read_one(fd);
    printf(first ? "%d " : "none ", first);
    printf(second ? "%d\n" : "none\n", second);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 7 && strcmp(argv[1], "halfclose") == 0) {
        port = atoi(argv[2]), sku = argv[3], tag = argv[4], total = atoi(argv[5]);
        return halfclose(atoi(argv[6]));
    }
    if (argc >= 7 && strcmp(argv[1], "gone") == 0) {
        port = atoi(argv[2]), sku = argv[3], tag = argv[4], total = atoi(argv[5]);
        return gone(atoi(argv[6]));
    }
    if (argc >= 4 && strcmp(argv[1], "keepalive") == 0) {
        port = atoi(argv[2]);
        return keepalive(atoi(argv[3]));
    }
    if (argc >= 4 && strcmp(argv[1], "trickle") == 0) {
        port = atoi(argv[2]);
        return trickle(atoi(argv[3]));
    }
    fprintf(stderr, "usage: edgeclient halfclose PORT SKU TAG N C | gone PORT SKU TAG N "
                    "WAIT_MS | keepalive PORT IDLE_MS | trickle PORT BYTE_MS\n");
    return 2;
}
