#include "buf.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void crl_buf_init(struct crl_buf *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->cap = cap;
}

void crl_buf_free(struct crl_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static int buf_reserve(struct crl_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->alloc)
        return 0;
    size_t n = b->alloc ? b->alloc : 256;
    while (n < b->len + extra + 1)
        n *= 2;
    char *p = realloc(b->data, n);
    if (!p)
        return -1;
    b->data = p;
    b->alloc = n;
    return 0;
}

int crl_buf_append(struct crl_buf *b, const void *data, size_t len)
{
    size_t take = len;
    if (b->len + take > b->cap)
        take = b->cap > b->len ? b->cap - b->len : 0;
    b->dropped += len - take;
    if (take == 0)
        return 0;
    if (buf_reserve(b, take) < 0)
        return -1;
    memcpy(b->data + b->len, data, take);
    b->len += take;
    b->data[b->len] = 0;
    return 0;
}

int crl_buf_printf(struct crl_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof(small))
        return crl_buf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int r = crl_buf_append(b, big, (size_t)n); /* through the cap, like every append */
    free(big);
    return r;
}

void crl_buf_consume(struct crl_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    if (b->data)
        b->data[b->len] = 0;
}

/* Length of the UTF-8 sequence starting at s (0 if invalid), per RFC 3629:
 * no overlongs, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t avail, bool *incomplete)
{
    *incomplete = false;
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if (i >= avail) {
            *incomplete = true;
            return 0;
        }
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

bool crl_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] == 0)
            return false; /* JSON strings may carry NUL, but many readers choke: base64 it */
        bool inc;
        size_t n = utf8_seq(p + i, len - i, &inc);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

void crl_utf8_sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        bool inc;
        size_t n = utf8_seq(p + i, len - i, &inc);
        if (n == 0) {
            p[i++] = '?';
            continue;
        }
        i += n;
    }
}

size_t crl_utf8_complete_prefix(const char *s, size_t len)
{
    /* Back up over at most 3 continuation bytes to a lead byte. */
    size_t i = len;
    for (int k = 0; k < 4 && i > 0; k++) {
        unsigned char c = (unsigned char)s[i - 1];
        if ((c & 0xc0) == 0x80) {
            i--;
            continue;
        }
        if (c >= 0xc0) {
            bool inc;
            size_t n = utf8_seq((const unsigned char *)s + i - 1, len - (i - 1), &inc);
            if (inc)
                return i - 1;
            (void)n;
        }
        return len;
    }
    return len;
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *crl_base64_encode(const void *data, size_t len, size_t *out_len)
{
    const unsigned char *in = data;
    size_t olen = 4 * ((len + 2) / 3);
    char *out = malloc(olen + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64chars[v >> 18];
        out[o++] = b64chars[(v >> 12) & 63];
        out[o++] = b64chars[(v >> 6) & 63];
        out[o++] = b64chars[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = b64chars[v >> 18];
        out[o++] = b64chars[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = 0;
    if (out_len)
        *out_len = o;
    return out;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int crl_base64_decode(const char *s, size_t len, char **out, size_t *out_len)
{
    if (len % 4)
        return -1;
    char *o = malloc(len / 4 * 3 + 1);
    if (!o)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == len && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64val(s[i + k])) < 0) {
                free(o);
                return -1;
            }
        }
        uint32_t x =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        o[n++] = (char)(x >> 16);
        if (pad < 2)
            o[n++] = (char)(x >> 8);
        if (pad < 1)
            o[n++] = (char)x;
    }
    o[n] = 0;
    *out = o;
    *out_len = n;
    return 0;
}

bool crl_http_token_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
            return false;
    return true;
}

bool crl_http_value_ok(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return false;
    return true;
}
