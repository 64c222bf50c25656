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

extern char **environ;

int crl_erofs_build(const char *dir, const char *out, struct crl_err *err)
{
    const char *bin = "mkfs.erofs";
    /* Its output goes to a pipe we keep the tail of, for the error. */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    char *argv[] = {(char *)bin,   (char *)"--quiet", (char *)"--preserve-mtime",
                    (char *)"-x1", (char *)out,       (char *)dir,
                    NULL};
    pid_t pid;
    int r = posix_spawnp(&pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (r != 0) {
        close(pfd[0]);
        return crl_err_set(err, r == ENOENT ? CRL_E_UNSUPPORTED : CRL_E_INTERNAL,
                           "cannot run %s (install erofs-utils): %s", bin, strerror(r));
    }
    /* mkfs.erofs --quiet says little: keep the start of it for the error. */
    char msg[512], buf[4096];
    size_t len = 0;
    ssize_t n;
    while ((n = read(pfd[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
        size_t take = n > 0 ? (size_t)n : 0;
        if (take > sizeof(msg) - 1 - len)
            take = sizeof(msg) - 1 - len;
        memcpy(msg + len, buf, take);
        len += take;
    }
    close(pfd[0]);
    msg[len] = 0;
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
        msg[--len] = 0;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return crl_err_sys(err, errno, "waiting for %s", bin);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "%s %s failed (status %d): %s", bin, dir, status,
                           len ? msg : "no output");
    return 0;
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
