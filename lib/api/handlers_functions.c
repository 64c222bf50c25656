/* GET /v1/functions[/{name}] and POST /v1/functions/{name}/call: a call
 * creates a function sandbox, runs the function in it with the arguments
 * on stdin, destroys it, and answers with the result.
 *
 * A call lives in a struct fcall of its own, apart from its request: a
 * client that hangs up detaches the request (the call is killed), and the
 * call still destroys its sandbox before it goes. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../functions/functions.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "handlers_functions.h"
#include "request.h"

struct crl_fcall {
    struct crl_req *r; /* NULL once the client is gone */
    struct crl_host *h;
    struct crl_function *fn; /* a reference */
    json_t *args;
    struct crl_sandbox *sb; /* a reference, once created */
    struct crl_exec *x;     /* while the function runs */
    bool starting, done_early;
    struct crl_buf out, err; /* capped at limits.max_output_bytes */
    bool overflow;
    struct crl_timer later; /* a destroy that may not run inside the exec's callback */
    uint64_t start_ns;
    json_t *answer;
    struct crl_err error;
    bool failed;
};

static void fcall_free(struct crl_fcall *fc)
{
    if (fc->sb)
        crl_sandbox_unref(fc->sb);
    crl_function_unref(fc->fn);
    json_decref(fc->args);
    json_decref(fc->answer);
    crl_buf_free(&fc->out);
    crl_buf_free(&fc->err);
    free(fc);
}

/* Answer (if anyone still asks) and go. */
static void finish(struct crl_fcall *fc)
{
    struct crl_req *r = fc->r;
    if (r) {
        r->state = NULL;
        if (fc->failed || !fc->answer) {
            if (!fc->failed)
                crl_err_set(&fc->error, CRL_E_INTERNAL, "function %s: no answer", fc->fn->name);
            crl_req_error(r, &fc->error);
        } else {
            crl_req_json(r, 200, fc->answer);
            fc->answer = NULL;
        }
        crl_req_pending_done(r);
    }
    fcall_free(fc);
}

static void destroyed(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    finish(ctx);
}

static void destroy(struct crl_fcall *fc)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_host_destroy(fc->h, fc->sb, "destroyed", destroyed, fc, &err) < 0) {
        crl_warn(fc->sb->id, "function %s: destroying its sandbox: %s", fc->fn->name, err.msg);
        finish(fc);
    }
}

static void destroy_later(struct crl_timer *t)
{
    destroy(t->data);
}

static void fail(struct crl_fcall *fc, const struct crl_err *err)
{
    fc->failed = true;
    fc->error = *err;
}

static void on_output(void *ctx, enum crl_exec_stream s, const char *data, size_t len)
{
    struct crl_fcall *fc = ctx;
    struct crl_buf *b = s == CRL_STDOUT ? &fc->out : &fc->err;
    crl_buf_append(b, data, len);
    if (fc->overflow || !crl_buf_truncated(b) || !fc->x)
        return;
    /* A flood: end it now rather than at its timeout.  Cancelled, the exec
     * never calls back, so the call describes the end itself. */
    fc->overflow = true;
    crl_exec_cancel(fc->x);
    fc->x = NULL;
    struct crl_exec_result res = {.exit_code = -1, .signal = SIGKILL, .reason = "killed"};
    res.duration_s = (double)(crl_now_ns() - fc->start_ns) / 1e9;
    crl_info(fc->sb->id, "function %s wrote past its output limit: killed", fc->fn->name);
    fc->answer =
        crl_function_answer(&res, fc->out.data, fc->out.len, fc->err.data, fc->err.len, true);
    /* We are inside the exec's read of its pipe: tear down from the loop. */
    crl_timer_start(fc->h->loop, &fc->later, 0, destroy_later, fc);
}

static void on_done(void *ctx, const struct crl_exec_result *res, const struct crl_err *err)
{
    struct crl_fcall *fc = ctx;
    fc->x = NULL;
    fc->done_early = fc->starting;
    if (err) {
        fail(fc, err);
    } else {
        fc->answer =
            crl_function_answer(res, fc->out.data, fc->out.len, fc->err.data, fc->err.len, false);
        crl_debug(fc->sb->id, "function %s: %s in %.3f ms", fc->fn->name, res->reason,
                  res->duration_s * 1e3);
    }
    destroy(fc);
}

static const struct crl_exec_cbs call_cbs = {.on_output = on_output, .on_done = on_done};

static void created(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_fcall *fc = ctx;
    if (err) {
        fail(fc, err);
        finish(fc);
        return;
    }
    crl_sandbox_ref(sb);
    fc->sb = sb;
    if (!fc->r) { /* the client left while it was being made */
        destroy(fc);
        return;
    }
    struct crl_err e = CRL_ERR_INIT;
    struct crl_exec_req req;
    if (crl_function_exec_req(fc->fn, fc->args, &req, &e) < 0) {
        fail(fc, &e);
        destroy(fc);
        return;
    }
    crl_buf_init(&fc->out, req.max_output - 1);
    crl_buf_init(&fc->err, req.max_output - 1);
    fc->start_ns = crl_now_ns();
    fc->starting = true;
    struct crl_exec *x = crl_exec_start(sb, &req, &call_cbs, fc, &e);
    fc->starting = false;
    if (fc->done_early) /* on_done ran already, and destroys */
        return;
    if (!x) {
        fail(fc, &e);
        destroy(fc);
        return;
    }
    fc->x = x;
}

void crl_h_function_call(struct crl_req *r)
{
    struct crl_api *a = r->api;
    struct crl_err err = CRL_ERR_INIT;
    struct crl_function *fn = crl_functions_get(a->functions, r->route.name, &err);
    if (!fn) {
        crl_req_error(r, &err);
        return;
    }
    json_t *args = NULL;
    struct crl_spec spec;
    crl_spec_init(&spec);
    if (fn->error) {
        crl_err_set(&err, CRL_E_CONFLICT, "function %s cannot be called: its definition: %s",
                    fn->name, fn->error);
        goto fail;
    }
    if (crl_function_args(fn, r->body.data, r->body.len, &args, &err) < 0 ||
        crl_function_spec(fn, &spec, &err) < 0)
        goto fail;
    struct crl_fcall *fc = calloc(1, sizeof(*fc));
    if (!fc) {
        crl_err_sys(&err, ENOMEM, "function call");
        goto fail;
    }
    fc->r = r;
    fc->h = a->host;
    fc->fn = fn;
    fc->args = args;
    crl_buf_init(&fc->out, 0);
    crl_buf_init(&fc->err, 0);
    r->state = fc;
    r->pending++;
    if (crl_host_create(a->host, &spec, created, fc, &err) < 0) {
        crl_spec_free(&spec);
        r->state = NULL;
        r->pending--;
        fcall_free(fc);
        crl_req_error(r, &err);
    }
    return;
fail:
    crl_spec_free(&spec);
    json_decref(args);
    crl_function_unref(fn);
    crl_req_error(r, &err);
}

void crl_h_functions_list(struct crl_req *r)
{
    static const struct crl_list_spec list = {
        .items = "functions", .key = "name", .no_labels = true};
    crl_req_list(r, crl_functions_list_json(r->api->functions), &list);
}

void crl_h_function_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_function *fn = crl_functions_get(r->api->functions, r->route.name, &err);
    if (!fn) {
        crl_req_error(r, &err);
        return;
    }
    crl_req_json(r, 200, crl_function_json(fn, true));
    crl_function_unref(fn);
}

void crl_h_function_call_cancel(struct crl_req *r)
{
    struct crl_fcall *fc = r->state;
    if (!fc)
        return;
    r->state = NULL;
    r->pending--;
    fc->r = NULL;
    /* Creating: created() destroys it.  Destroying: finish() frees it. */
    if (fc->x) {
        crl_info(fc->sb->id, "function %s: the client went away; killing the call", fc->fn->name);
        crl_exec_cancel(fc->x);
        fc->x = NULL;
        destroy(fc);
    }
}
