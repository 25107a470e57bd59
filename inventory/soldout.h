/* soldout: an instance's memory of SKUs it has seen sold out, so that the crowd
 * that keeps clicking after the last unit is answered without Redis.
 *
 * Within an epoch stock only goes down, so a SKU seen with no unit left in any
 * segment stays sold out until it is reset. A reset (inv_sku_put) publishes the
 * SKU on SOLDOUT_CHANNEL; every instance listens there on a connection of its
 * own and forgets what it knew as soon as a message, a lost connection or a
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

struct soldout;

/* The queries below take so == NULL as "no memory": nothing is known, noting
 * and forgetting do nothing. */

/* Starts listening on host:port (password may be NULL). Never NULL; Redis need
 * not be up yet (the listener reconnects by itself). */
struct soldout *soldout_new(const char *host, int port, const char *password);
void soldout_free(struct soldout *so); /* NULL is a no-op */

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
