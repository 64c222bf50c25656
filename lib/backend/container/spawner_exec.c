/* Entering a sandbox from the spawner: the identity, an exec (a fork of the
 * sandbox's PID 1), opening a path inside (spawner_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../helper/seccomp.h"
#include "../../os/proc.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/path.h"
#include "../../util/rawclone.h"
#include "../../util/rawsys.h"
#include "spawner_int.h"

/* ---- identity inside a sandbox ---- */

/* Join the sandbox's user namespace (pidfd of its init) and become uid:gid
 * there, with Docker's capabilities for root and none for anyone else.  We
 * enter as host root, which is nobody in the namespace: become its root
 * first, so that the switch to another uid drops every capability.  Raw
 * syscalls: this runs in CLONE_VM children.  Returns 0 or -errno, and the
 * step that failed in *step. */
NO_SAN long crl_spawner_enter_identity(int pid1fd, uid_t uid, gid_t gid, int last_cap, int *step)
{
    long r;
    *step = CRL_STEP_SETNS;
    if ((r = crl_raw2(SYS_setns, pid1fd, CLONE_NEWUSER)) < 0)
        return r;
    *step = CRL_STEP_CREDS;
    if ((r = crl_raw3(SYS_setresgid, 0, 0, 0)) < 0 || (r = crl_raw3(SYS_setresuid, 0, 0, 0)) < 0 ||
        (r = crl_raw2(SYS_setgroups, 0, NULL)) < 0 ||
        (r = crl_raw3(SYS_setresgid, gid, gid, gid)) < 0)
        return r;
    if (last_cap > 63)
        last_cap = 63;
    for (int cap = 0; cap <= last_cap; cap++)
        if (!(KEEP_CAPS & (1ull << cap)) && (r = crl_raw2(SYS_prctl, PR_CAPBSET_DROP, cap)) < 0)
            return r;
    if ((r = crl_raw3(SYS_setresuid, uid, uid, uid)) < 0)
        return r;
    if (uid == 0) {
        struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct data[2] = {
            {.effective = (unsigned)KEEP_CAPS, .permitted = (unsigned)KEEP_CAPS, .inheritable = 0},
            {.effective = (unsigned)(KEEP_CAPS >> 32),
             .permitted = (unsigned)(KEEP_CAPS >> 32),
             .inheritable = 0}};
        if ((r = crl_raw2(SYS_capset, &hdr, data)) < 0)
            return r;
    }
    return crl_raw5(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

/* ---- exec: a fork of the sandbox's PID 1 ----
 *
 * corral-init holds every part of the sandbox's identity and forks each
 * command (spawn_proto.h has the protocol): we send it the stdio and the
 * child's end of a control socket, it answers with the child's pidfd, we
 * put the child in the exec's cgroups and say go, and the control socket
 * closing with nothing on it (close-on-exec) says the command runs.  The
 * child's end comes from PID 1's wait4(), which nothing in the sandbox can
 * touch (corral-init says why); a PID 1 that dies takes every process of
 * the sandbox with it, and those are reported killed. */

enum job_state {
    J_FORKING,  /* asked PID 1, no pid yet */
    J_STARTING, /* in its cgroups and told to go; the control socket open */
    J_FAILED,   /* it said why it cannot run, or we killed it: the error
                   waits for its end, so its cgroup leaf is empty by then */
    J_RUNNING,  /* corrald knows its pid: its end goes to corrald */
};

struct exec_job {
    struct spawner_watch w; /* on ctl */
    uint64_t id;            /* corrald's request */
    struct init_proc *ip;
    enum job_state state;
    int ctl; /* our end of the child's control socket */
    int cgroup_fds[CRL_SPAWN_MAX_CGROUP_FDS];
    int n_cgroup_fds;
    int pidfd;
    int tty; /* a terminal's master, from the child (CRL_EXEC_F_TTY) */
    bool want_tty;
    pid_t pid;    /* on the host */
    pid_t ns_pid; /* in the sandbox, as PID 1 reports it */
    int kept;     /* where PID 1 keeps corrald's ends of its stdio (-1: nowhere) */
    int err;      /* J_FAILED: what to answer */
    unsigned step;
    bool ended; /* its end came before we saw the control socket close */
    struct crl_init_note end;
    struct exec_job *next;
};

static struct exec_job *jobs;

static void job_free(struct exec_job *j)
{
    for (struct exec_job **pp = &jobs; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    if (j->ctl >= 0) {
        epoll_ctl(crl_spawner.epfd, EPOLL_CTL_DEL, j->ctl, NULL);
        close(j->ctl);
    }
    for (int i = 0; i < j->n_cgroup_fds; i++)
        close(j->cgroup_fds[i]);
    if (j->pidfd >= 0)
        close(j->pidfd);
    if (j->tty >= 0)
        close(j->tty);
    crl_spawner_free_later(&j->w, j);
}

/* The request's strings: argc + envc + 1 of them (the cwd last), each
 * ending in NUL, filling the area exactly.  PID 1 trusts this. */
static bool strings_ok(const struct crl_spawn_req *rq)
{
    const struct crl_spawn_exec *x = &rq->u.exec;
    size_t want = (size_t)x->argc + x->envc + 1, n = 0;
    for (uint32_t i = 0; i < rq->strings_len; i++)
        if (rq->strings[i] == 0)
            n++;
    return x->argc > 0 && n == want && rq->strings_len && rq->strings[rq->strings_len - 1] == 0;
}

void crl_spawner_handle_exec(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    const struct crl_spawn_exec *x = &rq->u.exec;
    unsigned stdio = x->flags & CRL_EXEC_F_TTY ? 0 : 3;
    unsigned kept = x->flags & CRL_EXEC_F_KEEP ? 3 : 0;
    if ((unsigned)nfds != stdio + kept + x->n_cgroup_fds ||
        x->n_cgroup_fds > CRL_SPAWN_MAX_CGROUP_FDS || !strings_ok(rq) || (kept && !stdio) ||
        ((x->flags & CRL_EXEC_F_TTY) && (!x->rows || !x->cols))) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "exec: malformed request");
        return;
    }
    struct init_proc *ip = crl_spawner.inits;
    while (ip && !(ip->pid == x->pid1 && ip->sock >= 0))
        ip = ip->next;
    if (!ip) {
        crl_spawner_reply(rq->id, ESRCH, CRL_STEP_SETNS, 0, NULL, 0,
                          "the sandbox's init is not running");
        return;
    }
    struct exec_job *j = calloc(1, sizeof(*j));
    size_t len = sizeof(struct crl_init_exec) + rq->strings_len;
    cleanup_free struct crl_init_exec *m = malloc(len);
    int pair[2];
    if (!j || !m || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
        crl_spawner_reply(rq->id, j && m ? errno : ENOMEM, CRL_STEP_NONE, 0, NULL, 0, NULL);
        free(j);
        return;
    }
    *m = (struct crl_init_exec){.op = CRL_INIT_EXEC,
                                .uid = x->uid,
                                .gid = x->gid,
                                .flags = x->flags,
                                .rows = x->rows,
                                .cols = x->cols,
                                .argc = x->argc,
                                .envc = x->envc,
                                .id = rq->id,
                                .strings_len = rq->strings_len};
    memcpy(m->strings, rq->strings, rq->strings_len);
    /* stdio, the child's end of the control socket, what PID 1 keeps */
    int out[7] = {pair[1]}, nout = 1;
    if (stdio) {
        out[0] = fds[0], out[1] = fds[1], out[2] = fds[2], out[3] = pair[1];
        nout = 4;
        for (unsigned i = 0; i < kept; i++)
            out[nout++] = fds[3 + i];
    }
    ssize_t sent = crl_send_fds(ip->sock, m, len, out, nout);
    int e = errno;
    close(pair[1]);
    if (sent < 0) {
        close(pair[0]);
        free(j);
        crl_spawner_reply(rq->id, e, CRL_STEP_SYNC, 0, NULL, 0,
                          e == EAGAIN ? "the sandbox's PID 1 is not taking commands (frozen?)"
                                      : "the sandbox's PID 1");
        return;
    }
    j->w.ready = NULL; /* watched from the go on */
    j->id = rq->id;
    j->ip = ip;
    j->state = J_FORKING;
    j->ctl = pair[0];
    j->pidfd = j->tty = j->kept = -1;
    j->want_tty = !stdio;
    /* The job keeps the cgroup.procs descriptors until the child is in. */
    for (unsigned i = 0; i < x->n_cgroup_fds; i++) {
        j->cgroup_fds[i] = fds[stdio + kept + i];
        fds[stdio + kept + i] = -1;
    }
    j->n_cgroup_fds = (int)x->n_cgroup_fds;
    j->next = jobs;
    jobs = j;
}

/* It cannot run: kill it (if it may still) and answer once it has ended. */
static void job_fail(struct exec_job *j, int err, unsigned step)
{
    if (j->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
    j->state = J_FAILED;
    j->err = err;
    j->step = step;
}

static void ctl_ready(struct spawner_watch *w);

/* PID 1 forked it (or could not): into its cgroups, then go. */
static void job_forked(struct exec_job *j, const struct crl_init_note *n, int pidfd)
{
    if (n->err || pidfd < 0) {
        if (pidfd >= 0)
            close(pidfd);
        crl_spawner_reply(j->id, n->err ? n->err : EPROTO, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        job_free(j);
        return;
    }
    j->pidfd = pidfd;
    j->ns_pid = n->pid;
    j->kept = n->kept;
    j->pid = crl_pidfd_pid(pidfd);
    j->state = J_STARTING;
    if (j->pid <= 0) {
        job_fail(j, ECANCELED, CRL_STEP_EXEC); /* killed already, before it started */
        return;
    }
    for (int i = 0; i < j->n_cgroup_fds; i++)
        if (crl_spawner_write_pid(j->cgroup_fds[i], j->pid) < 0) {
            job_fail(j, errno, CRL_STEP_CGROUP);
            return;
        }
    /* PID 1 keeps our -1000 (where we have it) for itself; its commands
     * are the OOM killer's like any process. */
    if (crl_spawner.oom_protected) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", j->pid);
        crl_write_file_at(AT_FDCWD, path, "0");
    }
    j->w.ready = ctl_ready;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &j->w};
    char go = 'g';
    if (epoll_ctl(crl_spawner.epfd, EPOLL_CTL_ADD, j->ctl, &ev) < 0 ||
        send(j->ctl, &go, 1, MSG_NOSIGNAL) != 1) {
        int e = errno;
        epoll_ctl(crl_spawner.epfd, EPOLL_CTL_DEL, j->ctl, NULL);
        job_fail(j, e, CRL_STEP_SYNC);
    }
}

/* Its end, as the kernel recorded it where it can say (PID 1's wait4()
 * gave the same, and nothing in the sandbox can make it say otherwise:
 * this is a second witness, not the first), else as PID 1 reported it. */
static void job_ended(struct exec_job *j, const struct crl_init_note *n)
{
    int status = n->status, ks;
    if (crl_pidfd_exit_status(j->pidfd, &ks)) {
        if (ks != status && n->op == CRL_INIT_EXITED)
            crl_warn(NULL, "spawner: PID 1 (pid %d) reported status %#x for pid %d, the kernel %#x",
                     j->ip->pid, status, j->pid, ks);
        status = ks;
    }
    crl_spawner_send_exited(j->pid, status, n->utime_us, n->stime_us, n->maxrss_kb);
    job_free(j);
}

/* Started: corrald learns its pids (and a pidfd, while it lives, and its
 * terminal). */
static void job_started(struct exec_job *j)
{
    epoll_ctl(crl_spawner.epfd, EPOLL_CTL_DEL, j->ctl, NULL);
    close(j->ctl);
    j->ctl = -1;
    j->state = J_RUNNING;
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_REPLY, .id = j->id, .pid = j->pid, .ns_pid = j->ns_pid, .kept = j->kept};
    int fds[2], n = 0;
    if (!j->ended) {
        fds[n++] = j->pidfd;
        r.kind |= CRL_EXEC_R_PIDFD;
    }
    if (j->tty >= 0) {
        fds[n++] = j->tty;
        r.kind |= CRL_EXEC_R_TTY;
    }
    crl_spawner_send_reply(&r, fds, n);
    if (j->ended)
        job_ended(j, &j->end);
}

/* What the child sent as its terminal's master is one: a descriptor of a
 * devpts instance's ptmx (5:2) that the kernel numbers a terminal of. */
static bool is_pty_master(int fd)
{
    struct stat st;
    unsigned n;
    return fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 5 &&
           minor(st.st_rdev) == 2 && ioctl(fd, TIOCGPTN, &n) == 0;
}

/* The child's control socket: closed by its exec, or why it failed. */
static void ctl_ready(struct spawner_watch *w)
{
    struct exec_job *j = (struct exec_job *)((char *)w - offsetof(struct exec_job, w));
    struct crl_init_failed f = {0};
    int fd = -1, nfd = 1;
    ssize_t n = crl_recv_fds(j->ctl, &f, sizeof(f), &fd, &nfd);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (nfd != 1)
        fd = -1;
    if (j->state != J_STARTING) {
        if (fd >= 0)
            close(fd);
        return;
    }
    bool whole = n == (ssize_t)sizeof(f);
    int fail = whole && f.err > 0 ? f.err : 0;
    unsigned step = f.step < CRL_STEP__COUNT ? f.step : CRL_STEP_EXEC;
    if (whole && f.err == 0 && fd >= 0 && j->want_tty && j->tty < 0 && is_pty_master(fd)) {
        j->tty = fd; /* its terminal: the command executes next */
        return;
    }
    if (fd >= 0)
        close(fd);
    if (!fail && j->want_tty && j->tty < 0) {
        fail = EPROTO; /* no terminal came, or not one */
        step = CRL_STEP_TTY;
    }
    if (fail) {
        epoll_ctl(crl_spawner.epfd, EPOLL_CTL_DEL, j->ctl, NULL);
        job_fail(j, fail, step);
        if (j->ended) {
            crl_spawner_reply(j->id, j->err, j->step, 0, NULL, 0, NULL);
            job_free(j);
        }
        return;
    }
    job_started(j);
}

static struct exec_job *job_of(struct init_proc *ip, bool by_id, uint64_t id, pid_t ns_pid)
{
    for (struct exec_job *j = jobs; j; j = j->next)
        if (j->ip == ip && (by_id ? j->id == id && j->state == J_FORKING
                                  : j->ns_pid == ns_pid && j->state != J_FORKING))
            return j;
    return NULL;
}

static void kids_listed(struct init_proc *ip, const struct crl_init_note *n, ssize_t len);

void crl_spawner_init_ready(struct spawner_watch *w)
{
    struct init_proc *ip = (struct init_proc *)((char *)w - offsetof(struct init_proc, w));
    struct crl_init_note n;
    int fd = -1, nfd = 1;
    /* A note, or KIDS: a note and its pids (the one longer message). */
    ssize_t r = crl_recv_fds(ip->sock, crl_spawner.msg, CRL_SPAWN_MAX_MSG, &fd, &nfd);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r >= (ssize_t)sizeof(n))
        memcpy(&n, crl_spawner.msg, sizeof(n));
    if (r >= (ssize_t)sizeof(n) && n.op == CRL_INIT_KIDS) {
        if (nfd == 1)
            close(fd);
        kids_listed(ip, &n, r);
        return;
    }
    if (r != (ssize_t)sizeof(n)) {
        if (nfd == 1)
            close(fd);
        crl_spawner_init_gone(ip);
        if (!ip->stack) { /* adopted: nothing of ours to reap */
            for (struct init_proc **pp = &crl_spawner.inits; *pp; pp = &(*pp)->next)
                if (*pp == ip) {
                    *pp = ip->next;
                    break;
                }
            crl_spawner_free_later(&ip->w, ip);
        }
        return;
    }
    struct exec_job *j = NULL;
    if (n.op == CRL_INIT_FORKED && (j = job_of(ip, true, n.id, 0))) {
        job_forked(j, &n, nfd == 1 ? fd : -1);
        return;
    }
    if (nfd == 1)
        close(fd);
    if (n.op != CRL_INIT_EXITED || !(j = job_of(ip, false, 0, n.pid)))
        return;
    if (j->state == J_RUNNING) {
        job_ended(j, &n);
    } else if (j->state == J_FAILED) {
        crl_spawner_reply(j->id, j->err, j->step, 0, NULL, 0, NULL);
        job_free(j);
    } else {
        j->ended = true; /* its control socket has yet to be seen */
        j->end = n;
    }
}

void crl_spawner_init_gone(struct init_proc *ip)
{
    if (ip->sock < 0)
        return;
    epoll_ctl(crl_spawner.epfd, EPOLL_CTL_DEL, ip->sock, NULL);
    close(ip->sock);
    ip->sock = -1;
    /* Its pid namespace went with it, and every process in it. */
    for (struct exec_job *j = jobs, *next; j; j = next) {
        next = j->next;
        if (j->ip != ip)
            continue;
        if (j->state == J_RUNNING) {
            struct crl_init_note killed = {.status = SIGKILL};
            job_ended(j, &killed);
            continue;
        }
        if (j->state != J_FAILED)
            j->err = ECANCELED, j->step = CRL_STEP_EXEC; /* killed before it started */
        crl_spawner_reply(j->id, j->err, j->step, 0, NULL, 0, NULL);
        job_free(j);
    }
}

/* ---- a PID 1 another spawner created ---- */

/* PID 1's answer to the LIST we sent when we took it over: its children
 * that still run, for corrald to end (spawn_proto.h), in a memfd. */
static void kids_listed(struct init_proc *ip, const struct crl_init_note *n, ssize_t len)
{
    size_t count = n->pid >= 0 ? (size_t)n->pid : 0;
    if (n->id != ip->list_id || n->pid < 0 || (size_t)len != sizeof(*n) + count * sizeof(int32_t)) {
        crl_warn(NULL, "spawner: PID 1 %d answered LIST with a malformed list", ip->pid);
        return;
    }
    int fd = memfd_create("corral-kids", MFD_CLOEXEC);
    const char *pids = crl_spawner.msg + sizeof(*n);
    if (fd < 0 || (count && crl_write_full(fd, pids, count * sizeof(int32_t)) < 0)) {
        crl_warn(NULL, "spawner: passing PID 1 %d's %zu children on: %s", ip->pid, count,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_KIDS, .id = ip->list_id, .pid = ip->pid, .size = (int64_t)count};
    snprintf(r.msg, sizeof(r.msg), "%s", ip->sandbox);
    crl_spawner_send_reply(&r, &fd, 1);
    close(fd);
}

void crl_spawner_handle_adopt(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    pid_t pid1 = rq->u.adopt.pid1;
    if (nfds != 1 || pid1 <= 0) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "adopt: malformed request");
        return;
    }
    for (struct init_proc *ip = crl_spawner.inits; ip; ip = ip->next)
        if (ip->pid == pid1 && ip->sock >= 0) {
            crl_spawner_reply(rq->id, 0, CRL_STEP_NONE, pid1, NULL, 0, NULL); /* ours already */
            return;
        }
    /* The pidfd names the process, so a reused pid cannot hand us another's
     * socket; and only host root may take a descriptor from a PID 1 (it is
     * not dumpable, and no sandbox has CAP_SYS_PTRACE). */
    int sock = (int)syscall(SYS_pidfd_getfd, fds[0], CRL_INIT_SPARE_FD, 0);
    int type = 0;
    socklen_t tlen = sizeof(type);
    int e = errno;
    if (sock >= 0 &&
        (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 || type != SOCK_SEQPACKET)) {
        close(sock);
        sock = -1;
        e = EPROTO;
    }
    struct init_proc *ip = sock >= 0 ? calloc(1, sizeof(*ip)) : NULL;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ip ? &ip->w : NULL};
    if (ip) {
        ip->pid = pid1;
        ip->sock = sock;
        memcpy(ip->sandbox, rq->u.adopt.sandbox, sizeof(ip->sandbox));
        ip->sandbox[sizeof(ip->sandbox) - 1] = 0;
        ip->w.ready = crl_spawner_init_ready;
        /* Never blocking on it: a frozen sandbox's PID 1 reads nothing. */
        if (fcntl(sock, F_SETFL, O_NONBLOCK) < 0 ||
            epoll_ctl(crl_spawner.epfd, EPOLL_CTL_ADD, sock, &ev) < 0) {
            e = errno;
            free(ip);
            ip = NULL;
        }
    } else if (sock >= 0) {
        e = ENOMEM;
    }
    if (!ip) {
        if (sock >= 0)
            close(sock);
        crl_spawner_reply(rq->id, e, CRL_STEP_SETNS, 0, NULL, 0, "taking the sandbox's PID 1 over");
        return;
    }
    /* What it forked for our predecessor still runs, talking to nobody:
     * ask which, before anything we ask of it (it answers in order). */
    struct crl_init_exec list = {.op = CRL_INIT_LIST, .id = rq->id};
    ip->list_id = rq->id;
    if (send(sock, &list, sizeof(list), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(list))
        crl_warn(NULL, "spawner: asking PID 1 %d for its children: %s", pid1, strerror(errno));
    ip->next = crl_spawner.inits;
    crl_spawner.inits = ip;
    crl_spawner_reply(rq->id, 0, CRL_STEP_NONE, pid1, NULL, 0, NULL);
}

/* ---- open a path inside a sandbox ---- */

static char open_stack[STAGE_STACK] __attribute__((aligned(16)));

struct open_job {
    int pid1fd;
    uid_t uid;
    gid_t gid;
    char *path; /* writable: the mkdir -p walk cuts it in place */
    int flags;
    mode_t mode;
    int last_cap;
    volatile int fd;
    volatile int err;
    volatile int step;
    volatile unsigned kind;
    volatile long long size;
};

NO_SAN static int stage_open(void *arg)
{
    struct open_job *o = arg;
    int step = CRL_STEP_SETNS;
    long r = crl_raw2(SYS_setns, o->pid1fd, CLONE_NEWNS);
    if (r < 0 ||
        (r = crl_spawner_enter_identity(o->pid1fd, o->uid, o->gid, o->last_cap, &step)) < 0) {
        o->err = (int)-r;
        o->step = step;
        crl_raw_exit(1);
    }
    /* Our root is the sandbox's root and the host's tree is not in this
     * mount namespace at all; RESOLVE_IN_ROOT and no magic links are a
     * second wall, not the first. */
    r = crl_path_open_in_root(AT_FDCWD, o->path, o->flags | O_NONBLOCK, o->mode);
    if (r < 0) {
        o->err = (int)-r;
        o->step = CRL_STEP_OPEN;
        crl_raw_exit(1);
    }
    struct stat st;
    long sr = crl_raw2(SYS_fstat, r, &st);
    if (sr < 0) {
        crl_raw1(SYS_close, r);
        o->err = (int)-sr;
        o->step = CRL_STEP_OPEN;
        crl_raw_exit(1);
    }
    if (S_ISREG(st.st_mode)) {
        o->kind = CRL_OPEN_REGULAR;
    } else if (S_ISDIR(st.st_mode)) {
        o->kind = CRL_OPEN_DIRECTORY;
    } else {
        /* fifos, devices and sockets never go through the files API */
        crl_raw1(SYS_close, r);
        o->err = EINVAL;
        o->step = CRL_STEP_OPEN;
        crl_raw_exit(1);
    }
    o->size = st.st_size;
    o->fd = (int)r;
    crl_raw_exit(0);
}

void crl_spawner_handle_open(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    if (nfds != 1 || rq->strings_len == 0 || rq->strings[rq->strings_len - 1] != 0) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "open: malformed request");
        return;
    }
    cleanup_free char *path = strdup(rq->strings);
    if (!path) {
        crl_spawner_reply(rq->id, ENOMEM, CRL_STEP_NONE, 0, NULL, 0, NULL);
        return;
    }
    struct open_job o = {.pid1fd = fds[0],
                         .uid = rq->u.open.uid,
                         .gid = rq->u.open.gid,
                         .path = path,
                         .flags = rq->u.open.flags,
                         .mode = rq->u.open.mode,
                         .last_cap = crl_spawner.last_cap,
                         .fd = -1};
    /* CLONE_FILES: the descriptor it opens lands in our table.  It never
     * joins the sandbox's pid namespace (nothing there can stop it) and
     * opens with O_NONBLOCK (no fifo, lease or lock can make it wait). */
    long c = crl_raw_clone(CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD,
                           open_stack + sizeof(open_stack), NULL, stage_open, &o);
    if (c < 0) {
        crl_spawner_reply(rq->id, (int)-c, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        return;
    }
    while (waitpid((pid_t)c, NULL, __WALL) < 0 && errno == EINTR)
        ;
    if (o.fd < 0) {
        crl_spawner_reply(rq->id, o.err ? o.err : EIO, (unsigned)o.step, 0, NULL, 0, NULL);
        return;
    }
    int fd = o.fd;
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_REPLY, .id = rq->id, .kind = o.kind, .size = o.size};
    crl_spawner_send_reply(&r, &fd, 1);
    close(fd);
}
