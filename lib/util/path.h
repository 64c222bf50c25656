/* Paths given to the files API.  Two walls keep them inside a sandbox:
 * they are checked here (absolute, no '..', bounded), and they are opened
 * by a process whose root and mount namespace are the sandbox's, with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), so no symlink planted in
 * the sandbox can lead to a host path. */
#ifndef CRL_UTIL_PATH_H
#define CRL_UTIL_PATH_H

#include <sys/types.h>

#include "err.h"

/* Validate an API path; `what` names it in the error. */
int crl_path_check(const char *path, const char *what, struct crl_err *err);

/* openat2(dirfd, path, flags | O_CLOEXEC | O_NOCTTY, mode) with path
 * resolution confined to dirfd as the root and no magic links.  Raw
 * syscall: safe in a CLONE_VM child.  Returns an fd or -errno. */
long crl_path_open_in_root(int dirfd, const char *path, int flags, mode_t mode);

#endif
