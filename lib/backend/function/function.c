/* The function backend, corrald's side: a sandbox is a cgroup, an
 * unprivileged uid of its own and a scratch directory; each process is a
 * fork of the runtime's zygote (corral-zygote), which jails itself
 * (jail.h) before it runs anything.  No namespaces: the jail is the
 * kernel's per-process controls (Landlock, seccomp, credentials, rlimits,
 * cgroups), so a call costs a fork, not a container.
 *
 * Differences from a container, by design (docs/architecture.md):
 * no persistent processes (no sessions), never root (execs run as the
 * sandbox's uid whatever `user` says), the working directory is always the
 * scratch dir, which is also the root of the files API, and only single
 * files move through it (no tar of directories). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../core/cgroup.h"
#include "../../core/host.h"
#include "../../core/path.h"
#include "../../core/sandbox.h"
#include "../../core/tar.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "zygote_proto.h"

#define N_RUNTIMES 2
static const char *const runtimes[N_RUNTIMES] = {"shell", "python"};

/* A checkpoint being restored into the scratch dir by a jailed child of
 * the zygote (CRL_ZYG_RESTORE): no user code runs in it. */
struct fn_restore {
    struct crl_restore_req *rq;
    struct crl_sandbox *sb; /* a reference is held */
    char leaf[24];
    int status_fd; /* closed unwritten once the jail is entered; else "ERRNO STEP" */
    int msg_fd;    /* its stderr: the result's line */
};

/* A request waiting for its REPLY, or a child waiting for its EXITED: a
 * process (p) or a restore (rs). */
struct fn_call {
    uint64_t id;
    pid_t pid;
    struct crl_sandbox *sb;
    struct crl_proc *p;
    struct fn_restore *rs;
    struct fn_call *next;
};

struct zygote {
    struct fn_state *st;
    unsigned runtime;
    pid_t pid;
    int sock;
    struct crl_watch w;
    struct fn_call *pending; /* sent, no reply yet */
    struct fn_call *running; /* started, not yet exited */
};

struct fn_state {
    struct crl_host *host;
    char zygote_path[PATH_MAX];
    char scratch_root[PATH_MAX]; /* <run dir>/functions: one 0700 dir per sandbox */
    int scratch_root_fd;
    struct zygote zy[N_RUNTIMES];
    uint64_t next_id;
    char *msg;
};

/* A process's own cgroup leaf, under its sandbox's, and the pipe its
 * child says on whether it started. */
struct fn_proc {
    char leaf[24];
    int status_fd;
    struct crl_watch w;
    bool settled;
    struct crl_sandbox *sb;
};

struct fn_sandbox {
    struct crl_cgroup *cg;
    int scratch_fd; /* O_PATH */
    char scratch[256];
    uid_t uid;
    gid_t gid;
    unsigned runtime;
    unsigned running; /* processes and restores not yet exited */
    bool releasing;
    bool paused;
    struct crl_cgroup_reclaim last_pause;
    struct crl_timer timer; /* create's completion; destroy's drain */
    unsigned drain_tries;
};

static struct fn_state *g_fn;

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---- zygotes ---- */

static void zygote_lost(struct zygote *z);
static void restore_end(struct fn_restore *rs, int status, const struct crl_err *err);

/* A call ended, or never started: whatever it left running in its leaf
 * is killed (a call is not a machine: nothing outlives it), and the leaf
 * goes (or, while the dead are reaped, goes with the sandbox). */
static void proc_gone(struct fn_sandbox *f, struct crl_proc *p)
{
    struct fn_proc *fp = p->priv;
    if (fp) {
        if (fp->w.active)
            crl_watch_stop(fp->sb->host->loop, &fp->w);
        close_fd(&fp->status_fd);
    }
    if (f) {
        f->running--;
        if (fp && f->cg) {
            struct crl_err err = CRL_ERR_INIT;
            if (crl_cgroup_kill_leaf(f->cg, fp->leaf, 0, &err) < 0)
                crl_warn(NULL, "%s", err.msg);
            crl_cgroup_remove_leaf(f->cg, fp->leaf);
        }
    }
    free(fp);
    p->priv = NULL;
}

/* Did the call start?  Its status pipe closed unwritten: yes; a line
 * "ERRNO STEP": no, and why.  `now`: it has exited, so the pipe has all it
 * will ever have.  Returns 1 (started), 0 (not known yet) or -1: it never
 * started, and `p` went back to its owner (who may have freed it). */
static int settle(struct crl_proc *p, bool now)
{
    struct fn_proc *fp = p->priv;
    if (!fp || fp->settled)
        return 1;
    char line[128];
    ssize_t n = read(fp->status_fd, line, sizeof(line) - 1);
    if (n < 0 && errno == EAGAIN && !now)
        return 0;
    fp->settled = true;
    if (fp->w.active)
        crl_watch_stop(fp->sb->host->loop, &fp->w);
    close_fd(&fp->status_fd);
    if (n <= 0) {
        p->started = true;
        p->on_start(p, NULL);
        return 1;
    }
    line[n] = 0;
    int e = 0;
    char step[32] = "";
    sscanf(line, "%d %31s", &e, step);
    struct crl_err err = CRL_ERR_INIT;
    const char *what = p->argv && p->argv[0] ? p->argv[0] : "the command";
    if (strcmp(step, "exec") == 0 && e == ENOENT)
        crl_err_set(&err, CRL_E_NOT_FOUND, "executable %s not found", what);
    else if (strcmp(step, "exec") == 0)
        crl_err_set(&err, CRL_E_INVALID, "cannot execute %s: %s", what, strerror(e));
    else if (strcmp(step, "python-argv") == 0)
        crl_err_set(&err, CRL_E_INVALID,
                    "the python runtime runs source code: give cmd as a string, not argv");
    else
        crl_err_set(&err, CRL_E_INTERNAL, "entering the function jail: %s: %s",
                    step[0] ? step : "?", strerror(e));
    /* Nothing of ours may point at p after its owner hears: the call
     * record goes (its EXITED is then ignored), and the leaf. */
    struct fn_sandbox *f = fp->sb->priv;
    struct zygote *z = &g_fn->zy[f ? f->runtime : 0];
    for (struct fn_call **pp = &z->running; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p) {
            struct fn_call *c = *pp;
            *pp = c->next;
            free(c);
            break;
        }
    close_fd(&p->pidfd);
    proc_gone(f, p);
    p->on_start(p, &err); /* never started: no on_exit follows */
    return -1;
}

static void status_readable(struct crl_watch *w, uint32_t ev)
{
    (void)settle(w->data, false);
    (void)ev;
}

static void on_zygote(struct crl_watch *w, uint32_t ev)
{
    struct zygote *z = w->data;
    for (;;) {
        struct crl_zyg_reply r;
        int fds[2], nfds = 2;
        ssize_t n = crl_recv_fds(z->sock, &r, sizeof(r), fds, &nfds);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n != (ssize_t)sizeof(r)) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            zygote_lost(z);
            return;
        }
        if (r.op == CRL_ZYG_EXITED) {
            for (struct fn_call **pp = &z->running; *pp; pp = &(*pp)->next) {
                struct fn_call *c = *pp;
                if (c->pid != r.pid)
                    continue;
                *pp = c->next;
                if (c->rs) {
                    restore_end(c->rs, r.status, NULL);
                    free(c);
                    break;
                }
                struct crl_proc *p = c->p;
                struct fn_sandbox *f = c->sb->priv;
                free(c);
                if (settle(p, true) < 0)
                    break; /* it never started: handed back already */
                p->exited = true;
                p->status = r.status;
                p->cpu_s = r.cpu_s;
                p->maxrss_bytes = r.maxrss_bytes;
                close_fd(&p->pidfd);
                proc_gone(f, p);
                p->on_exit(p);
                break;
            }
            continue;
        }
        struct fn_call **pp = &z->pending;
        while (*pp && (*pp)->id != r.id)
            pp = &(*pp)->next;
        struct fn_call *c = *pp;
        if (!c) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            continue;
        }
        *pp = c->next;
        if (c->rs) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            if (r.err) {
                struct crl_err err = CRL_ERR_INIT;
                crl_err_sys(&err, r.err, "restoring: function zygote: %s", r.msg);
                restore_end(c->rs, 0, &err);
                free(c);
            } else {
                c->pid = r.pid;
                c->next = z->running;
                z->running = c;
            }
            continue;
        }
        struct crl_proc *p = c->p;
        struct fn_sandbox *f = c->sb->priv;
        if (r.err) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            struct crl_err err = CRL_ERR_INIT;
            crl_err_sys(&err, r.err, "function zygote: %s", r.msg);
            close_fd(&p->in_fd);
            close_fd(&p->out_fd);
            close_fd(&p->err_fd);
            proc_gone(f, p);
            free(c);
            p->on_start(p, &err);
            continue;
        }
        p->pid = r.pid;
        p->pidfd = nfds ? fds[0] : -1;
        c->pid = r.pid;
        c->next = z->running;
        z->running = c;
        /* started once its status pipe says so */
        struct fn_proc *fp = p->priv;
        if (crl_watch_start(c->sb->host->loop, &fp->w, fp->status_fd, EPOLLIN, status_readable, p) <
            0)
            settle(p, true);
    }
    (void)ev;
}

static int zygote_start(struct fn_state *st, unsigned rt, struct crl_err *err)
{
    struct zygote *z = &st->zy[rt];
    z->st = st;
    z->runtime = rt;
    z->sock = -1;
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_ZYG_MAX_MSG, err) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pair[1], CRL_ZYG_FD);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attr;
    crl_spawnattr_init_clean(&attr);
    char *argv[] = {(char *)"corral-zygote", (char *)"--runtime", (char *)runtimes[rt], NULL};
    char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    pid_t pid;
    int r = posix_spawn(&pid, st->zygote_path, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(pair[1]);
    if (r != 0) {
        close(pair[0]);
        return crl_err_sys(err, r, "starting %s", st->zygote_path);
    }
    /* Its hello: the runtime is initialised (python: a few tens of ms). */
    struct timeval tv = {10, 0};
    setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct crl_zyg_reply hello;
    if (recv(pair[0], &hello, sizeof(hello), 0) != (ssize_t)sizeof(hello) ||
        hello.op != CRL_ZYG_HELLO) {
        close(pair[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return crl_err_set(err, CRL_E_UNAVAILABLE, "the %s zygote did not start (see the log)",
                           runtimes[rt]);
    }
    crl_set_nonblock(pair[0], 1);
    z->pid = pid;
    z->sock = pair[0];
    if (crl_watch_start(st->host->loop, &z->w, z->sock, EPOLLIN, on_zygote, z) < 0) {
        close_fd(&z->sock);
        return crl_err_set(err, CRL_E_INTERNAL, "watching the zygote");
    }
    crl_info(NULL, "function runtime %s: zygote pid %d", runtimes[rt], (int)pid);
    return 0;
}

/* A zygote that died: what was in flight on it fails; its children died
 * with it (PDEATHSIG).  The next spawn starts a new one. */
static void zygote_lost(struct zygote *z)
{
    crl_warn(NULL, "function runtime %s: zygote %d is gone", runtimes[z->runtime], (int)z->pid);
    crl_watch_stop(z->st->host->loop, &z->w);
    close_fd(&z->sock);
    if (z->pid > 0)
        waitpid(z->pid, NULL, WNOHANG);
    z->pid = 0;
    struct crl_err err = CRL_ERR_INIT;
    crl_err_set(&err, CRL_E_INTERNAL, "the %s zygote died", runtimes[z->runtime]);
    while (z->pending) {
        struct fn_call *c = z->pending;
        z->pending = c->next;
        if (c->rs) {
            restore_end(c->rs, 0, &err);
            free(c);
            continue;
        }
        proc_gone(c->sb->priv, c->p);
        close_fd(&c->p->in_fd);
        close_fd(&c->p->out_fd);
        close_fd(&c->p->err_fd);
        struct crl_proc *p = c->p;
        free(c);
        p->on_start(p, &err);
    }
    while (z->running) {
        struct fn_call *c = z->running;
        z->running = c->next;
        if (c->rs) {
            restore_end(c->rs, 0, &err);
            free(c);
            continue;
        }
        struct crl_proc *p = c->p;
        struct fn_sandbox *f = c->sb->priv;
        free(c);
        if (settle(p, true) < 0)
            continue; /* it never started: handed back already */
        proc_gone(f, p);
        p->exited = true;
        p->status = SIGKILL; /* as if killed */
        close_fd(&p->pidfd);
        p->on_exit(p);
    }
}

/* ---- sandboxes ---- */

static void created(struct crl_timer *t)
{
    crl_sandbox_created(t->data, NULL);
}

static void release(struct crl_sandbox *sb)
{
    struct fn_state *st = g_fn;
    struct fn_sandbox *f = sb->priv;
    if (!f)
        return;
    crl_timer_stop(st->host->loop, &f->timer);
    /* kept for the slot's next sandbox, as a container's are: no churn */
    if (f->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_release(f->cg, false, &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    close_fd(&f->scratch_fd);
    if (crl_rm_rf_at(st->scratch_root_fd, sb->id) < 0 && errno != ENOENT)
        crl_log_syscall(sb->id, errno, "removing its scratch dir");
    free(f);
    sb->priv = NULL;
}

static int fn_create(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_state *st = g_fn;
    struct crl_host *h = sb->host;
    unsigned rt = 0;
    while (rt < N_RUNTIMES && strcmp(runtimes[rt], sb->spec.runtime) != 0)
        rt++;
    if (rt == N_RUNTIMES)
        return crl_err_set(err, CRL_E_INVALID, "runtime '%s' is unknown", sb->spec.runtime);
    if (st->zy[rt].sock < 0 && zygote_start(st, rt, err) < 0)
        return -1;
    struct fn_sandbox *f = calloc(1, sizeof(*f));
    if (!f)
        return crl_err_sys(err, ENOMEM, "sandbox");
    f->scratch_fd = -1;
    f->runtime = rt;
    sb->priv = f;
    /* An id range of its own, as a container slot has: unprivileged on the host. */
    f->uid = h->cfg.uid_base + sb->slot * 65536u;
    f->gid = f->uid;
    char name[32];
    snprintf(name, sizeof(name), "s%u", sb->slot);
    struct crl_cgroup_limits lim = {.memory_bytes = (uint64_t)sb->spec.memory_mb << 20,
                                    .pids = sb->spec.pids,
                                    .cpus = sb->spec.cpus};
    if (crl_cgroup_create(h->cgroups, name, &lim, &f->cg, err) < 0)
        goto fail;
    snprintf(f->scratch, sizeof(f->scratch), "%s/%s", st->scratch_root, sb->id);
    if (mkdirat(st->scratch_root_fd, sb->id, 0700) < 0 ||
        fchownat(st->scratch_root_fd, sb->id, f->uid, f->gid, AT_SYMLINK_NOFOLLOW) < 0) {
        crl_err_sys(err, errno, "scratch dir %s", f->scratch);
        goto fail;
    }
    f->scratch_fd = crl_openat(st->scratch_root_fd, sb->id, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0);
    if (f->scratch_fd < 0) {
        crl_err_sys(err, errno, "scratch dir %s", f->scratch);
        goto fail;
    }
    crl_timer_start(h->loop, &f->timer, 0, created, sb);
    return 0;
fail:
    release(sb);
    return -1;
}

/* Kill what is left and wait, on a timer, for the cgroup to empty and its
 * leaves to go (the zygote reaps the dead), then release.  Stuck: the
 * slot is quarantined until a restart, as for a container. */
static void drain(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    struct fn_sandbox *f = sb->priv;
    int n = f->cg ? crl_cgroup_count(f->cg, NULL) : 0;
    bool busy = n == 0 && f->cg && crl_cgroup_tidy(f->cg, false) < 0 && errno == EBUSY;
    if ((n > 0 || busy || f->running > 0) && f->drain_tries++ < 5000) {
        if (n > 0 && f->drain_tries % 500 == 1)
            crl_cgroup_kill_all(f->cg, NULL);
        crl_timer_start(sb->host->loop, &f->timer, 1000000, drain, sb);
        return;
    }
    if (n > 0 || f->running > 0) {
        crl_error(sb->id,
                  "%d process(es) still in the cgroup after 5s: slot quarantined until restart", n);
        sb->slot_quarantined = true;
    }
    release(sb);
    crl_sandbox_destroyed(sb);
}

static void fn_destroy(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    if (!f) {
        crl_sandbox_destroyed(sb);
        return;
    }
    f->releasing = true;
    crl_timer_stop(sb->host->loop, &f->timer);
    if (f->paused && f->cg) { /* a frozen call (v1) would not die until thawed */
        crl_cgroup_freeze(f->cg, false, NULL);
        f->paused = false;
    }
    f->drain_tries = 0;
    if (f->cg)
        crl_cgroup_kill_all(f->cg, NULL);
    f->timer.data = sb;
    drain(&f->timer);
}

static int fn_stats(struct crl_sandbox *sb, struct crl_usage *u)
{
    struct fn_sandbox *f = sb->priv;
    memset(u, 0, sizeof(*u));
    if (!f || !f->cg)
        return -1;
    struct crl_cgroup_stats cs;
    if (crl_cgroup_stats(f->cg, &cs) < 0)
        return -1;
    u->cpu_s = (double)cs.cpu_ns / 1e9;
    u->memory_bytes = cs.memory_bytes;
    u->memory_peak_bytes = cs.memory_peak_bytes;
    u->pids = cs.pids;
    u->oom_kills = cs.oom_kills;
    /* The scratch dir is on the host's disk, without a quota of its own:
     * disk_mb caps each file (RLIMIT_FSIZE); its use is not measured. */
    u->disk_limit_bytes = (uint64_t)sb->spec.disk_mb << 20;
    return 0;
}

static json_t *fn_info(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    if (!f)
        return NULL;
    json_t *o = json_pack("{s:s, s:i, s:s, s:i, s:s}", "runtime", runtimes[f->runtime], "uid",
                          (json_int_t)f->uid, "scratch", f->scratch, "zygote_pid",
                          (json_int_t)g_fn->zy[f->runtime].pid, "cgroup",
                          f->cg ? crl_cgroup_name(f->cg) : "");
    if (o && f->last_pause.how) /* what the last pause gave back, and how */
        json_object_set_new(o, "last_pause",
                            json_pack("{s:s, s:I, s:I}", "memory_release", f->last_pause.how,
                                      "memory_before_bytes", (json_int_t)f->last_pause.before_bytes,
                                      "memory_after_bytes", (json_int_t)f->last_pause.after_bytes));
    return o;
}

/* ---- processes ---- */

static size_t pack(char *dst, size_t off, size_t cap, const char *s)
{
    size_t n = strlen(s) + 1;
    if (off == (size_t)-1 || off + n > cap)
        return (size_t)-1;
    memcpy(dst + off, s, n);
    return off + n;
}

/* The call's environment: the exec's, with HOME and TMPDIR its scratch dir. */
static size_t pack_env(char *dst, size_t off, size_t cap, char **envp, const char *scratch,
                       uint32_t *n)
{
    char home[300], tmp[300];
    snprintf(home, sizeof(home), "HOME=%s", scratch);
    snprintf(tmp, sizeof(tmp), "TMPDIR=%s", scratch);
    off = pack(dst, off, cap, home);
    off = pack(dst, off, cap, tmp);
    *n = 2;
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, "HOME=", 5) != 0 && strncmp(*e, "TMPDIR=", 7) != 0) {
            off = pack(dst, off, cap, *e);
            (*n)++;
        }
    return off;
}

/* A FORK request's jail: the sandbox's ids, limits and scratch dir. */
static struct crl_zyg_fork *fork_request(struct crl_sandbox *sb, struct fn_sandbox *f)
{
    struct crl_zyg_fork *rq = (struct crl_zyg_fork *)g_fn->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_ZYG_FORK;
    rq->uid = f->uid;
    rq->gid = f->gid;
    rq->nproc = sb->spec.pids;
    rq->nofile = 1024;
    rq->fsize_bytes = (uint64_t)sb->spec.disk_mb << 20;
    snprintf(rq->scratch, sizeof(rq->scratch), "%s", f->scratch);
    return rq;
}

/* The cgroup a child of the zygote joins, into fds (*ncg of them): on v2
 * the directory of its leaf, which it is cloned into; on v1 the
 * cgroup.procs files it writes itself into. */
static int fork_cgroup(struct crl_sandbox *sb, struct fn_sandbox *f, const char *leaf,
                       struct crl_zyg_fork *rq, int *fds, int *ncg, struct crl_err *err)
{
    *ncg = 0;
    if (crl_cgroup_mgr_version(sb->host->cgroups) == CRL_CGROUP_V2) {
        rq->into_cgroup = 1;
        if ((fds[0] = crl_cgroup_leaf_dir(f->cg, leaf, err)) < 0)
            return -1;
        *ncg = 1;
    } else if (crl_cgroup_attach_fds(f->cg, leaf, fds, ncg, err) < 0) {
        return -1;
    }
    rq->n_cgroup_fds = (uint32_t)*ncg;
    return 0;
}

static int fn_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct fn_state *st = g_fn;
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (p->session)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "sessions need a process that lives between commands: the function "
                           "backend has none (each exec is a fresh fork)");
    struct zygote *z = &st->zy[f->runtime];
    if (z->sock < 0 && zygote_start(st, f->runtime, err) < 0)
        return -1;
    struct crl_zyg_fork *rq = fork_request(sb, f);
    size_t cap = CRL_ZYG_MAX_MSG - sizeof(*rq);
    char *strings = st->msg + sizeof(*rq);
    size_t off = 0;
    if (p->source) {
        rq->kind = CRL_ZYG_SOURCE;
        rq->argc = 1;
        off = pack(strings, off, cap, p->source);
    } else {
        rq->kind = CRL_ZYG_ARGV;
        for (char **a = p->argv; a && *a; a++, rq->argc++)
            off = pack(strings, off, cap, *a);
    }
    off = pack_env(strings, off, cap, p->envp, f->scratch, &rq->envc);
    if (off == (size_t)-1)
        return crl_err_set(err, CRL_E_TOO_LARGE, "the command and its environment are too large");

    int fds[CRL_ZYG_MAX_FDS], theirs[4] = {-1, -1, -1, -1}, ncg = 0;
    int pp[4][2];
    for (int i = 0; i < 4; i++) /* stdin, stdout, stderr, status */
        if (pipe2(pp[i], O_CLOEXEC) < 0) {
            int e = errno;
            while (i-- > 0) {
                close(pp[i][0]);
                close(pp[i][1]);
            }
            return crl_err_sys(err, e, "pipe");
        }
    p->in_fd = pp[0][1], theirs[0] = pp[0][0];
    p->out_fd = pp[1][0], theirs[1] = pp[1][1];
    p->err_fd = pp[2][0], theirs[2] = pp[2][1];
    int status = pp[3][0];
    theirs[3] = pp[3][1];
    memcpy(fds, theirs, 3 * sizeof(int));
    fds[3] = f->scratch_fd;
    fds[4] = theirs[3];
    crl_set_nonblock(status, 1);
    struct fn_proc *fp = calloc(1, sizeof(*fp));
    int r = fp ? 0 : crl_err_sys(err, ENOMEM, "spawn");
    if (fp) {
        snprintf(fp->leaf, sizeof(fp->leaf), "e%llu", (unsigned long long)p->seq);
        fp->status_fd = status;
        fp->sb = sb;
    } else {
        close(status);
    }
    if (r == 0)
        r = fork_cgroup(sb, f, fp->leaf, rq, fds + CRL_ZYG_FIXED_FDS, &ncg, err);
    struct fn_call *c = r == 0 ? calloc(1, sizeof(*c)) : NULL;
    if (r == 0 && !c)
        crl_err_sys(err, ENOMEM, "spawn");
    if (c) {
        c->id = rq->id = ++st->next_id;
        c->sb = sb;
        c->p = p;
        if (crl_send_fds(z->sock, rq, sizeof(*rq) + off, fds, CRL_ZYG_FIXED_FDS + ncg) < 0) {
            crl_err_sys(err, errno, "talking to the %s zygote", runtimes[f->runtime]);
            free(c);
            c = NULL;
        }
    }
    for (int i = 0; i < 4; i++)
        close(theirs[i]);
    for (int i = 0; i < ncg; i++)
        close(fds[CRL_ZYG_FIXED_FDS + i]);
    if (!c) {
        close_fd(&p->in_fd);
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
        if (fp) {
            crl_cgroup_remove_leaf(f->cg, fp->leaf);
            close(fp->status_fd);
        }
        free(fp);
        return -1;
    }
    p->priv = fp;
    c->next = z->pending;
    z->pending = c;
    f->running++;
    return 0;
}

static int fn_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct fn_sandbox *f = sb->priv;
    struct fn_proc *fp = p->priv;
    if (p->exited || !fp)
        return 0;
    /* Its tree is its cgroup leaf, whatever sessions it made. */
    if (scope != CRL_KILL_PROC && f && f->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_kill_leaf(f->cg, fp->leaf, scope == CRL_KILL_DESCENDANTS ? p->pid : 0,
                                 &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    if (scope != CRL_KILL_DESCENDANTS && p->pidfd >= 0 &&
        syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(sb->id, errno, "pidfd_send_signal(%d)", (int)p->pid);
    return 0;
}

/* ---- files: the scratch dir, opened by corrald beneath it ---- */

struct fn_open {
    struct crl_timer t;
    struct crl_open_req *o;
    int fd;
    bool is_dir;
    uint64_t size;
    struct crl_err err;
};

static void open_done(struct crl_timer *t)
{
    struct fn_open *fo = t->data;
    fo->o->done(fo->o, fo->fd, fo->is_dir, fo->size, fo->err.code ? &fo->err : NULL);
    free(fo);
}

static int fn_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    struct fn_open *fo = calloc(1, sizeof(*fo));
    if (!fo)
        return crl_err_sys(err, ENOMEM, "open");
    fo->o = o;
    fo->fd = -1;
    long fd = crl_path_open_in_root(f->scratch_fd, o->path, o->flags | O_NOFOLLOW, o->mode);
    struct stat st;
    if (fd < 0) {
        int e = (int)-fd;
        crl_err_set(&fo->err, e == ENOENT ? CRL_E_NOT_FOUND : CRL_E_INVALID, "%s: %s", o->path,
                    strerror(e));
    } else if (fstat((int)fd, &st) < 0 ||
               ((o->flags & O_CREAT) && fchown((int)fd, f->uid, f->gid) < 0)) {
        crl_err_sys(&fo->err, errno, "%s", o->path);
        close((int)fd);
    } else {
        fo->fd = (int)fd;
        fo->is_dir = S_ISDIR(st.st_mode);
        fo->size = (uint64_t)st.st_size;
    }
    crl_timer_start(sb->host->loop, &fo->t, 0, open_done, fo);
    return 0;
}

/* A single file written into the scratch dir, whole or not at all: a
 * temporary file beside it (owned by the sandbox's uid), renamed over it
 * once corrald commits; corrald writes the bytes straight into it. */
struct fn_upload {
    struct crl_sandbox *sb;
    struct crl_stream_req *t;
    struct crl_watch w;
    struct crl_timer timer;
    int dir_fd, file_fd, ours;
    bool committed;
    char tmp[48];
    char base[256];
};

static void upload_free(struct fn_upload *u)
{
    struct crl_loop *loop = u->sb->host->loop;
    if (u->w.active)
        crl_watch_stop(loop, &u->w);
    crl_timer_stop(loop, &u->timer);
    close_fd(&u->ours);
    close_fd(&u->file_fd);
    close_fd(&u->dir_fd);
    free(u);
}

static void upload_msg(struct crl_watch *w, uint32_t ev)
{
    struct fn_upload *u = w->data;
    char c;
    ssize_t n;
    while ((n = read(u->ours, &c, 1)) == 1)
        u->committed |= c == CRL_STREAM_COMMIT;
    if (n < 0 && errno == EAGAIN && !u->committed)
        return;
    /* committed, or abandoned (shut or closed without the commit) */
    crl_watch_stop(u->sb->host->loop, &u->w);
    int code = CRL_STREAM_FAILED;
    struct stat st;
    char msg[64] = "the upload was abandoned\n";
    if (u->committed && fsync(u->file_fd) == 0 && fstat(u->file_fd, &st) == 0 &&
        renameat(u->dir_fd, u->tmp, u->dir_fd, u->base) == 0) {
        code = CRL_STREAM_OK;
        snprintf(msg, sizeof(msg), "bytes=%llu\n", (unsigned long long)st.st_size);
    } else {
        if (u->committed)
            snprintf(msg, sizeof(msg), "%s\n", strerror(errno));
        code = u->committed && errno == ENOSPC ? CRL_STREAM_NOSPACE : CRL_STREAM_FAILED;
        unlinkat(u->dir_fd, u->tmp, 0);
    }
    if (write(u->ours, msg, strlen(msg)) < 0)
        crl_debug(u->sb->id, "upload message: %s", strerror(errno));
    struct crl_stream_req *t = u->t;
    upload_free(u);
    t->done(t, code);
    (void)ev;
}

static void upload_started(struct crl_timer *tm)
{
    struct fn_upload *u = tm->data;
    u->t->started(u->t, NULL);
}

static int fn_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (t->kind != CRL_STREAM_FILE_IN)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "the function backend moves single files only, not directories (tar)");
    struct fn_upload *u = calloc(1, sizeof(*u));
    if (!u)
        return crl_err_sys(err, ENOMEM, "upload");
    u->sb = sb;
    u->t = t;
    u->dir_fd = u->file_fd = u->ours = -1;
    /* the parent, resolved beneath the scratch dir; the name in it */
    char parent[4096];
    const char *slash = strrchr(t->path, '/');
    snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - t->path) : 0, t->path);
    snprintf(u->base, sizeof(u->base), "%s", slash ? slash + 1 : t->path);
    if (!u->base[0] || strcmp(u->base, ".") == 0 || strcmp(u->base, "..") == 0) {
        upload_free(u);
        return crl_err_set(err, CRL_E_INVALID, "%s: not a file name", t->path);
    }
    long dfd =
        crl_path_open_in_root(f->scratch_fd, parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        upload_free(u);
        return crl_err_set(err, dfd == -ENOENT ? CRL_E_NOT_FOUND : CRL_E_INVALID, "%s: %s",
                           parent[0] ? parent : "/", strerror((int)-dfd));
    }
    u->dir_fd = (int)dfd;
    snprintf(u->tmp, sizeof(u->tmp), ".corral-upload-%llx", (unsigned long long)crl_now_ns());
    u->file_fd =
        openat(u->dir_fd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int sp[2] = {-1, -1};
    if (u->file_fd < 0 || fchown(u->file_fd, f->uid, f->gid) < 0 ||
        fchmod(u->file_fd, t->mode & 07777) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
        int e = errno;
        if (u->file_fd >= 0)
            unlinkat(u->dir_fd, u->tmp, 0);
        upload_free(u);
        return crl_err_sys(err, e, "%s", t->path);
    }
    u->ours = sp[1];
    crl_set_nonblock(u->ours, 1);
    t->msg_fd = sp[0];
    t->data_fd = fcntl(u->file_fd, F_DUPFD_CLOEXEC, 0);
    if (t->data_fd < 0 ||
        crl_watch_start(sb->host->loop, &u->w, u->ours, EPOLLIN, upload_msg, u) < 0) {
        int e = errno;
        close_fd(&t->data_fd);
        close_fd(&t->msg_fd);
        unlinkat(u->dir_fd, u->tmp, 0);
        upload_free(u);
        return crl_err_sys(err, e, "%s", t->path);
    }
    crl_timer_start(sb->host->loop, &u->timer, 0, upload_started, u);
    return 0;
}

/* ---- checkpoints ---- */

/* The scratch dir is the whole writable tree: what a sandbox owns there
 * (its uid, its gid) is stored as 0. */
static int fn_snapshot(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing || f->scratch_fd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    int fd = crl_openat(f->scratch_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "opening the scratch dir %s", f->scratch);
    v->dir_fd = fd;
    v->format = CRL_LAYER_PLAIN;
    v->uid_shift = f->uid;
    v->gid_shift = f->gid;
    return 0;
}

/* A restore's child ended (wait status), or never ran (err): tell its
 * owner, on the loop, and let go of everything it had. */
static void restore_end(struct fn_restore *rs, int status, const struct crl_err *err)
{
    struct crl_sandbox *sb = rs->sb;
    struct fn_sandbox *f = sb->priv;
    struct crl_err e = CRL_ERR_INIT;
    if (!err) {
        char line[128] = "", msg[600] = "";
        ssize_t n = read(rs->status_fd, line, sizeof(line) - 1);
        line[n > 0 ? n : 0] = 0;
        n = read(rs->msg_fd, msg, sizeof(msg) - 1);
        msg[n > 0 ? n : 0] = 0;
        msg[strcspn(msg, "\n")] = 0;
        int jail_errno = 0;
        char step[32] = "";
        bool live = sb->state == CRL_SB_READY || sb->state == CRL_SB_PAUSED;
        if (line[0] && sscanf(line, "%d %31s", &jail_errno, step) == 2)
            crl_err_set(&e, CRL_E_INTERNAL, "restoring: entering the function jail: %s: %s", step,
                        strerror(jail_errno));
        else
            crl_tar_restore_error(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                                  msg, live, &e);
        err = e.code == CRL_OK ? NULL : &e;
    }
    if (f) {
        f->running--;
        if (f->cg) { /* it forks nothing, but its leaf goes all the same */
            crl_cgroup_kill_leaf(f->cg, rs->leaf, 0, NULL);
            crl_cgroup_remove_leaf(f->cg, rs->leaf);
        }
    }
    close_fd(&rs->status_fd);
    close_fd(&rs->msg_fd);
    struct crl_restore_req *rq = rs->rq;
    free(rs);
    rq->done(rq, err);
    crl_sandbox_unref(sb);
}

/* The change set is applied by a child of the sandbox's zygote, in the
 * jail every call has (the sandbox's uid, Landlock: its scratch dir and
 * nothing else writable, seccomp, rlimits, its cgroup leaf), that runs no
 * user code: it extracts as the sandbox's uid (the archive's owners are
 * ignored; everything is the sandbox's, as it could make it itself), with
 * crl_tar_apply's checks inside Landlock's walls.  (In a paused sandbox
 * the child is frozen until a resume.) */
static int fn_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err)
{
    struct fn_state *st = g_fn;
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    struct zygote *z = &st->zy[f->runtime];
    if (z->sock < 0 && zygote_start(st, f->runtime, err) < 0)
        return -1;
    struct fn_restore *rs = calloc(1, sizeof(*rs));
    struct fn_call *c = calloc(1, sizeof(*c));
    int fds[CRL_ZYG_MAX_FDS], ncg = 0, msg[2], status[2];
    int ret = -1;
    for (int i = 0; i < CRL_ZYG_MAX_FDS; i++)
        fds[i] = -1;
    if (!rs || !c) {
        crl_err_sys(err, ENOMEM, "restore");
        goto out;
    }
    rs->rq = rq;
    rs->sb = sb;
    rs->status_fd = rs->msg_fd = -1;
    snprintf(rs->leaf, sizeof(rs->leaf), "r%llu", (unsigned long long)++sb->next_seq);
    struct crl_zyg_fork *zrq = fork_request(sb, f);
    zrq->kind = CRL_ZYG_RESTORE;
    zrq->argc = 1;
    size_t off = pack(st->msg + sizeof(*zrq), 0, CRL_ZYG_MAX_MSG - sizeof(*zrq), "restore");
    /* stdin the checkpoint, stdout nowhere, stderr its last words */
    fds[3] = f->scratch_fd;
    if (pipe2(msg, O_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "pipe");
        goto out;
    }
    rs->msg_fd = msg[0];
    fds[2] = msg[1];
    if (pipe2(status, O_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "pipe");
        goto out;
    }
    rs->status_fd = status[0];
    fds[4] = status[1];
    crl_set_nonblock(rs->msg_fd, 1);
    crl_set_nonblock(rs->status_fd, 1);
    /* a reading of its own: from offset 0, and read-only */
    if ((fds[0] = crl_reopen(rq->tar_fd, O_RDONLY)) < 0) {
        crl_err_sys(err, errno, "reopening the checkpoint (fd %d)", rq->tar_fd);
        goto out;
    }
    if ((fds[1] = crl_openat(AT_FDCWD, "/dev/null", O_WRONLY, 0)) < 0) {
        crl_err_sys(err, errno, "/dev/null");
        goto out;
    }
    if (fork_cgroup(sb, f, rs->leaf, zrq, fds + CRL_ZYG_FIXED_FDS, &ncg, err) < 0)
        goto out;
    c->id = zrq->id = ++st->next_id;
    c->sb = sb;
    c->rs = rs;
    if (crl_send_fds(z->sock, zrq, sizeof(*zrq) + off, fds, CRL_ZYG_FIXED_FDS + ncg) < 0) {
        crl_err_sys(err, errno, "talking to the %s zygote", runtimes[f->runtime]);
        goto out;
    }
    c->next = z->pending;
    z->pending = steal_pointer(&c);
    f->running++;
    crl_sandbox_ref(sb);
    rs = NULL;
    ret = 0;
out:
    for (int i = 0; i < CRL_ZYG_MAX_FDS; i++)
        if (i != 3 && fds[i] >= 0) /* 3: the scratch dir, which stays ours */
            close(fds[i]);
    if (rs) {
        close_fd(&rs->msg_fd);
        close_fd(&rs->status_fd);
        if (f->cg && rs->leaf[0])
            crl_cgroup_remove_leaf(f->cg, rs->leaf);
    }
    free(rs);
    free(c);
    return ret;
}

/* ---- pause ---- */

/* Between calls nothing of a function sandbox runs (every call ends with
 * all it started), so a pause stops the calls under way, if any, and gives
 * back the page cache its calls charged to it (files of its scratch dir). */
static int fn_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing || !f->cg)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (crl_cgroup_pause(f->cg, sb->id, &f->last_pause, err) < 0)
        return -1;
    f->paused = true; /* a call under way is frozen with it */
    return 0;
}

static int fn_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing || !f->cg)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (crl_cgroup_freeze(f->cg, false, err) < 0)
        return -1;
    f->paused = false;
    return 0;
}

/* ---- life ---- */

static int fn_init(struct crl_host *h, void **state, struct crl_err *err)
{
    struct fn_state *st = calloc(1, sizeof(*st));
    if (!st || !(st->msg = malloc(CRL_ZYG_MAX_MSG))) {
        free(st);
        return crl_err_sys(err, ENOMEM, "function backend");
    }
    st->host = h;
    st->scratch_root_fd = -1;
    for (unsigned i = 0; i < N_RUNTIMES; i++)
        st->zy[i].sock = -1;
    if (crl_sibling_path("corral-zygote", st->zygote_path, sizeof(st->zygote_path), err) < 0)
        goto fail;
    if (access(st->zygote_path, X_OK) < 0) {
        crl_err_sys(err, errno, "zygote %s", st->zygote_path);
        goto fail;
    }
    snprintf(st->scratch_root, sizeof(st->scratch_root), "%s/functions", h->run_dir);
    if (mkdir(st->scratch_root, 0711) < 0 && errno != EEXIST) {
        crl_err_sys(err, errno, "mkdir %s", st->scratch_root);
        goto fail;
    }
    st->scratch_root_fd = crl_openat(AT_FDCWD, st->scratch_root, O_RDONLY | O_DIRECTORY, 0);
    if (st->scratch_root_fd < 0) {
        crl_err_sys(err, errno, "%s", st->scratch_root);
        goto fail;
    }
    g_fn = st;
    *state = st;
    /* Initialise the runtimes now, not in the first create; one that cannot
     * start is tried again when a sandbox needs it. */
    for (unsigned i = 0; i < N_RUNTIMES; i++) {
        struct crl_err zerr = CRL_ERR_INIT;
        if (zygote_start(st, i, &zerr) < 0)
            crl_warn(NULL, "function runtime %s: %s", runtimes[i], zerr.msg);
    }
    return 0;
fail:
    close_fd(&st->scratch_root_fd);
    free(st->msg);
    free(st);
    return -1;
}

/* Scratch dirs of sandboxes a crashed corrald left (their cgroups and
 * processes go with the container backend's reconcile of the same slots). */
static int fn_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    struct fn_state *st = state;
    (void)h;
    (void)err;
    int fd = fcntl(st->scratch_root_fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        close_fd(&fd);
        return 0;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            crl_rm_rf_at(dirfd(d), de->d_name);
    closedir(d);
    return 0;
}

static void fn_shutdown(struct crl_host *h, void *state)
{
    struct fn_state *st = state;
    (void)h;
    for (unsigned i = 0; i < N_RUNTIMES; i++) {
        struct zygote *z = &st->zy[i];
        if (z->sock < 0)
            continue;
        crl_watch_stop(st->host->loop, &z->w);
        close_fd(&z->sock); /* it exits on EOF */
        if (z->pid > 0) {
            int status;
            if (waitpid(z->pid, &status, 0) < 0)
                crl_log_syscall(NULL, errno, "waiting for zygote %d", (int)z->pid);
        }
        /* Sandboxes are gone by now: only a restore's owner is still told. */
        struct crl_err gone = CRL_ERR_INIT;
        crl_err_set(&gone, CRL_E_UNAVAILABLE, "restoring: corrald is shutting down");
        while (z->pending) {
            struct fn_call *c = z->pending;
            z->pending = c->next;
            if (c->rs)
                restore_end(c->rs, 0, &gone);
            free(c);
        }
        while (z->running) {
            struct fn_call *c = z->running;
            z->running = c->next;
            if (c->rs)
                restore_end(c->rs, 0, &gone);
            free(c);
        }
    }
    close_fd(&st->scratch_root_fd);
    free(st->msg);
    free(st);
    g_fn = NULL;
}

const struct crl_backend_ops crl_function_backend = {
    .name = "function",
    .init = fn_init,
    .reconcile = fn_reconcile,
    .shutdown = fn_shutdown,
    .create = fn_create,
    .destroy = fn_destroy,
    .stats = fn_stats,
    .info = fn_info,
    .spawn = fn_spawn,
    .kill = fn_kill,
    .open = fn_open,
    .stream = fn_stream,
    .snapshot = fn_snapshot,
    .restore = fn_restore,
    .pause = fn_pause,
    .resume = fn_resume,
};
