#include "err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int status;
} errc_table[CRL_E__COUNT] = {
    [CRL_OK] = {"ok", 200},
    [CRL_E_INVALID] = {"invalid_argument", 400},
    [CRL_E_JSON] = {"invalid_json", 400},
    [CRL_E_UNAUTHORIZED] = {"unauthorized", 401},
    [CRL_E_FORBIDDEN] = {"forbidden", 403},
    [CRL_E_NOT_FOUND] = {"not_found", 404},
    [CRL_E_METHOD] = {"method_not_allowed", 405},
    [CRL_E_CONFLICT] = {"conflict", 409},
    [CRL_E_TOO_LARGE] = {"payload_too_large", 413},
    [CRL_E_MEDIA] = {"unsupported_media_type", 415},
    [CRL_E_INTERNAL] = {"internal", 500},
    [CRL_E_UNSUPPORTED] = {"not_implemented", 501},
    [CRL_E_CAPACITY] = {"capacity_exceeded", 503},
    [CRL_E_UNAVAILABLE] = {"unavailable", 503},
    [CRL_E_TIMEOUT] = {"timeout", 504},
    [CRL_E_NO_SPACE] = {"no_space", 507},
};

const char *crl_errc_name(enum crl_errc code)
{
    if ((unsigned)code >= CRL_E__COUNT)
        code = CRL_E_INTERNAL;
    return errc_table[code].name;
}

int crl_errc_http_status(enum crl_errc code)
{
    if ((unsigned)code >= CRL_E__COUNT)
        code = CRL_E_INTERNAL;
    return errc_table[code].status;
}

enum crl_errc crl_errc_from_name(const char *name)
{
    for (int i = 0; i < CRL_E__COUNT; i++)
        if (name && strcmp(errc_table[i].name, name) == 0)
            return (enum crl_errc)i;
    return CRL_E_INTERNAL;
}

static void err_vset(struct crl_err *err, enum crl_errc code, int errnum, const char *fmt,
                     va_list ap)
{
    err->code = code;
    err->sys_errno = errnum;
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    if (errnum && n >= 0 && (size_t)n < sizeof(err->msg))
        snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s", strerror(errnum));
}

int crl_err_set(struct crl_err *err, enum crl_errc code, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, code, 0, fmt, ap);
    va_end(ap);
    return -1;
}

int crl_err_sys(struct crl_err *err, int errnum, const char *fmt, ...)
{
    if (!err)
        return -1;
    enum crl_errc code = (errnum == ENOSPC || errnum == EDQUOT) ? CRL_E_NO_SPACE : CRL_E_INTERNAL;
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, code, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

int crl_err_prefix(struct crl_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[sizeof(err->msg)];
    char old[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
    return -1;
}

void crl_err_clear(struct crl_err *err)
{
    err->code = CRL_OK;
    err->sys_errno = 0;
    err->msg[0] = 0;
}
