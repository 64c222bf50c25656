#include "backend.h"

#include <jansson.h>

#include "../util/err.h"
#include "../util/log.h"
#include "sandbox.h"

int crl_restore_error(int code, const char *msg, bool live, struct crl_err *err)
{
    switch (code) {
    case CRL_STREAM_OK: return 0;
    case CRL_STREAM_NOSPACE: return crl_err_set(err, CRL_E_NO_SPACE, "%s (disk_mb)", msg);
    case CRL_STREAM_BAD_INPUT: return crl_err_set(err, CRL_E_INVALID, "%s", msg);
    default:
        if (code == CRL_STREAM_GONE || (code >= 128 && !live))
            return crl_err_set(err, CRL_E_CONFLICT, "restoring: the sandbox ended meanwhile");
        if (code >= 128)
            return crl_err_set(err, CRL_E_INTERNAL,
                               "restoring: the helper was killed by signal %d (out of memory_mb?)",
                               code - 128);
        return crl_err_set(err, CRL_E_INTERNAL, "%s",
                           msg[0] ? msg : "restoring: the helper failed");
    }
}

int crl_backend_pause_cgroup(struct crl_sandbox *sb, struct crl_cgroup *cg, bool pause,
                             struct crl_cgroup_reclaim *last, struct crl_err *err)
{
    if (!cg)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    return pause ? crl_cgroup_pause(cg, sb->id, last, err) : crl_cgroup_freeze(cg, false, err);
}

void crl_backend_pause_info(json_t *o, const struct crl_cgroup_reclaim *last)
{
    if (o && last->how)
        json_object_set_new(o, "last_pause",
                            json_pack("{s:s, s:I, s:I}", "memory_release", last->how,
                                      "memory_before_bytes", (json_int_t)last->before_bytes,
                                      "memory_after_bytes", (json_int_t)last->after_bytes));
}
