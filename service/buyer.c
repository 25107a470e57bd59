#include "buyer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "file.h"

int buyer_key_read(const char *path, unsigned char key[BUYER_KEY_MAX], size_t *len,
                   char *err, size_t errlen)
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
        return -1;
    }
    memcpy(key, buf, n);
    *len = n;
    return 0;
}

/* The hex signature of "<user>.<expiry>" (n bytes at text) into sig (64
 * digits and a NUL). 0, or -1 when OpenSSL failed. */
static int sign(const unsigned char *key, size_t keylen, const char *text, size_t n,
                char sig[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)text, n, md,
              &mdlen) ||
        mdlen != 32)
        return -1;
    static const char hex[] = "0123456789abcdef";
    for (unsigned int i = 0; i < 32; i++) {
        sig[2 * i] = hex[md[i] >> 4];
        sig[2 * i + 1] = hex[md[i] & 15];
    }
    sig[64] = '\0';
    return 0;
}

buyer_status buyer_check(const unsigned char *key, size_t keylen, const char *token,
                         long long now_s, char user[INV_ID_MAX + 1])
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
    if (sign(key, keylen, token, (size_t)(sig - token), expected) != 0)
        return BUYER_INVALID;
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

int buyer_token(const unsigned char *key, size_t keylen, const char *user,
                long long expiry, char *out, size_t len)
{
    if (len)
        out[0] = '\0';
    if (!inv_id_valid(user) || expiry < 0)
        return -1;
    char text[INV_ID_MAX + 24], sig[65];
    int n = snprintf(text, sizeof(text), "%s.%lld", user, expiry);
    if (n < 0 || (size_t)n >= sizeof(text) ||
        sign(key, keylen, text, (size_t)n, sig) != 0)
        return -1;
    int m = snprintf(out, len, "%s.%s", text, sig);
    if (m < 0 || (size_t)m >= len) {
        if (len)
            out[0] = '\0';
        return -1;
    }
    return 0;
}
