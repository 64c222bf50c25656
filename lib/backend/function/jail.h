/* The function backend's jail, applied by a freshly forked child of a
 * sandbox's keeper to itself, before it runs anything of the call.  The
 * keeper's namespaces (mount with the root of root.h, pid, ipc, uts, net,
 * cgroup, time) are the sandbox's and were made once; the jail is what
 * each call adds on top, per process:
 *
 *   its stdio and nothing else (every other descriptor closed), its own
 *   session (so the call's process group dies whole), its cgroup leaf,
 *   rlimits (files, processes, no core), the scratch dir as cwd, the
 *   sandbox's unprivileged uid and gid with no groups, no_new_privs, a
 *   Landlock domain (read and execute: the system dirs; read: /etc and
 *   /proc; read and write: the scratch dir, /dev/shm and the harmless
 *   devices; nothing else; no signals or abstract sockets out of the
 *   domain where the kernel has those scopes) and the seccomp filter (no
 *   ptrace, mount, bpf, keyctl, namespaces..., sockets of the local and IP
 *   families only).
 *
 * Every descriptor but stdio and the status pipe (moved to `status_at`,
 * close-on-exec) is closed.  Returns 0, or -errno with *step naming what
 * failed. */
#ifndef CRL_FUNCTION_JAIL_H
#define CRL_FUNCTION_JAIL_H

#include <stdbool.h>
#include <linux/filter.h>
#include <stdint.h>
#include <sys/types.h>

struct crl_zyg_claim;

struct crl_jail {
    int stdio[3];
    int status_fd; /* kept, as CRL_ZYG_STATUS_FD-like `status_at` */
    int status_at;
    int scratch_fd;        /* O_PATH of the scratch dir */
    int landlock_fd;       /* the ruleset (crl_jail_ruleset) */
    const int *cgroup_fds; /* cgroup.procs, to write "0" into */
    unsigned n_cgroup_fds;
    uid_t uid;
    gid_t gid;
    unsigned nproc, nofile;
    bool tty; /* stdio is a terminal: it becomes the controlling one */
    const struct sock_fprog *seccomp;
};

int crl_jail_enter(const struct crl_jail *j, const char **step);

/* The Landlock ruleset every call of a sandbox restricts itself with,
 * made once, by its keeper, in the sandbox's mount namespace (so a call
 * pays one landlock_restrict_self, not a ruleset's fifty syscalls): an fd
 * (close-on-exec), or -errno (-ENOSYS: no Landlock). */
int crl_jail_ruleset(int scratch_fd, const struct crl_zyg_claim *c);

/* The Landlock ABI this kernel has (0: none). */
int crl_landlock_abi(void);

#endif
