/* The zygotes, and the keepers they make: function_int.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/host.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "function_int.h"

/* ---- keepers ---- */

void crl_fn_keeper_free(struct keeper *k)
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

/* Off the counts of keepers building and pooled. */
static void uncount(struct zygote *z, enum keeper_state state)
{
    if (state == K_BUILDING)
        z->building--;
    else if (state == K_POOLED)
        z->npool--;
}

/* Off the list of keepers nobody has claimed (if it is on it). */
static void unlink_keeper(struct zygote *z, struct keeper *k)
{
    for (struct keeper **pp = &z->unclaimed; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            return;
        }
}

/* A building or pooled keeper, off the list and its count. */
static void unlist(struct zygote *z, struct keeper *k)
{
    unlink_keeper(z, k);
    uncount(z, k->state);
}

/* A pooled keeper, off the list; NULL if none is ready. */
struct keeper *crl_fn_pool_take(struct zygote *z)
{
    for (struct keeper *k = z->unclaimed; k; k = k->next)
        if (k->state == K_POOLED) {
            unlist(z, k);
            return k;
        }
    return NULL;
}

void crl_fn_wait(struct zygote *z, struct crl_sandbox *sb)
{
    ((struct fn_sandbox *)sb->priv)->next_waiting = NULL;
    if (z->waiting_tail)
        ((struct fn_sandbox *)z->waiting_tail->priv)->next_waiting = sb;
    else
        z->waiting_head = sb;
    z->waiting_tail = sb;
    z->nwaiting++;
}

void crl_fn_unwait(struct zygote *z, struct crl_sandbox *sb)
{
    struct crl_sandbox *prev = NULL;
    for (struct crl_sandbox *w = z->waiting_head; w;
         prev = w, w = ((struct fn_sandbox *)w->priv)->next_waiting) {
        if (w != sb)
            continue;
        struct crl_sandbox *next = ((struct fn_sandbox *)sb->priv)->next_waiting;
        if (prev)
            ((struct fn_sandbox *)prev->priv)->next_waiting = next;
        else
            z->waiting_head = next;
        if (z->waiting_tail == sb)
            z->waiting_tail = prev;
        z->nwaiting--;
        return;
    }
}

/* The create that has waited longest, off the queue; NULL if none. */
static struct crl_sandbox *waiting_pop(struct zygote *z)
{
    struct crl_sandbox *sb = z->waiting_head;
    if (sb)
        crl_fn_unwait(z, sb);
    return sb;
}

/* Creates waiting for a keeper fail with `err`, rather than wait for
 * keepers that will not come, or would fail alike. */
static void fail_waiting(struct zygote *z, const struct crl_err *err)
{
    for (struct crl_sandbox *sb; (sb = waiting_pop(z));)
        crl_fn_create_fail(sb, err);
}

/* A keeper is of no more use: it died, broke the protocol, or its sandbox
 * goes.  It is killed (the pid namespace and everything in it end with
 * it); what was in flight on it ends as if killed; a sandbox that did not
 * ask for this has failed. */
void crl_fn_keeper_lost(struct keeper *k, const char *why)
{
    if (k->state == K_DEAD)
        return;
    struct zygote *z = &k->st->zy[k->runtime];
    enum keeper_state was = k->state;
    k->state = K_DEAD;
    if (was == K_BUILDING) /* at the zygote's low priority: dying must not wait for idle time */
        setpriority(PRIO_PROCESS, k->pid, 0);
    if (syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(NULL, errno, "pidfd_send_signal(keeper %d)", (int)k->pid);
    struct crl_loop *loop = k->st->host->loop;
    if (k->w_sock.active)
        crl_watch_stop(loop, &k->w_sock);
    close_fd(&k->sock);
    if (was == K_BUILDING || was == K_POOLED) {
        uncount(z, was);
        if (why)
            crl_warn(NULL, "function runtime %s: keeper %d: %s", crl_fn_runtimes[k->runtime],
                     (int)k->pid, why);
        /* Our child, reaped once it has died (a kill takes a moment):
         * until its pidfd says so it stays on the list, dead, where
         * keeper_exited, or the shutdown, finds it. */
        if (!k->w_pid.active) {
            unlink_keeper(z, k);
            crl_fn_keeper_free(k);
        }
        /* A pooled keeper killed from outside is made again; one that could
         * not build its root is not, until a create asks (no fork storm). */
        if (was == K_POOLED)
            crl_fn_pool_fill(z);
        return;
    }
    struct crl_sandbox *sb = k->sb;
    struct fn_sandbox *f = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    crl_err_set(&err, CRL_E_INTERNAL, "the sandbox's keeper (pid %d) %s", (int)k->pid,
                why ? why : "is gone");
    if (sb->state == CRL_SB_CREATING) {
        crl_fn_create_fail(sb, &err);
        return;
    }
    crl_fn_calls_lost(k, &err);
    if (f && !f->releasing)
        crl_sandbox_failed(sb, "init_exited", "%s", err.msg);
}

/* A keeper could not build its root (`e` and `msg`: why, if it said;
 * else it exited): it is lost, and the creates waiting for one fail with
 * its error, rather than wait for keepers that would fail alike. */
static void build_failed(struct keeper *k, int e, const char *msg, int msg_len)
{
    struct zygote *z = &k->st->zy[k->runtime];
    if (e)
        crl_err_sys(&z->last_err, e, "function runtime %s: building a sandbox's root: %.*s",
                    crl_fn_runtimes[k->runtime], msg_len, msg);
    else
        crl_err_set(&z->last_err, CRL_E_INTERNAL,
                    "function runtime %s: a keeper exited while building a sandbox's root",
                    crl_fn_runtimes[k->runtime]);
    crl_error(NULL, "%s", z->last_err.msg);
    struct crl_err err = z->last_err;
    crl_fn_keeper_lost(k, NULL);
    fail_waiting(z, &err);
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
        unlink_keeper(&k->st->zy[k->runtime], k);
        crl_fn_keeper_free(k);
        return;
    }
    if (k->state == K_BUILDING) {
        /* Why, if it said (its READY may still wait in the socket). */
        struct crl_zyg_reply r;
        int fds[2], nfds = 2;
        ssize_t n = crl_recv_fds(k->sock, &r, sizeof(r), fds, &nfds);
        close_fds(fds, nfds);
        bool said = n == (ssize_t)sizeof(r) && r.op == CRL_ZYG_READY && r.err;
        build_failed(k, said ? r.err : 0, r.msg, said ? (int)sizeof(r.msg) : 0);
        return;
    }
    crl_fn_keeper_lost(k, "exited");
    /* A sandbox going away waits for this: drain now, not on the next tick. */
    struct crl_sandbox *sb = k->sb;
    struct fn_sandbox *f = sb ? sb->priv : NULL;
    if (f && f->releasing && crl_timer_armed(&f->timer)) {
        crl_timer_stop(sb->host->loop, &f->timer);
        crl_fn_drain(&f->timer);
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
        build_failed(k, r->err ? r->err : EPROTO, r->err ? r->msg : "no descriptors",
                     (int)sizeof(r->msg));
        return false;
    }
    k->root_fd = fds[0];
    k->scratch_fd = fds[1];
    struct crl_sandbox *sb = waiting_pop(z);
    if (sb) {
        unlist(z, k);
        crl_fn_claim(sb, k);
    } else {
        z->building--;
        k->state = K_POOLED;
        z->npool++;
    }
    crl_fn_pool_fill(z);
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
                crl_fn_keeper_lost(k, why);
                return;
            }
        } else if (ok && r.op == CRL_ZYG_REPLY && k->state == K_SERVING) {
            crl_fn_call_replied(k, &r, fds, nfds);
        } else if (ok && r.op == CRL_ZYG_EXITED && k->state == K_SERVING && nfds == 0) {
            crl_fn_call_exited(k, &r);
        } else {
            close_fds(fds, nfds);
            crl_fn_keeper_lost(k, n == 0 ? "closed its socket" : "broke the protocol");
            return;
        }
        if (k->state == K_DEAD)
            return;
    }
    (void)ev;
}

/* ---- zygotes ---- */

static void on_zygote(struct crl_watch *w, uint32_t ev);

int crl_fn_zygote_start(struct fn_state *st, unsigned rt, struct crl_err *err)
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
    char *argv[] = {(char *)"corral-zygote", (char *)"--runtime", (char *)crl_fn_runtimes[rt],
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
                           crl_fn_runtimes[rt]);
    }
    crl_set_nonblock(pair[0], 1);
    z->pid = pid;
    z->sock = pair[0];
    if (crl_watch_start(st->host->loop, &z->w, z->sock, EPOLLIN, on_zygote, z) < 0) {
        close_fd(&z->sock);
        return crl_err_set(err, CRL_E_INTERNAL, "watching the zygote");
    }
    crl_info(NULL, "function runtime %s: zygote pid %d", crl_fn_runtimes[rt], (int)pid);
    return 0;
}

/* A zygote that died: the keepers it was making are lost (those it made
 * live on: they talk to us, not to it).  The next need starts a new one. */
static void zygote_lost(struct zygote *z)
{
    crl_warn(NULL, "function runtime %s: zygote %d is gone", crl_fn_runtimes[z->runtime],
             (int)z->pid);
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
            crl_fn_pool_fill(z);
            return;
        }
        if (z->requested > 0)
            z->requested--;
        struct keeper *k = r.err || nfds != 2 ? NULL : calloc(1, sizeof(*k));
        if (!k) {
            close_fds(fds, nfds);
            crl_err_sys(&z->last_err, r.err ? r.err : ENOMEM,
                        "function runtime %s: making a keeper: %.*s", crl_fn_runtimes[z->runtime],
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
            siginfo_t si; /* reaped: nothing else will */
            setpriority(PRIO_PROCESS, k->pid, 0);
            waitid((idtype_t)P_PIDFD, (id_t)k->pidfd, &si, WEXITED | __WALL);
            crl_fn_keeper_free(k);
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
void crl_fn_pool_fill(struct zygote *z)
{
    struct fn_state *st = z->st;
    struct crl_err err = CRL_ERR_INIT;
    if (st->host->shutting_down) {
        crl_err_set(&err, CRL_E_UNAVAILABLE, "corrald is shutting down");
        fail_waiting(z, &err);
        return;
    }
    unsigned want = st->host->cfg.function_pool + z->nwaiting;
    while (z->npool + z->building + z->requested < want) {
        if (z->sock < 0 && crl_fn_zygote_start(st, z->runtime, &err) < 0) {
            crl_warn(NULL, "function runtime %s: %s", crl_fn_runtimes[z->runtime], err.msg);
            z->last_err = err;
            if (!z->requested && !z->building)
                fail_waiting(z, &err);
            return;
        }
        struct crl_zyg_req rq = {.id = ++st->next_id, .op = CRL_ZYG_KEEPER};
        if (send(z->sock, &rq, sizeof(rq), MSG_NOSIGNAL) != (ssize_t)sizeof(rq)) {
            crl_log_syscall(NULL, errno, "asking the %s zygote for a keeper",
                            crl_fn_runtimes[z->runtime]);
            zygote_lost(z);
            continue; /* started again on the next turn */
        }
        z->requested++;
    }
}
