#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define MAX_SERVERS 16
static void *running[MAX_SERVERS];    /* struct test_redis */
static void *zk_running[MAX_SERVERS]; /* struct test_zk */
static void *pg_running[MAX_SERVERS]; /* struct test_pg */
static int atexit_done;

static pid_t proxies[MAX_SERVERS];

static void stop_all(void)
{
    for (int i = 0; i < MAX_SERVERS; i++) {
        struct test_zk *z = zk_running[i];
        struct test_redis *r = running[i];
        struct test_pg *pg = pg_running[i];
        if (pg && pg->pid > 0)
            test_pg_stop(pg, 1, 0);
        if (z && z->pid > 0)
            test_zk_stop(z, 1, 0);
        if (r && r->pid > 0)
            test_redis_stop(r, 1, 0);
        if (proxies[i] > 0) {
            kill(proxies[i], SIGKILL);
            waitpid(proxies[i], NULL, 0);
        }
    }
}

/* Sets up the exit hook that stops whatever is still running (once). */
static void exit_hook(void)
{
    if (!atexit_done) {
        atexit(stop_all);
        atexit_done = 1;
    }
}

/* Lists server in table (on) or takes it off, so that the exit hook stops
 * whatever is still running. */
static void track(void **table, void *server, int on)
{
    exit_hook();
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (on && !table[i]) {
            table[i] = server;
            return;
        }
        if (!on && table[i] == server) {
            table[i] = NULL;
            return;
        }
    }
}

/* Makes a fresh temp dir from template (ending in XXXXXX) in dir. */
static void temp_dir(char *dir, size_t len, const char *template)
{
    snprintf(dir, len, "%s", template);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
}

/* Stops the server of *pid (SIGKILL when hard, else SIGTERM) and reaps it;
 * then, unless keep_dir, removes its dir. Both become empty. */
static void server_end(pid_t *pid, char *dir, int hard, int keep_dir)
{
    if (*pid > 0) {
        kill(*pid, hard ? SIGKILL : SIGTERM);
        while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
            ;
        *pid = 0;
    }
    if (!keep_dir && dir[0]) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
        dir[0] = '\0';
    }
}

/* 0 when nothing on loopback listens on or is bound to port (a bind succeeds). */
static int port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    int rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
    close(fd);
    return rc;
}

/* A port below the kernel's ephemeral range, so that no client connection (of this
 * test or of one running beside it) takes it between the pick and a restart on it,
 * and reserved in the directory the scripts' free_port uses (scripts/lib.sh:
 * /tmp/seckill-ports.UID, one file per port, made with O_EXCL; stale after two
 * minutes), so that tests started side by side (tests/run.sh -j) never pick the same.
 * Aborts when none is found in 200 tries. */
int test_free_port(void)
{
    int lo = 10000, hi = 32767, eph = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &eph) == 1 && eph > lo + 1000)
            hi = eph - 1;
        fclose(f);
    }
    char dir[64], path[96];
    snprintf(dir, sizeof(dir), "/tmp/seckill-ports.%u", (unsigned)getuid());
    mkdir(dir, 0700);
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)clock_now_us();
    for (int attempt = 0; attempt < 200; attempt++) {
        int port = lo + (int)(rand_r(&seed) % (unsigned)(hi - lo + 1));
        if (port_bindable(port) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%d", dir, port);
        struct stat st;
        if (stat(path, &st) == 0 && time(NULL) - st.st_mtime > 120)
            unlink(path); /* a stale reservation */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0)
            continue; /* reserved a moment ago by another test */
        close(fd);
        return port;
    }
    fprintf(stderr, "test_free_port: no free port found\n");
    abort();
}

int test_wait_for(int (*cond_fn)(void *), void *arg, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 2) {
        if (cond_fn(arg))
            return 1;
        clock_sleep_us(2000);
    }
    return cond_fn(arg);
}

/* A server child that died while its start was waited for: reaped, said on
 * stderr (what, its port, where its log is: log may be NULL), *pid set to -1
 * (nothing left to stop). 1 when it did, 0 while it runs. The waits below
 * then end at once: their condition answers 1 and the caller finds pid -1. */
static int server_exited(pid_t *pid, const char *what, int port, const char *log)
{
    int status;
    if (waitpid(*pid, &status, WNOHANG) != *pid)
        return 0;
    fprintf(stderr, "%s on port %d exited early%s%s%s\n", what, port, log ? " (see " : "",
            log ? log : "", log ? ")" : "");
    *pid = -1;
    return 1;
}

struct ping_arg {
    struct test_redis *r;
};

static int answers_ping(void *arg)
{
    struct test_redis *r = ((struct ping_arg *)arg)->r;
    if (server_exited(&r->pid, "redis-server", r->port, NULL))
        return 1;
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisReply *rep = redisCommand(c, "PING");
        ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (rep)
            freeReplyObject(rep);
    }
    if (c)
        redisFree(c);
    return ok;
}

/* fork() for a server. The child (0 returned) is killed when the test
 * process ends, however that happens (a crash, or a sanitizer's _exit after
 * its report, which skips the exit hook), so no server outlives its test.
 * Tests start their servers from the main thread, whose end is the
 * process's. A fork that fails aborts the test. */
static pid_t fork_server(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* it ended before the line above */
            _exit(1);
    }
    return pid;
}

static int spawn(struct test_redis *r, const char *const *extra_args)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", r->port);
    const char *argv[64] = {
        "redis-server", "--port",    port,        "--bind", "127.0.0.1",
        "--dir",        r->dir,      "--save",    "",       "--daemonize",
        "no",           "--logfile", "redis.log", NULL};
    int n = 13;
    for (int i = 0; extra_args && extra_args[i] && n < 62; i++)
        argv[n++] = extra_args[i];
    argv[n] = NULL;
    pid_t pid = fork_server();
    if (pid == 0) {
        execvp("redis-server", (char *const *)argv);
        perror("exec redis-server");
        _exit(127);
    }
    r->pid = pid;
    track(running, r, 1);
    struct ping_arg arg = {r};
    if (!test_wait_for(answers_ping, &arg, 10000) || r->pid < 0)
        return -1;
    return 0;
}

void test_redis_start(struct test_redis *r, const char *const *extra_args)
{
    /* As seckill's main does (rconn.h): a write on a connection that a stopped or
     * restarted Redis closed fails with EPIPE, which drops it, instead of killing
     * the test with SIGPIPE (a lease thread renewing on its old connection). */
    signal(SIGPIPE, SIG_IGN);
    memset(r, 0, sizeof(*r));
    temp_dir(r->dir, sizeof(r->dir), "/tmp/seckill-test-XXXXXX");
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = test_free_port();
        if (spawn(r, extra_args) == 0)
            return;
        if (r->pid > 0)
            test_redis_stop(r, 1, 1);
    }
    fprintf(stderr, "could not start redis-server\n");
    exit(1); /* not abort: the exit hook stops the servers already started */
}

void test_redis_restart(struct test_redis *r, const char *const *extra_args)
{
    if (spawn(r, extra_args) != 0) {
        fprintf(stderr, "could not restart redis-server on port %d\n", r->port);
        exit(1);
    }
}

void test_redis_stop(struct test_redis *r, int hard, int keep_dir)
{
    server_end(&r->pid, r->dir, hard, keep_dir);
    track(running, r, 0);
}

/* drop_flag: the faultproxy option that takes drop (none when drop is NULL):
 * a drop, or --slow-ms. */
static void proxy_start(struct test_proxy *p, int target_port, const char *drop_flag,
                        const char *drop)
{
    exit_hook();
    const char *build = getenv("SECKILL_BUILD");
    char bin[512], listen[16], target[16];
    snprintf(bin, sizeof(bin), "%s/tests/faultproxy", build && *build ? build : "build");
    snprintf(target, sizeof(target), "%d", target_port);
    for (int attempt = 0; attempt < 5; attempt++) {
        p->port = test_free_port();
        snprintf(listen, sizeof(listen), "%d", p->port);
        int out[2];
        if (pipe(out) != 0)
            abort();
        pid_t pid = fork_server();
        if (pid == 0) {
            dup2(out[1], STDOUT_FILENO);
            close(out[0]);
            close(out[1]);
            if (drop)
                execl(bin, bin, listen, target, drop_flag, drop, (char *)NULL);
            else
                execl(bin, bin, listen, target, (char *)NULL);
            perror(bin);
            _exit(127);
        }
        close(out[1]);
        char line[16] = "";
        ssize_t n;
        while ((n = read(out[0], line, sizeof(line) - 1)) < 0 && errno == EINTR)
            ;
        close(out[0]);
        if (n > 0 && strncmp(line, "ready", 5) == 0) {
            p->pid = pid;
            for (int i = 0; i < MAX_SERVERS; i++)
                if (proxies[i] <= 0) {
                    proxies[i] = pid;
                    break;
                }
            return;
        }
        kill(pid, SIGKILL); /* the port was taken meanwhile: another */
        waitpid(pid, NULL, 0);
    }
    fprintf(stderr, "could not start %s\n", bin);
    exit(1); /* not abort: the exit hook stops the servers already started */
}

void test_proxy_start(struct test_proxy *p, int target_port, const char *drop_prefix)
{
    proxy_start(p, target_port, "--drop-after-arg", drop_prefix);
}

void test_proxy_start_bytes(struct test_proxy *p, int target_port, const char *drop_bytes)
{
    proxy_start(p, target_port, "--drop-after-bytes", drop_bytes);
}

void test_proxy_start_slow(struct test_proxy *p, int target_port, int slow_ms)
{
    char ms[16];
    snprintf(ms, sizeof(ms), "%d", slow_ms);
    proxy_start(p, target_port, "--slow-ms", ms);
}

void test_proxy_stop(struct test_proxy *p)
{
    if (p->pid <= 0)
        return;
    for (int i = 0; i < MAX_SERVERS; i++)
        if (proxies[i] == p->pid)
            proxies[i] = 0;
    char no_dir[1] = "";
    server_end(&p->pid, no_dir, 1, 1);
}

/* ---- ZooKeeper ---------------------------------------------------------- */

int test_zk_4lw(int port, const char *cmd, char *buf, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {2, 0};
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t n = 0;
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
             write(fd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd);
    while (ok && n + 1 < len) {
        ssize_t got = read(fd, buf + n, len - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            ok = 0;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    return ok && n > 0 ? (int)n : -1;
}

static int zk_answers(void *arg)
{
    struct test_zk *z = arg;
    char log[300];
    snprintf(log, sizeof(log), "%s/zk.log", z->dir);
    if (server_exited(&z->pid, "zookeeper", z->port, log))
        return 1;
    char buf[1024];
    return test_zk_4lw(z->port, "srvr", buf, sizeof(buf)) > 0 && strstr(buf, "Mode: ");
}

static int zk_spawn(struct test_zk *z)
{
    char cfg[512], data[300], log[300];
    snprintf(cfg, sizeof(cfg), "%s/zoo.cfg", z->dir);
    snprintf(data, sizeof(data), "%s/data", z->dir);
    snprintf(log, sizeof(log), "%s/zk.log", z->dir);
    FILE *f = fopen(cfg, "w");
    if (!f) {
        perror(cfg);
        return -1;
    }
    fprintf(f,
            "tickTime=100\n"
            "minSessionTimeout=200\n"
            "maxSessionTimeout=60000\n"
            "dataDir=%s\n"
            "clientPort=%d\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,cons,wchp\n",
            data, z->port);
    fclose(f);
    pid_t pid = fork_server();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        /* A small, quickly started JVM: the tests need one client port. */
        execlp("java", "java", "-Xmx128m", "-Xss512k", "-XX:+UseSerialGC",
               "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Djava.awt.headless=true",
               "-Dzookeeper.admin.enableServer=false", "-cp",
               "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
               "org.apache.zookeeper.server.ZooKeeperServerMain", cfg, (char *)NULL);
        perror("exec java");
        _exit(127);
    }
    z->pid = pid;
    track(zk_running, z, 1);
    /* A JVM on a loaded 2-core machine can take a while. */
    if (!test_wait_for(zk_answers, z, 60000) || z->pid < 0)
        return -1;
    return 0;
}

void test_zk_start(struct test_zk *z)
{
    memset(z, 0, sizeof(*z));
    temp_dir(z->dir, sizeof(z->dir), "/tmp/seckill-zk-XXXXXX");
    for (int attempt = 0; attempt < 3; attempt++) {
        z->port = test_free_port();
        if (zk_spawn(z) == 0)
            return;
        if (z->pid > 0)
            test_zk_stop(z, 1, 1);
    }
    fprintf(stderr, "could not start zookeeper (java, /usr/share/java/zookeeper.jar)\n");
    exit(1); /* not abort: the exit hook stops the servers already started */
}

void test_zk_restart(struct test_zk *z)
{
    if (zk_spawn(z) != 0) {
        fprintf(stderr, "could not restart zookeeper on port %d\n", z->port);
        exit(1);
    }
}

void test_zk_stop(struct test_zk *z, int hard, int keep_dir)
{
    server_end(&z->pid, z->dir, hard, keep_dir);
    track(zk_running, z, 0);
}

/* ---- PostgreSQL ------------------------------------------------------------ */

/* In a child: becomes the postgres user (pw), and is sent sig when the test
 * process ends (a change of user clears the parent-death signal: set again
 * after it). */
static void become_postgres(const struct passwd *pw, pid_t parent, int sig)
{
    if (setgid(pw->pw_gid) != 0 || initgroups(pw->pw_name, pw->pw_gid) != 0 ||
        setuid(pw->pw_uid) != 0) {
        perror("become postgres");
        _exit(127);
    }
    if (sig)
        prctl(PR_SET_PDEATHSIG, sig);
    if (getppid() != parent)
        _exit(1);
    setenv("HOME", pw->pw_dir, 1);
    setenv("USER", pw->pw_name, 1);
}

static int pg_answers(void *arg)
{
    struct test_pg *p = arg;
    char log[300];
    snprintf(log, sizeof(log), "%s/pg.log", p->dir);
    if (server_exited(&p->pid, "postgres", p->port, log))
        return 1;
    return PQping(p->url) == PQPING_OK;
}

static int pg_spawn(struct test_pg *p)
{
    const struct passwd *pw = getpwnam("postgres");
    char data[300], log[300], port[16];
    snprintf(data, sizeof(data), "%s/data", p->dir);
    snprintf(log, sizeof(log), "%s/pg.log", p->dir);
    snprintf(port, sizeof(port), "%d", p->port);
    snprintf(p->url, sizeof(p->url), "postgresql://postgres@127.0.0.1:%d/postgres",
             p->port);
    pid_t parent = getpid();
    pid_t pid = fork_server();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        become_postgres(pw, parent, SIGQUIT);
        const char *argv[40] = {"postgres", "-D",        data,
                                "-p",       port,        "-k",
                                p->dir,     "-c",        "listen_addresses=127.0.0.1",
                                "-c",       "fsync=off", NULL};
        int n = 11;
        for (int i = 0; p->extra && p->extra[i] && n < 38; i++)
            argv[n++] = p->extra[i];
        argv[n] = NULL;
        execvp("postgres", (char *const *)argv);
        perror("exec postgres");
        _exit(127);
    }
    p->pid = pid;
    track(pg_running, p, 1);
    if (!test_wait_for(pg_answers, p, 30000) || p->pid < 0)
        return -1;
    return 0;
}

void test_pg_start(struct test_pg *p, const char *const *extra)
{
    memset(p, 0, sizeof(*p));
    p->extra = extra;
    const struct passwd *pw = getpwnam("postgres");
    if (!pw ||
        system("command -v postgres >/dev/null && command -v initdb >/dev/null") != 0) {
        fprintf(stderr,
                "no PostgreSQL (postgres, initdb) or no postgres user: skipped\n");
        exit(77);
    }
    temp_dir(p->dir, sizeof(p->dir), "/tmp/seckill-pg-XXXXXX");
    if (chmod(p->dir, 0755) != 0 || chown(p->dir, pw->pw_uid, pw->pw_gid) != 0) {
        perror(p->dir);
        exit(1);
    }
    char data[300];
    snprintf(data, sizeof(data), "%s/data", p->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        become_postgres(pw, parent, 0);
        execlp("initdb", "initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E",
               "UTF8", "--locale=C.UTF-8", "--no-sync", (char *)NULL);
        perror("exec initdb");
        _exit(127);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "initdb failed in %s\n", p->dir);
        exit(1);
    }
    for (int attempt = 0; attempt < 3; attempt++) {
        p->port = test_free_port();
        if (pg_spawn(p) == 0)
            return;
        if (p->pid > 0)
            test_pg_stop(p, 1, 1);
    }
    fprintf(stderr, "could not start postgres (see %s/pg.log)\n", p->dir);
    exit(1);
}

void test_pg_restart(struct test_pg *p)
{
    if (pg_spawn(p) != 0) {
        fprintf(stderr, "could not restart postgres on port %d\n", p->port);
        exit(1);
    }
}

void test_pg_stop(struct test_pg *p, int hard, int keep_dir)
{
    if (p->pid > 0) {
        kill(p->pid, hard ? SIGQUIT : SIGINT);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        p->pid = 0;
    }
    server_end(&p->pid, p->dir, 0, keep_dir);
    track(pg_running, p, 0);
}

/* ---- the background loop -------------------------------------------------- */

static struct event_base *bg_base;
static pthread_t bg_tid;
static int bg_users;
static pid_t bg_pid; /* the process whose thread runs bg_base */
static pthread_mutex_t bg_mu = PTHREAD_MUTEX_INITIALIZER;

static void *bg_main(void *arg)
{
    event_base_loop(arg, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* A forked child has no copy of the parent's loop thread: it starts one of
 * its own (the parent's base is left alone). */
struct event_base *test_loop_hold(void)
{
    pthread_mutex_lock(&bg_mu);
    if (bg_pid != getpid()) {
        bg_users = 0;
        bg_pid = getpid();
    }
    if (bg_users++ == 0) {
        evthread_use_pthreads();
        bg_base = event_base_new();
        if (!bg_base || pthread_create(&bg_tid, NULL, bg_main, bg_base) != 0)
            abort();
    }
    struct event_base *base = bg_base;
    pthread_mutex_unlock(&bg_mu);
    return base;
}

void test_loop_release(void)
{
    pthread_mutex_lock(&bg_mu);
    if (--bg_users == 0) {
        event_base_loopbreak(bg_base);
        pthread_join(bg_tid, NULL);
        event_base_free(bg_base);
        bg_base = NULL;
    }
    pthread_mutex_unlock(&bg_mu);
}

struct event_base *test_loop(void)
{
    pthread_mutex_lock(&bg_mu);
    struct event_base *base = bg_pid == getpid() ? bg_base : NULL;
    pthread_mutex_unlock(&bg_mu);
    if (!base)
        fail_msg("test_loop: nobody holds the background loop");
    return base;
}

struct bg_call {
    void (*fn)(void *);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    int done;
};

static void bg_call_run(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct bg_call *c = arg;
    c->fn(c->arg);
    pthread_mutex_lock(&c->mu);
    c->done = 1;
    pthread_cond_signal(&c->done_cv);
    pthread_mutex_unlock(&c->mu);
}

void test_loop_call(void (*fn)(void *), void *arg)
{
    struct bg_call c = {.fn = fn, .arg = arg};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.done_cv, NULL);
    if (event_base_once(test_loop(), -1, EV_TIMEOUT, bg_call_run, &c, NULL) != 0)
        abort();
    pthread_mutex_lock(&c.mu);
    while (!c.done)
        pthread_cond_wait(&c.done_cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    pthread_cond_destroy(&c.done_cv);
    pthread_mutex_destroy(&c.mu);
}

/* ---- locks ---------------------------------------------------------------- */

struct lock *test_lock_new(const char *mode, int ttl_ms, int max_lease_ms, int skew_ms)
{
    struct lock_config cfg = {.ttl_ms = ttl_ms,
                              .fencing = 1,
                              .max_lease_ms = max_lease_ms,
                              .clock_skew_ms = skew_ms};
    char err[256] = "";
    struct lock *l = lock_new(mode, &cfg, err, sizeof(err));
    if (!l)
        fail_msg("lock_new(%s): %s", mode, err);
    test_lock_attach(l);
    return l;
}

void test_lock_attach(struct lock *l)
{
    lock_attach(l, test_loop_hold());
}

static void detach_on_loop(void *arg)
{
    lock_detach(arg);
}

void test_lock_free(struct lock *l)
{
    if (!l)
        return;
    test_loop_call(detach_on_loop, l);
    lock_free(l);
    test_loop_release();
}

void test_lock_key_del(struct rconn *rc, const char *key)
{
    redisReply *r = rconn_command(rc, "DEL %s %s:fence %s:queue", key, key, key);
    assert_non_null(r);
    freeReplyObject(r);
}

void test_sessions_open(struct test_sessions *p, struct lock *l, int port, int n)
{
    assert_true(n >= 1 && n <= TEST_SESSIONS_MAX);
    memset(p, 0, sizeof(*p));
    p->lock = l;
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->rc[i] = rconn_new("127.0.0.1", port, NULL, 2000);
        p->s[i] = lock_session_new(l, p->rc[i]);
    }
}

void test_sessions_close(struct test_sessions *p)
{
    for (int i = 0; i < p->n; i++) {
        lock_session_free(p->s[i]);
        rconn_free(p->rc[i]);
    }
    test_lock_free(p->lock);
}

static void *excl_worker(void *arg)
{
    struct test_excl *run = arg;
    struct rconn *rc = rconn_new("127.0.0.1", run->port, NULL, 2000);
    struct lock_session *s = lock_session_new(run->lock, rc);
    for (int i = 0; i < run->iterations; i++) {
        struct lock_grant g;
        if (lock_acquire(s, run->key, 10000, &g) != LOCK_ACQUIRED) {
            atomic_fetch_add(&run->failures, 1);
            continue;
        }
        if (atomic_fetch_add(&run->inside, 1) != 0)
            atomic_fetch_add(&run->overlaps, 1);
        long v = atomic_load_explicit(&run->counter, memory_order_relaxed);
        clock_sleep_us(run->work_us);
        atomic_store_explicit(&run->counter, v + 1, memory_order_relaxed);
        atomic_fetch_sub(&run->inside, 1);
        lock_status st = lock_release(s, run->key, &g);
        if (st != LOCK_RELEASED && !(st == LOCK_NOT_HELD && run->not_held_ok))
            atomic_fetch_add(&run->failures, 1);
    }
    lock_session_free(s);
    rconn_free(rc);
    return NULL;
}

void test_excl_start(struct test_excl *run, int nthreads)
{
    assert_true(nthreads >= 1 && nthreads <= TEST_EXCL_THREADS);
    run->nthreads = nthreads;
    for (int i = 0; i < nthreads; i++)
        assert_int_equal(pthread_create(&run->thread[i], NULL, excl_worker, run), 0);
}

void test_excl_join(struct test_excl *run)
{
    for (int i = 0; i < run->nthreads; i++)
        pthread_join(run->thread[i], NULL);
}

const struct redisReply *test_entry_of(struct test_entry *e, const char *fields)
{
    snprintf(e->text, sizeof(e->text), "%s", fields);
    size_t n = 0;
    char *save = NULL;
    for (char *f = strtok_r(e->text, " ", &save); f && n + 2 <= 64;
         f = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(f, '=');
        assert_non_null(eq);
        *eq = '\0';
        const char *parts[2] = {f, eq + 1};
        for (int i = 0; i < 2; i++, n++) {
            e->items[n] = (redisReply){.type = REDIS_REPLY_STRING,
                                       .str = (char *)parts[i],
                                       .len = strlen(parts[i])};
            e->ptrs[n] = &e->items[n];
        }
    }
    e->arr = (redisReply){.type = REDIS_REPLY_ARRAY, .elements = n, .element = e->ptrs};
    return &e->arr;
}

void rw_tally_round(struct lock_session *s, const char *key, lock_side side, int wait_ms,
                    struct rw_tally *t)
{
    struct lock_grant g;
    if (lock_rw_acquire(s, key, side, wait_ms, &g) != LOCK_ACQUIRED) {
        t->failures++;
        return;
    }
    if (side == LOCK_WRITE) {
        if (++t->writers != 1 || t->readers != 0)
            t->overlaps++;
        clock_sleep_us(300); /* the critical section's work */
        t->writers--;
    } else {
        if (++t->readers > 1)
            t->shared++;
        if (t->writers != 0)
            t->overlaps++;
        clock_sleep_us(300);
        t->readers--;
    }
    if (lock_release(s, key, &g) != LOCK_RELEASED)
        t->failures++;
}

static void *acquirer_run(void *arg)
{
    struct test_acquirer *a = arg;
    a->res = a->readers
                 ? lock_rw_write_over(a->s, a->rw, a->readers, a->n, a->wait_ms, &a->g)
                 : lock_acquire_read_of(a->s, a->key, a->rw, 0, a->wait_ms, &a->g);
    a->acquired_us = clock_now_us();
    atomic_store(&a->done, 1);
    return NULL;
}

static void acquirer_start(struct test_acquirer *a)
{
    assert_int_equal(pthread_create(&a->thread, NULL, acquirer_run, a), 0);
}

void test_read_of_start(struct test_acquirer *a, struct lock_session *s, const char *key,
                        const char *rw, int wait_ms)
{
    memset(a, 0, sizeof(*a));
    a->s = s;
    a->key = key;
    a->rw = rw;
    a->wait_ms = wait_ms;
    acquirer_start(a);
}

void test_write_over_start(struct test_acquirer *a, struct lock_session *s,
                           const char *rw, const char *readers, int n, int wait_ms)
{
    memset(a, 0, sizeof(*a));
    a->s = s;
    a->key = rw;
    a->rw = rw;
    a->readers = readers;
    a->n = n;
    a->wait_ms = wait_ms;
    acquirer_start(a);
}

int test_acquirer_done(void *a)
{
    return atomic_load(&((struct test_acquirer *)a)->done);
}
