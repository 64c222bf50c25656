#include "path.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>

#include "buf.h"
#include "rawsys.h"

int crl_path_check(const char *path, const char *what, struct crl_err *err)
{
    if (!path || !*path)
        return crl_err_set(err, CRL_E_INVALID, "%s is required", what);
    if (path[0] != '/')
        return crl_err_set(err, CRL_E_INVALID, "%s '%s' must be absolute", what, path);
    if (strlen(path) >= PATH_MAX)
        return crl_err_set(err, CRL_E_INVALID, "%s is longer than %d bytes", what, PATH_MAX - 1);
    if (!crl_utf8_valid(path, strlen(path)))
        return crl_err_set(err, CRL_E_INVALID, "%s must be UTF-8 (the API speaks JSON)", what);
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return crl_err_set(err, CRL_E_INVALID,
                               "%s '%s' must not contain '..': paths are inside the sandbox", what,
                               path);
        p += n;
    }
    return 0;
}

__attribute__((no_sanitize("address", "undefined"))) long
crl_path_open_in_root(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC | O_NOCTTY),
        .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    return crl_raw4(SYS_openat2, dirfd, path, &how, sizeof(how));
}
