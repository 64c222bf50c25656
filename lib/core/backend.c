#include "backend.h"

#include "../util/err.h"

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
