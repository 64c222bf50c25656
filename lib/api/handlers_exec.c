/* POST .../exec, and sessions: buffered JSON results or NDJSON streams. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/exec.h"
#include "../core/session.h"
#include "../util/cleanup.h"
#include "../util/log.h"
#include "handlers_exec.h"
#include "request.h"

/* NDJSON waiting for a slow client: above this, the command is held back. */
#define STREAM_HIGH (1u << 20)

/* A command's request state (r->state): what runs, and its output's way
 * out. */
struct run {
    struct crl_exec *exec;       /* while a command runs */
    struct crl_session *session; /* while a session's command runs */
    bool out_paused;             /* the command's output is held back until the client reads */
    char carry[2][4];            /* an incomplete UTF-8 sequence held for the next chunk */
    size_t carry_len[2];
};

static struct run *run_new(struct crl_req *r, struct crl_err *err)
{
    struct run *x = calloc(1, sizeof(*x));
    if (!x) {
        crl_err_sys(err, ENOMEM, "a command");
        return NULL;
    }
    r->state = x;
    return x;
}

/* One NDJSON line of output.  A UTF-8 sequence cut by a read is held back
 * for the next chunk, so text stays text. */
static void stream_chunk(struct crl_req *r, enum crl_exec_stream s, const char *data, size_t len,
                         bool flush)
{
    struct run *x = r->state;
    int i = s == CRL_STDOUT ? 0 : 1;
    const char *key = i == 0 ? "stdout" : "stderr";
    size_t total = x->carry_len[i] + len;
    cleanup_free char *joined = malloc(total ? total : 1);
    if (!joined)
        return;
    memcpy(joined, x->carry[i], x->carry_len[i]);
    memcpy(joined + x->carry_len[i], data, len);
    size_t use = flush ? total : crl_utf8_complete_prefix(joined, total);
    x->carry_len[i] = total - use;
    memcpy(x->carry[i], joined + use, x->carry_len[i]);
    if (!use)
        return;
    crl_req_stream_json(r, crl_output_json(key, joined, use));
    if (!x->out_paused && r->out.len > STREAM_HIGH) {
        x->out_paused = true;
        if (x->exec)
            crl_exec_pause_output(x->exec, true);
        else if (x->session)
            crl_session_pause_output(x->session, true);
    }
}

void crl_h_exec_drained(struct crl_req *r)
{
    struct run *x = r->state;
    if (x && x->out_paused && r->out.len < STREAM_HIGH / 4) {
        x->out_paused = false;
        if (x->exec)
            crl_exec_pause_output(x->exec, false);
        else if (x->session)
            crl_session_pause_output(x->session, false);
    }
}

static void on_start(void *ctx)
{
    struct crl_req *r = ctx;
    if (r->gone)
        return;
    crl_req_respond(r, 200, crl_req_stream_response(r, "application/x-ndjson"));
}

static void on_output(void *ctx, enum crl_exec_stream s, const char *data, size_t len)
{
    stream_chunk(ctx, s, data, len, false);
}

static void on_done(void *ctx, const struct crl_exec_result *res, const struct crl_err *err)
{
    struct crl_req *r = ctx;
    struct run *x = r->state;
    x->exec = NULL;
    if (!r->gone) {
        if (err) {
            crl_req_error(r, err);
        } else {
            json_t *j = crl_exec_result_json(res, !r->streaming);
            if (x->session) {
                json_object_set_new(j, "session_id", json_string(crl_session_id(x->session)));
                json_object_set_new(j, "session_alive",
                                    json_boolean(crl_session_alive(x->session)));
            }
            if (r->streaming) {
                stream_chunk(r, CRL_STDOUT, "", 0, true);
                stream_chunk(r, CRL_STDERR, "", 0, true);
                crl_req_stream_end(r, crl_req_stream_json(r, json_pack("{s:o}", "result", j)) < 0);
            } else {
                crl_req_json(r, 200, j);
            }
        }
    }
    x->session = NULL;
    crl_req_pending_done(r);
}

static const struct crl_exec_cbs buffered_cbs = {.on_done = on_done};
static const struct crl_exec_cbs stream_cbs = {
    .on_start = on_start, .on_output = on_output, .on_done = on_done};

void crl_h_exec(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_exec_req req;
    struct run *x;
    if (crl_req_sandbox(r, &err) < 0 || !(x = run_new(r, &err)) ||
        crl_exec_req_parse(r->body.data, r->body.len, CRL_EXEC_KIND_EXEC, &req, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    bool stream = req.stream;
    r->pending++;
    x->exec = crl_exec_start(r->sb, &req, stream ? &stream_cbs : &buffered_cbs, r, &err);
    if (!x->exec) {
        r->pending--;
        crl_req_error(r, &err);
    }
}

static void session_opened(struct crl_session *s, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    if (!r->gone && !r->client_gone) {
        if (err)
            crl_req_error(r, err);
        else
            crl_req_json(r, 201, crl_session_json(s));
    } else if (s) {
        crl_session_close(s); /* nobody knows its id */
    }
    crl_req_pending_done(r);
}

void crl_h_session_open(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_session_req req;
    if (crl_req_sandbox(r, &err) < 0 ||
        crl_session_req_parse(r->body.data, r->body.len, &req, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_session_open(r->sb, &req, session_opened, r, &err) < 0) {
        r->pending--;
        crl_req_error(r, &err);
    }
    crl_session_req_free(&req);
}

void crl_h_session_run(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_exec_req req;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    struct crl_session *s = crl_session_find(r->sb, r->route.sub, &err);
    struct run *x;
    if (!s || !(x = run_new(r, &err)) ||
        crl_exec_req_parse(r->body.data, r->body.len, CRL_EXEC_KIND_SESSION, &req, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    x->session = s;
    r->pending++;
    if (crl_session_run(s, &req, req.stream ? &stream_cbs : &buffered_cbs, r, &err) < 0) {
        r->pending--;
        x->session = NULL;
        crl_req_error(r, &err);
    }
}

void crl_h_exec_cancel(struct crl_req *r)
{
    struct run *x = r->state;
    if (x && x->exec) {
        crl_exec_cancel(x->exec);
        x->exec = NULL;
        r->pending--;
    }
    if (x && x->session) {
        crl_session_cancel_run(x->session);
        x->session = NULL;
        r->pending--;
    }
}

void crl_h_sessions_list(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_list(r, crl_session_list_json(r->sb),
                     &(const struct crl_list_spec){
                         .items = "sessions", .key = "session_id", .no_labels = true});
}

void crl_h_session_close(struct crl_req *r)
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
