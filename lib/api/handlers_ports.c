/* The port proxy: GET, POST, PUT, PATCH, DELETE /v1/sandboxes/{id}/ports/
 * {port}/PATH?QUERY is sent as an HTTP/1.0 request (Connection: close) to
 * 127.0.0.1:{port} inside the sandbox, and the answer is streamed back with
 * its status and headers.  corrald opens the connection inside the
 * sandbox's network namespace, so it works whatever the sandbox's network
 * mode, reaches a server bound to its loopback, and only through corrald's
 * listeners and their auth; nothing else of the host can reach in.
 *
 * A request with an Upgrade header (a WebSocket's handshake) goes as
 * HTTP/1.1 with it; a 101 from the server makes both connections a tunnel
 * (struct crl_tunnel), bytes both ways until each side has ended.
 * "Upgrade: corral-tcp" is corrald's own: 101 once the port accepts, then
 * its raw stream (what `corral forward` uses).
 *
 * What the server answers is hostile: its header block is parsed with
 * limits and only well-formed headers are passed on; its body is passed
 * through as bytes, held back while the client reads slowly. */
#include "handlers_ports.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/host.h"
#include "../util/cleanup.h"
#include "../util/log.h"
#include "../util/pump.h"
#include "request.h"

#define HEAD_MAX (64u << 10)   /* the answer's status line and headers */
#define STREAM_HIGH (1u << 20) /* its body held for a slow client: above this, read no more */

struct proxy {
    int fd;
    unsigned port;
    struct crl_watch w;
    struct crl_buf send; /* the request, from `sent` on still to write */
    size_t sent;
    struct crl_buf head; /* the answer until its blank line */
    bool answered;       /* the response (status, headers) is the client's */
    bool paused;
    bool upgrade;         /* the client asked to switch protocols (a WebSocket) */
    bool raw;             /* ... to "corral-tcp": a byte stream, no request sent */
    struct crl_buf early; /* what the server sent after its 101, for the tunnel */
};

/* An upgraded connection: bytes between the client's socket (MHD's, closed
 * through urh: pump.fd[0]) and the server's in the sandbox (pump.fd[1]),
 * until either side ends. */
struct crl_tunnel {
    struct crl_api *api;
    struct crl_pump pump;
    struct MHD_UpgradeResponseHandle *urh;
    struct crl_tunnel *next;
};

/* A header the proxy does not pass on: hop by hop (RFC 9110 7.6.1), or
 * corrald's (its auth), or one it sets itself. */
static bool hop_header(const char *k)
{
    static const char *const names[] = {"connection",
                                        "keep-alive",
                                        "proxy-connection",
                                        "proxy-authenticate",
                                        "proxy-authorization",
                                        "te",
                                        "trailer",
                                        "transfer-encoding",
                                        "upgrade",
                                        "host",
                                        "authorization",
                                        "content-length"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(names); i++)
        if (strcasecmp(k, names[i]) == 0)
            return true;
    return false;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
    struct crl_buf *b = cls;
    if (k && v && crl_http_token_ok(k) && crl_http_value_ok(v) && !hop_header(k))
        crl_buf_printf(b, "%s: %s\r\n", k, v);
    return MHD_YES;
}

/* ---- tunnels ---- */

static void tunnel_close(struct crl_pump *p)
{
    struct crl_tunnel *t = p->data;
    for (struct crl_tunnel **pp = &t->api->tunnels; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    crl_pump_stop(&t->pump);
    close_fd(&t->pump.fd[1]);
    MHD_upgrade_action(t->urh, MHD_UPGRADE_ACTION_CLOSE); /* MHD's socket, fd[0] */
    free(t);
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in,
                        size_t extra_in_size, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
    struct crl_req *r = cls;
    struct proxy *x = r->state;
    struct crl_tunnel *t = calloc(1, sizeof(*t));
    crl_watch_stop(r->api->host->loop, &x->w);
    if (!t) {
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        close_fd(&x->fd);
        crl_req_pending_done(r);
        return;
    }
    t->api = r->api;
    t->urh = urh;
    crl_pump_init(&t->pump, r->api->host->loop, sock, x->fd, tunnel_close, t);
    x->fd = -1;
    t->next = t->api->tunnels;
    t->api->tunnels = t;
    crl_req_pending_done(r);
    if (crl_pump_queue(&t->pump, 0, x->early.data, x->early.len) < 0 ||
        crl_pump_queue(&t->pump, 1, extra_in, extra_in_size) < 0 || crl_pump_start(&t->pump) < 0)
        tunnel_close(&t->pump);
}

void crl_h_ports_stop(struct crl_api *a)
{
    while (a->tunnels)
        tunnel_close(&a->tunnels->pump);
}

/* 101 to the client: its connection becomes a tunnel (on_upgraded). */
static void switch_protocols(struct crl_req *r, struct proxy *x, const char **names,
                             const char **values, size_t n)
{
    struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgraded, r);
    bool has_upgrade = false;
    for (size_t i = 0; i < n; i++) {
        MHD_add_response_header(resp, names[i], values[i]);
        has_upgrade |= strcasecmp(names[i], "upgrade") == 0;
    }
    if (!has_upgrade)
        MHD_add_response_header(resp, "Upgrade", "corral-tcp");
    x->answered = true;
    crl_watch_modify(r->api->host->loop, &x->w, 0); /* the tunnel reads from here on */
    crl_req_respond(r, 101, resp);
}

static void percent(struct crl_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || strchr("-._~", c))
            crl_buf_append(b, s, 1);
        else
            crl_buf_printf(b, "%%%02X", c);
    }
}

static enum MHD_Result add_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
    struct crl_buf *b = cls;
    crl_buf_append(b, b->data && strchr(b->data, '?') ? "&" : "?", 1);
    percent(b, k);
    if (v) {
        crl_buf_append(b, "=", 1);
        percent(b, v);
    }
    return MHD_YES;
}

/* The request line, headers and body to send. */
static int build_request(struct crl_req *r, struct proxy *x, const char *target,
                         struct crl_err *err)
{
    struct crl_buf *b = &x->send;
    struct crl_buf t;
    crl_buf_init(&t, CRL_BUF_UNBOUNDED);
    int e = crl_buf_printf(&t, "%s", *target ? target : "/");
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, add_arg, &t);
    for (const char *c = t.data; c && *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) /* MHD decoded the path: encode it again */
            e = -1;
    if (e == 0) /* a WebSocket's handshake is HTTP/1.1's */
        e = crl_buf_printf(b, "%s %s HTTP/1.%d\r\nHost: localhost:%u\r\n", r->method, t.data,
                           x->upgrade ? 1 : 0, x->port);
    crl_buf_free(&t);
    if (e < 0)
        return crl_err_set(err, CRL_E_INVALID,
                           "the path to pass on is not one an HTTP "
                           "request line can carry");
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, b);
    if (r->body.len)
        crl_buf_printf(b, "Content-Length: %zu\r\n", r->body.len);
    const char *up = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Upgrade");
    if (x->upgrade && up && crl_http_value_ok(up))
        crl_buf_printf(b, "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n", up);
    else
        crl_buf_printf(b, "Connection: close\r\n\r\n");
    if (crl_buf_append(b, r->body.data ? r->body.data : "", r->body.len) < 0)
        return crl_err_sys(err, ENOMEM, "the request to pass on");
    return 0;
}

static void finish(struct crl_req *r, struct proxy *x)
{
    crl_watch_stop(r->api->host->loop, &x->w);
    close_fd(&x->fd);
    crl_req_pending_done(r);
}

/* 503 (unavailable) naming the port and why, or, once the answer has
 * begun, its stream cut off. */
static void fail(struct crl_req *r, struct proxy *x, const char *why)
{
    if (x->answered) {
        crl_req_stream_end(r, true);
    } else {
        struct crl_err err = CRL_ERR_INIT;
        crl_err_set(&err, CRL_E_UNAVAILABLE, "port %u of sandbox %s: %s", x->port, r->sb->id, why);
        crl_req_error(r, &err);
    }
    finish(r, x);
}

/* The header block is in (up to its blank line at `end`): answer with its
 * status and its well-formed headers.  -1 if it is not an HTTP/1 answer. */
static int start_answer(struct crl_req *r, struct proxy *x, size_t end)
{
    char *h = x->head.data;
    h[end] = '\0';
    unsigned status = 0;
    if (sscanf(h, "HTTP/1.%*1[01] %3u", &status) != 1 || status < 100 || status > 599 ||
        (status < 200 && !(status == 101 && x->upgrade)))
        return -1;
    enum { MAX_HEADERS = 100 };
    const char *names[MAX_HEADERS], *values[MAX_HEADERS];
    size_t n = 0;
    const char *ctype = "application/octet-stream";
    char *l = strstr(h, "\r\n");
    while (l && n < MAX_HEADERS) {
        *l = '\0';
        l += 2;
        char *next = strstr(l, "\r\n");
        if (next)
            *next = '\0';
        char *colon = strchr(l, ':');
        if (colon) {
            *colon = '\0';
            char *v = colon + 1 + strspn(colon + 1, " \t");
            if (crl_http_token_ok(l) && crl_http_value_ok(v)) {
                if (strcasecmp(l, "content-type") == 0)
                    ctype = v;
                else if (!hop_header(l) || (status == 101 && strcasecmp(l, "upgrade") == 0)) {
                    names[n] = l;
                    values[n++] = v;
                }
            }
        }
        l = next; /* at the NUL that ended the line, and its '\n' */
    }
    if (status == 101) {
        switch_protocols(r, x, names, values, n);
        return 0;
    }
    struct MHD_Response *resp = crl_req_stream_response(r, ctype);
    for (size_t i = 0; i < n; i++)
        MHD_add_response_header(resp, names[i], values[i]);
    x->answered = true;
    crl_req_respond(r, status, resp);
    return 0;
}

static void on_io(struct crl_watch *w, uint32_t events)
{
    struct crl_req *r = w->data;
    struct proxy *x = r->state;
    if (x->sent < x->send.len) { /* connecting, then writing */
        int e = 0;
        socklen_t l = sizeof(e);
        if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e) {
            fail(r, x, strerror(e));
            return;
        }
        ssize_t n =
            send(x->fd, x->send.data + x->sent, x->send.len - x->sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
            fail(r, x, strerror(errno));
            return;
        }
        if (n > 0)
            x->sent += (size_t)n;
        if (x->sent == x->send.len)
            crl_watch_modify(r->api->host->loop, &x->w, EPOLLIN);
        return;
    }
    if (x->raw && !x->answered) { /* connected: nothing to send, the stream is the client's */
        int e = 0;
        socklen_t l = sizeof(e);
        if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e) {
            fail(r, x, strerror(e));
            return;
        }
        switch_protocols(r, x, NULL, NULL, 0);
        return;
    }
    char buf[64 * 1024];
    ssize_t n = recv(x->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN)
        return;
    if (n < 0) {
        fail(r, x, strerror(errno));
        return;
    }
    if (n == 0) {
        if (!x->answered)
            fail(r, x, "the server closed the connection without an HTTP answer");
        else {
            crl_req_stream_end(r, false);
            finish(r, x);
        }
        return;
    }
    if (x->answered) {
        crl_req_stream_append(r, buf, (size_t)n);
    } else {
        crl_buf_append(&x->head, buf, (size_t)n);
        char *end = x->head.data ? strstr(x->head.data, "\r\n\r\n") : NULL;
        if (!end && x->head.len > HEAD_MAX) {
            fail(r, x, "its answer's headers are over 64 KiB");
            return;
        }
        if (!end)
            return;
        size_t hlen = (size_t)(end - x->head.data), body = hlen + 4;
        size_t rest = x->head.len - body;
        char *tail = rest ? malloc(rest) : NULL;
        if (rest && tail)
            memcpy(tail, x->head.data + body, rest);
        if (start_answer(r, x, hlen) < 0) {
            free(tail);
            fail(r, x, "its answer is not an HTTP/1 answer");
            return;
        }
        if (tail && x->upgrade && !r->streaming)
            crl_buf_append(&x->early, tail, rest);
        else if (tail)
            crl_req_stream_append(r, tail, rest);
        free(tail);
        if (x->upgrade && !r->streaming)
            return; /* switched: the tunnel takes it from here */
    }
    if (r->out.len > STREAM_HIGH && !x->paused) {
        x->paused = true;
        crl_watch_modify(r->api->host->loop, &x->w, 0);
    }
}

void crl_h_port_drained(struct crl_req *r)
{
    struct proxy *x = r->state;
    if (x && x->paused && x->fd >= 0 && r->out.len < STREAM_HIGH / 4) {
        x->paused = false;
        crl_watch_modify(r->api->host->loop, &x->w, EPOLLIN);
    }
}

void crl_h_port_cancel(struct crl_req *r)
{
    struct proxy *x = r->state;
    if (x && x->fd >= 0)
        finish(r, x);
}

void crl_h_port_free(struct crl_req *r)
{
    struct proxy *x = r->state;
    if (!x)
        return;
    crl_buf_free(&x->send);
    crl_buf_free(&x->head);
    crl_buf_free(&x->early);
    free(x);
    r->state = NULL;
}

void crl_h_port(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    char *end;
    unsigned long port = strtoul(r->route.sub, &end, 10);
    if (*end || !r->route.sub[0] || port == 0 || port > 65535) {
        crl_err_set(&err, CRL_E_INVALID, "port '%s' is not a port (1-65535)", r->route.sub);
        crl_req_error(r, &err);
        return;
    }
    int netns = r->sb->ops->netns ? r->sb->ops->netns(r->sb) : -1;
    if (!r->sb->ops->netns || r->sb->state != CRL_SB_READY || netns < 0) {
        crl_err_set(&err, r->sb->ops->netns ? CRL_E_CONFLICT : CRL_E_UNSUPPORTED,
                    "sandbox %s has no port to reach (%s)", r->sb->id,
                    r->sb->ops->netns ? crl_sb_state_name(r->sb->state) : r->sb->ops->name);
        crl_req_error(r, &err);
        return;
    }
    struct proxy *x = calloc(1, sizeof(*x));
    if (!x) {
        crl_err_sys(&err, ENOMEM, "the port proxy");
        crl_req_error(r, &err);
        return;
    }
    r->state = x;
    x->fd = -1;
    x->port = (unsigned)port;
    crl_buf_init(&x->send, CRL_BUF_UNBOUNDED);
    crl_buf_init(&x->head, CRL_BUF_UNBOUNDED);
    const char *up = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Upgrade");
    x->upgrade = up != NULL;
    x->raw = up && strcasecmp(up, "corral-tcp") == 0;
    crl_buf_init(&x->early, CRL_BUF_UNBOUNDED);
    /* The path after /ports/{port}: MHD decoded it; it carries no query. */
    const char *prefix = strstr(r->path, "/ports/");
    const char *target = prefix ? prefix + 7 + strlen(r->route.sub) : "";
    if (!x->raw && build_request(r, x, target, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    x->fd = crl_netns_socket(r->api->host->netns, netns, SOCK_STREAM | SOCK_NONBLOCK);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (x->fd < 0 ||
        (connect(x->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)) {
        crl_err_set(&err, CRL_E_UNAVAILABLE, "nothing answers on port %lu of sandbox %s: %s", port,
                    r->sb->id, strerror(errno));
        close_fd(&x->fd);
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_watch_start(r->api->host->loop, &x->w, x->fd, EPOLLOUT, on_io, r) < 0) {
        r->pending--;
        close_fd(&x->fd);
        crl_err_sys(&err, errno, "watch the port's connection");
        crl_req_error(r, &err);
    }
}
