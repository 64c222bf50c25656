#include "erofs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/run.h"

int crl_erofs_build(const char *dir, const char *out, struct crl_err *err)
{
    char *argv[] = {(char *)"mkfs.erofs",
                    (char *)"--quiet",
                    (char *)"--preserve-mtime",
                    (char *)"-x1",
                    (char *)out,
                    (char *)dir,
                    NULL};
    /* mkfs.erofs --quiet says little: keep the start of it for the error. */
    char *msg = NULL;
    int status;
    if (crl_run_capture(argv, NULL, 1, 511, &msg, &status, err) < 0) {
        if (err && err->sys_errno == ENOENT)
            crl_err_set(err, CRL_E_UNSUPPORTED, "cannot run mkfs.erofs (install erofs-utils)");
        return -1;
    }
    size_t len = strlen(msg);
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
        msg[--len] = 0;
    int r = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        r = crl_err_set(err, CRL_E_INTERNAL, "mkfs.erofs %s failed (status %d): %s", dir, status,
                        len ? msg : "no output");
    free(msg);
    return r;
}

int crl_erofs_mount(const char *path, struct crl_err *err)
{
    cleanup_close int fs = (int)syscall(SYS_fsopen, "erofs", FSOPEN_CLOEXEC);
    if (fs < 0)
        return crl_err_sys(err, errno, "fsopen erofs (is the erofs module loaded?)");
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", path, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return crl_err_sys(err, errno,
                           "mount EROFS layer %s (kernels before 6.12 cannot mount a file)", path);
    int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID);
    if (m < 0)
        return crl_err_sys(err, errno, "fsmount EROFS layer %s", path);
    return m;
}
