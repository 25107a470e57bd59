/* roomtoken.c: tickets and passes signed with HMAC-SHA256 (roomtoken.h). */
#include "roomtoken.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAC_LEN HMAC_SHA256_LEN
#define MAC_TEXT_LEN 43 /* its base64url, no padding */
#define FIELDS_MAX 6    /* a ticket's; a pass has 5 */

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url of n bytes, no padding, NUL-terminated; the characters written. */
static size_t b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64url[v >> 18 & 63];
        out[o++] = b64url[v >> 12 & 63];
        out[o++] = b64url[v >> 6 & 63];
        out[o++] = b64url[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)in[i] << 16;
        out[o++] = b64url[v >> 18 & 63];
        out[o++] = b64url[v >> 12 & 63];
    } else if (n - i == 2) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        out[o++] = b64url[v >> 18 & 63];
        out[o++] = b64url[v >> 12 & 63];
        out[o++] = b64url[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64url, c) : NULL;
    return p ? (int)(p - b64url) : -1;
}

/* Decodes n characters of base64url (no padding) into out (at most cap
 * bytes); the bytes written, or -1 when they are not base64url. */
static long b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    if (n % 4 == 1)
        return -1;
    size_t o = 0;
    unsigned v = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int d = b64_value(in[i]);
        if (d < 0)
            return -1;
        v = (v << 6 | (unsigned)d) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == cap)
                return -1;
            out[o++] = (unsigned char)(v >> bits);
        }
    }
    if (bits > 0 && (v & ((1u << bits) - 1)) != 0)
        return -1; /* one text per bytes: the unused bits are 0 */
    return (long)o;
}

int room_key_init(struct room_key *k, const void *bytes, size_t len)
{
    if (len < ROOM_KEY_MIN || len > ROOM_KEY_MAX)
        return -1;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(bytes, len, digest);
    hmac_key_set(&k->mac, bytes, len);
    for (int i = 0; i < ROOM_KID_LEN / 2; i++)
        snprintf(k->kid + 2 * i, 3, "%02x", digest[i]);
    return 0;
}

/* The mac of "<payload>.<kid>" (n characters at signed). */
static void mac_of(const struct room_key *k, const char *signed_part, size_t n,
                   unsigned char mac[MAC_LEN])
{
    hmac_sha256(&k->mac, signed_part, n, mac);
}

/* Signs the payload text: out = "<b64(text)>.<kid>.<mac>". Its length, or 0
 * when it does not fit. */
static size_t sign(const struct room_key *k, const char *text, char *out, size_t len)
{
    size_t n = strlen(text);
    if (4 * ((n + 2) / 3) + 1 + ROOM_KID_LEN + 1 + MAC_TEXT_LEN + 1 > len ||
        4 * ((n + 2) / 3) + 1 + ROOM_KID_LEN + 1 + MAC_TEXT_LEN > ROOM_TOKEN_MAX)
        return 0;
    size_t o = b64_encode((const unsigned char *)text, n, out);
    out[o++] = '.';
    memcpy(out + o, k->kid, ROOM_KID_LEN);
    o += ROOM_KID_LEN;
    unsigned char mac[MAC_LEN];
    mac_of(k, out, o, mac);
    out[o++] = '.';
    o += b64_encode(mac, MAC_LEN, out + o);
    return o;
}

/* Checks text's key and mac, then splits its payload into fields (in buf):
 * the count of fields, or -1 when text is not signed with k. */
static int open_token(const struct room_key *k, const char *text, char *buf, size_t cap,
                      char *fields[FIELDS_MAX])
{
    size_t n = text ? strlen(text) : 0;
    const char *dot1 = n && n <= ROOM_TOKEN_MAX ? strchr(text, '.') : NULL;
    const char *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    if (!dot2 || (size_t)(dot2 - dot1 - 1) != ROOM_KID_LEN ||
        memcmp(dot1 + 1, k->kid, ROOM_KID_LEN) != 0 || strlen(dot2 + 1) != MAC_TEXT_LEN)
        return -1;
    unsigned char mac[MAC_LEN], given[MAC_LEN + 1];
    if (b64_decode(dot2 + 1, MAC_TEXT_LEN, given, sizeof(given)) != MAC_LEN)
        return -1;
    mac_of(k, text, (size_t)(dot2 - text), mac);
    if (CRYPTO_memcmp(mac, given, MAC_LEN) != 0)
        return -1;
    long got = b64_decode(text, (size_t)(dot1 - text), (unsigned char *)buf, cap - 1);
    if (got < 0)
        return -1;
    buf[got] = '\0';
    if (memchr(buf, '\0', (size_t)got))
        return -1;
    int nf = 0;
    for (char *p = buf; nf < FIELDS_MAX;) {
        fields[nf++] = p;
        char *bar = strchr(p, '|');
        if (!bar)
            return nf;
        *bar = '\0';
        p = bar + 1;
    }
    return -1; /* more fields than any token has */
}

/* A decimal long long >= 0, all of text. */
static int number(const char *text, long long *out)
{
    if (!*text || *text == '-' || *text == '+' || *text == ' ')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

size_t room_ticket_sign(const struct room_key *k, const struct room_ticket *t, char *out,
                        size_t len)
{
    char text[256];
    if (!inv_id_valid(t->sku) || !inv_id_valid(t->user))
        return 0;
    snprintf(text, sizeof(text), "t|%lld|%lld|%lld|%s|%s", t->epoch, t->place, t->rank,
             t->sku, t->user);
    return sign(k, text, out, len);
}

size_t room_pass_sign(const struct room_key *k, const struct room_pass *p, char *out,
                      size_t len)
{
    char text[256];
    if (!inv_id_valid(p->sku) || !inv_id_valid(p->user))
        return 0;
    snprintf(text, sizeof(text), "p|%lld|%lld|%s|%s", p->epoch, p->expires_ms, p->sku,
             p->user);
    return sign(k, text, out, len);
}

int room_ticket_check(const struct room_key *k, const char *text, struct room_ticket *out)
{
    char buf[ROOM_TOKEN_MAX], *f[FIELDS_MAX];
    if (open_token(k, text, buf, sizeof(buf), f) != 6 || strcmp(f[0], "t") != 0 ||
        number(f[1], &out->epoch) || number(f[2], &out->place) ||
        number(f[3], &out->rank) || !inv_id_valid(f[4]) || !inv_id_valid(f[5]))
        return -1;
    snprintf(out->sku, sizeof(out->sku), "%s", f[4]);
    snprintf(out->user, sizeof(out->user), "%s", f[5]);
    return 0;
}

int room_pass_check(const struct room_key *k, const char *text, struct room_pass *out)
{
    char buf[ROOM_TOKEN_MAX], *f[FIELDS_MAX];
    if (open_token(k, text, buf, sizeof(buf), f) != 5 || strcmp(f[0], "p") != 0 ||
        number(f[1], &out->epoch) || number(f[2], &out->expires_ms) ||
        !inv_id_valid(f[3]) || !inv_id_valid(f[4]))
        return -1;
    snprintf(out->sku, sizeof(out->sku), "%s", f[3]);
    snprintf(out->user, sizeof(out->user), "%s", f[4]);
    return 0;
}

room_pass_status room_pass_admits(const struct room_key *k, const char *text,
                                  const char *sku, const char *user, long long now_ms,
                                  long long epoch)
{
    struct room_pass p;
    if (!text || !*text)
        return ROOM_PASS_MISSING;
    if (room_pass_check(k, text, &p) != 0)
        return ROOM_PASS_FORGED;
    if (now_ms >= p.expires_ms)
        return ROOM_PASS_EXPIRED;
    if (strcmp(p.user, user) != 0)
        return ROOM_PASS_OTHER_USER;
    if (strcmp(p.sku, sku) != 0)
        return ROOM_PASS_OTHER_SKU;
    if (epoch > 0 && p.epoch != epoch)
        return ROOM_PASS_RESET;
    return ROOM_PASS_OK;
}

const char *room_pass_status_name(room_pass_status st)
{
    static const char *const names[ROOM_PASS_NSTATUS] = {
        "ok", "missing", "forged", "expired", "another_user", "another_sku", "reset"};
    return (unsigned)st < ROOM_PASS_NSTATUS ? names[st] : "forged";
}
