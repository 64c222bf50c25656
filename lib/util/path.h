/* Path safety: the one place that decides what a path from outside may
 * name and how it is opened.  A hardening fix goes here, and only here:
 *
 *   crl_path_normalise  every name that comes from a client, an archive or
 *                       a stored manifest is checked (and cleaned) by it,
 *                       under one of the rule sets below
 *   crl_path_openat2    every openat2(2) in the tree, with the RESOLVE_*
 *                       flags its caller states (and says why) at the call
 *
 * Two walls keep a path inside a sandbox or a tree: the name is checked
 * here (relative or absolute as asked, no '..', bounded), and it is opened
 * by openat2 confined to a directory, so that no symlink planted there can
 * lead out.  The files API opens in a process whose root and mount
 * namespace are the sandbox's (crl_path_open_in_root); the appliers of
 * archives (lib/helper/apply.h) open beneath the tree they fill. */
#ifndef CRL_UTIL_PATH_H
#define CRL_UTIL_PATH_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

#include "err.h"

/* ---- the normaliser ---- */

/* Why a path was refused: crl_path_normalise's negative results. */
enum crl_path_bad {
    CRL_PATH_EMPTY = -1,         /* NULL or "" where a name is needed */
    CRL_PATH_ABSOLUTE = -2,      /* a leading '/' where a relative path was asked */
    CRL_PATH_RELATIVE = -3,      /* no leading '/' where an absolute path was asked */
    CRL_PATH_TOO_LONG = -4,      /* over the rules' max_len, or the output's room */
    CRL_PATH_NUL = -5,           /* a NUL byte within the length given */
    CRL_PATH_NOT_UTF8 = -6,      /* with CRL_PATH_UTF8 */
    CRL_PATH_DOTDOT = -7,        /* a ".." component (never followed, never folded) */
    CRL_PATH_NOT_CANONICAL = -8, /* with CRL_PATH_CANONICAL: ".", "//", a trailing '/' */
    CRL_PATH_NAME_TOO_LONG = -9, /* with CRL_PATH_NAME_MAX: a component over NAME_MAX */
    CRL_PATH_WHITEOUT = -10,     /* with CRL_PATH_NO_WHITEOUT: a component ".wh.*" */
};

#define CRL_PATH_ABS 0x01u /* absolute: "/a/b", the root "/"; else relative: "a/b", the root "" */
#define CRL_PATH_EMPTY_ROOT 0x02u  /* relative rules: "" is the root (else refused as empty) */
#define CRL_PATH_CANONICAL 0x04u   /* refuse what would need rewriting (".", "./x", "a//b", "a/") */
#define CRL_PATH_UTF8 0x08u        /* valid UTF-8 (the API speaks JSON) */
#define CRL_PATH_NAME_MAX 0x10u    /* each component at most NAME_MAX bytes */
#define CRL_PATH_NO_WHITEOUT 0x20u /* no component beginning ".wh." (overlayfs' names) */

struct crl_path_rules {
    unsigned flags; /* CRL_PATH_* above */
    size_t max_len; /* the longest input, in bytes; 0: bounded by the output's room alone */
};

/* The rule sets the tree uses, each named for what it checks. */
/* A files-API path: absolute, UTF-8, under PATH_MAX; "/a/./b//" is fine
 * (the kernel resolves it inside the sandbox), '..' is not. */
#define CRL_PATH_RULES_API \
    (&(const struct crl_path_rules){CRL_PATH_ABS | CRL_PATH_UTF8, PATH_MAX - 1})
/* A tar member's name in a checkpoint's change set: relative, "./" and
 * empty components dropped, "." and "./" the root, "" refused. */
#define CRL_PATH_RULES_MEMBER (&(const struct crl_path_rules){0, 0})
/* A member's name in an OCI layer: the same, but "" is the root too. */
#define CRL_PATH_RULES_LAYER (&(const struct crl_path_rules){CRL_PATH_EMPTY_ROOT, 0})
/* A path a checkpoint manifest stores: already canonical, relative, no
 * component over NAME_MAX or named like a whiteout, at most 65535 bytes
 * (crl_path_valid(p, len, CRL_PATH_RULES_STORED) is ckpt.c's path_valid). */
#define CRL_PATH_RULES_STORED                                                                      \
    (&(const struct crl_path_rules){CRL_PATH_CANONICAL | CRL_PATH_NAME_MAX | CRL_PATH_NO_WHITEOUT, \
                                    65535})

/* Check the `len` bytes at `in` under `rules` and write their normal form
 * to `out` (NUL-terminated; `cap` bytes of room; out may be NULL to check
 * only): the components joined by single slashes, "." and empty ones
 * dropped, a leading '/' with CRL_PATH_ABS.  Nothing is resolved: '..' is
 * refused, never folded, and the file system is not looked at.
 *
 * Returns the output's length, or an enum crl_path_bad.  When several
 * things are wrong, the first of: empty, absolute/relative, too long (the
 * input), NUL, UTF-8, then each component in order ('..', non-canonical,
 * NAME_MAX, whiteout, the output's room).  The output's room is checked as
 * a tar extractor always has: a component fits if the output so far, a
 * slash, it and a NUL fit, the slash counted even for the first.
 *
 * What holds for every input (tests/fuzz/fuzz_path.c checks it): the
 * output has no "." or ".." component, no "//", no trailing '/', a leading
 * '/' exactly when CRL_PATH_ABS; normalising it again gives it back (the
 * relative root "" given back needs CRL_PATH_EMPTY_ROOT); and an input
 * refused for anything but its start (empty, absolute, relative) stays
 * refused with any number of "./" before it. */
int crl_path_normalise(const char *in, size_t len, const struct crl_path_rules *rules, char *out,
                       size_t cap);

/* Whether the `len` bytes at `p` pass `rules` as they are: a check with no
 * output, e.g. crl_path_valid(p, len, CRL_PATH_RULES_STORED). */
static inline bool crl_path_valid(const char *p, size_t len, const struct crl_path_rules *rules)
{
    return crl_path_normalise(p, len, rules, NULL, 0) >= 0;
}

/* Whether the component of `len` bytes at `name` begins ".wh.": overlayfs'
 * names (whiteouts, opaque markers, its own).  The appliers read such a
 * name as a whiteout, a stored path holds none (CRL_PATH_NO_WHITEOUT), and
 * a checkpoint leaves a file so named out. */
static inline bool crl_path_is_whiteout(const char *name, size_t len)
{
    return len >= 4 && memcmp(name, ".wh.", 4) == 0;
}

/* What an enum crl_path_bad means, as a noun phrase for a message:
 * "a path with '..'", "an absolute path", ... */
const char *crl_path_why(int bad);

/* Validate a files-API path (CRL_PATH_RULES_API); `what` names it in the
 * error, CRL_E_INVALID: "path 'x' must be absolute". */
int crl_path_check(const char *path, const char *what, struct crl_err *err);

/* ---- openat2 ---- */

/* openat2(dirfd, path, flags | O_CLOEXEC | O_NOCTTY (not with O_PATH,
 * which openat2 would refuse), mode) resolved under
 * `resolve` (RESOLVE_* of <linux/openat2.h>; the caller states at the call
 * the strictest set it can live with, and why).  `mode` is passed only with
 * O_CREAT or O_TMPFILE (openat2 refuses it otherwise).  Retries on EINTR,
 * and on EAGAIN unless RESOLVE_CACHED is asked: with RESOLVE_BENEATH or
 * RESOLVE_IN_ROOT the kernel gives EAGAIN when a rename or mount raced a
 * ".." in the resolution (openat2(2)); a bounded number of times, so that a
 * sandbox renaming in a loop cannot pin its helper.  Raw syscall, no errno:
 * safe in a CLONE_VM child.  Returns an fd or -errno. */
long crl_path_openat2(int dirfd, const char *path, int flags, mode_t mode,
                      unsigned long long resolve);

/* crl_path_openat2's result in libc's convention: the fd, or -1 with errno
 * set.  Not for CLONE_VM children (errno is their parent's). */
static inline int crl_path_fd(long r)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return (int)r;
}

/* The files API's open: crl_path_openat2 under RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS, dirfd standing for the sandbox's "/".  Raw
 * syscall: safe in a CLONE_VM child.  Returns an fd or -errno. */
long crl_path_open_in_root(int dirfd, const char *path, int flags, mode_t mode);

#endif
