/* Requests passed on to another host of the cluster (proxy.h). */
#include "proxy.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/fdio.h"
#include "../util/log.h"
#include "cluster.h"
#include "request.h"
#include "routes.h"

#define HEAD_MAX (64u << 10)  /* an answer's head, as the thread writes it */
#define WHOLE_MAX (16u << 20) /* an answer of known length up to this is held whole */
#define READAHEAD (1u << 20)  /* stop reading the answer while this much waits */

/* What the thread and the loop share: freed by whichever lets go last. */
struct job {
    atomic_int refs;
    atomic_bool cancelled;
    atomic_bool broken; /* the transfer failed after the head was passed on */
    char url[4096];
    char method[16];
    struct curl_slist *headers;
    char *body; /* held whole, or NULL: read from body_r (or none: no_body) */
    size_t body_len, body_off;
    bool no_body;
    int body_r, resp_w;
    /* the thread's: the answer's head as it comes */
    CURL *curl;
    long status;
    char head[HEAD_MAX];
    size_t head_len;
    bool head_sent;
    char curl_err[CURL_ERROR_SIZE];
};

/* The loop's: r->state of a forwarded request. */
struct proxy {
    struct job *job;
    char host[32];
    int body_w, resp_r;
    struct crl_watch w_body, w_resp;
    struct crl_buf in; /* the head while it comes, then an answer held whole */
    bool head_done, whole;
    size_t length; /* an answer held whole: its Content-Length */
    unsigned status;
    crl_proxy_head_cb head_cb;
    /* an answer held whole, until its end: its head's headers */
    char type[256];
    char hdrs[HEAD_MAX]; /* "name\0value\0" ... */
    size_t hdrs_len;
};

static void job_put(struct job *j)
{
    if (atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    curl_slist_free_all(j->headers);
    free(j->body);
    if (j->body_r >= 0)
        close(j->body_r);
    if (j->resp_w >= 0)
        close(j->resp_w);
    free(j);
}

/* ---- the thread ---- */

static size_t read_body(char *buf, size_t size, size_t n, void *ctx)
{
    struct job *j = ctx;
    size_t want = size * n;
    if (atomic_load(&j->cancelled))
        return CURL_READFUNC_ABORT;
    if (j->body) {
        size_t left = j->body_len - j->body_off;
        size_t k = left < want ? left : want;
        memcpy(buf, j->body + j->body_off, k);
        j->body_off += k;
        return k;
    }
    for (;;) {
        ssize_t got = read(j->body_r, buf, want);
        if (got >= 0)
            return (size_t)got;
        if (errno != EINTR)
            return CURL_READFUNC_ABORT;
    }
}

/* The head, once, before the first byte of the body (or at the end). */
static int send_head(struct job *j)
{
    if (j->head_sent)
        return 0;
    j->head_sent = true;
    char line[32];
    int n = snprintf(line, sizeof(line), "%ld\n", j->status);
    if (crl_write_full(j->resp_w, line, (size_t)n) < 0 ||
        crl_write_full(j->resp_w, j->head, j->head_len) < 0 ||
        crl_write_full(j->resp_w, "\n", 1) < 0)
        return -1;
    return 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    struct job *j = ctx;
    size_t len = size * n;
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        j->head_len = 0; /* a new answer (after a 100 Continue) */
        return len;
    }
    while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
        len--;
    if (!len)
        return size * n;
    if (j->head_len + len + 1 > sizeof(j->head))
        return 0; /* a head this large is not another corrald's */
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)data[i] < 0x20 && data[i] != '\t') || data[i] == 0x7f)
            return 0; /* a control byte (a NUL, a bare CR): not a header */
    memcpy(j->head + j->head_len, data, len);
    j->head_len += len;
    j->head[j->head_len++] = '\n';
    return size * n;
}

static size_t on_data(char *data, size_t size, size_t n, void *ctx)
{
    struct job *j = ctx;
    if (atomic_load(&j->cancelled))
        return 0;
    if (!j->head_sent) /* curl has the status once the head is in */
        curl_easy_getinfo(j->curl, CURLINFO_RESPONSE_CODE, &j->status);
    if (send_head(j) < 0 || crl_write_full(j->resp_w, data, size * n) < 0)
        return 0;
    return size * n;
}

static int on_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct job *j = ctx;
    (void)a, (void)b, (void)c, (void)d;
    return atomic_load(&j->cancelled) ? 1 : 0;
}

static void *run(void *arg)
{
    struct job *j = arg;
    CURL *c = j->curl = curl_easy_init();
    CURLcode rc = CURLE_FAILED_INIT;
    if (c) {
        curl_easy_setopt(c, CURLOPT_URL, j->url);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, j->method);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, j->headers);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, j);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, j);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, j);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, j->curl_err);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
        if (!j->no_body) {
            curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
            curl_easy_setopt(c, CURLOPT_READDATA, j);
            if (j->body)
                curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)j->body_len);
        }
        rc = curl_easy_perform(c);
        if (rc == CURLE_OK && !j->head_sent) {
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &j->status);
            send_head(j);
        }
        curl_easy_cleanup(c);
    }
    if (rc != CURLE_OK && !j->head_sent && !atomic_load(&j->cancelled)) {
        /* Nothing came: the loop answers 502 with why. */
        char why[CURL_ERROR_SIZE + 64];
        int n = snprintf(why, sizeof(why), "0\n%s\n\n",
                         j->curl_err[0] ? j->curl_err : curl_easy_strerror(rc));
        for (int i = 2; i < n - 2; i++)
            if (why[i] == '\n')
                why[i] = ' ';
        crl_write_full(j->resp_w, why, (size_t)n);
    }
    if (rc != CURLE_OK && j->head_sent)
        atomic_store(&j->broken, true); /* before the close the loop sees */
    close(j->resp_w);
    j->resp_w = -1;
    job_put(j);
    return NULL;
}

/* ---- the loop ---- */

static void proxy_stop(struct crl_req *r)
{
    struct proxy *p = r->state;
    struct crl_loop *loop = r->api->host->loop;
    if (p->w_body.active)
        crl_watch_stop(loop, &p->w_body);
    if (p->w_resp.active)
        crl_watch_stop(loop, &p->w_resp);
    if (p->body_w >= 0)
        close(p->body_w);
    if (p->resp_r >= 0)
        close(p->resp_r);
    p->body_w = p->resp_r = -1;
    if (p->job) {
        atomic_store(&p->job->cancelled, true);
        job_put(p->job);
        p->job = NULL;
    }
}

static void proxy_cancel(struct crl_req *r)
{
    if (r->state)
        proxy_stop(r);
}

static void proxy_free(struct crl_req *r)
{
    struct proxy *p = r->state;
    if (!p)
        return;
    proxy_stop(r);
    crl_buf_free(&p->in);
    free(p);
    r->state = NULL;
}

/* The other host failed us: a 503 that says how (or, mid-stream, a cut). */
static void bad_gateway(struct crl_req *r, const char *what, const char *detail)
{
    struct proxy *p = r->state;
    struct crl_err err = CRL_ERR_INIT;
    crl_err_set(&err, CRL_E_UNAVAILABLE, "host %s %s%s%s%s", p->host, what, detail ? " (" : "",
                detail ? detail : "", detail ? ")" : "");
    crl_warn(NULL, "%s %s: %s", r->method, r->url, err.msg);
    proxy_stop(r);
    if (!r->resp && !r->streaming)
        crl_req_error(r, &err);
    else
        crl_req_stream_end(r, true);
}

static bool hop_by_hop(const char *name, size_t len)
{
    static const char *const skip[] = {"Content-Length", "Transfer-Encoding", "Connection",
                                       "Keep-Alive", "Date"};
    for (size_t i = 0; i < sizeof(skip) / sizeof(*skip); i++)
        if (strlen(skip[i]) == len && strncasecmp(skip[i], name, len) == 0)
            return true;
    return false;
}

#define HEADER_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

static struct MHD_Response *with_headers(struct crl_req *r, struct MHD_Response *resp)
{
    struct proxy *p = r->state;
    if (r->placement[0])
        MHD_add_response_header(resp, "X-Corral-Placement", r->placement);
    for (size_t off = 0; off < p->hdrs_len;) {
        const char *name = p->hdrs + off, *v = name + strlen(name) + 1;
        MHD_add_response_header(resp, name, v);
        off += strlen(name) + strlen(v) + 2;
    }
    return resp;
}

/* The forwarder dropped the answer: its endpoint runs again and decides
 * anew (a create is offered to the next host). */
static void rerun(struct crl_req *r)
{
    proxy_free(r);
    r->h = crl_routes_handler(r->route.entry);
    r->h->run(r);
}

/* The answer is unusable (the host is unreachable, or answered garbage):
 * whoever forwarded it may try elsewhere (a create's next host), else it
 * is a 503 that says so. */
static void failed(struct crl_req *r, const char *what, const char *detail)
{
    struct proxy *p = r->state;
    if (p->head_cb && !p->head_done && !p->head_cb(r, 502, p->host)) {
        crl_warn(NULL, "%s %s: host %s %s%s%s%s; trying elsewhere", r->method, r->url, p->host,
                 what, detail ? " (" : "", detail ? detail : "", detail ? ")" : "");
        rerun(r);
        return;
    }
    bad_gateway(r, what, detail);
}

/* The head is in p->in up to its blank line at `end`: check it all, then
 * answer with it (whole, or streamed). */
static int take_head(struct crl_req *r, size_t end)
{
    struct proxy *p = r->state;
    char *s = p->in.data;
    s[end] = 0;
    char *nl = strchr(s, '\n');
    if (!nl) {
        failed(r, "answered with a bad status", NULL);
        return -1;
    }
    *nl = 0;
    char *e;
    long status = strtol(s, &e, 10);
    if (status == 0 && *e == 0) {
        nl[1 + strcspn(nl + 1, "\n")] = 0; /* the thread's one line of why */
        failed(r, "is unreachable", nl + 1);
        return -1;
    }
    if (*e || status < 100 || status > 599) {
        failed(r, "answered with a bad status", NULL);
        return -1;
    }
    long long length = -1;
    snprintf(p->type, sizeof(p->type), "application/octet-stream");
    p->hdrs_len = 0;
    for (char *line = nl + 1; *line;) {
        char *next = strchr(line, '\n');
        if (!next) { /* the thread ends every line; a NUL in one would cut it */
            failed(r, "answered with a malformed header", NULL);
            return -1;
        }
        *next = 0;
        char *colon = strchr(line, ':');
        size_t nlen = colon ? (size_t)(colon - line) : 0;
        if (!nlen || strspn(line, HEADER_NAME_CHARS) != nlen) {
            failed(r, "answered with a malformed header", NULL);
            return -1;
        }
        *colon = 0;
        char *v = colon + 1;
        v += strspn(v, " \t");
        for (char *c = v; *c; c++)
            if ((unsigned char)*c < 0x20 && *c != '\t') {
                failed(r, "answered with a control byte in a header", NULL);
                return -1;
            }
        if (strcasecmp(line, "Content-Length") == 0)
            length = strtoll(v, NULL, 10);
        else if (strcasecmp(line, "Content-Type") == 0)
            snprintf(p->type, sizeof(p->type), "%s", v);
        else if (!hop_by_hop(line, nlen)) {
            size_t vlen = strlen(v);
            if (p->hdrs_len + nlen + vlen + 2 <= sizeof(p->hdrs)) {
                memcpy(p->hdrs + p->hdrs_len, line, nlen + 1);
                memcpy(p->hdrs + p->hdrs_len + nlen + 1, v, vlen + 1);
                p->hdrs_len += nlen + vlen + 2;
            }
        }
        line = next + 1;
    }
    if (p->head_cb && !p->head_cb(r, (unsigned)status, p->host)) {
        rerun(r);
        return -1;
    }
    p->status = (unsigned)status;
    size_t rest = p->in.len - end - 1;
    memmove(p->in.data, p->in.data + end + 1, rest);
    p->in.len = rest;
    p->head_done = true;
    p->whole = length >= 0 && length <= (long long)WHOLE_MAX;
    p->length = p->whole ? (size_t)length : 0;
    if (!p->whole) {
        crl_req_respond(r, p->status, with_headers(r, crl_req_stream_response(r, p->type)));
        if (rest)
            crl_req_stream_append(r, p->in.data, rest);
        p->in.len = 0;
    }
    return 0;
}

/* The whole answer is in: respond with it. */
static void answer_whole(struct crl_req *r)
{
    struct proxy *p = r->state;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(p->in.len, p->in.data, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(resp, "Content-Type", p->type);
    crl_req_respond(r, p->status, with_headers(r, resp));
}

static void resp_readable(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    struct proxy *p = r->state;
    char buf[65536];
    (void)ev;
    for (;;) {
        if (p->head_done && !p->whole && r->out.len >= READAHEAD) {
            crl_watch_modify(r->api->host->loop, &p->w_resp, 0);
            return;
        }
        ssize_t n = read(p->resp_r, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            if (!p->head_done) {
                failed(r, "closed the connection without an answer", NULL);
                return;
            }
            if (atomic_load(&p->job->broken) || (p->whole && p->in.len != p->length)) {
                bad_gateway(r, "broke off its answer", NULL);
                return;
            }
            bool whole = p->whole;
            proxy_stop(r);
            if (whole)
                answer_whole(r);
            else
                crl_req_stream_end(r, false);
            return;
        }
        if (p->head_done && !p->whole) {
            crl_req_stream_append(r, buf, (size_t)n);
            continue;
        }
        /* the head (and what of the body came with it), or a whole answer */
        size_t cap = p->head_done ? p->length : HEAD_MAX + 64 + sizeof(buf);
        if (p->in.len + (size_t)n > cap || crl_buf_append(&p->in, buf, (size_t)n) < 0) {
            bad_gateway(r, "answered more than it said it would", NULL);
            return;
        }
        if (!p->head_done) {
            char *blank = memmem(p->in.data, p->in.len, "\n\n", 2);
            if (!blank && p->in.len > HEAD_MAX + 32) {
                failed(r, "answered a head too large", NULL);
                return;
            }
            if (blank && take_head(r, (size_t)(blank - p->in.data) + 1) < 0)
                return;
        }
    }
}

static void proxy_drained(struct crl_req *r)
{
    struct proxy *p = r->state;
    if (p && p->w_resp.active && r->out.len < READAHEAD / 2)
        crl_watch_modify(r->api->host->loop, &p->w_resp, EPOLLIN);
}

/* ---- the request's body, streamed (a sandbox's owner's) ---- */

static bool proxy_begin(struct crl_req *r)
{
    (void)r;
    return true; /* every body streams through */
}

static int proxy_body(struct crl_req *r, const char *data, size_t *len)
{
    struct proxy *p = r->state;
    if (p->body_w < 0) {
        *len = 0; /* the other host is done with it (it answered, or failed) */
        return 0;
    }
    int rc = crl_req_pipe_body(r, p->body_w, &p->w_body, NULL, data, len);
    if (rc < 0) {
        *len = 0;
        close(p->body_w);
        p->body_w = -1;
        return 0;
    }
    return rc > 0 ? -1 : 0;
}

static void proxy_run(struct crl_req *r)
{
    struct proxy *p = r->state;
    if (p->body_w >= 0) { /* the body is all in */
        if (p->w_body.active)
            crl_watch_stop(r->api->host->loop, &p->w_body);
        close(p->body_w);
        p->body_w = -1;
    }
}

static const struct crl_handler proxy_handler = {
    .run = proxy_run,
    .begin = proxy_begin,
    .body = proxy_body,
    .drained = proxy_drained,
    .cancel = proxy_cancel,
    .free = proxy_free,
};

/* ---- starting one ---- */

/* The query again, as MHD decoded it (curl_easy_escape needs no handle). */
static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    struct crl_buf *q = cls;
    (void)kind;
    char *k = curl_easy_escape(NULL, key, 0), *v = value ? curl_easy_escape(NULL, value, 0) : NULL;
    crl_buf_printf(q, "%c%s%s%s", q->len ? '&' : '?', k ? k : "", v ? "=" : "", v ? v : "");
    curl_free(k);
    curl_free(v);
    return MHD_YES;
}

struct header_walk {
    struct curl_slist **list;
};

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    struct header_walk *w = cls;
    static const char *const own[] = {
        "Host",       "Authorization",        "Content-Length", "Expect", "Transfer-Encoding",
        "Connection", CRL_PROXY_FORWARDED_BY, CRL_PROXY_PLACED};
    (void)kind;
    for (size_t i = 0; i < sizeof(own) / sizeof(*own); i++)
        if (strcasecmp(key, own[i]) == 0)
            return MHD_YES;
    char line[8192];
    snprintf(line, sizeof(line), "%s: %s", key, value ? value : "");
    *w->list = curl_slist_append(*w->list, line);
    return MHD_YES;
}

/* Start the thread for r to host_id at addr: the body held whole (body,
 * len), or streamed in as it comes (streamed), or none. */
static int start(struct crl_req *r, const char *host_id, const char *addr, const char *body,
                 size_t len, bool streamed, bool placed, crl_proxy_head_cb head,
                 struct crl_err *err)
{
    struct proxy *p = calloc(1, sizeof(*p));
    struct job *j = calloc(1, sizeof(*j));
    int bp[2] = {-1, -1}, rp[2] = {-1, -1};
    if (!p || !j || pipe2(rp, O_CLOEXEC) < 0 || (streamed && pipe2(bp, O_CLOEXEC) < 0)) {
        crl_err_sys(err, errno ? errno : ENOMEM, "forwarding to host %s", host_id);
        goto fail;
    }
    atomic_init(&j->refs, 2);
    atomic_init(&j->cancelled, false);
    atomic_init(&j->broken, false);
    snprintf(p->host, sizeof(p->host), "%s", host_id);
    p->head_cb = head;
    crl_buf_init(&p->in, CRL_BUF_UNBOUNDED);
    j->resp_w = rp[1];
    j->body_r = bp[0];
    p->resp_r = rp[0];
    p->body_w = bp[1];
    crl_set_nonblock(p->resp_r, 1);
    if (p->body_w >= 0)
        crl_set_nonblock(p->body_w, 1);
    snprintf(j->method, sizeof(j->method), "%s", r->method);
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Transfer-Encoding");
    if (body) {
        if (len && !(j->body = malloc(len))) {
            crl_err_sys(err, ENOMEM, "forwarding to host %s", host_id);
            goto fail;
        }
        if (len)
            memcpy(j->body, body, len);
        j->body_len = len;
        if (!len && !cl)
            j->no_body = true;
    } else {
        j->no_body = !(cl && strcmp(cl, "0") != 0) && !te;
    }
    struct crl_buf q;
    crl_buf_init(&q, CRL_BUF_UNBOUNDED);
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, add_arg, &q);
    int n = snprintf(j->url, sizeof(j->url), "%s%s%s", addr, r->path, q.len ? q.data : "");
    crl_buf_free(&q);
    if (n >= (int)sizeof(j->url)) {
        crl_err_set(err, CRL_E_INVALID, "the request's path and query are too long to forward");
        goto fail;
    }
    struct header_walk hw = {&j->headers};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, &hw);
    char line[4200];
    snprintf(line, sizeof(line), "Authorization: Bearer %s", r->api->token ? r->api->token : "");
    j->headers = curl_slist_append(j->headers, line);
    snprintf(line, sizeof(line), CRL_PROXY_FORWARDED_BY ": %s", r->api->host->cfg.host_id);
    j->headers = curl_slist_append(j->headers, line);
    if (placed)
        j->headers = curl_slist_append(j->headers, CRL_PROXY_PLACED ": 1");
    j->headers = curl_slist_append(j->headers, "Expect:");
    if (!j->no_body && !j->body)
        j->headers = curl_slist_append(j->headers, "Transfer-Encoding: chunked");
    if (crl_watch_start(r->api->host->loop, &p->w_resp, p->resp_r, EPOLLIN, resp_readable, r) < 0) {
        crl_err_sys(err, errno, "forwarding to host %s", host_id);
        goto fail;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 << 10);
    int rc = pthread_create(&t, &attr, run, j);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        crl_err_sys(err, rc, "a thread to forward to host %s", host_id);
        goto fail;
    }
    p->job = j;
    r->state = p;
    r->h = &proxy_handler;
    crl_debug(NULL, "%s %s: forwarded to host %s", r->method, r->url, host_id);
    return 0;
fail:
    if (p && p->w_resp.active)
        crl_watch_stop(r->api->host->loop, &p->w_resp);
    if (p && p->w_body.active)
        crl_watch_stop(r->api->host->loop, &p->w_body);
    for (int i = 0; i < 2; i++) {
        if (rp[i] >= 0)
            close(rp[i]);
        if (bp[i] >= 0)
            close(bp[i]);
    }
    if (j) {
        curl_slist_free_all(j->headers);
        free(j->body);
    }
    if (p)
        crl_buf_free(&p->in);
    free(j);
    free(p);
    return -1;
}

int crl_proxy_forward(struct crl_req *r, const char *host_id, const char *addr, const char *body,
                      size_t len, crl_proxy_head_cb head, struct crl_err *err)
{
    if (r->h && r->h->free)
        r->h->free(r); /* the endpoint's own state goes: the proxy's replaces it */
    r->state = NULL;
    if (start(r, host_id, addr, body ? body : "", len, false, true, head, err) < 0)
        return -1;
    crl_req_suspend(r);
    return 0;
}

bool crl_proxy_route(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (!r->api->cluster || !r->route.id[0])
        return false;
    char host[32], addr[CRL_MEMBER_ADDR_MAX];
    int owner = crl_cluster_owner(r->api->cluster, r->route.id, host, sizeof(host), addr,
                                  sizeof(addr), &err);
    if (owner == 0)
        return false;
    if (owner > 0 && MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, CRL_PROXY_FORWARDED_BY))
        crl_err_set(&err, CRL_E_NOT_FOUND,
                    "sandbox %s is not on host %s, which host %s forwarded it to", r->route.id,
                    r->api->host->cfg.host_id,
                    MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, CRL_PROXY_FORWARDED_BY));
    else if (owner > 0 && MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Upgrade"))
        crl_err_set(&err, CRL_E_UNSUPPORTED,
                    "sandbox %s is on host %s: open a tunnel or an attach at %s itself",
                    r->route.id, host, addr);
    else if (owner > 0 && start(r, host, addr, NULL, 0, true, false, NULL, &err) == 0)
        return true;
    if (err.code == CRL_E_CONFLICT && r->route.ep == CRL_EP_SANDBOX &&
        strcmp(r->method, "GET") == 0) {
        /* A lost host's sandbox: reported as lost, on every host. */
        crl_req_json(r, 200,
                     json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", r->route.id, "state", "lost",
                               "lost_reason", "host_lost", "host", host, "reason", err.msg,
                               "message", err.msg));
        return true;
    }
    crl_req_error(r, &err);
    return true;
}
