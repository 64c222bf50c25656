/* Cgroups for sandboxes, on v1 (one hierarchy per controller) and on v2
 * (the unified hierarchy), behind one interface.
 *
 * Every sandbox gets a cgroup named after its slot, under a parent ("corral")
 * that corrald owns: limits live there.  PID 1 joins leaf "." (the sandbox
 * cgroup itself on v1, its init/ child on v2, where processes may only live
 * in leaves) and each exec gets a leaf of its own below that, so a timeout
 * can kill an exec's whole process tree, however it daemonised, and nothing
 * else.  On v1 the leaves are in the freezer hierarchy (which can stop and
 * kill a tree atomically) and the other controllers see the sandbox cgroup
 * only.
 *
 * Cgroups are reused: a released slot's cgroup is reset and handed to the
 * next sandbox of that slot, because creating and removing memory cgroups at
 * thousands per second leaves dying ones behind in the kernel
 * (docs/architecture.md).  Paths and rooting are configurable so the unit
 * tests can run the v1 and v2 drivers against real or fake trees. */
#ifndef CRL_OS_CGROUP_H
#define CRL_OS_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/err.h"

enum crl_cgroup_version { CRL_CGROUP_AUTO = 0, CRL_CGROUP_V1 = 1, CRL_CGROUP_V2 = 2 };

struct crl_cgroup_config {
    enum crl_cgroup_version version;
    const char *mount_root; /* default /sys/fs/cgroup */
    const char *parent;     /* default "corral" */
    /* v2 only: controllers we need; a host without them is refused unless
     * allow_missing (tests on a v2 tree with no controllers). */
    bool allow_missing_controllers;
};

struct crl_cgroup_limits {
    uint64_t memory_bytes;
    unsigned pids;
    double cpus;
};

struct crl_cgroup_stats {
    uint64_t memory_bytes;
    uint64_t memory_peak_bytes;
    uint64_t cpu_ns;
    unsigned pids;
    uint64_t oom_kills; /* since the sandbox started */
};

#define CRL_CGROUP_MAX_FDS 6

struct crl_cgroup_mgr;
struct crl_cgroup;

int crl_cgroup_mgr_open(const struct crl_cgroup_config *cfg, struct crl_cgroup_mgr **out,
                        struct crl_err *err);
void crl_cgroup_mgr_free(struct crl_cgroup_mgr *m);
enum crl_cgroup_version crl_cgroup_mgr_version(const struct crl_cgroup_mgr *m);
/* "v1: memory,cpu,cpuacct,pids,freezer" or "v2: cpu memory pids" */
const char *crl_cgroup_mgr_describe(const struct crl_cgroup_mgr *m);

/* Kill every process in every cgroup under the parent and remove them all
 * but those named in keep (a restarted corrald's adopted sandboxes): what a
 * restarted corrald does before it serves.  Returns how many cgroups were
 * removed, or -1. */
int crl_cgroup_mgr_reconcile(struct crl_cgroup_mgr *m, const char *const *keep, size_t n_keep,
                             struct crl_err *err);
/* Remove the parent itself (clean shutdown).  Fails if anything is left. */
int crl_cgroup_mgr_remove_parent(struct crl_cgroup_mgr *m, struct crl_err *err);

/* Create, or reset for reuse, the cgroup `name` with these limits. */
int crl_cgroup_create(struct crl_cgroup_mgr *m, const char *name,
                      const struct crl_cgroup_limits *limits, struct crl_cgroup **out,
                      struct crl_err *err);
/* Remove an empty cgroup's leaves, and with `remove` the cgroup itself,
 * without waiting: -1 with errno EBUSY while a process that just died
 * still holds one.  The cgroup stays usable for release. */
int crl_cgroup_tidy(struct crl_cgroup *cg, bool remove);
/* Release: the cgroup must be empty; it is kept for reuse unless `remove`.
 * Never waits: call crl_cgroup_tidy until it succeeds first. */
int crl_cgroup_release(struct crl_cgroup *cg, bool remove, struct crl_err *err);
const char *crl_cgroup_name(const struct crl_cgroup *cg);
/* An existing cgroup `name`, as a corrald before this one made it: its
 * limits and usage are left as they are; cpu and oom figures count from
 * the bases its creator had (crl_cgroup_bases). */
int crl_cgroup_adopt(struct crl_cgroup_mgr *m, const char *name, uint64_t cpu_base_ns,
                     uint64_t oom_base, struct crl_cgroup **out, struct crl_err *err);
void crl_cgroup_bases(const struct crl_cgroup *cg, uint64_t *cpu_base_ns, uint64_t *oom_base);
/* Whether pid is in the cgroup PID 1 lives in (not a leaf below). */
bool crl_cgroup_has_pid(struct crl_cgroup *cg, pid_t pid);
/* Whether the whole sandbox is frozen (or freezing). */
bool crl_cgroup_frozen(struct crl_cgroup *cg);
/* fn(leaf, pids, n, ctx) for each leaf below PID 1's cgroup, with the pids
 * in it (4096 at most).  -1 if the cgroup cannot be read. */
typedef void (*crl_cgroup_leaf_fn)(const char *leaf, const pid_t *pids, size_t n, void *ctx);
int crl_cgroup_leaves(struct crl_cgroup *cg, crl_cgroup_leaf_fn fn, void *ctx);

/* The cgroup.procs of the leaf `leaf` ("e<N>" for an exec), created if
 * needed: a process already in the sandbox's cgroups (a fork of its PID 1)
 * joins the leaf with one write there.  Caller closes the fd. */
int crl_cgroup_leaf_procs(struct crl_cgroup *cg, const char *leaf, struct crl_err *err);

/* cgroup.procs descriptors a new process writes itself (or its pid) into
 * to join the leaf `leaf` ("." for PID 1, "e<N>" for an exec) from
 * outside the sandbox's cgroups: the leaf's first, then the sandbox's in
 * v1's other hierarchies.  Caller closes the fds. */
int crl_cgroup_attach_fds(struct crl_cgroup *cg, const char *leaf, int *fds, int *nfds,
                          struct crl_err *err);
/* The directories of the cgroup the calling process (corrald) is in, in
 * every hierarchy crl_cgroup_join_dirs() names, and in its order (borrowed:
 * the manager keeps them open): for a helper of corrald's that joined a
 * sandbox's cgroup for a moment and goes back.  Returns how many, or -1. */
int crl_cgroup_mgr_own_dirs(struct crl_cgroup_mgr *m, int *fds, struct crl_err *err);
/* The directories of leaf "." (opened for the caller, who closes them),
 * CRL_CGROUP_MAX_FDS at most, for a process that joins on its own by
 * writing itself into each one's cgroup.procs.  Returns how many, or -1. */
int crl_cgroup_join_dirs(struct crl_cgroup *cg, int *fds, struct crl_err *err);
/* v2: the directory of the leaf (made if needed), for clone3's
 * CLONE_INTO_CGROUP; -1 with CRL_E_UNSUPPORTED on v1.  Caller closes it. */
int crl_cgroup_leaf_dir(struct crl_cgroup *cg, const char *leaf, struct crl_err *err);
/* Kill every process in a leaf (an exec's tree) but `spare` (0: none),
 * atomically with respect to forks.  Returns how many were signalled. */
int crl_cgroup_kill_leaf(struct crl_cgroup *cg, const char *leaf, pid_t spare, struct crl_err *err);
/* Send `sig` once to every process in a leaf: one sweep, so a process
 * forked meanwhile may miss it (only SIGKILL, above, chases forks).
 * Returns how many were signalled. */
int crl_cgroup_signal_leaf(struct crl_cgroup *cg, const char *leaf, int sig, struct crl_err *err);
/* Kill every process in the whole sandbox cgroup. */
int crl_cgroup_kill_all(struct crl_cgroup *cg, struct crl_err *err);
/* Remove an empty leaf; -1 with errno EBUSY while processes remain. */
int crl_cgroup_remove_leaf(struct crl_cgroup *cg, const char *leaf);
/* Number of processes in a leaf (or the whole cgroup for leaf NULL). */
int crl_cgroup_count(struct crl_cgroup *cg, const char *leaf);
/* Freeze or thaw the whole sandbox. */
int crl_cgroup_freeze(struct crl_cgroup *cg, bool frozen, struct crl_err *err);

struct crl_cgroup_reclaim {
    uint64_t before_bytes, after_bytes; /* the memory charge around it */
    const char *how;                    /* "memory.reclaim", "memory.force_empty" or "none" */
};

/* Give back what memory of the sandbox the kernel can take (a frozen one's
 * too): v2 memory.reclaim, v1 memory.force_empty.  Without swap that is
 * the page cache (files read and written); anonymous memory and the tmpfs
 * of a container's writable layer stay.  Synchronous: it takes as long as
 * the kernel's reclaim (milliseconds per hundred MiB). */
int crl_cgroup_reclaim(struct crl_cgroup *cg, struct crl_cgroup_reclaim *r, struct crl_err *err);
/* A sandbox's pause: freeze it (thawed back if that fails: never half
 * frozen), then release what memory can be released (a failure to release
 * is logged under `who`; the sandbox stays frozen). */
int crl_cgroup_pause(struct crl_cgroup *cg, const char *who, struct crl_cgroup_reclaim *r,
                     struct crl_err *err);

int crl_cgroup_stats(struct crl_cgroup *cg, struct crl_cgroup_stats *st);

#endif
