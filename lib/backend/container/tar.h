/* A directory as a tar stream, both ways, with libarchive.  These run in a
 * child the spawner forks and moves into the sandbox (its root, its ids, its
 * cgroup, the sandbox's seccomp filter plus one that forbids new executable
 * mappings), so neither a hostile archive nor a symlink raced in by the
 * sandbox can reach a host path. */
#ifndef CRL_CONTAINER_TAR_H
#define CRL_CONTAINER_TAR_H

#include <stddef.h>

/* Write the tree under the current directory to `out_fd` as a pax tar.
 * Returns 0, or -1 with a message in msg. */
int crl_tar_out(int out_fd, char *msg, size_t msglen);
/* Extract the tar (optionally gzip/zstd/xz compressed) read from `in_fd`
 * into the current directory, refusing absolute paths, '..' and paths
 * through symlinks.  *entries counts what was extracted. */
int crl_tar_in(int in_fd, unsigned long *entries, char *msg, size_t msglen);

#endif
