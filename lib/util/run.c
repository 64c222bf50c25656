#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void crl_spawnattr_init_clean(posix_spawnattr_t *attr)
{
    posix_spawnattr_init(attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(attr, &none);
    posix_spawnattr_setsigdefault(attr, &all);
    posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

int crl_seqpacket_pair(int pair[2], size_t max_msg, struct crl_err *err)
{
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
        return crl_err_sys(err, errno, "socketpair");
    int big = (int)max_msg * 2;
    for (int k = 0; k < 2; k++) { /* as root: past the sysctl's cap */
        setsockopt(pair[k], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
        setsockopt(pair[k], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    }
    return 0;
}

int crl_run_capture(char *const argv[], char *const envp[], int with_stderr, size_t max, char **out,
                    int *status, struct crl_err *err)
{
    char *buf = malloc(max + 1);
    int pfd[2];
    if (!buf)
        return crl_err_sys(err, ENOMEM, "running %s", argv[0]);
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        free(buf);
        return crl_err_sys(err, errno, "pipe");
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    if (with_stderr)
        posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    pid_t pid;
    int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (r != 0) {
        close(pfd[0]);
        free(buf);
        return crl_err_sys(err, r, "running %s", argv[0]);
    }
    /* to its end, keeping the first `max` bytes */
    size_t len = 0;
    char chunk[4096];
    ssize_t n;
    while ((n = read(pfd[0], chunk, sizeof(chunk))) > 0 || (n < 0 && errno == EINTR)) {
        size_t take = n > 0 ? (size_t)n : 0;
        if (take > max - len)
            take = max - len;
        for (size_t i = 0; i < take; i++)
            buf[len + i] = chunk[i];
        len += take;
    }
    close(pfd[0]);
    buf[len] = 0;
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) {
            free(buf);
            return crl_err_sys(err, errno, "waiting for %s", argv[0]);
        }
    *out = buf;
    return 0;
}

int crl_mkfs_ext4(const char *path, struct crl_err *err)
{
    char *argv[] = {"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0", (char *)path, NULL};
    static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    char *out = NULL;
    int status = 0;
    if (crl_run_capture(argv, envp, 1, 4096, &out, &status, err) < 0)
        return crl_err_prefix(err, "mkfs.ext4 (apt-get install e2fsprogs)");
    int rc = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        rc = crl_err_set(err, CRL_E_INTERNAL, "mkfs.ext4 %s failed: %s", path,
                         out && *out ? out : "(no output)");
    free(out);
    return rc;
}
