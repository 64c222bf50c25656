#include "zygote.h"

#include <errno.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../helper/seccomp.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "keeper.h"

static struct sock_fprog g_filter;
static int g_corrald = -1; /* a pidfd: readable once corrald has ended */

/* Die with corrald, even when busy (a keeper building its root at nice 19
 * reads no socket for a while): the parent-death signal, and a look at
 * whether corrald ended before it was set.  A keeper's parent is corrald
 * (CLONE_PARENT) and the signal follows the thread that made the zygote,
 * corrald's main one, which lives as long as corrald. */
static void die_with_corrald(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct pollfd p = {.fd = g_corrald, .events = POLLIN};
    if (g_corrald < 0 || poll(&p, 1, 0) != 0)
        _exit(0);
}

static void send_reply(const struct crl_zyg_reply *r, const int *fds, int nfds)
{
    if (crl_send_fds(CRL_ZYG_FD, r, sizeof(*r), fds, nfds) < 0) {
        crl_log_syscall(NULL, errno, "zygote: send to corrald");
        _exit(1); /* corrald is gone: so are we */
    }
}

/* A keeper: a fork of ours, PID 1 of new mount, pid, ipc and uts
 * namespaces (the zygote is single-threaded, so a raw clone3 is a fork),
 * and corrald's child (CLONE_PARENT), which reaps it the moment it ends,
 * so that a sandbox's cgroup empties without waiting on us; corrald gets
 * the other end of its socket and its pidfd.  Its network, cgroup and time
 * namespaces come at claim, when it knows whose it is. */
static void make_keeper(const struct crl_zygote_runtime *rt, uint64_t id, const char *root_dir)
{
    struct crl_zyg_reply r = {.id = id, .op = CRL_ZYG_REPLY};
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_ZYG_MAX_MSG, NULL) < 0) {
        r.err = errno;
        snprintf(r.msg, sizeof(r.msg), "socketpair");
        send_reply(&r, NULL, 0);
        return;
    }
    int pidfd = -1;
    struct clone_args ca = {
        .flags =
            CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD | CLONE_PARENT,
        .pidfd = (uint64_t)(uintptr_t)&pidfd,
        .exit_signal = 0, /* clone3 allows no other with CLONE_PARENT: corrald waits with __WALL */
    };
    pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
    if (pid == 0) {
        die_with_corrald();
        if (rt->after_fork)
            rt->after_fork();
        close(pair[0]);
        crl_keeper_main(rt, pair[1], root_dir, &g_filter);
    }
    close(pair[1]);
    if (pid < 0) {
        r.err = errno;
        snprintf(r.msg, sizeof(r.msg), "clone3");
        close(pair[0]);
        send_reply(&r, NULL, 0);
        return;
    }
    r.pid = pid;
    int fds[2] = {pair[0], pidfd};
    send_reply(&r, fds, 2);
    close(pair[0]);
    close(pidfd);
}

int crl_zygote_main(const struct crl_zygote_runtime *rt, const char *root_dir)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_seccomp_build(CRL_SECCOMP_FUNCTION, &g_filter, &err) < 0) {
        crl_error(NULL, "zygote %s: %s", rt->name, err.msg);
        return 1;
    }
    g_corrald = (int)syscall(SYS_pidfd_open, getppid(), 0);
    die_with_corrald();
    /* Keepers inherit it, and nothing of ours is any sandbox's to read. */
    prctl(PR_SET_DUMPABLE, 0);
    /* Keepers take SIGCHLD through a signalfd: blocked from the start. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    if (rt->prepare() < 0) {
        crl_error(NULL, "zygote %s: could not start", rt->name);
        return 1;
    }
    struct crl_zyg_reply hello = {.op = CRL_ZYG_HELLO};
    send_reply(&hello, NULL, 0);
    /* Keepers are made ahead of creates, with what the machine has to
     * spare: the zygote, and a keeper until its root is built, run at the
     * lowest priority (nice 19, not SCHED_IDLE: a task of the idle class
     * can starve for seconds on a busy host, and one killed or told to end
     * must get to run), so making them hardly slows what is being served. */
    if (setpriority(PRIO_PROCESS, 0, 19) < 0)
        crl_log_syscall(NULL, errno, "zygote %s: setpriority(19)", rt->name);
    for (;;) {
        struct crl_zyg_req rq;
        int fds[CRL_ZYG_MAX_FDS], nfds = CRL_ZYG_MAX_FDS;
        ssize_t len = crl_recv_fds(CRL_ZYG_FD, &rq, sizeof(rq), fds, &nfds);
        if (len < 0 && errno == EINTR)
            continue;
        /* corrald is gone (its keepers see their sockets close): so are
         * we, at once.  Not exit(): nothing of ours needs flushing, and
         * under the sanitizer build exit() runs a leak check over the
         * embedded interpreter's heap (its own allocations, 2 MB of them)
         * for 3.5 s, which every corrald's stop waited for. */
        if (len <= 0)
            _exit(0);
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (len == (ssize_t)sizeof(rq) && rq.op == CRL_ZYG_KEEPER)
            make_keeper(rt, rq.id, root_dir);
        else
            crl_warn(NULL, "zygote %s: a request it does not know", rt->name);
    }
}
