/* The container spawner, shared by its files (spawn_proto.h says what a
 * spawner is for):
 *
 *   spawner.c         the loop, replies, creating a sandbox's PID 1, reaping
 *   spawner_exec.c    entering a sandbox: the identity, an exec's two
 *                     CLONE_VM stages, opening a path inside it
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

#include "init.h"
#include "spawn_proto.h"

#define NO_SAN __attribute__((no_sanitize("address", "undefined")))
#define INIT_STACK (64 * 1024)
#define STAGE_STACK (64 * 1024)
#define ALL_NS                                                                                 \
    (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | \
     CLONE_NEWCGROUP)

/* Capabilities root keeps inside a sandbox (Docker's default set); the rest
 * leave the bounding set before anything of the user's runs. */
#define KEEP_CAPS                                                                                \
    ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FSETID) |                   \
     (1ull << CAP_FOWNER) | (1ull << CAP_MKNOD) | (1ull << CAP_NET_RAW) | (1ull << CAP_SETGID) | \
     (1ull << CAP_SETUID) | (1ull << CAP_SETFCAP) | (1ull << CAP_SETPCAP) |                      \
     (1ull << CAP_NET_BIND_SERVICE) | (1ull << CAP_SYS_CHROOT) | (1ull << CAP_KILL) |            \
     (1ull << CAP_AUDIT_WRITE))

/* A PID 1 we created: its stack is ours to free once it is reaped. */
struct init_proc {
    pid_t pid;
    void *stack;
    struct init_proc *next;
};

/* A sandbox whose PID 1 is still building its root. */
struct pending_create {
    uint64_t id;
    pid_t pid;
    int pidfd;
    int sock; /* our end of the create socket */
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
    int last_cap; /* /proc/sys/kernel/cap_last_cap */
    int init_fd;  /* O_PATH of corral-init */
    struct init_proc *inits;
    struct pending_create *pending;
    char *msg; /* receive buffer, CRL_SPAWN_MAX_MSG */
};

extern struct spawner crl_spawner; /* the one of this process */

/* ---- spawner.c ---- */

/* Answer request `id`: an errno and the step that failed, or a pid and fds. */
void crl_spawner_reply(uint64_t id, int err, unsigned step, pid_t pid, const int *fds, int nfds,
                       const char *msg);
void crl_spawner_send_reply(const struct crl_spawn_reply *r, const int *fds, int nfds);
/* A process of ours ended: EXITED, with its status and usage. */
void crl_spawner_send_exited(pid_t pid, int status, const struct rusage *ru);
/* The text /proc/PID/timens_offsets takes. */

/* ---- spawner_exec.c ---- */

/* Join a sandbox's user namespace (pidfd of its init) as uid:gid, with
 * Docker's capabilities for root and none for anyone else.  Raw syscalls:
 * runs in CLONE_VM children.  0 or -errno, the failed step in *step. */
NO_SAN long crl_spawner_enter_identity(int pid1fd, uid_t uid, gid_t gid, int last_cap, int *step);
void crl_spawner_handle_exec(const struct crl_spawn_req *rq, int *fds, int nfds);
void crl_spawner_handle_open(const struct crl_spawn_req *rq, int *fds, int nfds);
/* A reaped pid that was an exec's stage: handled (true), or not an exec's. */
bool crl_spawner_exec_reaped(pid_t pid, int status, const struct rusage *ru);

/* ---- spawner_stream.c ---- */

void crl_spawner_handle_stream(const struct crl_spawn_req *rq, int *fds, int nfds);

#endif
