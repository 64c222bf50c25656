/* Entering a sandbox from the spawner: the identity, an exec's two
 * CLONE_VM stages, opening a path inside (spawner_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
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
#include "../../util/path.h"
#include "../../util/rawclone.h"
#include "../../util/rawsys.h"
#include "spawner_int.h"

static const char default_path[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
    JCHECK(crl_spawner_enter_identity(pid1fd, j->uid, j->gid, j->last_cap, &step), step);
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

void crl_spawner_handle_exec(const struct crl_spawn_req *rq, int *fds, int nfds)
{
    const struct crl_spawn_exec *x = &rq->u.exec;
    if ((unsigned)nfds != 4 + x->n_cgroup_fds || x->argc == 0 ||
        nfds > 4 + CRL_SPAWN_MAX_CGROUP_FDS) {
        crl_spawner_reply(rq->id, EPROTO, CRL_STEP_NONE, 0, NULL, 0, "exec: malformed request");
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
        crl_spawner_reply(rq->id, -r, CRL_STEP_NONE, 0, NULL, 0, "exec: malformed request");
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
    j->last_cap = crl_spawner.last_cap;
    j->seccomp = &crl_spawner.seccomp;
    crl_timens_format(&x->timens, j->timens, sizeof(j->timens));
    j->b_pid = -1;
    long a = crl_raw_clone(CLONE_VM | SIGCHLD, j->stacks + STAGE_STACK, NULL, stage_a, j);
    if (a < 0) {
        crl_spawner_reply(rq->id, (int)-a, CRL_STEP_CLONE, 0, NULL, 0, NULL);
        job_free(j);
        return;
    }
    j->a_pid = (pid_t)a;
    j->next = jobs;
    jobs = j;
}

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
        crl_spawner_reply(j->id, j->err, (unsigned)j->step, 0, NULL, 0, NULL);
        return;
    }
    if (j->b_reaped) {
        /* It ran and ended already: say it started, then that it ended. */
        crl_spawner_reply(j->id, 0, CRL_STEP_NONE, j->b_pid, NULL, 0, NULL);
        crl_spawner_send_exited(j->b_pid, j->b_status, &j->b_ru);
        return;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, j->b_pid, 0);
    crl_spawner_reply(j->id, 0, CRL_STEP_NONE, j->b_pid, &pidfd, pidfd >= 0 ? 1 : 0, NULL);
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

bool crl_spawner_exec_reaped(pid_t pid, int status, const struct rusage *ru)
{
    for (struct exec_job **pp = &jobs; *pp; pp = &(*pp)->next) {
        struct exec_job *j = *pp;
        if (pid == j->a_pid) {
            *pp = j->next;
            job_finished(j, status);
            job_free(j);
            return true;
        }
        if (pid == j->b_pid) {
            /* B before its A: keep its end until corrald knows it started */
            j->b_reaped = true;
            j->b_status = status;
            j->b_ru = *ru;
            return true;
        }
    }
    return false;
}
