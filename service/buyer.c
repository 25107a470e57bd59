#include "buyer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "file.h"
#include "hmac.h"

void buyer_key_set(struct buyer_key *k, const unsigned char *key, size_t len)
{
    hmac_key_set(&k->mac, key, len);
}

int buyer_key_read(const char *path, struct buyer_key *k, char *err, size_t errlen)
{
    unsigned char buf[BUYER_KEY_MAX + 2];
    size_t n;
    if (file_read(path, buf, sizeof(buf), &n, err, errlen) != 0)
        return -1;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n < BUYER_KEY_MIN || n > BUYER_KEY_MAX) {
        snprintf(err, errlen, "the key must be %d..%d bytes (a final newline aside)",
                 BUYER_KEY_MIN, BUYER_KEY_MAX);
        OPENSSL_cleanse(buf, sizeof(buf));
        return -1;
    }
    buyer_key_set(k, buf, n);
    OPENSSL_cleanse(buf, sizeof(buf));
    return 0;
}

/* The hex signature of "<user>.<expiry>" (n bytes at text) into sig (64
 * digits and a NUL). */
static void sign(const struct buyer_key *k, const char *text, size_t n, char sig[65])
{
    unsigned char md[HMAC_SHA256_LEN];
    hmac_sha256(&k->mac, text, n, md);
    static const char hex[] = "0123456789abcdef";
    for (unsigned int i = 0; i < HMAC_SHA256_LEN; i++) {
        sig[2 * i] = hex[md[i] >> 4];
        sig[2 * i + 1] = hex[md[i] & 15];
    }
    sig[64] = '\0';
}

buyer_status buyer_check(const struct buyer_key *k, const char *token, long long now_s,
                         char user[INV_ID_MAX + 1])
{
    user[0] = '\0';
    if (!token || !*token)
        return BUYER_MISSING;
    size_t n = strlen(token);
    if (n > BUYER_TOKEN_MAX)
        return BUYER_INVALID;
    const char *sig = strrchr(token, '.');
    if (!sig || sig == token || strlen(sig + 1) != 64)
        return BUYER_INVALID;
    const char *exp = sig - 1; /* the expiry: digits back to the dot before them */
    while (exp > token && exp[-1] != '.')
        exp--;
    size_t ulen = exp > token ? (size_t)(exp - 1 - token) : 0;
    size_t elen = (size_t)(sig - exp);
    if (ulen == 0 || ulen > INV_ID_MAX || elen == 0 || elen > 19 ||
        strspn(exp, "0123456789") != elen)
        return BUYER_INVALID;
    char expected[65];
    sign(k, token, (size_t)(sig - token), expected);
    /* the whole signature compared, whatever its first difference */
    if (CRYPTO_memcmp(expected, sig + 1, 64) != 0)
        return BUYER_INVALID;
    char id[INV_ID_MAX + 1];
    memcpy(id, token, ulen);
    id[ulen] = '\0';
    if (!inv_id_valid(id))
        return BUYER_INVALID;
    long long expiry = 0;
    for (size_t i = 0; i < elen; i++)
        expiry = expiry * 10 + (exp[i] - '0');
    if (now_s >= expiry)
        return BUYER_EXPIRED;
    memcpy(user, id, ulen + 1);
    return BUYER_OK;
}

int buyer_token(const struct buyer_key *k, const char *user, long long expiry, char *out,
                size_t len)
{
    if (len)
        out[0] = '\0';
    if (!inv_id_valid(user) || expiry < 0)
        return -1;
    char text[INV_ID_MAX + 24], sig[65];
    int n = snprintf(text, sizeof(text), "%s.%lld", user, expiry);
    if (n < 0 || (size_t)n >= sizeof(text))
        return -1;
    sign(k, text, (size_t)n, sig);
    int m = snprintf(out, len, "%s.%s", text, sig);
    if (m < 0 || (size_t)m >= len) {
        if (len)
            out[0] = '\0';
        return -1;
    }
    return 0;
}
