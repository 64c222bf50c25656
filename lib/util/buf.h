/* A growable byte buffer with an optional cap: bytes past the cap are counted
 * but dropped, which is how exec output is truncated. */
#ifndef CRL_UTIL_BUF_H
#define CRL_UTIL_BUF_H

#include <stdbool.h>
#include <stddef.h>

#define CRL_BUF_UNBOUNDED ((size_t)-1)

struct crl_buf {
    char *data;
    size_t len;
    size_t alloc;
    size_t cap;     /* most bytes kept; CRL_BUF_UNBOUNDED for no limit */
    size_t dropped; /* bytes refused because of the cap */
};

void crl_buf_init(struct crl_buf *b, size_t cap);
void crl_buf_free(struct crl_buf *b);
/* Append; returns -1 only when memory runs out.  Over the cap, keeps what fits. */
int crl_buf_append(struct crl_buf *b, const void *data, size_t len);
int crl_buf_printf(struct crl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void crl_buf_consume(struct crl_buf *b, size_t n);
static inline bool crl_buf_truncated(const struct crl_buf *b)
{
    return b->dropped > 0;
}

/* Text helpers for the API: output is returned as a JSON string when it is
 * valid UTF-8 and as base64 otherwise. */
bool crl_utf8_valid(const char *s, size_t len);
/* Replace every byte that is not part of valid UTF-8 with '?', in place. */
void crl_utf8_sanitize(char *s);
/* Longest prefix of s[0..len) that does not end inside a UTF-8 sequence. */
size_t crl_utf8_complete_prefix(const char *s, size_t len);
/* HTTP (RFC 9110): a token (a method, a header's name), and a field value
 * with no control character but HTAB (no CR or LF to split a header). */
bool crl_http_token_ok(const char *s);
bool crl_http_value_ok(const char *s);
char *crl_base64_encode(const void *data, size_t len, size_t *out_len);
/* Returns -1 on malformed input. */
int crl_base64_decode(const char *s, size_t len, char **out, size_t *out_len);

#endif
