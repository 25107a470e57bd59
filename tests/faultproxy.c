/* faultproxy: a test-only TCP proxy on loopback that loses one answer, or slows
 * and cuts the network on a signal.
 *
 *   faultproxy LISTEN_PORT TARGET_PORT [--drop-after-arg PREFIX | --cut-after-arg
 * PREFIX | --drop-after-bytes TEXT | --slow-ms N]
 *
 * Forwards every connection on 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT,
 * both ways. With --drop-after-arg, the first client write that carries a
 * Redis (RESP) argument starting with PREFIX is forwarded to the server, the
 * server's answer to it is read and thrown away, and then that connection is
 * cut both ways: the command ran, its answer never arrives. (Cutting before
 * the answer could also lose the command itself, and the test would not know
 * which happened.) That happens once; later connections pass untouched. This
 * is how a test loses exactly the reply of a commit. --drop-after-bytes does the
 * same for the first write that carries TEXT anywhere, for protocols that are
 * not RESP (ZooKeeper's: a path in a create request). --cut-after-arg is
 * --drop-after-arg whose answer arrives: the command ran and the client has
 * its answer, then the connection is cut both ways before anything else the
 * client sends goes on (the next command on it fails).
 *
 * Signals change the network it stands for, for every connection, both ways
 * (a kernel without netem, and toxiproxy not packaged, is why it exists):
 *   SIGUSR1  slow: each chunk read waits N ms (--slow-ms, default 100) before
 *            it goes on;
 *   SIGUSR2  cut: nothing goes on, and what was read waits; the sockets stay
 *            open, as a TCP connection across a partition does, so what was
 *            sent before or during the cut arrives after the heal (a client
 *            that gave up on an answer may find its command ran late);
 *   SIGHUP   heal: no delay, nothing held.
 *
 * Prints "ready" on stdout once it listens. Stops on SIGTERM/SIGINT. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536

static char pattern[256]; /* "\r\n" + PREFIX (a bulk argument's start), or TEXT */
static size_t pattern_len;
static atomic_int armed;
static int deliver; /* --cut-after-arg: the answer goes on before the cut */

/* The network's state, set by signals (net_signals) and read by every pump. */
static pthread_mutex_t net_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t net_healed = PTHREAD_COND_INITIALIZER;
static int net_cut;
static int net_delay_ms;
static int slow_ms = 100;

/* Before a chunk read goes on: waits while the network is cut, then as long
 * as it is slow. */
static void net_gate(void)
{
    pthread_mutex_lock(&net_mu);
    while (net_cut)
        pthread_cond_wait(&net_healed, &net_mu);
    int delay = net_delay_ms;
    pthread_mutex_unlock(&net_mu);
    if (delay > 0) {
        struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

/* The thread that takes SIGUSR1, SIGUSR2 and SIGHUP (blocked everywhere else). */
static void *net_signals(void *arg)
{
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0)
            continue;
        pthread_mutex_lock(&net_mu);
        if (sig == SIGUSR1)
            net_delay_ms = slow_ms;
        else if (sig == SIGUSR2)
            net_cut = 1;
        else
            net_cut = 0, net_delay_ms = 0;
        pthread_cond_broadcast(&net_healed);
        pthread_mutex_unlock(&net_mu);
        fprintf(stderr, "faultproxy: %s\n",
                sig == SIGUSR1   ? "slow"
                : sig == SIGUSR2 ? "cut"
                                 : "healed");
    }
    return NULL;
}

/* One proxied connection: the two sockets and the cut flag. */
struct pair {
    int client, server;
    atomic_int cut;  /* set before the matching command goes out: 1 drop its
                        answer, 2 deliver it, then cut */
    atomic_int refs; /* the two pump threads */
};

static void pair_release(struct pair *p)
{
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        close(p->client);
        close(p->server);
        free(p);
    }
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Whether buf holds the pattern; tail keeps the end of the previous chunk so a
 * pattern split over two reads is still seen. */
static int matches(const char *tail, size_t tail_len, const char *buf, size_t len)
{
    char joined[2 * sizeof(pattern)];
    size_t head = len < sizeof(pattern) ? len : sizeof(pattern);
    memcpy(joined, tail, tail_len);
    memcpy(joined + tail_len, buf, head);
    if (memmem(joined, tail_len + head, pattern, pattern_len))
        return 1;
    return memmem(buf, len, pattern, pattern_len) != NULL;
}

static void *client_to_server(void *arg)
{
    struct pair *p = arg;
    char *buf = malloc(CHUNK);
    if (!buf)
        abort();
    char tail[sizeof(pattern)];
    size_t tail_len = 0;
    for (;;) {
        ssize_t n = read(p->client, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        net_gate();
        int cut = 0;
        if (pattern_len && atomic_load(&armed) &&
            matches(tail, tail_len, buf, (size_t)n)) {
            int expected = 1;
            cut = atomic_compare_exchange_strong(&armed, &expected, 0);
        }
        if (cut)
            atomic_store(&p->cut, deliver ? 2 : 1); /* before the server can answer */
        if (write_all(p->server, buf, (size_t)n) != 0)
            break;
        if (cut) { /* the other pump swallows (or delivers) the answer, then cuts */
            fprintf(stderr, "faultproxy: cutting a connection after its command\n");
            free(buf);
            pair_release(p);
            return NULL;
        }
        size_t keep = pattern_len > 1 ? pattern_len - 1 : 0;
        if (keep > (size_t)n)
            keep = (size_t)n;
        memcpy(tail, buf + (size_t)n - keep, keep);
        tail_len = keep;
    }
    free(buf);
    shutdown(p->client, SHUT_RDWR);
    shutdown(p->server, SHUT_RDWR);
    pair_release(p);
    return NULL;
}

static void *server_to_client(void *arg)
{
    struct pair *p = arg;
    char *buf = malloc(CHUNK);
    if (!buf)
        abort();
    for (;;) {
        ssize_t n = read(p->server, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        int cut = atomic_load(&p->cut);
        if (n <= 0 || cut == 1)
            break; /* after a cut: the answer it read is dropped */
        net_gate();
        if (write_all(p->client, buf, (size_t)n) != 0 || cut == 2)
            break; /* or delivered, then cut */
    }
    free(buf);
    shutdown(p->client, SHUT_RDWR);
    shutdown(p->server, SHUT_RDWR);
    pair_release(p);
    return NULL;
}

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int parse_port(const char *text)
{
    char *end;
    long v = strtol(text, &end, 10);
    return *end || v < 1 || v > 65535 ? -1 : (int)v;
}

int main(int argc, char **argv)
{
    int raw = argc == 5 && strcmp(argv[3], "--drop-after-bytes") == 0;
    int slow = argc == 5 && strcmp(argv[3], "--slow-ms") == 0;
    deliver = argc == 5 && strcmp(argv[3], "--cut-after-arg") == 0;
    if (argc != 3 && !(argc == 5 && (raw || slow || deliver ||
                                     strcmp(argv[3], "--drop-after-arg") == 0))) {
        fprintf(stderr, "usage: faultproxy LISTEN_PORT TARGET_PORT "
                        "[--drop-after-arg PREFIX | --cut-after-arg PREFIX | "
                        "--drop-after-bytes TEXT | --slow-ms N]\n");
        return 2;
    }
    int listen_port = parse_port(argv[1]), target = parse_port(argv[2]);
    if (listen_port < 0 || target < 0) {
        fprintf(stderr, "faultproxy: bad port\n");
        return 2;
    }
    if (slow) {
        char *end;
        long v = strtol(argv[4], &end, 10);
        if (*end || v < 0 || v > 60000) {
            fprintf(stderr, "faultproxy: --slow-ms wants 0..60000\n");
            return 2;
        }
        slow_ms = (int)v;
    } else if (argc == 5) {
        if (strlen(argv[4]) + 3 > sizeof(pattern)) {
            fprintf(stderr, "faultproxy: prefix too long\n");
            return 2;
        }
        pattern_len = (size_t)snprintf(pattern, sizeof(pattern), "%s%s",
                                       raw ? "" : "\r\n", argv[4]);
        atomic_store(&armed, 1);
    }
    signal(SIGPIPE, SIG_IGN);
    /* blocked here, so in every thread started after; net_signals takes them */
    static sigset_t net_set;
    sigemptyset(&net_set);
    sigaddset(&net_set, SIGUSR1);
    sigaddset(&net_set, SIGUSR2);
    sigaddset(&net_set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &net_set, NULL);
    pthread_t sig_thread;
    if (pthread_create(&sig_thread, NULL, net_signals, &net_set) != 0)
        abort();
    pthread_detach(sig_thread);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)listen_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 128) != 0) {
        perror("faultproxy: listen");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int cfd = accept(lfd, NULL, NULL);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("faultproxy: accept");
            return 1;
        }
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        int sfd = connect_target(target);
        if (sfd < 0) {
            close(cfd);
            continue;
        }
        struct pair *p = calloc(1, sizeof(*p));
        if (!p)
            abort();
        p->client = cfd;
        p->server = sfd;
        atomic_store(&p->refs, 2);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, client_to_server, p) != 0 ||
            pthread_create(&t, &attr, server_to_client, p) != 0)
            abort();
        pthread_attr_destroy(&attr);
    }
}
