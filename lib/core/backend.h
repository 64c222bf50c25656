/* The one interface every isolation backend implements.
 *
 * The host (sandbox lifecycle, admission, API), exec and session handling,
 * and later the trajectory log, policy and pools sit above this table and
 * never look inside a backend.  Operations that take time are asynchronous:
 * they return 0 once started and report completion through the callback in
 * their request (on the daemon's loop thread), or return -1 with *err at
 * once if they could not start.  A backend leaves an op NULL if it does not
 * support it; the host then answers CRL_E_UNSUPPORTED. */
#ifndef CRL_CORE_BACKEND_H
#define CRL_CORE_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../helper/stream.h"
#include "../os/cgroup.h"
#include "../util/err.h"
#include "volume.h"

struct crl_host;
struct crl_sandbox;
struct crl_net_policy;
struct crl_buf;
struct json_t;

/* Resource use as a backend measures it. */
struct crl_usage {
    double cpu_s;
    uint64_t memory_bytes;
    uint64_t memory_peak_bytes;
    unsigned pids;
    uint64_t disk_bytes;
    uint64_t disk_limit_bytes;
    uint64_t oom_kills;
};

/* A process the host asked a backend to run in a sandbox: an exec, a
 * session's shell, a helper.  The caller owns it; the backend fills the
 * run-time fields and calls on_start once (with err set if it never
 * started) and, if it started, on_exit once.  The caller then hands it back
 * with crl_sandbox_proc_done(). */
struct crl_proc {
    struct crl_sandbox *sb;
    /* what to run */
    char **argv;
    const char *source; /* an exec's cmd given as a string (argv is /bin/sh -c source) */
    bool session;       /* a session's shell, which lives on between commands */
    char **envp;
    const char *cwd;
    uid_t uid;
    gid_t gid;
    bool setsid;
    /* A terminal of its own (a pseudo-terminal of the sandbox's, rows x
     * cols, as its controlling terminal and stdio; it is a session leader):
     * then in_fd and out_fd are corrald's ends of it and err_fd is -1. */
    bool tty;
    unsigned short rows, cols;
    /* corrald's ends of its stdio; set by the backend before on_start */
    int in_fd, out_fd, err_fd;
    /* at run time */
    pid_t pid;    /* as the backend addresses it (a container's: the host's) */
    pid_t ns_pid; /* as the sandbox sees it: what a user names it by */
    int pidfd;
    uint64_t seq; /* unique per sandbox; names the cgroup leaf */
    bool started, exited;
    bool outlives; /* proc_record can record it: it outlives corrald, see below */
    int status;    /* wait status */
    double cpu_s;
    uint64_t maxrss_bytes;
    void (*on_start)(struct crl_proc *p, const struct crl_err *err);
    void (*on_exit)(struct crl_proc *p);
    void *owner;
    void *priv;                  /* the backend's */
    struct crl_proc *next_in_sb; /* the host's list of a sandbox's live processes */
};

/* Open one path inside a sandbox to read it, as the sandbox's user `uid`. */
struct crl_open_req {
    const char *path;
    int flags; /* O_RDONLY, or O_WRONLY|O_CREAT|O_TRUNC */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    void (*done)(struct crl_open_req *o, int fd, bool is_dir, uint64_t size,
                 const struct crl_err *err);
    void *ctx;
};

/* Bytes flowing between corrald and a path inside a sandbox, through a
 * helper the backend runs in the sandbox (its ids, its cgroup: a write is
 * charged to the sandbox).  corrald reads data_fd for TAR_OUT and writes it
 * for TAR_IN and FILE_IN.  msg_fd is a socket: the helper's last words come
 * back on it, and a FILE_IN is committed (renamed over its path) only once
 * corrald writes CRL_STREAM_COMMIT on it before closing data_fd; a shut
 * msg_fd, or one closed without it, abandons the upload. */
enum crl_stream_kind {
    CRL_STREAM_TAR_OUT, /* a directory, out as a tar stream */
    CRL_STREAM_TAR_IN,  /* a tar stream extracted into a directory */
    CRL_STREAM_FILE_IN, /* bytes to one file, replaced whole or not at all */
    CRL_STREAM_FS,      /* a filesystem operation (path: its JSON request, lib/helper/fsop.h):
                           its JSON answer out */
    CRL_STREAM_WATCH,   /* a directory's events out, one JSON object a line, until
                           stream_cancel or the directory goes */
};
/* Does corrald read the stream's data (else it writes it)? */
static inline bool crl_stream_out(enum crl_stream_kind k)
{
    return k == CRL_STREAM_TAR_OUT || k == CRL_STREAM_FS || k == CRL_STREAM_WATCH;
}

struct crl_stream_req {
    enum crl_stream_kind kind;
    const char *path;
    mode_t mode;    /* FILE_IN */
    bool recursive; /* WATCH */
    uid_t uid;
    gid_t gid;
    int data_fd; /* set by the backend: corrald's end of the bytes */
    int msg_fd;  /* set by the backend: the helper's last words */
    void (*started)(struct crl_stream_req *t, const struct crl_err *err);
    void (*done)(struct crl_stream_req *t, int exit_code); /* enum crl_stream_status */
    void *ctx;
};

/* A sandbox's writable layer, opened for a checkpoint (lib/traj/ckpt.h walks
 * it): the tree of what the sandbox changed over its image. */
enum crl_layer_format {
    CRL_LAYER_OVERLAY, /* an overlayfs upper dir: a 0/0 character device is a
                          whiteout, user.overlay.opaque="y" marks an opaque dir */
    CRL_LAYER_PLAIN,   /* the whole writable tree, with nothing below it */
};

struct crl_snapshot_view {
    int dir_fd; /* O_RDONLY|O_DIRECTORY; the caller closes it */
    enum crl_layer_format format;
    uid_t uid_shift; /* the host's id for the sandbox's id 0: owners are stored */
    gid_t gid_shift; /* as host id - shift, so a checkpoint is host-independent */
};

/* A writable layer the backend must first fetch (a microVM's, from inside
 * its guest): done is called once, on the loop, never before
 * snapshot_start has returned, with the view or why not. */
struct crl_snapshot_req {
    void (*done)(struct crl_snapshot_req *rq, const struct crl_snapshot_view *v,
                 const struct crl_err *err);
    void *ctx;
};

/* Apply a change set to a sandbox whose writable state is still its
 * image's: a tar stream in the checkpoint format (lib/traj/ckpt.h):
 * parents before children, each path once; `D/.wh.NAME` removes D/NAME (and
 * all below it), `D/.wh..wh..opq` empties D of what the image had; owners
 * are the sandbox's own ids; user.* xattrs as pax SCHILY.xattr.  The
 * backend reads tar_fd from offset 0 (it dups what it keeps past the call)
 * and calls done once, on the loop. */
struct crl_restore_req {
    int tar_fd;
    void (*done)(struct crl_restore_req *rq, const struct crl_err *err);
    void *ctx;
};

/* How a restore's helper ended (`code`: its enum crl_stream_status, or
 * 128 + a signal; `msg`: its last line) as the error a restore's owner
 * gets: no space, bad input (400), the sandbox gone (409: `live` false), or
 * internal.  Returns 0 for CRL_STREAM_OK, else -1 with *err filled. */
int crl_restore_error(int code, const char *msg, bool live, struct crl_err *err);

/* A backend whose sandbox is one cgroup pauses it as a whole: ready ->
 * paused (`pause`: frozen, then what memory can be released given back,
 * crl_cgroup_pause, which fills *last) or back.  `cg` NULL means the
 * sandbox is not running, a 409.  (The sandbox's end thaws a paused one
 * before it ends anything: lib/core/sandbox.c.) */
int crl_backend_pause_cgroup(struct crl_sandbox *sb, struct crl_cgroup *cg, bool pause,
                             struct crl_cgroup_reclaim *last, struct crl_err *err);
/* A sandbox's usage from its cgroup (CPU, memory, peak, pids, OOM kills);
 * disk is the backend's to fill. */
void crl_backend_cgroup_usage(struct crl_cgroup *cg, struct crl_usage *u);
/* "last_pause" (how memory was released, the charge before and after) in
 * a backend's info, once it has paused. */
void crl_backend_pause_info(struct json_t *o, const struct crl_cgroup_reclaim *last);

/* The network namespace of a new sandbox of any backend: for mode none
 * without services one of the host's pool (loopback only), returned at
 * once; else one linked to the sandboxes' network with the spec's policy
 * as its rules (lib/os/vnet.h), the slot's parked one if it has one.  The
 * link is made on the network's worker thread, off the loop: then claim
 * returns CRL_NET_PENDING and `done` runs on the loop later with the
 * descriptor or an error (a backend that passes no `done` gets an error
 * instead of a link).  crl_backend_net_release takes the descriptor back. */
#define CRL_NET_PENDING (-2)
typedef void (*crl_net_claimed_fn)(struct crl_sandbox *sb, int netns_fd, const struct crl_err *err);
int crl_backend_net_claim(struct crl_sandbox *sb, crl_net_claimed_fn done, struct crl_err *err);
/* Give the namespace back once nothing of the sandbox runs in it; with
 * `quarantine` (something may still), it is only closed. */
void crl_backend_net_release(struct crl_sandbox *sb, int netns_fd, bool quarantine);
/* An adopted sandbox that had a link gets one again (lib/core/host.c): the
 * restart's reconcile removed the old one, its end in the sandbox with it;
 * the new one has the slot's addresses and the policy of its spec.
 * Synchronous (the start has no worker to wait for); connections open
 * across the restart are cut. */
int crl_backend_net_relink(struct crl_sandbox *sb, struct crl_err *err);
/* A VM's network device behind the sandbox's link (lib/os/vnet.h's
 * crl_vnet_vm_link): a tap's descriptor, or -1.  Release undoes it. */
int crl_backend_net_tap(struct crl_sandbox *sb, int netns_fd, struct crl_err *err);
/* Replace a running sandbox's network policy (taking `p`, heap-allocated,
 * on success): its rules are replaced in one transaction (in force for
 * the next connection; those open go on), what its names resolved to is
 * forgotten (asked again under the new rules), and a sandbox created with
 * mode none gets its link now.  409 unless ready or paused; 501 for a
 * backend without a network. */
int crl_backend_net_set(struct crl_sandbox *sb, struct crl_net_policy *p, struct crl_err *err);
/* The resolver a sandbox's /etc/resolv.conf names (its gateway: corrald's
 * resolver answers there), into buf; "" without a network.  And its
 * network's address, gateway and DNS counters for inspect (NULL: none). */
int crl_backend_net_nameserver(const struct crl_sandbox *sb, char *buf, size_t cap);
/* Its address and gateway (a /30), as text: -1 without a link. */
int crl_backend_net_address(const struct crl_sandbox *sb, char *addr, char *gw, size_t cap);
struct json_t *crl_backend_net_json(const struct crl_sandbox *sb);

enum crl_kill_scope {
    CRL_KILL_PROC,        /* the process itself */
    CRL_KILL_TREE,        /* it and every process it started, however detached */
    CRL_KILL_DESCENDANTS, /* everything it started, but not it (a session's shell) */
};

/* Whom a signal a user sends to a process reaches. */
enum crl_signal_scope {
    CRL_SIGNAL_PROC,  /* the process */
    CRL_SIGNAL_GROUP, /* its process group (it leads one: it was started with setsid) */
    CRL_SIGNAL_TREE,  /* it and every process it started, however detached */
};

/* For a backend whose terminals' masters corrald holds (in_fd): set the
 * window size there, which the kernel tells the foreground program with
 * SIGWINCH. */
int crl_backend_pty_resize(struct crl_sandbox *sb, struct crl_proc *p, unsigned rows, unsigned cols,
                           struct crl_err *err);

/* For a backend whose processes are the host's (a pidfd, a host pid that
 * leads its process group, a cgroup leaf of its own): the signal op. */
int crl_backend_signal_host(struct crl_sandbox *sb, struct crl_proc *p, struct crl_cgroup *cg,
                            const char *leaf, int sig, enum crl_signal_scope scope,
                            struct crl_err *err);

/* A terminal of the host's devpts, rows x cols, for a backend whose
 * sandboxes have none of their own (a function's): its master and slave,
 * close-on-exec. */
int crl_backend_host_pty(unsigned rows, unsigned cols, int *master, int *slave,
                         struct crl_err *err);

struct crl_backend_ops;
/* A registered backend's state (its init's), for code that one ops table
 * of several shares: NULL if ops is not registered with h. */
void *crl_backend_state(struct crl_host *h, const struct crl_backend_ops *ops);

struct crl_backend_ops {
    const char *name;
    /* Its sandboxes' ports are on the loopback of their network namespace
     * (netns), where a sandbox service of another connects (lib/api/service_server.c);
     * a guest's are not. */
    bool ports_on_netns;
    /* How it uses volumes (spec.volumes): create finds, in sb->volume_fds,
     * one per spec volume, corrald's mounts (CRL_VOLUMES_MOUNT: it attaches
     * idmapped clones) or the disk files (CRL_VOLUMES_DISK: a guest's
     * kernel mounts them). */
    enum crl_volume_use volumes;
    /* For admission control: the memory a new sandbox is expected to take
     * from the host before it can be measured (0: 1 MiB), and the most
     * descriptors corrald holds open for each live one. */
    unsigned admit_mb;
    unsigned fds_held;
    /* Start (the host's loop exists), and remove what a crashed corrald left. */
    int (*init)(struct crl_host *h, void **state, struct crl_err *err);
    int (*reconcile)(struct crl_host *h, void *state, struct crl_err *err);
    void (*shutdown)(struct crl_host *h, void *state);

    /* Adoption by a corrald started anew (lib/core/host.c), NULL where a
     * sandbox cannot outlive its corrald: what its record keeps of how it
     * runs (JSON); whether what a record kept still runs as it did (before
     * the reconcile, which spares the cgroup `s<slot>` of each that does);
     * and taking it over, synchronously (the host has built sb from the
     * record: id, spec, image, slot), with `*paused` set if it is frozen.
     * A failed check or adopt sets *reason to a word for why (the lost
     * sandbox's lost_reason) and err to the whole story. */
    struct json_t *(*adopt_record)(struct crl_sandbox *sb);
    int (*adopt_check)(struct crl_host *h, struct json_t *rec, const char **reason,
                       struct crl_err *err);
    int (*adopt)(struct crl_sandbox *sb, struct json_t *rec, bool *paused, const char **reason,
                 struct crl_err *err);
    /* The other end of adopt: corrald exits (a handover) and lets go of
     * what it holds of a sandbox that runs on. */
    void (*leave)(struct crl_sandbox *sb);
    /* A process that is to outlive corrald with its sandbox (a session's
     * shell): what its record needs for adopt_proc to take it back, or
     * NULL if it cannot be.  adopt_proc, in a sandbox adopt took over, sets
     * p's stdio fds and pidfd from the record (p's pid, ns_pid and seq are
     * set from it already) and reports its end through on_exit, as a
     * process spawn started; a failure sets err (why it cannot be). */
    struct json_t *(*proc_record)(struct crl_sandbox *sb, struct crl_proc *p);
    int (*adopt_proc)(struct crl_sandbox *sb, struct crl_proc *p, struct json_t *rec,
                      struct crl_err *err);
    /* A handover lets go of such a process, which runs on: what the
     * backend holds of it is freed, nothing ends; p's stdio is its owner's. */
    void (*release_proc)(struct crl_sandbox *sb, struct crl_proc *p);

    /* Build the sandbox; completes with crl_sandbox_created(sb, err). */
    int (*create)(struct crl_sandbox *sb, struct crl_err *err);
    /* Tear it down; completes with crl_sandbox_destroyed(sb).  Must not fail:
     * what cannot be removed now is logged and retried by reconcile. */
    void (*destroy)(struct crl_sandbox *sb);
    int (*stats)(struct crl_sandbox *sb, struct crl_usage *u);
    /* Backend-specific facts for an operator (host pids, cgroup...); may be NULL. */
    struct json_t *(*info)(struct crl_sandbox *sb);

    int (*spawn)(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err);
    /* Kill a process, everything it started, or only what it started. */
    int (*kill)(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope);
    /* A user's signal (any number 1..64) to a started process that has not
     * been reported ended; and a terminal's new size (p->tty). */
    int (*signal)(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
                  struct crl_err *err);
    int (*resize)(struct crl_sandbox *sb, struct crl_proc *p, unsigned rows, unsigned cols,
                  struct crl_err *err);
    int (*open)(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err);
    int (*stream)(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err);
    /* End a started stream whose reader has gone (a watch), where closing
     * data_fd alone does not reach its helper; its done still comes.  May
     * be NULL. */
    void (*stream_cancel)(struct crl_sandbox *sb, struct crl_stream_req *t);

    /* Checkpoints: open the writable layer to read (synchronous; or, where
     * it must be fetched first, snapshot_start: a backend has one of the
     * two), and restore a change set into a fresh sandbox (asynchronous). */
    int (*snapshot)(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err);
    int (*snapshot_start)(struct crl_sandbox *sb, struct crl_snapshot_req *rq, struct crl_err *err);
    int (*restore)(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err);

    /* Stop every process of the sandbox and release what memory can be
     * released; start them again.  Synchronous. */
    int (*pause)(struct crl_sandbox *sb, struct crl_err *err);
    int (*resume)(struct crl_sandbox *sb, struct crl_err *err);

    /* The sandbox's network namespace (crl_backend_net_claim's), for a
     * change of its network; NULL: the backend has no network to change. */
    int (*netns)(struct crl_sandbox *sb);

    /* For an operator: the backend's own state and counters, in the host's
     * description (GET /v1/host's "backend_info") and its metrics (lines
     * appended to /metrics' text).  Either may be NULL. */
    struct json_t *(*host_info)(struct crl_host *h, void *state);
    void (*metrics)(struct crl_host *h, void *state, struct crl_buf *out);
};

#endif
