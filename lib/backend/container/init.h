/* The start of a sandbox's PID 1.  The spawner clone()s it with CLONE_VM
 * into fresh user, mount, pid, ipc and uts namespaces (no address space is
 * copied); it makes its cgroup and time namespaces, builds the root
 * filesystem and then executes corral-init (src/corral-init), which
 * reports back and reaps orphans until it is killed.  Until that exec it
 * shares the spawner's memory and thread-local storage, so everything here
 * runs on the child's own stack with raw syscalls. */
#ifndef CRL_CONTAINER_INIT_H
#define CRL_CONTAINER_INIT_H

#include "spawn_proto.h"

struct crl_init_args {
    int sync_fd; /* the child's end of the create socket */
    const char *workdir;
    char tmpfs_opts[64];
    char hostname[64];
    int init_fd;     /* O_PATH of the corral-init binary */
    int last_cap;    /* /proc/sys/kernel/cap_last_cap */
    char timens[96]; /* what to write to /proc/PID/timens_offsets */
    unsigned files_len;
    char files[CRL_SPAWN_MAX_FILES]; /* /etc's run-time files: "name\0contents\0"... */
};

/* clone() entry point; `arg` is a struct crl_init_args.  Never returns. */
int crl_init_main(void *arg);

#endif
