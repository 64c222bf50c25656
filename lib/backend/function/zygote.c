#include "zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/seccomp.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "jail.h"

static struct sock_fprog g_filter;

static void send_reply(const struct crl_zyg_reply *r, const int *fds, int nfds)
{
    if (crl_send_fds(CRL_ZYG_FD, r, sizeof(*r), fds, nfds) < 0) {
        crl_log_syscall(NULL, errno, "zygote: send to corrald");
        _exit(1); /* corrald is gone: so are we */
    }
}

static void reply_err(uint64_t id, int e, const char *msg)
{
    struct crl_zyg_reply r = {.id = id, .op = CRL_ZYG_REPLY, .err = e};
    snprintf(r.msg, sizeof(r.msg), "%s", msg);
    send_reply(&r, NULL, 0);
}

/* The strings after the struct: n of them, each NUL-terminated. */
static int unpack(char *p, size_t len, char **out, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        char *nul = memchr(p, 0, len);
        if (!nul)
            return -1;
        out[i] = p;
        len -= (size_t)(nul - p) + 1;
        p = nul + 1;
    }
    out[n] = NULL;
    return 0;
}

/* In the child: jail, then the call.  A failure before the call is
 * reported on stderr (the call's) and as exit status 126. */
static void child(const struct crl_zygote_runtime *rt, const struct crl_zyg_fork *f, int *fds,
                  char **strings, uint32_t n, char **envp)
{
    if (rt->after_fork)
        rt->after_fork();
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct crl_jail j = {
        .stdio = {fds[0], fds[1], fds[2]},
        .scratch_fd = fds[3],
        .scratch = f->scratch,
        .cgroup_fds = fds + 4,
        .n_cgroup_fds = f->into_cgroup ? 0 : f->n_cgroup_fds, /* already in it */
        .uid = f->uid,
        .gid = f->gid,
        .nproc = f->nproc,
        .nofile = f->nofile,
        .fsize_bytes = f->fsize_bytes,
        .seccomp = &g_filter,
    };
    const char *step = "?";
    int r = crl_jail_enter(&j, &step);
    if (r < 0) {
        char msg[160];
        int len = snprintf(msg, sizeof(msg), "corral: entering the function jail: %s: %s\n", step,
                           strerror(-r));
        if (write(2, msg, (size_t)len) < 0)
            _exit(126);
        _exit(126);
    }
    rt->run((enum crl_zyg_kind)f->kind, strings, n, envp);
    _exit(127);
}

static void handle_fork(const struct crl_zygote_runtime *rt, char *msg, size_t len, int *fds,
                        int nfds)
{
    struct crl_zyg_fork f;
    memcpy(&f, msg, sizeof(f));
    uint32_t n = f.argc, envc = f.envc;
    if ((unsigned)nfds != 4 + f.n_cgroup_fds || (f.into_cgroup && f.n_cgroup_fds != 1) || n == 0 ||
        n > 65536 || envc > 4096) {
        reply_err(f.id, EPROTO, "fork: wrong descriptors or counts");
        return;
    }
    char **strings = calloc(n + 1, sizeof(char *));
    char **envp = calloc(envc + 1, sizeof(char *));
    if (!strings || !envp || unpack(msg + sizeof(f), len - sizeof(f), strings, n) < 0 ||
        unpack(strings[n - 1] + strlen(strings[n - 1]) + 1,
               len - (size_t)(strings[n - 1] + strlen(strings[n - 1]) + 1 - msg), envp, envc) < 0) {
        free(strings);
        free(envp);
        reply_err(f.id, EPROTO, "fork: malformed strings");
        return;
    }
    f.scratch[sizeof(f.scratch) - 1] = 0;
    pid_t pid;
    if (f.into_cgroup) {
        /* Born in its cgroup (v2): no attach, and no moment outside it.  The
         * zygote is single-threaded, so a raw clone3 is a fork. */
        struct clone_args ca = {
            .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)fds[4]};
        pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    } else {
        pid = fork();
    }
    if (pid == 0)
        child(rt, &f, fds, strings, n, envp);
    free(strings);
    free(envp);
    if (pid < 0) {
        reply_err(f.id, errno, "fork");
        return;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct crl_zyg_reply r = {.id = f.id, .op = CRL_ZYG_REPLY, .pid = pid};
    send_reply(&r, &pidfd, pidfd >= 0 ? 1 : 0);
    if (pidfd >= 0)
        close(pidfd);
}

static void reap(void)
{
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG, &ru);
        if (pid <= 0)
            return;
        struct crl_zyg_reply r = {.op = CRL_ZYG_EXITED, .pid = pid, .status = status};
        r.cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                  (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
        r.maxrss_bytes = (uint64_t)ru.ru_maxrss * 1024;
        send_reply(&r, NULL, 0);
    }
}

int crl_zygote_main(const struct crl_zygote_runtime *rt)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_seccomp_build(CRL_SECCOMP_FUNCTION, &g_filter, &err) < 0) {
        crl_error(NULL, "zygote %s: %s", rt->name, err.msg);
        return 1;
    }
    /* SIGCHLD through a signalfd, so one poll serves both. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0 || rt->prepare() < 0) {
        crl_error(NULL, "zygote %s: could not start", rt->name);
        return 1;
    }
    struct crl_zyg_reply hello = {.op = CRL_ZYG_HELLO};
    send_reply(&hello, NULL, 0);
    char *msg = malloc(CRL_ZYG_MAX_MSG);
    if (!msg)
        return 1;
    for (;;) {
        struct pollfd pf[2] = {{CRL_ZYG_FD, POLLIN, 0}, {sfd, POLLIN, 0}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pf[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) > 0)
                ;
            reap();
        }
        if (!pf[0].revents)
            continue;
        int fds[CRL_ZYG_MAX_FDS];
        int nfds = CRL_ZYG_MAX_FDS;
        ssize_t len = crl_recv_fds(CRL_ZYG_FD, msg, CRL_ZYG_MAX_MSG, fds, &nfds);
        if (len <= 0)
            return 0; /* corrald is gone; each call dies with us (PDEATHSIG) */
        uint32_t op;
        if ((size_t)len >= sizeof(struct crl_zyg_fork) &&
            (memcpy(&op, msg + offsetof(struct crl_zyg_fork, op), sizeof(op)), op == CRL_ZYG_FORK))
            handle_fork(rt, msg, (size_t)len, fds, nfds);
        else
            crl_warn(NULL, "zygote %s: a request it does not know", rt->name);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    }
}
