/* POST .../pause and .../resume: 200 with the sandbox as it is now.  A
 * pause also says what memory it gave back: the sandbox's charge before
 * and after it (0 released for a sandbox that was paused already). */
#include "handlers_actions.h"
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
