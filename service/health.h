/* health: whether the data Redis answers, kept fresh on an event loop so that
 * /readyz answers from memory, on any loop, at once: never behind a route
 * that waits on Redis (an audit on the main thread), and never a round trip
 * of its own.
 *
 * A timer on the loop it is attached to (loop 0, a background duty) sends a
 * round every HEALTH_EVERY_MS on an async connection of its own: PING to the
 * data Redis, or on a Redis Cluster CLUSTER INFO to every master (each must
 * say cluster_state:ok, as the blocking check did). Healthy means the last
 * round was answered whole within HEALTH_FRESH_MS; a command that fails (the
 * connection dropped, a wrong password after a reconnect, a timeout) or a
 * round still unanswered after HEALTH_TIMEOUT_MS makes it unhealthy at once;
 * after an error answer (NOAUTH once the password changed) the connection is
 * made again before the next round.
 * So /readyz turns 503 within about HEALTH_TIMEOUT_MS of Redis going away
 * or freezing, and 200 again within HEALTH_EVERY_MS of its return.
 *
 * The same rounds tell the log (reach.h): a node of the data Redis (the one,
 * or each master of a cluster) that stops answering logs redis_down, and
 * redis_up once it answers again (an answer, whatever it says of the
 * cluster's state; an error answer is no answer). A cluster's node noted down
 * that a failover took out of the map is PINGed on a connection of its own
 * until it answers. Under --lock redlock each lock node gets a
 * PING of its own every round too, on a connection of its own, logged as
 * lock_node_down and lock_node_up; they count for the log only, not for
 * readiness. */
#ifndef SECKILL_HEALTH_H
#define SECKILL_HEALTH_H

#include "config.h"

struct event_base;
struct inv_rooms;
struct svc_durability;
struct svc_health;

/* For the data Redis of cfg (a cluster's masters when cluster). Nothing is
 * connected before attach; unhealthy until the first round is answered.
 * on_ready (NULL: none) is called once, on the loop, when a round is first
 * answered healthy while settings (NULL: none) refuse nothing
 * (svc_durability_refused) and rooms (NULL: none) were read
 * (inv_rooms_ready): when /readyz first answers 200. Never returns
 * NULL. */
struct svc_health *svc_health_new(const struct svc_config *cfg, int cluster,
                                  void (*on_ready)(void),
                                  const struct svc_durability *settings,
                                  struct inv_rooms *rooms);
/* Checks on base from now on: before base runs, or on its thread. */
void svc_health_attach(struct svc_health *h, struct event_base *base);
/* Stops checking: on base's thread, or once it no longer runs. NULL, or not
 * attached: a no-op. */
void svc_health_detach(struct svc_health *h);
/* Detaches (same rule) and frees h. NULL is a no-op. */
void svc_health_free(struct svc_health *h);

/* 1 when the data Redis answered the last round in time. Any thread. */
int svc_health_ok(const struct svc_health *h);

#endif
