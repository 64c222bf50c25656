/* The function backend, corrald's side.  A function sandbox is a keeper
 * (keeper.h: a fork of its runtime's zygote, PID 1 of mount, pid, ipc,
 * uts, net, cgroup and time namespaces of the sandbox's own, whose root is
 * a tmpfs of disk_mb with the host's system dirs bound read-only), a
 * cgroup, and an unprivileged uid; each call is a fork of the keeper that
 * jails itself (jail.h).  Namespaces are paid for once per sandbox, and
 * mostly ahead of it: keepers are made while corrald is idle and wait in a
 * pool, so a create claims one (a message and a dozen syscalls) and a call
 * costs a fork.
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
#include <poll.h>
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
#include "root.h"
#include "zygote_proto.h"

#define N_RUNTIMES 2
static const char *const runtimes[N_RUNTIMES] = {"shell", "python"};

/* A checkpoint being restored into the scratch dir by a jailed child of
 * the keeper (CRL_ZYG_RESTORE): no user code runs in it. */
struct fn_restore {
    struct crl_restore_req *rq;
    struct crl_sandbox *sb; /* a reference is held */
    char leaf[24];
    int status_fd; /* closed unwritten once the jail is entered; else "ERRNO STEP" */
    int msg_fd;    /* its stderr: the result's line */
};

/* A FORK waiting for its REPLY, or a child waiting for its EXITED: a
 * process (p) or a restore (rs). */
struct fn_call {
    uint64_t id;
    pid_t pid; /* in the sandbox's pid namespace */
    struct crl_proc *p;
    struct fn_restore *rs;
    struct fn_call *next;
};

enum keeper_state {
    K_BUILDING, /* building its root: READY comes next */
    K_POOLED,   /* ready, nobody's */
    K_SERVING,  /* a sandbox's: takes its CLAIM, then forks its calls */
    K_DEAD,     /* exited, or we stopped talking to it */
};

struct keeper {
    struct fn_state *st;
    unsigned runtime;
    enum keeper_state state;
    pid_t pid;
    int pidfd, sock;
    int root_fd, scratch_fd; /* O_PATH, from its READY */
    struct crl_watch w_sock, w_pid;
    struct crl_sandbox *sb;  /* once claimed */
    struct fn_call *pending; /* sent, no reply yet */
    struct fn_call *running; /* started, not yet exited */
    struct keeper *next;     /* in its zygote's list, while nobody's */
};

struct zygote {
    struct fn_state *st;
    unsigned runtime;
    pid_t pid;
    int sock;
    struct crl_watch w;
    unsigned requested;       /* KEEPERs asked for, not answered */
    struct keeper *unclaimed; /* building their roots, or pooled */
    unsigned building, npool;
    struct crl_sandbox *waiting_head, *waiting_tail; /* creates waiting for a keeper */
    struct crl_err last_err; /* why the last keeper failed, for those waiting */
};

struct fn_state {
    struct crl_host *host;
    char zygote_path[PATH_MAX];
    char root_dir[PATH_MAX]; /* <run dir>/function-root: each keeper's mountpoint */
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
    struct keeper *k;
    int netns_fd;
    uid_t uid;
    gid_t gid;
    unsigned runtime;
    unsigned running; /* processes and restores not yet exited */
    bool releasing;
    bool create_failed;
    struct crl_err create_err;
    bool paused;
    struct crl_cgroup_reclaim last_pause;
    struct crl_timer timer; /* destroy's drain */
    unsigned drain_tries;
    struct crl_sandbox *next_waiting;
};

static struct fn_state *g_fn;

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Descriptors a message brought that nobody takes. */
static void close_fds(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

static void restore_end(struct fn_restore *rs, int status, const struct crl_err *err);
static void on_zygote(struct crl_watch *w, uint32_t ev);
static void pool_fill(struct zygote *z);
static void claim(struct crl_sandbox *sb, struct keeper *k);
static void create_fail(struct crl_sandbox *sb, const struct crl_err *err);
static void drain(struct crl_timer *t);

/* ---- calls ---- */

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
    if (f && f->k)
        drop_call(&f->k->running, p);
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

static void call_exited(struct keeper *k, const struct crl_zyg_reply *r)
{
    for (struct fn_call **pp = &k->running; *pp; pp = &(*pp)->next) {
        struct fn_call *c = *pp;
        if (c->pid != r->pid)
            continue;
        *pp = c->next;
        if (c->rs) {
            restore_end(c->rs, r->status, NULL);
            free(c);
            return;
        }
        struct crl_proc *p = c->p;
        free(c);
        if (settle(p, true) < 0)
            return; /* it never started: handed back already */
        p->exited = true;
        p->status = r->status;
        p->cpu_s = r->cpu_s;
        p->maxrss_bytes = r->maxrss_bytes;
        close_fd(&p->pidfd);
        proc_gone(k->sb ? k->sb->priv : NULL, p);
        p->on_exit(p);
        return;
    }
}

/* The keeper's answer to a FORK: the call's pid and pidfd, or why not. */
static void call_replied(struct keeper *k, const struct crl_zyg_reply *r, int *fds, int nfds)
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
            restore_end(c->rs, 0, &err);
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
        close_fd(&p->in_fd);
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
        proc_gone(f, p);
        free(c);
        p->on_start(p, &err);
        return;
    }
    p->pid = r->pid;
    p->pidfd = nfds ? fds[0] : -1;
    for (int i = 1; i < nfds; i++)
        close(fds[i]);
    c->pid = r->pid;
    c->next = k->running;
    k->running = c;
    /* started once its status pipe says so */
    struct fn_proc *fp = p->priv;
    if (crl_watch_start(k->sb->host->loop, &fp->w, fp->status_fd, EPOLLIN, status_readable, p) < 0)
        settle(p, true);
}

/* ---- keepers ---- */

static void keeper_free(struct keeper *k)
{
    struct crl_loop *loop = k->st->host->loop;
    /* Our child (CLONE_PARENT): reaped here, if it has ended. */
    siginfo_t si;
    if (k->pidfd >= 0)
        waitid((idtype_t)P_PIDFD, (id_t)k->pidfd, &si, WEXITED | WNOHANG | __WALL);
    if (k->w_sock.active)
        crl_watch_stop(loop, &k->w_sock);
    if (k->w_pid.active)
        crl_watch_stop(loop, &k->w_pid);
    close_fd(&k->sock);
    close_fd(&k->pidfd);
    close_fd(&k->root_fd);
    close_fd(&k->scratch_fd);
    free(k);
}

/* Off the list of keepers nobody has claimed. */
static void unlist(struct zygote *z, struct keeper *k)
{
    for (struct keeper **pp = &z->unclaimed; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            if (k->state == K_BUILDING)
                z->building--;
            else if (k->state == K_POOLED)
                z->npool--;
            return;
        }
}

/* A pooled keeper, off the list; NULL if none is ready. */
static struct keeper *pool_take(struct zygote *z)
{
    for (struct keeper *k = z->unclaimed; k; k = k->next)
        if (k->state == K_POOLED) {
            unlist(z, k);
            return k;
        }
    return NULL;
}

/* Creates waiting for a keeper fail with `err`, rather than wait for
 * keepers that will not come, or would fail alike. */
static void fail_waiting(struct zygote *z, const struct crl_err *err)
{
    while (z->waiting_head) {
        struct crl_sandbox *sb = z->waiting_head;
        struct fn_sandbox *f = sb->priv;
        z->waiting_head = f->next_waiting;
        if (!z->waiting_head)
            z->waiting_tail = NULL;
        create_fail(sb, err);
    }
}

/* A keeper is of no more use: it died, broke the protocol, or its sandbox
 * goes.  It is killed (the pid namespace and everything in it end with
 * it); what was in flight on it ends as if killed; a sandbox that did not
 * ask for this has failed. */
static void keeper_lost(struct keeper *k, const char *why)
{
    if (k->state == K_DEAD)
        return;
    struct zygote *z = &k->st->zy[k->runtime];
    enum keeper_state was = k->state;
    k->state = K_DEAD;
    if (syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(NULL, errno, "pidfd_send_signal(keeper %d)", (int)k->pid);
    struct crl_loop *loop = k->st->host->loop;
    if (k->w_sock.active)
        crl_watch_stop(loop, &k->w_sock);
    close_fd(&k->sock);
    if (was == K_BUILDING || was == K_POOLED) {
        k->state = was;
        unlist(z, k);
        k->state = K_DEAD;
        if (why)
            crl_warn(NULL, "function runtime %s: keeper %d: %s", runtimes[k->runtime], (int)k->pid,
                     why);
        keeper_free(k);
        /* A pooled keeper killed from outside is made again; one that could
         * not build its root is not, until a create asks (no fork storm). */
        if (was == K_POOLED)
            pool_fill(z);
        return;
    }
    struct crl_sandbox *sb = k->sb;
    struct fn_sandbox *f = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    crl_err_set(&err, CRL_E_INTERNAL, "the sandbox's keeper (pid %d) %s", (int)k->pid,
                why ? why : "is gone");
    if (sb->state == CRL_SB_CREATING) {
        create_fail(sb, &err);
        return;
    }
    while (k->pending) {
        struct fn_call *c = k->pending;
        k->pending = c->next;
        if (c->rs) {
            restore_end(c->rs, 0, &err);
            free(c);
            continue;
        }
        struct crl_proc *p = c->p;
        free(c);
        proc_gone(f, p);
        close_fd(&p->in_fd);
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
        p->on_start(p, &err);
    }
    while (k->running) {
        struct fn_call *c = k->running;
        k->running = c->next;
        if (c->rs) {
            restore_end(c->rs, 0, &err);
            free(c);
            continue;
        }
        struct crl_proc *p = c->p;
        free(c);
        if (settle(p, true) < 0)
            continue; /* it never started: handed back already */
        proc_gone(f, p);
        p->exited = true;
        p->status = SIGKILL; /* as it was */
        close_fd(&p->pidfd);
        p->on_exit(p);
    }
    if (f && !f->releasing)
        crl_sandbox_failed(sb, "init_exited", "%s", err.msg);
}

static void keeper_exited(struct crl_watch *w, uint32_t ev)
{
    struct keeper *k = w->data;
    crl_watch_stop(k->st->host->loop, w);
    /* Reaped now, so that it leaves its cgroup now. */
    siginfo_t si;
    if (waitid((idtype_t)P_PIDFD, (id_t)k->pidfd, &si, WEXITED | WNOHANG | __WALL) < 0)
        crl_log_syscall(NULL, errno, "waitid(P_PIDFD, keeper %d)", (int)k->pid);
    if (k->state == K_DEAD && !k->sb) {
        keeper_free(k);
        return;
    }
    if (k->state == K_BUILDING) {
        /* Why, if it said (its READY may still wait in the socket). */
        struct zygote *z = &k->st->zy[k->runtime];
        struct crl_zyg_reply r;
        int fds[2], nfds = 2;
        ssize_t n = crl_recv_fds(k->sock, &r, sizeof(r), fds, &nfds);
        close_fds(fds, nfds);
        if (n == (ssize_t)sizeof(r) && r.op == CRL_ZYG_READY && r.err)
            crl_err_sys(&z->last_err, r.err, "function runtime %s: building a sandbox's root: %.*s",
                        runtimes[k->runtime], (int)sizeof(r.msg), r.msg);
        else
            crl_err_set(&z->last_err, CRL_E_INTERNAL,
                        "function runtime %s: a keeper exited while building a sandbox's root",
                        runtimes[k->runtime]);
        crl_error(NULL, "%s", z->last_err.msg);
        struct crl_err err = z->last_err;
        keeper_lost(k, NULL);
        fail_waiting(z, &err);
        return;
    }
    keeper_lost(k, "exited");
    /* A sandbox going away waits for this: drain now, not on the next tick. */
    struct crl_sandbox *sb = k->sb;
    struct fn_sandbox *f = sb ? sb->priv : NULL;
    if (f && f->releasing && crl_timer_armed(&f->timer)) {
        crl_timer_stop(sb->host->loop, &f->timer);
        drain(&f->timer);
    }
    (void)ev;
}

/* READY: its root is built; it joins the pool, or a create waiting for
 * one.  False if it is gone (freed). */
static bool keeper_ready(struct keeper *k, const struct crl_zyg_reply *r, int *fds, int nfds)
{
    struct zygote *z = &k->st->zy[k->runtime];
    if (r->err || nfds != 2) {
        close_fds(fds, nfds);
        crl_err_sys(&z->last_err, r->err ? r->err : EPROTO,
                    "function runtime %s: building a sandbox's root: %.*s", runtimes[k->runtime],
                    (int)sizeof(r->msg), r->err ? r->msg : "no descriptors");
        crl_error(NULL, "%s", z->last_err.msg);
        struct crl_err err = z->last_err;
        keeper_lost(k, NULL);
        fail_waiting(z, &err);
        return false;
    }
    k->root_fd = fds[0];
    k->scratch_fd = fds[1];
    if (z->waiting_head) {
        struct crl_sandbox *sb = z->waiting_head;
        struct fn_sandbox *f = sb->priv;
        z->waiting_head = f->next_waiting;
        if (!z->waiting_head)
            z->waiting_tail = NULL;
        unlist(z, k);
        claim(sb, k);
    } else {
        z->building--;
        k->state = K_POOLED;
        z->npool++;
    }
    pool_fill(z);
    return true;
}

static void on_keeper(struct crl_watch *w, uint32_t ev)
{
    struct keeper *k = w->data;
    for (;;) {
        struct crl_zyg_reply r;
        int fds[2], nfds = 2;
        ssize_t n = crl_recv_fds(k->sock, &r, sizeof(r), fds, &nfds);
        if (n < 0 && errno == EAGAIN)
            return;
        bool ok = n == (ssize_t)sizeof(r);
        if (ok && r.op == CRL_ZYG_READY && k->state == K_BUILDING) {
            if (!keeper_ready(k, &r, fds, nfds))
                return;
        } else if (ok && r.op == CRL_ZYG_REPLY && k->state == K_SERVING && r.id == 0) {
            /* the claim's answer: a failure fails the sandbox (the create,
             * if it has not answered yet) */
            if (r.err) {
                char why[300];
                snprintf(why, sizeof(why), "could not make the sandbox's namespaces: %.*s: %s",
                         (int)sizeof(r.msg), r.msg, strerror(r.err));
                keeper_lost(k, why);
                return;
            }
        } else if (ok && r.op == CRL_ZYG_REPLY && k->state == K_SERVING) {
            call_replied(k, &r, fds, nfds);
        } else if (ok && r.op == CRL_ZYG_EXITED && k->state == K_SERVING && nfds == 0) {
            call_exited(k, &r);
        } else {
            close_fds(fds, nfds);
            keeper_lost(k, n == 0 ? "closed its socket" : "broke the protocol");
            return;
        }
        if (k->state == K_DEAD)
            return;
    }
    (void)ev;
}

/* ---- zygotes ---- */

static int zygote_start(struct fn_state *st, unsigned rt, struct crl_err *err)
{
    struct zygote *z = &st->zy[rt];
    z->st = st;
    z->runtime = rt;
    z->sock = -1;
    z->requested = 0;
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_ZYG_MAX_MSG, err) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pair[1], CRL_ZYG_FD);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attr;
    crl_spawnattr_init_clean(&attr);
    char *argv[] = {(char *)"corral-zygote", (char *)"--runtime", (char *)runtimes[rt],
                    (char *)"--root-dir",    st->root_dir,        NULL};
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

/* A zygote that died: the keepers it was making are lost (those it made
 * live on: they talk to us, not to it).  The next need starts a new one. */
static void zygote_lost(struct zygote *z)
{
    crl_warn(NULL, "function runtime %s: zygote %d is gone", runtimes[z->runtime], (int)z->pid);
    crl_watch_stop(z->st->host->loop, &z->w);
    close_fd(&z->sock);
    if (z->pid > 0)
        waitpid(z->pid, NULL, WNOHANG);
    z->pid = 0;
    z->requested = 0;
}

/* The zygote's answer to KEEPER: a keeper's socket and pidfd. */
static void on_zygote(struct crl_watch *w, uint32_t ev)
{
    struct zygote *z = w->data;
    for (;;) {
        struct crl_zyg_reply r;
        int fds[2], nfds = 2;
        ssize_t n = crl_recv_fds(z->sock, &r, sizeof(r), fds, &nfds);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n != (ssize_t)sizeof(r) || r.op != CRL_ZYG_REPLY) {
            close_fds(fds, nfds);
            zygote_lost(z);
            pool_fill(z);
            return;
        }
        if (z->requested > 0)
            z->requested--;
        struct keeper *k = r.err || nfds != 2 ? NULL : calloc(1, sizeof(*k));
        if (!k) {
            close_fds(fds, nfds);
            crl_err_sys(&z->last_err, r.err ? r.err : ENOMEM,
                        "function runtime %s: making a keeper: %.*s", runtimes[z->runtime],
                        (int)sizeof(r.msg), r.msg);
            crl_error(NULL, "%s", z->last_err.msg);
            if (!z->requested && !z->building) {
                struct crl_err err = z->last_err;
                fail_waiting(z, &err);
            }
            continue;
        }
        k->st = z->st;
        k->runtime = z->runtime;
        k->state = K_BUILDING;
        k->pid = r.pid;
        k->sock = fds[0];
        k->pidfd = fds[1];
        k->root_fd = k->scratch_fd = -1;
        crl_set_nonblock(k->sock, 1);
        struct crl_loop *loop = z->st->host->loop;
        if (crl_watch_start(loop, &k->w_sock, k->sock, EPOLLIN, on_keeper, k) < 0 ||
            crl_watch_start(loop, &k->w_pid, k->pidfd, EPOLLIN, keeper_exited, k) < 0) {
            syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
            keeper_free(k);
            continue;
        }
        k->next = z->unclaimed;
        z->unclaimed = k;
        z->building++;
    }
    (void)ev;
}

/* Ask for keepers until the pool, and what is on its way, hold
 * --function-pool of them (so many creates in a burst find one ready; a
 * pooled python keeper is a fork of a ~20 MiB interpreter, which costs its
 * page tables, some 150 KiB, and little else until it is used), plus one
 * for each create that waits. */
static void pool_fill(struct zygote *z)
{
    struct fn_state *st = z->st;
    struct crl_err err = CRL_ERR_INIT;
    if (st->host->shutting_down) {
        crl_err_set(&err, CRL_E_UNAVAILABLE, "corrald is shutting down");
        fail_waiting(z, &err);
        return;
    }
    unsigned want = st->host->cfg.function_pool;
    for (struct crl_sandbox *sb = z->waiting_head; sb;
         sb = ((struct fn_sandbox *)sb->priv)->next_waiting)
        want++;
    while (z->npool + z->building + z->requested < want) {
        if (z->sock < 0 && zygote_start(st, z->runtime, &err) < 0) {
            crl_warn(NULL, "function runtime %s: %s", runtimes[z->runtime], err.msg);
            z->last_err = err;
            if (!z->requested && !z->building)
                fail_waiting(z, &err);
            return;
        }
        struct crl_zyg_req rq = {.id = ++st->next_id, .op = CRL_ZYG_KEEPER};
        if (send(z->sock, &rq, sizeof(rq), MSG_NOSIGNAL) != (ssize_t)sizeof(rq)) {
            crl_log_syscall(NULL, errno, "asking the %s zygote for a keeper", runtimes[z->runtime]);
            zygote_lost(z);
            continue; /* started again on the next turn */
        }
        z->requested++;
    }
}

/* ---- sandboxes ---- */

/* Give back what corrald holds for a sandbox whose processes are all gone.
 * A destroyed sandbox's cgroup is kept for the next one of its slot; a
 * failed create removes it, leaving nothing of the attempt. */
static void release(struct crl_sandbox *sb, bool quarantine)
{
    struct fn_sandbox *f = sb->priv;
    struct crl_host *h = sb->host;
    crl_timer_stop(h->loop, &f->timer);
    bool failed_create = f->create_failed;
    struct crl_err create_err = f->create_err;
    if (f->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_release(f->cg, failed_create && !quarantine, &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    if (f->netns_fd >= 0) {
        if (quarantine)
            close(f->netns_fd);
        else
            crl_netns_put(h->netns, f->netns_fd);
    }
    if (f->k) {
        f->k->sb = NULL;
        if (!f->k->w_pid.active)
            keeper_free(f->k); /* else when its pidfd says it has exited */
    }
    free(f);
    sb->priv = NULL;
    sb->slot_quarantined = quarantine;
    if (failed_create)
        crl_sandbox_created(sb, &create_err);
    else
        crl_sandbox_destroyed(sb);
}

/* How long a keeper asked to END may take before it is killed. */
#define END_GRACE_MS 1000

/* Wait, on a timer, for the keeper to be gone, the cgroup to empty and its
 * leaves to go, then release.  A keeper that does not END in time is
 * killed, and with it the pid namespace; a cgroup that does not empty
 * quarantines the slot until a restart, as for a container. */
static void drain(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    struct fn_sandbox *f = sb->priv;
    bool keeper = f->k && f->k->w_pid.active;
    if (keeper && f->drain_tries == END_GRACE_MS) {
        keeper_lost(f->k, "did not end in time");
        if (f->cg)
            crl_cgroup_kill_all(f->cg, NULL);
    }
    int n = f->cg ? crl_cgroup_count(f->cg, NULL) : 0;
    bool busy = n == 0 && f->cg && crl_cgroup_tidy(f->cg, f->create_failed) < 0 && errno == EBUSY;
    if ((n > 0 || busy || keeper || f->running > 0) && f->drain_tries++ < 5000) {
        if (n > 0 && !keeper && f->drain_tries % 500 == 1)
            crl_cgroup_kill_all(f->cg, NULL);
        crl_timer_start(sb->host->loop, &f->timer, 1000000, drain, sb);
        return;
    }
    if (n > 0 || keeper || f->running > 0)
        crl_error(sb->id,
                  "%d process(es) still in the cgroup after 5s: slot quarantined until restart", n);
    release(sb, n > 0 || keeper);
}

/* Everything of the sandbox goes: its keeper ENDs it (its processes, its
 * IPC objects, then itself and the namespaces), or, if it cannot be asked,
 * is killed with everything in the cgroup; then drain. */
static void teardown(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    f->releasing = true;
    crl_timer_stop(sb->host->loop, &f->timer);
    if (f->paused && f->cg) { /* a frozen keeper would not act, nor die (v1), until thawed */
        crl_cgroup_freeze(f->cg, false, NULL);
        f->paused = false;
    }
    struct keeper *k = f->k;
    struct crl_zyg_req end = {.op = CRL_ZYG_END};
    if (!k || k->state != K_SERVING ||
        send(k->sock, &end, sizeof(end), MSG_NOSIGNAL) != (ssize_t)sizeof(end)) {
        if (k)
            keeper_lost(k, NULL);
        if (f->cg)
            crl_cgroup_kill_all(f->cg, NULL);
    }
    f->drain_tries = 0;
    f->timer.data = sb;
    drain(&f->timer);
}

/* A create that cannot finish: undone once everything it made is gone;
 * the create answers then (release). */
static void create_fail(struct crl_sandbox *sb, const struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    if (f->create_failed)
        return;
    f->create_failed = true;
    f->create_err = *err;
    teardown(sb);
}

static void created(struct crl_timer *t)
{
    crl_sandbox_created(t->data, NULL);
}

/* The keeper becomes the sandbox's (keeper.h).  What the files API needs
 * at once (its disk's size, its scratch dir's owner) corrald sets through
 * the keeper's descriptors; the rest (its cgroup, network, hostname, /etc
 * and clocks) the keeper does on CLAIM, which it takes before any call
 * (one socket, in order), so the create answers without waiting for it.
 * A claim that fails (a system error) fails the sandbox: the create, or,
 * if that has answered, its first call says why. */
static void claim(struct crl_sandbox *sb, struct keeper *k)
{
    struct fn_sandbox *f = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    f->k = k;
    k->sb = sb;
    k->state = K_SERVING;
    const char *step = "?";
    int r = crl_fnroot_prepare(k->root_fd, k->scratch_fd, sb->spec.disk_mb, f->uid, f->gid, &step);
    if (r < 0) {
        crl_err_sys(&err, -r, "preparing the sandbox's root: %s", step);
        create_fail(sb, &err);
        return;
    }
    int fds[1 + CRL_ZYG_MAX_CGROUP_FDS];
    int ncg = 0;
    fds[0] = f->netns_fd;
    if (crl_cgroup_attach_fds(f->cg, ".", fds + 1, &ncg, &err) < 0) {
        create_fail(sb, &err);
        return;
    }
    struct crl_zyg_claim c = {
        .op = CRL_ZYG_CLAIM,
        .uid = f->uid,
        .gid = f->gid,
        .n_cgroup_fds = (uint32_t)ncg,
        .clock_start_s = 0,
    };
    snprintf(c.hostname, sizeof(c.hostname), "%s", sb->id);
    ssize_t sent = crl_send_fds(k->sock, &c, sizeof(c), fds, 1 + ncg);
    int e = errno;
    for (int i = 0; i < ncg; i++)
        close(fds[1 + i]);
    if (sent < 0) {
        crl_err_sys(&err, e, "talking to the sandbox's keeper");
        create_fail(sb, &err);
        return;
    }
    crl_timer_start(sb->host->loop, &f->timer, 0, created, sb);
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
    struct zygote *z = &st->zy[rt];
    if (z->sock < 0 && !z->npool && !z->building && zygote_start(st, rt, err) < 0)
        return -1;
    struct fn_sandbox *f = calloc(1, sizeof(*f));
    if (!f)
        return crl_err_sys(err, ENOMEM, "sandbox");
    f->netns_fd = -1;
    f->runtime = rt;
    /* An id range of its own, as a container slot has: unprivileged on the host. */
    f->uid = h->cfg.uid_base + sb->slot * 65536u;
    f->gid = f->uid;
    char name[32];
    snprintf(name, sizeof(name), "s%u", sb->slot);
    struct crl_cgroup_limits lim = {.memory_bytes = (uint64_t)sb->spec.memory_mb << 20,
                                    .pids = sb->spec.pids,
                                    .cpus = sb->spec.cpus};
    if (crl_cgroup_create(h->cgroups, name, &lim, &f->cg, err) < 0 ||
        (f->netns_fd = crl_netns_get(h->netns, err)) < 0) {
        if (f->cg)
            crl_cgroup_release(f->cg, true, NULL);
        free(f);
        return -1;
    }
    sb->priv = f;
    struct keeper *k = pool_take(z);
    if (k) {
        claim(sb, k);
    } else if (z->waiting_tail) {
        ((struct fn_sandbox *)z->waiting_tail->priv)->next_waiting = sb;
        z->waiting_tail = sb;
    } else {
        z->waiting_head = z->waiting_tail = sb;
    }
    pool_fill(z);
    return 0;
}

static void unwait(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    struct zygote *z = &g_fn->zy[f->runtime];
    struct crl_sandbox *prev = NULL;
    for (struct crl_sandbox *w = z->waiting_head; w;
         prev = w, w = ((struct fn_sandbox *)w->priv)->next_waiting) {
        if (w != sb)
            continue;
        if (prev)
            ((struct fn_sandbox *)prev->priv)->next_waiting = f->next_waiting;
        else
            z->waiting_head = f->next_waiting;
        if (z->waiting_tail == sb)
            z->waiting_tail = prev;
        return;
    }
}

static void fn_destroy(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    if (!f) {
        crl_sandbox_destroyed(sb);
        return;
    }
    unwait(sb);
    teardown(sb);
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
    /* The root's tmpfs holds all it can write: the scratch dir, /dev/shm
     * and its few files of /etc. */
    u->disk_limit_bytes = (uint64_t)sb->spec.disk_mb << 20;
    struct statfs fs;
    if (f->k && f->k->scratch_fd >= 0 && fstatfs(f->k->scratch_fd, &fs) == 0)
        u->disk_bytes = (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;
    return 0;
}

static json_t *fn_info(struct crl_sandbox *sb)
{
    struct fn_sandbox *f = sb->priv;
    if (!f)
        return NULL;
    pid_t pid = f->k ? f->k->pid : 0;
    char root[64] = "";
    if (pid > 0)
        snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
    json_t *o =
        json_pack("{s:s, s:i, s:s, s:i, s:s, s:i, s:s}", "runtime", runtimes[f->runtime], "uid",
                  (json_int_t)f->uid, "scratch", CRL_FN_SCRATCH, "pid", (json_int_t)pid, "root",
                  root, "zygote_pid", (json_int_t)g_fn->zy[f->runtime].pid, "cgroup",
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
    struct crl_zyg_fork *rq = (struct crl_zyg_fork *)g_fn->msg;
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
static struct keeper *serving(struct crl_sandbox *sb, struct crl_err *err)
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
    c->id = rq->id = ++g_fn->next_id;
    if (crl_send_fds(k->sock, rq, len, fds, nfds) < 0)
        return crl_err_sys(err, errno, "talking to the sandbox's keeper");
    c->next = k->pending;
    k->pending = c;
    return 0;
}

static int fn_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct fn_state *st = g_fn;
    struct fn_sandbox *f = sb->priv;
    struct keeper *k = serving(sb, err);
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

static int fn_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct fn_sandbox *f = sb->priv;
    struct fn_proc *fp = p->priv;
    if (p->exited || !fp)
        return 0;
    /* Its tree is its cgroup leaf, whatever sessions it made.  (Only a
     * session's shell is spared, and a function sandbox has none.) */
    if (scope != CRL_KILL_PROC && f && f->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (scope == CRL_KILL_TREE && crl_cgroup_kill_leaf(f->cg, fp->leaf, 0, &err) < 0)
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

/* The scratch dir of a sandbox whose files may be touched, or -1 with err. */
static int scratch_of(struct crl_sandbox *sb, struct crl_err *err)
{
    struct keeper *k = serving(sb, err);
    return k ? k->scratch_fd : -1;
}

static int fn_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
    struct fn_open *fo = calloc(1, sizeof(*fo));
    if (!fo)
        return crl_err_sys(err, ENOMEM, "open");
    fo->o = o;
    fo->fd = -1;
    long fd = crl_path_open_in_root(scratch, o->path, o->flags | O_NOFOLLOW, o->mode);
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
 * once corrald commits; corrald writes the bytes straight into it, and
 * the sandbox's tmpfs holds them (disk_mb). */
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
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
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
    long dfd = crl_path_open_in_root(scratch, parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY, 0);
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
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
    int fd = crl_openat(scratch, ".", O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "opening the scratch dir");
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

/* The change set is applied by a child of the sandbox's keeper, in the
 * jail every call has (the sandbox's uid, Landlock: its scratch dir and
 * nothing else writable, seccomp, rlimits, its cgroup leaf), that runs no
 * user code: it extracts as the sandbox's uid (the archive's owners are
 * ignored; everything is the sandbox's, as it could make it itself), with
 * crl_tar_apply's checks inside Landlock's walls.  (In a paused sandbox
 * the child is frozen until a resume.) */
static int fn_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    struct keeper *k = serving(sb, err);
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
    size_t off = pack(g_fn->msg + sizeof(*zrq), 0, CRL_ZYG_MAX_MSG - sizeof(*zrq), "restore");
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

/* ---- pause ---- */

/* Between calls only the keeper is there, waiting, so a pause stops the
 * calls under way, if any, and gives back the page cache its calls charged
 * to it. */
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
    for (unsigned i = 0; i < N_RUNTIMES; i++)
        st->zy[i].sock = -1;
    if (crl_sibling_path("corral-zygote", st->zygote_path, sizeof(st->zygote_path), err) < 0)
        goto fail;
    if (access(st->zygote_path, X_OK) < 0) {
        crl_err_sys(err, errno, "zygote %s", st->zygote_path);
        goto fail;
    }
    /* Only ever a mountpoint, in each keeper's own namespace. */
    snprintf(st->root_dir, sizeof(st->root_dir), "%s/function-root", h->run_dir);
    if (mkdir(st->root_dir, 0700) < 0 && errno != EEXIST) {
        crl_err_sys(err, errno, "mkdir %s", st->root_dir);
        goto fail;
    }
    g_fn = st;
    *state = st;
    /* Initialise the runtimes and fill the pools now, not in the first
     * create; a runtime that cannot start is tried again when a sandbox
     * needs it. */
    for (unsigned i = 0; i < N_RUNTIMES; i++) {
        struct crl_err zerr = CRL_ERR_INIT;
        st->zy[i].st = st;
        st->zy[i].runtime = i;
        if (zygote_start(st, i, &zerr) < 0)
            crl_warn(NULL, "function runtime %s: %s", runtimes[i], zerr.msg);
        else
            pool_fill(&st->zy[i]);
    }
    return 0;
fail:
    free(st->msg);
    free(st);
    return -1;
}

/* Nothing of a function sandbox outlives corrald on disk: its root and
 * scratch dir were a tmpfs in its keeper's mount namespace, which ended
 * with the keeper (its cgroups and processes go with the container
 * backend's reconcile of the same slots).  The scratch dirs of an older
 * corrald, which kept them on disk, go. */
static int fn_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    (void)state;
    (void)err;
    char old[PATH_MAX];
    snprintf(old, sizeof(old), "%s/functions", h->run_dir);
    if (crl_rm_rf_at(AT_FDCWD, old) < 0 && errno != ENOENT)
        crl_log_syscall(NULL, errno, "removing %s", old);
    return 0;
}

static void fn_shutdown(struct crl_host *h, void *state)
{
    struct fn_state *st = state;
    (void)h;
    for (unsigned i = 0; i < N_RUNTIMES; i++) {
        struct zygote *z = &st->zy[i];
        /* The pool's keepers go first, so that their zygote reaps them. */
        for (struct keeper *k = z->unclaimed; k; k = k->next)
            syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
        while (z->unclaimed) {
            struct keeper *k = z->unclaimed;
            z->unclaimed = k->next;
            struct pollfd pf = {k->pidfd, POLLIN, 0};
            poll(&pf, 1, 1000);
            k->state = K_DEAD;
            keeper_free(k);
        }
        if (z->sock < 0)
            continue;
        crl_watch_stop(st->host->loop, &z->w);
        close_fd(&z->sock); /* it exits on EOF; keepers it was building see theirs close */
        if (z->pid > 0) {
            int status;
            if (waitpid(z->pid, &status, 0) < 0)
                crl_log_syscall(NULL, errno, "waiting for zygote %d", (int)z->pid);
        }
    }
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
