/* corral-init: a sandbox's PID 1, once its root is built, and the one
 * process that starts the sandbox's commands.
 *
 * The spawner's clone child builds the sandbox (lib/backend/container/init.c),
 * gives itself the identity every process of the sandbox has (its
 * namespaces, cgroup and clocks, root with Docker's capabilities,
 * no_new_privs, the seccomp filter) and executes this, so PID 1 owns a few
 * pages of its own instead of sharing the spawner's memory: an OOM kill
 * inside the sandbox can then never reach the spawner or another sandbox.
 * It tells the spawner it is up (with the descriptors of the sandbox's root
 * and tmpfs), and then serves: a command is a fork of this process, which
 * inherits all of that identity, so an exec costs one fork of a few pages
 * and no jail (spawn_proto.h has the protocol).  Between requests it reaps
 * orphans, and tells the spawner of the end of each child it forked.  It
 * keeps corrald's ends of a session's shell's stdio while the shell runs,
 * so that the shell outlives a corrald that dies and the next takes them.
 *
 * Nothing in the sandbox can reach it: it is non-dumpable and the sandbox
 * has no CAP_SYS_PTRACE (no ptrace, no /proc/1/mem or fd, no pidfd_getfd),
 * and as its pid namespace's init it gets no signal from inside but those
 * it handles, which are none.  Its children are non-dumpable copies until
 * they execute the command.
 *
 * No libc: static, freestanding, raw syscalls only, so it runs in any image. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../../lib/backend/container/spawn_proto.h"
#include "../../lib/util/rawsys.h"

/* Descriptors the clone child leaves us (see init.c); besides, the
 * spawner's end of SYNC_FD's socket, kept at CRL_INIT_SPARE_FD for the
 * next spawner.  TMPFS_FD is kept too, for a corrald started anew. */
enum { SYNC_FD = 3, ROOT_FD = 4, TMPFS_FD = CRL_INIT_TMPFS_FD };

/* The fds a CRL_INIT_EXEC brings: stdin, stdout, stderr, the control
 * socket; with CRL_EXEC_F_TTY only the last; with CRL_EXEC_F_KEEP three
 * more, corrald's ends of the stdio, which we keep. */
enum { EXEC_FDS = 4, CTL = 3, KEEP_FDS = 3 };

/* Children we forked and have yet to report the end of. */
#define MAX_KIDS 4096

static const char default_path[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

static union {
    struct crl_init_exec rq;
    char bytes[CRL_INIT_MAX_MSG];
} in;
static int kids[MAX_KIDS];
static int kids_kept[MAX_KIDS]; /* the first fd we keep of each (-1: none) */
static unsigned n_kids;
static unsigned char kept_used[CRL_INIT_MAX_KEPT];

/* The compiler may call these for struct copies and zeroing. */
__attribute__((used)) void *memset(void *d, int c, unsigned long n)
{
    volatile unsigned char *p = d;
    while (n--)
        *p++ = (unsigned char)c;
    return d;
}

__attribute__((used)) void *memcpy(void *d, const void *s, unsigned long n)
{
    volatile unsigned char *p = d;
    const unsigned char *q = s;
    while (n--)
        *p++ = *q++;
    return d;
}

/* Send `len` bytes of msg with up to two descriptors on `sock`. */
static long send_fds(int sock, const void *msg, unsigned long len, const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * 2)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (unsigned)nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (unsigned)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (unsigned)nfds);
    }
    long r;
    do
        r = crl_raw3(SYS_sendmsg, sock, &mh, MSG_NOSIGNAL);
    while (r == -EINTR);
    return r;
}

/* ---- the child: becomes the command ---- */

static void child_fail(long err, unsigned step)
{
    struct crl_init_failed f = {.err = (int32_t)-err, .step = step};
    crl_raw3(SYS_write, CTL, &f, sizeof(f));
    crl_raw_exit(127);
}

/* execvp without libc: search PATH, remember EACCES, as POSIX describes. */
static long exec_search(char **argv, char **envp, const char *path)
{
    const char *file = argv[0];
    for (const char *s = file; *s; s++)
        if (*s == '/')
            return crl_raw3(SYS_execve, file, argv, envp);
    unsigned long flen = crl_raw_strlen(file);
    char buf[4096];
    long last = -ENOENT;
    int eacces = 0;
    for (const char *p = path;;) {
        const char *e = p;
        while (*e && *e != ':')
            e++;
        unsigned long dlen = (unsigned long)(e - p);
        if (dlen + flen + 2 <= sizeof(buf)) {
            unsigned long k = 0;
            for (unsigned long i = 0; i < dlen; i++)
                buf[k++] = p[i];
            if (dlen)
                buf[k++] = '/';
            for (unsigned long i = 0; i <= flen; i++)
                buf[k++] = file[i];
            last = crl_raw3(SYS_execve, buf, argv, envp);
            if (last == -EACCES)
                eacces = 1;
            else if (last != -ENOENT && last != -ENOTDIR)
                return last;
        }
        if (!*e)
            break;
        p = e + 1;
    }
    return eacces ? -EACCES : last;
}

/* "PATH=" at the start of s? */
static int is_path(const char *s)
{
    return s[0] == 'P' && s[1] == 'A' && s[2] == 'T' && s[3] == 'H' && s[4] == '=';
}

/* A terminal of the sandbox's own, opened as its root: its slave becomes
 * our controlling terminal and stdio, owned by the user we become, and
 * its master goes to the spawner on the control socket. */
static long open_tty(const struct crl_init_exec *rq)
{
    /* 0-2 are free now: both ends go above them, out of the way of the dups */
    long m = crl_raw4(SYS_openat, AT_FDCWD, "/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC, 0);
    if (m >= 0 && m < CTL) {
        long hi = crl_raw3(SYS_fcntl, m, F_DUPFD_CLOEXEC, 100);
        crl_raw1(SYS_close, m);
        m = hi;
    }
    if (m < 0)
        return m;
    int unlock = 0;
    struct winsize ws = {.ws_row = rq->rows, .ws_col = rq->cols};
    long s = crl_raw3(SYS_ioctl, m, TIOCSPTLCK, &unlock);
    if (s >= 0)
        s = crl_raw3(SYS_ioctl, m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s >= 0 && s < CTL) {
        long hi = crl_raw3(SYS_fcntl, s, F_DUPFD_CLOEXEC, 100);
        crl_raw1(SYS_close, s);
        s = hi;
    }
    long r = s;
    if (r >= 0 && (r = crl_raw3(SYS_ioctl, s, TIOCSWINSZ, &ws)) >= 0 &&
        (r = crl_raw3(SYS_fchown, s, rq->uid, -1)) >= 0 && (r = crl_raw2(SYS_fchmod, s, 0620)) >= 0)
        for (int i = 0; i < 3 && r >= 0; i++)
            r = crl_raw3(SYS_dup3, s, i, 0);
    if (s >= 0)
        crl_raw1(SYS_close, s);
    if (r >= 0)
        r = crl_raw3(SYS_ioctl, 0, TIOCSCTTY, 0);
    if (r >= 0) {
        struct crl_init_failed f = {.err = 0, .step = CRL_STEP_TTY};
        int fd = (int)m;
        r = send_fds(CTL, &f, sizeof(f), &fd, 1);
    }
    crl_raw1(SYS_close, m);
    return r < 0 ? r : 0;
}

/* fds: stdin, stdout, stderr, control (or the control socket alone, for a
 * terminal), at whatever numbers they came. */
__attribute__((noreturn)) static void child(const struct crl_init_exec *rq, const int *fds,
                                            int nfds)
{
    /* Signals: nothing blocked (we block all), nothing ignored (we ignore none). */
    unsigned long none = 0;
    crl_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &none, 0, sizeof(none));
    /* stdio and the control socket through high numbers first, so no target
     * is also a source; then nothing else, our socket to the spawner least. */
    int hi[EXEC_FDS], first = EXEC_FDS - nfds;
    for (int i = first; i < EXEC_FDS; i++) {
        long r = crl_raw3(SYS_fcntl, fds[i - first], F_DUPFD_CLOEXEC, 100);
        if (r < 0)
            crl_raw_exit(127); /* nowhere to say it: the spawner sees EOF before a pid */
        hi[i] = (int)r;
    }
    for (int i = first; i < EXEC_FDS; i++)
        if (crl_raw3(SYS_dup3, hi[i], i, i == CTL ? O_CLOEXEC : 0) < 0)
            crl_raw_exit(127);
    if (first)
        crl_raw3(SYS_close_range, 0, CTL - 1, 0); /* the terminal comes there */
    crl_raw3(SYS_close_range, EXEC_FDS, ~0u, 0);

    /* The spawner puts us in the exec's cgroups, then says go: nothing of
     * the command runs outside them. */
    char go;
    long r;
    do
        r = crl_raw3(SYS_read, CTL, &go, 1);
    while (r == -EINTR);
    if (r != 1)
        crl_raw_exit(127);

    if (rq->flags & (CRL_EXEC_F_SETSID | CRL_EXEC_F_TTY))
        crl_raw0(SYS_setsid);
    if ((rq->flags & CRL_EXEC_F_TTY) && (r = open_tty(rq)) < 0)
        child_fail(r, CRL_STEP_TTY);
    struct rlimit nofile = {1024, 65536}, core = {0, 0};
    if (crl_raw4(SYS_prlimit64, 0, RLIMIT_NOFILE, &nofile, 0) < 0) {
        /* the hard limit above ours needs a capability the host's root may lack */
        crl_raw4(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, &nofile);
        nofile.rlim_cur = nofile.rlim_max < 1024 ? nofile.rlim_max : 1024;
        crl_raw4(SYS_prlimit64, 0, RLIMIT_NOFILE, &nofile, 0);
    }
    crl_raw4(SYS_prlimit64, 0, RLIMIT_CORE, &core, 0);

    /* argv..., env..., cwd from the request's string area (the spawner
     * checked that they are there and end in NUL). */
    unsigned long n = (unsigned long)rq->argc + rq->envc + 2;
    long m = crl_raw6(SYS_mmap, 0, (long)(n * sizeof(char *)), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m < 0)
        child_fail(m, CRL_STEP_EXEC);
    char **argv = (char **)m, **envp = argv + rq->argc + 1;
    const char *path = default_path;
    char *p = (char *)rq->strings;
    for (unsigned i = 0; i < rq->argc; i++, p += crl_raw_strlen(p) + 1)
        argv[i] = p;
    argv[rq->argc] = 0;
    for (unsigned i = 0; i < rq->envc; i++, p += crl_raw_strlen(p) + 1) {
        envp[i] = p;
        if (path == default_path && is_path(p)) /* the first, as getenv() finds */
            path = p + 5;
    }
    envp[rq->envc] = 0;
    const char *cwd = p;

    /* We are the sandbox's root with its capabilities; anyone else has none
     * once the uid changes. */
    if ((r = crl_raw2(SYS_setgroups, 0, 0)) < 0 ||
        (r = crl_raw3(SYS_setresgid, rq->gid, rq->gid, rq->gid)) < 0 ||
        (r = crl_raw3(SYS_setresuid, rq->uid, rq->uid, rq->uid)) < 0)
        child_fail(r, CRL_STEP_CREDS);
    if ((r = crl_raw1(SYS_chdir, cwd)) < 0)
        child_fail(r, CRL_STEP_CWD);
    child_fail(exec_search(argv, envp, path), CRL_STEP_EXEC);
    crl_raw_exit(127);
}

/* ---- the server ---- */

/* LIST: the children we forked that still run, for a spawner that takes
 * us over (what it asks of us next comes after this answer). */
static void list_kids(uint64_t id)
{
    static struct {
        struct crl_init_note note;
        int32_t pids[MAX_KIDS];
    } m;
    memset(&m.note, 0, sizeof(m.note));
    m.note.op = CRL_INIT_KIDS;
    m.note.id = id;
    m.note.pid = (int32_t)n_kids;
    for (unsigned i = 0; i < n_kids; i++)
        m.pids[i] = kids[i];
    send_fds(SYNC_FD, &m, sizeof(m.note) + n_kids * sizeof(int32_t), 0, 0);
}

/* Keep corrald's ends of a child's stdio (CRL_EXEC_F_KEEP) at three
 * numbers of a free slot; returns the first, or -1 if none is free. */
static int keep(const int *fds)
{
    for (int k = 0; k < CRL_INIT_MAX_KEPT; k++) {
        if (kept_used[k])
            continue;
        int at = CRL_INIT_KEEP_BASE + KEEP_FDS * k;
        for (int i = 0; i < KEEP_FDS; i++)
            if (crl_raw3(SYS_dup3, fds[i], at + i, O_CLOEXEC) < 0) {
                crl_raw3(SYS_close_range, at, at + i, 0);
                return -1;
            }
        kept_used[k] = 1;
        return at;
    }
    return -1;
}

static void unkeep(int at)
{
    if (at < 0)
        return;
    crl_raw3(SYS_close_range, at, at + KEEP_FDS - 1, 0);
    kept_used[(at - CRL_INIT_KEEP_BASE) / KEEP_FDS] = 0;
}

/* One request from the spawner: fork its child and say so; or LIST. */
static void serve(void)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * (EXEC_FDS + KEEP_FDS))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct iovec iov = {.iov_base = in.bytes, .iov_len = sizeof(in.bytes)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    long n = crl_raw3(SYS_recvmsg, SYNC_FD, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n == -EAGAIN || n == -EINTR)
        return;
    if (n <= 0)
        crl_raw_exit(1); /* never while we hold its other end: broken */
    int fds[EXEC_FDS + KEEP_FDS], nfds = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        memcpy(fds, CMSG_DATA(cm), sizeof(int) * (unsigned)nfds);
    }
    if (nfds == 0 && (unsigned long)n == sizeof(in.rq) && in.rq.op == CRL_INIT_LIST) {
        list_kids(in.rq.id);
        return;
    }
    struct crl_init_note note = {.op = CRL_INIT_FORKED, .id = in.rq.id, .kept = -1};
    int pidfd = -1;
    unsigned flags = (unsigned long)n >= sizeof(in.rq) ? in.rq.flags : 0;
    int stdio = flags & CRL_EXEC_F_TTY ? 1 : EXEC_FDS;
    int want = stdio + (flags & CRL_EXEC_F_KEEP ? KEEP_FDS : 0);
    if (nfds != want || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
        (flags & CRL_EXEC_F_TTY && flags & CRL_EXEC_F_KEEP) || (unsigned long)n < sizeof(in.rq) ||
        in.rq.op != CRL_INIT_EXEC || sizeof(in.rq) + in.rq.strings_len != (unsigned long)n) {
        note.err = EPROTO;
    } else if (n_kids == MAX_KIDS) {
        note.err = EAGAIN;
    } else {
        long pid = crl_raw5(SYS_clone, SIGCHLD | CLONE_PIDFD, 0, &pidfd, 0, 0);
        if (pid == 0)
            child(&in.rq, fds, stdio);
        if (pid < 0) {
            note.err = (int32_t)-pid;
        } else {
            note.pid = (int32_t)pid;
            if (want > stdio)
                note.kept = keep(fds + stdio);
            kids_kept[n_kids] = note.kept;
            kids[n_kids++] = (int)pid;
        }
    }
    for (int i = 0; i < nfds; i++)
        crl_raw1(SYS_close, fds[i]);
    /* A large request leaves no pages resident behind it. */
    if (n > 16384)
        crl_raw3(SYS_madvise, in.bytes, sizeof(in.bytes), MADV_DONTNEED);
    send_fds(SYNC_FD, &note, sizeof(note), &pidfd, pidfd >= 0 ? 1 : 0);
    if (pidfd >= 0)
        crl_raw1(SYS_close, pidfd);
}

/* Reap whatever ended; tell of the children we forked. */
static void reap(void)
{
    for (;;) {
        int status;
        struct rusage ru;
        long pid = crl_raw4(SYS_wait4, -1, &status, WNOHANG | __WALL, &ru);
        if (pid <= 0)
            return;
        for (unsigned i = 0; i < n_kids; i++) {
            if (kids[i] != pid)
                continue;
            unkeep(kids_kept[i]);
            kids[i] = kids[--n_kids];
            kids_kept[i] = kids_kept[n_kids];
            struct crl_init_note note = {
                .op = CRL_INIT_EXITED,
                .pid = (int32_t)pid,
                .status = status,
                .utime_us = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
                .stime_us = (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
                .maxrss_kb = ru.ru_maxrss,
            };
            send_fds(SYNC_FD, &note, sizeof(note), 0, 0);
            break;
        }
    }
}

__attribute__((noreturn, used)) void crl_init_entry(void);

__attribute__((noreturn, used)) void crl_init_entry(void)
{
    /* Nothing in the sandbox may trace or read us: without CAP_SYS_PTRACE
     * (not in a sandbox's set) a non-dumpable process is out of reach. */
    crl_raw2(SYS_prctl, PR_SET_DUMPABLE, 0);
    struct crl_spawn_reply r;
    memset(&r, 0, sizeof(r));
    r.op = CRL_SPAWN_REPLY;
    int up[2] = {ROOT_FD, TMPFS_FD};
    /* If nobody hears this, the spawner is gone: so are we. */
    if (send_fds(SYNC_FD, &r, sizeof(r), up, 2) < 0)
        crl_raw_exit(1);
    crl_raw1(SYS_close, ROOT_FD);
    crl_raw3(SYS_close_range, CRL_INIT_SPARE_FD + 1, ~0u, 0);

    /* Our commands inherit our dispositions: none ignored (the spawner
     * ignores SIGPIPE, and so did we until now). */
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        unsigned long mask;
    } dfl;
    memset(&dfl, 0, sizeof(dfl));
    for (int sig = 1; sig <= 64; sig++)
        crl_raw4(SYS_rt_sigaction, sig, &dfl, 0, sizeof(unsigned long));
    unsigned long all = ~0ul, chld = 1ul << (SIGCHLD - 1);
    crl_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, sizeof(all));
    long sigfd = crl_raw4(SYS_signalfd4, -1, &chld, sizeof(chld), SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd < 0)
        crl_raw_exit(1);
    for (;;) {
        struct pollfd pf[2] = {{.fd = SYNC_FD, .events = POLLIN},
                               {.fd = (int)sigfd, .events = POLLIN}};
        if (crl_raw5(SYS_ppoll, pf, 2, 0, 0, 0) < 0)
            continue;
        if (pf[1].revents) {
            char si[128];
            while (crl_raw3(SYS_read, sigfd, si, sizeof(si)) > 0)
                ;
            reap();
        }
        if (pf[0].revents)
            serve();
    }
}

#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n xor %rbp, %rbp\n and $-16, %rsp\n call crl_init_entry\n ud2\n");
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n mov x29, #0\n mov x30, #0\n bl crl_init_entry\n brk #0\n");
#endif
