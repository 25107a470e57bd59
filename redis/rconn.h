/* rconn: one thread's connection to one Redis node.
 *
 * Wraps a hiredis context that is (re)connected on demand: after any I/O error
 * the context is dropped and the next call connects again, so a Redis restart
 * heals by itself. Connect and command timeouts bound every call.
 *
 * Lua scripts are `struct rscript` constants, loaded once per process with
 * SCRIPT LOAD and called by SHA; a NOSCRIPT answer (Redis restarted, SCRIPT
 * FLUSH) falls back to EVAL, which also re-caches the script. Their text comes
 * from lock/lua/ and inventory/lua/, assembled at build time; an error that
 * Redis reports at "user_script:N" of a loaded script comes back naming the
 * .lua file and line instead (in every reply this module hands out).
 *
 * The process must ignore SIGPIPE (service/main.c does): hiredis writes with
 * write(2), and a write on a connection Redis closed must fail with EPIPE, not
 * kill the process.
 *
 * Thread safety: an rconn belongs to one thread. rscript values are shared and
 * safe to use from any thread. */
#ifndef SECKILL_RCONN_H
#define SECKILL_RCONN_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct rconn;

/* The outcome of a call that succeeds or fails (hiredis's REDIS_OK/REDIS_ERR);
 * after RCONN_ERR, rconn_errstr() says why. */
typedef enum { RCONN_OK = 0, RCONN_ERR = -1 } rconn_status;

struct rconn_addr {
    char host[256];
    int port;
};

/* Parses "HOST:PORT" into addr: RCONN_OK, or RCONN_ERR when malformed (addr
 * untouched). */
rconn_status rconn_addr_parse(const char *text, struct rconn_addr *addr);

/* A new, not yet connected, connection to host:port. password may be NULL.
 * timeout_ms bounds connect and each command. Never returns NULL. */
struct rconn *rconn_new(const char *host, int port, const char *password, int timeout_ms);
void rconn_free(struct rconn *rc); /* NULL is a no-op */

/* A new, not yet connected, connection to the same node with the same password
 * and timeout as rc (for a helper thread that needs its own). Never NULL. */
struct rconn *rconn_clone(const struct rconn *rc);
/* The connect/command timeout rc was made with, in milliseconds. */
int rconn_timeout_ms(const struct rconn *rc);

/* The connected context, connecting (and AUTHing) first if needed.
 * NULL when Redis cannot be reached; rconn_errstr() says why. */
redisContext *rconn_ctx(struct rconn *rc);

/* Runs one command (printf-style as redisCommand). Returns the reply (caller
 * frees with freeReplyObject), or NULL on a connection error, after which the
 * context is dropped and the next call reconnects. A Redis error reply is a
 * reply of type REDIS_REPLY_ERROR, not NULL. */
redisReply *rconn_command(struct rconn *rc, const char *fmt, ...);
redisReply *rconn_command_argv(struct rconn *rc, int argc, const char **argv,
                               const size_t *argvlen);

/* Drops the connection when its peer has closed it (Redis restarted): one
 * non-blocking peek at the socket, so that a request does not fail on a
 * connection that died while idle. Call once at the start of an operation. */
void rconn_check(struct rconn *rc);

/* How many times a connected context failed while it owed answers: a command
 * had been handed to it (written, or being written), so it may have run
 * although its answer never came. A call that could not connect sends
 * nothing and does not count. Compare before and after a call to tell "not
 * sent" from "outcome unknown". */
uint64_t rconn_unanswered(const struct rconn *rc);

/* How many times, in this process, an rconn connected after an earlier
 * attempt of its own (its connection was dropped, or a connect failed): a
 * number that grows whenever some Redis is reachable again. Any thread; it
 * costs one atomic load. */
unsigned long rconn_reconnects(void);

/* A link is one connection made: its id is unique in the process (rconn's and
 * aconn's alike) and never 0. A reply carried by link L and a later call that
 * finds the same L went over one socket to one server process, with nothing
 * lost between them (a Redis that restarts drops every link to it). WAIT
 * counts only its own link's writes: a replicas' acknowledgement covers a
 * commit only on the link that carried it, or behind a write made after the
 * commit's answer on a link to the same server (see inventory/ack.h). */
uint64_t rconn_link_new(void);
/* The link rc is connected on now; 0 when it is not connected (dropped, or a
 * context that failed). */
uint64_t rconn_link(const struct rconn *rc);

/* Marks the connection broken so that the next call reconnects. */
void rconn_drop(struct rconn *rc, const char *why);
const char *rconn_errstr(const struct rconn *rc);
const char *rconn_host(const struct rconn *rc);
int rconn_port(const struct rconn *rc);

/* A Lua script as the build assembled it (scripts/lua2c.awk): the file
 * dir/lua/name.lua becomes `const struct rscript_source lua_dir_name` in
 * $(BUILD)/gen/dir/lua/name.c, with its `--#include "piece.lua"` lines
 * replaced by those files. For each line of the text, where it came from. */
struct rscript_line {
    int file; /* index in files */
    int line; /* 1-based, in that file */
};
struct rscript_source {
    const char *text;
    const char *const *files; /* from the repository root; [0] the script's own */
    int nfiles;
    const struct rscript_line *lines; /* [i]: line i + 1 of text */
    int nlines;
};

/* The runtime handle of a script: static storage only (a loaded script stays
 * on a process-wide list, by which error replies find their line map). */
struct rscript {
    const char *name;
    const struct rscript_source *source;
    char sha[41];
    _Atomic int loaded;
    pthread_mutex_t mu;
    struct rscript *next_loaded;
};
#define RSCRIPT_INIT(name_, source_)                                                     \
    {                                                                                    \
        .name = (name_), .source = &(source_), .sha = {0}, .loaded = 0,                  \
        .mu = PTHREAD_MUTEX_INITIALIZER, .next_loaded = NULL                             \
    }

/* EVALSHA script with nkeys KEYS followed by ARGV; argv holds nkeys + nargs
 * strings (argvlen may be NULL for NUL-terminated strings). Loads the script on
 * first use; falls back to EVAL on NOSCRIPT. Returns as rconn_command. */
redisReply *rconn_eval(struct rconn *rc, struct rscript *s, int nkeys, int nargs,
                       const char **argv, const size_t *argvlen);

/* SCRIPT LOADs s if this process has not done so yet. */
rconn_status rconn_script_load(struct rconn *rc, struct rscript *s);

/* SCRIPT LOADs s again even if this process has done so: after a NOSCRIPT
 * answer to a call that cannot simply be repeated with EVAL. */
rconn_status rconn_script_reload(struct rconn *rc, struct rscript *s);

/* The scripts this process has loaded so far, newest first (each links the
 * next by next_loaded); the list only grows. */
struct rscript *rscript_loaded(void);

/* True when reply is a NOSCRIPT error. */
int rconn_is_noscript(const redisReply *r);

/* Records the SHA that r, the answer to SCRIPT LOAD of s, names (for a
 * connection that loads scripts itself, as aconn does). RCONN_ERR when r is
 * not a SHA (then an error in it names the .lua file and line). */
rconn_status rscript_learn(struct rscript *s, redisReply *r);
/* Makes r, when it is the error of a loaded script, name the .lua file and
 * line instead of "user_script:N" (in place). */
void rscript_locate_error(redisReply *r);

/* One command to run or pipeline: a plain argument vector, or a call of a
 * script whose first nkeys arguments are KEYS. Plain value; argv is borrowed. */
struct rcmd {
    struct rscript *script; /* NULL: argv is the whole command */
    int nkeys;
    int argc;
    const char **argv;
};

/* Makes cmd ready to pipeline: loads its script if this process has not yet.
 * Call before the pipeline begins (a load is a round trip of its own). */
rconn_status rconn_prepare(struct rconn *rc, const struct rcmd *cmd);
/* Runs cmd now (a script by EVALSHA with the EVAL fallback). As rconn_command. */
redisReply *rconn_run(struct rconn *rc, const struct rcmd *cmd);

/* A pipeline: commands appended to one connection, their answers collected in
 * order. It runs whole on the connection it began on or fails whole: it never
 * reconnects, and once it failed every call fails and the connection holds
 * none of its commands (one appended but not yet sent is dropped with the
 * connection, so a failure before the first flush or collect means none ran;
 * after one, whether they ran is unknown, and rconn_unanswered counts it). A plain
 * value on the caller's stack; the connection must not be used otherwise
 * between begin and end.
 *
 *   struct rpipe p;
 *   if (rpipe_begin(&p, rc) == RCONN_OK && rpipe_append(&p, &a) == RCONN_OK &&
 *       rpipe_append(&p, &b) == RCONN_OK) { ra = rpipe_collect(&p); ... }
 *   rpipe_end(&p); */
struct rpipe {
    struct rconn *rc;
    redisContext *ctx;     /* the connection it runs on; NULL once it failed */
    unsigned long attempt; /* which of rc's connects made ctx */
    int flushed;           /* something went out (flush, collect) */
    int owed;              /* answers appended and not yet collected */
};

/* Begins a pipeline on rc, connecting first if needed: RCONN_ERR when Redis
 * cannot be reached (rconn_errstr says why). */
rconn_status rpipe_begin(struct rpipe *p, struct rconn *rc);
/* Appends cmd (a script as EVALSHA: rconn_prepare it before the pipeline
 * began). RCONN_ERR fails the pipeline. */
rconn_status rpipe_append(struct rpipe *p, const struct rcmd *cmd);
/* Appends a command printf-style, as redisAppendCommand. As rpipe_append. */
rconn_status rpipe_appendf(struct rpipe *p, const char *fmt, ...);
/* Writes what was appended without waiting for answers (to send to several
 * nodes before waiting on any). RCONN_ERR fails the pipeline. */
rconn_status rpipe_flush(struct rpipe *p);
/* The next answer, in the order appended (caller frees); NULL when none is
 * owed or the pipeline failed (the connection lost: the answers not yet
 * collected are gone, and whether their commands ran is unknown, see
 * rconn_unanswered). A Redis error answer is a reply, not NULL. */
redisReply *rpipe_collect(struct rpipe *p);
/* Ends the pipeline: collects and frees the answers still owed. */
void rpipe_end(struct rpipe *p);

#endif
