/* A function sandbox's root filesystem, which its keeper builds in the
 * mount namespace it was born in, before any sandbox claims it:
 *
 *   /                  a tmpfs: everything the sandbox can write lives on it,
 *                      so its size (disk_mb, set at claim) caps it all
 *   /usr /bin /sbin /lib /lib32 /lib64 /libx32
 *                      the host's, bound read-only, nosuid, nodev (a host
 *                      whose /bin is a symlink gets the same symlink)
 *   /etc               a tmpfs of its own (64 KiB, read-only once claimed):
 *                      ld.so.cache, localtime and alternatives of the host's
 *                      (read-only) and nsswitch.conf; hostname, hosts,
 *                      resolv.conf, passwd and group are written at claim
 *   /dev               null, zero, full, random, urandom bound from the host;
 *                      shm (mode 1777, on the tmpfs); fd, stdin, stdout, stderr
 *   /proc              the sandbox's pid namespace's
 *   /scratch           the sandbox's writable dir (its uid's, mode 0700)
 *
 * and nothing else: no /sys, no /tmp, no /run, no /home; the host's tree is
 * detached from the namespace (pivot_root), not merely out of reach.  The
 * jail (jail.h) then narrows what a call may do within this root.
 *
 * Both run as root in the keeper; they return 0, or -errno with *step
 * naming what failed. */
#ifndef CRL_FUNCTION_ROOT_H
#define CRL_FUNCTION_ROOT_H

#include <sys/types.h>

#include "zygote_proto.h"

/* What of the host a sandbox's root holds, and so what the jail's Landlock
 * ruleset (jail.c) lets calls use: the system dirs a runtime executes from
 * (at /NAME: bound, or symlinked as the host has them, merged /usr), and
 * the character devices a program may expect (at /dev/NAME). */
#define CRL_FNROOT_N_SYSTEM_DIRS 7
#define CRL_FNROOT_N_DEV_NODES 5
extern const char *const crl_fnroot_system_dirs[CRL_FNROOT_N_SYSTEM_DIRS];
extern const char *const crl_fnroot_dev_nodes[CRL_FNROOT_N_DEV_NODES];

/* Build the root on the empty directory `mountpoint` (made by corrald, the
 * same for every keeper: each mounts over it in its own namespace) and
 * pivot into it.  The caller must be in a mount namespace of its own and
 * PID 1 of a pid namespace of its own (for /proc). */
int crl_fnroot_build(const char *mountpoint, const char **step);

/* corrald's part of a claim, through the keeper's root and scratch dir
 * (O_PATH), before any code of the sandbox's runs: the tmpfs's size
 * (disk_mb) and the scratch dir's owner. */
int crl_fnroot_prepare(int root_fd, int scratch_fd, unsigned disk_mb, uid_t uid, gid_t gid,
                       const char **step);

/* The keeper's part, in its namespace: the files of /etc that name the
 * sandbox (`c`: its ids and hostname). */
int crl_fnroot_claim(const struct crl_zyg_claim *c, const char **step);

/* Why a volume may not be mounted at `path` (absolute, normal) in this
 * root, or NULL: not over or under what is the host's (the system dirs,
 * read-only) or /etc, nor over /scratch itself. */
const char *crl_fnroot_volume_refused(const char *path);

/* The keeper's: attach the claim's volumes (fds[i], idmapped already) at
 * their paths, the directories made as needed. */
int crl_fnroot_volumes(const struct crl_zyg_claim *c, const int *fds, const char **step);

#endif
