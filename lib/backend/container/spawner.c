/* The container spawner: see spawn_proto.h for its place in the system.
 *
 * One loop over three kinds of event: requests from corrald, the create
 * sockets of sandboxes still building their root, and SIGCHLD.  Requests are
 * handled at once; only sandbox creation waits, on the new PID 1's report. */
#include "spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../util/path.h"
#include "../../helper/seccomp.h"
#include "../../helper/tar.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/rawclone.h"
#include "../../util/rawsys.h"
#include "init.h"
#include "spawn_proto.h"

#define NO_SAN __attribute__((no_sanitize("address", "undefined")))
#define INIT_STACK (64 * 1024)
#define STAGE_STACK (64 * 1024)
#define ALL_NS                                                                                 \
    (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | \
     CLONE_NEWCGROUP)

/* Capabilities root keeps inside a sandbox (Docker's default set); the rest
 * leave the bounding set before anything of the user's runs. */
#define KEEP_CAPS                                                                                \
    ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FSETID) |                   \
     (1ull << CAP_FOWNER) | (1ull << CAP_MKNOD) | (1ull << CAP_NET_RAW) | (1ull << CAP_SETGID) | \
     (1ull << CAP_SETUID) | (1ull << CAP_SETFCAP) | (1ull << CAP_SETPCAP) |                      \
     (1ull << CAP_NET_BIND_SERVICE) | (1ull << CAP_SYS_CHROOT) | (1ull << CAP_KILL) |            \
     (1ull << CAP_AUDIT_WRITE))

static const char default_path[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/* A PID 1 we created: its stack is ours to free once it is reaped. */
struct init_proc {
    pid_t pid;
    void *stack;
    struct init_proc *next;
};

/* A sandbox whose PID 1 is still building its root. */
struct pending_create {
    uint64_t id;
    pid_t pid;
    int pidfd;
    int sock; /* our end of the create socket */
    struct crl_init_args args;
    struct pending_create *next;
};

struct spawner {
    int sock; /* to corrald */
    int epfd;
    int sigfd;
    int host_netns;
    struct sock_fprog seccomp;
    struct sock_fprog no_new_code;
    char workdir[256];
    int last_cap; /* /proc/sys/kernel/cap_last_cap */
    int init_fd;  /* O_PATH of corral-init */
    struct init_proc *inits;
    struct pending_create *pending;
    char *msg; /* receive buffer, CRL_SPAWN_MAX_MSG */
};

static struct spawner sp;

/* ---- replies ---- */

static void reply(uint64_t id, int err, unsigned step, pid_t pid, const int *fds, int nfds,
                  const char *msg)
{
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_REPLY, .err = err, .id = id, .pid = pid, .step = step};
    if (msg)
        snprintf(r.msg, sizeof(r.msg), "%s", msg);
    if (crl_send_fds(sp.sock, &r, sizeof(r), fds, nfds) < 0)
        crl_log_syscall(NULL, errno, "sendmsg(corrald)");
}

static void send_reply(const struct crl_spawn_reply *r, const int *fds, int nfds)
{
    if (crl_send_fds(sp.sock, r, sizeof(*r), fds, nfds) < 0)
        crl_log_syscall(NULL, errno, "sendmsg(corrald)");
}

/* ---- create ---- */

/* The text /proc/PID/timens_offsets takes: seconds, then nanoseconds in
 * [0, 1e9), as the kernel wants them. */
static void format_timens(const struct crl_spawn_timens *t, char *out, size_t cap)
{
    const int64_t ns[2] = {t->monotonic_ns, t->boottime_ns};
    long long sec[2], nsec[2];
    for (int i = 0; i < 2; i++) {
        sec[i] = ns[i] / 1000000000;
        nsec[i] = ns[i] % 1000000000;
        if (nsec[i] < 0) {
            nsec[i] += 1000000000;
            sec[i]--;
        }
    }
    snprintf(out, cap, "monotonic %lld %lld\nboottime %lld %lld\n", sec[0], nsec[0], sec[1],
             nsec[1]);
}

static void pending_free(struct pending_create *pc)
{
    if (pc->sock >= 0) {
        epoll_ctl(sp.epfd, EPOLL_CTL_DEL, pc->sock, NULL);
        close(pc->sock);
    }
    if (pc->pidfd >= 0)
        close(pc->pidfd);
    free(pc);
}

static int write_id_map(pid_t pid, const char *file, uint32_t base, uint32_t count)
{
    char path[64], map[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
    snprintf(map, sizeof(map), "0 %u %u\n", base, count);
    return crl_write_file_at(AT_FDCWD, path, map);
}

static int write_pid(int procs_fd, pid_t pid)
{
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d", pid);
    ssize_t r;
    do
        r = write(procs_fd, buf, (size_t)n);
    while (r < 0 && errno == EINTR);
    return r == n ? 0 : -1;
}

/* Make a detached, read-only mount of an image layer whose ids are shifted
 * into the sandbox's range: image files owned by host root appear owned by
 * the sandbox's root, and no file of the store is ever chowned. */
static int idmapped_layer(int layer_fd, int userns)
{
    int tree = (int)syscall(SYS_open_tree, layer_fd, "",
                            AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return -1;
    struct mount_attr attr = {
        .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID,
        .userns_fd = (uint64_t)userns,
    };
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
        int e = errno;
        close(tree);
        errno = e;
        return -1;
    }
    return tree;
}

static void handle_create(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    const struct crl_spawn_create *c = &rq->u.create;
    if (c->n_layers < 1 || c->n_layers > CRL_SPAWN_MAX_LAYERS ||
        (unsigned)nfds != c->n_layers + 1 + c->n_cgroup_fds) {
        reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "create: wrong descriptors");
        return;
    }
    if (rq->strings_len > CRL_SPAWN_MAX_FILES ||
        (rq->strings_len && rq->strings[rq->strings_len - 1] != 0)) {
        reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "create: malformed run-time files");
        return;
    }
    const int *layer_fds = fds, *cgroup_fds = fds + c->n_layers + 1;
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
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
        err = errno;
        goto fail;
    }
    pc->sock = pair[0];
    pc->args.sync_fd = pair[1];
    pc->args.workdir = sp.workdir;
    pc->args.init_fd = sp.init_fd;
    pc->args.last_cap = sp.last_cap;
    snprintf(pc->args.tmpfs_opts, sizeof(pc->args.tmpfs_opts), "size=%um,mode=0755", c->disk_mb);
    snprintf(pc->args.hostname, sizeof(pc->args.hostname), "%s", c->hostname);
    format_timens(&c->timens, pc->args.timens, sizeof(pc->args.timens));
    memcpy(pc->args.files, rq->strings, rq->strings_len);
    pc->args.files_len = rq->strings_len;

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
    if (setns(sp.host_netns, CLONE_NEWNET) < 0) {
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
    ip->next = sp.inits;
    sp.inits = ip;
    stack = MAP_FAILED;

    step = CRL_STEP_IDMAP;
    if (write_id_map(pid, "uid_map", c->uid_base, c->id_count) < 0 ||
        write_id_map(pid, "gid_map", c->uid_base, c->id_count) < 0) {
        err = errno;
        goto kill;
    }
    step = CRL_STEP_CGROUP;
    for (unsigned i = 0; i < c->n_cgroup_fds; i++)
        if (write_pid(cgroup_fds[i], pid) < 0) {
            err = errno;
            goto kill;
        }
    step = CRL_STEP_IDMAP;
    int lower[CRL_SPAWN_MAX_LAYERS + 1]; /* and the child's timens_offsets */
    unsigned nl = 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
    int userns = crl_openat(AT_FDCWD, path, O_RDONLY, 0);
    err = errno;
    while (userns >= 0 && nl < c->n_layers &&
           (lower[nl] = idmapped_layer(layer_fds[nl], userns)) >= 0)
        nl++;
    err = errno;
    if (userns >= 0)
        close(userns);
    ssize_t sent = -1;
    if (nl == c->n_layers) {
        /* The child writes its time offsets through our descriptor: its
         * own /proc/self is host root's, like ours (see init.c). */
        step = CRL_STEP_TIMENS;
        snprintf(path, sizeof(path), "/proc/%d/timens_offsets", pid);
        if ((lower[nl] = crl_openat(AT_FDCWD, path, O_WRONLY, 0)) < 0)
            err = errno;
        else
            nl++;
    }
    if (nl == c->n_layers + 1) {
        step = CRL_STEP_SYNC;
        char go = 'g';
        sent = crl_send_fds(pc->sock, &go, 1, lower, (int)nl);
        err = errno;
    }
    for (unsigned i = 0; i < nl; i++)
        close(lower[i]);
    if (sent < 0)
        goto kill;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = pc};
    if (epoll_ctl(sp.epfd, EPOLL_CTL_ADD, pc->sock, &ev) < 0) {
        err = errno;
        goto kill;
    }
    pc->next = sp.pending;
    sp.pending = pc;
    return;

kill:
    syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
fail:
    if (pair[1] >= 0)
        close(pair[1]);
    if (stack != MAP_FAILED && stack)
        munmap(stack, INIT_STACK);
    reply(rq->id, err ? err : EIO, step, 0, NULL, 0, NULL);
    if (pc)
        pending_free(pc);
}

/* PID 1 reported: forward its pidfd, root and tmpfs to corrald. */
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
        reply(pc->id, n < 0 ? errno : EPIPE, CRL_STEP_SYNC, pc->pid, NULL, 0,
              "the sandbox's init exited during setup");
    } else if (r.err) {
        syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
        reply(pc->id, r.err, r.step, pc->pid, NULL, 0, NULL);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    } else if (nfds != 2) {
        syscall(SYS_pidfd_send_signal, pc->pidfd, SIGKILL, NULL, 0);
        reply(pc->id, EPROTO, CRL_STEP_SYNC, pc->pid, NULL, 0, "init sent no descriptors");
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    } else {
        int out[3] = {pc->pidfd, fds[0], fds[1]};
        reply(pc->id, 0, CRL_STEP_NONE, pc->pid, out, 3, NULL);
        close(fds[0]);
        close(fds[1]);
    }
    for (struct pending_create **pp = &sp.pending; *pp; pp = &(*pp)->next)
        if (*pp == pc) {
            *pp = pc->next;
            break;
        }
    pending_free(pc);
}

/* ---- identity inside a sandbox ---- */

struct kernel_sigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

/* Join the sandbox's user namespace (pidfd of its init) and become uid:gid
 * there, with Docker's capabilities for root and none for anyone else.  We
 * enter as host root, which is nobody in the namespace: become its root
 * first, so that the switch to another uid drops every capability.  Raw
 * syscalls: this runs in CLONE_VM children.  Returns 0 or -errno, and the
 * step that failed in *step. */
NO_SAN static long enter_identity(int pid1fd, uid_t uid, gid_t gid, int last_cap, int *step)
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

/* ---- exec: two CLONE_VM stages, no copy of any address space ----
 *
 * A (not a vfork child: the spawner goes on at once) joins the exec's
 * cgroups while still host root, enters the sandbox's namespaces but its
 * user namespace, and vforks B into its pid namespace as a child of the
 * spawner (CLONE_PARENT).  B stays host root, so nothing in the sandbox may
 * signal it, until it takes the sandbox identity just before it executes
 * the command.  Nothing here waits on anything a sandbox can stop: a B
 * stopped in that last moment holds only its own A, and corrald's timeout
 * kills both through the exec's cgroup. */

struct exec_job {
    uint64_t id;
    int fds[4 + CRL_SPAWN_MAX_CGROUP_FDS]; /* pid1fd, stdin, stdout, stderr, cgroup.procs... */
    int nfds;
    char *strings; /* a copy of the request's */
    char **argv;
    char **envp;
    const char *cwd;
    const char *path; /* PATH for the search, from envp or the default */
    uid_t uid;
    gid_t gid;
    unsigned flags;
    int last_cap;
    const struct sock_fprog *seccomp;
    char timens[96]; /* the sandbox's clock offsets, for timens_offsets */
    char *stacks;    /* A's and B's */
    pid_t a_pid;
    volatile int b_pid; /* CLONE_PARENT_SETTID: set before B runs */
    volatile int err;
    volatile int step;
    bool b_reaped; /* B ended before A's end was seen */
    int b_status;
    struct rusage b_ru;
    struct exec_job *next;
};

NO_SAN static void job_fail(struct exec_job *j, long r, int step)
{
    j->err = (int)-r;
    j->step = step;
    crl_raw_exit(127);
}

#define JCHECK(expr, step)           \
    do {                             \
        long r_ = (expr);            \
        if (r_ < 0)                  \
            job_fail(j, r_, (step)); \
    } while (0)

/* execvp without libc: search PATH, remember EACCES, as POSIX describes. */
NO_SAN static long exec_search(struct exec_job *j)
{
    const char *file = j->argv[0];
    for (const char *s = file; *s; s++)
        if (*s == '/')
            return crl_raw3(SYS_execve, file, j->argv, j->envp);
    unsigned long flen = crl_raw_strlen(file);
    char buf[4096];
    long last = -ENOENT;
    bool eacces = false;
    for (const char *p = j->path;;) {
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
            last = crl_raw3(SYS_execve, buf, j->argv, j->envp);
            if (last == -EACCES)
                eacces = true;
            else if (last != -ENOENT && last != -ENOTDIR)
                return last;
        }
        if (!*e)
            break;
        p = e + 1;
    }
    return eacces ? -EACCES : last;
}

NO_SAN static int stage_b(void *arg)
{
    struct exec_job *j = arg;
    /* Signals: nothing blocked, nothing ignored (the spawner ignores SIGPIPE). */
    unsigned long none = 0;
    crl_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof(none));
    struct kernel_sigaction dfl = {0};
    crl_raw4(SYS_rt_sigaction, SIGPIPE, &dfl, NULL, sizeof(unsigned long));
    if (j->flags & CRL_EXEC_F_SETSID)
        crl_raw0(SYS_setsid);
    struct rlimit nofile = {1024, 65536}, core = {0, 0};
    crl_raw4(SYS_prlimit64, 0, RLIMIT_NOFILE, &nofile, NULL);
    crl_raw4(SYS_prlimit64, 0, RLIMIT_CORE, &core, NULL);
    /* stdio: through high numbers first, so no target is also a source */
    int hi[3];
    for (int i = 0; i < 3; i++) {
        long r = crl_raw3(SYS_fcntl, j->fds[1 + i], F_DUPFD_CLOEXEC, 100);
        JCHECK(r, CRL_STEP_EXEC);
        hi[i] = (int)r;
    }
    for (int i = 0; i < 3; i++)
        JCHECK(crl_raw3(SYS_dup3, hi[i], i, 0), CRL_STEP_EXEC);
    /* everything else goes, but the init's pidfd, until the exec */
    int pid1fd = (int)crl_raw3(SYS_fcntl, j->fds[0], F_DUPFD_CLOEXEC, 3);
    JCHECK(pid1fd, CRL_STEP_EXEC);
    if (pid1fd > 3)
        crl_raw3(SYS_close_range, 3, (unsigned)pid1fd - 1, 0);
    crl_raw3(SYS_close_range, (unsigned)pid1fd + 1, ~0u, 0);
    int step;
    JCHECK(enter_identity(pid1fd, j->uid, j->gid, j->last_cap, &step), step);
    JCHECK(crl_raw5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), CRL_STEP_SECCOMP);
    JCHECK(crl_raw1(SYS_chdir, j->cwd), CRL_STEP_CWD);
    JCHECK(crl_raw3(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, j->seccomp), CRL_STEP_SECCOMP);
    job_fail(j, exec_search(j), CRL_STEP_EXEC);
    return 127;
}

NO_SAN static int stage_a(void *arg)
{
    struct exec_job *j = arg;
    /* The spawner asks the OOM killer to spare it; the user's processes
     * must not inherit that (as host root we may also lower the floor). */
    long fd = crl_raw4(SYS_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC, 0);
    if (fd >= 0) {
        crl_raw3(SYS_write, fd, "0", 1);
        crl_raw1(SYS_close, fd);
    }
    /* Join the exec's cgroups while still host root: B inherits them, and a
     * kill of the exec's leaf reaches us both. */
    for (int i = 4; i < j->nfds; i++)
        JCHECK(crl_raw3(SYS_write, j->fds[i], "0", 1), CRL_STEP_CGROUP);
    /* The sandbox's clocks.  setns() into its init's time namespace wants
     * a single-threaded caller, which a CLONE_VM child is not; so a
     * namespace of our own, with the sandbox's offsets, that B enters
     * when it executes the command: every process sees the same clocks. */
    JCHECK(crl_raw1(SYS_unshare, CLONE_NEWTIME), CRL_STEP_TIMENS);
    long tfd = crl_raw4(SYS_openat, AT_FDCWD, "/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC, 0);
    JCHECK(tfd, CRL_STEP_TIMENS);
    long w = crl_raw3(SYS_write, tfd, j->timens, crl_raw_strlen(j->timens));
    crl_raw1(SYS_close, tfd);
    JCHECK(w, CRL_STEP_TIMENS);
    JCHECK(crl_raw2(SYS_setns, j->fds[0], ALL_NS & ~CLONE_NEWUSER), CRL_STEP_SETNS);
    long b = crl_raw_clone(CLONE_VM | CLONE_VFORK | CLONE_PARENT | CLONE_PARENT_SETTID,
                           j->stacks + 2 * STAGE_STACK, (int *)&j->b_pid, stage_b, j);
    if (b < 0)
        job_fail(j, b, CRL_STEP_CLONE);
    return 0;
}

static struct exec_job *jobs;

static void job_free(struct exec_job *j)
{
    for (int i = 0; i < j->nfds; i++)
        if (j->fds[i] >= 0)
            close(j->fds[i]);
    if (j->stacks)
        munmap(j->stacks, 2 * STAGE_STACK);
    free(j->strings);
    free(j->argv);
    free(j->envp);
    free(j);
}

static char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* Split "argv... env... cwd" from the request's string area into j. */
static int job_strings(struct exec_job *j, const struct crl_spawn_req *rq)
{
    const struct crl_spawn_exec *x = &rq->u.exec;
    size_t n = (size_t)x->argc + x->envc + 1;
    j->strings = malloc(rq->strings_len ? rq->strings_len : 1);
    j->argv = calloc((size_t)x->argc + 1, sizeof(char *));
    j->envp = calloc((size_t)x->envc + 1, sizeof(char *));
    if (!j->strings || !j->argv || !j->envp)
        return -ENOMEM;
    memcpy(j->strings, rq->strings, rq->strings_len);
    const char *p = j->strings, *end = j->strings + rq->strings_len;
    for (size_t i = 0; i < n; i++) {
        const char *z = memchr(p, 0, (size_t)(end - p));
        if (!z)
            return -EPROTO;
        if (i < x->argc)
            j->argv[i] = (char *)p;
        else if (i < (size_t)x->argc + x->envc)
            j->envp[i - x->argc] = (char *)p;
        else
            j->cwd = p;
        p = z + 1;
    }
    const char *path = env_get(j->envp, "PATH");
    j->path = path ? path : default_path;
    return 0;
}

static void handle_exec(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    const struct crl_spawn_exec *x = &rq->u.exec;
    if ((unsigned)nfds != 4 + x->n_cgroup_fds || x->argc == 0 ||
        nfds > 4 + CRL_SPAWN_MAX_CGROUP_FDS) {
        reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "exec: malformed request");
        return;
    }
    struct exec_job *j = calloc(1, sizeof(*j));
    int r = j ? job_strings(j, rq) : -ENOMEM;
    if (r == 0) {
        j->stacks = mmap(NULL, 2 * STAGE_STACK, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (j->stacks == MAP_FAILED) {
            j->stacks = NULL;
            r = -ENOMEM;
        }
    }
    if (r < 0) {
        if (j)
            job_free(j);
        reply(rq->id, -r, CRL_STEP_NONE, 0, NULL, 0, "exec: malformed request");
        return;
    }
    /* The job owns the descriptors now. */
    for (int i = 0; i < nfds; i++) {
        j->fds[i] = fds[i];
        fds[i] = -1;
    }
    j->nfds = nfds;
    j->id = rq->id;
    j->uid = x->uid;
    j->gid = x->gid;
    j->flags = x->flags;
    j->last_cap = sp.last_cap;
    j->seccomp = &sp.seccomp;
    format_timens(&x->timens, j->timens, sizeof(j->timens));
    j->b_pid = -1;
    long a = crl_raw_clone(CLONE_VM | SIGCHLD, j->stacks + STAGE_STACK, NULL, stage_a, j);
    if (a < 0) {
        reply(rq->id, (int)-a, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        job_free(j);
        return;
    }
    j->a_pid = (pid_t)a;
    j->next = jobs;
    jobs = j;
}

static void send_exited(pid_t pid, int status, const struct rusage *ru);

/* A ended: B executed the command, or failed before, or was killed. */
static void job_finished(struct exec_job *j, int a_status)
{
    if (!j->err && (!WIFEXITED(a_status) || WEXITSTATUS(a_status) != 0)) {
        j->err = ECANCELED; /* killed before the command started (a timeout, a destroy) */
        j->step = CRL_STEP_EXEC;
    }
    if (j->err) {
        /* B never ran the command: its end is nobody's business */
        if (j->b_pid > 0 && !j->b_reaped)
            while (waitpid(j->b_pid, NULL, __WALL) < 0 && errno == EINTR)
                ;
        reply(j->id, j->err, (unsigned)j->step, 0, NULL, 0, NULL);
        return;
    }
    if (j->b_reaped) {
        /* It ran and ended already: say it started, then that it ended. */
        reply(j->id, 0, CRL_STEP_NONE, j->b_pid, NULL, 0, NULL);
        send_exited(j->b_pid, j->b_status, &j->b_ru);
        return;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, j->b_pid, 0);
    reply(j->id, 0, CRL_STEP_NONE, j->b_pid, &pidfd, pidfd >= 0 ? 1 : 0, NULL);
    if (pidfd >= 0)
        close(pidfd);
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
    if (r < 0 || (r = enter_identity(o->pid1fd, o->uid, o->gid, o->last_cap, &step)) < 0) {
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

static void handle_open(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    if (nfds != 1 || rq->strings_len == 0 || rq->strings[rq->strings_len - 1] != 0) {
        reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "open: malformed request");
        return;
    }
    cleanup_free char *path = strdup(rq->strings);
    if (!path) {
        reply(rq->id, ENOMEM, CRL_STEP_NONE, 0, NULL, 0, NULL);
        return;
    }
    struct open_job o = {.pid1fd = fds[0],
                         .uid = rq->u.open.uid,
                         .gid = rq->u.open.gid,
                         .path = path,
                         .flags = rq->u.open.flags,
                         .mode = rq->u.open.mode,
                         .last_cap = sp.last_cap,
                         .fd = -1};
    /* CLONE_FILES: the descriptor it opens lands in our table.  It never
     * joins the sandbox's pid namespace (nothing there can stop it) and
     * opens with O_NONBLOCK (no fifo, lease or lock can make it wait). */
    long c = crl_raw_clone(CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD,
                           open_stack + sizeof(open_stack), NULL, stage_open, &o);
    if (c < 0) {
        reply(rq->id, (int)-c, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        return;
    }
    while (waitpid((pid_t)c, NULL, __WALL) < 0 && errno == EINTR)
        ;
    if (o.fd < 0) {
        reply(rq->id, o.err ? o.err : EIO, (unsigned)o.step, 0, NULL, 0, NULL);
        return;
    }
    int fd = o.fd;
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_REPLY, .id = rq->id, .kind = o.kind, .size = o.size};
    send_reply(&r, &fd, 1);
    close(fd);
}

/* ---- streams: a forked child inside the sandbox ---- */

/* mkdir -p of path's parent, inside the sandbox: the open that follows
 * says what failed. */
static void make_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash && slash > path && (size_t)(slash - path) < sizeof(dir)) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
        crl_mkdir_p(dir, 0755);
    }
}

static int fail_errno(int e, const char *tmp, char *msg, size_t msglen)
{
    if (tmp)
        unlink(tmp);
    snprintf(msg, msglen, "%s", strerror(e));
    return crl_tar_status_of_errno(e);
}

/* Follow `path` while it names a symlink, as open(2) would, into `out`.
 * Our root is the sandbox's (setns into its mount namespace), so no link
 * leads out of it. */
static int follow_links(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    for (int hops = 0; hops < 40; hops++) {
        char target[PATH_MAX];
        ssize_t n = readlink(out, target, sizeof(target) - 1);
        if (n < 0)
            return errno == EINVAL || errno == ENOENT ? 0 : -errno; /* not a link */
        target[n] = 0;
        if (target[0] == '/') {
            snprintf(out, cap, "%s", target);
        } else {
            char *slash = strrchr(out, '/');
            size_t dir = slash ? (size_t)(slash - out) + 1 : 0;
            if (dir + (size_t)n >= cap)
                return -ENAMETOOLONG;
            memcpy(out + dir, target, (size_t)n + 1);
        }
    }
    return -ELOOP;
}

/* Where a new file cannot be made beside the old one (a directory the user
 * may not write, /proc), an existing file is written in place. */
static bool write_in_place(int e)
{
    return e == EACCES || e == EPERM || e == EROFS || e == ENOENT;
}

/* Copy the pipe into a new file beside `path`, as the sandbox's user, and
 * put it in place only once corrald says the upload is whole (a commit
 * byte on `ctl`): a failed or abandoned upload leaves `path` as it was.
 * A path that is a symlink is written through, as open(2) would. */
static int file_in(int data, int ctl, const char *path_in, mode_t mode, char *msg, size_t msglen)
{
    make_parent(path_in);
    umask(0);
    char path[PATH_MAX];
    int r = follow_links(path_in, path, sizeof(path));
    if (r < 0)
        return fail_errno(-r, NULL, msg, msglen);
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode))
        return fail_errno(EISDIR, NULL, msg, msglen);
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    snprintf(tmp, sizeof(tmp), "%.*s/.corral-upload-%d", slash ? (int)(slash - path) : 0, path,
             (int)getpid());
    long fd = -EEXIST;
    if (!exists || S_ISREG(sb.st_mode)) {
        unlink(tmp); /* one a killed helper of the same pid left */
        fd = crl_path_open_in_root(AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
    }
    bool in_place = exists && fd < 0 && (fd == -EEXIST || write_in_place((int)-fd));
    if (in_place) /* a device, a fifo, or a directory closed to new files */
        fd = crl_path_open_in_root(AT_FDCWD, path, O_WRONLY | O_TRUNC, 0);
    if (fd < 0)
        return fail_errno((int)-fd, NULL, msg, msglen);
    const char *undo = in_place ? NULL : tmp;
    unsigned long long total = 0;
    for (;;) {
        /* splice moves pages from the pipe to the file without a copy here */
        ssize_t n = splice(data, NULL, (int)fd, NULL, 1 << 20, SPLICE_F_MOVE);
        if (n < 0 && errno == EINVAL) { /* a file system without splice: copy */
            char buf[65536];
            n = read(data, buf, sizeof(buf));
            if (n > 0 && crl_write_full((int)fd, buf, (size_t)n) < 0)
                n = -1;
        }
        if (n == 0)
            break;
        if (n < 0) {
            int e = errno;
            close((int)fd);
            return fail_errno(e, undo, msg, msglen);
        }
        total += (unsigned long long)n;
    }
    if (close((int)fd) < 0)
        return fail_errno(errno, undo, msg, msglen);
    if (in_place) {
        snprintf(msg, msglen, "bytes=%llu", total);
        return CRL_STREAM_OK;
    }
    char c = 0;
    ssize_t n;
    while ((n = read(ctl, &c, 1)) < 0 && errno == EINTR)
        ;
    if (n != 1 || c != CRL_STREAM_COMMIT) {
        unlink(tmp);
        snprintf(msg, msglen, "the upload was abandoned before its end");
        return CRL_STREAM_FAILED;
    }
    if (rename(tmp, path) < 0)
        return fail_errno(errno, tmp, msg, msglen);
    snprintf(msg, msglen, "bytes=%llu", total);
    return CRL_STREAM_OK;
}

static void stream_child(const struct crl_spawn_req *rq_in, int *fds, const char *path_in)
{
    /* Our copies first: the request lives in the buffer we clear below. */
    struct crl_spawn_stream stcopy = rq_in->u.stream;
    const struct crl_spawn_stream *st = &stcopy;
    bool restore = rq_in->op == CRL_SPAWN_RESTORE;
    char *path = strdup(path_in);
    int code = CRL_STREAM_FAILED;
    char msg[512] = "";
    if (!path)
        _exit(CRL_STREAM_FAILED);
    /* Nothing of the spawner's may stay with us: not its descriptors (other
     * sandboxes' sockets, the host netns, corrald's log), not the request
     * buffer (other sandboxes' commands).  The pipes go to fixed numbers:
     * 3 data, 4 messages, 5 the init's pidfd, 6... cgroup.procs. */
    memset(sp.msg, 0, CRL_SPAWN_MAX_MSG);
    int keep[3 + CRL_SPAWN_MAX_CGROUP_FDS];
    int nkeep = 3 + (int)st->n_cgroup_fds;
    keep[0] = fds[1];
    keep[1] = fds[2];
    keep[2] = fds[0];
    for (unsigned i = 0; i < st->n_cgroup_fds; i++)
        keep[3 + i] = fds[3 + i];
    for (int i = 0; i < nkeep; i++)
        keep[i] = fcntl(keep[i], F_DUPFD_CLOEXEC, 100 + i);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int i = 0; i < 3; i++)
        dup2(devnull, i);
    for (int i = 0; i < nkeep; i++) {
        dup2(keep[i], 3 + i);
        close(keep[i]);
    }
    close_range(3 + (unsigned)nkeep, ~0u, 0);
    int data = 3, msgfd = 4, pid1fd = 5;
    crl_write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "0");
    for (unsigned i = 0; i < st->n_cgroup_fds; i++)
        if (write(6 + (int)i, "0", 1) != 1) {
            snprintf(msg, sizeof(msg), "cgroup attach: %s", strerror(errno));
            goto out;
        }
    int step;
    long r = -EINVAL;
    int tree = -1;
    /* A forked child is single-threaded, so it may join init's time
     * namespace (an exec's CLONE_VM stages may not: see stage_a). */
    if (setns(pid1fd, CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWCGROUP |
                          CLONE_NEWTIME) < 0)
        r = -errno;
    /* A restore works on the overlay alone: a detached copy of the root
     * mount without the ones on it (/proc, /dev, /sys), made while we are
     * still host root (the sandbox's root may not mount), so that their
     * mountpoints are plain directories of the overlay. */
    else if (restore && (tree = (int)syscall(SYS_open_tree, AT_FDCWD, "/",
                                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)) < 0)
        r = -errno;
    else
        r = enter_identity(pid1fd, st->uid, st->gid, sp.last_cap, &step);
    if (r == 0 && tree >= 0 && fchdir(tree) < 0)
        r = -errno;
    if (r < 0) {
        int e = (int)-r;
        snprintf(msg, sizeof(msg), "%s the sandbox: %s", restore ? "restoring into" : "entering",
                 strerror(e));
        code = e == ESRCH ? CRL_STREAM_GONE : CRL_STREAM_FAILED;
        goto out;
    }
    close_range(5, ~0u, 0); /* the tree too: our cwd holds it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &sp.seccomp) < 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &sp.no_new_code) < 0) {
        snprintf(msg, sizeof(msg), "seccomp: %s", strerror(errno));
        goto out;
    }
    if (restore) {
        unsigned long n;
        code = crl_tar_apply(data, CRL_TAR_APPLY_OWNERS, &n, msg, sizeof(msg));
        goto out;
    }
    if (st->kind == CRL_STREAM_FILE_IN) {
        code = file_in(data, msgfd, path, st->mode, msg, sizeof(msg));
        goto out;
    }
    if (st->kind == CRL_STREAM_TAR_IN)
        crl_mkdir_p(path, 0755);
    if (chdir(path) < 0) {
        int e = errno;
        snprintf(msg, sizeof(msg), "%s: %s", path, strerror(e));
        code = crl_tar_status_of_errno(e);
        goto out;
    }
    if (st->kind == CRL_STREAM_TAR_OUT) {
        code = crl_tar_out(data, msg, sizeof(msg)) < 0 ? CRL_STREAM_FAILED : CRL_STREAM_OK;
    } else {
        unsigned long n;
        if (crl_tar_in(data, &n, msg, sizeof(msg)) < 0) {
            code = CRL_STREAM_BAD_INPUT;
            goto out;
        }
        /* Read to the end: tar's records may pad past the end-of-archive
         * marker, and the uploader must not meet a closed pipe. */
        char sink[65536];
        while (read(data, sink, sizeof(sink)) > 0)
            ;
        snprintf(msg, sizeof(msg), "entries=%lu", n);
        code = CRL_STREAM_OK;
    }
out:
    dprintf(msgfd, "%s\n", msg);
    _exit(code);
}

static void handle_stream(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    if ((unsigned)nfds != 3 + rq->u.stream.n_cgroup_fds || rq->strings_len == 0 ||
        rq->strings[rq->strings_len - 1] != 0 || rq->u.stream.kind > CRL_STREAM_FILE_IN) {
        reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "stream: malformed request");
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        reply(rq->id, errno, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        return;
    }
    if (pid == 0)
        stream_child(rq, fds, rq->strings);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    reply(rq->id, 0, CRL_STEP_NONE, pid, &pidfd, pidfd >= 0 ? 1 : 0, NULL);
    if (pidfd >= 0)
        close(pidfd);
}

/* ---- children ---- */

static void send_exited(pid_t pid, int status, const struct rusage *ru)
{
    struct crl_spawn_reply r = {
        .op = CRL_SPAWN_EXITED,
        .pid = pid,
        .status = status,
        .utime_us = (int64_t)ru->ru_utime.tv_sec * 1000000 + ru->ru_utime.tv_usec,
        .stime_us = (int64_t)ru->ru_stime.tv_sec * 1000000 + ru->ru_stime.tv_usec,
        .maxrss_kb = ru->ru_maxrss,
    };
    send_reply(&r, NULL, 0);
}

static void reap(void)
{
    struct signalfd_siginfo si;
    while (read(sp.sigfd, &si, sizeof(si)) == sizeof(si))
        ;
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, WNOHANG | __WALL, &ru);
        if (pid <= 0)
            break;
        bool handled = false;
        for (struct exec_job **pp = &jobs; *pp; pp = &(*pp)->next) {
            struct exec_job *j = *pp;
            if (pid == j->a_pid) {
                *pp = j->next;
                job_finished(j, status);
                job_free(j);
                handled = true;
                break;
            }
            if (pid == j->b_pid) {
                /* B before its A: keep its end until corrald knows it started */
                j->b_reaped = true;
                j->b_status = status;
                j->b_ru = ru;
                handled = true;
                break;
            }
        }
        if (handled)
            continue;
        for (struct init_proc **pp = &sp.inits; *pp; pp = &(*pp)->next)
            if ((*pp)->pid == pid) {
                struct init_proc *ip = *pp;
                *pp = ip->next;
                munmap(ip->stack, INIT_STACK);
                free(ip);
                break;
            }
        send_exited(pid, status, &ru);
    }
}

static int handle_request(void)
{
    int fds[CRL_SPAWN_MAX_FDS];
    int nfds = CRL_SPAWN_MAX_FDS;
    ssize_t n = crl_recv_fds(sp.sock, sp.msg, CRL_SPAWN_MAX_MSG, fds, &nfds);
    if (n == 0)
        return -1; /* corrald is gone: so are we, and our sandboxes with us */
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)sp.msg;
    if ((size_t)n < sizeof(*rq) || sizeof(*rq) + rq->strings_len != (size_t)n) {
        crl_warn(NULL, "spawner: malformed request of %zd bytes", n);
    } else {
        switch (rq->op) {
        case CRL_SPAWN_CREATE: handle_create(rq, fds, nfds); break;
        case CRL_SPAWN_EXEC: handle_exec(rq, fds, nfds); break;
        case CRL_SPAWN_OPEN: handle_open(rq, fds, nfds); break;
        case CRL_SPAWN_STREAM:
        case CRL_SPAWN_RESTORE: handle_stream(rq, fds, nfds); break;
        default: reply(rq->id, EOPNOTSUPP, CRL_STEP_NONE, 0, NULL, 0, "unknown request"); break;
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
    sp.sock = sock;
    snprintf(sp.workdir, sizeof(sp.workdir), "%s", workdir);
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
    if (crl_write_file_at(AT_FDCWD, "/proc/self/oom_score_adj", "-1000") < 0)
        crl_debug(NULL, "spawner: oom_score_adj -1000 refused (%s): OOM kills may pick us",
                  strerror(errno));
    prctl(PR_SET_DUMPABLE, 0);
    sp.init_fd = crl_openat(AT_FDCWD, init_path, O_PATH, 0);
    if (sp.init_fd < 0) {
        crl_error(NULL, "spawner: %s: %s", init_path, strerror(errno));
        return 1;
    }
    umask(022);
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    sp.sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    sp.host_netns = crl_openat(AT_FDCWD, "/proc/self/ns/net", O_RDONLY, 0);
    sp.epfd = epoll_create1(EPOLL_CLOEXEC);
    sp.msg = malloc(CRL_SPAWN_MAX_MSG);
    if (sp.sigfd < 0 || sp.host_netns < 0 || sp.epfd < 0 || !sp.msg) {
        crl_error(NULL, "spawner: setup failed: %s", strerror(errno));
        return 1;
    }
    char buf[16];
    sp.last_cap = 63;
    if (crl_read_file_at(AT_FDCWD, "/proc/sys/kernel/cap_last_cap", buf, sizeof(buf)) > 0)
        sp.last_cap = (int)strtol(buf, NULL, 10);
    if (crl_seccomp_build(CRL_SECCOMP_CONTAINER, &sp.seccomp, &err) < 0 ||
        crl_seccomp_build(CRL_SECCOMP_NO_NEW_CODE, &sp.no_new_code, &err) < 0) {
        crl_error(NULL, "spawner: %s", err.msg);
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &sp.sock};
    epoll_ctl(sp.epfd, EPOLL_CTL_ADD, sp.sock, &ev);
    ev.data.ptr = &sp.sigfd;
    epoll_ctl(sp.epfd, EPOLL_CTL_ADD, sp.sigfd, &ev);

    /* Tell corrald we are ready. */
    struct crl_spawn_reply hello = {.op = CRL_SPAWN_REPLY, .id = 0, .pid = getpid()};
    send_reply(&hello, NULL, 0);

    for (;;) {
        struct epoll_event evs[32];
        int n = epoll_wait(sp.epfd, evs, 32, -1);
        if (n < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &sp.sock) {
                if (handle_request() < 0)
                    return 0;
            } else if (p == &sp.sigfd) {
                reap();
            } else {
                create_reported(p);
            }
        }
    }
}
