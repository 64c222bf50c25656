/* lib/agent: the agent protocol's frames (proto.c) and JSON messages
 * (msg.c).  Frames are written here byte by byte where a hostile guest
 * could send them; what the encoders build is read back by the decoder. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/agent/msg.h"
#include "../../lib/agent/proto.h"
#include "../../lib/util/cleanup.h"
#include "tap.h"

/* ---- helpers ---- */

struct wire {
    uint8_t *b;
    size_t n, cap;
};

static void wire_raw(struct wire *w, uint32_t len, uint16_t type, uint16_t flags, uint32_t stream,
                     const void *payload, size_t plen)
{
    if (w->n + CRL_AGENT_HEADER_SIZE + plen > w->cap) {
        w->cap = (w->n + CRL_AGENT_HEADER_SIZE + plen) * 2;
        w->b = realloc(w->b, w->cap);
        if (!w->b)
            bail_out("out of memory");
    }
    uint8_t *h = w->b + w->n;
    crl_agent_put_header(h, type, stream, len);
    h[6] = (uint8_t)flags;
    h[7] = (uint8_t)(flags >> 8);
    if (plen)
        memcpy(h + CRL_AGENT_HEADER_SIZE, payload, plen);
    w->n += CRL_AGENT_HEADER_SIZE + plen;
}

static void wire_frame(struct wire *w, uint16_t type, uint32_t stream, const void *p, size_t n)
{
    wire_raw(w, (uint32_t)n, type, 0, stream, p, n);
}

static void wire_str(struct wire *w, uint16_t type, uint32_t stream, const char *s)
{
    wire_frame(w, type, stream, s, strlen(s));
}

/* Decode all of w (fed at once) on `side`; the result of the first call
 * that did not return a frame, with its message in e. */
static int decode_all(enum crl_agent_side side, const struct wire *w, int *frames,
                      struct crl_err *e)
{
    struct crl_agent_dec d;
    if (crl_agent_dec_init(&d, side, e) < 0)
        bail_out("crl_agent_dec_init");
    size_t off = 0;
    int r;
    *frames = 0;
    for (;;) {
        off += crl_agent_dec_feed(&d, w->b + off, w->n - off);
        struct crl_agent_frame f;
        while ((r = crl_agent_dec_next(&d, &f, e)) == 1)
            (*frames)++;
        if (r < 0 || off == w->n)
            break;
    }
    crl_agent_dec_free(&d);
    return r;
}

/* One frame the host refuses, and the message that says why. */
static void refused(const struct wire *w, const char *re, const char *what)
{
    struct crl_err e = CRL_ERR_INIT;
    int frames;
    int r = decode_all(CRL_AGENT_SIDE_HOST, w, &frames, &e);
    if (!ok(r == -1 && e.code == CRL_E_INVALID, "refused: %s", what))
        diag("returned %d after %d frames", r, frames);
    like(e.msg, re, "  and the message says so");
}

/* ---- the type table ---- */

static void test_types(void)
{
    char b[16];
    for (uint32_t t = 1; t <= CRL_AGENT__TYPE_MAX; t++) {
        const struct crl_agent_type_info *i = crl_agent_type_info(t);
        if (!ok(i && i->name && i->senders && i->max_len <= CRL_AGENT_MAX_PAYLOAD,
                "type %u has rules", t))
            continue;
        if (i->payload == CRL_AGENT_P_JSON)
            ok(i->max_len == CRL_AGENT_MAX_JSON, "%s: JSON of at most 64 KiB", i->name);
        ok(crl_agent_type_windowed((uint16_t)t) == (i->payload == CRL_AGENT_P_BYTES),
           "%s: windowed iff bytes", i->name);
    }
    ok(crl_agent_type_info(0) == NULL && crl_agent_type_info(CRL_AGENT__TYPE_MAX + 1) == NULL &&
           crl_agent_type_info(0xffffffffu) == NULL,
       "0 and types past RESIZE are unknown");
    ok(crl_agent_type_info(CRL_AGENT_STARTED)->senders == CRL_AGENT_SIDE_GUEST &&
           crl_agent_type_info(CRL_AGENT_RESIZE)->senders == CRL_AGENT_SIDE_HOST,
       "STARTED is the guest's, RESIZE the host's");
    is_str(crl_agent_type_name(99, b, sizeof(b)), "type 99", "an unknown type's name");
    is_str(crl_agent_type_name(CRL_AGENT_STDOUT, b, sizeof(b)), "STDOUT", "a known one's");
}

/* ---- round trips ---- */

/* Everything the guest may send, once, built with the encoders. */
static void guest_frames(struct wire *w)
{
    uint8_t small[CRL_AGENT_PING_FRAME_SIZE];
    crl_agent_encode_ping(small, CRL_AGENT_PONG, 0x0102030405060708ull);
    struct {
        uint16_t type;
        uint32_t stream;
        const char *p;
    } fs[] = {
        {CRL_AGENT_HELLO, 0, "{\"proto\":2,\"agent\":\"a\",\"kernel\":\"6.1\"}"},
        {CRL_AGENT_READY, 0, "{\"uptime_ms\":5}"},
        {CRL_AGENT_STDOUT, 3, "out"},
        {CRL_AGENT_STDERR, 3, "err\0with a NUL"},
        {CRL_AGENT_STDOUT, 3, ""},
        {CRL_AGENT_DATA, 7, "\xff\xfe binary"},
        {CRL_AGENT_RESULT, 7, "{\"ok\":true}"},
        {CRL_AGENT_EXIT, 3,
         "{\"reason\":\"exited\",\"code\":0,\"usage\":{\"utime_us\":1,\"stime_us\":2,"
         "\"maxrss_kb\":3}}"},
        {CRL_AGENT_ERROR, 9, "{\"message\":\"caf\xc3\xa9\"}"},
    };
    struct crl_err e = CRL_ERR_INIT;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(fs); i++) {
        size_t n = strlen(fs[i].p);
        if (fs[i].type == CRL_AGENT_STDERR)
            n = 14; /* the NUL is data */
        uint8_t buf[256];
        long got = crl_agent_encode(CRL_AGENT_SIDE_GUEST, buf, sizeof(buf), fs[i].type,
                                    fs[i].stream, fs[i].p, (uint32_t)n, &e);
        if (got < 0)
            bail_out(e.msg);
        wire_raw(w, (uint32_t)n, fs[i].type, 0, fs[i].stream, buf + CRL_AGENT_HEADER_SIZE, n);
    }
    uint8_t credit[CRL_AGENT_CREDIT_FRAME_SIZE];
    crl_agent_encode_credit(credit, 7, 4096);
    wire_raw(w, 4, CRL_AGENT_CREDIT, 0, 7, credit + CRL_AGENT_HEADER_SIZE, 4);
    wire_raw(w, 8, CRL_AGENT_PONG, 0, 0, small + CRL_AGENT_HEADER_SIZE, 8);
    wire_frame(w, CRL_AGENT_BYE, 0, NULL, 0);
}

enum { GUEST_FRAMES = 12 };

/* The frames of guest_frames(), as decoded: a digest to compare. */
struct seen {
    int n;
    char log[4096];
    size_t used;
};

static void seen_add(struct seen *s, const struct crl_agent_frame *f)
{
    char b[16];
    int k = snprintf(s->log + s->used, sizeof(s->log) - s->used,
                     "%s/%u/%u/%u:", crl_agent_type_name(f->type, b, sizeof(b)), f->flags,
                     f->stream, f->len);
    s->used += (size_t)k;
    for (uint32_t i = 0; i < f->len && s->used + 3 < sizeof(s->log); i++)
        s->used += (size_t)snprintf(s->log + s->used, 3, "%02x", f->payload[i]);
    s->log[s->used++] = ' ';
    s->log[s->used] = 0;
    s->n++;
}

/* Feed w to a host decoder in the pieces cuts[] says, collecting frames. */
static int feed_in_pieces(const struct wire *w, const size_t *cuts, int ncuts, struct seen *s,
                          struct crl_err *e)
{
    struct crl_agent_dec d;
    if (crl_agent_dec_init(&d, CRL_AGENT_SIDE_HOST, e) < 0)
        bail_out("crl_agent_dec_init");
    memset(s, 0, sizeof(*s));
    size_t from = 0;
    int r = 0;
    for (int c = 0; c <= ncuts && r >= 0; c++) {
        size_t to = c < ncuts ? cuts[c] : w->n;
        while (from < to && r >= 0) {
            from += crl_agent_dec_feed(&d, w->b + from, to - from);
            struct crl_agent_frame f;
            while ((r = crl_agent_dec_next(&d, &f, e)) == 1)
                seen_add(s, &f);
        }
    }
    if (r >= 0 && crl_agent_dec_pending(&d) != 0)
        r = -2;
    crl_agent_dec_free(&d);
    return r;
}

static void test_round_trip(void)
{
    struct wire w = {0};
    guest_frames(&w);
    struct seen all;
    struct crl_err e = CRL_ERR_INIT;
    int r = feed_in_pieces(&w, NULL, 0, &all, &e);
    is_int(r, 0, "the guest's frames decode on the host (%s)", e.msg);
    is_int(all.n, GUEST_FRAMES, "all of them");
    like(all.log, "^HELLO/0/0/[0-9]+:7b22", "HELLO first, on stream 0");
    like(all.log, "STDERR/0/3/14:[0-9a-f]*00[0-9a-f]* ", "STDERR keeps its NUL");
    like(all.log, "STDOUT/0/3/0: ", "an empty STDOUT");
    like(all.log, "CREDIT/0/7/4:00100000 ", "CREDIT 4096, little-endian");
    like(all.log, "PONG/0/0/8:0807060504030201 BYE/0/0/0: $", "PONG's token, then BYE");

    /* the value helpers */
    struct crl_agent_dec d;
    crl_agent_dec_init(&d, CRL_AGENT_SIDE_HOST, &e);
    uint8_t pong[CRL_AGENT_PING_FRAME_SIZE], credit[CRL_AGENT_CREDIT_FRAME_SIZE];
    crl_agent_encode_ping(pong, CRL_AGENT_PONG, 0xfedcba9876543210ull);
    crl_agent_encode_credit(credit, 0xffffffffu, 0x80000001u);
    crl_agent_dec_feed(&d, pong, sizeof(pong));
    crl_agent_dec_feed(&d, credit, sizeof(credit));
    struct crl_agent_frame f;
    ok(crl_agent_dec_next(&d, &f, &e) == 1 && crl_agent_frame_u64(&f) == 0xfedcba9876543210ull,
       "PONG's u64");
    ok(crl_agent_dec_next(&d, &f, &e) == 1 && f.stream == 0xffffffffu &&
           crl_agent_frame_u32(&f) == 0x80000001u,
       "CREDIT's u32 on the highest stream");
    is_int(crl_agent_dec_next(&d, &f, &e), 0, "then nothing");
    crl_agent_dec_free(&d);

    /* the other way: what the host sends, on the guest's decoder */
    struct wire h = {0};
    wire_str(&h, CRL_AGENT_CONFIG, 0, "{}");
    wire_str(&h, CRL_AGENT_EXEC, 1, "{\"argv\":[\"true\"]}");
    wire_str(&h, CRL_AGENT_STDIN, 1, "input");
    wire_str(&h, CRL_AGENT_STDIN, 1, "");
    wire_str(&h, CRL_AGENT_SIGNAL, 1, "{\"signal\":9}");
    wire_str(&h, CRL_AGENT_FILE_GET, 2, "{\"path\":\"/a\"}");
    wire_str(&h, CRL_AGENT_FILE_PUT, 4, "{\"path\":\"/b\",\"mode\":420}");
    wire_str(&h, CRL_AGENT_DATA, 4, "bytes");
    uint8_t ping[CRL_AGENT_PING_FRAME_SIZE];
    crl_agent_encode_ping(ping, CRL_AGENT_PING, 1);
    wire_raw(&h, 8, CRL_AGENT_PING, 0, 0, ping + CRL_AGENT_HEADER_SIZE, 8);
    int frames;
    is_int(decode_all(CRL_AGENT_SIDE_GUEST, &h, &frames, &e), 0, "the guest decodes the host's");
    is_int(frames, 9, "all 9 frames");
    is_int(decode_all(CRL_AGENT_SIDE_HOST, &h, &frames, &e), -1, "the host refuses them");
    like(e.msg, "^CONFIG is not sent by the guest$", "  as the guest may not send CONFIG");
    free(h.b);
    free(w.b);
}

static void test_split_feeds(void)
{
    struct wire w = {0};
    guest_frames(&w);
    struct seen all, part;
    struct crl_err e = CRL_ERR_INIT;
    feed_in_pieces(&w, NULL, 0, &all, &e);
    int bad = 0;
    for (size_t i = 0; i <= w.n; i++) {
        size_t cut[1] = {i};
        if (feed_in_pieces(&w, cut, 1, &part, &e) != 0 || strcmp(part.log, all.log) != 0) {
            if (bad++ < 3)
                diag("split at %zu: %d frames, %s", i, part.n, e.msg);
        }
    }
    is_int(bad, 0, "every split point of %zu bytes gives the same %d frames", w.n, all.n);
    bad = 0;
    for (size_t i = 0; i <= w.n; i += 7)
        for (size_t j = i; j <= w.n; j += 5) {
            size_t cuts[2] = {i, j};
            if (feed_in_pieces(&w, cuts, 2, &part, &e) != 0 || strcmp(part.log, all.log) != 0)
                bad++;
        }
    is_int(bad, 0, "and pairs of split points");
    size_t ones[4096];
    int n = 0;
    for (size_t i = 1; i < w.n && n < (int)CRL_ARRAY_SIZE(ones); i++)
        ones[n++] = i;
    ok(feed_in_pieces(&w, ones, n, &part, &e) == 0 && strcmp(part.log, all.log) == 0,
       "and one byte at a time");
    free(w.b);
}

/* ---- refusals ---- */

static void test_errors(void)
{
    struct {
        uint32_t len;
        uint16_t type, flags;
        uint32_t stream;
        const char *payload; /* NULL: no bytes at all (only the header) */
        size_t plen;
        const char *re, *what;
    } cases[] = {
        {0, 99, 0, 0, "", 0, "^frame type 99 is unknown$", "an unknown type"},
        {0, 0, 0, 0, "", 0, "^frame type 0 is unknown$", "type 0"},
        {0, CRL_AGENT_BYE, 1, 0, "", 0, "^BYE frame has flags 0x1 \\(version 1 has none\\)$",
         "flags"},
        {0, CRL_AGENT_BYE, 0x8000, 0, "", 0, "flags 0x8000", "the top flag"},
        {2, CRL_AGENT_EXEC, 0, 1, "{}", 2, "^EXEC is not sent by the guest$", "EXEC"},
        {5, CRL_AGENT_STDIN, 0, 1, "bytes", 5, "^STDIN is not sent by the guest$", "STDIN"},
        {2, CRL_AGENT_SIGNAL, 0, 1, "{}", 2, "^SIGNAL is not sent", "SIGNAL"},
        {2, CRL_AGENT_CONFIG, 0, 0, "{}", 2, "^CONFIG is not sent", "CONFIG"},
        {2, CRL_AGENT_FILE_GET, 0, 1, "{}", 2, "^FILE_GET is not sent", "FILE_GET"},
        {2, CRL_AGENT_FILE_PUT, 0, 1, "{}", 2, "^FILE_PUT is not sent", "FILE_PUT"},
        {2000000, CRL_AGENT_STDOUT, 0, 1, NULL, 0,
         "^STDOUT frame of 2000000 bytes is over the 1 MiB limit$",
         "an oversized STDOUT, at its header"},
        {0xffffffffu, CRL_AGENT_DATA, 0, 1, NULL, 0, "^DATA frame of 4294967295 bytes is over",
         "a length of 2^32-1"},
        {CRL_AGENT_MAX_JSON + 1, CRL_AGENT_EXIT, 0, 1, NULL, 0,
         "^EXIT frame of 65537 bytes is over the 64 KiB limit$", "JSON over 64 KiB"},
        {3, CRL_AGENT_STDOUT, 0, 0, "out", 3, "^STDOUT frame on stream 0 \\(it needs a stream\\)$",
         "STDOUT on stream 0"},
        {2, CRL_AGENT_EXIT, 0, 0, "{}", 2, "^EXIT frame on stream 0", "EXIT on stream 0"},
        {2, CRL_AGENT_HELLO, 0, 5, "{}", 2,
         "^HELLO frame on stream 5 \\(it belongs on stream 0\\)$", "HELLO on a stream"},
        {8, CRL_AGENT_PING, 0, 5, "12345678", 8, "^PING frame on stream 5", "PING on a stream"},
        {0, CRL_AGENT_BYE, 0, 5, "", 0, "^BYE frame on stream 5", "BYE on a stream"},
        {4, CRL_AGENT_CREDIT, 0, 0, "\1\0\0\0", 4, "^CREDIT frame on stream 0", "CREDIT on 0"},
        {1, CRL_AGENT_BYE, 0, 0, "x", 1, "^BYE frame of 1 bytes \\(it has exactly 0\\)$",
         "a BYE with bytes"},
        {3, CRL_AGENT_CREDIT, 0, 1, "\1\0\0", 3, "^CREDIT frame of 3 bytes \\(it has exactly 4\\)",
         "a short CREDIT"},
        {9, CRL_AGENT_PONG, 0, 0, "123456789", 9, "^PONG frame of 9 bytes", "a long PONG"},
        {4, CRL_AGENT_CREDIT, 0, 1, "\0\0\0\0", 4, "^CREDIT of 0 bytes$", "CREDIT of 0"},
        {0, CRL_AGENT_READY, 0, 0, "", 0, "^READY frame of 0 bytes is too short for a JSON object$",
         "an empty JSON payload"},
        {2, CRL_AGENT_READY, 0, 0, "[]", 2, "^READY payload is not a JSON object$", "an array"},
        {3, CRL_AGENT_READY, 0, 0, " {}", 3, "not a JSON object", "leading space"},
        {4, CRL_AGENT_READY, 0, 0, "{\"\xff}", 4,
         "^READY JSON payload is not valid UTF-8 \\(byte 0xff at offset 2\\)$", "a 0xff byte"},
        {4, CRL_AGENT_READY, 0, 0, "{\xc0\x80}", 4, "not valid UTF-8", "an overlong NUL"},
        {5, CRL_AGENT_READY, 0, 0, "{\xed\xa0\x80}", 5, "not valid UTF-8", "a surrogate"},
        {6, CRL_AGENT_READY, 0, 0, "{\xf4\x90\x80\x80}", 6, "not valid UTF-8", "past U+10FFFF"},
        {4, CRL_AGENT_READY, 0, 0, "{\xe2\x82}", 4, "not valid UTF-8", "a cut sequence"},
        {4, CRL_AGENT_ERROR, 0, 0, "{\0\"}", 4,
         "^ERROR JSON payload is not valid UTF-8 \\(byte 0x00 at offset 1\\)$", "a NUL"},
    };
    for (size_t i = 0; i < CRL_ARRAY_SIZE(cases); i++) {
        struct wire w = {0};
        /* a good frame first: the decoder fails mid-stream */
        wire_str(&w, CRL_AGENT_STDOUT, 1, "fine");
        wire_raw(&w, cases[i].len, cases[i].type, cases[i].flags, cases[i].stream, cases[i].payload,
                 cases[i].plen);
        refused(&w, cases[i].re, cases[i].what);
        free(w.b);
    }

    /* and the guest's decoder refuses what the guest sends */
    struct wire w = {0};
    wire_str(&w, CRL_AGENT_STDOUT, 1, "x");
    struct crl_err e = CRL_ERR_INIT;
    int frames;
    is_int(decode_all(CRL_AGENT_SIDE_GUEST, &w, &frames, &e), -1, "the guest refuses STDOUT");
    is_str(e.msg, "STDOUT is not sent by the host", "  naming it");
    free(w.b);
}

static void test_stays_failed(void)
{
    struct crl_agent_dec d;
    struct crl_err e = CRL_ERR_INIT;
    crl_agent_dec_init(&d, CRL_AGENT_SIDE_HOST, &e);
    struct wire w = {0};
    wire_raw(&w, 0, 99, 0, 0, NULL, 0);
    wire_str(&w, CRL_AGENT_STDOUT, 1, "good");
    is_int(crl_agent_dec_feed(&d, w.b, w.n), w.n, "fed");
    struct crl_agent_frame f;
    is_int(crl_agent_dec_next(&d, &f, &e), -1, "refused");
    char first[sizeof(e.msg)];
    memcpy(first, e.msg, sizeof(first));
    crl_err_clear(&e);
    is_int(crl_agent_dec_next(&d, &f, &e), -1, "and again, though a good frame was buffered");
    is_str(e.msg, first, "with the same message");
    is_int(crl_agent_dec_feed(&d, w.b, w.n), w.n, "a failed decoder takes everything");
    is_int(crl_agent_dec_pending(&d), 0, "and keeps nothing");
    crl_err_clear(&e);
    ok(crl_agent_dec_next(&d, &f, &e) == -1 && strcmp(e.msg, first) == 0, "still failed");
    is_int(crl_agent_dec_next(&d, &f, NULL), -1, "an err of NULL is allowed");
    crl_agent_dec_free(&d);
    free(w.b);
}

/* ---- sizes ---- */

static void test_max_sizes(void)
{
    struct crl_err e = CRL_ERR_INIT;
    uint8_t *big = malloc(CRL_AGENT_MAX_PAYLOAD + 1);
    memset(big, 'x', CRL_AGENT_MAX_PAYLOAD + 1);
    struct wire w = {0};
    wire_frame(&w, CRL_AGENT_STDOUT, 1, big, CRL_AGENT_MAX_PAYLOAD);
    wire_frame(&w, CRL_AGENT_STDOUT, 1, big, CRL_AGENT_MAX_PAYLOAD);
    wire_frame(&w, CRL_AGENT_STDERR, 1, big, 1);

    struct crl_agent_dec d;
    crl_agent_dec_init(&d, CRL_AGENT_SIDE_HOST, &e);
    size_t took = crl_agent_dec_feed(&d, w.b, w.n);
    is_int(took, CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD,
           "the decoder holds one largest frame and its header, no more");
    is_int(crl_agent_dec_feed(&d, w.b + took, w.n - took), 0, "full: it takes nothing");
    struct crl_agent_frame f;
    ok(crl_agent_dec_next(&d, &f, &e) == 1 && f.len == CRL_AGENT_MAX_PAYLOAD &&
           f.payload[CRL_AGENT_MAX_PAYLOAD - 1] == 'x',
       "a STDOUT of exactly 1 MiB");
    size_t off = took;
    int frames = 1, r = 0;
    while (off < w.n && r >= 0) {
        off += crl_agent_dec_feed(&d, w.b + off, w.n - off);
        while ((r = crl_agent_dec_next(&d, &f, &e)) == 1)
            frames++;
    }
    ok(r == 0 && frames == 3 && f.type == CRL_AGENT_STDERR, "then the rest (%s)", e.msg);
    crl_agent_dec_free(&d);
    free(w.b);

    w = (struct wire){0};
    wire_frame(&w, CRL_AGENT_STDOUT, 1, big, CRL_AGENT_MAX_PAYLOAD + 1);
    refused(&w, "^STDOUT frame of 1048577 bytes is over the 1 MiB limit$", "1 MiB + 1");
    free(w.b);

    /* JSON: 64 KiB exactly, then a byte more */
    char *json = malloc(CRL_AGENT_MAX_JSON + 1);
    memset(json, ' ', CRL_AGENT_MAX_JSON + 1);
    json[0] = '{';
    json[CRL_AGENT_MAX_JSON - 1] = '}';
    w = (struct wire){0};
    wire_frame(&w, CRL_AGENT_RESULT, 1, json, CRL_AGENT_MAX_JSON);
    is_int(decode_all(CRL_AGENT_SIDE_HOST, &w, &frames, &e), 0, "a JSON payload of 64 KiB");
    is_int(frames, 1, "  is one frame");
    free(w.b);
    json[CRL_AGENT_MAX_JSON - 1] = ' ';
    json[CRL_AGENT_MAX_JSON] = '}';
    w = (struct wire){0};
    wire_frame(&w, CRL_AGENT_RESULT, 1, json, CRL_AGENT_MAX_JSON + 1);
    refused(&w, "^RESULT frame of 65537 bytes is over the 64 KiB limit$", "64 KiB + 1 of JSON");
    free(w.b);

    /* the encoder keeps the same limits */
    uint8_t *out = malloc(CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD + 1);
    size_t cap = CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD + 1;
    is_int(crl_agent_encode(CRL_AGENT_SIDE_GUEST, out, cap, CRL_AGENT_STDOUT, 1, big,
                            CRL_AGENT_MAX_PAYLOAD, &e),
           CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD, "the encoder writes 1 MiB");
    is_int(crl_agent_encode(CRL_AGENT_SIDE_GUEST, out, cap, CRL_AGENT_STDOUT, 1, big,
                            CRL_AGENT_MAX_PAYLOAD + 1, &e),
           -1, "not a byte more");
    like(e.msg, "over the 1 MiB limit", "  saying why");
    is_int(crl_agent_encode(CRL_AGENT_SIDE_HOST, out, cap, CRL_AGENT_STDOUT, 1, "x", 1, &e), -1,
           "the host may not encode STDOUT");
    like(e.msg, "^STDOUT is not sent by the host$", "  saying why");
    is_int(crl_agent_encode(CRL_AGENT_SIDE_HOST, out, 13, CRL_AGENT_STDIN, 1, "xy", 2, &e), -1,
           "a frame that does not fit in the buffer");
    like(e.msg, "^STDIN frame of 2 bytes does not fit in 13$", "  saying so");
    free(out);
    free(json);
    free(big);
}

/* ---- flow control ---- */

static void test_window(void)
{
    struct crl_agent_window w;
    struct crl_err e = CRL_ERR_INIT;
    crl_agent_window_init(&w);
    is_int(w.recv, CRL_AGENT_INITIAL_WINDOW, "the window starts at 256 KiB");
    static uint8_t bytes[CRL_AGENT_INITIAL_WINDOW];
    struct crl_agent_frame f = {CRL_AGENT_STDOUT, 0, 3, CRL_AGENT_INITIAL_WINDOW - 10, bytes};
    is_int(crl_agent_window_received(&w, &f, &e), 0, "256 KiB - 10 of STDOUT");
    f = (struct crl_agent_frame){CRL_AGENT_STDERR, 0, 3, 10, bytes};
    is_int(crl_agent_window_received(&w, &f, &e), 0, "10 of STDERR: the window is used up");
    f = (struct crl_agent_frame){CRL_AGENT_STDOUT, 0, 3, 0, bytes};
    is_int(crl_agent_window_received(&w, &f, &e), 0, "an empty STDOUT costs nothing");
    f = (struct crl_agent_frame){CRL_AGENT_EXIT, 0, 3, 100, bytes};
    is_int(crl_agent_window_received(&w, &f, &e), 0, "nor does an EXIT");
    f = (struct crl_agent_frame){CRL_AGENT_DATA, 0, 3, 1, bytes};
    is_int(crl_agent_window_received(&w, &f, &e), -1, "one byte more is an overrun");
    is_str(e.msg, "DATA frame of 1 bytes on stream 3 is over its window of 0 bytes",
           "  naming the frame, the stream and the window");
    is_int(crl_agent_window_grant(&w, 100, &e), 0, "a grant of 100");
    f.len = 100;
    is_int(crl_agent_window_received(&w, &f, &e), 0, "100 bytes fit");
    is_int(crl_agent_window_grant(&w, CRL_AGENT_MAX_WINDOW, &e), 0, "a grant up to 16 MiB");
    is_int(crl_agent_window_grant(&w, 1, &e), -1, "but not past it");
    like(e.msg, "^a grant of 1 bytes would open a window of over 16 MiB", "  saying so");

    /* sending */
    is_int(crl_agent_window_sending(&w, CRL_AGENT_INITIAL_WINDOW, &e), 0, "send 256 KiB");
    is_int(crl_agent_window_sending(&w, 1, &e), -1, "then not a byte");
    is_str(e.msg, "1 bytes are over the send window of 0 bytes", "  saying so");
    uint8_t credit[CRL_AGENT_CREDIT_FRAME_SIZE];
    crl_agent_encode_credit(credit, 3, 0xffffffffu);
    struct crl_agent_frame c = {CRL_AGENT_CREDIT, 0, 3, 4, credit + CRL_AGENT_HEADER_SIZE};
    is_int(crl_agent_window_credit(&w, &c, &e), -1, "the peer's CREDIT of 4 GiB - 1 is refused");
    like(e.msg, "^CREDIT of 4294967295 bytes on stream 3 would open a window of over 16 MiB",
         "  naming it");
    crl_agent_encode_credit(credit, 3, 1000);
    is_int(crl_agent_window_credit(&w, &c, &e), 0, "a CREDIT of 1000");
    is_int(w.send, 1000, "  opens the send window by 1000");
}

/* ---- JSON messages ---- */

static void test_msg_round_trips(void)
{
    struct crl_err e = CRL_ERR_INIT;
    char *out;
    size_t n;

    struct crl_agent_hello h = {CRL_AGENT_PROTO_VERSION, "corral-agent 0.1", "6.1.0-cloud"}, h2;
    ok(crl_agent_build_hello(&h, &out, &n, &e) == 0 &&
           crl_agent_parse_hello(out, n, &h2, &e) == 0 && h2.proto == CRL_AGENT_PROTO_VERSION &&
           strcmp(h2.agent, h.agent) == 0 && strcmp(h2.kernel, h.kernel) == 0,
       "HELLO round trip (%s)", e.msg);
    is_str(out, "{\"proto\":2,\"agent\":\"corral-agent 0.1\",\"kernel\":\"6.1.0-cloud\"}",
           "  HELLO's text");
    free(out);

    struct crl_agent_config *c = calloc(2, sizeof(*c));
    snprintf(c->hostname, sizeof(c->hostname), "sb-42");
    c->realtime_ns = INT64_MAX;
    c->seed_len = 64;
    for (int i = 0; i < 64; i++)
        c->seed[i] = (uint8_t)(i * 7);
    c->n_layers = 2;
    snprintf(c->layers[0], sizeof(c->layers[0]), "/dev/vdb");
    snprintf(c->layers[1], sizeof(c->layers[1]), "/dev/vdc");
    snprintf(c->disk, sizeof(c->disk), "/dev/vda");
    c->disk_mb = 512;
    snprintf(c->etc_hostname, sizeof(c->etc_hostname), "sb-42\n");
    snprintf(c->etc_hosts, sizeof(c->etc_hosts), "127.0.0.1\tlocalhost\n127.0.1.1\tsb-42\n");
    snprintf(c->net_address, sizeof(c->net_address), "10.213.0.2");
    snprintf(c->net_gateway, sizeof(c->net_gateway), "10.213.0.1");
    c->net_prefix = 30;
    c->n_volumes = 2;
    snprintf(c->volumes[0].device, sizeof(c->volumes[0].device), "/dev/vdi");
    snprintf(c->volumes[0].path, sizeof(c->volumes[0].path), "/data");
    snprintf(c->volumes[1].device, sizeof(c->volumes[1].device), "/dev/vdj");
    snprintf(c->volumes[1].path, sizeof(c->volumes[1].path), "/srv/ro");
    c->volumes[1].read_only = true;
    snprintf(c->init, sizeof(c->init), "/sbin/init");
    snprintf(c->machine_id, sizeof(c->machine_id), "0123456789abcdef0123456789abcdef");
    ok(crl_agent_build_config(c, &out, &n, &e) == 0 &&
           crl_agent_parse_config(out, n, &c[1], &e) == 0 && memcmp(&c[0], &c[1], sizeof(*c)) == 0,
       "CONFIG round trip (%s)", e.msg);
    free(out);
    c->disk[0] = 0;
    c->n_layers = 0;
    c->net_address[0] = c->net_gateway[0] = 0;
    c->net_prefix = 0;
    c->n_volumes = 0;
    c->init[0] = c->machine_id[0] = 0;
    ok(crl_agent_build_config(c, &out, &n, &e) == 0 &&
           crl_agent_parse_config(out, n, &c[1], &e) == 0 && c[1].disk[0] == 0 &&
           c[1].n_layers == 0 && c[1].n_volumes == 0 && c[1].init[0] == 0 &&
           !strstr(out, "volumes") && !strstr(out, "init") && !strstr(out, "machine_id"),
       "CONFIG without a disk, layers, volumes, init or machine-id");
    free(out);
    free(c);

    struct crl_agent_ready rd = {1234}, rd2;
    ok(crl_agent_build_ready(&rd, &out, &n, &e) == 0 &&
           crl_agent_parse_ready(out, n, &rd2, &e) == 0 && rd2.uptime_ms == 1234,
       "READY round trip");
    free(out);

    char *argv[] = {"sh", "-c", "echo caf\xc3\xa9 \"$X\"", NULL};
    char *env[] = {"X=1", "EMPTY=", "A=b=c", NULL};
    struct crl_agent_exec x = {argv,        3,    env,  3,  "/work dir", 1000,
                               4294967294u, true, true, 50, 132},
                          x2;
    ok(crl_agent_build_exec(&x, &out, &n, &e) == 0 && crl_agent_parse_exec(out, n, &x2, &e) == 0,
       "EXEC round trip (%s)", e.msg);
    ok(x2.argc == 3 && x2.argv[3] == NULL && strcmp(x2.argv[2], argv[2]) == 0 && x2.envc == 3 &&
           x2.env[3] == NULL && strcmp(x2.env[2], "A=b=c") == 0 &&
           strcmp(x2.cwd, "/work dir") == 0 && x2.uid == 1000 && x2.gid == 4294967294u &&
           x2.stdin_open && x2.tty && x2.rows == 50 && x2.cols == 132,
       "  every field");
    crl_agent_exec_free(&x2);
    free(out);
    const char *minimal = "{\"argv\":[\"true\"],\"cwd\":\"/\",\"uid\":0,\"gid\":0}";
    ok(crl_agent_parse_exec(minimal, strlen(minimal), &x2, &e) == 0 && x2.envc == 0 && x2.env &&
           x2.env[0] == NULL && !x2.stdin_open && !x2.tty,
       "EXEC: env, stdin and tty may be left out (%s)", e.msg);
    crl_agent_exec_free(&x2);

    struct crl_agent_exit ex[] = {
        {CRL_AGENT_EXITED, 3, 0, 0, 1, 2, 3, 4096},
        {CRL_AGENT_SIGNALED, 0, 64, 0, 0, 0, 0, -1},
        {CRL_AGENT_OOM_KILLED, 0, 9, 0, 5, 6, 7, 0},
        {CRL_AGENT_START_FAILED, 0, 0, 2, 0, 0, 0, -1},
    };
    for (size_t i = 0; i < CRL_ARRAY_SIZE(ex); i++) {
        struct crl_agent_exit got;
        if (!ok(crl_agent_build_exit(&ex[i], &out, &n, &e) == 0, "EXIT %zu built", i))
            continue;
        ok(crl_agent_parse_exit(out, n, &got, &e) == 0 && memcmp(&got, &ex[i], sizeof(got)) == 0,
           "  and parsed back the same: %s", out);
        free(out);
    }
    ex[0].code = 256;
    ok(crl_agent_build_exit(&ex[0], &out, &n, &e) == -1, "the builder refuses code 256");
    like(e.msg, "^EXIT: code 256 is out of range \\[0, 255\\]$", "  with the parser's message");

    struct crl_agent_signal s = {15, CRL_AGENT_SIGNAL_TREE}, s2;
    ok(crl_agent_build_signal(&s, &out, &n, &e) == 0 &&
           crl_agent_parse_signal(out, n, &s2, &e) == 0 && s2.signal == 15 &&
           s2.scope == CRL_AGENT_SIGNAL_TREE && !strstr(out, "scope"),
       "SIGNAL round trip (tree, the default, left out)");
    free(out);
    s.scope = CRL_AGENT_SIGNAL_DESCENDANTS;
    int built = crl_agent_build_signal(&s, &out, &n, &e); /* before `out` is read below */
    ok(built == 0 && crl_agent_parse_signal(out, n, &s2, &e) == 0 &&
           s2.scope == CRL_AGENT_SIGNAL_DESCENDANTS,
       "SIGNAL round trip with scope descendants: %s", built == 0 ? out : e.msg);
    free(out);
    for (int sc = CRL_AGENT_SIGNAL_PROCESS; sc <= CRL_AGENT_SIGNAL_GROUP; sc++) {
        s.scope = (enum crl_agent_signal_scope)sc;
        built = crl_agent_build_signal(&s, &out, &n, &e);
        ok(built == 0 && crl_agent_parse_signal(out, n, &s2, &e) == 0 && s2.scope == s.scope,
           "SIGNAL round trip with scope %s", built == 0 ? out : e.msg);
        free(out);
    }
    struct crl_agent_started st = {4242}, st2;
    ok(crl_agent_build_started(&st, &out, &n, &e) == 0 &&
           crl_agent_parse_started(out, n, &st2, &e) == 0 && st2.pid == 4242,
       "STARTED round trip");
    free(out);
    const char *bad_pid = "{\"pid\":1}";
    ok(crl_agent_parse_started(bad_pid, strlen(bad_pid), &st2, &e) == -1 &&
           strstr(e.msg, "STARTED: pid 1 is out of range"),
       "STARTED of pid 1 (the agent itself) is refused");
    struct crl_agent_resize rz = {50, 132}, rz2;
    ok(crl_agent_build_resize(&rz, &out, &n, &e) == 0 &&
           crl_agent_parse_resize(out, n, &rz2, &e) == 0 && rz2.rows == 50 && rz2.cols == 132,
       "RESIZE round trip");
    free(out);
    const char *big = "{\"rows\":5,\"cols\":4097}", *none = "{\"rows\":5}";
    ok(crl_agent_parse_resize(big, strlen(big), &rz2, &e) == -1 &&
           strstr(e.msg, "RESIZE: cols 4097 is out of range"),
       "RESIZE past 4096 columns is refused");
    ok(crl_agent_parse_resize(none, strlen(none), &rz2, &e) == -1 &&
           strstr(e.msg, "RESIZE: cols is missing"),
       "RESIZE without cols is refused");
    const char *bad_scope = "{\"signal\":9,\"scope\":\"all\"}";
    ok(crl_agent_parse_signal(bad_scope, strlen(bad_scope), &s2, &e) == -1, "an unknown scope");
    like(e.msg, "^SIGNAL: scope is not", "  is refused, saying so");

    struct crl_agent_file *fl = calloc(2, sizeof(*fl));
    snprintf(fl->path, sizeof(fl->path), "/tmp/a b");
    fl->tar = true;
    fl->mode = 0755;
    ok(crl_agent_build_file(CRL_AGENT_FILE_PUT, fl, &out, &n, &e) == 0 &&
           crl_agent_parse_file(CRL_AGENT_FILE_PUT, out, n, &fl[1], &e) == 0 &&
           memcmp(&fl[0], &fl[1], sizeof(*fl)) == 0,
       "FILE_PUT round trip");
    ok(crl_agent_parse_file(CRL_AGENT_FILE_GET, out, n, &fl[1], &e) == -1, "FILE_GET has no mode");
    like(e.msg, "^FILE_GET: unknown key \"mode\"$", "  saying so");
    free(out);
    fl->mode = 0;
    ok(crl_agent_build_file(CRL_AGENT_FILE_GET, fl, &out, &n, &e) == 0 &&
           crl_agent_parse_file(CRL_AGENT_FILE_GET, out, n, &fl[1], &e) == 0 &&
           memcmp(&fl[0], &fl[1], sizeof(*fl)) == 0,
       "FILE_GET round trip");
    free(out);
    free(fl);

    struct crl_agent_result rs = {false, 2, "no such file: /x\tcaf\xc3\xa9"}, rs2;
    ok(crl_agent_build_result(&rs, &out, &n, &e) == 0 &&
           crl_agent_parse_result(out, n, &rs2, &e) == 0 && !rs2.ok && rs2.error_no == 2 &&
           strcmp(rs2.error, rs.error) == 0,
       "RESULT round trip (%s)", e.msg);
    free(out);
    rs = (struct crl_agent_result){true, 0, ""};
    ok(crl_agent_build_result(&rs, &out, &n, &e) == 0 && strcmp(out, "{\"ok\":true}") == 0,
       "RESULT ok");
    free(out);

    struct crl_agent_error er = {"the disk is full"}, er2;
    ok(crl_agent_build_error(&er, &out, &n, &e) == 0 &&
           crl_agent_parse_error(out, n, &er2, &e) == 0 && strcmp(er2.message, er.message) == 0,
       "ERROR round trip");
    free(out);

    /* what a builder makes is a frame the other end's decoder takes */
    ok(crl_agent_build_hello(&h, &out, &n, &e) == 0, "HELLO again");
    struct wire w = {0};
    wire_frame(&w, CRL_AGENT_HELLO, 0, out, n);
    int frames;
    is_int(decode_all(CRL_AGENT_SIDE_HOST, &w, &frames, &e), 0,
           "  and the host's decoder takes it");
    free(w.b);
    free(out);
}

static void test_msg_refused(void)
{
    struct crl_err e = CRL_ERR_INIT;
    struct {
        int kind; /* 0 hello, 1 config, 2 exec, 3 exit, 4 put, 5 result, 6 error, 7 signal, 8 ready
                   */
        const char *json, *re;
    } cases[] = {
        {0, "{\"proto\":1,\"agent\":\"a\",\"kernel\":\"k\"}",
         "^HELLO: protocol version 1 is not supported \\(2 is: a guest built by another "
         "version of corral"},
        {0, "{\"proto\":2,\"agent\":\"a\"}", "^HELLO: kernel is missing$"},
        {0, "{\"proto\":2,\"agent\":\"a\\n\",\"kernel\":\"k\"}",
         "^HELLO: agent has byte 0x0a at offset 1$"},
        {0, "{\"proto\":2,\"agent\":\"caf\\u00e9\",\"kernel\":\"k\"}", "agent has byte 0xc3"},
        {0, "{\"proto\":2,\"proto\":2,\"agent\":\"a\",\"kernel\":\"k\"}", "^HELLO: not JSON"},
        {0, "{\"proto\":\"1\",\"agent\":\"a\",\"kernel\":\"k\"}",
         "^HELLO: proto is not an integer$"},
        {0, "{\"proto\":2.0,\"agent\":\"a\",\"kernel\":\"k\"}", "proto is not an integer"},
        {0, "{\"proto\":2,\"agent\":\"a\",\"kernel\":\"k\",\"x\\u0001\":1}",
         "^HELLO: unknown key \"x\\?\"$"},
        {0, "[1]", "^HELLO: not a JSON object$"},
        {0, "{", "^HELLO: not JSON at byte"},
        {1, "{\"hostname\":\"-a\",\"realtime_ns\":0,\"seed\":\"\",\"layers\":[]}",
         "^CONFIG: hostname has '-' at offset 0"},
        {1, "{\"hostname\":\"a.b\",\"realtime_ns\":0,\"seed\":\"\",\"layers\":[]}",
         "hostname has '.'"},
        {1, "{\"hostname\":\"a\",\"realtime_ns\":-1,\"seed\":\"\",\"layers\":[]}",
         "^CONFIG: realtime_ns -1 is out of range"},
        {1, "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAA\",\"layers\":[]}",
         "^CONFIG: seed of 3 bytes \\(it needs 16 to 512\\)$"},
        {1, "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AA!A\",\"layers\":[]}",
         "^CONFIG: seed is not base64"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[\"/etc/passwd\"]}",
         "^CONFIG: layers\\[0\\] is not under /dev/$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[1]}",
         "^CONFIG: layers\\[0\\] is not a string$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"disk\":\"vda\"}",
         "^CONFIG: disk is not an absolute path$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"etc\":{\"passwd\":\"root::0:0::/:/bin/sh\"}}",
         "^CONFIG: etc: unknown key \"passwd\"$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"etc\":{\"hosts\":\"a\\u001bb\"}}",
         "^CONFIG: etc: hosts has byte 0x1b at offset 1$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"net\":{\"address\":\"10.0.0.300\",\"prefix\":30,"
         "\"gateway\":\"10.0.0.1\"}}",
         "^CONFIG: net: address and gateway are dotted IPv4$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"net\":{\"address\":\"10.0.0.2\",\"prefix\":0,"
         "\"gateway\":\"10.0.0.1\"}}",
         "^CONFIG: net: prefix 0 is out of range"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"net\":{\"address\":\"10.0.0.2\",\"prefix\":30}}",
         "^CONFIG: net: gateway is missing"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"volumes\":[{\"device\":\"/tmp/x\",\"path\":\"/d\"}]}",
         "^CONFIG: volumes\\[0\\]: device is not under /dev/$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"volumes\":[{\"device\":\"/dev/vdi\",\"path\":\"d\"}]}",
         "^CONFIG: volumes\\[0\\]: path is not an absolute path$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"volumes\":[{\"device\":\"/dev/vdi\",\"path\":\"/d\"},"
         "{\"device\":\"/dev/vdj\",\"path\":\"/d\"}]}",
         "^CONFIG: volumes\\[1\\]: its device or path is volumes\\[0\\]'s$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"volumes\":[{\"device\":\"/dev/vdi\",\"path\":\"/d\","
         "\"read_only\":1}]}",
         "^CONFIG: volumes\\[0\\]: read_only is not true or false$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"init\":\"sbin/init\"}",
         "^CONFIG: init is not an absolute path$"},
        {1,
         "{\"hostname\":\"a\",\"realtime_ns\":0,\"seed\":\"AAAAAAAAAAAAAAAAAAAAAA==\","
         "\"layers\":[],\"machine_id\":\"0123456789ABCDEF0123456789abcdef\"}",
         "^CONFIG: machine_id is not 32 lowercase hex digits$"},
        {2, "{\"argv\":[],\"cwd\":\"/\",\"uid\":0,\"gid\":0}",
         "^EXEC: argv has 0 entries \\(it may have 1 to 1024\\)$"},
        {2, "{\"argv\":[\"a\",1],\"cwd\":\"/\",\"uid\":0,\"gid\":0}",
         "^EXEC: argv\\[1\\] is not a string$"},
        {2, "{\"argv\":[\"a\\u0000b\"],\"cwd\":\"/\",\"uid\":0,\"gid\":0}", "^EXEC: not JSON"},
        {2, "{\"argv\":[\"a\"],\"env\":[\"=x\"],\"cwd\":\"/\",\"uid\":0,\"gid\":0}",
         "^EXEC: env\\[0\\] is not NAME=value$"},
        {2, "{\"argv\":[\"a\"],\"env\":[\"X\"],\"cwd\":\"/\",\"uid\":0,\"gid\":0}",
         "env\\[0\\] is not NAME=value"},
        {2, "{\"argv\":[\"a\"],\"cwd\":\"tmp\",\"uid\":0,\"gid\":0}",
         "^EXEC: cwd is not an absolute path$"},
        {2, "{\"argv\":[\"a\"],\"cwd\":\"/\",\"uid\":4294967295,\"gid\":0}",
         "^EXEC: uid 4294967295 is out of range \\[0, 4294967294\\]$"},
        {2, "{\"argv\":[\"a\"],\"cwd\":\"/\",\"uid\":0,\"gid\":-1}", "gid -1 is out of range"},
        {2, "{\"argv\":[\"a\"],\"cwd\":\"/\",\"uid\":0,\"gid\":0,\"tty\":1}",
         "^EXEC: tty is not true or false$"},
        {2, "{\"argv\":\"a\",\"cwd\":\"/\",\"uid\":0,\"gid\":0}", "^EXEC: argv is not an array$"},
        {3, "{\"reason\":\"exited\",\"usage\":{\"utime_us\":0,\"stime_us\":0,\"maxrss_kb\":0}}",
         "^EXIT: code is missing$"},
        {3,
         "{\"reason\":\"exited\",\"code\":0,\"signal\":9,\"usage\":{\"utime_us\":0,\"stime_us\":0,"
         "\"maxrss_kb\":0}}",
         "^EXIT: signal with reason \"exited\"$"},
        {3,
         "{\"reason\":\"signaled\",\"signal\":65,\"usage\":{\"utime_us\":0,\"stime_us\":0,"
         "\"maxrss_kb\":0}}",
         "^EXIT: signal 65 is out of range \\[1, 64\\]$"},
        {3, "{\"reason\":\"bored\",\"code\":0}", "^EXIT: reason \"bored\" is unknown$"},
        {3, "{\"reason\":\"exited\",\"code\":0}", "^EXIT: usage is missing$"},
        {3,
         "{\"reason\":\"exited\",\"code\":0,\"usage\":{\"utime_us\":-5,\"stime_us\":0,"
         "\"maxrss_kb\":0}}",
         "^EXIT: usage: utime_us -5 is out of range"},
        {3,
         "{\"reason\":\"exited\",\"code\":0,\"usage\":{\"utime_us\":0,\"stime_us\":0,"
         "\"maxrss_kb\":9007199254740993}}",
         "maxrss_kb 9007199254740993 is out of range"},
        {3,
         "{\"reason\":\"exited\",\"code\":0,\"usage\":{\"utime_us\":0,\"stime_us\":0,"
         "\"maxrss_kb\":0,\"x\":0}}",
         "^EXIT: usage: unknown key \"x\"$"},
        {4, "{\"path\":\"/a\"}", "^FILE_PUT: mode is missing$"},
        {4, "{\"path\":\"/a\",\"mode\":4096}", "^FILE_PUT: mode 4096 is out of range"},
        {4, "{\"path\":\"\",\"mode\":0}", "^FILE_PUT: path is not an absolute path$"},
        {5, "{\"ok\":true,\"error\":\"x\"}", "^RESULT: ok with an error$"},
        {5, "{\"ok\":false}", "^RESULT: error is missing$"},
        {5, "{\"ok\":false,\"error\":\"\"}", "^RESULT: error is empty$"},
        {5, "{\"ok\":false,\"error\":\"a\\u001b[2J\"}",
         "^RESULT: error has byte 0x1b at offset 1$"},
        {6, "{\"message\":1}", "^ERROR: message is not a string$"},
        {7, "{\"signal\":0}", "^SIGNAL: signal 0 is out of range \\[1, 64\\]$"},
        {8, "{\"uptime_ms\":1,\"boot\":2}", "^READY: unknown key \"boot\"$"},
    };
    for (size_t i = 0; i < CRL_ARRAY_SIZE(cases); i++) {
        const char *j = cases[i].json;
        size_t n = strlen(j);
        union {
            struct crl_agent_hello h;
            struct crl_agent_config c;
            struct crl_agent_exec x;
            struct crl_agent_exit ex;
            struct crl_agent_file f;
            struct crl_agent_result r;
            struct crl_agent_error er;
            struct crl_agent_signal s;
            struct crl_agent_ready rd;
        } *m = malloc(sizeof(*m));
        int r = -2;
        crl_err_clear(&e);
        switch (cases[i].kind) {
        case 0: r = crl_agent_parse_hello(j, n, &m->h, &e); break;
        case 1: r = crl_agent_parse_config(j, n, &m->c, &e); break;
        case 2: r = crl_agent_parse_exec(j, n, &m->x, &e); break;
        case 3: r = crl_agent_parse_exit(j, n, &m->ex, &e); break;
        case 4: r = crl_agent_parse_file(CRL_AGENT_FILE_PUT, j, n, &m->f, &e); break;
        case 5: r = crl_agent_parse_result(j, n, &m->r, &e); break;
        case 6: r = crl_agent_parse_error(j, n, &m->er, &e); break;
        case 7: r = crl_agent_parse_signal(j, n, &m->s, &e); break;
        case 8: r = crl_agent_parse_ready(j, n, &m->rd, &e); break;
        }
        if (!ok(r == -1 && e.code == CRL_E_INVALID && like(e.msg, cases[i].re, "  message"),
                "refused: %s", j))
            diag("returned %d", r);
        if (r == 0 && cases[i].kind == 2)
            crl_agent_exec_free(&m->x);
        free(m);
    }
}

static void test_msg_limits(void)
{
    struct crl_err e = CRL_ERR_INIT;
    char *out;
    size_t n;
    /* 1024 arguments are allowed, 1025 are not */
    char **argv = calloc(CRL_AGENT_MAX_ARGS + 2, sizeof(char *));
    for (int i = 0; i <= CRL_AGENT_MAX_ARGS; i++)
        argv[i] = "a";
    struct crl_agent_exec x = {argv, CRL_AGENT_MAX_ARGS, NULL, 0, "/", 0, 0, false, false, 0, 0},
                          x2;
    ok(crl_agent_build_exec(&x, &out, &n, &e) == 0 && crl_agent_parse_exec(out, n, &x2, &e) == 0 &&
           x2.argc == CRL_AGENT_MAX_ARGS,
       "1024 arguments (%s)", e.msg);
    crl_agent_exec_free(&x2);
    free(out);
    x.argc++;
    ok(crl_agent_build_exec(&x, &out, &n, &e) == -1, "1025 are refused");
    like(e.msg, "^EXEC: argv has 1025 entries", "  saying so");

    /* argv and env together within 48 KiB */
    char *long_arg = malloc(30 * 1024);
    memset(long_arg, 'y', 30 * 1024 - 1);
    long_arg[30 * 1024 - 1] = 0;
    char *env[] = {long_arg, NULL};
    long_arg[0] = 'Y';
    long_arg[1] = '=';
    argv[0] = long_arg + 2;
    x = (struct crl_agent_exec){argv, 1, env, 1, "/", 0, 0, false, false, 0, 0};
    ok(crl_agent_build_exec(&x, &out, &n, &e) == -1, "argv and env of 60 KiB are refused");
    like(e.msg, "^EXEC: argv and env are over 49152 bytes$", "  saying so");
    x.envc = 0;
    ok(crl_agent_build_exec(&x, &out, &n, &e) == 0, "30 KiB of argv alone is fine");
    free(out);
    free(long_arg);
    free(argv);

    /* a path of 4095 bytes, and of 4096 */
    struct crl_agent_file f = {0};
    memset(f.path, 'p', CRL_AGENT_MAX_PATH);
    f.path[0] = '/';
    ok(crl_agent_build_file(CRL_AGENT_FILE_GET, &f, &out, &n, &e) == 0, "a path of 4095 bytes");
    free(out);
    char *j = malloc(8192);
    snprintf(j, 8192, "{\"path\":\"/%.*s\"}", CRL_AGENT_MAX_PATH, f.path);
    ok(crl_agent_parse_file(CRL_AGENT_FILE_GET, j, strlen(j), &f, &e) == -1,
       "one of 4096 is refused");
    like(e.msg, "^FILE_GET: path of 4096 bytes is over the limit of 4095$", "  saying so");
    free(j);

    /* NULs a C caller cannot make, but a peer's \u0000 could: refused as JSON */
    ok(crl_agent_parse_error("{\"message\":\"a\\u0000b\"}", 22, &(struct crl_agent_error){{0}},
                             &e) == -1,
       "\\u0000 in a string is refused");
    /* a payload over 64 KiB never reaches jansson */
    char *huge = malloc(CRL_AGENT_MAX_JSON + 1);
    memset(huge, ' ', CRL_AGENT_MAX_JSON + 1);
    huge[0] = '{';
    huge[CRL_AGENT_MAX_JSON] = '}';
    struct crl_agent_ready rd;
    ok(crl_agent_parse_ready(huge, CRL_AGENT_MAX_JSON + 1, &rd, &e) == -1, "65537 bytes refused");
    like(e.msg, "^READY: 65537 bytes is over the 64 KiB limit$", "  saying so");
    free(huge);
}

int main(void)
{
    TAP_RUN(test_types, 10);
    TAP_RUN(test_round_trip, 10);
    TAP_RUN(test_split_feeds, 60);
    TAP_RUN(test_errors, 10);
    TAP_RUN(test_stays_failed, 10);
    TAP_RUN(test_max_sizes, 10);
    TAP_RUN(test_window, 10);
    TAP_RUN(test_msg_round_trips, 10);
    TAP_RUN(test_msg_refused, 10);
    TAP_RUN(test_msg_limits, 10);
    return done_testing();
}
