/* Syscalls wrapped one way everywhere: O_CLOEXEC by default, EINTR retried,
 * reads and writes "in full", *at() calls on directory fds.  Each returns -1
 * with errno set on failure unless it takes a struct crl_err. */
#ifndef CRL_UTIL_FDIO_H
#define CRL_UTIL_FDIO_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"

/* Read until `len` bytes or end of file; returns the bytes read. */
ssize_t crl_read_full(int fd, void *buf, size_t len);
/* Write all of `len` bytes; returns 0, or -1 with errno. */
int crl_write_full(int fd, const void *buf, size_t len);

/* openat(dirfd, path, flags | O_CLOEXEC, mode), retried on EINTR. */
int crl_openat(int dirfd, const char *path, int flags, mode_t mode);
/* The file behind fd opened again (through /proc/self/fd): a description of
 * its own, at offset 0, with `flags` whatever fd's were.  -1 with errno. */
int crl_reopen(int fd, int flags);

/* Small control files (cgroup, /proc): write a string in one write(2); read up
 * to cap-1 bytes and NUL-terminate.  Both return -1 with errno on failure. */
int crl_write_file_at(int dirfd, const char *path, const char *s);
ssize_t crl_read_file_at(int dirfd, const char *path, char *buf, size_t cap);
/* The pid (in our pid namespace) of a pidfd's process, from its fdinfo;
 * -1 once it is gone. */
pid_t crl_pidfd_pid(int pidfd);
/* Read a whole (regular, bounded) file into malloc'd memory. */
int crl_read_file_alloc(const char *path, size_t max, char **out, size_t *len, struct crl_err *err);

int crl_set_nonblock(int fd, int on);

/* SCM_RIGHTS: send `nfds` descriptors with a message; receive up to *nfds
 * (set to how many came, each O_CLOEXEC).  SOCK_SEQPACKET keeps boundaries. */
ssize_t crl_send_fds(int sock, const void *msg, size_t len, const int *fds, int nfds);
ssize_t crl_recv_fds(int sock, void *msg, size_t len, int *fds, int *nfds);

/* Remove a directory tree without following symlinks or crossing mounts. */
int crl_rm_rf_at(int dirfd, const char *name);

/* The path of `name` beside the running program (corrald finds its helper
 * binaries this way). */
int crl_sibling_path(const char *name, char *out, size_t cap, struct crl_err *err);

/* mkdir -p, mode for each created component. */
int crl_mkdir_p(const char *path, mode_t mode);

/* Monotonic clock in nanoseconds, and wall-clock seconds as a double. */
unsigned long long crl_now_ns(void);
double crl_wall_s(void);
/* RFC 3339 UTC timestamp of a wall-clock time. */
void crl_fmt_time(double wall_s, char *buf, size_t cap);

#endif
