/* libFuzzer driver for lib/agent: what a hostile guest (or host) sends.
 * The first byte picks the mode, the second seeds the chunk sizes.
 *
 *   mode < 0x80: the rest is a byte stream, fed in random chunks to a host
 *         decoder and to a guest decoder.  Every frame is within its type's
 *         limit (never over 1 MiB), has flags 0, may be sent by the peer,
 *         passes crl_agent_frame_check, and re-encodes to exactly the bytes
 *         it was decoded from; fed at once instead of in chunks, the stream
 *         gives the same frames and the same error.  A failed decoder stays
 *         failed with its message and keeps nothing.  Windowed frames are
 *         counted against per-stream windows (of 4 KiB, so that inputs
 *         overrun them), whose counters never exceed 16 MiB.  Each JSON payload goes to its type's
 * parser.  The same stream, fed in chunks to the host's session (host.c:
 * an exec, a FILE_GET and a FILE_PUT open, one CONFIG sent), gives a
 * subset of the decoder's frames, each on stream 0 or on a stream open
 * until then, and a failed session stays failed with its message. mode >= 0x80: the rest is one
 * JSON payload, given to every parser.
 *
 * Whatever a parser accepts, its builder writes back, and that text parses
 * to the same message (and is at most 64 KiB).  A refusal is a
 * CRL_E_INVALID with a message.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/agent_proto
 *   (written by tests/fuzz/make_agent_proto_corpus.py), dictionary:
 *   tests/fuzz/agent_proto.dict */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/agent/host.h"
#include "../../lib/agent/msg.h"
#include "../../lib/agent/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_agent_proto: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                    \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static void check_refusal(const struct crl_err *e)
{
    CHECK(e->code == CRL_E_INVALID);
    CHECK(e->msg[0] != 0);
    CHECK(memchr(e->msg, 0, sizeof(e->msg)) != NULL);
}

/* ---- the JSON messages ---- */

static bool same_strings(char *const *a, char *const *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return a[n] == NULL && b[n] == NULL;
}

static void roundtrip_exec(const struct crl_agent_exec *m)
{
    struct crl_err e = CRL_ERR_INIT;
    char *out = NULL;
    size_t n = 0;
    if (crl_agent_build_exec(m, &out, &n, &e) < 0) {
        fprintf(stderr, "fuzz_agent_proto: an accepted EXEC not built: %s\n", e.msg);
        abort();
    }
    CHECK(n <= CRL_AGENT_MAX_JSON);
    struct crl_agent_exec b;
    CHECK(crl_agent_parse_exec(out, n, &b, &e) == 0);
    CHECK(b.argc == m->argc && b.envc == m->envc && same_strings(b.argv, m->argv, b.argc) &&
          same_strings(b.env, m->env, b.envc));
    CHECK(strcmp(b.cwd, m->cwd) == 0 && b.uid == m->uid && b.gid == m->gid &&
          b.stdin_open == m->stdin_open && b.tty == m->tty);
    crl_agent_exec_free(&b);
    free(out);
}

/* Parse p with the parser of `type`; what is accepted is built and parsed
 * again to the same struct.  The structs are zeroed by their parsers, so
 * memcmp compares them. */
#define ROUNDTRIP(T, parse, build, ...)                                                         \
    do {                                                                                        \
        T *m = calloc(2, sizeof(T));                                                            \
        CHECK(m);                                                                               \
        if (parse(__VA_ARGS__ p, len, &m[0], &e) < 0) {                                         \
            check_refusal(&e);                                                                  \
        } else {                                                                                \
            char *out = NULL;                                                                   \
            size_t n = 0;                                                                       \
            if (build(__VA_ARGS__ & m[0], &out, &n, &e) < 0) {                                  \
                fprintf(stderr, "fuzz_agent_proto: an accepted %s not built: %s\n", #T, e.msg); \
                abort();                                                                        \
            }                                                                                   \
            CHECK(n <= CRL_AGENT_MAX_JSON && strlen(out) == n);                                 \
            CHECK(parse(__VA_ARGS__ out, n, &m[1], &e) == 0);                                   \
            CHECK(memcmp(&m[0], &m[1], sizeof(T)) == 0);                                        \
            free(out);                                                                          \
        }                                                                                       \
        free(m);                                                                                \
    } while (0)

static void fuzz_json(uint32_t type, const uint8_t *p, size_t len)
{
    struct crl_err e = CRL_ERR_INIT;
    switch (type) {
    case CRL_AGENT_HELLO:
        ROUNDTRIP(struct crl_agent_hello, crl_agent_parse_hello, crl_agent_build_hello);
        break;
    case CRL_AGENT_CONFIG:
        ROUNDTRIP(struct crl_agent_config, crl_agent_parse_config, crl_agent_build_config);
        break;
    case CRL_AGENT_READY:
        ROUNDTRIP(struct crl_agent_ready, crl_agent_parse_ready, crl_agent_build_ready);
        break;
    case CRL_AGENT_EXIT:
        ROUNDTRIP(struct crl_agent_exit, crl_agent_parse_exit, crl_agent_build_exit);
        break;
    case CRL_AGENT_SIGNAL:
        ROUNDTRIP(struct crl_agent_signal, crl_agent_parse_signal, crl_agent_build_signal);
        break;
    case CRL_AGENT_STARTED:
        ROUNDTRIP(struct crl_agent_started, crl_agent_parse_started, crl_agent_build_started);
        break;
    case CRL_AGENT_RESIZE:
        ROUNDTRIP(struct crl_agent_resize, crl_agent_parse_resize, crl_agent_build_resize);
        break;
    case CRL_AGENT_FILE_GET:
        ROUNDTRIP(struct crl_agent_file, crl_agent_parse_file, crl_agent_build_file,
                  CRL_AGENT_FILE_GET, );
        break;
    case CRL_AGENT_FILE_PUT:
        ROUNDTRIP(struct crl_agent_file, crl_agent_parse_file, crl_agent_build_file,
                  CRL_AGENT_FILE_PUT, );
        break;
    case CRL_AGENT_RESULT:
        ROUNDTRIP(struct crl_agent_result, crl_agent_parse_result, crl_agent_build_result);
        break;
    case CRL_AGENT_ERROR:
        ROUNDTRIP(struct crl_agent_error, crl_agent_parse_error, crl_agent_build_error);
        break;
    case CRL_AGENT_EXEC: {
        struct crl_agent_exec m;
        if (crl_agent_parse_exec(p, len, &m, &e) < 0) {
            check_refusal(&e);
            CHECK(m.argv == NULL && m.env == NULL);
            break;
        }
        CHECK(m.argc >= 1 && m.argc <= CRL_AGENT_MAX_ARGS && m.envc <= CRL_AGENT_MAX_ARGS);
        CHECK(m.cwd[0] == '/');
        roundtrip_exec(&m);
        crl_agent_exec_free(&m);
        break;
    }
    }
}

/* ---- the frames ---- */

/* A small PRNG for chunk sizes (xorshift32). */
static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

struct outcome {
    unsigned frames;
    uint64_t digest; /* FNV-1a over every frame */
    int last;        /* the last dec_next result */
    char msg[sizeof(((struct crl_err *)0)->msg)];
};

static void digest(uint64_t *h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
}

enum { WINDOWS = 8 };

static void check_frame(enum crl_agent_side side, const struct crl_agent_frame *f,
                        const uint8_t *wire, size_t wire_len, bool deep,
                        struct crl_agent_window *win)
{
    enum crl_agent_side from =
        side == CRL_AGENT_SIDE_HOST ? CRL_AGENT_SIDE_GUEST : CRL_AGENT_SIDE_HOST;
    const struct crl_agent_type_info *t = crl_agent_type_info(f->type);
    CHECK(t != NULL);
    CHECK(f->len <= t->max_len && f->len <= CRL_AGENT_MAX_PAYLOAD);
    CHECK(f->flags == 0);
    CHECK(t->senders & from);
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_agent_frame_check(from, f, &e) == 0);

    /* it re-encodes to the bytes it came from */
    size_t n = CRL_AGENT_HEADER_SIZE + f->len;
    CHECK(n <= wire_len);
    uint8_t *buf = malloc(n);
    CHECK(buf);
    CHECK(crl_agent_encode(from, buf, n, f->type, f->stream, f->payload, f->len, &e) == (long)n);
    CHECK(memcmp(buf, wire, n) == 0);
    free(buf);

    if (!deep)
        return;
    struct crl_agent_window *w = &win[f->stream % WINDOWS];
    if (f->type == CRL_AGENT_CREDIT) {
        if (crl_agent_window_credit(w, f, &e) < 0)
            check_refusal(&e);
    } else if (crl_agent_window_received(w, f, &e) < 0) {
        check_refusal(&e);
        /* a receiver that goes on would grant more */
        if (crl_agent_window_grant(w, f->len, &e) < 0)
            check_refusal(&e);
    }
    CHECK(w->send <= CRL_AGENT_MAX_WINDOW && w->recv <= CRL_AGENT_MAX_WINDOW);
    if (t->payload == CRL_AGENT_P_JSON)
        fuzz_json(f->type, f->payload, f->len);
}

/* Decode the stream s (n bytes) on `side`, in chunks from `seed` (0: all
 * at once), checking every frame. */
static void decode(enum crl_agent_side side, const uint8_t *s, size_t n, uint32_t seed, bool deep,
                   struct outcome *o)
{
    struct crl_agent_dec d;
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_agent_dec_init(&d, side, &e) == 0);
    struct crl_agent_window win[WINDOWS];
    /* windows of 4 KiB, not 256: an overrun within the inputs' 8 KiB */
    for (int i = 0; i < WINDOWS; i++) {
        crl_agent_window_init(&win[i]);
        win[i].recv = 4096;
    }
    memset(o, 0, sizeof(*o));
    o->digest = 0xcbf29ce484222325ull;
    size_t fed = 0, used = 0; /* bytes fed; bytes of the frames returned */
    uint32_t rng = seed | 1;
    int r = 0;
    while (r >= 0) {
        size_t chunk = n - fed;
        if (seed && chunk > 0)
            chunk = 1 + next_rand(&rng) % (chunk < 64 ? chunk : 64);
        size_t took = crl_agent_dec_feed(&d, s + fed, chunk);
        CHECK(took <= chunk);
        fed += took;
        CHECK(crl_agent_dec_pending(&d) <= CRL_AGENT_HEADER_SIZE + CRL_AGENT_MAX_PAYLOAD);
        struct crl_agent_frame f;
        while ((r = crl_agent_dec_next(&d, &f, &e)) == 1) {
            check_frame(side, &f, s + used, n - used, deep, win);
            used += CRL_AGENT_HEADER_SIZE + f.len;
            o->frames++;
            digest(&o->digest, &f.type, sizeof(f.type));
            digest(&o->digest, &f.stream, sizeof(f.stream));
            digest(&o->digest, &f.len, sizeof(f.len));
            digest(&o->digest, f.payload, f.len);
        }
        CHECK(used <= fed);
        if (r == 0 && fed == n)
            break;
    }
    o->last = r;
    if (r < 0) {
        check_refusal(&e);
        memcpy(o->msg, e.msg, sizeof(o->msg));
        /* failed for good: the same error, whatever comes */
        struct crl_err again = CRL_ERR_INIT;
        struct crl_agent_frame f;
        CHECK(crl_agent_dec_feed(&d, s, n) == n);
        CHECK(crl_agent_dec_pending(&d) == 0);
        CHECK(crl_agent_dec_next(&d, &f, &again) == -1);
        CHECK(strcmp(again.msg, e.msg) == 0);
    } else {
        CHECK(crl_agent_dec_pending(&d) == n - used);
    }
    crl_agent_dec_free(&d);
}

/* The host's session over the stream s (n bytes), in chunks from seed;
 * how many frames it passed. */
static unsigned session(const uint8_t *s, size_t n, uint32_t seed)
{
    struct crl_agent_host h;
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_agent_host_init(&h, &e) == 0);
    uint32_t ids[3];
    CHECK(crl_agent_host_open(&h, CRL_AGENT_STREAM_EXEC, &ids[0], &e) == 0);
    CHECK(crl_agent_host_open(&h, CRL_AGENT_STREAM_GET, &ids[1], &e) == 0);
    CHECK(crl_agent_host_open(&h, CRL_AGENT_STREAM_PUT, &ids[2], &e) == 0);
    crl_agent_host_config_sent(&h);
    size_t fed = 0;
    uint32_t rng = seed | 1;
    unsigned frames = 0;
    int r = 0;
    while (r >= 0) {
        size_t chunk = n - fed;
        if (chunk > 0)
            chunk = 1 + next_rand(&rng) % (chunk < 64 ? chunk : 64);
        fed += crl_agent_host_feed(&h, s + fed, chunk);
        struct crl_agent_frame f;
        size_t open_before = h.n_streams;
        while ((r = crl_agent_host_next(&h, &f, &e)) == 1) {
            frames++;
            CHECK(f.stream == 0 || f.stream < h.next_id);
            CHECK(h.n_streams <= open_before);
            open_before = h.n_streams;
        }
        if (r == 0 && fed == n)
            break;
    }
    if (r < 0) {
        check_refusal(&e);
        struct crl_err again = CRL_ERR_INIT;
        struct crl_agent_frame f;
        CHECK(crl_agent_host_next(&h, &f, &again) == -1 && strcmp(again.msg, e.msg) == 0);
    }
    crl_agent_host_free(&h);
    return frames;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    /* A heap copy of exactly the input, so a read past its end is caught. */
    size_t len = size - 2;
    uint8_t *p = malloc(len ? len : 1);
    if (!p)
        return 0;
    memcpy(p, data + 2, len);
    if (data[0] >= 0x80) {
        for (uint32_t t = 1; t <= CRL_AGENT__TYPE_MAX; t++)
            fuzz_json(t, p, len);
    } else {
        uint32_t seed = data[1] ? data[1] : 1;
        for (int s = CRL_AGENT_SIDE_HOST; s <= CRL_AGENT_SIDE_GUEST; s++) {
            struct outcome chunked, whole;
            decode((enum crl_agent_side)s, p, len, seed, true, &chunked);
            decode((enum crl_agent_side)s, p, len, 0, false, &whole);
            CHECK(chunked.frames == whole.frames && chunked.digest == whole.digest);
            CHECK(chunked.last == whole.last && strcmp(chunked.msg, whole.msg) == 0);
            if (s == CRL_AGENT_SIDE_HOST)
                CHECK(session(p, len, seed) <= whole.frames);
        }
    }
    free(p);
    return 0;
}
