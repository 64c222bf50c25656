/* What runs in a container sandbox through a spawner: processes, files,
 * checkpoints (container_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../../core/host.h"
#include "../../os/proc.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "container_int.h"

/* ---- processes ---- */

static int pipe_pair(int *ours, int *theirs, bool ours_writes, struct crl_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "pipe");
    *ours = ours_writes ? p[1] : p[0];
    *theirs = ours_writes ? p[0] : p[1];
    return 0;
}

/* Pack strings one after another, NUL-terminated, into the request. */
static size_t pack(char *dst, size_t off, size_t cap, const char *s)
{
    size_t n = strlen(s) + 1;
    if (off + n > cap)
        return (size_t)-1;
    memcpy(dst + off, s, n);
    return off + n;
}

static void spawn_failed_cleanup(struct crl_proc *p, struct ctr_proc *cp, struct ctr_sandbox *c)
{
    close_fd(&p->in_fd);
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    if (c && c->cg)
        crl_cgroup_remove_leaf(c->cg, cp->leaf);
}

int crl_ctr_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct ctr_state *st = crl_ctr_state;
    struct ctr_sandbox *c = sb->priv;
    /* Its PID 1 forks it, through the spawner that created it. */
    struct spawner *s = crl_ctr_home_spawner(sb, err);
    if (!s)
        return -1;
    struct ctr_proc *cp = calloc(1, sizeof(*cp));
    if (!cp)
        return crl_err_sys(err, ENOMEM, "process");
    p->priv = cp;
    cp->kept = -1;
    snprintf(cp->leaf, sizeof(cp->leaf), "e%llu", (unsigned long long)p->seq);
    /* Pipes for its stdio, or none: a terminal's master comes back.  A
     * session's shell is to outlive us: its PID 1 keeps our ends too. */
    int fds[7] = {-1, -1, -1, -1, -1, -1, -1};
    int nstdio = p->tty ? 0 : 3, nkeep = p->session && !p->tty ? 3 : 0, ncg = 0;
    if (!p->tty && (pipe_pair(&p->in_fd, &fds[0], true, err) < 0 ||
                    pipe_pair(&p->out_fd, &fds[1], false, err) < 0 ||
                    pipe_pair(&p->err_fd, &fds[2], false, err) < 0))
        goto fail;
    int ours[3] = {p->in_fd, p->out_fd, p->err_fd};
    for (int i = 0; i < nkeep; i++)
        if ((fds[nstdio + i] = fcntl(ours[i], F_DUPFD_CLOEXEC, 0)) < 0) {
            crl_err_sys(err, errno, "dup");
            goto fail;
        }
    /* A fork of PID 1 is in the sandbox's cgroups already: only the leaf. */
    if ((fds[nstdio + nkeep] = crl_cgroup_leaf_procs(c->cg, cp->leaf, err)) < 0)
        goto fail;
    ncg = 1;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_EXEC;
    rq->u.exec.pid1 = c->pid;
    rq->u.exec.uid = p->uid;
    rq->u.exec.gid = p->gid;
    rq->u.exec.n_cgroup_fds = (uint32_t)ncg;
    rq->u.exec.flags = (p->setsid ? CRL_EXEC_F_SETSID : 0) | (p->tty ? CRL_EXEC_F_TTY : 0) |
                       (nkeep ? CRL_EXEC_F_KEEP : 0);
    rq->u.exec.rows = p->rows;
    rq->u.exec.cols = p->cols;
    size_t cap = CRL_SPAWN_MAX_MSG - sizeof(*rq), off = 0;
    for (char **a = p->argv; *a && off != (size_t)-1; a++, rq->u.exec.argc++)
        off = pack(rq->strings, off, cap, *a);
    for (char **e = p->envp; e && *e && off != (size_t)-1; e++, rq->u.exec.envc++)
        off = pack(rq->strings, off, cap, *e);
    if (off != (size_t)-1)
        off = pack(rq->strings, off, cap, p->cwd);
    if (off == (size_t)-1) {
        crl_err_set(err, CRL_E_TOO_LARGE, "command and environment exceed %u bytes",
                    CRL_SPAWN_MAX_MSG);
        goto fail;
    }
    rq->strings_len = (uint32_t)off;
    int nfds = nstdio + nkeep + ncg;
    if (crl_ctr_send_req(s, rq, sizeof(*rq) + off, fds, nfds, P_SPAWN, sb, p, NULL, err) < 0)
        goto fail;
    cp->spawner = s->idx;
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return 0;
fail:
    for (int i = 0; i < 7; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    spawn_failed_cleanup(p, cp, c);
    free(cp);
    p->priv = NULL;
    return -1;
}

void crl_ctr_spawn_done(struct spawner *s, struct crl_sandbox *sb, struct crl_proc *p,
                        const struct crl_spawn_reply *r, int *fds, int nfds)
{
    struct ctr_proc *cp = p->priv;
    int want = !!(r->kind & CRL_EXEC_R_PIDFD) + !!(r->kind & CRL_EXEC_R_TTY);
    if (r->err || nfds != want || p->tty != !!(r->kind & CRL_EXEC_R_TTY)) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        struct crl_err err = CRL_ERR_INIT;
        const char *what = r->step == CRL_STEP_CWD ? p->cwd : p->argv[0];
        if (r->err)
            crl_ctr_spawn_error(r, what, &err);
        else
            crl_err_set(&err, CRL_E_INTERNAL, "spawn: %d descriptors", nfds);
        spawn_failed_cleanup(p, cp, sb->priv);
        free(cp);
        p->priv = NULL;
        p->on_start(p, &err);
        return;
    }
    p->pid = r->pid;
    p->ns_pid = r->ns_pid;
    /* no pidfd when it has ended already: its exit follows */
    p->pidfd = r->kind & CRL_EXEC_R_PIDFD ? fds[0] : -1;
    struct crl_proc_identity id;
    if (p->session && !p->tty && r->kept >= CRL_INIT_KEEP_BASE && p->pidfd >= 0 &&
        crl_proc_identity(p->pid, &id) == 0) {
        cp->kept = r->kept;
        cp->start = id.start;
        p->outlives = true;
    }
    if (p->tty) {
        p->in_fd = fds[want - 1];
        if ((p->out_fd = fcntl(p->in_fd, F_DUPFD_CLOEXEC, 0)) < 0)
            crl_log_syscall(sb->id, errno, "dup of a terminal");
    }
    p->started = true;
    crl_ctr_add_running(s, r->pid, P_SPAWN, sb, p, NULL);
    p->on_start(p, NULL);
}

void crl_ctr_proc_exited(struct crl_sandbox *sb, struct crl_proc *p,
                         const struct crl_spawn_reply *r)
{
    struct ctr_proc *cp = p->priv;
    struct ctr_sandbox *c = sb->priv;
    if (cp->on_pidfd) {
        crl_watch_stop(sb->host->loop, &cp->w);
        crl_timer_stop(sb->host->loop, &cp->t);
    }
    p->exited = true;
    p->status = r->status;
    p->cpu_s = (double)(r->utime_us + r->stime_us) / 1e6;
    p->maxrss_bytes = (uint64_t)r->maxrss_kb * 1024;
    close_fd(&p->pidfd);
    /* Daemonised descendants keep the leaf busy; it goes with the sandbox. */
    if (c && c->cg)
        crl_cgroup_remove_leaf(c->cg, cp->leaf);
    free(cp);
    p->priv = NULL;
    p->on_exit(p);
}

/* ---- a session's shell, across a restart of corrald ---- */

json_t *crl_ctr_proc_record(struct crl_sandbox *sb, struct crl_proc *p)
{
    struct ctr_proc *cp = p->priv;
    if (!cp || cp->kept < 0 || p->exited)
        return NULL;
    return json_pack("{s:s, s:i, s:I}", "leaf", cp->leaf, "kept", cp->kept, "start",
                     (json_int_t)cp->start);
}

/* A shell no spawner knows ended: its status from the kernel once PID 1
 * has reaped it (and told a spawner that knew nothing of it), which it does
 * at once; a kernel before 6.15, or a PID 1 that never does, leaves it as
 * killed. */
static void adopted_reaped(struct crl_timer *t)
{
    struct crl_proc *p = t->data;
    struct ctr_proc *cp = p->priv;
    struct crl_spawn_reply r = {.op = CRL_SPAWN_EXITED, .pid = p->pid};
    if (!crl_pidfd_exit_status(p->pidfd, &r.status)) {
        if (++cp->status_tries < 100) {
            crl_timer_start(p->sb->host->loop, &cp->t, 1000000ull, adopted_reaped, p);
            return;
        }
        r.status = SIGKILL;
    }
    crl_ctr_proc_exited(p->sb, p, &r);
}

static void adopted_exited(struct crl_watch *w, uint32_t ev)
{
    struct crl_proc *p = w->data;
    struct ctr_proc *cp = p->priv;
    crl_watch_stop(p->sb->host->loop, &cp->w);
    cp->t.data = p;
    adopted_reaped(&cp->t);
}

bool crl_ctr_proc_outlives_spawner(struct crl_sandbox *sb, struct crl_proc *p)
{
    struct ctr_proc *cp = p->priv;
    if (!cp || !p->outlives || p->pidfd < 0 ||
        crl_watch_start(sb->host->loop, &cp->w, p->pidfd, EPOLLIN, adopted_exited, p) < 0)
        return false;
    cp->on_pidfd = true;
    return true;
}

/* Our end of a pipe PID 1 keeps, at `fd` there, as the reading or the
 * writing end it must be. */
static int take_kept(struct ctr_sandbox *c, int fd, bool writes, int *out, struct crl_err *err)
{
    struct stat st;
    *out = (int)syscall(SYS_pidfd_getfd, c->pidfd, fd, 0);
    if (*out < 0)
        return crl_err_sys(err, errno, "taking its stdio from its PID 1 (fd %d)", fd);
    int fl = fcntl(*out, F_GETFL);
    if (fstat(*out, &st) < 0 || !S_ISFIFO(st.st_mode) || fl < 0 ||
        (fl & O_ACCMODE) != (writes ? O_WRONLY : O_RDONLY)) {
        close_fd(out);
        return crl_err_set(err, CRL_E_CONFLICT, "its PID 1's fd %d is not its stdio's pipe", fd);
    }
    return 0;
}

int crl_ctr_adopt_proc(struct crl_sandbox *sb, struct crl_proc *p, json_t *rec, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    json_int_t kept = json_integer_value(json_object_get(rec, "kept"));
    const char *leaf = json_string_value(json_object_get(rec, "leaf"));
    char want[24];
    snprintf(want, sizeof(want), "e%llu", (unsigned long long)p->seq);
    if (!c || c->pidfd < 0 || !leaf || strcmp(leaf, want) != 0 || kept < CRL_INIT_KEEP_BASE ||
        kept > CRL_INIT_KEEP_BASE + 3 * (CRL_INIT_MAX_KEPT - 1))
        return crl_err_set(err, CRL_E_INVALID, "its record is not one of a kept shell");
    /* The pidfd first, then who has the pid: one reused since fails it. */
    struct crl_proc_identity id;
    if ((p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0)) < 0 ||
        crl_proc_identity(p->pid, &id) < 0 ||
        (json_int_t)id.start != json_integer_value(json_object_get(rec, "start")) ||
        id.pidns != c->init_pidns || crl_proc_ns_pid(p->pid) != p->ns_pid) {
        close_fd(&p->pidfd);
        return crl_err_set(err, CRL_E_CONFLICT, "its shell (pid %d) ended while corrald was away",
                           (int)p->pid);
    }
    struct ctr_proc *cp = calloc(1, sizeof(*cp));
    if (!cp) {
        close_fd(&p->pidfd);
        return crl_err_sys(err, ENOMEM, "process");
    }
    snprintf(cp->leaf, sizeof(cp->leaf), "%s", leaf);
    cp->kept = (int)kept;
    cp->start = id.start;
    cp->spawner = c->spawner;
    cp->on_pidfd = true;
    if (take_kept(c, cp->kept, true, &p->in_fd, err) < 0 ||
        take_kept(c, cp->kept + 1, false, &p->out_fd, err) < 0 ||
        take_kept(c, cp->kept + 2, false, &p->err_fd, err) < 0 ||
        crl_watch_start(sb->host->loop, &cp->w, p->pidfd, EPOLLIN, adopted_exited, p) < 0) {
        if (!err->msg[0])
            crl_err_sys(err, errno, "watching its shell");
        close_fd(&p->in_fd);
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
        close_fd(&p->pidfd);
        free(cp);
        return -1;
    }
    p->priv = cp;
    p->outlives = true;
    return 0;
}

void crl_ctr_release_proc(struct crl_sandbox *sb, struct crl_proc *p)
{
    struct ctr_proc *cp = p->priv;
    if (!cp)
        return;
    if (cp->on_pidfd) {
        crl_watch_stop(sb->host->loop, &cp->w);
        crl_timer_stop(sb->host->loop, &cp->t);
    } else {
        crl_ctr_forget_running(&crl_ctr_state->sp[cp->spawner], p->pid);
    }
    close_fd(&p->pidfd);
    free(cp);
    p->priv = NULL;
}

int crl_ctr_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct ctr_sandbox *c = sb->priv;
    struct ctr_proc *cp = p->priv;
    /* Before its start is reported it may not be in its leaf yet, but it
     * runs nothing of its own until it is, and exec.c kills it again once
     * it is reported started (exec_started). */
    if (p->exited || !cp)
        return 0;
    if (scope != CRL_KILL_PROC && c && c->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_kill_leaf(c->cg, cp->leaf, scope == CRL_KILL_DESCENDANTS ? p->pid : 0,
                                 &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    if (scope != CRL_KILL_DESCENDANTS && p->pidfd >= 0 &&
        syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(sb->id, errno, "pidfd_send_signal(%d, SIGKILL)", p->pid);
    return 0;
}

int crl_ctr_signal(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
                   struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    struct ctr_proc *cp = p->priv;
    return crl_backend_signal_host(sb, p, c ? c->cg : NULL, cp ? cp->leaf : "", sig, scope, err);
}

/* ---- files ---- */

int crl_ctr_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err)
{
    struct ctr_state *st = crl_ctr_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = crl_ctr_spawner_for(sb, err);
    if (!s)
        return -1;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_OPEN;
    rq->u.open.flags = o->flags;
    rq->u.open.mode = o->mode;
    rq->u.open.uid = o->uid;
    rq->u.open.gid = o->gid;
    size_t off = pack(rq->strings, 0, CRL_SPAWN_MAX_MSG - sizeof(*rq), o->path);
    rq->strings_len = (uint32_t)off;
    return crl_ctr_send_req(s, rq, sizeof(*rq) + off, &c->pidfd, 1, P_OPEN, sb, o, NULL, err);
}

void crl_ctr_open_done(struct crl_sandbox *sb, struct crl_open_req *o,
                       const struct crl_spawn_reply *r, int *fds, int nfds)
{
    struct crl_err err = CRL_ERR_INIT;
    if (r->err || nfds != 1) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (r->err)
            crl_ctr_spawn_error(r, o->path, &err);
        else
            crl_err_set(&err, CRL_E_INTERNAL, "open: no descriptor");
        o->done(o, -1, false, 0, &err);
        return;
    }
    o->done(o, fds[0], r->kind == CRL_OPEN_DIRECTORY, (uint64_t)r->size, NULL);
}

/* A helper's leaf goes when it ends (its tree is gone or dying). */
void crl_ctr_remove_leaf(struct crl_sandbox *sb, const char *leaf)
{
    struct ctr_sandbox *c = sb->priv;
    if (c && c->cg && leaf[0])
        crl_cgroup_remove_leaf(c->cg, leaf);
}

int crl_ctr_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err)
{
    struct ctr_state *st = crl_ctr_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = crl_ctr_spawner_for(sb, err);
    if (!s)
        return -1;
    int fds[3 + CRL_CGROUP_MAX_FDS] = {c->pidfd, -1, -1};
    int ncg = 0;
    t->data_fd = t->msg_fd = -1;
    int ret = -1;
    char leaf[32];
    snprintf(leaf, sizeof(leaf), "t%llu", (unsigned long long)++sb->next_seq);
    bool ours_writes = !crl_stream_out(t->kind);
    int msg[2];
    if (pipe_pair(&t->data_fd, &fds[1], ours_writes, err) < 0)
        goto out;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg) < 0) {
        crl_err_sys(err, errno, "socketpair");
        goto out;
    }
    t->msg_fd = msg[0];
    fds[2] = msg[1];
    if (crl_cgroup_attach_fds(c->cg, leaf, fds + 3, &ncg, err) < 0)
        goto out;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_STREAM;
    rq->u.stream.kind = t->kind;
    rq->u.stream.mode = t->kind == CRL_STREAM_WATCH ? t->recursive : t->mode;
    rq->u.stream.uid = t->uid;
    rq->u.stream.gid = t->gid;
    rq->u.stream.n_cgroup_fds = (uint32_t)ncg;
    size_t off = pack(rq->strings, 0, CRL_SPAWN_MAX_MSG - sizeof(*rq), t->path);
    rq->strings_len = (uint32_t)off;
    ret = crl_ctr_send_req(s, rq, sizeof(*rq) + off, fds, 3 + ncg, P_STREAM, sb, t, leaf, err);
out:
    for (int i = 1; i < 3 + ncg; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (ret < 0) {
        close_fd(&t->data_fd);
        close_fd(&t->msg_fd);
        crl_ctr_remove_leaf(sb, leaf);
    }
    return ret;
}

void crl_ctr_stream_started(struct spawner *s, struct crl_sandbox *sb, struct crl_stream_req *t,
                            const char *leaf, const struct crl_spawn_reply *r, int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (r->err) {
        struct crl_err err = CRL_ERR_INIT;
        crl_ctr_spawn_error(r, t->path, &err);
        close_fd(&t->data_fd);
        close_fd(&t->msg_fd);
        crl_ctr_remove_leaf(sb, leaf);
        t->started(t, &err);
        return;
    }
    crl_ctr_add_running(s, r->pid, P_STREAM, sb, t, leaf);
    t->started(t, NULL);
}

/* ---- checkpoints ---- */

/* The writable layer, straight from the tmpfs corral-init handed us (only
 * the sandbox's mount namespace has it mounted): upper/ is the overlay's
 * upper dir, with its whiteouts (0/0 character devices) and opaque
 * directories (user.overlay.opaque, the mount has `userxattr`), owned by
 * host ids: the sandbox's plus its slot's base.  /tmp is the overlay's; only
 * /dev/shm (POSIX shared memory) lives on the tmpfs outside upper/. */
int crl_ctr_snapshot(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing || c->tmpfs_fd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    int fd = crl_openat(c->tmpfs_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "opening the writable layer of %s", sb->id);
    v->dir_fd = fd;
    v->format = CRL_LAYER_OVERLAY;
    v->uid_shift = v->gid_shift = sb->host->cfg.uid_base + sb->slot * 65536u;
    return 0;
}

void crl_ctr_restore_finish(struct ctr_restore *cr, const struct crl_err *err)
{
    struct crl_sandbox *sb = cr->sb;
    struct crl_restore_req *rq = cr->rq;
    close_fd(&cr->msg_fd);
    free(cr);
    rq->done(rq, err);
    crl_sandbox_unref(sb);
}

/* The change set is applied, at / of the sandbox's overlay (its mounts
 * left out), by a helper the spawner forks and moves into the sandbox as
 * its root, in a cgroup leaf of its own: writes are the sandbox's and
 * charged to it, and a removal through the overlay makes a whiteout.  (In
 * a paused sandbox the helper is frozen with the rest until a resume.) */
int crl_ctr_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err)
{
    struct ctr_state *st = crl_ctr_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = crl_ctr_spawner_for(sb, err);
    if (!s)
        return -1;
    if (c->pidfd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not ready yet", sb->id);
    struct ctr_restore *cr = calloc(1, sizeof(*cr));
    if (!cr)
        return crl_err_sys(err, ENOMEM, "restore");
    cr->rq = rq;
    cr->sb = sb;
    cr->msg_fd = -1;
    int fds[3 + CRL_CGROUP_MAX_FDS] = {c->pidfd, -1, -1};
    int ncg = 0, msg[2], ret = -1;
    char leaf[32];
    snprintf(leaf, sizeof(leaf), "r%llu", (unsigned long long)++sb->next_seq);
    /* a reading of its own: from offset 0, and read-only */
    if ((fds[1] = crl_reopen(rq->tar_fd, O_RDONLY)) < 0) {
        crl_err_sys(err, errno, "reopening the checkpoint (fd %d)", rq->tar_fd);
        goto out;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg) < 0) {
        crl_err_sys(err, errno, "socketpair");
        goto out;
    }
    cr->msg_fd = msg[0];
    fds[2] = msg[1];
    if (crl_cgroup_attach_fds(c->cg, leaf, fds + 3, &ncg, err) < 0)
        goto out;
    struct crl_spawn_req *req = (struct crl_spawn_req *)st->msg;
    memset(req, 0, sizeof(*req));
    req->op = CRL_SPAWN_RESTORE;
    req->u.stream.kind = CRL_STREAM_TAR_IN;
    req->u.stream.n_cgroup_fds = (uint32_t)ncg;
    size_t off = pack(req->strings, 0, CRL_SPAWN_MAX_MSG - sizeof(*req), "/");
    req->strings_len = (uint32_t)off;
    ret = crl_ctr_send_req(s, req, sizeof(*req) + off, fds, 3 + ncg, P_RESTORE, sb, cr, leaf, err);
out:
    for (int i = 1; i < 3 + ncg; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (ret < 0) {
        close_fd(&cr->msg_fd);
        crl_ctr_remove_leaf(sb, leaf);
        free(cr);
        return -1;
    }
    crl_sandbox_ref(sb);
    return 0;
}

void crl_ctr_restore_started(struct spawner *s, struct crl_sandbox *sb, struct ctr_restore *cr,
                             const char *leaf, const struct crl_spawn_reply *r, int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (r->err) {
        struct crl_err err = CRL_ERR_INIT;
        crl_ctr_spawn_error(r, "restoring", &err);
        crl_ctr_remove_leaf(sb, leaf);
        crl_ctr_restore_finish(cr, &err);
        return;
    }
    crl_ctr_add_running(s, r->pid, P_RESTORE, sb, cr, leaf);
}

/* The helper ended with `code` (enum crl_stream_status, or 128 + a signal). */
void crl_ctr_restore_exited(struct crl_sandbox *sb, struct ctr_restore *cr, const char *leaf,
                            int code)
{
    crl_ctr_remove_leaf(sb, leaf);
    char msg[600] = "";
    ssize_t n = recv(cr->msg_fd, msg, sizeof(msg) - 1, MSG_DONTWAIT);
    msg[n > 0 ? n : 0] = 0;
    msg[strcspn(msg, "\n")] = 0;
    struct crl_err err = CRL_ERR_INIT;
    bool live = sb->state == CRL_SB_READY || sb->state == CRL_SB_PAUSED;
    crl_ctr_restore_finish(cr, crl_restore_error(code, msg, live, &err) < 0 ? &err : NULL);
}
