/* The spawners, from corrald's side: requests, replies, restarts
 * (container_int.h). */
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
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "container_int.h"

/* ---- requests ---- */

/* The least busy running spawner; CRL_E_UNAVAILABLE if none runs. */
struct spawner *crl_ctr_pick_spawner(struct ctr_state *st, struct crl_err *err)
{
    struct spawner *best = NULL;
    for (unsigned i = 0; i < st->n_sp; i++)
        if (st->sp[i].ready && (!best || st->sp[i].inflight < best->inflight))
            best = &st->sp[i];
    if (!best)
        crl_err_set(err, CRL_E_UNAVAILABLE, "no container spawner is running");
    return best;
}

/* The spawner that created a running sandbox, which holds its PID 1. */
struct spawner *crl_ctr_home_spawner(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing || c->init_dead) {
        crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
        return NULL;
    }
    struct spawner *s = &crl_ctr_state->sp[c->spawner];
    if (!s->ready) {
        crl_err_set(err, CRL_E_UNAVAILABLE, "the spawner of sandbox %s is restarting", sb->id);
        return NULL;
    }
    return s;
}

/* The spawner for a request about a running sandbox. */
struct spawner *crl_ctr_spawner_for(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing) {
        crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
        return NULL;
    }
    return crl_ctr_pick_spawner(crl_ctr_state, err);
}

int crl_ctr_send_req(struct spawner *s, struct crl_spawn_req *rq, size_t len, const int *fds,
                     int nfds, enum pending_kind kind, struct crl_sandbox *sb, void *obj,
                     const char *leaf, struct crl_err *err)
{
    struct pending *p = malloc(sizeof(*p));
    if (!p)
        return crl_err_sys(err, ENOMEM, "spawner request");
    rq->id = ++s->st->next_id;
    rq->nfds = (uint32_t)nfds;
    if (crl_send_fds(s->sock, rq, len, fds, nfds) < 0) {
        int e = errno;
        free(p);
        crl_log_syscall(sb ? sb->id : NULL, e, "sendmsg(spawner %u)", s->idx);
        return crl_err_sys(err, e, "talking to the spawner");
    }
    p->id = rq->id;
    p->kind = kind;
    p->sb = sb;
    p->obj = obj;
    snprintf(p->leaf, sizeof(p->leaf), "%s", leaf ? leaf : "");
    /* append: replies mostly come in order */
    struct pending **pp = &s->pending;
    while (*pp)
        pp = &(*pp)->next;
    p->next = NULL;
    *pp = p;
    s->inflight++;
    return 0;
}

static struct pending *take_pending(struct spawner *s, uint64_t id)
{
    for (struct pending **pp = &s->pending; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct pending *p = *pp;
            *pp = p->next;
            s->inflight--;
            return p;
        }
    return NULL;
}

void crl_ctr_add_running(struct spawner *s, pid_t pid, enum pending_kind kind,
                         struct crl_sandbox *sb, void *obj, const char *leaf)
{
    struct running *r = malloc(sizeof(*r));
    if (!r) {
        crl_error(sb->id, "out of memory tracking pid %d", pid);
        return;
    }
    *r = (struct running){.pid = pid, .kind = kind, .sb = sb, .obj = obj, .next = s->running};
    snprintf(r->leaf, sizeof(r->leaf), "%s", leaf ? leaf : "");
    s->running = r;
}

static struct running *take_running(struct spawner *s, pid_t pid)
{
    for (struct running **pp = &s->running; *pp; pp = &(*pp)->next)
        if ((*pp)->pid == pid) {
            struct running *r = *pp;
            *pp = r->next;
            return r;
        }
    return NULL;
}

void crl_ctr_forget_running(struct spawner *s, pid_t pid)
{
    free(take_running(s, pid));
}

/* A spawner's errno and step, as the API error a user can act on. */
void crl_ctr_spawn_error(const struct crl_spawn_reply *r, const char *what, struct crl_err *err)
{
    const char *step = crl_spawn_step_name(r->step);
    if (r->err == ESRCH && (r->step == CRL_STEP_SETNS || r->step == CRL_STEP_OPEN))
        crl_err_set(err, CRL_E_CONFLICT, "%s: the sandbox is not running", what);
    else if (r->err == ECANCELED)
        crl_err_set(err, CRL_E_CONFLICT, "%s: killed before it started", what);
    else if (r->step == CRL_STEP_EXEC && r->err == ENOENT)
        crl_err_set(err, CRL_E_NOT_FOUND, "%s: executable not found in the sandbox", what);
    else if (r->step == CRL_STEP_EXEC && (r->err == EACCES || r->err == ENOEXEC))
        crl_err_set(err, CRL_E_INVALID, "%s: cannot be executed: %s", what, strerror(r->err));
    else if (r->step == CRL_STEP_CWD)
        crl_err_set(err, r->err == ENOENT ? CRL_E_NOT_FOUND : CRL_E_INVALID,
                    "working directory %s: %s", what, strerror(r->err));
    else if (r->step == CRL_STEP_OPEN && r->err == ENOENT)
        crl_err_set(err, CRL_E_NOT_FOUND, "%s: no such file or directory in the sandbox", what);
    else if (r->step == CRL_STEP_OPEN && r->err == EINVAL)
        crl_err_set(err, CRL_E_INVALID, "%s: not a regular file or directory", what);
    else if (r->step == CRL_STEP_OPEN &&
             (r->err == EISDIR || r->err == ENOTDIR || r->err == ELOOP || r->err == EXDEV))
        crl_err_set(err, CRL_E_INVALID, "%s: %s", what, strerror(r->err));
    else if (r->step == CRL_STEP_OPEN && (r->err == EACCES || r->err == EPERM || r->err == EROFS))
        crl_err_set(err, CRL_E_FORBIDDEN, "%s: %s", what, strerror(r->err));
    else if (r->err == ENOSPC || r->err == EDQUOT)
        crl_err_set(err, CRL_E_NO_SPACE, "%s: the sandbox's disk is full", what);
    else if (r->step == CRL_STEP_TTY)
        crl_err_set(err, CRL_E_CONFLICT, "%s: no terminal to be had in the sandbox (/dev/ptmx): %s",
                    what, strerror(r->err));
    else
        crl_err_sys(err, r->err, "%s: %s%s%s", what, step, r->msg[0] ? ": " : "", r->msg);
}

/* ---- spawner events ---- */

static void spawner_lost(struct spawner *s);

static void on_spawner(struct crl_watch *w, uint32_t ev)
{
    struct spawner *s = w->data;
    struct ctr_state *st = s->st;
    for (;;) {
        struct crl_spawn_reply r;
        int fds[4];
        int nfds = 4;
        ssize_t n = crl_recv_fds(s->sock, &r, sizeof(r), fds, &nfds);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0 || (size_t)n != sizeof(r)) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            spawner_lost(s);
            return;
        }
        if (!s->ready) { /* a restarted spawner's first word is its hello */
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            if (r.op != CRL_SPAWN_REPLY || r.id != 0) {
                spawner_lost(s);
                return;
            }
            crl_timer_stop(st->host->loop, &s->timer);
            s->ready = true;
            s->failures = 0;
            crl_info(NULL, "spawner %u (pid %d) restarted", s->idx, s->pid);
            crl_ctr_adopt_all(s);
            continue;
        }
        if (r.op == CRL_SPAWN_KIDS) {
            crl_ctr_kids(s, &r, nfds == 1 ? fds[0] : -1);
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            continue;
        }
        if (r.op == CRL_SPAWN_EXITED) {
            struct running *run = take_running(s, r.pid);
            if (!run)
                continue; /* a sandbox's init, or a helper we stopped tracking */
            int code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
            if (run->kind == P_SPAWN) {
                crl_ctr_proc_exited(run->sb, run->obj, &r);
            } else if (run->kind == P_RESTORE) {
                crl_ctr_restore_exited(run->sb, run->obj, run->leaf, code);
            } else {
                struct crl_stream_req *t = run->obj;
                crl_ctr_remove_leaf(run->sb, run->leaf);
                t->done(t, code);
            }
            free(run);
            continue;
        }
        struct pending *p = take_pending(s, r.id);
        if (!p) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            crl_warn(NULL, "spawner %u: reply to unknown request %llu", s->idx,
                     (unsigned long long)r.id);
            continue;
        }
        switch (p->kind) {
        case P_CREATE: crl_ctr_create_done(p->sb, &r, fds, nfds); break;
        case P_SPAWN: crl_ctr_spawn_done(s, p->sb, p->obj, &r, fds, nfds); break;
        case P_OPEN: crl_ctr_open_done(p->sb, p->obj, &r, fds, nfds); break;
        case P_STREAM: crl_ctr_stream_started(s, p->sb, p->obj, p->leaf, &r, fds, nfds); break;
        case P_RESTORE: crl_ctr_restore_started(s, p->sb, p->obj, p->leaf, &r, fds, nfds); break;
        case P_ADOPT: crl_ctr_adopt_done(p->sb, &r); break;
        }
        free(p);
    }
    (void)st;
}

static void restart_spawner(struct crl_timer *t)
{
    struct spawner *s = t->data;
    struct crl_err err = CRL_ERR_INIT;
    if (s->st->host->shutting_down)
        return;
    if (crl_ctr_start_spawner(s->st, s->idx, false, &err) < 0) {
        crl_error(NULL, "restarting spawner %u: %s", s->idx, err.msg);
        spawner_lost(s);
    }
}

/* A restarted spawner that never said hello. */
static void hello_overdue(struct crl_timer *t)
{
    struct spawner *s = t->data;
    crl_error(NULL, "spawner %u (pid %d) did not say hello within 10s", s->idx, s->pid);
    spawner_lost(s);
}

/* A spawner died: its sandboxes live on (their PID 1 keeps its socket to
 * it), and the next one takes them over at its hello.  What was in flight
 * fails, what ran through it is killed, and a new one starts on a timer:
 * at once the first time, then backing off to 10 s while restarts keep
 * failing, and never waiting on the loop for its hello. */
static void spawner_lost(struct spawner *s)
{
    struct ctr_state *st = s->st;
    if (s->ready)
        crl_error(NULL, "spawner %u (pid %d) exited; restarting it", s->idx, s->pid);
    else
        s->failures++;
    s->ready = false;
    crl_timer_stop(st->host->loop, &s->timer);
    crl_watch_stop(st->host->loop, &s->w);
    close_fd(&s->sock);
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0); /* killed: prompt */
        s->pid = 0;
    }
    struct crl_spawn_reply r = {.op = CRL_SPAWN_REPLY, .err = EPIPE, .step = CRL_STEP_SYNC};
    snprintf(r.msg, sizeof(r.msg), "the spawner exited");
    while (s->pending) {
        struct pending *p = s->pending;
        s->pending = p->next;
        s->inflight--;
        switch (p->kind) {
        case P_CREATE: crl_ctr_create_done(p->sb, &r, NULL, 0); break;
        case P_SPAWN: crl_ctr_spawn_done(s, p->sb, p->obj, &r, NULL, 0); break;
        case P_OPEN: crl_ctr_open_done(p->sb, p->obj, &r, NULL, 0); break;
        case P_STREAM: crl_ctr_stream_started(s, p->sb, p->obj, p->leaf, &r, NULL, 0); break;
        case P_RESTORE: crl_ctr_restore_started(s, p->sb, p->obj, p->leaf, &r, NULL, 0); break;
        case P_ADOPT: crl_ctr_adopt_done(p->sb, NULL); break;
        }
        free(p);
    }
    struct crl_spawn_reply dead = {.op = CRL_SPAWN_EXITED, .status = SIGKILL};
    while (s->running) {
        struct running *run = s->running;
        s->running = run->next;
        if (run->kind == P_SPAWN && crl_ctr_proc_outlives_spawner(run->sb, run->obj)) {
            /* a session's shell: its stdio did not go through the spawner */
        } else if (run->kind == P_SPAWN) {
            /* Its end would go unheard (the spawner that knew it is
             * gone, PID 1 lives on): it goes, with what it started. */
            crl_ctr_kill(run->sb, run->obj, CRL_KILL_TREE);
            crl_ctr_proc_exited(run->sb, run->obj, &dead);
        } else if (run->kind == P_RESTORE) {
            crl_ctr_restore_exited(run->sb, run->obj, run->leaf, CRL_STREAM_GONE);
        } else {
            struct crl_stream_req *t = run->obj;
            t->done(t, CRL_STREAM_GONE);
        }
        free(run);
    }
    if (st->host->shutting_down)
        return;
    unsigned shift = s->failures < 7 ? s->failures : 7;
    uint64_t delay = s->failures ? 100000000ull << shift : 0; /* 0.1 s, 0.2 s, ... */
    if (delay > 10000000000ull)
        delay = 10000000000ull;
    if (s->failures)
        crl_error(NULL, "spawner %u: restart %u failed; next try in %.1fs", s->idx, s->failures,
                  (double)delay / 1e9);
    crl_timer_start(st->host->loop, &s->timer, delay, restart_spawner, s);
}

/* Start spawner i.  With `wait`, block until its hello (corrald's start:
 * a broken spawner fails it); without, the hello arrives on the loop. */
int crl_ctr_start_spawner(struct ctr_state *st, unsigned i, bool wait, struct crl_err *err)
{
    struct spawner *s = &st->sp[i];
    s->st = st;
    s->idx = i;
    s->sock = -1;
    s->ready = false;
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_SPAWN_MAX_MSG, err) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pair[1], CRL_SPAWN_FD);
    /* corrald blocks signals it takes through a signalfd: the spawner
     * starts with none blocked and default dispositions. */
    posix_spawnattr_t attr;
    crl_spawnattr_init_clean(&attr);
    /* Settings travel in the environment, not argv: a sandbox's init shares
     * the spawner's memory, so `ps` inside a sandbox shows this argv (and
     * only ptrace, which is refused, could read the environment).  Nothing
     * else of corrald's environment is passed on. */
    char workdir_env[PATH_MAX + 32], level_env[48];
    snprintf(workdir_env, sizeof(workdir_env), "CORRAL_SPAWNER_WORKDIR=%s", st->workdir);
    snprintf(level_env, sizeof(level_env), "CORRAL_SPAWNER_LOG=%s",
             crl_log_max_level >= CRL_LOG_DEBUG ? "debug" : "info");
    char *argv[] = {(char *)"corral-spawner", NULL};
    char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", workdir_env, level_env, NULL};
    pid_t pid;
    int r = posix_spawn(&pid, st->spawner_path, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(pair[1]);
    if (r != 0) {
        close(pair[0]);
        return crl_err_sys(err, r, "starting %s", st->spawner_path);
    }
    if (wait) {
        struct timeval tv = {10, 0};
        setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct crl_spawn_reply hello;
        ssize_t n = recv(pair[0], &hello, sizeof(hello), 0);
        if (n != (ssize_t)sizeof(hello)) {
            close(pair[0]);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return crl_err_set(err, CRL_E_INTERNAL, "spawner %s did not start (see its log above)",
                               st->spawner_path);
        }
    }
    crl_set_nonblock(pair[0], 1);
    s->pid = pid;
    s->sock = pair[0];
    s->inflight = 0;
    if (crl_watch_start(st->host->loop, &s->w, s->sock, EPOLLIN, on_spawner, s) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "watching the spawner socket");
    if (wait)
        s->ready = true;
    else
        crl_timer_start(st->host->loop, &s->timer, 10000000000ull, hello_overdue, s);
    return 0;
}
