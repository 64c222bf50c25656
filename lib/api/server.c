/* libmicrohttpd glue: listeners, authentication, routing through the route
 * table (routes.def) and request bodies; a request's entry's hooks do the
 * rest (routes.h), and request.c its answers. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../functions/functions.h"
#include "../traj/traj.h"
#include "api.h"
#include "cluster.h"
#include "proxy.h"
#include "handlers_images.h"
#include "handlers_ports.h"
#include "handlers_processes.h"
#include "service_server.h"
#include "request.h"
#include "routes.h"
#include "traj_step.h"

#define DEFAULT_MAX_BODY (16u << 20)

static void unlink_req(struct crl_req *r)
{
    for (struct crl_req **pp = &r->api->reqs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

static void request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    struct crl_req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    unlink_req(r);
    crl_req_finished(r);
}

/* The body is in: a step of a trajectory goes through it, any other
 * request to its endpoint. */
static void dispatch(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (r->body_failed) {
        crl_req_error(r, &r->body_err);
        return;
    }
    if (!r->h) { /* refused at its headers already */
        crl_err_set(&err, CRL_E_NOT_FOUND, "no such endpoint");
        crl_req_error(r, &err);
        return;
    }
    if (r->h->step && crl_step_take(r))
        return; /* answered from the trajectory, or run through it */
    r->h->run(r);
}

static enum MHD_Result queue(struct crl_req *r)
{
    struct MHD_Response *resp = r->resp;
    r->resp = NULL;
    enum MHD_Result ret = MHD_queue_response(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A request's first call: authenticate, route, size the body. */
static void begin(struct crl_req *r, const char *url)
{
    struct crl_err err = CRL_ERR_INIT;
    if (r->tcp) {
        const char *auth = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
        if (!crl_auth_bearer_ok(auth, r->api->token)) {
            crl_err_set(&err, CRL_E_UNAUTHORIZED,
                        auth ? "the bearer token is not valid"
                             : "this listener needs an 'Authorization: Bearer <token>' header");
            crl_req_error(r, &err);
            return;
        }
    }
    if (!crl_route_find(url, r->method, &r->route)) {
        crl_err_set(&err, CRL_E_NOT_FOUND, "no such endpoint: %s %s", r->method, url);
        crl_req_error(r, &err);
        return;
    }
    if (!(r->h = crl_routes_handler(r->route.entry))) {
        crl_err_set(&err, CRL_E_METHOD, "%s is not allowed on %s (allowed: %s)", r->method, url,
                    r->route.allow);
        crl_req_error(r, &err);
        return;
    }
    if (crl_proxy_route(r)) { /* another host's sandbox: passed on, body and all */
        r->body_streamed = !r->resp;
        return;
    }
    if (r->h->begin && r->h->begin(r)) {
        r->body_streamed = true; /* an archive or a file of any size */
        return;
    }
    if (r->h->body_max && r->body_limit > r->h->body_max)
        r->body_limit = r->h->body_max;
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > r->body_limit) {
        crl_err_set(&err, CRL_E_TOO_LARGE, "request body of %s bytes exceeds the limit of %zu", cl,
                    r->body_limit);
        crl_req_error(r, &err);
    }
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    struct crl_api *api = cls;
    struct crl_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        r->api = api;
        r->conn = conn;
        r->method = method;
        snprintf(r->url, sizeof(r->url), "%s", url);
        r->path = url;
        r->body_limit = api->cfg.max_body ? api->cfg.max_body : DEFAULT_MAX_BODY;
        crl_buf_init(&r->body, CRL_BUF_UNBOUNDED);
        crl_buf_init(&r->out, CRL_BUF_UNBOUNDED);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
        r->tcp = ci && ci->daemon == api->tcp_d;
        *con_cls = r;
        r->next = api->reqs;
        api->reqs = r;
        begin(r, url);
        if (r->resp)
            return queue(r);
        return MHD_YES;
    }
    if (r->resp && *upload_data_size) {
        /* Answered already (an upload that failed): MHD takes no response
         * while a body is coming, so read the rest and answer at its end. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->resp)
        return queue(r);
    if (*upload_data_size) {
        if (r->body_streamed) {
            if (r->h->body(r, upload_data, upload_data_size) < 0)
                crl_req_suspend(r); /* not ready for it yet: MHD hands it again on resume */
            return MHD_YES;
        }
        if (!r->body_failed && r->body.len + *upload_data_size > r->body_limit) {
            r->body_failed = true;
            crl_err_set(&r->body_err, CRL_E_TOO_LARGE,
                        "request body exceeds the limit of %zu bytes", r->body_limit);
            crl_buf_free(&r->body);
        }
        if (!r->body_failed && crl_buf_append(&r->body, upload_data, *upload_data_size) < 0) {
            r->body_failed = true;
            crl_err_set(&r->body_err, CRL_E_INTERNAL, "out of memory for the request body");
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!r->dispatched) {
        r->dispatched = true;
        dispatch(r);
        if (r->resp)
            return queue(r);
    } else if (r->h && r->h->resumed && !r->resp) {
        /* it waited for something (the sandbox, room in a pipe) and was resumed */
        r->h->resumed(r);
        if (r->resp)
            return queue(r);
    }
    if (!r->resp && !r->streaming)
        crl_req_suspend(r);
    return MHD_YES;
}

/* ---- listeners ---- */

void crl_api_mhd_run(struct crl_watch *w, uint32_t ev)
{
    MHD_run(w->data);
}

static int prepare(struct crl_loop *loop, void *data)
{
    struct crl_api *a = data;
    int wait = -1;
    struct MHD_Daemon *ds[3] = {a->unix_d, a->tcp_d, crl_service_server_daemon(a)};
    for (int i = 0; i < 3; i++) {
        if (!ds[i])
            continue;
        /* Resumed connections are processed here, not by an event. */
        MHD_run(ds[i]);
        MHD_UNSIGNED_LONG_LONG t;
        if (MHD_get_timeout(ds[i], &t) == MHD_YES && (wait < 0 || t < (unsigned long long)wait))
            wait = t > 60000 ? 60000 : (int)t;
    }
    return wait;
}

void crl_api_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    crl_debug(NULL, "libmicrohttpd: %s", msg);
}

static struct MHD_Daemon *start_daemon(struct crl_api *a, int fd, struct crl_watch *w,
                                       struct crl_err *err)
{
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_TURBO |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, access_handler, a, MHD_OPTION_EXTERNAL_LOGGER, crl_api_mhd_log, a,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, request_completed, a,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)16384,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024), MHD_OPTION_END);
    if (!d) {
        crl_err_set(err, CRL_E_INTERNAL, "libmicrohttpd would not start");
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info ||
        crl_watch_start(a->host->loop, w, info->epoll_fd, EPOLLIN, crl_api_mhd_run, d) < 0) {
        MHD_stop_daemon(d);
        crl_err_set(err, CRL_E_INTERNAL, "watching libmicrohttpd's epoll descriptor");
        return NULL;
    }
    return d;
}

static int listen_unix(struct crl_api *a, const char *path, struct crl_err *err)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sun.sun_path))
        return crl_err_set(err, CRL_E_INVALID, "socket path %s is too long", path);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (crl_mkdir_p(dir, 0755) < 0)
            return crl_err_sys(err, errno, "mkdir %s", dir);
    }
    /* A stale socket of a dead corrald; a live one holds the state lock. */
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "socket(AF_UNIX)");
    mode_t old = umask(0177); /* root only */
    int r = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    umask(old);
    if (r < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        return crl_err_sys(err, e, "listening on %s", path);
    }
    a->unix_fd = fd;
    snprintf(a->unix_path, sizeof(a->unix_path), "%s", path);
    return 0;
}

static int listen_tcp(struct crl_api *a, const char *addr, struct crl_err *err)
{
    struct sockaddr_storage ss;
    unsigned len;
    bool loopback;
    if (crl_parse_listen(addr, &ss, &len, &loopback) < 0)
        return crl_err_set(err, CRL_E_INVALID, "--listen '%s' is not HOST:PORT", addr);
    if (!loopback && !a->cfg.allow_remote)
        return crl_err_set(err, CRL_E_INVALID,
                           "--listen %s is not a loopback address; pass --allow-remote to listen "
                           "beyond this host",
                           addr);
    if (!a->token || !*a->token)
        return crl_err_set(err, CRL_E_INVALID, "a TCP listener needs a token (--token-file)");
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        return crl_err_sys(err, e, "listening on %s", addr);
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
        a->tcp_port =
            ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                             : ((struct sockaddr_in6 *)&bound)->sin6_port);
    a->tcp_fd = fd;
    return 0;
}

/* corral-import: as configured, else next to this program, as the spawner
 * is.  A missing one fails imports (501), not the daemon. */
static int importer_path(struct crl_api *a, struct crl_err *err)
{
    if (a->cfg.importer_path) {
        snprintf(a->importer_path, sizeof(a->importer_path), "%s", a->cfg.importer_path);
        return 0;
    }
    return crl_sibling_path("corral-import", a->importer_path, sizeof(a->importer_path), err);
}

/* An adopted sandbox that recorded a trajectory records it again, from
 * where it stood; if the trajectory went on without it (another host
 * resumed it while this one was away), it is destroyed, saying why: two
 * sandboxes never record one trajectory. */
static void reattach(struct crl_api *a, struct crl_sandbox *sb)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_traj *t = NULL;
    struct crl_traj_sb *s = NULL;
    if (crl_traj_open(a->trajs, sb->spec.trajectory, &sb->spec, NULL, false, &t, &err) == 0 &&
        (s = crl_traj_sb_get(a->trajs, sb, &err)) &&
        crl_traj_reattach(s, t, json_object_get(sb->notes, "trajectory"), &err) == 0) {
        crl_info(sb->id, "trajectory %s: recording again at step %u", t->id, s->cursor);
        return;
    }
    if (t && (!s || s->traj != t))
        crl_traj_close(t);
    crl_warn(sb->id, "trajectory %s: %s: destroying it", sb->spec.trajectory, err.msg);
    snprintf(sb->message, sizeof(sb->message), "%s", err.msg);
    crl_host_destroy(a->host, sb, "trajectory_lost", NULL, NULL, NULL);
}

int crl_api_start(struct crl_host *h, const struct crl_api_config *cfg, struct crl_api **out,
                  struct crl_err *err)
{
    struct crl_api *a = calloc(1, sizeof(*a));
    if (!a)
        return crl_err_sys(err, ENOMEM, "api");
    a->host = h;
    a->cfg = *cfg;
    a->unix_fd = a->tcp_fd = -1;
    if (cfg->token && !(a->token = strdup(cfg->token))) {
        free(a);
        return crl_err_sys(err, ENOMEM, "api");
    }
    if (importer_path(a, err) < 0)
        goto fail;
    char fdir[4200];
    snprintf(fdir, sizeof(fdir), "%s/functions", h->state_dir);
    if (!(a->functions = crl_functions_new(fdir)) || !(a->idem = crl_idem_new())) {
        crl_err_sys(err, ENOMEM, "api");
        goto fail;
    }
    if (crl_trajs_open(cfg->shared_dir ? cfg->shared_dir : h->state_dir, h->loop, &a->trajs, err) <
        0)
        goto fail;
    crl_trajs_gc_every(a->trajs, cfg->checkpoint_gc_s);
    /* Sandboxes adopted from the run before may have trajectories to
     * record, services to answer, and Idempotency-Keys to replay. */
    for (struct crl_sandbox *sb = h->sandboxes; sb; sb = sb->next) {
        if (sb->spec.trajectory[0])
            reattach(a, sb);
        json_t *idem = json_object_get(sb->notes, "idempotency");
        if (idem)
            crl_idem_restore(a->idem, json_string_value(json_object_get(idem, "key")),
                             json_string_value(json_object_get(idem, "digest")),
                             json_real_value(json_object_get(idem, "at")), sb->id);
        if (sb->spec.services && crl_service_server_start(a, err) < 0)
            goto fail;
    }
    if (cfg->tcp_listen && listen_tcp(a, cfg->tcp_listen, err) < 0)
        goto fail;
    if (cfg->unix_path && listen_unix(a, cfg->unix_path, err) < 0)
        goto fail;
    /* A daemon owns its listening socket: MHD_stop_daemon() closes it. */
    if (a->unix_fd >= 0) {
        if (!(a->unix_d = start_daemon(a, a->unix_fd, &a->unix_w, err)))
            goto fail;
        a->unix_fd = -1;
    }
    if (a->tcp_fd >= 0) {
        if (!(a->tcp_d = start_daemon(a, a->tcp_fd, &a->tcp_w, err)))
            goto fail;
        a->tcp_fd = -1;
    }
    if (cfg->cluster_etcd) {
        struct crl_cluster_config cc = {cfg->cluster_etcd, cfg->advertise, cfg->cluster_lease_s};
        if (crl_cluster_start(a, &cc, &a->cluster, err) < 0)
            goto fail;
    }
    crl_loop_set_prepare(h->loop, prepare, a);
    *out = a;
    return 0;
fail:
    crl_api_stop(a);
    return -1;
}

unsigned crl_api_tcp_port(const struct crl_api *a)
{
    return a->tcp_port;
}

void crl_api_stop(struct crl_api *a)
{
    if (!a)
        return;
    crl_loop_set_prepare(a->host->loop, NULL, NULL);
    crl_cluster_stop(a->cluster); /* the others see this host leave */
    /* MHD must not be stopped with connections suspended. */
    for (struct crl_req *r = a->reqs; r; r = r->next)
        crl_req_resume(r);
    crl_h_ports_stop(a); /* MHD stops with no upgraded connection open */
    crl_h_processes_stop(a);
    crl_service_server_stop(a);
    if (a->unix_d) {
        crl_watch_stop(a->host->loop, &a->unix_w);
        MHD_stop_daemon(a->unix_d);
    }
    if (a->tcp_d) {
        crl_watch_stop(a->host->loop, &a->tcp_w);
        MHD_stop_daemon(a->tcp_d);
    }
    crl_h_images_stop(a);
    crl_functions_free(a->functions);
    /* Sandboxes outlive the API by a moment: their trajectories end now. */
    for (struct crl_sandbox *sb = a->host->sandboxes; sb; sb = sb->next)
        if (sb->traj && sb->on_gone) {
            void (*gone)(struct crl_sandbox *) = sb->on_gone;
            sb->on_gone = NULL;
            gone(sb);
        }
    crl_trajs_close(a->trajs);
    if (a->unix_fd >= 0)
        close(a->unix_fd);
    if (a->unix_path[0])
        unlink(a->unix_path);
    if (a->tcp_fd >= 0)
        close(a->tcp_fd);
    crl_idem_free(a->idem);
    free(a->token);
    free(a);
}
