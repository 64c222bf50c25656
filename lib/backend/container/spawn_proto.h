/* The protocol between corrald and its container spawners.
 *
 * A spawner (src/corral-spawner) is a small single-threaded helper that
 * corrald starts at boot.  Everything that enters a sandbox's namespaces runs
 * there: creating a sandbox's PID 1, spawning execs, opening files inside a
 * sandbox, streaming files and tar in and out, restoring checkpoints.
 * corrald itself never shares memory with a process inside a sandbox, and
 * the spawner holds no secret of corrald's.
 *
 * Messages are SOCK_SEQPACKET datagrams: a fixed struct, then a string area;
 * descriptors travel with SCM_RIGHTS.  Both ends are built from one tree, so
 * the structs are the wire format. */
#ifndef CRL_CONTAINER_SPAWN_PROTO_H
#define CRL_CONTAINER_SPAWN_PROTO_H

#include <stdint.h>

#include "../../util/timens.h"

#define CRL_SPAWN_MAX_MSG (2u << 20)
#define CRL_SPAWN_MAX_CGROUP_FDS 6
#define CRL_SPAWN_MAX_LAYERS 125 /* CRL_IMAGE_MAX_LAYERS */
#define CRL_SPAWN_MAX_VOLUMES 8  /* CRL_SPEC_MAX_VOLUMES */
#define CRL_SPAWN_VOLUME_PATH 256
#define CRL_SPAWN_MAX_FDS \
    (1 + CRL_SPAWN_MAX_LAYERS + CRL_SPAWN_MAX_CGROUP_FDS + CRL_SPAWN_MAX_VOLUMES)
#define CRL_SPAWN_FD 3 /* the spawner's end of the socket, in the spawner */

enum crl_spawn_op {
    CRL_SPAWN_CREATE = 1, /* fds: image layer mounts (top first), netns, cgroup.procs...,
                             volume mounts;
                             strings: the run-time files (struct crl_spawn_create) */
    CRL_SPAWN_EXEC,       /* fds: stdin, stdout, stderr, cgroup.procs...; to the spawner
                             that created the sandbox, whose PID 1 forks it */
    CRL_SPAWN_OPEN,       /* fds: sandbox PID 1 pidfd */
    CRL_SPAWN_STREAM,     /* fds: pidfd, data pipe, message pipe, cgroup.procs... */
    CRL_SPAWN_RESTORE,    /* as STREAM, the data a checkpoint's tar (read-only); applied
                             at / of the overlay as the sandbox's root (crl_tar_apply) */
    CRL_SPAWN_ADOPT,      /* fds: sandbox PID 1 pidfd; a spawner that did not create
                             the sandbox takes its PID 1's socket (u.adopt) */
    CRL_SPAWN_REPLY = 100,
    CRL_SPAWN_EXITED, /* a child of the spawner ended (unsolicited) */
    CRL_SPAWN_KIDS,   /* after an ADOPT (unsolicited): pid is the PID 1's, size the
                         number n of its running children, msg the sandbox's id,
                         and the fd a memfd of their n int32 pids in the sandbox */
};

/* Where sandbox creation failed, for the error message. */
enum crl_spawn_step {
    CRL_STEP_NONE = 0,
    CRL_STEP_CLONE,
    CRL_STEP_IDMAP,
    CRL_STEP_CGROUP,
    CRL_STEP_NETNS,
    CRL_STEP_SYNC,
    CRL_STEP_CREDS,
    CRL_STEP_CGROUPNS,
    CRL_STEP_TIMENS,
    CRL_STEP_TMPFS,
    CRL_STEP_FILES,
    CRL_STEP_LOWER,
    CRL_STEP_VOLUME,
    CRL_STEP_OVERLAY,
    CRL_STEP_PROC,
    CRL_STEP_DEV,
    CRL_STEP_SYS,
    CRL_STEP_TMP,
    CRL_STEP_MASK,
    CRL_STEP_PIVOT,
    CRL_STEP_SECCOMP,
    CRL_STEP_SETNS,
    CRL_STEP_CWD,
    CRL_STEP_EXEC,
    CRL_STEP_OPEN,
    CRL_STEP_TTY,
    CRL_STEP__COUNT
};

static inline const char *crl_spawn_step_name(uint32_t step)
{
    static const char *const names[CRL_STEP__COUNT] = {
        [CRL_STEP_NONE] = "spawn",
        [CRL_STEP_CLONE] = "clone into new namespaces",
        [CRL_STEP_IDMAP] = "idmapped mount of the image",
        [CRL_STEP_CGROUP] = "cgroup attach",
        [CRL_STEP_NETNS] = "network namespace",
        [CRL_STEP_SYNC] = "sync with the spawner",
        [CRL_STEP_CREDS] = "switch to sandbox root",
        [CRL_STEP_CGROUPNS] = "cgroup namespace",
        [CRL_STEP_TIMENS] = "time namespace",
        [CRL_STEP_TMPFS] = "mount the writable layer (tmpfs)",
        [CRL_STEP_FILES] = "write /etc/hosts, /etc/hostname, /etc/resolv.conf",
        [CRL_STEP_LOWER] = "attach the image layer",
        [CRL_STEP_VOLUME] = "mount a volume",
        [CRL_STEP_OVERLAY] = "mount overlayfs",
        [CRL_STEP_PROC] = "mount /proc",
        [CRL_STEP_DEV] = "populate /dev",
        [CRL_STEP_SYS] = "mount /sys",
        [CRL_STEP_TMP] = "make /tmp",
        [CRL_STEP_MASK] = "mask /proc",
        [CRL_STEP_PIVOT] = "pivot_root",
        [CRL_STEP_SECCOMP] = "seccomp",
        [CRL_STEP_SETNS] = "enter the sandbox",
        [CRL_STEP_CWD] = "change to the working directory",
        [CRL_STEP_EXEC] = "execute",
        [CRL_STEP_OPEN] = "open",
        [CRL_STEP_TTY] = "open a terminal",
    };
    return step < CRL_STEP__COUNT && names[step] ? names[step] : "spawn";
}

/* The run-time files of a sandbox (/etc/hosts, ...) come in the string
 * area as "name\0contents\0" pairs, names relative to /etc. */
#define CRL_SPAWN_MAX_FILES 2048

struct crl_spawn_create {
    uint32_t uid_base; /* sandbox ids 0..id_count-1 map to uid_base.. on the host */
    uint32_t id_count;
    uint32_t disk_mb;
    uint32_t n_layers;
    uint32_t n_cgroup_fds;
    struct crl_timens timens;
    char hostname[64];
    char workdir[256]; /* an empty host directory every sandbox mounts its tmpfs over */
    uint32_t n_volumes;
    uint32_t volumes_ro; /* bit i: volume i is mounted read-only */
    /* where each goes in the sandbox: absolute, normal, checked by the spec */
    char volume_paths[CRL_SPAWN_MAX_VOLUMES][CRL_SPAWN_VOLUME_PATH];
};

#define CRL_EXEC_F_SETSID 1u
/* A terminal of the sandbox's own (its /dev/ptmx) as the command's
 * controlling terminal and stdio, rows x cols: the request brings no
 * stdio, and the reply brings the terminal's master after the pidfd. */
#define CRL_EXEC_F_TTY 2u
/* A session's shell, which should outlive corrald: three more fds follow
 * the stdio, corrald's own ends of it (stdin's writing end, stdout's and
 * stderr's reading ends), for the sandbox's PID 1 to keep while the shell
 * runs (the reply's `kept` says where); never with CRL_EXEC_F_TTY. */
#define CRL_EXEC_F_KEEP 4u

struct crl_spawn_exec {
    int32_t pid1;      /* the sandbox's PID 1, as the spawner sees it */
    uint32_t uid, gid; /* inside the sandbox */
    uint32_t n_cgroup_fds;
    uint32_t argc, envc; /* strings: argv..., env..., cwd */
    uint32_t flags;
    uint16_t rows, cols; /* CRL_EXEC_F_TTY */
};

struct crl_spawn_open {
    int32_t flags; /* open(2) flags; O_CLOEXEC/O_NONBLOCK are added */
    uint32_t mode;
    uint32_t uid, gid; /* who opens, inside the sandbox */
};

struct crl_spawn_stream {
    uint32_t kind; /* enum crl_stream_kind; strings: the path (FS: the request) */
    uint32_t mode; /* FILE_IN; WATCH: 1 recursive */
    uint32_t uid, gid;
    uint32_t n_cgroup_fds;
};

struct crl_spawn_adopt {
    int32_t pid1;     /* the sandbox's PID 1, as the spawner sees it */
    char sandbox[40]; /* its id, which the KIDS that follows names in `msg` */
};

struct crl_spawn_req {
    uint32_t op;
    uint32_t nfds;
    uint64_t id;
    union {
        struct crl_spawn_create create;
        struct crl_spawn_exec exec;
        struct crl_spawn_adopt adopt;
        struct crl_spawn_open open;
        struct crl_spawn_stream stream;
    } u;
    uint32_t strings_len;
    char strings[];
};

/* For OPEN, `kind` says what was opened. */
enum crl_open_kind { CRL_OPEN_REGULAR = 1, CRL_OPEN_DIRECTORY = 2 };
/* For EXEC, `kind` says which descriptors came, in this order. */
#define CRL_EXEC_R_PIDFD 1u /* its pidfd (none when it has ended already) */
#define CRL_EXEC_R_TTY 2u   /* its terminal's master */

struct crl_spawn_reply {
    uint32_t op; /* CRL_SPAWN_REPLY or CRL_SPAWN_EXITED */
    int32_t err; /* errno, 0 on success */
    uint64_t id; /* the request's id; 0 for EXITED */
    int32_t pid;
    int32_t ns_pid; /* EXEC: the pid as the sandbox sees it */
    uint32_t step;  /* enum crl_spawn_step where err happened */
    int32_t status; /* EXITED: wait status */
    uint32_t kind;  /* OPEN: enum crl_open_kind; EXEC: CRL_EXEC_R_* */
    int64_t size;   /* OPEN: st_size */
    int64_t utime_us, stime_us,
        maxrss_kb; /* EXITED: rusage of the process and its waited children */
    int32_t kept;  /* EXEC with CRL_EXEC_F_KEEP: crl_init_note's, or -1 */
    char msg[256];
};

/* ---- between a spawner and a sandbox's PID 1 (src/corral-init) ----
 *
 * On the socket the sandbox was created over, which PID 1 keeps: the
 * spawner asks it to fork a process (CRL_INIT_EXEC, fds: stdin, stdout,
 * stderr and the child's end of a control socket; strings as
 * crl_spawn_exec's), PID 1 answers with the child's pid in the sandbox and
 * a pidfd (CRL_INIT_FORKED), and tells of each such child's end, from its
 * own wait4() (CRL_INIT_EXITED).  The child waits on its control socket for
 * one byte (the spawner has put it in its cgroups), becomes the user and
 * executes the command; if it cannot, it writes a struct crl_init_failed
 * there, and a control socket that closes with nothing on it means the
 * command runs (it is close-on-exec).  With CRL_EXEC_F_TTY the request
 * brings only the control socket: the child opens a terminal of the
 * sandbox's own (/dev/ptmx, as the sandbox's root, before it becomes the
 * user), makes it its controlling terminal and stdio, and sends its master
 * on the control socket first, as a struct crl_init_failed with err 0 and
 * the descriptor (which the spawner checks is a terminal's master).
 *
 * PID 1 also keeps the spawner's end of that socket, at CRL_INIT_SPARE_FD
 * (closed in every process it forks), so that it outlives its spawner and
 * corrald: a spawner started anew takes it with pidfd_getfd()
 * (CRL_SPAWN_ADOPT), and what PID 1 said meanwhile waits in it.  Notes for
 * another spawner's requests (ids and pids it does not know) are dropped,
 * their control sockets closed: such a child exits before it runs
 * anything.  The new spawner asks at once for the children PID 1 forked
 * that still run (CRL_INIT_LIST, a struct crl_init_exec with no strings
 * and no fds), and PID 1 answers CRL_INIT_KIDS: a note whose pid is their
 * number n, followed by n int32 pids.  corrald ends them (their stdio was
 * the daemon's that died); the spawner tells it with CRL_SPAWN_KIDS.  PID 1
 * keeps its tmpfs too, at CRL_INIT_TMPFS_FD, for a corrald started anew.
 *
 * An EXEC with CRL_EXEC_F_KEEP brings three more fds after the control
 * socket: corrald's ends of the child's stdio.  PID 1 keeps them, while
 * that child runs and at most CRL_INIT_MAX_KEPT at once, at three
 * consecutive numbers from CRL_INIT_KEEP_BASE, the first in its FORKED
 * note's `kept` (-1: not kept), and closes them when it reaps the child:
 * a corrald started anew takes them back with pidfd_getfd(), and the
 * child's input stays open, its output waiting in the pipes, meanwhile. */
#define CRL_INIT_PROTO 3 /* this protocol's version, in a sandbox's record */
#define CRL_INIT_MAX_KEPT 64
#define CRL_INIT_KEEP_BASE 64
#define CRL_INIT_TMPFS_FD 5
#define CRL_INIT_SPARE_FD 6

enum crl_init_op {
    CRL_INIT_EXEC = 1,
    CRL_INIT_FORKED,
    CRL_INIT_EXITED,
    CRL_INIT_LIST,
    CRL_INIT_KIDS
};

#define CRL_INIT_MAX_MSG CRL_SPAWN_MAX_MSG

struct crl_init_exec {
    uint32_t op;
    uint32_t uid, gid;
    uint32_t flags; /* CRL_EXEC_F_* */
    uint16_t rows, cols;
    uint32_t argc, envc;
    uint64_t id;
    uint32_t strings_len;
    char strings[];
};

struct crl_init_note {
    uint32_t op;
    int32_t err; /* FORKED: errno of a fork that failed */
    uint64_t id; /* FORKED: the request's */
    int32_t pid; /* in the sandbox's pid namespace */
    int32_t status;
    int64_t utime_us, stime_us, maxrss_kb; /* EXITED */
    int32_t kept;                          /* FORKED: see CRL_EXEC_F_KEEP */
};

struct crl_init_failed {
    int32_t err;
    uint32_t step; /* enum crl_spawn_step */
};

#endif
