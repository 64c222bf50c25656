/* Code contexts: the endpoints (handlers_code.h). */
#include "handlers_code.h"

#include <stdlib.h>
#include <string.h>

#include "../core/code.h"
#include "../core/spec.h"
#include "../util/cleanup.h"
#include "request.h"

#define CODE_MAX (1u << 20) /* a cell's source */

static void answered(void *ctx, json_t *answer, const struct crl_err *err)
{
    struct crl_req *r = ctx;
    r->state = NULL;
    if (!r->gone)
        crl_req_json_or_error(r, 200, answer, err);
    else
        json_decref(answer);
    crl_req_pending_done(r);
}

/* POST .../code {"code", "context": "default", "language": "python", "timeout_s": 300} */
void crl_h_code_run(struct crl_req *r)
{
    static const char *const keys[] = {"code", "context", "language", "timeout_s"};
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = NULL;
    const char *code = NULL, *context = CRL_CODE_DEFAULT, *lang = "python";
    double timeout = 300;
    json_t *f;
    if (crl_req_sandbox(r, &err) < 0 || crl_json_load(r->body.data, r->body.len, &body, &err) < 0 ||
        crl_json_check_keys(body, "", keys, CRL_ARRAY_SIZE(keys), &err) < 0)
        goto out;
    if (!(f = json_object_get(body, "code"))) {
        crl_err_set(&err, CRL_E_INVALID, "code is required");
        goto out;
    }
    if (crl_json_get_string(f, "code", CODE_MAX, &code, &err) < 0 ||
        ((f = json_object_get(body, "context")) &&
         crl_json_get_string(f, "context", 63, &context, &err) < 0) ||
        ((f = json_object_get(body, "language")) &&
         crl_json_get_string(f, "language", 16, &lang, &err) < 0))
        goto out;
    if (strcmp(lang, "python") != 0) {
        crl_err_set(&err, CRL_E_UNSUPPORTED, "language %s: code contexts are python only", lang);
        goto out;
    }
    if ((f = json_object_get(body, "timeout_s"))) {
        if (!json_is_number(f) || json_number_value(f) < 0 || json_number_value(f) > 86400) {
            crl_err_set(&err, CRL_E_INVALID, "timeout_s must be a number 0-86400");
            goto out;
        }
        timeout = json_number_value(f);
    }
    r->pending++;
    if (!(r->state = crl_code_run(r->sb, context, code, timeout, answered, r, &err)))
        r->pending--;
out:
    if (err.code)
        crl_req_error(r, &err);
}

void crl_h_code_cancel(struct crl_req *r)
{
    if (r->state) {
        crl_code_cancel(r->state);
        r->state = NULL;
        r->pending--;
    }
}

void crl_h_code_contexts_list(struct crl_req *r)
{
    static const char *const states[] = {"idle", "starting", "ready", NULL};
    static const struct crl_list_spec list = {
        .items = "contexts", .key = "id", .states = states, .no_labels = true};
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_list(r, crl_code_context_list(r->sb), &list);
}

/* POST .../code/contexts {"cwd", "language"} */
void crl_h_code_context_create(struct crl_req *r)
{
    static const char *const keys[] = {"cwd", "language"};
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *body = NULL;
    const char *cwd = NULL, *lang = "python";
    json_t *f, *out = NULL;
    if (crl_req_sandbox(r, &err) == 0 &&
        (!r->body.len || (crl_json_load(r->body.data, r->body.len, &body, &err) == 0 &&
                          crl_json_check_keys(body, "", keys, CRL_ARRAY_SIZE(keys), &err) == 0)) &&
        (!(f = json_object_get(body, "cwd")) ||
         crl_json_get_string(f, "cwd", 4095, &cwd, &err) == 0) &&
        (!(f = json_object_get(body, "language")) ||
         crl_json_get_string(f, "language", 16, &lang, &err) == 0)) {
        if (strcmp(lang, "python") != 0)
            crl_err_set(&err, CRL_E_UNSUPPORTED, "language %s: code contexts are python only",
                        lang);
        else if (cwd && cwd[0] != '/')
            crl_err_set(&err, CRL_E_INVALID, "cwd must be an absolute path");
        else
            out = crl_code_context_create(r->sb, cwd, &err);
    }
    crl_req_json_or_error(r, 201, out, &err);
}

void crl_h_code_context_restart(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    crl_req_json_or_error(
        r, 200,
        crl_req_sandbox(r, &err) < 0 ? NULL : crl_code_context_restart(r->sb, r->route.sub, &err),
        &err);
}

void crl_h_code_context_remove(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    crl_req_json_or_error(
        r, 200,
        crl_req_sandbox(r, &err) < 0 ? NULL : crl_code_context_remove(r->sb, r->route.sub, &err),
        &err);
}
