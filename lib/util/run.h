/* Starting corral's own helper processes (spawner, zygotes, importer) and
 * running small tools whose output we want. */
#ifndef CRL_UTIL_RUN_H
#define CRL_UTIL_RUN_H

#include <spawn.h>
#include <stddef.h>

#include "err.h"

/* Attributes for a helper: no signal blocked and every disposition the
 * default (corrald blocks what it takes through a signalfd, and a
 * posix_spawn child would inherit that).  Destroy with
 * posix_spawnattr_destroy(). */
void crl_spawnattr_init_clean(posix_spawnattr_t *attr);

/* A SOCK_SEQPACKET socketpair (close-on-exec) whose buffers hold a
 * message of `max_msg` bytes, for talking to a helper. */
int crl_seqpacket_pair(int pair[2], size_t max_msg, struct crl_err *err);

/* Run argv[0] (searched in PATH when it has no '/') with stdin /dev/null,
 * wait for it, and give its wait status and its stdout (with its stderr
 * too if `with_stderr`): at most `max` bytes, NUL-terminated, malloc'd in
 * *out.  `envp` NULL: ours.  -1 only if it could not be run. */
int crl_run_capture(char *const argv[], char *const envp[], int with_stderr, size_t max, char **out,
                    int *status, struct crl_err *err);

/* mkfs.ext4 on the file or device `path`: its root owned by 0:0, no
 * blocks reserved for root (a volume, a full system's writable disk).
 * The error says what mkfs printed. */
int crl_mkfs_ext4(const char *path, struct crl_err *err);

#endif
