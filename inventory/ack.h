/* ack: placed orders of one event loop wait for their replicas'
 * acknowledgement (--min-replicas-acked) before they are answered.
 *
 * Redis's WAIT counts the replicas that reached the last write of the link
 * it is sent on (rconn.h, links), and blocks that link while it waits. So a
 * WAIT on the link that carried the commits would hold up every lock step,
 * read and commit queued behind it (up to the WAIT's timeout while a replica
 * lags), and a WAIT on any other link covers nothing of the commits.
 *
 * Here each connection that carries commits (the loop's data connection, or
 * on a cluster the connection to one master) has a second connection of its
 * own to the same node, for acknowledgements only. A round on it is a write
 * of its own, sent once the commits' answers came (`SET sk:{tag}:ack`, in a
 * slot of the orders' shard), then `WAIT n ms` on the same link: the write
 * comes after the commits in the node's replication stream, so the replicas
 * that reached it have the commits. An order is acknowledged when the write
 * was taken, WAIT counted enough replicas, and the link that carried its
 * commit is still the one its connection is up on when WAIT answers (no
 * reconnect since: the node did not restart and lose the commit meanwhile);
 * else it answers outcome unknown. Orders placed while a round is in flight
 * wait for the next one (group commit of acknowledgements).
 *
 * Thread safety: none; an inv_acks belongs to its loop's thread. */
#ifndef SECKILL_ACK_H
#define SECKILL_ACK_H

#include "aconn.h"
#include "path.h"

struct event_base;
struct inv_acks;

/* Called once per ticket, when its acknowledgement is decided (t->st is
 * INV_PLACED, or INV_OUTCOME_UNKNOWN now). */
typedef void inv_acks_done(void *arg, struct inv_ticket *t);

/* The acknowledgements of one loop on base, for inv's --min-replicas-acked
 * (> 0). Connections use password (NULL: none); a round lasts at most the
 * WAIT's timeout plus timeout_ms. Never returns NULL. */
struct inv_acks *inv_acks_new(struct inv *inv, struct event_base *base,
                              const char *password, int timeout_ms, inv_acks_done *done,
                              void *arg);
/* Closes the connections: tickets waiting are answered outcome unknown
 * first. NULL is a no-op. */
void inv_acks_free(struct inv_acks *a);

/* Placed ticket t waits for its replicas. via is the connection whose reply
 * placed it, called in that reply's callback (its current link is the one
 * that carried the commit); NULL when not known (a redirected commit), and t
 * answers outcome unknown. done may run inside this call (via NULL, or a
 * round that could not be sent). */
void inv_acks_add(struct inv_acks *a, struct inv_ticket *t, struct aconn *via);

#endif
