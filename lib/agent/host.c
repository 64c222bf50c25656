#include "host.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int crl_agent_host_init(struct crl_agent_host *h, struct crl_err *err)
{
    memset(h, 0, sizeof(*h));
    h->next_id = 1;
    return crl_agent_dec_init(&h->dec, CRL_AGENT_SIDE_HOST, err);
}

void crl_agent_host_free(struct crl_agent_host *h)
{
    crl_agent_dec_free(&h->dec);
    free(h->streams);
    h->streams = NULL;
    h->n_streams = h->cap_streams = 0;
}

size_t crl_agent_host_feed(struct crl_agent_host *h, const void *data, size_t len)
{
    return crl_agent_dec_feed(&h->dec, data, len);
}

void crl_agent_host_takeover(struct crl_agent_host *h, const struct crl_agent_hello *known)
{
    h->hello = *known;
    h->hello_seen = true;
    h->hello_optional = true;
}

void crl_agent_host_config_sent(struct crl_agent_host *h)
{
    h->configs_unanswered++;
}

int crl_agent_host_open(struct crl_agent_host *h, enum crl_agent_stream_kind kind, uint32_t *id,
                        struct crl_err *err)
{
    if (h->n_streams == h->cap_streams) {
        size_t cap = h->cap_streams ? 2 * h->cap_streams : 8;
        struct crl_agent_host_stream *s = realloc(h->streams, cap * sizeof(*s));
        if (!s)
            return crl_err_sys(err, ENOMEM, "agent session: a stream");
        h->streams = s;
        h->cap_streams = cap;
    }
    struct crl_agent_host_stream *s = &h->streams[h->n_streams++];
    memset(s, 0, sizeof(*s));
    s->id = h->next_id++;
    s->kind = kind;
    crl_agent_window_init(&s->win);
    *id = s->id;
    return 0;
}

struct crl_agent_host_stream *crl_agent_host_stream(struct crl_agent_host *h, uint32_t id)
{
    for (size_t i = 0; i < h->n_streams; i++)
        if (h->streams[i].id == id)
            return &h->streams[i];
    return NULL;
}

void crl_agent_host_close(struct crl_agent_host *h, uint32_t id)
{
    struct crl_agent_host_stream *s = crl_agent_host_stream(h, id);
    if (s)
        *s = h->streams[--h->n_streams];
}

static int fail(struct crl_agent_host *h, struct crl_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct crl_agent_host *h, struct crl_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->msg, sizeof(h->msg), fmt, ap);
    va_end(ap);
    h->failed = true;
    return crl_err_set(err, CRL_E_INVALID, "%s", h->msg);
}

/* Does a frame of this type belong on a stream of this kind? */
static bool fits(enum crl_agent_stream_kind kind, uint16_t type)
{
    switch (type) {
    case CRL_AGENT_STARTED:
    case CRL_AGENT_STDOUT:
    case CRL_AGENT_STDERR:
    case CRL_AGENT_EXIT: return kind == CRL_AGENT_STREAM_EXEC;
    case CRL_AGENT_DATA: return kind == CRL_AGENT_STREAM_GET;
    case CRL_AGENT_RESULT: return kind != CRL_AGENT_STREAM_EXEC;
    case CRL_AGENT_CREDIT: return kind != CRL_AGENT_STREAM_GET;
    case CRL_AGENT_ERROR: return true;
    default: return false;
    }
}

static const char *kind_name(enum crl_agent_stream_kind kind)
{
    return kind == CRL_AGENT_STREAM_EXEC  ? "an exec's"
           : kind == CRL_AGENT_STREAM_GET ? "a FILE_GET's"
                                          : "a FILE_PUT's";
}

/* 1: the frame stands; 0: skip it (a closed stream's); -1: failed. */
static int check(struct crl_agent_host *h, const struct crl_agent_frame *f, struct crl_err *err)
{
    char tn[16];
    const char *name = crl_agent_type_name(f->type, tn, sizeof(tn));
    struct crl_err e = CRL_ERR_INIT;
    if (!h->hello_seen) {
        if (f->type != CRL_AGENT_HELLO)
            return fail(h, err, "%s before HELLO", name);
        if (crl_agent_parse_hello(f->payload, f->len, &h->hello, &e) < 0)
            return fail(h, err, "%s", e.msg);
        h->hello_seen = true;
        return 1;
    }
    if (f->stream == 0) {
        if (f->type == CRL_AGENT_HELLO && h->hello_optional) {
            /* the guest saw its new host: it greets it, and keeps its state */
            h->hello_optional = false;
            if (crl_agent_parse_hello(f->payload, f->len, &h->hello, &e) < 0)
                return fail(h, err, "%s", e.msg);
            return 1;
        }
        if (f->type == CRL_AGENT_HELLO)
            return fail(h, err, "a second HELLO");
        if (f->type == CRL_AGENT_READY) {
            if (h->configs_unanswered == 0)
                return fail(h, err, "READY without a CONFIG");
            h->configs_unanswered--;
        }
        return 1;
    }
    struct crl_agent_host_stream *s = crl_agent_host_stream(h, f->stream);
    if (!s) {
        if (f->stream < h->next_id)
            return 0; /* the host closed it: in flight */
        return fail(h, err, "%s on stream %u, which the host never opened", name, f->stream);
    }
    if (!fits(s->kind, f->type))
        return fail(h, err, "%s on stream %u, %s stream", name, f->stream, kind_name(s->kind));
    if (s->data_ended && f->type != CRL_AGENT_RESULT && f->type != CRL_AGENT_ERROR)
        return fail(h, err, "%s on stream %u after its DATA ended", name, f->stream);
    if (crl_agent_window_received(&s->win, f, &e) < 0 ||
        (f->type == CRL_AGENT_CREDIT && crl_agent_window_credit(&s->win, f, &e) < 0))
        return fail(h, err, "stream %u: %s", f->stream, e.msg);
    if (f->type == CRL_AGENT_DATA && f->len == 0)
        s->data_ended = true;
    if (f->type == CRL_AGENT_EXIT || f->type == CRL_AGENT_RESULT || f->type == CRL_AGENT_ERROR)
        crl_agent_host_close(h, f->stream);
    return 1;
}

int crl_agent_host_next(struct crl_agent_host *h, struct crl_agent_frame *f, struct crl_err *err)
{
    if (h->failed)
        return crl_err_set(err, CRL_E_INVALID, "%s", h->msg);
    for (;;) {
        int r = crl_agent_dec_next(&h->dec, f, err);
        if (r <= 0)
            return r;
        r = check(h, f, err);
        if (r != 0)
            return r;
    }
}
