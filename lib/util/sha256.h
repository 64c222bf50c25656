/* SHA-256 digests in OCI's "sha256:<hex>" form (OpenSSL's libcrypto). */
#ifndef CRL_UTIL_SHA256_H
#define CRL_UTIL_SHA256_H

#include <stdbool.h>
#include <stddef.h>

#define CRL_DIGEST_LEN 71 /* "sha256:" + 64 hex */

struct crl_sha256 {
    void *ctx; /* EVP_MD_CTX */
};

int crl_sha256_init(struct crl_sha256 *h);
void crl_sha256_update(struct crl_sha256 *h, const void *data, size_t len);
/* Writes "sha256:<64 hex>" and frees the context. */
void crl_sha256_final(struct crl_sha256 *h, char out[CRL_DIGEST_LEN + 1]);
void crl_sha256_free(struct crl_sha256 *h);
/* Add a file's content from offset 0 to its end (pread: its offset stays);
 * *bytes (may be NULL) gets how much.  -1 with errno on a read error. */
int crl_sha256_update_fd(struct crl_sha256 *h, int fd, unsigned long long *bytes);
void crl_sha256_buf(const void *data, size_t len, char out[CRL_DIGEST_LEN + 1]);

/* "sha256:" and 64 lowercase hex digits, nothing else. */
bool crl_digest_valid(const char *d);
/* The hex part of a valid digest. */
static inline const char *crl_digest_hex(const char *d)
{
    return d + 7;
}

#endif
