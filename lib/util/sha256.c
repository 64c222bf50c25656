#include "sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int crl_sha256_init(struct crl_sha256 *h)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        h->ctx = NULL;
        return -1;
    }
    h->ctx = c;
    return 0;
}

void crl_sha256_update(struct crl_sha256 *h, const void *data, size_t len)
{
    if (len)
        EVP_DigestUpdate(h->ctx, data, len);
}

static void to_hex(const unsigned char *md, char out[CRL_DIGEST_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[md[i] >> 4];
        out[8 + 2 * i] = hex[md[i] & 15];
    }
    out[CRL_DIGEST_LEN] = 0;
}

void crl_sha256_final(struct crl_sha256 *h, char out[CRL_DIGEST_LEN + 1])
{
    unsigned char md[32];
    unsigned n = 0;
    EVP_DigestFinal_ex(h->ctx, md, &n);
    to_hex(md, out);
    crl_sha256_free(h);
}

void crl_sha256_free(struct crl_sha256 *h)
{
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

int crl_sha256_update_fd(struct crl_sha256 *h, int fd, unsigned long long *bytes)
{
    enum { CHUNK = 1 << 17 };
    char *buf = malloc(CHUNK);
    if (!buf)
        return -1;
    unsigned long long off = 0;
    ssize_t n;
    while ((n = pread(fd, buf, CHUNK, (off_t)off)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        EVP_DigestUpdate(h->ctx, buf, (size_t)n);
        off += (unsigned long long)n;
    }
    int saved = errno;
    free(buf);
    if (bytes)
        *bytes = off;
    errno = saved;
    return n < 0 ? -1 : 0;
}

void crl_sha256_buf(const void *data, size_t len, char out[CRL_DIGEST_LEN + 1])
{
    unsigned char md[32];
    unsigned n = 0;
    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    to_hex(md, out);
}

bool crl_digest_valid(const char *d)
{
    if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != CRL_DIGEST_LEN)
        return false;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}
