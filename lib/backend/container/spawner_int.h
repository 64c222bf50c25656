/* The container spawner, shared by its files (spawn_proto.h says what a
 * spawner is for):
 *
 *   spawner.c         the loop, replies, creating a sandbox's PID 1, reaping
 *   spawner_exec.c    entering a sandbox: the identity, an exec (forked by
 *                     the sandbox's PID 1), opening a path inside it
 *   spawner_stream.c  a forked helper inside the sandbox: tar in and out,
 *                     an upload, a checkpoint's restore */
#ifndef CRL_CONTAINER_SPAWNER_INT_H
#define CRL_CONTAINER_SPAWNER_INT_H

#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "../../util/rawsys.h"
#include "init.h"
#include "spawn_proto.h"

#define INIT_STACK (64 * 1024)
#define STAGE_STACK (64 * 1024)
/* Something the loop watches: `ready` runs when its descriptor is readable. */
struct spawner_watch {
    void (*ready)(struct spawner_watch *w);
};

/* A PID 1 we created: its stack is ours to free once it is reaped.  Once it
 * is up, the socket it forks the sandbox's commands through (spawn_proto.h).
 * One another spawner created (adopted: no stack, not our child) is
 * forgotten when its socket closes. */
struct init_proc {
    pid_t pid;
    void *stack;      /* NULL: adopted */
    int sock;         /* -1 until it reports, and once it is gone */
    uint64_t list_id; /* adopted: the LIST we asked it, which its KIDS answers */
    char sandbox[40]; /* adopted: corrald's id of its sandbox, for the KIDS */
    struct spawner_watch w;
    struct init_proc *next;
};

/* A sandbox whose PID 1 is still building its root. */
struct pending_create {
    struct spawner_watch w; /* on sock */
    uint64_t id;
    pid_t pid;
    int pidfd;
    int sock; /* our end of the create socket */
    struct init_proc *ip;
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
    int last_cap;       /* /proc/sys/kernel/cap_last_cap */
    int init_fd;        /* O_PATH of corral-init */
    bool oom_protected; /* we have oom_score_adj -1000, which no process of a sandbox may */
    struct init_proc *inits;
    struct pending_create *pending;
    char *msg;     /* receive buffer, CRL_SPAWN_MAX_MSG */
    void **graves; /* freed after this turn's events (crl_spawner_free_later) */
    size_t n_graves, cap_graves;
};

extern struct spawner crl_spawner; /* the one of this process */

/* ---- spawner.c ---- */

/* Answer request `id`: an errno and the step that failed, or a pid and fds. */
void crl_spawner_reply(uint64_t id, int err, unsigned step, pid_t pid, const int *fds, int nfds,
                       const char *msg);
void crl_spawner_send_reply(const struct crl_spawn_reply *r, const int *fds, int nfds);
/* A process of a sandbox's ended: EXITED, with its status and usage. */
void crl_spawner_send_exited(pid_t pid, int status, int64_t utime_us, int64_t stime_us,
                             int64_t maxrss_kb);
/* Free p, which holds the watch w, once the loop has handled this turn's
 * events: one of them may still name it.  The watch is off from now on. */
void crl_spawner_free_later(struct spawner_watch *w, void *p);
/* Put `pid` in the cgroup whose cgroup.procs is open at procs_fd. */
int crl_spawner_write_pid(int procs_fd, pid_t pid);

/* ---- spawner_exec.c ---- */

/* Join a sandbox's user namespace (pidfd of its init) as uid:gid, with
 * Docker's capabilities for root and none for anyone else.  Raw syscalls:
 * runs in CLONE_VM children.  0 or -errno, the failed step in *step. */
NO_SAN long crl_spawner_enter_identity(int pid1fd, uid_t uid, gid_t gid, int last_cap, int *step);
/* EXEC: ask the sandbox's PID 1 to fork the command. */
void crl_spawner_handle_exec(const struct crl_spawn_req *rq, int *fds, int nfds);
/* A PID 1's socket is readable: a fork done, or a child's end. */
void crl_spawner_init_ready(struct spawner_watch *w);
/* A PID 1 is gone (its socket closed, or it was reaped): what it was
 * starting failed, what it ran was killed with it. */
void crl_spawner_init_gone(struct init_proc *ip);
void crl_spawner_handle_open(const struct crl_spawn_req *rq, int *fds, int nfds);
/* ADOPT: take the socket of a PID 1 another spawner created. */
void crl_spawner_handle_adopt(const struct crl_spawn_req *rq, int *fds, int nfds);

/* ---- spawner_stream.c ---- */

void crl_spawner_handle_stream(const struct crl_spawn_req *rq, int *fds, int nfds);

#endif
