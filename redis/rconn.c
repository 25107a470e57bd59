#include "rconn.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "xalloc.h"

struct rconn {
    char host[256];
    int port;
    char *password;
    int timeout_ms;
    redisContext *ctx;
    unsigned long attempts; /* connects tried */
    char err[128];
    uint64_t unanswered; /* times a live connection failed with answers owed */
    uint64_t link;       /* ctx's link id (rconn_link_new); 0 while none */
};

/* Connects that succeeded after an earlier attempt of the same rconn. */
static _Atomic unsigned long reconnects;

unsigned long rconn_reconnects(void)
{
    return atomic_load_explicit(&reconnects, memory_order_relaxed);
}

/* The last link id handed out. */
static _Atomic uint64_t links;

uint64_t rconn_link_new(void)
{
    return atomic_fetch_add_explicit(&links, 1, memory_order_relaxed) + 1;
}

uint64_t rconn_link(const struct rconn *rc)
{
    return rc->ctx && !rc->ctx->err ? rc->link : 0;
}

rconn_status rconn_addr_parse(const char *text, struct rconn_addr *addr)
{
    const char *colon = text ? strrchr(text, ':') : NULL;
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof(addr->host))
        return RCONN_ERR;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
        return RCONN_ERR;
    memcpy(addr->host, text, (size_t)(colon - text));
    addr->host[colon - text] = '\0';
    addr->port = (int)port;
    return RCONN_OK;
}

struct rconn *rconn_new(const char *host, int port, const char *password, int timeout_ms)
{
    struct rconn *rc = xcalloc(1, sizeof(*rc));
    snprintf(rc->host, sizeof(rc->host), "%s", host);
    rc->port = port;
    rc->password = password && *password ? xstrdup(password) : NULL;
    rc->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    return rc;
}

void rconn_free(struct rconn *rc)
{
    if (!rc)
        return;
    if (rc->ctx)
        redisFree(rc->ctx);
    free(rc->password);
    free(rc);
}

struct rconn *rconn_clone(const struct rconn *rc)
{
    return rconn_new(rc->host, rc->port, rc->password, rc->timeout_ms);
}

int rconn_timeout_ms(const struct rconn *rc)
{
    return rc->timeout_ms;
}

void rconn_drop(struct rconn *rc, const char *why)
{
    if (why)
        snprintf(rc->err, sizeof(rc->err), "%s", why);
    if (rc->ctx) {
        redisFree(rc->ctx);
        rc->ctx = NULL;
        rc->link = 0;
    }
}

uint64_t rconn_unanswered(const struct rconn *rc)
{
    return rc->unanswered;
}

const char *rconn_errstr(const struct rconn *rc)
{
    return rc->err[0] ? rc->err : "no error";
}

const char *rconn_host(const struct rconn *rc)
{
    return rc->host;
}

int rconn_port(const struct rconn *rc)
{
    return rc->port;
}

static struct timeval ms_to_tv(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

redisContext *rconn_ctx(struct rconn *rc)
{
    if (rc->ctx && !rc->ctx->err)
        return rc->ctx;
    if (rc->ctx)
        rconn_drop(rc, rc->ctx->errstr);
    rc->attempts++;
    redisContext *c =
        redisConnectWithTimeout(rc->host, rc->port, ms_to_tv(rc->timeout_ms));
    if (!c) {
        snprintf(rc->err, sizeof(rc->err), "out of memory");
        return NULL;
    }
    if (c->err) {
        snprintf(rc->err, sizeof(rc->err), "connect %s:%d: %s", rc->host, rc->port,
                 c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, ms_to_tv(rc->timeout_ms));
    redisEnableKeepAlive(c);
    if (rc->password) {
        redisReply *r = redisCommand(c, "AUTH %s", rc->password);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        snprintf(rc->err, sizeof(rc->err), "AUTH: %s",
                 r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    rc->err[0] = '\0';
    rc->ctx = c;
    rc->link = rconn_link_new();
    if (rc->attempts > 1)
        atomic_fetch_add_explicit(&reconnects, 1, memory_order_relaxed);
    return c;
}

void rconn_check(struct rconn *rc)
{
    if (!rc->ctx || rc->ctx->err)
        return;
    char byte;
    ssize_t n = recv(rc->ctx->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    /* Nothing is pending on an idle connection: EAGAIN. EOF or an error means
     * the server closed it; unsolicited data cannot happen outside a pipeline. */
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
        rconn_drop(rc, "connection closed by Redis");
}

/* ---- where a script's error happened ------------------------------------- */

/* Every script this process has loaded, newest first. Entries are static and
 * never leave; one is pushed when its SHA becomes known (under its mu). */
static struct rscript *_Atomic loaded_scripts;

static void remember_loaded(struct rscript *s)
{
    struct rscript *head = atomic_load(&loaded_scripts);
    do
        s->next_loaded = head;
    while (!atomic_compare_exchange_weak(&loaded_scripts, &head, s));
}

struct rscript *rscript_loaded(void)
{
    return atomic_load(&loaded_scripts);
}

/* The source of the loaded script whose SHA text names ("script: <sha>",
 * as Redis 7 ends a script's runtime error), or NULL. */
static const struct rscript_source *source_named_in(const char *text)
{
    static const char tag[] = "script: ";
    for (const char *p = strstr(text, tag); p; p = strstr(p + 1, tag)) {
        const char *sha = p + sizeof(tag) - 1;
        size_t n = strspn(sha, "0123456789abcdef");
        if (n != 40)
            continue;
        for (struct rscript *s = atomic_load(&loaded_scripts); s; s = s->next_loaded)
            if (memcmp(s->sha, sha, 40) == 0)
                return s->source;
    }
    return NULL;
}

/* text with each "user_script:N" (a line of the assembled script) replaced by
 * the .lua file and line it came from, and "script: <sha>" by "script: <the
 * script's own file> <sha>" (the line may be in an included piece). A
 * malloc'd string, or NULL when nothing was replaced. */
static char *script_error_located(const char *text, const struct rscript_source *src)
{
    static const char tag[] = "user_script:", sha_tag[] = "script: ",
                      hex[] = "0123456789abcdef";
    const size_t taglen = sizeof(tag) - 1, sha_taglen = sizeof(sha_tag) - 1;
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    if (!f)
        return NULL;
    int replaced = 0, named = 0;
    const char *p = text; /* copied up to here */
    for (const char *q = text; *q;) {
        if (strncmp(q, tag, taglen) == 0 && isdigit((unsigned char)q[taglen])) {
            char *end;
            long line = strtol(q + taglen, &end, 10);
            if (line >= 1 && line <= src->nlines) {
                const struct rscript_line *from = &src->lines[line - 1];
                fwrite(p, 1, (size_t)(q - p), f);
                fprintf(f, "%s:%d", src->files[from->file], from->line);
                p = q = end;
                replaced = 1;
                continue;
            }
        } else if (!named && strncmp(q, sha_tag, sha_taglen) == 0 &&
                   strspn(q + sha_taglen, hex) == 40) {
            fwrite(p, 1, (size_t)(q - p) + sha_taglen, f);
            fprintf(f, "%s ", src->files[0]);
            p = q = q + sha_taglen;
            named = 1;
            continue;
        }
        q++;
    }
    fputs(p, f);
    if (fclose(f) != 0 || !replaced) {
        free(out);
        return NULL;
    }
    return out;
}

/* Makes an error reply of a script (src, or the loaded script it names when
 * src is NULL) name the .lua file and line. The reply's text is replaced in
 * place (hiredis frees it with free()). Other replies are left alone. */
static void script_error_locate(redisReply *r, const struct rscript_source *src)
{
    if (!r || r->type != REDIS_REPLY_ERROR || !r->str || !strstr(r->str, "user_script:"))
        return;
    if (!src)
        src = source_named_in(r->str);
    char *text = src ? script_error_located(r->str, src) : NULL;
    if (!text)
        return;
    free(r->str);
    r->str = text;
    r->len = strlen(text);
}

static redisReply *checked(struct rconn *rc, void *reply)
{
    if (!reply) {
        if (rc->ctx)
            rc->unanswered++; /* a command went out on it: it may have run */
        rconn_drop(rc, rc->ctx ? rc->ctx->errstr : "connection lost");
        return NULL;
    }
    script_error_locate(reply, NULL);
    return reply;
}

redisReply *rconn_command(struct rconn *rc, const char *fmt, ...)
{
    redisContext *c = rconn_ctx(rc);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    void *reply = redisvCommand(c, fmt, ap);
    va_end(ap);
    return checked(rc, reply);
}

redisReply *rconn_command_argv(struct rconn *rc, int argc, const char **argv,
                               const size_t *argvlen)
{
    redisContext *c = rconn_ctx(rc);
    if (!c)
        return NULL;
    return checked(rc, redisCommandArgv(c, argc, argv, argvlen));
}

int rconn_is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static rconn_status script_load(struct rconn *rc, struct rscript *s, int again)
{
    if (!again && atomic_load_explicit(&s->loaded, memory_order_acquire))
        return RCONN_OK;
    redisReply *r = rconn_command(rc, "SCRIPT LOAD %s", s->source->text);
    if (!r)
        return RCONN_ERR;
    int ok = rscript_learn(s, r) == RCONN_OK;
    if (!ok)
        snprintf(rc->err, sizeof(rc->err), "SCRIPT LOAD %s: %s", s->name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? RCONN_OK : RCONN_ERR;
}

rconn_status rscript_learn(struct rscript *s, redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        script_error_locate(r, s->source); /* a compile error names no SHA */
        return RCONN_ERR;
    }
    pthread_mutex_lock(&s->mu);
    if (!atomic_load_explicit(&s->loaded, memory_order_relaxed)) {
        memcpy(s->sha, r->str, 40);
        s->sha[40] = '\0';
        remember_loaded(s);
        atomic_store_explicit(&s->loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&s->mu);
    return RCONN_OK;
}

void rscript_locate_error(redisReply *r)
{
    script_error_locate(r, NULL);
}

rconn_status rconn_script_load(struct rconn *rc, struct rscript *s)
{
    return script_load(rc, s, 0);
}

rconn_status rconn_script_reload(struct rconn *rc, struct rscript *s)
{
    return script_load(rc, s, 1);
}

/* The argument vector of EVAL/EVALSHA: verb, body, numkeys, keys and args.
 * Small calls use the caller's stack arrays; large ones (admin scripts with a
 * value per segment) get heap arrays. */
struct eval_argv {
    const char **v;
    size_t *len;
    int n;
    char numkeys[12];
    const char *small_v[32];
    size_t small_len[32];
};

static void eval_argv_build(struct eval_argv *a, const char *verb, const char *body,
                            int nkeys, int nargs, const char **argv,
                            const size_t *argvlen)
{
    int total = nkeys + nargs;
    a->n = total + 3;
    a->v = a->small_v;
    a->len = a->small_len;
    if (a->n > 32) {
        a->v = xmalloc(sizeof(*a->v) * (size_t)a->n);
        a->len = xmalloc(sizeof(*a->len) * (size_t)a->n);
    }
    snprintf(a->numkeys, sizeof(a->numkeys), "%d", nkeys);
    a->v[0] = verb;
    a->len[0] = strlen(verb);
    a->v[1] = body;
    a->len[1] = strlen(body);
    a->v[2] = a->numkeys;
    a->len[2] = strlen(a->numkeys);
    for (int i = 0; i < total; i++) {
        a->v[3 + i] = argv[i];
        a->len[3 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
}

static void eval_argv_free(struct eval_argv *a)
{
    if (a->v != a->small_v) {
        free(a->v);
        free(a->len);
    }
}

redisReply *rconn_eval(struct rconn *rc, struct rscript *s, int nkeys, int nargs,
                       const char **argv, const size_t *argvlen)
{
    if (rconn_script_load(rc, s) != RCONN_OK)
        return NULL;
    struct eval_argv a;
    eval_argv_build(&a, "EVALSHA", s->sha, nkeys, nargs, argv, argvlen);
    redisReply *r = rconn_command_argv(rc, a.n, a.v, a.len);
    if (rconn_is_noscript(r)) {
        /* Redis lost its script cache (restart, SCRIPT FLUSH): EVAL re-caches it. */
        freeReplyObject(r);
        a.v[0] = "EVAL";
        a.len[0] = 4;
        a.v[1] = s->source->text;
        a.len[1] = strlen(s->source->text);
        r = rconn_command_argv(rc, a.n, a.v, a.len);
    }
    eval_argv_free(&a);
    return r;
}

rconn_status rconn_prepare(struct rconn *rc, const struct rcmd *cmd)
{
    return cmd->script ? rconn_script_load(rc, cmd->script) : RCONN_OK;
}

redisReply *rconn_run(struct rconn *rc, const struct rcmd *cmd)
{
    if (cmd->script)
        return rconn_eval(rc, cmd->script, cmd->nkeys, cmd->argc - cmd->nkeys, cmd->argv,
                          NULL);
    return rconn_command_argv(rc, cmd->argc, cmd->argv, NULL);
}

/* ---- pipelines ----------------------------------------------------------- */

/* The pipeline's connection is lost to it: the commands appended and not
 * answered must not reach Redis later, nor their answers be taken for another
 * command's, so a connection that still holds them is dropped. */
static void pipe_fail(struct rpipe *p, const char *why)
{
    if (p->ctx && p->rc->ctx == p->ctx && p->rc->attempts == p->attempt && p->owed > 0) {
        if (p->flushed)
            p->rc->unanswered++; /* some went out: they may have run */
        rconn_drop(p->rc, why);
    }
    p->ctx = NULL;
    p->owed = 0;
}

/* The connection the pipeline began on, or NULL (failing it) when that one
 * is gone: a pipeline never moves to a new connection. */
static redisContext *pipe_ctx(struct rpipe *p)
{
    if (p->ctx && (p->rc->attempts != p->attempt || p->rc->ctx != p->ctx || p->ctx->err))
        pipe_fail(p, "connection lost in a pipeline");
    return p->ctx;
}

rconn_status rpipe_begin(struct rpipe *p, struct rconn *rc)
{
    p->rc = rc;
    p->owed = 0;
    p->flushed = 0;
    p->ctx = rconn_ctx(rc);
    p->attempt = rc->attempts; /* a new context at the same address is another */
    return p->ctx ? RCONN_OK : RCONN_ERR;
}

static rconn_status pipe_appended(struct rpipe *p, int status)
{
    if (status != REDIS_OK) {
        pipe_fail(p, "out of memory appending to a pipeline");
        return RCONN_ERR;
    }
    p->owed++;
    return RCONN_OK;
}

rconn_status rpipe_append(struct rpipe *p, const struct rcmd *cmd)
{
    redisContext *c = pipe_ctx(p);
    if (!c)
        return RCONN_ERR;
    if (!cmd->script)
        return pipe_appended(p, redisAppendCommandArgv(c, cmd->argc, cmd->argv, NULL));
    /* Loading it here would be a command of its own in the middle of the
     * pipeline, taking an earlier command's answer for its own. */
    if (!atomic_load_explicit(&cmd->script->loaded, memory_order_acquire)) {
        snprintf(p->rc->err, sizeof(p->rc->err), "script %s not loaded",
                 cmd->script->name);
        pipe_fail(p, NULL);
        return RCONN_ERR;
    }
    struct eval_argv a;
    eval_argv_build(&a, "EVALSHA", cmd->script->sha, cmd->nkeys, cmd->argc - cmd->nkeys,
                    cmd->argv, NULL);
    int status = redisAppendCommandArgv(c, a.n, a.v, a.len);
    eval_argv_free(&a);
    return pipe_appended(p, status);
}

rconn_status rpipe_appendf(struct rpipe *p, const char *fmt, ...)
{
    redisContext *c = pipe_ctx(p);
    if (!c)
        return RCONN_ERR;
    va_list ap;
    va_start(ap, fmt);
    int status = redisvAppendCommand(c, fmt, ap);
    va_end(ap);
    return pipe_appended(p, status);
}

rconn_status rpipe_flush(struct rpipe *p)
{
    redisContext *c = pipe_ctx(p);
    int done = 0;
    while (c && !done) {
        p->flushed = 1;
        if (redisBufferWrite(c, &done) != REDIS_OK) {
            pipe_fail(p,
                      c->errstr); /* counts it unanswered: a command may have gone out */
            return RCONN_ERR;
        }
    }
    return c ? RCONN_OK : RCONN_ERR;
}

redisReply *rpipe_collect(struct rpipe *p)
{
    redisContext *c = pipe_ctx(p);
    if (!c || p->owed == 0)
        return NULL;
    void *reply = NULL;
    p->flushed = 1; /* redisGetReply writes what is appended first */
    if (redisGetReply(c, &reply) != REDIS_OK)
        reply = NULL;
    redisReply *r = checked(p->rc, reply);
    if (!r) {
        p->ctx = NULL; /* checked() dropped the connection, answers owed and all */
        p->owed = 0;
        return NULL;
    }
    p->owed--;
    return r;
}

void rpipe_end(struct rpipe *p)
{
    redisReply *r;
    while ((r = rpipe_collect(p)) != NULL)
        freeReplyObject(r);
    p->ctx = NULL;
}
