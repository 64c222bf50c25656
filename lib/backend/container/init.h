/* The start of a sandbox's PID 1.  The spawner clone()s it with CLONE_VM
 * into fresh user, mount, pid, ipc and uts namespaces (no address space is
 * copied); it makes its cgroup and time namespaces, builds the root
 * filesystem, takes the identity all the sandbox's processes share and
 * then executes corral-init (src/corral-init), which reports back, forks
 * the sandbox's commands and reaps orphans until it is killed.  Until that exec it
 * shares the spawner's memory and thread-local storage, so everything here
 * runs on the child's own stack with raw syscalls. */
#ifndef CRL_CONTAINER_INIT_H
#define CRL_CONTAINER_INIT_H

#include <linux/capability.h>
#include <linux/filter.h>

#include "spawn_proto.h"

/* Capabilities root keeps inside a sandbox (Docker's default set); the rest
 * leave the bounding set before anything of the user's runs. */
#define KEEP_CAPS                                                                                \
    ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FSETID) |                   \
     (1ull << CAP_FOWNER) | (1ull << CAP_MKNOD) | (1ull << CAP_NET_RAW) | (1ull << CAP_SETGID) | \
     (1ull << CAP_SETUID) | (1ull << CAP_SETFCAP) | (1ull << CAP_SETPCAP) |                      \
     (1ull << CAP_NET_BIND_SERVICE) | (1ull << CAP_SYS_CHROOT) | (1ull << CAP_KILL) |            \
     (1ull << CAP_AUDIT_WRITE))

struct crl_init_args {
    int sync_fd; /* the child's end of the create socket */
    const char *workdir;
    char tmpfs_opts[64];
    char hostname[64];
    int init_fd;                      /* O_PATH of the corral-init binary */
    int last_cap;                     /* /proc/sys/kernel/cap_last_cap */
    const struct sock_fprog *seccomp; /* every process of the sandbox's, PID 1 first */
    char timens[96];                  /* what to write to /proc/PID/timens_offsets */
    unsigned files_len;
    char files[CRL_SPAWN_MAX_FILES]; /* /etc's run-time files: "name\0contents\0"... */
    unsigned n_volumes;              /* their mounts come after the layers' */
    char volume_paths[CRL_SPAWN_MAX_VOLUMES][CRL_SPAWN_VOLUME_PATH];
};

/* clone() entry point; `arg` is a struct crl_init_args.  Never returns. */
int crl_init_main(void *arg);

#endif
