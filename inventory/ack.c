#include "ack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "orderid.h"
#include "xalloc.h"

/* The placed orders whose commits one connection carried: those covered by
 * the round in flight (acking), and those placed since (unacked). */
struct ack_group {
    struct inv_acks *a;
    struct aconn *via;  /* the connection that carries the commits */
    struct aconn *conn; /* its twin to the same node, for the rounds */
    struct inv_ticket *acking, *unacked, *unacked_tail;
    int in_flight;
    int written; /* the round's own write was taken */
};

struct inv_acks {
    struct inv *inv;
    struct event_base *base;
    const char *password;
    int timeout_ms;
    inv_acks_done *done;
    void *arg;
    const char *wait_argv[3];
    char wait_buf[2][16];
    struct ack_group **group;
    int ngroups;
};

struct inv_acks *inv_acks_new(struct inv *inv, struct event_base *base,
                              const char *password, int timeout_ms, inv_acks_done *done,
                              void *arg)
{
    struct inv_acks *a = xcalloc(1, sizeof(*a));
    *a = (struct inv_acks){
        .inv = inv, .base = base, .password = password, .done = done, .arg = arg};
    inv_durable_argv(inv, a->wait_argv, a->wait_buf);
    /* a round blocks its link for the WAIT's timeout at most */
    a->timeout_ms = timeout_ms + atoi(a->wait_buf[1]);
    return a;
}

/* Decides the tickets from t on: acknowledged when ok (WAIT's answer r
 * counted enough replicas) and their commit's link is still up. */
static void decide(struct ack_group *g, struct inv_ticket *t, const redisReply *r)
{
    struct inv_acks *a = g->a;
    uint64_t link = aconn_link(g->via);
    for (struct inv_ticket *next; t; t = next) {
        next = t->next;
        inv_ticket_acked(a->inv, t, r && t->link != 0 && t->link == link ? r : NULL);
        a->done(a->arg, t);
    }
}

static void round_send(struct ack_group *g);

static void on_written(void *arg, aconn_result res, redisReply *r)
{
    struct ack_group *g = arg;
    g->written = res == ACONN_REPLY && r->type == REDIS_REPLY_STATUS;
}

/* WAIT's answer: the round is over. */
static void on_waited(void *arg, aconn_result res, redisReply *r)
{
    struct ack_group *g = arg;
    struct inv_ticket *t = g->acking;
    g->acking = NULL;
    g->in_flight = 0;
    decide(g, t, res == ACONN_REPLY && g->written ? r : NULL);
    if (g->unacked)
        round_send(g);
}

/* A round for every order placed since the last one: a write of the
 * connection's own, in a slot the orders' node serves, then WAIT behind it. */
static void round_send(struct ack_group *g)
{
    struct inv_acks *a = g->a;
    g->acking = g->unacked;
    g->unacked = g->unacked_tail = NULL;
    g->in_flight = 1;
    g->written = 0;
    /* a replay's record came from its order's node, which its id names */
    const struct inv_ticket *t = g->acking;
    char key[48];
    inv_ack_key(t->st == INV_REPLAYED && t->gene >= 0 ? orderid_gene_of(t->order.id)
                                                      : t->gene,
                key, sizeof(key));
    /* it goes 10 s after the last round: an idle shop keeps no key of it */
    const char *set[] = {"SET", key, "1", "PX", "10000"};
    if (aconn_command(g->conn, on_written, g, 5, set, NULL) != RCONN_OK) {
        on_waited(g, ACONN_NOT_SENT, NULL);
        return;
    }
    /* queued behind the write: both run, or neither gets an answer */
    if (aconn_command(g->conn, on_waited, g, 3, a->wait_argv, NULL) != RCONN_OK)
        on_waited(g, ACONN_NOT_SENT, NULL);
}

/* The group of the commits that via carries, made on first need. */
static struct ack_group *group_of(struct inv_acks *a, struct aconn *via)
{
    for (int i = 0; i < a->ngroups; i++)
        if (a->group[i]->via == via)
            return a->group[i];
    struct ack_group **all = xrealloc(a->group, sizeof(*all) * (size_t)(a->ngroups + 1));
    struct ack_group *g = xcalloc(1, sizeof(*g));
    a->group = all;
    g->a = a;
    g->via = via;
    g->conn =
        aconn_new(a->base, aconn_host(via), aconn_port(via), a->password, a->timeout_ms);
    a->group[a->ngroups++] = g;
    return g;
}

void inv_acks_add(struct inv_acks *a, struct inv_ticket *t, struct aconn *via)
{
    t->next = NULL;
    t->link = via ? aconn_link(via) : 0;
    if (!t->link) {
        inv_ticket_acked(a->inv, t, NULL);
        a->done(a->arg, t);
        return;
    }
    struct ack_group *g = group_of(a, via);
    if (g->unacked_tail)
        g->unacked_tail->next = t;
    else
        g->unacked = t;
    g->unacked_tail = t;
    if (!g->in_flight)
        round_send(g);
}

void inv_acks_free(struct inv_acks *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->ngroups; i++) {
        struct ack_group *g = a->group[i];
        aconn_free(g->conn); /* the round in flight is answered: unknown */
        struct inv_ticket *t = g->unacked;
        g->unacked = g->unacked_tail = NULL;
        decide(g, t, NULL);
        free(g);
    }
    free(a->group);
    free(a);
}
