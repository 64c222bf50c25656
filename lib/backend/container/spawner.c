/* The container spawner: see spawn_proto.h for its place in the system,
 * spawner_int.h for how its files divide the work.
 *
 * One loop over the events of: requests from corrald, SIGCHLD, and what
 * waits on a sandbox (spawner_watch): the create sockets of sandboxes still
 * building their root, then the same sockets to their PID 1s, which fork
 * their commands, and the control sockets of commands starting.  Requests
 * are handled at once; a create waits on its PID 1's report, an exec on
 * the PID 1's fork and the command's exec. */
#include "spawner.h"

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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../helper/seccomp.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/rawclone.h"
#include "../../os/idmap.h"
#include "../../util/rawsys.h"
#include "../../util/run.h"
#include "spawner_int.h"

struct spawner crl_spawner;

/* ---- replies ---- */

void crl_spawner_reply(uint64_t id, int err, unsigned step, pid_t pid, const int *fds, int nfds,
                       const char *msg)
{
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_REPLY, .err = err, .id = id, .pid = pid, .step = step};
    if (msg)
        snprintf(r.msg, sizeof(r.msg), "%s", msg);
    if (crl_send_fds(crl_spawner.sock, &r, sizeof(r), fds, nfds) < 0)
        crl_log_syscall(NULL, errno, "sendmsg(corrald)");
}

void crl_spawner_send_reply(const struct crl_spawn_reply *r, const int *fds, int nfds)
{
    if (crl_send_fds(crl_spawner.sock, r, sizeof(*r), fds, nfds) < 0)
        crl_log_syscall(NULL, errno, "sendmsg(corrald)");
}

/* ---- create ---- */

static void pending_free(struct pending_create *pc)
{
    if (pc->sock >= 0) {
        epoll_ctl(crl_spawner.epfd, EPOLL_CTL_DEL, pc->sock, NULL);
        close(pc->sock);
    }
    if (pc->pidfd >= 0)
        close(pc->pidfd);
    crl_spawner_free_later(&pc->w, pc);
}

static int write_id_map(pid_t pid, const char *file, uint32_t base, uint32_t count)
{
    char path[64], map[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
    snprintf(map, sizeof(map), "0 %u %u\n", base, count);
    return crl_write_file_at(AT_FDCWD, path, map);
}

int crl_spawner_write_pid(int procs_fd, pid_t pid)
{
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d", pid);
    ssize_t r;
    do
        r = write(procs_fd, buf, (size_t)n);
    while (r < 0 && errno == EINTR);
    return r == n ? 0 : -1;
}

static void create_ready(struct spawner_watch *w);

static void handle_create(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    const struct crl_spawn_create *c = &rq->u.create;
    if (c->n_layers < 1 || c->n_layers > CRL_SPAWN_MAX_LAYERS ||
        c->n_volumes > CRL_SPAWN_MAX_VOLUMES ||
        (unsigned)nfds != c->n_layers + 1 + c->n_cgroup_fds + c->n_volumes) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "create: wrong descriptors");
        return;
    }
    if (rq->strings_len > CRL_SPAWN_MAX_FILES ||
        (rq->strings_len && rq->strings[rq->strings_len - 1] != 0)) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0,
                          "create: malformed run-time files");
        return;
    }
    const int *layer_fds = fds, *cgroup_fds = fds + c->n_layers + 1;
    const int *volume_fds = cgroup_fds + c->n_cgroup_fds;
    int netns_fd = fds[c->n_layers];
    struct pending_create *pc = calloc(1, sizeof(*pc));
    void *stack = mmap(NULL, INIT_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_GROWSDOWN, -1, 0);
    int pair[2] = {-1, -1};
    unsigned step = CRL_STEP_CLONE;
    int err = 0;
    if (!pc || stack == MAP_FAILED) {
        err = ENOMEM;
        goto fail;
    }
    pc->id = rq->id;
    pc->pidfd = -1;
    pc->sock = -1;
    /* It carries the sandbox's commands after the create, as large as ours. */
    struct crl_err e = CRL_ERR_INIT;
    if (crl_seqpacket_pair(pair, CRL_INIT_MAX_MSG, &e) < 0) {
        err = e.sys_errno ? e.sys_errno : EIO;
        goto fail;
    }
    pc->sock = pair[0];
    pc->args.sync_fd = pair[1];
    pc->args.workdir = crl_spawner.workdir;
    pc->args.init_fd = crl_spawner.init_fd;
    pc->args.last_cap = crl_spawner.last_cap;
    pc->args.seccomp = &crl_spawner.seccomp;
    snprintf(pc->args.tmpfs_opts, sizeof(pc->args.tmpfs_opts), "size=%um,mode=0755", c->disk_mb);
    snprintf(pc->args.hostname, sizeof(pc->args.hostname), "%s", c->hostname);
    crl_timens_format(&c->timens, pc->args.timens, sizeof(pc->args.timens));
    memcpy(pc->args.files, rq->strings, rq->strings_len);
    pc->args.files_len = rq->strings_len;
    pc->args.n_volumes = c->n_volumes;
    for (unsigned i = 0; i < c->n_volumes; i++) {
        memcpy(pc->args.volume_paths[i], c->volume_paths[i], CRL_SPAWN_VOLUME_PATH);
        pc->args.volume_paths[i][CRL_SPAWN_VOLUME_PATH - 1] = 0;
    }

    /* The sandbox's network namespace is one corrald made (host-owned: root
     * inside has no CAP_NET_ADMIN over it).  Enter it for the clone only. */
    step = CRL_STEP_NETNS;
    if (setns(netns_fd, CLONE_NEWNET) < 0) {
        err = errno;
        goto fail;
    }
    step = CRL_STEP_CLONE;
    pid_t pid = clone(crl_init_main, (char *)stack + INIT_STACK,
                      CLONE_VM | CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC |
                          CLONE_NEWUTS | CLONE_PIDFD | SIGCHLD,
                      &pc->args, &pc->pidfd);
    int clone_errno = errno;
    if (setns(crl_spawner.host_netns, CLONE_NEWNET) < 0) {
        /* We would create every later sandbox in this one's network: stop. */
        crl_log_syscall(NULL, errno, "setns(host netns)");
        abort();
    }
    if (pid < 0) {
        err = clone_errno;
        goto fail;
    }
    close(pair[1]);
    pair[1] = -1;
    pc->pid = pid;
    struct init_proc *ip = malloc(sizeof(*ip));
    if (!ip) {
        /* Cannot track the stack: leak it rather than free it under a live task. */
        stack = MAP_FAILED;
        err = ENOMEM;
        goto kill;
    }
    ip->pid = pid;
    ip->stack = stack;
    ip->sock = -1;
    ip->w.ready = crl_spawner_init_ready;
    pc->ip = ip;
    ip->next = crl_spawner.inits;
    crl_spawner.inits = ip;
    stack = MAP_FAILED;

    step = CRL_STEP_IDMAP;
    if (write_id_map(pid, "uid_map", c->uid_base, c->id_count) < 0 ||
        write_id_map(pid, "gid_map", c->uid_base, c->id_count) < 0) {
        err = errno;
        goto kill;
    }
    step = CRL_STEP_CGROUP;
    for (unsigned i = 0; i < c->n_cgroup_fds; i++)
        if (crl_spawner_write_pid(cgroup_fds[i], pid) < 0) {
            err = errno;
            goto kill;
        }
    step = CRL_STEP_IDMAP;
    /* the layers, the volumes, and the child's timens_offsets */
    int lower[CRL_SPAWN_MAX_LAYERS + CRL_SPAWN_MAX_VOLUMES + 3];
    unsigned nl = 0, n_mounts = c->n_layers + c->n_volumes;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
    int userns = crl_openat(AT_FDCWD, path, O_RDONLY, 0);
    err = errno;
    while (userns >= 0 && nl < c->n_layers &&
           (lower[nl] = crl_mount_idmapped(layer_fds[nl], userns, true)) >= 0)
        nl++;
    step = nl == c->n_layers ? CRL_STEP_VOLUME : step;
    while (userns >= 0 && nl >= c->n_layers && nl < n_mounts &&
           (lower[nl] = crl_mount_idmapped(volume_fds[nl - c->n_layers], userns,
                                           c->volumes_ro & (1u << (nl - c->n_layers)))) >= 0)
        nl++;
    err = errno;
    if (userns >= 0)
        close(userns);
    ssize_t sent = -1;
    if (nl == n_mounts) {
        /* The child writes its time offsets through our descriptor: its
         * own /proc/self is host root's, like ours (see init.c). */
        step = CRL_STEP_TIMENS;
        snprintf(path, sizeof(path), "/proc/%d/timens_offsets", pid);
        if ((lower[nl] = crl_openat(AT_FDCWD, path, O_WRONLY, 0)) < 0)
            err = errno;
        else
            nl++;
    }
    if (nl == n_mounts + 1) {
        /* and our end of its socket, which PID 1 keeps (spawn_proto.h) */
        step = CRL_STEP_SYNC;
        char go = 'g';
        lower[nl] = pc->sock;
        sent = crl_send_fds(pc->sock, &go, 1, lower, (int)nl + 1);
        err = errno;
    }
    for (unsigned i = 0; i < nl; i++)
        close(lower[i]);
    if (sent < 0)
        goto kill;
    pc->w.ready = create_ready;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &pc->w};
    if (epoll_ctl(crl_spawner.epfd, EPOLL_CTL_ADD, pc->sock, &ev) < 0) {
        err = errno;
        goto kill;
    }
    pc->next = crl_spawner.pending;
    crl_spawner.pending = pc;
    return;

kill:
    syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
fail:
    if (pair[1] >= 0)
        close(pair[1]);
    if (stack != MAP_FAILED && stack)
        munmap(stack, INIT_STACK);
    crl_spawner_reply(rq->id, err ? err : EIO, step, 0, NULL, 0, NULL);
    if (pc)
        pending_free(pc);
}

/* PID 1 reported: forward its pidfd and tmpfs to corrald (its root, which
 * corrald has no use for, is closed here: every descriptor corrald holds
 * per sandbox counts against its RLIMIT_NOFILE, docs/architecture.md). */
static void create_reported(struct pending_create *pc)
{
    struct crl_spawn_reply r;
    int fds[2], nfds = 2;
    ssize_t n = crl_recv_fds(pc->sock, &r, sizeof(r), fds, &nfds);
    if (n != (ssize_t)sizeof(r)) {
        /* PID 1 died before it could say why (killed, or the OOM killer). */
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
        crl_spawner_reply(pc->id, n < 0 ? errno : EPIPE, CRL_STEP_SYNC, pc->pid, NULL, 0,
                          "the sandbox's init exited during setup");
    } else if (r.err) {
        syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
        crl_spawner_reply(pc->id, r.err, r.step, pc->pid, NULL, 0, NULL);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    } else if (nfds != 2) {
        syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
        crl_spawner_reply(pc->id, EPROTO, CRL_STEP_SYNC, pc->pid, NULL, 0,
                          "init sent no descriptors");
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    } else {
        int out[2] = {pc->pidfd, fds[1]};
        crl_spawner_reply(pc->id, 0, CRL_STEP_NONE, pc->pid, out, 2, NULL);
        close(fds[0]);
        close(fds[1]);
        /* The socket is PID 1's from now on: it forks the sandbox's commands. */
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = pc->ip ? &pc->ip->w : NULL};
        /* Never blocking on it: a frozen sandbox's PID 1 reads nothing. */
        if (pc->ip && fcntl(pc->sock, F_SETFL, O_NONBLOCK) == 0 &&
            epoll_ctl(crl_spawner.epfd, EPOLL_CTL_MOD, pc->sock, &ev) == 0) {
            pc->ip->sock = pc->sock;
            pc->sock = -1;
        }
    }
    for (struct pending_create **pp = &crl_spawner.pending; *pp; pp = &(*pp)->next)
        if (*pp == pc) {
            *pp = pc->next;
            break;
        }
    pending_free(pc);
}

static void create_ready(struct spawner_watch *w)
{
    create_reported((struct pending_create *)((char *)w - offsetof(struct pending_create, w)));
}

void crl_spawner_free_later(struct spawner_watch *w, void *p)
{
    struct spawner *s = &crl_spawner;
    w->ready = NULL;
    if (s->n_graves == s->cap_graves) {
        size_t cap = s->cap_graves ? 2 * s->cap_graves : 16;
        void **g = realloc(s->graves, cap * sizeof(*g));
        if (!g)
            return; /* leaked, rather than freed under an event still to come */
        s->graves = g;
        s->cap_graves = cap;
    }
    s->graves[s->n_graves++] = p;
}

/* ---- children ---- */

void crl_spawner_send_exited(pid_t pid, int status, int64_t utime_us, int64_t stime_us,
                             int64_t maxrss_kb)
{
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_EXITED,
        .pid = pid,
        .status = status,
        .utime_us = utime_us,
        .stime_us = stime_us,
        .maxrss_kb = maxrss_kb,
    };
    crl_spawner_send_reply(&r, NULL, 0);
}

static void reap(void)
{
    struct signalfd_siginfo si;
    while (read(crl_spawner.sigfd, &si, sizeof(si)) == sizeof(si))
        ;
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG | __WALL, &ru);
        if (pid <= 0)
            break;
        for (struct init_proc **pp = &crl_spawner.inits; *pp; pp = &(*pp)->next)
            if ((*pp)->pid == pid && (*pp)->stack) { /* ours, not an adopted one */
                struct init_proc *ip = *pp;
                *pp = ip->next;
                crl_spawner_init_gone(ip);
                for (struct pending_create *pc = crl_spawner.pending; pc; pc = pc->next)
                    if (pc->ip == ip)
                        pc->ip = NULL;
                munmap(ip->stack, INIT_STACK);
                crl_spawner_free_later(&ip->w, ip);
                break;
            }
        crl_spawner_send_exited(
            pid, status, (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
            (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec, ru.ru_maxrss);
    }
}

static int handle_request(void)
{
    int fds[CRL_SPAWN_MAX_FDS];
    int nfds = CRL_SPAWN_MAX_FDS;
    ssize_t n = crl_recv_fds(crl_spawner.sock, crl_spawner.msg, CRL_SPAWN_MAX_MSG, fds, &nfds);
    if (n == 0)
        return -1; /* corrald is gone: so are we, and our sandboxes with us */
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)crl_spawner.msg;
    if ((size_t)n < sizeof(*rq) || sizeof(*rq) + rq->strings_len != (size_t)n) {
        crl_warn(NULL, "spawner: malformed request of %zd bytes", n);
    } else {
        switch (rq->op) {
        case CRL_SPAWN_CREATE: handle_create(rq, fds, nfds); break;
        case CRL_SPAWN_EXEC: crl_spawner_handle_exec(rq, fds, nfds); break;
        case CRL_SPAWN_OPEN: crl_spawner_handle_open(rq, fds, nfds); break;
        case CRL_SPAWN_STREAM:
        case CRL_SPAWN_RESTORE: crl_spawner_handle_stream(rq, fds, nfds); break;
        case CRL_SPAWN_ADOPT: crl_spawner_handle_adopt(rq, fds, nfds); break;
        default:
            crl_spawner_reply(rq->id, EOPNOTSUPP, CRL_STEP_NONE, 0, NULL, 0, "unknown request");
            break;
        }
    }
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0) /* a handler keeps what it took (set to -1) */
            close(fds[i]);
    return 0;
}

int crl_spawner_main(int sock, const char *workdir, const char *init_path)
{
    struct crl_err err = CRL_ERR_INIT;
    crl_spawner.sock = sock;
    snprintf(crl_spawner.workdir, sizeof(crl_spawner.workdir), "%s", workdir);
    /* Die with corrald.  The OOM killer should spare us where we may ask
     * (CAP_SYS_RESOURCE; before going non-dumpable, which makes /proc/self
     * ours no more).  Never dumpable: the clone children that build a
     * sandbox and start its processes share our memory until they exec, and
     * no process in a sandbox may read or trace it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    /* 0-2 must be taken, or a pipe we receive could land there. */
    for (int fd; (fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2;)
        ;
    crl_spawner.oom_protected =
        crl_write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "-1000") == 0;
    if (!crl_spawner.oom_protected)
        crl_debug(NULL, "spawner: oom_score_adj -1000 refused (%s): OOM kills may pick us",
                  strerror(errno));
    prctl(PR_SET_DUMPABLE, 0);
    crl_spawner.init_fd = crl_openat(AT_FDCWD, init_path, O_PATH, 0);
    if (crl_spawner.init_fd < 0) {
        crl_error(NULL, "spawner: %s: %s", init_path, strerror(errno));
        return 1;
    }
    umask(022);
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    crl_spawner.sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    crl_spawner.host_netns = crl_openat(AT_FDCWD, "/proc/self/ns/net", O_RDONLY, 0);
    crl_spawner.epfd = epoll_create1(EPOLL_CLOEXEC);
    crl_spawner.msg = malloc(CRL_SPAWN_MAX_MSG);
    if (crl_spawner.sigfd < 0 || crl_spawner.host_netns < 0 || crl_spawner.epfd < 0 ||
        !crl_spawner.msg) {
        crl_error(NULL, "spawner: setup failed: %s", strerror(errno));
        return 1;
    }
    char buf[16];
    crl_spawner.last_cap = 63;
    if (crl_read_file_at(AT_FDCWD, "/proc/sys/kernel/cap_last_cap", buf, sizeof(buf)) > 0)
        crl_spawner.last_cap = (int)strtol(buf, NULL, 10);
    if (crl_seccomp_build(CRL_SECCOMP_CONTAINER, &crl_spawner.seccomp, &err) < 0 ||
        crl_seccomp_build(CRL_SECCOMP_NO_NEW_CODE, &crl_spawner.no_new_code, &err) < 0) {
        crl_error(NULL, "spawner: %s", err.msg);
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &crl_spawner.sock};
    epoll_ctl(crl_spawner.epfd, EPOLL_CTL_ADD, crl_spawner.sock, &ev);
    ev.data.ptr = &crl_spawner.sigfd;
    epoll_ctl(crl_spawner.epfd, EPOLL_CTL_ADD, crl_spawner.sigfd, &ev);

    /* Tell corrald we are ready. */
    struct crl_spawn_reply hello = {.op = CRL_SPAWN_REPLY, .id = 0, .pid = getpid()};
    crl_spawner_send_reply(&hello, NULL, 0);

    for (;;) {
        struct epoll_event evs[32];
        int n = epoll_wait(crl_spawner.epfd, evs, 32, -1);
        if (n < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &crl_spawner.sock) {
                if (handle_request() < 0)
                    return 0;
            } else if (p == &crl_spawner.sigfd) {
                reap();
            } else {
                struct spawner_watch *w = p;
                if (w->ready) /* else freed by an event before it in this turn */
                    w->ready(w);
            }
        }
        for (size_t i = 0; i < crl_spawner.n_graves; i++)
            free(crl_spawner.graves[i]);
        crl_spawner.n_graves = 0;
    }
}
