#include "service_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/host.h"
#include "../core/resolver.h"
#include "../core/services.h"
#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/pump.h"
#include "request.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* <linux/netfilter_ipv4.h>, which clashes with <netinet/in.h> */
#endif

#define REQUEST_BODY_MAX (1u << 20) /* a mock's request body; above it, 413 */

/* A connection to a sandbox service: the caller's socket (pump.fd[0]) and
 * the other sandbox's (pump.fd[1]). */
struct relay {
    struct crl_svc_server *s;
    struct crl_pump pump;
    struct relay *next;
};

/* A request to a mock, while MHD has it. */
struct mock_req {
    struct crl_svc_server *s;
    struct MHD_Connection *conn;
    struct crl_buf body;
    bool too_big;
    struct MHD_Response *resp; /* decided, waiting out the route's delay */
    unsigned status;
    struct crl_timer delay;
    struct mock_req *next_delayed;
};

struct crl_svc_server {
    struct crl_api *api;
    int fd;
    struct crl_watch w;
    struct MHD_Daemon *d;
    struct crl_watch dw;
    struct relay *relays;
    struct mock_req *delayed;
};

/* ---- who calls what ---- */

/* The sandbox a connection is from and the service it was made to, or
 * NULL: from no sandbox of ours, or to nothing its spec names. */
static struct crl_sandbox *identify(struct crl_svc_server *s, int fd,
                                    const struct crl_service **svc)
{
    struct crl_host *h = s->api->host;
    struct sockaddr_in peer, dst;
    socklen_t pl = sizeof(peer), dl = sizeof(dst);
    if (!h->resolver || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0 ||
        getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) < 0 || peer.sin_family != AF_INET)
        return NULL;
    struct crl_sandbox *sb = crl_resolver_sandbox_at(h->resolver, ntohl(peer.sin_addr.s_addr));
    if (!sb || !sb->spec.services)
        return NULL;
    uint32_t a = ntohl(dst.sin_addr.s_addr);
    *svc = crl_services_at(sb->spec.services, a, ntohs(dst.sin_port));
    return *svc ? sb : NULL;
}

/* ---- the log ---- */

static void record(struct crl_sandbox *sb, json_t *x)
{
    if (!x)
        return;
    json_object_set_new(x, "seq", json_integer((json_int_t)++sb->svc_seq));
    json_object_set_new(x, "time", crl_json_time(crl_wall_s()));
    if (!sb->svc_log)
        sb->svc_log = json_array();
    if (!sb->svc_pending)
        sb->svc_pending = json_array();
    json_array_append(sb->svc_log, x);
    if (json_array_size(sb->svc_log) > CRL_SVC_LOG_MAX)
        json_array_remove(sb->svc_log, 0);
    /* A sandbox without a trajectory keeps no pending list to grow; one
     * with keeps the newest, so that a step's record stays bounded. */
    if (sb->traj) {
        json_array_append(sb->svc_pending, x);
        if (json_array_size(sb->svc_pending) > CRL_SVC_PENDING_MAX) {
            json_array_remove(sb->svc_pending, 0);
            sb->svc_dropped++;
        }
    }
    json_decref(x);
}

json_t *crl_service_take_pending(struct crl_sandbox *sb, uint64_t *dropped)
{
    json_t *a = sb->svc_pending ? sb->svc_pending : json_array();
    sb->svc_pending = NULL;
    *dropped = sb->svc_dropped;
    sb->svc_dropped = 0;
    return a;
}

/* A body as recorded: text when it is UTF-8, else base64; cut at the limit. */
static void put_body(json_t *o, const char *key, const char *data, size_t len)
{
    size_t n = len > CRL_SVC_RECORD_MAX ? CRL_SVC_RECORD_MAX : len;
    if (n < len)
        n = crl_utf8_complete_prefix(data, n);
    if (crl_utf8_valid(data, n)) {
        json_object_set_new(o, key, json_stringn(data, n));
    } else {
        size_t bl;
        char *b = crl_base64_encode(data, n, &bl);
        char k[48];
        snprintf(k, sizeof(k), "%s_base64", key);
        if (b)
            json_object_set_new(o, k, json_stringn(b, bl));
        free(b);
    }
    if (n < len)
        json_object_set_new(o, "truncated", json_true());
}

static enum MHD_Result add_value(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
    json_t *o = cls;
    if (k && crl_utf8_valid(k, strlen(k)) && (!v || crl_utf8_valid(v, strlen(v))))
        json_object_set_new(o, k, v ? json_string(v) : json_null());
    return MHD_YES;
}

/* ---- http-mock ---- */

static struct MHD_Response *mock_answer(const struct crl_service *svc,
                                        const struct crl_mock_route *rt, unsigned *status)
{
    struct MHD_Response *resp;
    if (!rt) {
        char msg[512];
        int n = snprintf(msg, sizeof(msg),
                         "{\"error\": \"mock service %s has no route for this method and path\"}",
                         svc->name);
        *status = 404;
        resp = MHD_create_response_from_buffer((size_t)n, msg, MHD_RESPMEM_MUST_COPY);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "application/json");
        return resp;
    }
    *status = rt->status;
    resp = MHD_create_response_from_buffer(rt->body_len, rt->body ? rt->body : (char *)"",
                                           MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return NULL;
    bool typed = false;
    const char *k;
    json_t *v;
    json_object_foreach(rt->headers, k, v)
    {
        MHD_add_response_header(resp, k, json_string_value(v));
        typed |= strcasecmp(k, "content-type") == 0;
    }
    if (!typed && rt->json_body)
        MHD_add_response_header(resp, "Content-Type", "application/json");
    return resp;
}

static void delayed_unlink(struct mock_req *m)
{
    for (struct mock_req **p = &m->s->delayed; *p; p = &(*p)->next_delayed)
        if (*p == m) {
            *p = m->next_delayed;
            return;
        }
}

static void on_delay(struct crl_timer *t)
{
    struct mock_req *m = t->data;
    delayed_unlink(m);
    MHD_resume_connection(m->conn); /* the handler runs again, and queues m->resp */
}

static enum MHD_Result on_mock(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    struct crl_svc_server *s = cls;
    struct mock_req *m = *con_cls;
    if (!m) {
        if (!(m = calloc(1, sizeof(*m))))
            return MHD_NO;
        m->s = s;
        m->conn = conn;
        crl_buf_init(&m->body, REQUEST_BODY_MAX);
        *con_cls = m;
        return MHD_YES;
    }
    if (*upload_size) {
        m->too_big |=
            crl_buf_append(&m->body, upload, *upload_size) < 0 || crl_buf_truncated(&m->body);
        *upload_size = 0;
        return MHD_YES;
    }
    if (m->resp) { /* its delay is over */
        enum MHD_Result r = MHD_queue_response(conn, m->status, m->resp);
        MHD_destroy_response(m->resp);
        m->resp = NULL;
        return r;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const struct crl_service *svc = NULL;
    struct crl_sandbox *sb = ci ? identify(s, ci->connect_fd, &svc) : NULL;
    if (!sb)
        return MHD_NO; /* its sandbox is gone: so is the connection */
    size_t ri = 0;
    const struct crl_mock_route *rt = m->too_big ? NULL : crl_mock_match(svc, method, url, &ri);
    unsigned status;
    struct MHD_Response *resp = mock_answer(svc, rt, &status);
    if (m->too_big) {
        if (resp)
            MHD_destroy_response(resp);
        status = 413;
        resp = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!resp)
        return MHD_NO;

    json_t *query = json_object(), *headers = json_object();
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_value, query);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, add_value, headers);
    json_t *x = json_pack("{s:s, s:s, s:s, s:o, s:o, s:i, s:o}", "service", svc->name, "method",
                          method, "path", crl_utf8_valid(url, strlen(url)) ? url : "?", "query",
                          query, "headers", headers, "status", (json_int_t)status, "route",
                          rt ? json_integer((json_int_t)ri) : json_null());
    if (x && m->body.len)
        put_body(x, "body", m->body.data, m->body.len);
    if (x && rt) {
        json_t *ro = json_object();
        if (rt->headers)
            json_object_set(ro, "headers", rt->headers);
        put_body(ro, "body", rt->body ? rt->body : "", rt->body_len);
        json_object_set_new(ro, "delay_ms", json_integer(rt->delay_ms));
        json_object_set_new(x, "response", ro);
    }
    crl_info(sb->id, "service %s: %s %s -> %u%s", svc->name, method, url, status,
             rt ? "" : " (no route)");
    record(sb, x);

    if (rt && rt->delay_ms && !m->too_big) {
        m->resp = resp;
        m->status = status;
        MHD_suspend_connection(conn);
        m->next_delayed = s->delayed;
        s->delayed = m;
        crl_timer_start(s->api->host->loop, &m->delay, (uint64_t)rt->delay_ms * 1000000ull,
                        on_delay, m);
        return MHD_YES;
    }
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static void mock_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct mock_req *m = *con_cls;
    if (!m)
        return;
    *con_cls = NULL;
    if (crl_timer_armed(&m->delay)) {
        crl_timer_stop(m->s->api->host->loop, &m->delay);
        delayed_unlink(m);
    }
    if (m->resp)
        MHD_destroy_response(m->resp);
    crl_buf_free(&m->body);
    free(m);
}

/* ---- sandbox services: the relay ---- */

static void relay_end(struct crl_pump *p)
{
    struct relay *rl = p->data;
    for (struct relay **pp = &rl->s->relays; *pp; pp = &(*pp)->next)
        if (*pp == rl) {
            *pp = rl->next;
            break;
        }
    crl_pump_stop(&rl->pump);
    close_fd(&rl->pump.fd[0]);
    close_fd(&rl->pump.fd[1]);
    free(rl);
}

static void relay_start(struct crl_svc_server *s, struct crl_sandbox *sb,
                        const struct crl_service *svc, int fd)
{
    struct crl_host *h = s->api->host;
    struct crl_err e = CRL_ERR_INIT;
    struct crl_sandbox *t = crl_host_find(h, svc->sandbox, &e);
    int netns = t && t->ops->netns && t->ops->ports_on_netns && t->state == CRL_SB_READY
                    ? t->ops->netns(t)
                    : -1;
    int to = netns >= 0 ? crl_netns_socket(h->netns, netns, SOCK_STREAM | SOCK_NONBLOCK) : -1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)svc->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct relay *rl = NULL;
    const char *why = !t ? "it is gone" : netns < 0 ? crl_sb_state_name(t->state) : NULL;
    if (!why &&
        (to < 0 || (connect(to, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)))
        why = strerror(errno);
    if (!why && !(rl = calloc(1, sizeof(*rl))))
        why = "out of memory";
    json_t *x = json_pack("{s:s, s:s, s:s, s:i}", "service", svc->name, "kind", "connection",
                          "sandbox", svc->sandbox, "port", (json_int_t)svc->port);
    if (x && why)
        json_object_set_new(x, "error", json_string(why));
    crl_info(sb->id, "service %s: a connection to port %u of sandbox %s%s%s", svc->name, svc->port,
             svc->sandbox, why ? " failed: " : "", why ? why : "");
    record(sb, x);
    if (why) {
        if (to >= 0)
            close(to);
        close(fd);
        return;
    }
    rl->s = s;
    crl_pump_init(&rl->pump, h->loop, fd, to, relay_end, rl);
    rl->next = s->relays;
    s->relays = rl;
    if (crl_pump_start(&rl->pump) < 0)
        relay_end(&rl->pump);
}

/* ---- the listener ---- */

static void on_accept(struct crl_watch *w, uint32_t events)
{
    struct crl_svc_server *s = w->data;
    for (int n = 0; n < 64; n++) {
        struct sockaddr_in peer;
        socklen_t pl = sizeof(peer);
        int fd = accept4(s->fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        const struct crl_service *svc;
        struct crl_sandbox *sb = identify(s, fd, &svc);
        if (!sb)
            close(fd); /* not a sandbox's, or to no service of its */
        else if (svc->kind == CRL_SERVICE_SANDBOX)
            relay_start(s, sb, svc, fd);
        else
            MHD_add_connection(s->d, fd, (struct sockaddr *)&peer, pl); /* closes fd if not */
    }
}

int crl_service_server_start(struct crl_api *a, struct crl_err *err)
{
    if (a->svc)
        return 0;
    uint16_t port = a->host->cfg.service_port;
    if (!port)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "services: corrald runs with no service port");
    struct crl_svc_server *s = calloc(1, sizeof(*s));
    if (!s)
        return crl_err_sys(err, ENOMEM, "services");
    s->api = a;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s->fd, 1024) < 0) {
        crl_err_sys(err, errno, "services: listen on TCP port %u (--service-port)", port);
        goto fail;
    }
    s->d =
        MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                             MHD_USE_TURBO | MHD_USE_ERROR_LOG,
                         0, NULL, NULL, on_mock, s, MHD_OPTION_EXTERNAL_LOGGER, crl_api_mhd_log, s,
                         MHD_OPTION_NOTIFY_COMPLETED, mock_done, s, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)8192,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_END);
    const union MHD_DaemonInfo *info =
        s->d ? MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!info || crl_watch_start(a->host->loop, &s->dw, info->epoll_fd, EPOLLIN, crl_api_mhd_run,
                                 s->d) < 0) {
        crl_err_set(err, CRL_E_INTERNAL, "services: libmicrohttpd would not start");
        goto fail;
    }
    if (crl_watch_start(a->host->loop, &s->w, s->fd, EPOLLIN, on_accept, s) < 0) {
        crl_err_sys(err, errno, "services: watch the listener");
        goto fail;
    }
    a->svc = s;
    crl_info(NULL, "services: listening on TCP port %u", port);
    return 0;
fail:
    a->svc = s;
    crl_service_server_stop(a);
    return -1;
}

void crl_service_server_stop(struct crl_api *a)
{
    struct crl_svc_server *s = a->svc;
    if (!s)
        return;
    struct crl_loop *loop = a->host->loop;
    crl_watch_stop(loop, &s->w);
    close_fd(&s->fd);
    while (s->relays)
        relay_end(&s->relays->pump);
    /* MHD must not be stopped with connections suspended. */
    while (s->delayed) {
        struct mock_req *m = s->delayed;
        crl_timer_stop(loop, &m->delay);
        delayed_unlink(m);
        MHD_resume_connection(m->conn);
    }
    if (s->d) {
        crl_watch_stop(loop, &s->dw);
        MHD_stop_daemon(s->d);
    }
    free(s);
    a->svc = NULL;
}

struct MHD_Daemon *crl_service_server_daemon(const struct crl_api *a)
{
    return a->svc ? a->svc->d : NULL;
}

/* ---- GET /v1/sandboxes/{id}/services ---- */

void crl_h_services(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    json_t *list = crl_services_to_json(r->sb->spec.services);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        char a[INET_ADDRSTRLEN];
        struct in_addr in = {.s_addr = htonl(crl_service_address(i))};
        inet_ntop(AF_INET, &in, a, sizeof(a));
        json_object_set_new(v, "address", json_string(a));
    }
    json_t *log = r->sb->svc_log ? json_deep_copy(r->sb->svc_log) : json_array();
    crl_err_sys(&err, ENOMEM, "services"); /* if the answer cannot be made */
    crl_req_json_or_error(r, 200,
                          json_pack("{s:o, s:o, s:I}", "services", list, "exchanges", log,
                                    "exchanges_total", (json_int_t)r->sb->svc_seq),
                          &err);
}
