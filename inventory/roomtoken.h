/* roomtoken: a waiting room's tickets and passes, signed and checked (issue
 * 48). Pure: no I/O, no state but the key it is given; any thread.
 *
 * A token is "<payload>.<kid>.<mac>", path-safe ([A-Za-z0-9_.-]):
 *   payload  base64url (no padding) of its fields joined by '|' (ids, 1..64
 *            characters of [A-Za-z0-9_.:-], never hold one);
 *   kid      the key's id: the first 8 lowercase hex digits of its SHA-256,
 *            so that a key can be rotated and a token of another key is told
 *            apart from a forged one only in the log;
 *   mac      base64url of HMAC-SHA256 with the key over "<payload>.<kid>".
 * A ticket's fields: "t", the SKU's epoch, its place in the queue (the score
 * it was queued with), its rank when it joined (0: first), the SKU, the user.
 * A pass's: "p", the SKU's epoch, its expiry (Unix ms, Redis's clock), the
 * SKU, the user. The first field keeps a ticket from passing for a pass.
 * The mac is compared in constant time (CRYPTO_memcmp); it is computed from
 * the key's precomputed HMAC states (util/hmac.h), as buyer tokens are. */
#ifndef SECKILL_ROOMTOKEN_H
#define SECKILL_ROOMTOKEN_H

#include <stddef.h>

#include "hmac.h"
#include "inventory.h"

#define ROOM_KEY_MIN 32   /* bytes */
#define ROOM_KEY_MAX 1024 /* bytes */
#define ROOM_KID_LEN 8
#define ROOM_TOKEN_MAX 400 /* a token's characters, NUL excluded */

/* A key made ready to sign (util/hmac.h: its bytes not kept), and its id. */
struct room_key {
    struct hmac_key mac;
    char kid[ROOM_KID_LEN + 1];
};

struct room_ticket {
    char sku[INV_ID_MAX + 1], user[INV_ID_MAX + 1];
    long long epoch, place, rank;
};

struct room_pass {
    char sku[INV_ID_MAX + 1], user[INV_ID_MAX + 1];
    long long epoch, expires_ms;
};

/* What a check of a pass found, in the order it looks: none given, not one
 * of ours (malformed, another key, a bad mac, a ticket), expired, for
 * another user, for another SKU, of an epoch of the SKU before its last reset
 * (PUT ?reset=true: another queue). */
typedef enum {
    ROOM_PASS_OK = 0,
    ROOM_PASS_MISSING,
    ROOM_PASS_FORGED,
    ROOM_PASS_EXPIRED,
    ROOM_PASS_OTHER_USER,
    ROOM_PASS_OTHER_SKU,
    ROOM_PASS_RESET,
} room_pass_status;
#define ROOM_PASS_NSTATUS 7

/* Makes k from len bytes (ROOM_KEY_MIN..ROOM_KEY_MAX), its kid computed.
 * 0, or -1 (k untouched) for a length out of range. */
int room_key_init(struct room_key *k, const void *bytes, size_t len);

/* Writes the signed token of t (or p) into out (len >= ROOM_TOKEN_MAX + 1
 * is always enough). Its length, or 0 when t's ids are not valid ids
 * (inv_id_valid) or it does not fit. */
size_t room_ticket_sign(const struct room_key *k, const struct room_ticket *t, char *out,
                        size_t len);
size_t room_pass_sign(const struct room_key *k, const struct room_pass *p, char *out,
                      size_t len);

/* Reads a ticket (or pass) signed with k from text into *out: 0, or -1
 * (*out undefined) when text is not one: malformed, of another key or kind,
 * or its mac does not match. */
int room_ticket_check(const struct room_key *k, const char *text,
                      struct room_ticket *out);
int room_pass_check(const struct room_key *k, const char *text, struct room_pass *out);

/* Whether text (NULL: the header was absent) is a pass that lets user order
 * sku at now_ms (Unix ms, on Redis's clock as the instance knows it) in the
 * SKU's epoch (0: not known yet, any): the first reason it does not, in
 * room_pass_status's order. */
room_pass_status room_pass_admits(const struct room_key *k, const char *text,
                                  const char *sku, const char *user, long long now_ms,
                                  long long epoch);

/* "missing", "forged", "expired", "another_user", "another_sku", "reset"
 * ("ok"). */
const char *room_pass_status_name(room_pass_status st);

#endif
