/* The function backend, corrald's side, shared by its files:
 *
 *   function.c  the ops table; a sandbox's life (create and claim, destroy
 *               and drain, usage, pause); the backend's start and end
 *   keepers.c   the zygotes and the pool of keepers they make, and what a
 *               keeper says (READY, REPLY, EXITED) or that it is gone
 *   calls.c     each call and restore: a FORK to the sandbox's keeper, its
 *               start, its end, its cgroup leaf
 *   files.c     the files API and checkpoints: the scratch dir, opened by
 *               corrald beneath the keeper's descriptor of it
 *
 * A function sandbox is a keeper (keeper.h: a fork of its runtime's
 * zygote, PID 1 of mount, pid, ipc, uts, net, cgroup and time namespaces
 * of the sandbox's own, whose root is a tmpfs of disk_mb with the host's
 * system dirs bound read-only), a cgroup, and an unprivileged uid; each
 * call is a fork of the keeper that jails itself (jail.h).  Namespaces are
 * paid for once per sandbox, and ahead of it: keepers are made while the
 * loop goes on and wait in a pool, so a create claims one (a message) and
 * a call costs a fork.
 *
 * Differences from a container, by design (docs/architecture.md): no
 * persistent processes (no sessions), never root (execs run as the
 * sandbox's uid whatever `user` says), the working directory is always the
 * scratch dir, which is also the root of the files API, and only single
 * files move through it (no tar of directories). */
#ifndef CRL_FUNCTION_FUNCTION_INT_H
#define CRL_FUNCTION_FUNCTION_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../os/cgroup.h"
#include "../../util/cleanup.h"
#include "../../util/loop.h"
#include "../../core/sandbox.h"
#include "zygote_proto.h"

#define N_RUNTIMES 2
extern const char *const crl_fn_runtimes[N_RUNTIMES];

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
    struct keeper *unclaimed; /* building their roots, or pooled (or killed: until reaped) */
    unsigned building, npool;
    struct crl_sandbox *waiting_head, *waiting_tail; /* creates waiting for a keeper */
    unsigned nwaiting;
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
    struct crl_cgroup_reclaim last_pause; /* what the last pause gave back */
    struct crl_timer timer;               /* destroy's drain */
    unsigned drain_tries;
    struct crl_sandbox *next_waiting;
};

extern struct fn_state *crl_fn_state;

/* ---- function.c: a sandbox's life ---- */

/* The keeper becomes the sandbox's; completes with crl_sandbox_created. */
void crl_fn_claim(struct crl_sandbox *sb, struct keeper *k);
/* A create that cannot finish: undone, then answered, once all it made is gone. */
void crl_fn_create_fail(struct crl_sandbox *sb, const struct crl_err *err);
/* A sandbox going away: wait (on t, its timer) until all of it is gone, then release. */
void crl_fn_drain(struct crl_timer *t);

/* ---- keepers.c: zygotes and keepers ---- */

int crl_fn_zygote_start(struct fn_state *st, unsigned rt, struct crl_err *err);
/* Ask the zygote for keepers until the pool (and what comes) is full. */
void crl_fn_pool_fill(struct zygote *z);
/* A pooled keeper, off the list; NULL if none is ready. */
struct keeper *crl_fn_pool_take(struct zygote *z);
/* A create waits for a keeper, first come, first served; one that goes
 * meanwhile leaves the queue. */
void crl_fn_wait(struct zygote *z, struct crl_sandbox *sb);
void crl_fn_unwait(struct zygote *z, struct crl_sandbox *sb);
/* A keeper of no more use: killed; what was in flight on it ends as if
 * killed; a sandbox that did not ask for this has failed. */
void crl_fn_keeper_lost(struct keeper *k, const char *why);
void crl_fn_keeper_free(struct keeper *k);

/* ---- calls.c: calls and restores ---- */

/* The keeper of a sandbox that can take calls, or NULL with err. */
struct keeper *crl_fn_serving(struct crl_sandbox *sb, struct crl_err *err);
/* Did the call start?  1 (yes), 0 (not known yet) or -1 (never: handed back). */
int crl_fn_settle(struct crl_proc *p, bool now);
/* A call ended, or never started: its leaf, and what it left there, go. */
void crl_fn_proc_gone(struct fn_sandbox *f, struct crl_proc *p);
/* The keeper's REPLY to a FORK, and its EXITED. */
void crl_fn_call_replied(struct keeper *k, const struct crl_zyg_reply *r, int *fds, int nfds);
void crl_fn_call_exited(struct keeper *k, const struct crl_zyg_reply *r);
/* Everything in flight on a keeper that is gone: a FORK not answered never
 * started (its owner hears `err`); a call that started ended as if killed. */
void crl_fn_calls_lost(struct keeper *k, const struct crl_err *err);
/* A restore's child ended (wait status), or never ran (err). */
void crl_fn_restore_end(struct fn_restore *rs, int status, const struct crl_err *err);

/* The ops of calls.c and files.c. */
int crl_fn_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err);
int crl_fn_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope);
int crl_fn_signal(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
                  struct crl_err *err);
int crl_fn_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err);
int crl_fn_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err);
int crl_fn_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err);
int crl_fn_snapshot(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err);

#endif
