/* POST .../pause and .../resume: 200 with the sandbox as it is now.  A
 * pause also says what memory it gave back: the sandbox's charge before
 * and after it (0 released for a sandbox that was paused already).
 * POST .../timeout: its ttl from now.  PATCH .../network: the sandbox
 * under its new network policy. */
#include "handlers_actions.h"

#include <errno.h>
#include <stdlib.h>

#include "../core/backend.h"
#include "../core/netpolicy.h"
#include "../util/log.h"
#include "request.h"

static void pause_or_resume(struct crl_req *r, bool pause)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    struct crl_usage before, after;
    crl_sandbox_usage(r->sb, &before);
    if ((pause ? crl_sandbox_pause(r->sb, &err) : crl_sandbox_resume(r->sb, &err)) < 0) {
        crl_req_error(r, &err);
        return;
    }
    json_t *o = crl_sandbox_json(r->sb);
    if (pause) {
        crl_sandbox_usage(r->sb, &after);
        uint64_t released =
            before.memory_bytes > after.memory_bytes ? before.memory_bytes - after.memory_bytes : 0;
        json_object_set_new(o, "memory_before_bytes",
                            json_integer((json_int_t)before.memory_bytes));
        json_object_set_new(o, "memory_released_bytes", json_integer((json_int_t)released));
    }
    crl_req_json(r, 200, o);
}

void crl_h_pause(struct crl_req *r)
{
    pause_or_resume(r, true);
}

void crl_h_resume(struct crl_req *r)
{
    pause_or_resume(r, false);
}

void crl_h_timeout(struct crl_req *r)
{
    static const char *const keys[] = {"timeout_s"};
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL, *t;
    unsigned secs = 0;
    if (crl_req_sandbox(r, &err) == 0 &&
        crl_json_load(r->body.data, r->body.len, &body, &err) == 0 &&
        crl_json_check_keys(body, "", keys, 1, &err) == 0) {
        if (!(t = json_object_get(body, "timeout_s")))
            crl_err_set(&err, CRL_E_INVALID, "timeout_s is required (seconds from now; 0: none)");
        else if (crl_json_get_uint(t, "timeout_s", 0, 30 * 86400, &secs, &err) == 0)
            crl_sandbox_set_timeout(r->sb, secs, &err);
    }
    json_decref(body);
    crl_req_json_or_error(r, 200, err.code ? NULL : crl_sandbox_json(r->sb), &err);
}

/* Parse the body as a network policy and put it in force. */
static int set_network(struct crl_req *r, struct crl_err *err)
{
    if (crl_req_sandbox(r, err) < 0)
        return -1;
    json_error_t je;
    json_t *body = json_loadb(r->body.data, r->body.len, 0, &je);
    if (!body)
        return crl_err_set(err, CRL_E_JSON, "the body is not JSON: %s", je.text);
    struct crl_net_policy *p = calloc(1, sizeof(*p));
    int rc = -1;
    if (!p)
        crl_err_sys(err, ENOMEM, "network policy");
    else if (crl_net_policy_from_json(body, p, err) == 0 &&
             (rc = crl_backend_net_set(r->sb, p, err)) < 0)
        crl_net_policy_free(p);
    if (rc < 0)
        free(p);
    json_decref(body);
    return rc;
}

void crl_h_network(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (set_network(r, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 200, crl_sandbox_json(r->sb));
}

void crl_h_network_replayed(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (set_network(r, &err) < 0)
        crl_warn(r->sb ? r->sb->id : NULL, "replaying a network step: %s", err.msg);
}
