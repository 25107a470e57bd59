/* soldout: an instance's memory of SKUs it has seen sold out, so that the crowd
 * that keeps clicking after the last unit is answered without Redis.
 *
 * Within an epoch stock only goes down, so a SKU seen with no unit left in any
 * segment stays sold out until it is reset. A reset (inv_sku_put) publishes the
 * SKU on SOLDOUT_CHANNEL; every instance listens there on a connection of its
 * own (an aconn in subscribe mode, on the event loop it is attached to) and
 * forgets what it knew as soon as a message, a lost connection or a
 * resubscription comes in (a generation number moves). While not subscribed
 * nothing is remembered or answered from memory. An entry is trusted for at
 * most SOLDOUT_MAX_AGE_MS: if a reset's message is lost (the resetting process
 * died between the reset and the PUBLISH), an instance answers sold_out for at
 * most that long after the reset. Normally the staleness is one pub/sub hop;
 * the instance that resets forgets at once. */
#ifndef SECKILL_SOLDOUT_H
#define SECKILL_SOLDOUT_H

#include <stdint.h>

#define SOLDOUT_CHANNEL "seckill:sku-reset"
#define SOLDOUT_MAX_AGE_MS 1000

struct event_base;
struct soldout;

/* The queries below take so == NULL as "no memory": nothing is known, noting
 * and forgetting do nothing. */

/* A memory for the Redis at host:port (password may be NULL), not listening
 * yet: nothing is remembered until soldout_attach. Never NULL. */
struct soldout *soldout_new(const char *host, int port, const char *password);
/* Listens on base: before base runs, or on its thread. Redis need not be up
 * yet (the listener reconnects, and subscribes again, by itself). */
void soldout_attach(struct soldout *so, struct event_base *base);
/* Stops listening (nothing is remembered from then on): on the attached
 * base's thread, or once it no longer runs. No-op when not attached. */
void soldout_detach(struct soldout *so);
/* Detaches (same rule) and frees. NULL is a no-op. */
void soldout_free(struct soldout *so);

/* A generation to pass to soldout_note, taken before asking Redis; 0 while
 * not subscribed (nothing may be noted then). */
uint64_t soldout_generation(struct soldout *so);

/* True when sku is known sold out now; *limit is then its per-user limit
 * (0 when not known), so that a qty above it is still answered as such. */
int soldout_known(struct soldout *so, const char *sku, int *limit);

/* Remembers sku (with its per-user limit, 0 if not known) as sold out, as
 * Redis said after `generation` was taken; ignored when anything moved since. */
void soldout_note(struct soldout *so, const char *sku, int limit, uint64_t generation);

/* Forgets everything at once (this instance reset a SKU). */
void soldout_forget(struct soldout *so);

/* True while the listener is subscribed (for tests and /stats). */
int soldout_listening(struct soldout *so);

#endif
