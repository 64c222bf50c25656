/* The one error contract of libcorral (docs/errors.md).
 *
 * A function that can fail takes `struct crl_err *err` last, returns a
 * negative value on failure and fills *err with a code and a message that
 * names what was wrong.  Callers add context with crl_err_prefix(); the error
 * is reported once, at the top (the HTTP layer or a command's main()).  The
 * table in err.c is the only place that maps codes to HTTP statuses and to
 * the JSON `code` strings. */
#ifndef CRL_UTIL_ERR_H
#define CRL_UTIL_ERR_H

#include <stdarg.h>

enum crl_errc {
    CRL_OK = 0,
    CRL_E_INVALID,      /* 400 invalid_argument: a field or parameter is wrong */
    CRL_E_JSON,         /* 400 invalid_json: the body is not JSON */
    CRL_E_UNAUTHORIZED, /* 401 unauthorized */
    CRL_E_FORBIDDEN,    /* 403 forbidden */
    CRL_E_NOT_FOUND,    /* 404 not_found */
    CRL_E_METHOD,       /* 405 method_not_allowed */
    CRL_E_CONFLICT,     /* 409 conflict: the sandbox is not in a state for this */
    CRL_E_TOO_LARGE,    /* 413 payload_too_large */
    CRL_E_MEDIA,        /* 415 unsupported_media_type */
    CRL_E_INTERNAL,     /* 500 internal */
    CRL_E_UNSUPPORTED,  /* 501 not_implemented: valid, but not on this host/version */
    CRL_E_CAPACITY,     /* 503 capacity_exceeded, with Retry-After */
    CRL_E_UNAVAILABLE,  /* 503 unavailable: shutting down, backend not ready */
    CRL_E_TIMEOUT,      /* 504 timeout */
    CRL_E_NO_SPACE,     /* 507 no_space: the sandbox's disk is full */
    CRL_E__COUNT
};

struct crl_err {
    enum crl_errc code;
    int sys_errno; /* errno behind the failure, 0 if none */
    char msg[480];
};

#define CRL_ERR_INIT \
    {                \
        CRL_OK, 0,   \
        {            \
            0        \
        }            \
    }

/* Fill *err (if not NULL); always returns -1 so callers can `return crl_err_set(...)`. */
int crl_err_set(struct crl_err *err, enum crl_errc code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A failed syscall: CRL_E_INTERNAL (or CRL_E_NO_SPACE for ENOSPC/EDQUOT) with
 * ": strerror(errnum)" appended.  Returns -1. */
int crl_err_sys(struct crl_err *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend context: "doing X: <old message>".  Returns -1. */
int crl_err_prefix(struct crl_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void crl_err_clear(struct crl_err *err);

/* The JSON `code` string and HTTP status of a code. */
const char *crl_errc_name(enum crl_errc code);
int crl_errc_http_status(enum crl_errc code);
/* The inverse of crl_errc_name(), for clients; CRL_E_INTERNAL if unknown. */
enum crl_errc crl_errc_from_name(const char *name);

#endif
