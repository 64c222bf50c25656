/* libmicrohttpd glue: listeners, authentication, request bodies, suspend
 * and resume around asynchronous work, and the simple endpoints.  Every
 * error leaves through crl_req_error(), the one place an error becomes an
 * HTTP status and a JSON body. */
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
#include "../traj/traj.h"
#include "api.h"
#include "request.h"

#define DEFAULT_MAX_BODY (16u << 20)

/* ---- responses ---- */

void crl_req_respond(struct crl_req *r, unsigned status, struct MHD_Response *resp)
{
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = status;
    if (r->suspended)
        crl_req_resume(r);
}

void crl_req_json(struct crl_req *r, unsigned status, json_t *body)
{
    if (crl_traj_capture(r, status, body))
        return; /* a trajectory's step: recorded first, answered then */
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s) {
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_INTERNAL, "encoding the response");
        crl_req_error(r, &e);
        return;
    }
    size_t len = strlen(s);
    s[len] = 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    crl_req_respond(r, status, resp);
}

json_t *crl_req_error_json(const struct crl_err *err)
{
    /* A message may quote what a client sent (a path, a URL), in any bytes:
     * JSON takes UTF-8 only. */
    char msg[sizeof(err->msg)];
    snprintf(msg, sizeof(msg), "%s", err->msg);
    crl_utf8_sanitize(msg);
    return json_pack("{s:{s:s, s:s}}", "error", "code", crl_errc_name(err->code), "message", msg);
}

void crl_req_error(struct crl_req *r, const struct crl_err *err)
{
    int status = crl_errc_http_status(err->code);
    if (r->tcall) {
        json_t *j = crl_req_error_json(err);
        if (crl_traj_capture(r, (unsigned)status, j))
            return; /* a trajectory's step: recorded first, answered then */
        json_decref(j);
    }
    json_t *body = crl_req_error_json(err);
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s)
        s = strdup("{\"error\":{\"code\":\"internal\",\"message\":\"an error\"}}");
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(s ? strlen(s) : 0, s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (err->code == CRL_E_CAPACITY || err->code == CRL_E_UNAVAILABLE) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", r->api->host->cfg.retry_after_s);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    if (err->code == CRL_E_UNAUTHORIZED)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (err->code == CRL_E_METHOD && r->route.allow)
        MHD_add_response_header(resp, "Allow", r->route.allow);
    if (status >= 500 && status != 503)
        crl_warn(r->sb ? r->sb->id : NULL, "%s %s: %d %s", r->method, r->url, status, err->msg);
    crl_req_respond(r, (unsigned)status, resp);
}

/* The client hung up while we held its connection suspended: stop what it
 * asked for (a command is killed) and let MHD find the closed socket. */
static void client_hung_up(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    crl_watch_stop(r->api->host->loop, w);
    crl_info(r->sb ? r->sb->id : NULL, "%s %s: the client hung up; cancelling", r->method, r->url);
    r->client_gone = true;
    crl_h_exec_cleanup(r);
    crl_h_files_cleanup(r);
    crl_h_images_cleanup(r);
    crl_h_functions_cleanup(r);
    crl_h_traj_cleanup(r);
    r->out_done = r->out_error = true;
    if (!r->resp && !r->streaming) {
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_INTERNAL, "the client closed the connection");
        crl_req_error(r, &e); /* resumes */
    } else {
        crl_req_resume(r);
    }
}

void crl_req_suspend(struct crl_req *r)
{
    if (r->suspended || r->gone)
        return;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci && !r->hup.active)
        crl_watch_start(r->api->host->loop, &r->hup, ci->connect_fd, EPOLLRDHUP, client_hung_up, r);
}

void crl_req_resume(struct crl_req *r)
{
    if (r->hup.active)
        crl_watch_stop(r->api->host->loop, &r->hup);
    if (r->suspended && !r->gone) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

const char *crl_req_query(struct crl_req *r, const char *key)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

int crl_req_sandbox(struct crl_req *r, struct crl_err *err)
{
    if (r->sb && strcmp(r->sb->id, r->route.id) == 0)
        return 0; /* looked up already (a trajectory's step) */
    struct crl_sandbox *sb = crl_host_find(r->api->host, r->route.id, err);
    if (!sb)
        return -1;
    crl_sandbox_ref(sb);
    r->sb = sb;
    return 0;
}

int crl_req_stream_json(struct crl_req *r, json_t *line)
{
    char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    json_decref(line);
    if (!text)
        return -1;
    crl_req_stream_append(r, text, strlen(text));
    crl_req_stream_append(r, "\n", 1);
    free(text);
    return 0;
}

/* ---- uploads into a pipe ---- */

static void pipe_writable(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    crl_watch_stop(r->api->host->loop, w);
    crl_req_resume(r);
}

int crl_req_pipe_body(struct crl_req *r, int fd, const char *data, size_t *len)
{
    while (*len) {
        ssize_t n = write(fd, data, *len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* the reader is behind: wait for room, MHD keeps the rest */
            crl_watch_start(r->api->host->loop, &r->w, fd, EPOLLOUT, pipe_writable, r);
            return 1;
        }
        if (n < 0)
            return -1;
        data += n;
        *len -= (size_t)n;
        r->bytes += (uint64_t)n;
    }
    return 0;
}

/* ---- streamed responses ---- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct crl_req *r = cls;
    if (r->out.len) {
        size_t n = r->out.len < max ? r->out.len : max;
        memcpy(buf, r->out.data, n);
        crl_buf_consume(&r->out, n);
        crl_h_files_drained(r);
        crl_h_exec_drained(r);
        return (ssize_t)n;
    }
    if (r->out_done)
        return r->out_error ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    /* Nothing yet: sleep until crl_req_stream_append() wakes us. */
    crl_req_suspend(r);
    return 0;
}

struct MHD_Response *crl_req_stream_response(struct crl_req *r, const char *content_type)
{
    r->streaming = true;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_reader, r, NULL);
    MHD_add_response_header(resp, "Content-Type", content_type);
    return resp;
}

void crl_req_stream_append(struct crl_req *r, const char *data, size_t len)
{
    if (r->gone)
        return;
    crl_buf_append(&r->out, data, len);
    if (r->resp == NULL)
        crl_req_resume(r);
}

void crl_req_stream_end(struct crl_req *r, bool error)
{
    r->out_done = true;
    r->out_error = error;
    if (r->resp == NULL)
        crl_req_resume(r);
}

/* ---- the request's life ---- */

static void req_free(struct crl_req *r)
{
    if (r->resp)
        MHD_destroy_response(r->resp);
    crl_buf_free(&r->body);
    crl_buf_free(&r->out);
    crl_traj_req_free(r);
    if (r->sb)
        crl_sandbox_unref(r->sb);
    free(r);
}

void crl_req_pending_done(struct crl_req *r)
{
    if (--r->pending == 0 && r->gone)
        req_free(r);
}

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
    if (r->hup.active)
        crl_watch_stop(r->api->host->loop, &r->hup);
    r->gone = true;
    r->suspended = false;
    crl_h_exec_cleanup(r);
    crl_h_files_cleanup(r);
    crl_h_images_cleanup(r);
    crl_h_functions_cleanup(r);
    crl_h_traj_cleanup(r);
    if (r->pending == 0)
        req_free(r);
}

/* ---- simple endpoints ---- */

struct label_sel {
    struct crl_kv kv[CRL_SPEC_MAX_LABELS];
    size_t n;
    struct crl_err *err;
    int bad;
};

static enum MHD_Result collect_labels(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    struct label_sel *ls = cls;
    if (strcmp(key, "label") != 0)
        return MHD_YES;
    if (!value || ls->n >= CRL_SPEC_MAX_LABELS ||
        crl_label_parse(value, &ls->kv[ls->n], ls->err) < 0) {
        if (ls->n >= CRL_SPEC_MAX_LABELS)
            crl_err_set(ls->err, CRL_E_INVALID, "at most %d label selectors", CRL_SPEC_MAX_LABELS);
        else if (!value)
            crl_err_set(ls->err, CRL_E_INVALID, "label selector needs the form key=value");
        ls->bad = 1;
        return MHD_NO;
    }
    ls->n++;
    return MHD_YES;
}

static void h_list(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct label_sel ls = {.err = &err};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, collect_labels, &ls);
    if (ls.bad)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 200, crl_host_list_json(r->api->host, ls.kv, ls.n));
    for (size_t i = 0; i < ls.n; i++) {
        free(ls.kv[i].key);
        free(ls.kv[i].value);
    }
}

static void created(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    struct crl_err terr = CRL_ERR_INIT;
    if (err) {
        crl_traj_create_abort(r); /* a new trajectory goes with the sandbox */
        if (!r->gone && !r->client_gone)
            crl_req_error(r, err);
    } else if (r->gone || r->client_gone) {
        /* The client left before its sandbox was ready: nobody knows its id. */
        crl_host_destroy(sb->host, sb, "client_gone", NULL, NULL, NULL);
    } else if (crl_traj_create_end(r, sb, &terr) < 0) {
        crl_host_destroy(sb->host, sb, "trajectory_failed", NULL, NULL, NULL);
        crl_req_error(r, &terr);
    } else {
        crl_req_json(r, 201, crl_traj_sandbox_json(sb, crl_sandbox_json(sb)));
    }
    crl_req_pending_done(r);
}

static void h_create(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_spec spec;
    if (crl_spec_parse(r->body.data, r->body.len, &spec, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    if (spec.trajectory[0] && crl_traj_create_begin(r, &spec, &err) < 0) {
        crl_spec_free(&spec);
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_host_create(r->api->host, &spec, created, r, &err) < 0) {
        r->pending--;
        crl_spec_free(&spec);
        crl_traj_create_abort(r);
        crl_req_error(r, &err);
    }
}

static void destroyed(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    if (!r->gone)
        crl_req_json(r, 200, crl_sandbox_json(sb));
    crl_req_pending_done(r);
}

static void h_sandbox(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    if (strcmp(r->method, "GET") == 0) {
        crl_req_json(r, 200, crl_traj_sandbox_json(r->sb, crl_sandbox_json(r->sb)));
        return;
    }
    r->pending++;
    if (crl_host_destroy(r->api->host, r->sb, "destroyed", destroyed, r, &err) < 0) {
        r->pending--;
        crl_req_error(r, &err);
    }
}

static void session_closed(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    struct crl_session *s = crl_session_find(r->sb, r->route.sub, &err);
    if (!s) {
        crl_req_error(r, &err);
        return;
    }
    json_t *j = crl_session_json(s);
    crl_session_close(s);
    json_object_set_new(j, "alive", json_false());
    crl_req_json(r, 200, j);
}

struct crl_trajs *crl_api_trajs(struct crl_api *a)
{
    return a->trajs;
}

static void h_action(struct crl_req *r)
{
    if (strcmp(r->route.sub, "pause") == 0)
        crl_h_pause(r);
    else if (strcmp(r->route.sub, "resume") == 0)
        crl_h_resume(r);
    else if (strcmp(r->route.sub, "snapshot") == 0)
        crl_h_snapshot(r);
    else
        crl_h_fork(r);
}

/* The endpoints that are a trajectory's steps, run live. */
void crl_req_run_step(struct crl_req *r)
{
    switch (r->route.ep) {
    case CRL_EP_EXEC: crl_h_exec(r); return;
    case CRL_EP_SESSIONS: crl_h_session_open(r); return;
    case CRL_EP_SESSION: session_closed(r); return;
    case CRL_EP_SESSION_RUN: crl_h_session_run(r); return;
    case CRL_EP_FILES: crl_h_files_end(r); return;
    case CRL_EP_SANDBOX_ACTION: crl_h_snapshot(r); return;
    default: return;
    }
}

static void dispatch(struct crl_req *r)
{
    struct crl_host *h = r->api->host;
    struct crl_err err = CRL_ERR_INIT;
    if (r->body_failed) {
        crl_req_error(r, &r->body_err);
        return;
    }
    bool get = strcmp(r->method, "GET") == 0;
    if (crl_traj_take(r))
        return; /* a step of a trajectory: answered from it, or run through it */
    switch (r->route.ep) {
    case CRL_EP_TRAJECTORIES:
    case CRL_EP_TRAJECTORY:
    case CRL_EP_TRAJECTORY_STEPS:
    case CRL_EP_TRAJECTORY_GC: crl_h_trajectories(r); return;
    case CRL_EP_HEALTHZ:
        crl_req_json(r, 200, json_pack("{s:s, s:s}", "status", "ok", "host_id", h->cfg.host_id));
        return;
    case CRL_EP_METRICS: {
        struct crl_buf b;
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        char *hm = crl_host_metrics(h);
        if (hm)
            crl_buf_append(&b, hm, strlen(hm));
        free(hm);
        crl_trajs_metrics(r->api->trajs, &b);
        crl_buf_append(&b, "", 1);
        char *m = b.data;
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(m ? strlen(m) : 0, m ? m : (char *)"",
                                            m ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
        crl_req_respond(r, 200, resp);
        return;
    }
    case CRL_EP_HOST: crl_req_json(r, 200, crl_host_info_json(h)); return;
    case CRL_EP_IMAGES:
    case CRL_EP_IMAGE:
    case CRL_EP_IMAGE_TAG:
    case CRL_EP_IMAGE_GC: crl_h_images(r); return;
    case CRL_EP_SANDBOXES: get ? h_list(r) : h_create(r); return;
    case CRL_EP_SANDBOX: h_sandbox(r); return;
    case CRL_EP_EXEC: crl_h_exec(r); return;
    case CRL_EP_SESSIONS:
        if (get) {
            if (crl_req_sandbox(r, &err) < 0)
                crl_req_error(r, &err);
            else
                crl_req_json(r, 200, crl_session_list_json(r->sb));
        } else {
            crl_h_session_open(r);
        }
        return;
    case CRL_EP_SESSION: session_closed(r); return;
    case CRL_EP_SESSION_RUN: crl_h_session_run(r); return;
    case CRL_EP_FILES: crl_h_files_end(r); return;
    case CRL_EP_SANDBOX_ACTION: h_action(r); return;
    case CRL_EP_FUNCTIONS:
    case CRL_EP_FUNCTION:
    case CRL_EP_FUNCTION_CALL: crl_h_functions(r); return;
    case CRL_EP_NONE:
    case CRL_EP__COUNT: break;
    }
    crl_err_set(&err, CRL_E_NOT_FOUND, "no such endpoint");
    crl_req_error(r, &err);
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
    if (!crl_route_match(url, &r->route)) {
        crl_err_set(&err, CRL_E_NOT_FOUND, "no such endpoint: %s %s", r->method, url);
        crl_req_error(r, &err);
        return;
    }
    if (!crl_route_allows(&r->route, r->method)) {
        crl_err_set(&err, CRL_E_METHOD, "%s is not allowed on %s (allowed: %s)", r->method, url,
                    r->route.allow);
        crl_req_error(r, &err);
        return;
    }
    if (r->route.ep == CRL_EP_FILES && strcmp(r->method, "PUT") == 0 && !crl_traj_holds_upload(r)) {
        crl_h_files_begin(r);
        return;
    }
    if (r->route.ep == CRL_EP_IMAGES && strcmp(r->method, "POST") == 0) {
        crl_h_images_import_begin(r); /* an archive of any size, streamed */
        return;
    }
    if (r->route.ep == CRL_EP_FUNCTION_CALL && r->body_limit > CRL_FUNCTION_MAX_ARGS)
        r->body_limit = CRL_FUNCTION_MAX_ARGS; /* a call's arguments */
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
        r->fd = -1;
        r->stream.data_fd = r->stream.msg_fd = -1;
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
        if (r->route.ep == CRL_EP_FILES && !r->body_held) {
            if (crl_h_files_body(r, upload_data, upload_data_size) < 0)
                crl_req_suspend(r); /* not ready for it yet: MHD hands it again on resume */
            return MHD_YES;
        }
        if (r->import) {
            if (crl_h_images_import_body(r, upload_data, upload_data_size) < 0)
                crl_req_suspend(r); /* the importer is behind: MHD hands it again on resume */
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
    } else if (r->route.ep == CRL_EP_FILES && !r->resp) {
        /* a files request waiting on the sandbox asked to be called again */
        crl_h_files_end(r);
        if (r->resp)
            return queue(r);
    }
    if (!r->resp && !r->streaming)
        crl_req_suspend(r);
    return MHD_YES;
}

/* ---- listeners ---- */

static void on_daemon(struct crl_watch *w, uint32_t ev)
{
    MHD_run(w->data);
}

static int prepare(struct crl_loop *loop, void *data)
{
    struct crl_api *a = data;
    int wait = -1;
    struct MHD_Daemon *ds[2] = {a->unix_d, a->tcp_d};
    for (int i = 0; i < 2; i++) {
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

static void mhd_log(void *cls, const char *fmt, va_list ap)
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
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        access_handler, a, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, a, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, a, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)16384,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024), MHD_OPTION_END);
    if (!d) {
        crl_err_set(err, CRL_E_INTERNAL, "libmicrohttpd would not start");
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info || crl_watch_start(a->host->loop, w, info->epoll_fd, EPOLLIN, on_daemon, d) < 0) {
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
    if (!(a->functions = crl_functions_new(fdir))) {
        crl_err_sys(err, ENOMEM, "api");
        goto fail;
    }
    if (crl_trajs_open(h->state_dir, h->loop, &a->trajs, err) < 0)
        goto fail;
    crl_trajs_gc_every(a->trajs, cfg->checkpoint_gc_s);
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
    /* MHD must not be stopped with connections suspended. */
    for (struct crl_req *r = a->reqs; r; r = r->next)
        crl_req_resume(r);
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
    free(a->token);
    free(a);
}
