#include "zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/seccomp.h"
#include "../../core/tar.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
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

/* A restore, in the jailed child: the change set on stdin applied to the
 * scratch dir (our cwd) as the sandbox's uid, owners ignored, nothing
 * followed out of it (crl_tar_apply's checks, and Landlock's walls around
 * them).  A file over disk_mb fails with EFBIG rather than a SIGXFSZ. */
static void restore(void)
{
    signal(SIGXFSZ, SIG_IGN);
    close(CRL_ZYG_STATUS_FD); /* started */
    char msg[512];
    unsigned long n;
    int code = crl_tar_apply(0, 0, &n, msg, sizeof(msg));
    dprintf(2, "%s\n", msg);
    _exit(code);
}

/* In the child: jail, then the call.  A failure before the call goes to
 * corrald on the status pipe ("ERRNO jail-STEP"), and the child exits. */
static void child(const struct crl_zygote_runtime *rt, const struct crl_zyg_fork *f, int *fds,
                  char **strings, uint32_t n, char **envp, bool in_cgroup)
{
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* A spare, forked before its call was known, joins a v2 cgroup by
     * writing itself into it, as on v1. */
    int procs = -1;
    if (f->into_cgroup && !in_cgroup)
        procs = openat(fds[CRL_ZYG_FIXED_FDS], "cgroup.procs", O_WRONLY | O_CLOEXEC);
    struct crl_jail j = {
        .stdio = {fds[0], fds[1], fds[2]},
        .status_fd = fds[4],
        .status_at = CRL_ZYG_STATUS_FD,
        .scratch_fd = fds[3],
        .scratch = f->scratch,
        .cgroup_fds = f->into_cgroup ? &procs : fds + CRL_ZYG_FIXED_FDS,
        .n_cgroup_fds = f->into_cgroup ? (in_cgroup ? 0 : 1) : f->n_cgroup_fds,
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
        /* its status pipe may be where it was, or already moved */
        int to = fcntl(CRL_ZYG_STATUS_FD, F_GETFD) >= 0 ? CRL_ZYG_STATUS_FD : fds[4];
        dprintf(to, "%d jail-%s\n", -r, step);
        _exit(126);
    }
    if (f->kind == CRL_ZYG_RESTORE)
        restore();
    rt->run((enum crl_zyg_kind)f->kind, strings, n, envp);
    _exit(127);
}

/* A FORK request: its struct, and its strings (malloc'd vectors). */
static int parse_fork(char *msg, size_t len, int nfds, struct crl_zyg_fork *f, char ***strings,
                      char ***envp)
{
    memcpy(f, msg, sizeof(*f));
    uint32_t n = f->argc, envc = f->envc;
    *strings = *envp = NULL;
    if ((unsigned)nfds != CRL_ZYG_FIXED_FDS + f->n_cgroup_fds ||
        (f->into_cgroup && f->n_cgroup_fds != 1) || n == 0 || n > 65536 || envc > 4096)
        return -1;
    *strings = calloc(n + 1, sizeof(char *));
    *envp = calloc(envc + 1, sizeof(char *));
    if (!*strings || !*envp || unpack(msg + sizeof(*f), len - sizeof(*f), *strings, n) < 0) {
        free(*strings);
        free(*envp);
        return -1;
    }
    char *env = (*strings)[n - 1] + strlen((*strings)[n - 1]) + 1;
    if (unpack(env, len - (size_t)(env - msg), *envp, envc) < 0) {
        free(*strings);
        free(*envp);
        return -1;
    }
    f->scratch[sizeof(f->scratch) - 1] = 0;
    return 0;
}

/* ---- spares: children forked ahead of their calls ---- */

/* Forking an initialised interpreter is the slow part of a call (page
 * tables copied): the zygote keeps SPARES children forked while it is
 * idle, each waiting on a socket of its own for a call, so a call that
 * finds one ready does not wait for a fork. */
#define SPARES 2

struct spare {
    pid_t pid;
    int sock;
};

static struct spare g_spares[SPARES];
static int g_nspares, g_sfd = -1;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* While it waits, a spare copies the pages it shares with the zygote that
 * a call would write (its writable private mappings), in one madvise per
 * mapping: a call then takes no copy-on-write faults, which are the
 * costliest part of running a forked interpreter (each a trap and a TLB
 * flush).  Best effort: a mapping that refuses is left as it is. */
#define PREFAULT_MAX (64ul << 20)

static void prefault(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perms[5];
        /* not reservations either (a sanitizer's shadow is terabytes) */
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[1] != 'w' ||
            perms[3] != 'p' || strstr(line, "[stack]") || strstr(line, "[vvar]") ||
            hi - lo > PREFAULT_MAX)
            continue;
        madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
    }
    fclose(f);
}

static void spare_main(const struct crl_zygote_runtime *rt, int sock)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (rt->runs_in_image)
        prefault();
    close(CRL_ZYG_FD);
    close(g_sfd);
    for (int i = 0; i < g_nspares; i++)
        close(g_spares[i].sock);
    char *msg = malloc(CRL_ZYG_MAX_MSG);
    int fds[CRL_ZYG_MAX_FDS];
    int nfds = CRL_ZYG_MAX_FDS;
    ssize_t len = msg ? crl_recv_fds(sock, msg, CRL_ZYG_MAX_MSG, fds, &nfds) : -1;
    struct crl_zyg_fork f;
    char **strings, **envp;
    if (len <= 0 || parse_fork(msg, (size_t)len, nfds, &f, &strings, &envp) < 0)
        _exit(0); /* not needed after all */
    close(sock);
    child(rt, &f, fds, strings, f.argc, envp, false);
}

static bool make_spare(const struct crl_zygote_runtime *rt)
{
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_ZYG_MAX_MSG, NULL) < 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        if (rt->after_fork)
            rt->after_fork();
        close(pair[0]);
        spare_main(rt, pair[1]);
    }
    close(pair[1]);
    if (pid < 0) {
        close(pair[0]);
        return false;
    }
    g_spares[g_nspares++] = (struct spare){pid, pair[0]};
    return true;
}

/* Hand a call to a spare; the pid it runs as, or -1. */
static pid_t use_spare(const char *msg, size_t len, const int *fds, int nfds)
{
    while (g_nspares > 0) {
        struct spare sp = g_spares[--g_nspares];
        ssize_t r = crl_send_fds(sp.sock, msg, len, fds, nfds);
        close(sp.sock);
        if (r >= 0)
            return sp.pid;
        kill(sp.pid, SIGKILL); /* reaped as any child */
    }
    return -1;
}

static void handle_fork(const struct crl_zygote_runtime *rt, char *msg, size_t len, int *fds,
                        int nfds)
{
    struct crl_zyg_fork f;
    char **strings, **envp;
    if (parse_fork(msg, len, nfds, &f, &strings, &envp) < 0) {
        memcpy(&f, msg, sizeof(f));
        reply_err(f.id, EPROTO, "fork: malformed request");
        return;
    }
    pid_t pid = use_spare(msg, len, fds, nfds);
    if (pid < 0 && f.into_cgroup) {
        /* Born in its cgroup (v2): no attach, and no moment outside it.  The
         * zygote is single-threaded, so a raw clone3 is a fork. */
        struct clone_args ca = {.flags = CLONE_INTO_CGROUP,
                                .exit_signal = SIGCHLD,
                                .cgroup = (uint64_t)fds[CRL_ZYG_FIXED_FDS]};
        pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid == 0 && rt->after_fork)
            rt->after_fork();
        if (pid == 0)
            child(rt, &f, fds, strings, f.argc, envp, true);
    } else if (pid < 0) {
        pid = fork();
        if (pid == 0 && rt->after_fork)
            rt->after_fork();
        if (pid == 0)
            child(rt, &f, fds, strings, f.argc, envp, false);
    }
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
    g_sfd = sfd;
    if (sfd < 0 || rt->prepare() < 0) {
        crl_error(NULL, "zygote %s: could not start", rt->name);
        return 1;
    }
    /* A call's orphans (what it started and left) are ours to reap, not
     * the host's init's: they end with the call's leaf anyway. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct crl_zyg_reply hello = {.op = CRL_ZYG_HELLO};
    send_reply(&hello, NULL, 0);
    char *msg = malloc(CRL_ZYG_MAX_MSG);
    if (!msg)
        return 1;
    bool spares_failed = false;
    for (;;) {
        struct pollfd pf[2] = {{CRL_ZYG_FD, POLLIN, 0}, {sfd, POLLIN, 0}};
        int n = poll(pf, 2, g_nspares < SPARES && !spares_failed ? 0 : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (n == 0) { /* idle: fork a spare (after a failure, not before the next call) */
            spares_failed = !make_spare(rt);
            continue;
        }
        if (pf[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) > 0)
                ;
            reap();
        }
        if (!pf[0].revents)
            continue;
        spares_failed = false;
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
