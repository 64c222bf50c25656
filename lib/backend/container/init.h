/* A sandbox's PID 1.  The spawner clone()s it with CLONE_VM into fresh user,
 * mount, pid, ipc and uts namespaces; it builds the root filesystem, reports
 * back, then only reaps orphans until it is killed.  It never executes a
 * binary, so a sandbox costs no extra address space (docs/architecture.md
 * explains why this is safe: the spawner is non-dumpable and holds no
 * secrets).  Everything here runs on the child's own stack with raw syscalls. */
#ifndef CRL_CONTAINER_INIT_H
#define CRL_CONTAINER_INIT_H

#include <linux/filter.h>

struct crl_init_args {
    int sync_fd; /* the child's end of the create socket */
    const char *workdir;
    char tmpfs_opts[64];
    char hostname[64];
    const struct sock_fprog *seccomp;
};

/* clone() entry point; `arg` is a struct crl_init_args.  Never returns. */
int crl_init_main(void *arg);

#endif
