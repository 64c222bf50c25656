#include "client.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <netdb.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"

#define ERROR_BODY_MAX (64u << 10) /* an error answer is a small JSON object */
#define LINE_MAX_BYTES (64u << 20)
#define CONNECT_TIMEOUT_S 10L

struct crl_client {
    CURL *curl;
    char *url;       /* as given, for messages */
    char *base;      /* what paths are appended to */
    char *unix_path; /* NULL over TCP */
    char *auth;      /* "Authorization: Bearer ..." or NULL */
    volatile sig_atomic_t *cancel;
    bool cancelled;
    long last_status; /* of the last request's answer, 0 if none came */
    bool verbose; /* $CORRAL_DEBUG: curl's trace on stderr (headers, never bodies or the token) */
    char curl_err[CURL_ERROR_SIZE];
};

/* One transfer: what the callbacks collect and where they send it. */
struct xfer {
    struct crl_client *c;
    long status;
    char kind[16]; /* X-Corral-Kind */
    int mode;      /* X-Corral-Mode, or -1 */
    struct crl_buf body;
    /* NDJSON */
    crl_client_line_fn on_line;
    void *line_ctx;
    /* download */
    crl_client_sink_fn sink;
    void *sink_ctx;
    int sink_fd;
    bool sink_began;
    /* upload */
    crl_client_source_fn source;
    void *source_ctx;
    /* a callback's own error, reported instead of curl's */
    bool cb_failed;
    struct crl_err cb_err;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void xfer_init(struct xfer *x, struct crl_client *c)
{
    memset(x, 0, sizeof(*x));
    x->c = c;
    x->sink_fd = -1;
    x->mode = -1;
    crl_buf_init(&x->body, CRL_BUF_UNBOUNDED);
}

static bool ok_status(long s)
{
    return s >= 200 && s < 300;
}

/* ---- open / close ---- */

static int parse_url(struct crl_client *c, const char *url, struct crl_err *err)
{
    if (strncmp(url, "unix://", 7) == 0) {
        const char *p = url + 7;
        if (p[0] != '/')
            return crl_err_set(err, CRL_E_INVALID,
                               "'%s': a unix URL names an absolute socket path, as in "
                               "unix:///run/corral/corrald.sock",
                               url);
        if (strlen(p) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return crl_err_set(err, CRL_E_INVALID, "'%s': the socket path is too long", url);
        c->unix_path = strdup(p);
        c->base = strdup("http://localhost");
    } else if (strncmp(url, "http://", 7) == 0) {
        const char *host = url + 7;
        size_t n = strlen(url);
        while (n > 7 && url[n - 1] == '/')
            n--;
        if (n == 7 || strcspn(host, "/?#@ ") < (size_t)(url + n - host))
            return crl_err_set(err, CRL_E_INVALID,
                               "'%s': an http URL is http://HOST:PORT, without a path", url);
        c->base = strndup(url, n);
    } else {
        return crl_err_set(err, CRL_E_INVALID,
                           "'%s' is not a corrald URL: use unix:///path/to/corrald.sock or "
                           "http://127.0.0.1:PORT",
                           url);
    }
    if (!c->base || (strncmp(url, "unix://", 7) == 0 && !c->unix_path))
        return crl_err_sys(err, ENOMEM, "parsing the URL");
    return 0;
}

int crl_client_open(const char *url, const char *token, struct crl_client **out,
                    struct crl_err *err)
{
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return crl_err_set(err, CRL_E_INTERNAL, "libcurl: %s", curl_easy_strerror(global_rc));
    if (!url)
        url = getenv("CORRAL_URL");
    if (!url || !*url)
        url = CRL_CLIENT_DEFAULT_URL;
    if (!token)
        token = getenv("CORRAL_TOKEN");
    if (token && strpbrk(token, "\r\n"))
        return crl_err_set(err, CRL_E_INVALID, "the token must be one line");

    struct crl_client *c = calloc(1, sizeof(*c));
    if (!c)
        return crl_err_sys(err, ENOMEM, "allocating a client");
    if (parse_url(c, url, err) < 0)
        goto fail;
    c->url = strdup(url);
    c->curl = curl_easy_init();
    c->verbose = getenv("CORRAL_DEBUG") && *getenv("CORRAL_DEBUG");
    if (!c->url || !c->curl) {
        crl_err_set(err, CRL_E_INTERNAL, "libcurl: cannot create a handle");
        goto fail;
    }
    if (token && *token && asprintf(&c->auth, "Authorization: Bearer %s", token) < 0) {
        c->auth = NULL;
        crl_err_sys(err, ENOMEM, "allocating the token header");
        goto fail;
    }
    *out = c;
    return 0;
fail:
    crl_client_close(c);
    return -1;
}

void crl_client_close(struct crl_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    if (c->auth) /* the token should not linger in freed memory */
        explicit_bzero(c->auth, strlen(c->auth));
    free(c->auth);
    free(c->url);
    free(c->base);
    free(c->unix_path);
    free(c);
}

const char *crl_client_url(const struct crl_client *c)
{
    return c->url;
}

void crl_client_set_cancel(struct crl_client *c, volatile sig_atomic_t *flag)
{
    c->cancel = flag;
}

long crl_client_last_status(const struct crl_client *c)
{
    return c->last_status;
}

bool crl_client_cancelled(const struct crl_client *c)
{
    return c->cancelled;
}

/* ---- curl callbacks ---- */

/* The value of header `name` ("Name:") in the header line p[0..n), into
 * out (cap bytes); false if the line is another header. */
static bool header_value(const char *p, size_t n, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(p, name, nl) != 0)
        return false;
    const char *v = p + nl;
    const char *end = p + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    size_t len = 0;
    while (v + len < end && v[len] != '\r' && v[len] != '\n' && len + 1 < cap)
        len++;
    memcpy(out, v, len);
    out[len] = 0;
    return true;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    char mode[16];
    if (n > 5 && strncmp(p, "HTTP/", 5) == 0) {
        x->kind[0] = 0; /* a new answer (after a 100 Continue) */
        x->mode = -1;
    } else if (header_value(p, n, "X-Corral-Mode:", mode, sizeof(mode))) {
        char *end;
        unsigned long m = strtoul(mode, &end, 8);
        x->mode = mode[0] && !*end && m <= 07777 ? (int)m : -1;
    } else {
        header_value(p, n, "X-Corral-Kind:", x->kind, sizeof(x->kind));
    }
    return n;
}

static int fail_cb(struct xfer *x, struct crl_err *e)
{
    x->cb_failed = true;
    x->cb_err = *e;
    return -1;
}

/* Hand each complete line to on_line; `flush` takes a last unterminated one too. */
static int feed_lines(struct xfer *x, struct crl_buf *lb, bool flush)
{
    for (;;) {
        char *nl = lb->len ? memchr(lb->data, '\n', lb->len) : NULL;
        size_t n = nl ? (size_t)(nl - lb->data) : (flush ? lb->len : 0);
        if (!nl && n == 0)
            return 0;
        struct crl_err e = CRL_ERR_INIT;
        if (n > 0) {
            json_error_t je;
            json_t *line = json_loadb(lb->data, n, 0, &je);
            if (!line) {
                crl_err_set(&e, CRL_E_INTERNAL, "corrald sent a line that is not JSON: %s",
                            je.text);
                return fail_cb(x, &e);
            }
            int rc = x->on_line(x->line_ctx, line, &e);
            json_decref(line);
            if (rc < 0)
                return fail_cb(x, &e);
        }
        crl_buf_consume(lb, nl ? n + 1 : n);
    }
}

/* Write all of buf to fd; a socket never raises SIGPIPE. */
static int write_nosig(int fd, const char *buf, size_t len)
{
    bool sock = true;
    while (len) {
        ssize_t n = sock ? send(fd, buf, len, MSG_NOSIGNAL) : write(fd, buf, len);
        if (n < 0 && errno == ENOTSOCK && sock) {
            sock = false;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int sink_begin(struct xfer *x)
{
    struct crl_err e = CRL_ERR_INIT;
    x->sink_began = true;
    if (x->sink(x->sink_ctx, strcmp(x->kind, "directory") == 0, x->mode, &x->sink_fd, &e) < 0)
        return fail_cb(x, &e);
    return 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &x->status);
    struct crl_err e = CRL_ERR_INIT;
    if (!ok_status(x->status) || (!x->on_line && !x->sink)) {
        if (!ok_status(x->status) && x->body.len + n > ERROR_BODY_MAX)
            return n; /* the start of an error answer is enough to report it */
        if (crl_buf_append(&x->body, p, n) < 0) {
            crl_err_sys(&e, ENOMEM, "reading corrald's answer");
            fail_cb(x, &e);
            return 0;
        }
        return n;
    }
    if (x->on_line) {
        if (x->body.len + n > LINE_MAX_BYTES) {
            crl_err_set(&e, CRL_E_INTERNAL, "corrald sent a line longer than %u bytes",
                        LINE_MAX_BYTES);
            fail_cb(x, &e);
            return 0;
        }
        if (crl_buf_append(&x->body, p, n) < 0) {
            crl_err_sys(&e, ENOMEM, "reading corrald's answer");
            fail_cb(x, &e);
            return 0;
        }
        return feed_lines(x, &x->body, false) < 0 ? 0 : n;
    }
    if (!x->sink_began && sink_begin(x) < 0)
        return 0;
    if (write_nosig(x->sink_fd, p, n) < 0) {
        crl_err_sys(&e, errno, "writing what corrald sent");
        fail_cb(x, &e);
        return 0;
    }
    return n;
}

static size_t on_read(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    struct crl_err e = CRL_ERR_INIT;
    ssize_t n = x->source(x->source_ctx, p, size * nmemb, &e);
    if (n >= 0)
        return (size_t)n;
    fail_cb(x, &e);
    return CURL_READFUNC_ABORT;
}

struct fd_src {
    int fd;
    long long size; /* announced; -1: unknown (sent chunked) */
    long long left;
};

/* Exactly the announced size, never more or less: a file that grows while
 * it is sent must not overrun the Content-Length, and one that shrinks
 * (or a descriptor not at its start) must fail rather than leave corrald
 * waiting for bytes that never come. */
static ssize_t fd_source(void *ctx, char *buf, size_t len, struct crl_err *err)
{
    struct fd_src *s = ctx;
    if (s->left == 0)
        return 0;
    if (s->left > 0 && (long long)len > s->left)
        len = (size_t)s->left;
    for (;;) {
        ssize_t n = read(s->fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return crl_err_sys(err, errno, "reading what to upload");
        if (n == 0 && s->left > 0)
            return crl_err_set(err, CRL_E_INVALID,
                               "the upload ended after %lld of its %lld bytes (did the file "
                               "shrink while it was sent?)",
                               s->size - s->left, s->size);
        if (s->left > 0)
            s->left -= n;
        return n;
    }
}

/* $CORRAL_DEBUG: what curl's own verbose output shows (its notes and the
 * headers both ways, never bodies), but with the value of an Authorization
 * header replaced, so a trace pasted into a bug report does not hand out
 * the token. */
static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *ud)
{
    static const char auth[] = "authorization:";
    const char *prefix = type == CURLINFO_TEXT         ? "* "
                         : type == CURLINFO_HEADER_IN  ? "< "
                         : type == CURLINFO_HEADER_OUT ? "> "
                                                       : NULL;
    if (!prefix)
        return 0;
    const char *end = data + size;
    /* curl hands the request's headers over as one block: go line by line. */
    for (const char *line = data; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *next = nl ? nl + 1 : end;
        size_t len = (size_t)(next - line);
        if (type != CURLINFO_TEXT && len >= sizeof(auth) - 1 &&
            strncasecmp(line, auth, sizeof(auth) - 1) == 0)
            fprintf(stderr, "%s%.*s <redacted>\n", prefix, (int)(sizeof(auth) - 1), line);
        else
            fprintf(stderr, "%s%.*s%s", prefix, (int)len, line, nl ? "" : "\n");
        line = next;
    }
    return 0;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct crl_client *c = ud;
    if (c->cancel && *c->cancel) {
        c->cancelled = true;
        return 1;
    }
    return 0;
}

/* ---- one request ---- */

static int answer_error(struct xfer *x, struct crl_err *err)
{
    const char *code = NULL, *msg = NULL;
    json_t *j = x->body.len ? json_loadb(x->body.data, x->body.len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    code = json_string_value(json_object_get(e, "code"));
    msg = json_string_value(json_object_get(e, "message"));
    if (code && msg) {
        crl_err_set(err, crl_errc_from_name(code), "%s", msg);
    } else {
        int show = (int)(x->body.len > 200 ? 200 : x->body.len);
        crl_err_set(err, x->status == 401 ? CRL_E_UNAUTHORIZED : CRL_E_INTERNAL,
                    "corrald answered HTTP %ld%s%.*s", x->status, show ? ": " : "", show,
                    x->body.data ? x->body.data : "");
    }
    json_decref(j);
    if (err && err->code == CRL_E_UNAUTHORIZED)
        crl_err_prefix(err, "%s",
                       x->c->auth ? "corrald refused the token in CORRAL_TOKEN"
                                  : "corrald needs a token (set CORRAL_TOKEN)");
    return -1;
}

static int transport_error(struct xfer *x, CURLcode rc, struct crl_err *err)
{
    struct crl_client *c = x->c;
    const char *why = c->curl_err[0] ? c->curl_err : curl_easy_strerror(rc);
    if (x->cb_failed) {
        if (err)
            *err = x->cb_err;
        return -1;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK && c->cancelled)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
    if (x->status >= 200) /* not a 100 Continue: an answer had begun */
        return crl_err_set(err, CRL_E_UNAVAILABLE,
                           "the answer from corrald at %s was cut short: %s", c->url, why);
    if (x->status)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald at %s closed the connection: %s",
                           c->url, why);
    if (rc == CURLE_COULDNT_CONNECT && c->unix_path) {
        /* curl's message would name "localhost port 80" */
        long os_errno = 0;
        curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno);
        return crl_err_set(err, CRL_E_UNAVAILABLE, "cannot reach corrald at %s: %s%s", c->url,
                           os_errno ? strerror((int)os_errno) : why,
                           os_errno == ENOENT || os_errno == ECONNREFUSED ? " (is it running?)"
                                                                          : "");
    }
    return crl_err_set(err, CRL_E_UNAVAILABLE, "cannot reach corrald at %s: %s", c->url, why);
}

/* Send one request.  `data` (len bytes) is the body of a POST/PUT/other,
 * or x->source is read for an upload of `upload_size` bytes (-1: chunked). */
static int perform(struct xfer *x, const char *method, const char *path, const char *ctype,
                   const char *data, size_t len, long long upload_size, struct crl_err *err)
{
    struct crl_client *c = x->c;
    CURL *h = c->curl;
    cleanup_free char *url = NULL;
    if (asprintf(&url, "%s%s", c->base, path) < 0) {
        url = NULL;
        return crl_err_sys(err, ENOMEM, "building the URL");
    }
    curl_easy_reset(h); /* options go; the kept-alive connection stays */
    c->curl_err[0] = 0;
    c->cancelled = false;
    c->last_status = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (c->unix_path)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->curl_err);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "corral/1");
    if (c->verbose) {
        curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
        curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    if (c->cancel) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
    }

    struct curl_slist *hdrs = NULL, *tmp;
    char ct_header[128];
    /* An upload keeps curl's "Expect: 100-continue": an error answer (no
     * such sandbox, a bad path) then comes before the body is sent, not as
     * a broken pipe halfway through it.  A JSON body skips the round trip. */
    hdrs = curl_slist_append(hdrs, x->source ? "Accept: application/json" : "Expect:");
    if (hdrs && c->auth && (tmp = curl_slist_append(hdrs, c->auth)))
        hdrs = tmp;
    if (hdrs && ctype) {
        snprintf(ct_header, sizeof(ct_header), "Content-Type: %s", ctype);
        if ((tmp = curl_slist_append(hdrs, ct_header)))
            hdrs = tmp;
    }
    if (!hdrs)
        return crl_err_sys(err, ENOMEM, "building the request");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    if (x->source) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)upload_size);
        if (strcmp(method, "PUT") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    } else if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "DELETE") == 0 && !data) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, data ? data : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(data ? len : 0));
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }

    CURLcode rc = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdrs);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
    c->last_status = x->status;
    if (rc == CURLE_OK && x->on_line && ok_status(x->status) && feed_lines(x, &x->body, true) < 0)
        rc = CURLE_WRITE_ERROR;
    if (rc == CURLE_OK && x->sink && ok_status(x->status) && !x->sink_began && sink_begin(x) < 0)
        rc = CURLE_WRITE_ERROR; /* an empty file: the sink still has to see it */
    if (rc != CURLE_OK)
        return transport_error(x, rc, err);
    if (!ok_status(x->status))
        return answer_error(x, err);
    return 0;
}

static int json_body(json_t *body, char **text, struct crl_err *err)
{
    *text = NULL;
    if (!body)
        return 0;
    *text = json_dumps(body, JSON_COMPACT);
    if (!*text)
        return crl_err_set(err, CRL_E_INVALID, "the request body cannot be encoded as JSON");
    return 0;
}

int crl_client_request(struct crl_client *c, const char *method, const char *path, json_t *body,
                       json_t **out, long *status, struct crl_err *err)
{
    struct xfer x;
    cleanup_free char *text = NULL;
    if (out)
        *out = NULL;
    if (json_body(body, &text, err) < 0)
        return -1;
    xfer_init(&x, c);
    int rc = perform(&x, method, path, text ? "application/json" : NULL, text,
                     text ? strlen(text) : 0, -1, err);
    if (status)
        *status = x.status;
    if (rc == 0 && out && x.body.len) {
        json_error_t je;
        *out = json_loadb(x.body.data, x.body.len, 0, &je);
        if (!*out)
            rc = crl_err_set(err, CRL_E_INTERNAL, "corrald's answer to %s %s is not JSON: %s",
                             method, path, je.text);
    }
    crl_buf_free(&x.body);
    return rc;
}

int crl_client_stream(struct crl_client *c, const char *method, const char *path, json_t *body,
                      crl_client_line_fn on_line, void *ctx, long *status, struct crl_err *err)
{
    struct xfer x;
    cleanup_free char *text = NULL;
    if (json_body(body, &text, err) < 0)
        return -1;
    xfer_init(&x, c);
    x.on_line = on_line;
    x.line_ctx = ctx;
    int rc = perform(&x, method, path, text ? "application/json" : NULL, text,
                     text ? strlen(text) : 0, -1, err);
    if (status)
        *status = x.status;
    crl_buf_free(&x.body);
    return rc;
}

/* ---- typed helpers ---- */

bool crl_client_id_ok(const char *id)
{
    size_t n = strlen(id);
    return n > 0 && n < 64 &&
           strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789._-") == n &&
           strcmp(id, ".") != 0 && strcmp(id, "..") != 0;
}

/* "/v1/sandboxes/{id}{suffix}" into buf. */
static int sb_path(char *buf, size_t cap, const char *id, const char *suffix, struct crl_err *err)
{
    if (!crl_client_id_ok(id))
        return crl_err_set(err, CRL_E_INVALID, "'%s' is not a sandbox id", id);
    if ((size_t)snprintf(buf, cap, "/v1/sandboxes/%s%s", id, suffix) >= cap)
        return crl_err_set(err, CRL_E_INVALID, "the request path is too long");
    return 0;
}

int crl_client_create(struct crl_client *c, json_t *spec, json_t **out, struct crl_err *err)
{
    json_t *empty = NULL;
    if (!spec)
        spec = empty = json_object();
    int rc = crl_client_request(c, "POST", "/v1/sandboxes", spec, out, NULL, err);
    json_decref(empty);
    return rc;
}

int crl_client_inspect(struct crl_client *c, const char *id, json_t **out, struct crl_err *err)
{
    char path[128];
    if (sb_path(path, sizeof(path), id, "", err) < 0)
        return -1;
    return crl_client_request(c, "GET", path, NULL, out, NULL, err);
}

int crl_client_list(struct crl_client *c, const char *const *labels, size_t n, json_t **out,
                    struct crl_err *err)
{
    return crl_client_list_of(c, "/v1/sandboxes", labels, n, out, err);
}

int crl_client_list_of(struct crl_client *c, const char *collection, const char *const *labels,
                       size_t n, json_t **out, struct crl_err *err)
{
    struct crl_buf path;
    crl_buf_init(&path, CRL_BUF_UNBOUNDED);
    int rc = crl_buf_printf(&path, "%s", collection);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *q = curl_easy_escape(c->curl, labels[i], 0);
        rc = q ? crl_buf_printf(&path, "%clabel=%s", i ? '&' : '?', q) : -1;
        curl_free(q);
    }
    if (rc < 0) {
        crl_buf_free(&path);
        return crl_err_sys(err, ENOMEM, "building the request");
    }
    rc = crl_client_request(c, "GET", path.data, NULL, out, NULL, err);
    crl_buf_free(&path);
    return rc;
}

int crl_client_destroy(struct crl_client *c, const char *id, json_t **out, struct crl_err *err)
{
    char path[128];
    if (sb_path(path, sizeof(path), id, "", err) < 0)
        return -1;
    return crl_client_request(c, "DELETE", path, NULL, out, NULL, err);
}

int crl_client_exec(struct crl_client *c, const char *id, json_t *req, json_t **out,
                    struct crl_err *err)
{
    char path[128];
    if (sb_path(path, sizeof(path), id, "/exec", err) < 0)
        return -1;
    return crl_client_request(c, "POST", path, req, out, NULL, err);
}

struct run_stream {
    crl_client_output_fn on_output;
    void *ctx;
    json_t *result;
};

static int run_line(void *ctx, json_t *line, struct crl_err *err)
{
    struct run_stream *rs = ctx;
    json_t *res = json_object_get(line, "result");
    if (res) {
        json_decref(rs->result);
        rs->result = json_incref(res);
        return 0;
    }
    bool b64 = json_is_string(json_object_get(line, "encoding")) &&
               strcmp(json_string_value(json_object_get(line, "encoding")), "base64") == 0;
    static const struct {
        const char *key;
        enum crl_client_fd fd;
    } keys[] = {{"stdout", CRL_CLIENT_STDOUT}, {"stderr", CRL_CLIENT_STDERR}};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(line, keys[i].key);
        if (!v)
            continue;
        if (!json_is_string(v))
            return crl_err_set(err, CRL_E_INTERNAL, "corrald sent %s that is not a string",
                               keys[i].key);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        if (!b64) {
            if (rs->on_output && rs->on_output(rs->ctx, keys[i].fd, s, len, err) < 0)
                return -1;
            continue;
        }
        cleanup_free char *raw = NULL;
        size_t rawlen;
        if (crl_base64_decode(s, len, &raw, &rawlen) < 0)
            return crl_err_set(err, CRL_E_INTERNAL, "corrald sent %s that is not valid base64",
                               keys[i].key);
        if (rs->on_output && rs->on_output(rs->ctx, keys[i].fd, raw, rawlen, err) < 0)
            return -1;
    }
    return 0;
}

int crl_client_run_stream(struct crl_client *c, const char *path, json_t *req,
                          crl_client_output_fn on_output, void *ctx, json_t **result,
                          struct crl_err *err)
{
    *result = NULL;
    json_t *body = req ? json_copy(req) : json_object();
    if (!body || json_object_set_new(body, "stream", json_true()) < 0) {
        json_decref(body);
        return crl_err_sys(err, ENOMEM, "building the request");
    }
    struct run_stream rs = {.on_output = on_output, .ctx = ctx};
    int rc = crl_client_stream(c, "POST", path, body, run_line, &rs, NULL, err);
    json_decref(body);
    if (rc == 0 && !rs.result)
        rc = crl_err_set(err, CRL_E_UNAVAILABLE, "the output stream ended without a result");
    if (rc < 0) {
        json_decref(rs.result);
        return -1;
    }
    *result = rs.result;
    return 0;
}

int crl_client_exec_stream(struct crl_client *c, const char *id, json_t *req,
                           crl_client_output_fn on_output, void *ctx, json_t **result,
                           struct crl_err *err)
{
    char path[128];
    *result = NULL;
    if (sb_path(path, sizeof(path), id, "/exec", err) < 0)
        return -1;
    return crl_client_run_stream(c, path, req, on_output, ctx, result, err);
}

int crl_client_session_open(struct crl_client *c, const char *id, json_t *req, char *sid,
                            size_t cap, struct crl_err *err)
{
    char path[128];
    json_t *out = NULL;
    if (sb_path(path, sizeof(path), id, "/sessions", err) < 0 ||
        crl_client_request(c, "POST", path, req, &out, NULL, err) < 0)
        return -1;
    const char *s = json_string_value(json_object_get(out, "session_id"));
    int rc = 0;
    if (!s || !crl_client_id_ok(s))
        rc = crl_err_set(err, CRL_E_INTERNAL, "corrald's answer has no valid session_id");
    else if ((size_t)snprintf(sid, cap, "%s", s) >= cap)
        rc = crl_err_set(err, CRL_E_INTERNAL, "the session id '%s' is too long", s);
    json_decref(out);
    return rc;
}

static int session_path(char *buf, size_t cap, const char *id, const char *sid, const char *tail,
                        struct crl_err *err)
{
    char suffix[96];
    if (!crl_client_id_ok(sid))
        return crl_err_set(err, CRL_E_INVALID, "'%s' is not a session id", sid);
    snprintf(suffix, sizeof(suffix), "/sessions/%s%s", sid, tail);
    return sb_path(buf, cap, id, suffix, err);
}

int crl_client_session_run_stream(struct crl_client *c, const char *id, const char *sid,
                                  json_t *req, crl_client_output_fn on_output, void *ctx,
                                  json_t **result, struct crl_err *err)
{
    char path[224];
    *result = NULL;
    if (session_path(path, sizeof(path), id, sid, "/run", err) < 0)
        return -1;
    return crl_client_run_stream(c, path, req, on_output, ctx, result, err);
}

int crl_client_session_close(struct crl_client *c, const char *id, const char *sid,
                             struct crl_err *err)
{
    char path[224];
    if (session_path(path, sizeof(path), id, sid, "", err) < 0)
        return -1;
    return crl_client_request(c, "DELETE", path, NULL, NULL, NULL, err);
}

int crl_client_exit_status(json_t *result)
{
    const char *reason = json_string_value(json_object_get(result, "reason"));
    json_t *code = json_object_get(result, "exit_code");
    json_t *sig = json_object_get(result, "signal");
    if (!reason)
        return -1;
    if (strcmp(reason, "timeout") == 0)
        return 124;
    if (strcmp(reason, "oom") == 0 || strcmp(reason, "killed") == 0)
        return 128 + 9;
    if (json_is_integer(sig) && json_integer_value(sig) > 0 && json_integer_value(sig) < 128)
        return 128 + (int)json_integer_value(sig);
    if (json_is_integer(code))
        return (int)(json_integer_value(code) & 0xff);
    return -1;
}

/* ---- files ---- */

static int files_path(struct crl_client *c, const char *id, const char *path, int mode, char **out,
                      struct crl_err *err)
{
    char prefix[128];
    *out = NULL;
    if (sb_path(prefix, sizeof(prefix), id, "/files", err) < 0)
        return -1;
    if (path[0] != '/')
        return crl_err_set(err, CRL_E_INVALID, "'%s': paths in a sandbox are absolute", path);
    char *q = curl_easy_escape(c->curl, path, 0);
    if (!q)
        return crl_err_sys(err, ENOMEM, "building the request");
    int n = mode >= 0 ? asprintf(out, "%s?path=%s&mode=%04o", prefix, q, (unsigned)mode)
                      : asprintf(out, "%s?path=%s", prefix, q);
    curl_free(q);
    if (n < 0) {
        *out = NULL;
        return crl_err_sys(err, ENOMEM, "building the request");
    }
    return 0;
}

int crl_client_upload(struct crl_client *c, const char *method, const char *path,
                      crl_client_source_fn source, void *ctx, long long size,
                      const char *content_type, json_t **out, struct crl_err *err)
{
    if (out)
        *out = NULL;
    struct xfer x;
    xfer_init(&x, c);
    x.source = source;
    x.source_ctx = ctx;
    int rc = perform(&x, method, path, content_type ? content_type : "application/octet-stream",
                     NULL, 0, size, err);
    if (rc == 0 && out && x.body.len)
        *out = json_loadb(x.body.data, x.body.len, 0, NULL);
    crl_buf_free(&x.body);
    return rc;
}

ssize_t crl_client_mem_source(void *ctx, char *buf, size_t len, struct crl_err *err)
{
    struct crl_client_mem *m = ctx;
    size_t n = m->len - m->off < len ? m->len - m->off : len;
    memcpy(buf, m->data + m->off, n);
    m->off += n;
    return (ssize_t)n;
}

int crl_client_put_source(struct crl_client *c, const char *id, const char *path,
                          crl_client_source_fn source, void *ctx, long long size,
                          const char *content_type, int mode, json_t **out, struct crl_err *err)
{
    cleanup_free char *url = NULL;
    if (out)
        *out = NULL;
    if (files_path(c, id, path, mode, &url, err) < 0)
        return -1;
    return crl_client_upload(c, "PUT", url, source, ctx, size, content_type, out, err);
}

int crl_client_put(struct crl_client *c, const char *id, const char *path, int fd, long long size,
                   const char *content_type, int mode, json_t **out, struct crl_err *err)
{
    struct fd_src src = {.fd = fd, .size = size < 0 ? -1 : size, .left = size < 0 ? -1 : size};
    return crl_client_put_source(c, id, path, fd_source, &src, size, content_type, mode, out, err);
}

/* ---- images ---- */

bool crl_client_image_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= 255 &&
           strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-/:@+") == n;
}

int crl_client_image_import(struct crl_client *c, const char *name, const char *ref,
                            crl_client_source_fn source, void *ctx, long long size, json_t **out,
                            struct crl_err *err)
{
    cleanup_free char *url = NULL;
    if (out)
        *out = NULL;
    char *qn = name ? curl_easy_escape(c->curl, name, 0) : NULL;
    char *qr = ref ? curl_easy_escape(c->curl, ref, 0) : NULL;
    int n = -1;
    if ((!name || qn) && (!ref || qr))
        n = asprintf(&url, "/v1/images%s%s%s%s", qn ? "?name=" : "", qn ? qn : "",
                     qr ? (qn ? "&ref=" : "?ref=") : "", qr ? qr : "");
    curl_free(qn);
    curl_free(qr);
    if (n < 0) {
        url = NULL;
        return crl_err_sys(err, ENOMEM, "building the request");
    }
    return crl_client_upload(c, "POST", url, source, ctx, size, "application/x-tar", out, err);
}

int crl_client_image_import_fd(struct crl_client *c, const char *name, const char *ref, int fd,
                               long long size, json_t **out, struct crl_err *err)
{
    struct fd_src src = {.fd = fd, .size = size < 0 ? -1 : size, .left = size < 0 ? -1 : size};
    return crl_client_image_import(c, name, ref, fd_source, &src, size, out, err);
}

int crl_client_get(struct crl_client *c, const char *id, const char *path, crl_client_sink_fn sink,
                   void *ctx, struct crl_err *err)
{
    cleanup_free char *url = NULL;
    if (files_path(c, id, path, -1, &url, err) < 0)
        return -1;
    struct xfer x;
    xfer_init(&x, c);
    x.sink = sink;
    x.sink_ctx = ctx;
    int rc = perform(&x, "GET", url, NULL, NULL, 0, -1, err);
    crl_buf_free(&x.body);
    return rc;
}

static int fd_sink(void *ctx, bool is_dir, int mode, int *fd, struct crl_err *err)
{
    *fd = *(int *)ctx;
    return 0;
}

int crl_client_download(struct crl_client *c, const char *path, int fd, struct crl_err *err)
{
    struct xfer x;
    xfer_init(&x, c);
    x.sink = fd_sink;
    x.sink_ctx = &fd;
    int rc = perform(&x, "GET", path, NULL, NULL, 0, -1, err);
    crl_buf_free(&x.body);
    return rc;
}

/* ---- a tunnel ---- */

static int connect_corrald(struct crl_client *c, struct crl_err *err)
{
    if (c->unix_path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", c->unix_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            return crl_err_sys(err, e, "connecting to %s", c->url);
        }
        return fd;
    }
    char host[256];
    const char *hp = c->base + 7, *colon = strrchr(hp, ':');
    if (!colon || (size_t)(colon - hp) >= sizeof(host))
        return crl_err_set(err, CRL_E_INVALID, "'%s': expected http://HOST:PORT", c->url);
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hp), hp);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "%s: %s", c->url, gai_strerror(rc));
    int fd = -1, e = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd >= 0 ? fd : crl_err_sys(err, e ? e : ECONNREFUSED, "connecting to %s", c->url);
}

int crl_client_tunnel(struct crl_client *c, const char *path, const char *protocol,
                      struct crl_err *err)
{
    int fd = connect_corrald(c, err);
    if (fd < 0)
        return -1;
    struct xfer x;
    xfer_init(&x, c);
    cleanup_free char *rq = NULL;
    if (asprintf(&rq,
                 "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n"
                 "Upgrade: %s\r\n%s%s\r\n",
                 path, protocol, c->auth ? c->auth : "", c->auth ? "\r\n" : "") < 0) {
        rq = NULL;
        close(fd);
        return crl_err_sys(err, ENOMEM, "a request");
    }
    /* The head a byte at a time: what follows it is the protocol's. */
    char head[8192];
    size_t n = 0;
    bool ok = crl_write_full(fd, rq, strlen(rq)) == 0;
    while (ok && n + 1 < sizeof(head) && !(n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0))
        ok = read(fd, head + n++, 1) == 1;
    head[n] = '\0';
    long status = 0, len = 0;
    if (!ok || sscanf(head, "HTTP/1.%*1[01] %ld", &status) != 1) {
        close(fd);
        return crl_err_set(err, CRL_E_UNAVAILABLE, "%s: no HTTP answer to the tunnel", c->url);
    }
    if (status == 101)
        return fd;
    for (char *l = strcasestr(head, "\r\ncontent-length:"); l; l = NULL)
        len = strtol(l + 17, NULL, 10);
    char body[4096];
    ssize_t got = 0;
    while (len > 0 && got < len && got < (ssize_t)sizeof(body)) {
        ssize_t r = read(
            fd, body + got,
            (size_t)(len - got < (long)sizeof(body) - got ? len - got : (long)sizeof(body) - got));
        if (r <= 0)
            break;
        got += r;
    }
    close(fd);
    x.status = status;
    crl_buf_append(&x.body, body, (size_t)got);
    answer_error(&x, err);
    crl_buf_free(&x.body);
    return -1;
}
