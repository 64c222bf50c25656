/* One request's life on the API's side of libmicrohttpd: answers (every
 * error leaves through crl_req_error(), the one place an error becomes an
 * HTTP status and a JSON body), suspend and resume around asynchronous work,
 * streamed answers and uploads into pipes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/log.h"
#include "request.h"
#include "routes.h"

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
    if (r->step_ops && r->step_ops->capture(r, status, body))
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

void crl_req_json_or_error(struct crl_req *r, unsigned status, json_t *body,
                           const struct crl_err *err)
{
    if (body)
        crl_req_json(r, status, body);
    else
        crl_req_error(r, err);
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
    if (r->step_ops) {
        json_t *j = crl_req_error_json(err);
        if (r->step_ops->capture(r, (unsigned)status, j))
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

static void cancel(struct crl_req *r)
{
    if (r->h && r->h->cancel)
        r->h->cancel(r);
    if (r->step_ops)
        r->step_ops->cancel(r);
}

/* The client hung up while we held its connection suspended: stop what it
 * asked for (a command is killed) and let MHD find the closed socket. */
static void client_hung_up(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    crl_watch_stop(r->api->host->loop, w);
    crl_info(r->sb ? r->sb->id : NULL, "%s %s: the client hung up; cancelling", r->method, r->url);
    r->client_gone = true;
    cancel(r);
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

int crl_req_query_bool(struct crl_req *r, const char *key, bool def, bool *out, struct crl_err *err)
{
    const char *v = crl_req_query(r, key);
    *out = def;
    if (!v)
        return 0;
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = true;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = false;
    else
        return crl_err_set(err, CRL_E_INVALID, "%s must be true or false, not '%s'", key, v);
    return 0;
}

struct label_walk {
    struct crl_label_sel *ls;
    struct crl_err *err;
    bool bad;
};

static enum MHD_Result collect_label(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct label_walk *w = cls;
    (void)kind;
    if (strcmp(key, "label") != 0)
        return MHD_YES;
    if (w->ls->n >= CRL_SPEC_MAX_LABELS)
        crl_err_set(w->err, CRL_E_INVALID, "at most %d label selectors", CRL_SPEC_MAX_LABELS);
    else if (!value)
        crl_err_set(w->err, CRL_E_INVALID, "label selector needs the form key=value");
    else if (crl_label_parse(value, &w->ls->kv[w->ls->n], w->err) == 0) {
        w->ls->n++;
        return MHD_YES;
    }
    w->bad = true;
    return MHD_NO;
}

int crl_req_label_sel(struct crl_req *r, struct crl_label_sel *ls, struct crl_err *err)
{
    struct label_walk w = {ls, err, false};
    ls->n = 0;
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, collect_label, &w);
    return w.bad ? -1 : 0;
}

void crl_label_sel_free(struct crl_label_sel *ls)
{
    for (size_t i = 0; i < ls->n; i++) {
        free(ls->kv[i].key);
        free(ls->kv[i].value);
    }
    ls->n = 0;
}

/* ---- lists ---- */

#define LIST_MAX_LIMIT 10000

/* A value as it sorts: a string as it is, a whole number zero-padded, so
 * that comparing the strings compares the values. */
static void sortable(json_t *v, char *out, size_t cap)
{
    if (json_is_integer(v))
        snprintf(out, cap, "%020lld", (long long)json_integer_value(v));
    else
        snprintf(out, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

/* An item's place: its order value and key, joined by ',' (below every
 * character either holds), which is also the cursor that follows it. */
static void place_of(json_t *item, const struct crl_list_spec *ls, char *out, size_t cap)
{
    char o[128] = "", k[300];
    if (ls->order)
        sortable(json_object_get(item, ls->order), o, sizeof(o));
    sortable(json_object_get(item, ls->key), k, sizeof(k));
    snprintf(out, cap, "%s,%s", o, k);
}

struct placed {
    char place[440];
    json_t *item;
};

static int by_place(const void *a, const void *b)
{
    return strcmp(((const struct placed *)a)->place, ((const struct placed *)b)->place);
}

static json_t *labels_of(json_t *item)
{
    json_t *l = json_object_get(item, "labels");
    return l ? l : json_object_get(json_object_get(item, "spec"), "labels");
}

static bool list_wants(json_t *item, const char *state, const struct crl_label_sel *sel)
{
    const char *is = json_string_value(json_object_get(item, "state"));
    if (state && (!is || strcmp(is, state) != 0))
        return false;
    json_t *labels = labels_of(item);
    for (size_t i = 0; i < sel->n; i++) {
        const char *v = json_string_value(json_object_get(labels, sel->kv[i].key));
        if (!v || strcmp(v, sel->kv[i].value) != 0)
            return false;
    }
    return true;
}

static int list_params(struct crl_req *r, const struct crl_list_spec *ls, long *limit,
                       const char **state, struct crl_label_sel *sel, struct crl_err *err)
{
    const char *v = crl_req_query(r, "limit");
    *limit = 0;
    if (v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (!*v || *end || n < 1 || n > LIST_MAX_LIMIT)
            return crl_err_set(err, CRL_E_INVALID,
                               "limit must be a whole number from 1 to %d, "
                               "not '%s'",
                               LIST_MAX_LIMIT, v);
        *limit = n;
    }
    *state = crl_req_query(r, "state");
    if (*state) {
        bool known = false;
        for (const char *const *s = ls->states; s && *s && !known; s++)
            known = strcmp(*s, *state) == 0;
        if (!ls->states)
            return crl_err_set(err, CRL_E_INVALID, "state: %s have no state to filter by",
                               ls->items);
        if (!known) {
            char names[256] = "";
            size_t n = 0;
            for (const char *const *s = ls->states; *s && n < sizeof(names); s++)
                n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "", *s);
            return crl_err_set(err, CRL_E_INVALID, "state must be one of %s, not '%s'", names,
                               *state);
        }
    }
    if (crl_req_label_sel(r, sel, err) < 0)
        return -1;
    if (sel->n && ls->no_labels)
        return crl_err_set(err, CRL_E_INVALID, "label: %s have no labels to filter by", ls->items);
    return 0;
}

void crl_req_list(struct crl_req *r, json_t *answer, const struct crl_list_spec *ls)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_label_sel sel = {0};
    long limit = 0;
    const char *state = NULL, *cursor = crl_req_query(r, "cursor");
    json_t *items = json_object_get(answer, ls->items);
    size_t n = json_array_size(items), kept = 0;
    struct placed *all = NULL;
    if (list_params(r, ls, &limit, &state, &sel, &err) < 0)
        goto fail;
    if (n && !(all = calloc(n, sizeof(*all)))) {
        crl_err_sys(&err, ENOMEM, "a list");
        goto fail;
    }
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item)
    {
        if (!list_wants(item, state, &sel))
            continue;
        place_of(item, ls, all[kept].place, sizeof(all[kept].place));
        if (cursor && strcmp(all[kept].place, cursor) <= 0)
            continue; /* on an earlier page */
        all[kept++].item = json_incref(item);
    }
    if (kept)
        qsort(all, kept, sizeof(*all), by_place);
    json_t *page = json_array();
    size_t take = limit && (size_t)limit < kept ? (size_t)limit : kept;
    for (i = 0; i < kept; i++) {
        if (i < take)
            json_array_append(page, all[i].item);
        json_decref(all[i].item);
    }
    json_object_set_new(answer, ls->items, page);
    json_object_set_new(answer, "next_cursor",
                        take < kept ? json_string(all[take - 1].place) : json_null());
    free(all);
    crl_label_sel_free(&sel);
    crl_req_json(r, 200, answer);
    return;
fail:
    crl_label_sel_free(&sel);
    json_decref(answer);
    crl_req_error(r, &err);
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

int crl_req_pipe_body(struct crl_req *r, int fd, struct crl_watch *w, uint64_t *bytes,
                      const char *data, size_t *len)
{
    while (*len) {
        ssize_t n = write(fd, data, *len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* the reader is behind: wait for room, MHD keeps the rest */
            crl_watch_start(r->api->host->loop, w, fd, EPOLLOUT, pipe_writable, r);
            return 1;
        }
        if (n < 0)
            return -1;
        data += n;
        *len -= (size_t)n;
        if (bytes)
            *bytes += (uint64_t)n;
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
        if (r->h->drained)
            r->h->drained(r);
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

/* ---- the request's end ---- */

void crl_req_free_state(struct crl_req *r)
{
    free(r->state);
    r->state = NULL;
}

static void req_free(struct crl_req *r)
{
    if (r->resp)
        MHD_destroy_response(r->resp);
    crl_buf_free(&r->body);
    crl_buf_free(&r->out);
    if (r->h && r->h->free)
        r->h->free(r);
    if (r->step_ops)
        r->step_ops->free(r);
    if (r->sb)
        crl_sandbox_unref(r->sb);
    free(r);
}

void crl_req_pending_done(struct crl_req *r)
{
    if (--r->pending == 0 && r->gone)
        req_free(r);
}

void crl_req_finished(struct crl_req *r)
{
    if (r->hup.active)
        crl_watch_stop(r->api->host->loop, &r->hup);
    r->gone = true;
    r->suspended = false;
    cancel(r);
    if (r->pending == 0)
        req_free(r);
}
