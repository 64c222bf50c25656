/* Calls and restores, each a FORK to the sandbox's keeper: function_int.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/host.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "function_int.h"

/* ---- calls ---- */

/* A call ended, or never started: whatever it left running in its leaf
 * is killed (a call is not a machine: nothing outlives it), and the leaf
 * goes (or, while the dead are reaped, goes with the sandbox). */
void crl_fn_proc_gone(struct fn_sandbox *f, struct crl_proc *p)
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

static void drop_call(struct fn_call **list, struct crl_proc *p)
{
    for (struct fn_call **pp = list; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p) {
            struct fn_call *c = *pp;
            *pp = c->next;
            free(c);
            return;
        }
}

/* Did the call start?  Its status pipe closed unwritten: yes; a line
 * "ERRNO STEP": no, and why.  `now`: it has exited, so the pipe has all it
 * will ever have.  Returns 1 (started), 0 (not known yet) or -1: it never
 * started, and `p` went back to its owner (who may have freed it). */
int crl_fn_settle(struct crl_proc *p, bool now)
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
    if (f && f->k)
        drop_call(&f->k->running, p);
    close_fd(&p->pidfd);
    crl_fn_proc_gone(f, p);
    p->on_start(p, &err); /* never started: no on_exit follows */
    return -1;
}

static void status_readable(struct crl_watch *w, uint32_t ev)
{
    (void)crl_fn_settle(w->data, false);
    (void)ev;
}

/* A call that never started: its pipes and leaf go, and its owner hears
 * why (no on_exit follows). */
static void never_started(struct fn_sandbox *f, struct crl_proc *p, const struct crl_err *err)
{
    close_fd(&p->in_fd);
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    crl_fn_proc_gone(f, p);
    p->on_start(p, err);
}

/* A call that started, ended: `status` and the rest of `r` (NULL: killed
 * with its keeper, as it was). */
static void ended(struct fn_sandbox *f, struct crl_proc *p, const struct crl_zyg_reply *r)
{
    if (crl_fn_settle(p, true) < 0)
        return; /* it never started: handed back already */
    p->exited = true;
    p->status = r ? r->status : SIGKILL;
    p->cpu_s = r ? r->cpu_s : 0;
    p->maxrss_bytes = r ? r->maxrss_bytes : 0;
    close_fd(&p->pidfd);
    crl_fn_proc_gone(f, p);
    p->on_exit(p);
}

void crl_fn_calls_lost(struct keeper *k, const struct crl_err *err)
{
    struct fn_sandbox *f = k->sb ? k->sb->priv : NULL;
    for (int running = 0; running < 2; running++) {
        struct fn_call **list = running ? &k->running : &k->pending;
        while (*list) {
            struct fn_call *c = *list;
            *list = c->next;
            struct crl_proc *p = c->p;
            if (c->rs)
                crl_fn_restore_end(c->rs, 0, err);
            free(c);
            if (p && running)
                ended(f, p, NULL);
            else if (p)
                never_started(f, p, err);
        }
    }
}

void crl_fn_call_exited(struct keeper *k, const struct crl_zyg_reply *r)
{
    for (struct fn_call **pp = &k->running; *pp; pp = &(*pp)->next) {
        struct fn_call *c = *pp;
        if (c->pid != r->pid)
            continue;
        *pp = c->next;
        if (c->rs) {
            crl_fn_restore_end(c->rs, r->status, NULL);
            free(c);
            return;
        }
        struct crl_proc *p = c->p;
        free(c);
        ended(k->sb ? k->sb->priv : NULL, p, r);
        return;
    }
}

/* The keeper's answer to a FORK: the call's pid and pidfd, or why not. */
void crl_fn_call_replied(struct keeper *k, const struct crl_zyg_reply *r, int *fds, int nfds)
{
    struct fn_call **pp = &k->pending;
    while (*pp && (*pp)->id != r->id)
        pp = &(*pp)->next;
    struct fn_call *c = *pp;
    if (!c || (nfds > 0 && r->err)) {
        close_fds(fds, nfds);
        if (!c)
            return;
        nfds = 0;
    }
    *pp = c->next;
    struct fn_sandbox *f = k->sb->priv;
    if (c->rs) {
        close_fds(fds, nfds);
        if (r->err) {
            struct crl_err err = CRL_ERR_INIT;
            crl_err_sys(&err, r->err, "restoring: the sandbox's keeper: %.*s", (int)sizeof(r->msg),
                        r->msg);
            crl_fn_restore_end(c->rs, 0, &err);
            free(c);
        } else {
            c->pid = r->pid;
            c->next = k->running;
            k->running = c;
        }
        return;
    }
    struct crl_proc *p = c->p;
    if (r->err) {
        struct crl_err err = CRL_ERR_INIT;
        crl_err_sys(&err, r->err, "the sandbox's keeper: %.*s", (int)sizeof(r->msg), r->msg);
        free(c);
        never_started(f, p, &err);
        return;
    }
    p->ns_pid = r->pid;
    p->pidfd = nfds ? fds[0] : -1;
    p->pid = p->pidfd >= 0 ? crl_pidfd_pid(p->pidfd) : -1;
    for (int i = 1; i < nfds; i++)
        close(fds[i]);
    c->pid = r->pid;
    c->next = k->running;
    k->running = c;
    /* started once its status pipe says so */
    struct fn_proc *fp = p->priv;
    if (crl_watch_start(k->sb->host->loop, &fp->w, fp->status_fd, EPOLLIN, status_readable, p) < 0)
        crl_fn_settle(p, true);
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

/* The call's environment: the exec's, with HOME and TMPDIR the scratch dir. */
static size_t pack_env(char *dst, size_t off, size_t cap, char **envp, uint32_t *n)
{
    off = pack(dst, off, cap, "HOME=" CRL_FN_SCRATCH);
    off = pack(dst, off, cap, "TMPDIR=" CRL_FN_SCRATCH);
    *n = 2;
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, "HOME=", 5) != 0 && strncmp(*e, "TMPDIR=", 7) != 0) {
            off = pack(dst, off, cap, *e);
            (*n)++;
        }
    return off;
}

/* A FORK request's limits. */
static struct crl_zyg_fork *fork_request(struct crl_sandbox *sb)
{
    struct crl_zyg_fork *rq = (struct crl_zyg_fork *)crl_fn_state->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_ZYG_FORK;
    rq->nproc = sb->spec.pids;
    rq->nofile = 1024;
    return rq;
}

/* The cgroup a child of the keeper joins, into fds (*ncg of them): on v2
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

/* The keeper of a sandbox that can take calls, or NULL with err. */
struct keeper *crl_fn_serving(struct crl_sandbox *sb, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (!f || f->releasing || !f->k || f->k->state != K_SERVING || sb->state == CRL_SB_CREATING) {
        crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
        return NULL;
    }
    return f->k;
}

/* Send a FORK (its fixed fds and the cgroup fds after them) and record it. */
static int send_fork(struct keeper *k, struct crl_zyg_fork *rq, size_t len, const int *fds,
                     int nfds, struct fn_call *c, struct crl_err *err)
{
    c->id = rq->id = ++crl_fn_state->next_id;
    if (crl_send_fds(k->sock, rq, len, fds, nfds) < 0)
        return crl_err_sys(err, errno, "talking to the sandbox's keeper");
    c->next = k->pending;
    k->pending = c;
    return 0;
}

int crl_fn_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct fn_state *st = crl_fn_state;
    struct fn_sandbox *f = sb->priv;
    struct keeper *k = crl_fn_serving(sb, err);
    if (!k)
        return -1;
    if (p->session)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "sessions need a process that lives between commands: the function "
                           "backend has none (each exec is a fresh fork)");
    struct crl_zyg_fork *rq = fork_request(sb);
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
    off = pack_env(strings, off, cap, p->envp, &rq->envc);
    if (off == (size_t)-1)
        return crl_err_set(err, CRL_E_TOO_LARGE, "the command and its environment are too large");

    int fds[CRL_ZYG_MAX_FDS], theirs[4] = {-1, -1, -1, -1}, ncg = 0;
    int pp[4][2];
    int first = p->tty ? 3 : 0;     /* a terminal's stdio is its slave, not pipes */
    for (int i = first; i < 4; i++) /* stdin, stdout, stderr, status */
        if (pipe2(pp[i], O_CLOEXEC) < 0) {
            int e = errno;
            while (i-- > first) {
                close(pp[i][0]);
                close(pp[i][1]);
            }
            return crl_err_sys(err, e, "pipe");
        }
    int status = pp[3][0];
    theirs[3] = pp[3][1];
    if (p->tty) {
        int m, slave;
        if (crl_backend_host_pty(p->rows, p->cols, &m, &slave, err) < 0) {
            close_fds(pp[3], 2);
            return -1;
        }
        p->in_fd = m;
        p->out_fd = fcntl(m, F_DUPFD_CLOEXEC, 0);
        theirs[0] = slave;
        theirs[1] = fcntl(slave, F_DUPFD_CLOEXEC, 0);
        theirs[2] = fcntl(slave, F_DUPFD_CLOEXEC, 0);
        rq->tty = 1;
    } else {
        p->in_fd = pp[0][1], theirs[0] = pp[0][0];
        p->out_fd = pp[1][0], theirs[1] = pp[1][1];
        p->err_fd = pp[2][0], theirs[2] = pp[2][1];
    }
    memcpy(fds, theirs, 4 * sizeof(int));
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
        c->p = p;
        if (send_fork(k, rq, sizeof(*rq) + off, fds, CRL_ZYG_FIXED_FDS + ncg, c, err) < 0) {
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
    f->running++;
    return 0;
}

int crl_fn_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct fn_sandbox *f = sb->priv;
    struct fn_proc *fp = p->priv;
    if (p->exited || !fp)
        return 0;
    /* Its tree is its cgroup leaf, whatever sessions it made.  (Only a
     * session's shell is spared, and a function sandbox has none.) */
    struct crl_err err = CRL_ERR_INIT;
    if (scope == CRL_KILL_TREE && f && f->cg && crl_cgroup_kill_leaf(f->cg, fp->leaf, 0, &err) < 0)
        crl_warn(sb->id, "%s", err.msg);
    if (scope != CRL_KILL_DESCENDANTS && p->pidfd >= 0 &&
        syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(sb->id, errno, "pidfd_send_signal(%d)", (int)p->pid);
    return 0;
}

int crl_fn_signal(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
                  struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    struct fn_proc *fp = p->priv;
    return crl_backend_signal_host(sb, p, f ? f->cg : NULL, fp ? fp->leaf : "", sig, scope, err);
}

/* A restore's child ended (wait status), or never ran (err): tell its
 * owner, on the loop, and let go of everything it had. */
void crl_fn_restore_end(struct fn_restore *rs, int status, const struct crl_err *err)
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
            crl_restore_error(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), msg,
                              live, &e);
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

/* The change set is applied by a child of the sandbox's keeper, in the
 * jail every call has (the sandbox's uid, Landlock: its scratch dir and
 * nothing else writable, seccomp, rlimits, its cgroup leaf), that runs no
 * user code: it extracts as the sandbox's uid (the archive's owners are
 * ignored; everything is the sandbox's, as it could make it itself), with
 * crl_tar_apply's checks inside Landlock's walls.  (In a paused sandbox
 * the child is frozen until a resume.) */
int crl_fn_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    struct keeper *k = crl_fn_serving(sb, err);
    if (!k)
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
    struct crl_zyg_fork *zrq = fork_request(sb);
    zrq->kind = CRL_ZYG_RESTORE;
    zrq->argc = 1;
    size_t off =
        pack(crl_fn_state->msg + sizeof(*zrq), 0, CRL_ZYG_MAX_MSG - sizeof(*zrq), "restore");
    /* stdin the checkpoint, stdout nowhere, stderr its last words */
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
    fds[3] = status[1];
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
    c->rs = rs;
    if (send_fork(k, zrq, sizeof(*zrq) + off, fds, CRL_ZYG_FIXED_FDS + ncg, c, err) < 0)
        goto out;
    c = NULL;
    f->running++;
    crl_sandbox_ref(sb);
    rs = NULL;
    ret = 0;
out:
    for (int i = 0; i < CRL_ZYG_MAX_FDS; i++)
        if (fds[i] >= 0)
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
