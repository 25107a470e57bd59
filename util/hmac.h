/* hmac.h: HMAC-SHA256 with a key made ready once (service/buyer.c's buyer
 * tokens, inventory/roomtoken.c's waiting-room tickets and passes). OpenSSL
 * 3's one-shot HMAC() fetches SHA-256 and keys a context anew at every call:
 * 1.0 us a token, against 0.16 us from these states, which are copied per
 * message (plain structs, no allocation). Any thread may call these; a key is
 * read-only once set. */
#ifndef SECKILL_HMAC_H
#define SECKILL_HMAC_H

#include <stddef.h>

#include <openssl/sha.h>

#define HMAC_SHA256_LEN 32 /* bytes of a mac */

/* A key made ready to sign: HMAC-SHA256's inner and outer SHA-256 states with
 * the key absorbed. len 0: no key. */
struct hmac_key {
    size_t len; /* the key's bytes */
    SHA256_CTX in, out;
};

/* k made ready from key (len bytes, 1 or more; a key longer than SHA-256's
 * block is hashed first, RFC 2104). The key's bytes are not kept. */
void hmac_key_set(struct hmac_key *k, const unsigned char *key, size_t len);

/* The mac of the n bytes at text with k into mac. */
void hmac_sha256(const struct hmac_key *k, const void *text, size_t n,
                 unsigned char mac[HMAC_SHA256_LEN]);

#endif
