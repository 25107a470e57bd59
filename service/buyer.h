/* buyer.h: buyer tokens (--buyer-key-file). The shop's login issues a buyer
 * a token, "<user_id>.<expiry>.<signature>": expiry in Unix seconds, the
 * signature the lowercase hex of HMAC-SHA256, keyed with the shop's key, over
 * "<user_id>.<expiry>". The service checks it here, locally (no call to
 * anyone), in time that does not depend on where a forged signature first
 * differs. A user id may hold dots: a token is read from its right end.
 * Any thread may call these; they keep no state. */
#ifndef SECKILL_BUYER_H
#define SECKILL_BUYER_H

#include <stddef.h>
#include <stdio.h>

#include "hmac.h"

#include "inventory.h"

typedef enum {
    BUYER_OK = 0,
    BUYER_MISSING, /* no token */
    BUYER_INVALID, /* malformed, or its signature is not the key's */
    BUYER_EXPIRED, /* signed, and its expiry has passed */
} buyer_status;

/* The most a key file may hold, and the least a key must have (a shorter one
 * is guessable). */
#define BUYER_KEY_MAX 1024
#define BUYER_KEY_MIN 16
/* The longest token: a user id, a 20-digit expiry, 64 hex digits, two dots. */
#define BUYER_TOKEN_MAX (INV_ID_MAX + 20 + 64 + 2)

/* The shop's key made ready to sign (util/hmac.h: 0.16 us a token, against
 * 1.0 us for OpenSSL 3's one-shot HMAC()). mac.len 0: no key. */
struct buyer_key {
    struct hmac_key mac;
};

/* k made ready from key (len bytes, 1..BUYER_KEY_MAX). */
void buyer_key_set(struct buyer_key *k, const unsigned char *key, size_t len);

/* Reads the key of file path into k: its bytes, a final newline dropped,
 * BUYER_KEY_MIN..BUYER_KEY_MAX of them. 0, or -1 with why in err (never the
 * content); k untouched then. */
int buyer_key_read(const char *path, struct buyer_key *k, char *err, size_t errlen);

/* Checks token (NULL: BUYER_MISSING) against key k at now_s (Unix seconds):
 * BUYER_OK with its user id in user, else why not (user then ""). A token
 * expires at its expiry: valid while now_s < expiry. */
buyer_status buyer_check(const struct buyer_key *k, const char *token, long long now_s,
                         char user[INV_ID_MAX + 1]);

/* Writes the token of user (an id: inv_id_valid) expiring at expiry into out
 * (len bytes, BUYER_TOKEN_MAX + 1 is enough). 0, or -1 for a bad user id,
 * an expiry below 0 or no room (out then ""). */
int buyer_token(const struct buyer_key *k, const char *user, long long expiry, char *out,
                size_t len);

#endif
