#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    HOST = CRL_AGENT_SIDE_HOST,
    GUEST = CRL_AGENT_SIDE_GUEST,
    BOTH = HOST | GUEST,
};

static const struct crl_agent_type_info types[CRL_AGENT__TYPE_MAX + 1] = {
    [CRL_AGENT_HELLO] = {"HELLO", GUEST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON, CRL_AGENT_S_ZERO},
    [CRL_AGENT_CONFIG] = {"CONFIG", HOST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON, CRL_AGENT_S_ZERO},
    [CRL_AGENT_READY] = {"READY", GUEST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON, CRL_AGENT_S_ZERO},
    [CRL_AGENT_EXEC] = {"EXEC", HOST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON, CRL_AGENT_S_NONZERO},
    [CRL_AGENT_STDIN] = {"STDIN", HOST, CRL_AGENT_P_BYTES, CRL_AGENT_MAX_PAYLOAD,
                         CRL_AGENT_S_NONZERO},
    [CRL_AGENT_STDOUT] = {"STDOUT", GUEST, CRL_AGENT_P_BYTES, CRL_AGENT_MAX_PAYLOAD,
                          CRL_AGENT_S_NONZERO},
    [CRL_AGENT_STDERR] = {"STDERR", GUEST, CRL_AGENT_P_BYTES, CRL_AGENT_MAX_PAYLOAD,
                          CRL_AGENT_S_NONZERO},
    [CRL_AGENT_EXIT] = {"EXIT", GUEST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON, CRL_AGENT_S_NONZERO},
    [CRL_AGENT_SIGNAL] = {"SIGNAL", HOST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON,
                          CRL_AGENT_S_NONZERO},
    [CRL_AGENT_FILE_GET] = {"FILE_GET", HOST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON,
                            CRL_AGENT_S_NONZERO},
    [CRL_AGENT_FILE_PUT] = {"FILE_PUT", HOST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON,
                            CRL_AGENT_S_NONZERO},
    [CRL_AGENT_DATA] = {"DATA", BOTH, CRL_AGENT_P_BYTES, CRL_AGENT_MAX_PAYLOAD,
                        CRL_AGENT_S_NONZERO},
    [CRL_AGENT_RESULT] = {"RESULT", GUEST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON,
                          CRL_AGENT_S_NONZERO},
    [CRL_AGENT_CREDIT] = {"CREDIT", BOTH, CRL_AGENT_P_U32, 4, CRL_AGENT_S_NONZERO},
    [CRL_AGENT_PING] = {"PING", BOTH, CRL_AGENT_P_U64, 8, CRL_AGENT_S_ZERO},
    [CRL_AGENT_PONG] = {"PONG", BOTH, CRL_AGENT_P_U64, 8, CRL_AGENT_S_ZERO},
    [CRL_AGENT_ERROR] = {"ERROR", BOTH, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON, CRL_AGENT_S_ANY},
    [CRL_AGENT_BYE] = {"BYE", BOTH, CRL_AGENT_P_EMPTY, 0, CRL_AGENT_S_ZERO},
    [CRL_AGENT_STARTED] = {"STARTED", GUEST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON,
                           CRL_AGENT_S_NONZERO},
    [CRL_AGENT_RESIZE] = {"RESIZE", HOST, CRL_AGENT_P_JSON, CRL_AGENT_MAX_JSON,
                          CRL_AGENT_S_NONZERO},
};

const struct crl_agent_type_info *crl_agent_type_info(uint32_t type)
{
    if (type > CRL_AGENT__TYPE_MAX || !types[type].name)
        return NULL;
    return &types[type];
}

const char *crl_agent_type_name(uint32_t type, char *buf, size_t bufsize)
{
    const struct crl_agent_type_info *t = crl_agent_type_info(type);
    if (t)
        return t->name;
    snprintf(buf, bufsize, "type %u", type);
    return buf;
}

static const char *side_name(enum crl_agent_side s)
{
    return s == CRL_AGENT_SIDE_HOST ? "host" : "guest";
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Sizes in messages: "2000000 bytes is over the 1 MiB limit". */
static void limit_text(uint32_t max, char *buf, size_t n)
{
    if (max >= 1024 * 1024 && max % (1024 * 1024) == 0)
        snprintf(buf, n, "%u MiB", max / (1024 * 1024));
    else if (max >= 1024 && max % 1024 == 0)
        snprintf(buf, n, "%u KiB", max / 1024);
    else
        snprintf(buf, n, "%u bytes", max);
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing past
 * U+10FFFF; NUL is refused too, since a JSON text never holds one raw.
 * Returns the offset of the first bad byte, or len if all are good. */
static size_t utf8_bad_at(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c == 0)
            return i;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf)
            n = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            n = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return i;
        if (len - i <= n)
            return i;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += n + 1;
    }
    return len;
}

/* The header's rules: everything that can be judged before the payload. */
static int check_header(enum crl_agent_side from, uint32_t type, uint32_t flags, uint32_t stream,
                        uint32_t len, struct crl_err *err)
{
    const struct crl_agent_type_info *t = crl_agent_type_info(type);
    if (!t)
        return crl_err_set(err, CRL_E_INVALID, "frame type %u is unknown", type);
    if (flags != 0)
        return crl_err_set(err, CRL_E_INVALID, "%s frame has flags 0x%x (version 1 has none)",
                           t->name, flags);
    if (!(t->senders & from))
        return crl_err_set(err, CRL_E_INVALID, "%s is not sent by the %s", t->name,
                           side_name(from));
    if (t->stream == CRL_AGENT_S_ZERO && stream != 0)
        return crl_err_set(err, CRL_E_INVALID, "%s frame on stream %u (it belongs on stream 0)",
                           t->name, stream);
    if (t->stream == CRL_AGENT_S_NONZERO && stream == 0)
        return crl_err_set(err, CRL_E_INVALID, "%s frame on stream 0 (it needs a stream)", t->name);
    switch (t->payload) {
    case CRL_AGENT_P_EMPTY:
    case CRL_AGENT_P_U32:
    case CRL_AGENT_P_U64:
        if (len != t->max_len)
            return crl_err_set(err, CRL_E_INVALID, "%s frame of %u bytes (it has exactly %u)",
                               t->name, len, t->max_len);
        break;
    case CRL_AGENT_P_JSON:
        if (len < 2)
            return crl_err_set(err, CRL_E_INVALID,
                               "%s frame of %u bytes is too short for a JSON object", t->name, len);
        /* fall through */
    case CRL_AGENT_P_BYTES:
        if (len > t->max_len) {
            char lim[32];
            limit_text(t->max_len, lim, sizeof(lim));
            return crl_err_set(err, CRL_E_INVALID, "%s frame of %u bytes is over the %s limit",
                               t->name, len, lim);
        }
        break;
    }
    return 0;
}

static int check_payload(const struct crl_agent_type_info *t, const uint8_t *p, uint32_t len,
                         struct crl_err *err)
{
    if (t->payload == CRL_AGENT_P_U32 && get32(p) == 0)
        return crl_err_set(err, CRL_E_INVALID, "%s of 0 bytes", t->name);
    if (t->payload != CRL_AGENT_P_JSON)
        return 0;
    if (p[0] != '{' || p[len - 1] != '}')
        return crl_err_set(err, CRL_E_INVALID, "%s payload is not a JSON object", t->name);
    size_t bad = utf8_bad_at(p, len);
    if (bad < len)
        return crl_err_set(err, CRL_E_INVALID,
                           "%s JSON payload is not valid UTF-8 (byte 0x%02x at offset %zu)",
                           t->name, p[bad], bad);
    return 0;
}

int crl_agent_frame_check(enum crl_agent_side from, const struct crl_agent_frame *f,
                          struct crl_err *err)
{
    if (check_header(from, f->type, f->flags, f->stream, f->len, err) < 0)
        return -1;
    return check_payload(crl_agent_type_info(f->type), f->payload, f->len, err);
}

/* ---- encoding ---- */

void crl_agent_put_header(uint8_t out[CRL_AGENT_HEADER_SIZE], uint16_t type, uint32_t stream,
                          uint32_t len)
{
    put32(out, len);
    out[4] = (uint8_t)type;
    out[5] = (uint8_t)(type >> 8);
    out[6] = 0;
    out[7] = 0;
    put32(out + 8, stream);
}

long crl_agent_encode(enum crl_agent_side from, uint8_t *out, size_t cap, uint16_t type,
                      uint32_t stream, const void *payload, uint32_t len, struct crl_err *err)
{
    struct crl_agent_frame f = {type, 0, stream, len, payload};
    if (crl_agent_frame_check(from, &f, err) < 0)
        return -1;
    if (cap < CRL_AGENT_HEADER_SIZE || cap - CRL_AGENT_HEADER_SIZE < len)
        return crl_err_set(err, CRL_E_INVALID, "%s frame of %u bytes does not fit in %zu",
                           types[type].name, len, cap);
    crl_agent_put_header(out, type, stream, len);
    if (len)
        memcpy(out + CRL_AGENT_HEADER_SIZE, payload, len);
    return (long)(CRL_AGENT_HEADER_SIZE + len);
}

void crl_agent_encode_credit(uint8_t out[CRL_AGENT_CREDIT_FRAME_SIZE], uint32_t stream,
                             uint32_t bytes)
{
    crl_agent_put_header(out, CRL_AGENT_CREDIT, stream, 4);
    put32(out + CRL_AGENT_HEADER_SIZE, bytes);
}

void crl_agent_encode_ping(uint8_t out[CRL_AGENT_PING_FRAME_SIZE], uint16_t type, uint64_t token)
{
    crl_agent_put_header(out, type, 0, 8);
    put64(out + CRL_AGENT_HEADER_SIZE, token);
}

void crl_agent_encode_empty(uint8_t out[CRL_AGENT_HEADER_SIZE], uint16_t type, uint32_t stream)
{
    crl_agent_put_header(out, type, stream, 0);
}

uint32_t crl_agent_frame_u32(const struct crl_agent_frame *f)
{
    return f->len >= 4 ? get32(f->payload) : 0;
}

uint64_t crl_agent_frame_u64(const struct crl_agent_frame *f)
{
    if (f->len < 8)
        return 0;
    return (uint64_t)get32(f->payload) | (uint64_t)get32(f->payload + 4) << 32;
}

/* ---- decoding ---- */

int crl_agent_dec_init(struct crl_agent_dec *d, enum crl_agent_side side, struct crl_err *err)
{
    memset(d, 0, sizeof(*d));
    d->side = side;
    d->cap = CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD;
    d->buf = malloc(d->cap);
    if (!d->buf)
        return crl_err_sys(err, ENOMEM, "agent decoder: %zu bytes", d->cap);
    return 0;
}

void crl_agent_dec_free(struct crl_agent_dec *d)
{
    free(d->buf);
    d->buf = NULL;
    d->start = d->end = d->consumed = 0;
}

/* Drop the frame returned last, and move what is left to the front when
 * that makes room: a partial frame always fits from the front, since the
 * buffer holds the largest frame. */
static void settle(struct crl_agent_dec *d, bool compact)
{
    d->start += d->consumed;
    d->consumed = 0;
    if (d->start == d->end) {
        d->start = d->end = 0;
    } else if (compact && d->start > 0) {
        memmove(d->buf, d->buf + d->start, d->end - d->start);
        d->end -= d->start;
        d->start = 0;
    }
}

size_t crl_agent_dec_feed(struct crl_agent_dec *d, const void *data, size_t len)
{
    if (d->failed)
        return len;
    settle(d, d->cap - d->end < len);
    size_t room = d->cap - d->end;
    size_t n = len < room ? len : room;
    if (n)
        memcpy(d->buf + d->end, data, n);
    d->end += n;
    return n;
}

/* Fail for good: the message is kept, and every later call repeats it. */
static int fail(struct crl_agent_dec *d, const struct crl_err *e, struct crl_err *err)
{
    d->failed = true;
    d->start = d->end = d->consumed = 0;
    memcpy(d->msg, e->msg, sizeof(d->msg) - 1);
    d->msg[sizeof(d->msg) - 1] = 0;
    if (err)
        *err = *e;
    return -1;
}

int crl_agent_dec_next(struct crl_agent_dec *d, struct crl_agent_frame *f, struct crl_err *err)
{
    if (d->failed)
        return crl_err_set(err, CRL_E_INVALID, "%s", d->msg);
    settle(d, false);
    size_t have = d->end - d->start;
    if (have < CRL_AGENT_HEADER_SIZE) {
        settle(d, true);
        return 0;
    }
    const uint8_t *h = d->buf + d->start;
    uint32_t len = get32(h), stream = get32(h + 8);
    uint16_t type = get16(h + 4), flags = get16(h + 6);
    enum crl_agent_side from =
        d->side == CRL_AGENT_SIDE_HOST ? CRL_AGENT_SIDE_GUEST : CRL_AGENT_SIDE_HOST;
    struct crl_err e = CRL_ERR_INIT;
    if (check_header(from, type, flags, stream, len, &e) < 0)
        return fail(d, &e, err);
    if (have - CRL_AGENT_HEADER_SIZE < len) {
        settle(d, true);
        return 0;
    }
    if (check_payload(&types[type], h + CRL_AGENT_HEADER_SIZE, len, &e) < 0)
        return fail(d, &e, err);
    *f = (struct crl_agent_frame){type, flags, stream, len, h + CRL_AGENT_HEADER_SIZE};
    d->consumed = CRL_AGENT_HEADER_SIZE + len;
    return 1;
}

size_t crl_agent_dec_pending(const struct crl_agent_dec *d)
{
    return d->end - d->start - d->consumed;
}

/* ---- flow control ---- */

void crl_agent_window_init(struct crl_agent_window *w)
{
    w->send = CRL_AGENT_INITIAL_WINDOW;
    w->recv = CRL_AGENT_INITIAL_WINDOW;
}

bool crl_agent_type_windowed(uint16_t type)
{
    return type == CRL_AGENT_STDIN || type == CRL_AGENT_STDOUT || type == CRL_AGENT_STDERR ||
           type == CRL_AGENT_DATA;
}

int crl_agent_window_received(struct crl_agent_window *w, const struct crl_agent_frame *f,
                              struct crl_err *err)
{
    if (!crl_agent_type_windowed(f->type))
        return 0;
    if (f->len > w->recv)
        return crl_err_set(err, CRL_E_INVALID,
                           "%s frame of %u bytes on stream %u is over its window of %u bytes",
                           types[f->type].name, f->len, f->stream, w->recv);
    w->recv -= f->len;
    return 0;
}

/* what: "CREDIT of N bytes on stream S", for the message */
static int widen(uint32_t *window, uint32_t n, const char *what, struct crl_err *err)
{
    if (n > CRL_AGENT_MAX_WINDOW - *window)
        return crl_err_set(err, CRL_E_INVALID,
                           "%s would open a window of over 16 MiB (it is %u bytes)", what, *window);
    *window += n;
    return 0;
}

int crl_agent_window_grant(struct crl_agent_window *w, uint32_t n, struct crl_err *err)
{
    char what[64];
    snprintf(what, sizeof(what), "a grant of %u bytes", n);
    return widen(&w->recv, n, what, err);
}

int crl_agent_window_credit(struct crl_agent_window *w, const struct crl_agent_frame *f,
                            struct crl_err *err)
{
    char what[64];
    snprintf(what, sizeof(what), "CREDIT of %u bytes on stream %u", crl_agent_frame_u32(f),
             f->stream);
    return widen(&w->send, crl_agent_frame_u32(f), what, err);
}

int crl_agent_window_sending(struct crl_agent_window *w, uint32_t n, struct crl_err *err)
{
    if (n > w->send)
        return crl_err_set(err, CRL_E_INVALID, "%u bytes are over the send window of %u bytes", n,
                           w->send);
    w->send -= n;
    return 0;
}
