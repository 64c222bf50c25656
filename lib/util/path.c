#include "path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>

#include "buf.h"
#include "rawsys.h"

/* EAGAIN retries of one openat2: filepath-securejoin settled on 128 after
 * 32 proved too few for runc on a loaded machine. */
#define EAGAIN_TRIES 128

/* One component of `n` bytes at `p`: 0 to keep, 1 to drop, or a refusal. */
static int component(const char *p, size_t n, unsigned flags)
{
    bool canon = flags & CRL_PATH_CANONICAL;
    if (n == 0 || (n == 1 && p[0] == '.'))
        return canon ? CRL_PATH_NOT_CANONICAL : 1;
    if (n == 2 && p[0] == '.' && p[1] == '.')
        return CRL_PATH_DOTDOT;
    if ((flags & CRL_PATH_NAME_MAX) && n > NAME_MAX)
        return CRL_PATH_NAME_TOO_LONG;
    if ((flags & CRL_PATH_NO_WHITEOUT) && crl_path_is_whiteout(p, n))
        return CRL_PATH_WHITEOUT;
    return 0;
}

int crl_path_normalise(const char *in, size_t len, const struct crl_path_rules *rules, char *out,
                       size_t cap)
{
    unsigned flags = rules->flags;
    bool abs = flags & CRL_PATH_ABS;
    if (!in || (len == 0 && (abs || !(flags & CRL_PATH_EMPTY_ROOT))))
        return CRL_PATH_EMPTY;
    if (len && (in[0] == '/') != abs)
        return abs ? CRL_PATH_RELATIVE : CRL_PATH_ABSOLUTE;
    if ((rules->max_len && len > rules->max_len) || len > INT_MAX)
        return CRL_PATH_TOO_LONG;
    if (memchr(in, 0, len))
        return CRL_PATH_NUL;
    if ((flags & CRL_PATH_UTF8) && !crl_utf8_valid(in, len))
        return CRL_PATH_NOT_UTF8;
    size_t base = abs ? 1 : 0, o = base; /* the output's length so far */
    if (out && cap < base + 1)
        return CRL_PATH_TOO_LONG;
    if (out && abs)
        out[0] = '/';
    const char *p = in + base, *end = in + len;
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t n = (size_t)((slash ? slash : end) - p);
        int r = component(p, n, flags);
        if (r < 0)
            return r;
        if (r == 0) {
            if (out && o + 1 + n >= cap)
                return CRL_PATH_TOO_LONG;
            if (o > base) {
                if (out)
                    out[o] = '/';
                o++;
            }
            if (out)
                memcpy(out + o, p, n);
            o += n;
        }
        if (!slash)
            break;
        p = slash + 1;
        /* "a/" ends in an empty component: canonical rules refuse it */
        if (p == end && (r = component(p, 0, flags)) < 0)
            return r;
    }
    if (out)
        out[o] = 0;
    return (int)o;
}

const char *crl_path_why(int bad)
{
    switch (bad) {
    case CRL_PATH_EMPTY: return "an empty name";
    case CRL_PATH_ABSOLUTE: return "an absolute path";
    case CRL_PATH_RELATIVE: return "a relative path";
    case CRL_PATH_TOO_LONG: return "a name too long";
    case CRL_PATH_NUL: return "a name with a NUL byte";
    case CRL_PATH_NOT_UTF8: return "a name that is not UTF-8";
    case CRL_PATH_DOTDOT: return "a path with '..'";
    case CRL_PATH_NOT_CANONICAL: return "a path not in its normal form";
    case CRL_PATH_NAME_TOO_LONG: return "a component longer than NAME_MAX";
    case CRL_PATH_WHITEOUT: return "a name beginning .wh. (a whiteout's)";
    default: return "a valid path";
    }
}

int crl_path_check(const char *path, const char *what, struct crl_err *err)
{
    int r = crl_path_normalise(path, path ? strlen(path) : 0, CRL_PATH_RULES_API, NULL, 0);
    switch (r) {
    case CRL_PATH_EMPTY: return crl_err_set(err, CRL_E_INVALID, "%s is required", what);
    case CRL_PATH_RELATIVE:
        return crl_err_set(err, CRL_E_INVALID, "%s '%s' must be absolute", what, path);
    case CRL_PATH_TOO_LONG:
        return crl_err_set(err, CRL_E_INVALID, "%s is longer than %zu bytes", what,
                           CRL_PATH_RULES_API->max_len);
    case CRL_PATH_NOT_UTF8:
        return crl_err_set(err, CRL_E_INVALID, "%s must be UTF-8 (the API speaks JSON)", what);
    case CRL_PATH_DOTDOT:
        return crl_err_set(err, CRL_E_INVALID,
                           "%s '%s' must not contain '..': paths are inside the sandbox", what,
                           path);
    default: return r < 0 ? crl_err_set(err, CRL_E_INVALID, "%s: %s", what, crl_path_why(r)) : 0;
    }
}

__attribute__((no_sanitize("address", "undefined"))) long
crl_path_openat2(int dirfd, const char *path, int flags, mode_t mode, unsigned long long resolve)
{
    /* O_TMPFILE holds O_DIRECTORY's bit: a plain O_DIRECTORY is not it */
    bool creates = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
    /* openat2 refuses O_PATH with anything but O_DIRECTORY and O_NOFOLLOW */
    int always = (flags & O_PATH) ? O_CLOEXEC : O_CLOEXEC | O_NOCTTY;
    struct open_how how = {
        .flags = (unsigned long long)(flags | always),
        .mode = creates ? mode : 0,
        .resolve = resolve,
    };
    int again = 0;
    long r;
    do
        r = crl_raw4(SYS_openat2, dirfd, path, &how, sizeof(how));
    while (r == -EINTR || (r == -EAGAIN && !(resolve & RESOLVE_CACHED) && ++again < EAGAIN_TRIES));
    return r;
}

__attribute__((no_sanitize("address", "undefined"))) long
crl_path_open_in_root(int dirfd, const char *path, int flags, mode_t mode)
{
    /* The sandbox's own tree, as its processes see it: its absolute and
     * relative symlinks must resolve (so not RESOLVE_NO_SYMLINKS), each
     * inside dirfd as "/" (RESOLVE_IN_ROOT, where RESOLVE_BENEATH would
     * refuse "/etc/x" -> "/usr/x" outright); its /proc, /dev and volumes are
     * mounts the API reaches (so not RESOLVE_NO_XDEV).  No magic link: a
     * /proc/self/root or /proc/PID/fd/N would jump out of the root. */
    return crl_path_openat2(dirfd, path, flags, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
}
