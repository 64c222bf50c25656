/* POST .../exec, and sessions: buffered JSON results or NDJSON streams. */
#include <stdlib.h>
#include <string.h>

#include "../util/cleanup.h"
#include "../util/log.h"
#include "request.h"

/* NDJSON waiting for a slow client: above this, the command is held back. */
#define STREAM_HIGH (1u << 20)

/* One NDJSON line of output.  A UTF-8 sequence cut by a read is held back
 * for the next chunk, so text stays text. */
static void stream_chunk(struct crl_req *r, enum crl_exec_stream s, const char *data, size_t len,
                         bool flush)
{
    int i = s == CRL_STDOUT ? 0 : 1;
    const char *key = i == 0 ? "stdout" : "stderr";
    size_t total = r->carry_len[i] + len;
    cleanup_free char *joined = malloc(total ? total : 1);
    if (!joined)
        return;
    memcpy(joined, r->carry[i], r->carry_len[i]);
    memcpy(joined + r->carry_len[i], data, len);
    size_t use = flush ? total : crl_utf8_complete_prefix(joined, total);
    r->carry_len[i] = total - use;
    memcpy(r->carry[i], joined + use, r->carry_len[i]);
    if (!use)
        return;
    crl_req_stream_json(r, crl_output_json(key, joined, use));
    if (!r->out_paused && r->out.len > STREAM_HIGH) {
        r->out_paused = true;
        if (r->exec)
            crl_exec_pause_output(r->exec, true);
        else if (r->session)
            crl_session_pause_output(r->session, true);
    }
}

void crl_h_exec_drained(struct crl_req *r)
{
    if (r->out_paused && r->out.len < STREAM_HIGH / 4) {
        r->out_paused = false;
        if (r->exec)
            crl_exec_pause_output(r->exec, false);
        else if (r->session)
            crl_session_pause_output(r->session, false);
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
    r->exec = NULL;
    bool session = r->route.ep == CRL_EP_SESSION_RUN;
    if (!r->gone) {
        if (err) {
            crl_req_error(r, err);
        } else {
            json_t *j = crl_exec_result_json(res, !r->streaming);
            if (session && r->session) {
                json_object_set_new(j, "session_id", json_string(crl_session_id(r->session)));
                json_object_set_new(j, "session_alive",
                                    json_boolean(crl_session_alive(r->session)));
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
    r->session = NULL;
    crl_req_pending_done(r);
}

static const struct crl_exec_cbs buffered_cbs = {.on_done = on_done};
static const struct crl_exec_cbs stream_cbs = {
    .on_start = on_start, .on_output = on_output, .on_done = on_done};

void crl_h_exec(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_exec_req req;
    if (crl_req_sandbox(r, &err) < 0 ||
        crl_exec_req_parse(r->body.data, r->body.len, false, &req, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    bool stream = req.stream;
    r->pending++;
    r->exec = crl_exec_start(r->sb, &req, stream ? &stream_cbs : &buffered_cbs, r, &err);
    if (!r->exec) {
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
    if (!s || crl_exec_req_parse(r->body.data, r->body.len, true, &req, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    r->session = s;
    r->pending++;
    if (crl_session_run(s, &req, req.stream ? &stream_cbs : &buffered_cbs, r, &err) < 0) {
        r->pending--;
        r->session = NULL;
        crl_req_error(r, &err);
    }
}

void crl_h_exec_cleanup(struct crl_req *r)
{
    if (r->exec) {
        crl_exec_cancel(r->exec);
        r->exec = NULL;
        r->pending--;
    }
    if (r->session) {
        crl_session_cancel_run(r->session);
        r->session = NULL;
        r->pending--;
    }
}
