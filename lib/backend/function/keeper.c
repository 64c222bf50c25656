#include "keeper.h"

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
#include <sys/prctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../helper/tar.h"
#include "../../util/fdio.h"
#include "../../util/run.h"
#include "jail.h"
#include "root.h"
#include "step.h"

/* Spares: children forked ahead of their calls while the keeper is idle,
 * each waiting on a socket of its own, so that a call does not wait for
 * the fork of an initialised interpreter (its page tables copied).  Only
 * while the sandbox is hot (a call within HOT_NS): an idle sandbox holds
 * none.  A spare does not copy its pages ahead of its call: until its
 * call it is in corrald's cgroup, as the keeper is, and the copy (some
 * 12 MiB for python) would stay charged there, outside the sandbox's
 * limits; the call pays for the few pages it writes (measured: python calls
 * twice as fast, docs/benchmarks.md). */
#define SPARES 2
#define HOT_NS (10ull * 1000 * 1000 * 1000)

struct spare {
    pid_t pid;
    int sock;
};

static struct {
    const struct crl_zygote_runtime *rt;
    const struct sock_fprog *filter;
    int sock; /* to corrald */
    int sfd;  /* SIGCHLD */
    int scratch_fd;
    int landlock_fd; /* the calls' ruleset, made at claim */
    uid_t uid;
    gid_t gid;
    pid_t *calls; /* children running a call, whose end corrald is told */
    size_t ncalls, cap;
    struct spare spares[SPARES];
    int nspares;
    unsigned long long hot_until;
} k;

static void send_reply(const struct crl_zyg_reply *r, const int *fds, int nfds)
{
    if (crl_send_fds(k.sock, r, sizeof(*r), fds, nfds) < 0)
        _exit(1); /* corrald is gone: so is the sandbox */
}

static void reply_err(uint64_t id, int e, const char *msg)
{
    struct crl_zyg_reply r = {.id = id, .op = CRL_ZYG_REPLY, .err = e};
    snprintf(r.msg, sizeof(r.msg), "%s", msg);
    send_reply(&r, NULL, 0);
}

/* ---- claim: the sandbox's identity ---- */

/* The sandbox's clocks, for the children (calls): uptime and boot time
 * are the sandbox's, not the host's.  A kernel without time namespaces
 * (CONFIG_TIME_NS) leaves the host's. */
static int time_namespace(const struct crl_timens *t)
{
    if (unshare(CLONE_NEWTIME) < 0)
        return errno == EINVAL ? 0 : -errno;
    char offsets[96];
    crl_timens_format(t, offsets, sizeof(offsets));
    return crl_write_file_at(AT_FDCWD, "/proc/self/timens_offsets", offsets) < 0 ? -errno : 0;
}

/* fds: the network namespace, then the cgroup directories to join. */
static int claim(struct crl_zyg_claim *c, const int *fds, int nfds, const char **step)
{
    *step = "claim";
    if (c->n_cgroup_fds < 1 || c->n_cgroup_fds > CRL_ZYG_MAX_CGROUP_FDS ||
        c->n_home_fds > CRL_ZYG_MAX_CGROUP_FDS || c->n_volumes > CRL_ZYG_MAX_VOLUMES ||
        (unsigned)nfds != 1 + c->n_cgroup_fds + c->n_home_fds + c->n_volumes || c->uid == 0 ||
        c->gid == 0 || !memchr(c->hostname, 0, sizeof(c->hostname)))
        return -EPROTO;
    for (uint32_t i = 0; i < c->n_volumes; i++)
        if (!memchr(c->volume_paths[i], 0, sizeof(c->volume_paths[i])))
            return -EPROTO;
    for (unsigned i = 0; i < c->n_cgroup_fds; i++)
        STEP("cgroup", crl_write_file_at(fds[1 + i], "cgroup.procs", "0") < 0 ? -errno : 0);
    /* The cgroup just joined is the root of what the sandbox sees; then
     * back to corrald's, where the zygote and the spawners live too, so that
     * what the sandbox's limits count (memory, pids, CPU) is its calls
     * alone.  Calls join their leaves. */
    STEP("cgroupns", neg_errno(unshare(CLONE_NEWCGROUP)));
    for (unsigned i = 0; i < c->n_home_fds; i++)
        STEP("cgroup",
             crl_write_file_at(fds[1 + c->n_cgroup_fds + i], "cgroup.procs", "0") < 0 ? -errno : 0);
    STEP("netns", neg_errno(setns(fds[0], CLONE_NEWNET)));
    STEP("hostname", neg_errno(sethostname(c->hostname, strlen(c->hostname))));
    STEP("root", crl_fnroot_claim(c, step));
    STEP("volume", crl_fnroot_volumes(c, fds + 1 + c->n_cgroup_fds + c->n_home_fds, step));
    STEP("timens", time_namespace(&c->timens));
    int rs = crl_jail_ruleset(k.scratch_fd, c);
    STEP("landlock", rs);
    k.landlock_fd = rs;
    k.uid = c->uid;
    k.gid = c->gid;
    return 0;
}

static void await_claim(void)
{
    struct crl_zyg_claim c;
    int fds[1 + 2 * CRL_ZYG_MAX_CGROUP_FDS + CRL_ZYG_MAX_VOLUMES],
        nfds = 1 + 2 * CRL_ZYG_MAX_CGROUP_FDS + CRL_ZYG_MAX_VOLUMES;
    ssize_t len = crl_recv_fds(k.sock, &c, sizeof(c), fds, &nfds);
    if (len <= 0)
        _exit(0); /* corrald let the pool go */
    const char *step = "claim";
    int r =
        len == (ssize_t)sizeof(c) && c.op == CRL_ZYG_CLAIM ? claim(&c, fds, nfds, &step) : -EPROTO;
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    struct crl_zyg_reply rep = {.op = CRL_ZYG_REPLY, .err = -r};
    snprintf(rep.msg, sizeof(rep.msg), "%s", r < 0 ? step : "");
    send_reply(&rep, NULL, 0);
    if (r < 0)
        _exit(1);
}

/* ---- calls ---- */

/* A restore, in the jailed child: the change set on stdin applied to the
 * scratch dir (our cwd) as the sandbox's uid, owners ignored, nothing
 * followed out of it (crl_tar_apply's checks, and Landlock's walls around
 * them). */
static void restore(void)
{
    close(CRL_ZYG_STATUS_FD); /* started */
    char msg[512];
    unsigned long n;
    int code = crl_tar_apply(0, 0, &n, msg, sizeof(msg));
    dprintf(2, "%s\n", msg);
    _exit(code);
}

/* In the child: jail, then the call.  A failure before the call goes to
 * corrald on the status pipe ("ERRNO jail-STEP"), and the child exits. */
static void child(const struct crl_zyg_fork *f, int *fds, char **strings, char **envp,
                  bool in_cgroup)
{
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* A spare, forked before its call was known, joins a v2 cgroup by
     * writing itself into it, as on v1. */
    int procs = -1, r = 0;
    const char *step = "cgroup";
    if (f->into_cgroup && !in_cgroup &&
        (procs = openat(fds[CRL_ZYG_FIXED_FDS], "cgroup.procs", O_WRONLY | O_CLOEXEC)) < 0)
        r = -errno;
    struct crl_jail j = {
        .stdio = {fds[0], fds[1], fds[2]},
        .status_fd = fds[3],
        .status_at = CRL_ZYG_STATUS_FD,
        .scratch_fd = k.scratch_fd,
        .landlock_fd = k.landlock_fd,
        .cgroup_fds = f->into_cgroup ? &procs : fds + CRL_ZYG_FIXED_FDS,
        .n_cgroup_fds = f->into_cgroup ? (in_cgroup ? 0 : 1) : f->n_cgroup_fds,
        .uid = k.uid,
        .gid = k.gid,
        .nproc = f->nproc,
        .nofile = f->nofile,
        .tty = f->tty == 1,
        .seccomp = k.filter,
    };
    if (r == 0)
        r = crl_jail_enter(&j, &step);
    if (r < 0) {
        /* its status pipe may be where it was, or already moved */
        int to = fcntl(CRL_ZYG_STATUS_FD, F_GETFD) >= 0 ? CRL_ZYG_STATUS_FD : fds[3];
        dprintf(to, "%d jail-%s\n", -r, step);
        _exit(126);
    }
    if (f->kind == CRL_ZYG_RESTORE)
        restore();
    k.rt->run((enum crl_zyg_kind)f->kind, strings, f->argc, envp);
    _exit(127);
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

/* A FORK request: its struct, and its strings (malloc'd vectors). */
static int parse_fork(char *msg, size_t len, int nfds, struct crl_zyg_fork *f, char ***strings,
                      char ***envp)
{
    *strings = *envp = NULL;
    if (len < sizeof(*f))
        return -1;
    memcpy(f, msg, sizeof(*f));
    uint32_t n = f->argc, envc = f->envc;
    if (f->op != CRL_ZYG_FORK || f->n_cgroup_fds > CRL_ZYG_MAX_CGROUP_FDS ||
        (unsigned)nfds != CRL_ZYG_FIXED_FDS + f->n_cgroup_fds ||
        (f->into_cgroup && f->n_cgroup_fds != 1) || n == 0 || n > 65536 || envc > 4096 ||
        f->kind > CRL_ZYG_RESTORE)
        return -1;
    *strings = calloc(n + 1, sizeof(char *));
    *envp = calloc(envc + 1, sizeof(char *));
    char *env = NULL;
    if (*strings && *envp && unpack(msg + sizeof(*f), len - sizeof(*f), *strings, n) == 0) {
        env = (*strings)[n - 1] + strlen((*strings)[n - 1]) + 1;
        if (unpack(env, len - (size_t)(env - msg), *envp, envc) == 0)
            return 0;
    }
    free(*strings);
    free(*envp);
    *strings = *envp = NULL;
    return -1;
}

static void spare_main(int sock)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(k.sock);
    close(k.sfd);
    for (int i = 0; i < k.nspares; i++)
        close(k.spares[i].sock);
    char *msg = malloc(CRL_ZYG_MAX_MSG);
    int fds[CRL_ZYG_MAX_FDS];
    int nfds = CRL_ZYG_MAX_FDS;
    ssize_t len = msg ? crl_recv_fds(sock, msg, CRL_ZYG_MAX_MSG, fds, &nfds) : -1;
    struct crl_zyg_fork f;
    char **strings, **envp;
    if (len <= 0 || parse_fork(msg, (size_t)len, nfds, &f, &strings, &envp) < 0)
        _exit(0); /* not needed after all */
    close(sock);
    child(&f, fds, strings, envp, false);
}

static bool make_spare(void)
{
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_ZYG_MAX_MSG, NULL) < 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        if (k.rt->after_fork)
            k.rt->after_fork();
        close(pair[0]);
        spare_main(pair[1]);
    }
    close(pair[1]);
    if (pid < 0) {
        close(pair[0]);
        return false;
    }
    k.spares[k.nspares++] = (struct spare){pid, pair[0]};
    return true;
}

/* Cold: the spares go (each exits on its socket's end). */
static void dismiss_spares(void)
{
    while (k.nspares > 0)
        close(k.spares[--k.nspares].sock);
}

/* Hand a call to a spare; the pid it runs as, or -1. */
static pid_t use_spare(const char *msg, size_t len, const int *fds, int nfds)
{
    while (k.nspares > 0) {
        struct spare sp = k.spares[--k.nspares];
        ssize_t r = crl_send_fds(sp.sock, msg, len, fds, nfds);
        close(sp.sock);
        if (r >= 0)
            return sp.pid;
        kill(sp.pid, SIGKILL); /* reaped as any child */
    }
    return -1;
}

static bool track(pid_t pid)
{
    if (k.ncalls == k.cap) {
        size_t cap = k.cap ? k.cap * 2 : 16;
        pid_t *calls = realloc(k.calls, cap * sizeof(*calls));
        if (!calls)
            return false;
        k.calls = calls;
        k.cap = cap;
    }
    k.calls[k.ncalls++] = pid;
    return true;
}

static bool untrack(pid_t pid)
{
    for (size_t i = 0; i < k.ncalls; i++)
        if (k.calls[i] == pid) {
            k.calls[i] = k.calls[--k.ncalls];
            return true;
        }
    return false;
}

static void handle_fork(char *msg, size_t len, int *fds, int nfds)
{
    struct crl_zyg_fork f;
    char **strings, **envp;
    if (parse_fork(msg, len, nfds, &f, &strings, &envp) < 0) {
        uint64_t id = 0;
        if (len >= sizeof(id))
            memcpy(&id, msg, sizeof(id));
        reply_err(id, EPROTO, "fork: malformed request");
        return;
    }
    k.hot_until = crl_now_ns() + HOT_NS;
    pid_t pid = use_spare(msg, len, fds, nfds);
    if (pid < 0 && f.into_cgroup) {
        /* Born in its cgroup (v2): no attach, and no moment outside it.  The
         * keeper is single-threaded, so a raw clone3 is a fork. */
        struct clone_args ca = {.flags = CLONE_INTO_CGROUP,
                                .exit_signal = SIGCHLD,
                                .cgroup = (uint64_t)fds[CRL_ZYG_FIXED_FDS]};
        pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
        if (pid == 0) {
            if (k.rt->after_fork)
                k.rt->after_fork();
            child(&f, fds, strings, envp, true);
        }
    } else if (pid < 0) {
        pid = fork();
        if (pid == 0) {
            if (k.rt->after_fork)
                k.rt->after_fork();
            child(&f, fds, strings, envp, false);
        }
    }
    free(strings);
    free(envp);
    if (pid < 0) {
        reply_err(f.id, errno, "fork");
        return;
    }
    if (!track(pid)) {
        kill(pid, SIGKILL);
        reply_err(f.id, ENOMEM, "fork");
        return;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct crl_zyg_reply r = {.id = f.id, .op = CRL_ZYG_REPLY, .pid = pid};
    send_reply(&r, &pidfd, pidfd >= 0 ? 1 : 0);
    if (pidfd >= 0)
        close(pidfd);
}

/* A process reaped: corrald hears of it if it was a call. */
static void reaped(pid_t pid, int status, const struct rusage *ru)
{
    if (!untrack(pid))
        return;
    struct crl_zyg_reply r = {.op = CRL_ZYG_EXITED, .pid = pid, .status = status};
    r.cpu_s = (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 +
              (double)ru->ru_stime.tv_sec + ru->ru_stime.tv_usec / 1e6;
    r.maxrss_bytes = (uint64_t)ru->ru_maxrss * 1024;
    send_reply(&r, NULL, 0);
}

/* As the sandbox's PID 1, every orphan in it is ours to reap. */
static void reap(void)
{
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG, &ru);
        if (pid <= 0)
            return;
        reaped(pid, status, &ru);
    }
}

/* The IPC objects of the sandbox's namespace, removed while nothing is
 * attached any more: a segment goes at once, and with it its pages and
 * their charge to the sandbox's memory cgroup.  (The namespace would take
 * them when it is freed, but the kernel frees it later, from a workqueue:
 * the next sandbox of the slot would find them charged.) */
static void remove_ipc(void)
{
    static const char *const kinds[] = {"shm", "sem", "msg"};
    for (int i = 0; i < 3; i++) {
        char path[32];
        snprintf(path, sizeof(path), "/proc/sysvipc/%s", kinds[i]);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        char line[512];
        long key, id;
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "%ld %ld", &key, &id) == 2) {
                if (i == 0)
                    shmctl((int)id, IPC_RMID, NULL);
                else if (i == 1)
                    semctl((int)id, 0, IPC_RMID);
                else
                    msgctl((int)id, IPC_RMID, NULL);
            }
        fclose(f);
    }
}

/* END: every other process of the pid namespace killed (calls, what they
 * left, spares) and reaped, calls reported as any end is, the IPC objects
 * removed, and then the keeper itself, which takes the namespaces. */
static void end_sandbox(void)
{
    kill(-1, SIGKILL);
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, __WALL, &ru);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0)
            break;
        reaped(pid, status, &ru);
    }
    remove_ipc();
    _exit(0);
}

/* The poll timeout: at once while a spare is due, until the sandbox cools
 * while it is hot, else for ever. */
static int idle_timeout(bool spares_failed)
{
    unsigned long long now = crl_now_ns();
    if (now >= k.hot_until)
        return -1;
    if (k.nspares < SPARES && !spares_failed)
        return 0;
    return (int)((k.hot_until - now) / 1000000) + 1;
}

static void serve(void)
{
    char *msg = malloc(CRL_ZYG_MAX_MSG);
    if (!msg)
        _exit(1);
    bool spares_failed = false;
    for (;;) {
        struct pollfd pf[2] = {{k.sock, POLLIN, 0}, {k.sfd, POLLIN, 0}};
        int n = poll(pf, 2, idle_timeout(spares_failed));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        if (n == 0) {
            if (crl_now_ns() >= k.hot_until)
                dismiss_spares();
            else /* idle and hot: fork a spare (after a failure, not before the next call) */
                spares_failed = !make_spare();
            continue;
        }
        if (pf[1].revents) {
            struct signalfd_siginfo si;
            while (read(k.sfd, &si, sizeof(si)) > 0)
                ;
            reap();
        }
        if (!pf[0].revents)
            continue;
        spares_failed = false;
        int fds[CRL_ZYG_MAX_FDS];
        int nfds = CRL_ZYG_MAX_FDS;
        ssize_t len = crl_recv_fds(k.sock, msg, CRL_ZYG_MAX_MSG, fds, &nfds);
        if (len <= 0)
            _exit(0); /* corrald is gone: the pid namespace ends with us */
        uint32_t op = 0;
        if ((size_t)len >= offsetof(struct crl_zyg_req, op) + sizeof(op))
            memcpy(&op, msg + offsetof(struct crl_zyg_req, op), sizeof(op));
        if (op == CRL_ZYG_END)
            end_sandbox();
        handle_fork(msg, (size_t)len, fds, nfds);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    }
}

/* Our descriptors at 100 and up, out of the way; everything else of the
 * zygote's closed but stdio (the log). */
static int keep_fd(int fd, int at_least)
{
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, at_least);
    if (moved < 0)
        _exit(1);
    return moved;
}

void crl_keeper_main(const struct crl_zygote_runtime *rt, int sock, const char *root_dir,
                     const struct sock_fprog *filter)
{
    k.rt = rt;
    k.filter = filter;
    k.sock = keep_fd(sock, 100);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        _exit(1);
    k.sfd = keep_fd(sfd, 100);
    syscall(SYS_close_range, 3, 99, 0);
    syscall(SYS_close_range, (k.sock > k.sfd ? k.sock : k.sfd) + 1, ~0u, 0);
    prctl(PR_SET_DUMPABLE, 0);
    const char *step = "?";
    int r = crl_fnroot_build(root_dir, &step);
    int fds[2] = {-1, -1};
    if (r == 0 && ((fds[0] = crl_openat(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0)) < 0 ||
                   (fds[1] = crl_openat(AT_FDCWD, CRL_FN_SCRATCH, O_PATH | O_DIRECTORY, 0)) < 0)) {
        r = -errno;
        step = "open-root";
    }
    /* Built (at the zygote's low priority): from now on it answers at once,
     * and its calls run at the ordinary one. */
    if (setpriority(PRIO_PROCESS, 0, 0) < 0 && r == 0) {
        r = -errno;
        step = "setpriority";
    }
    struct crl_zyg_reply ready = {.op = CRL_ZYG_READY, .err = -r};
    snprintf(ready.msg, sizeof(ready.msg), "%s", r < 0 ? step : "");
    send_reply(&ready, fds, r < 0 ? 0 : 2);
    if (r < 0)
        _exit(1);
    close(fds[0]);
    k.scratch_fd = fds[1];
    await_claim();
    serve();
    _exit(0);
}
