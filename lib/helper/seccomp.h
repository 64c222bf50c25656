/* Seccomp profiles, compiled once with libseccomp and installed as a BPF
 * program in each child (installing is a single syscall; compiling is
 * milliseconds).  The container profile follows Docker's default in spirit:
 * everything is allowed except what reaches past the sandbox (mounts, new
 * namespaces, kernel modules, bpf, keyrings, perf, userfaultfd, kexec,
 * io_uring, clock changes, ...), which fails with EPERM. */
#ifndef CRL_HELPER_SECCOMP_H
#define CRL_HELPER_SECCOMP_H

#include <linux/filter.h>

#include "../util/err.h"

enum crl_seccomp_profile {
    CRL_SECCOMP_CONTAINER,
    /* Stacked on the container profile in helpers that run corral's own code
     * inside a sandbox (tar): no executable mappings, no execve, so no file
     * of the sandbox's can ever become code in them. */
    CRL_SECCOMP_NO_NEW_CODE,
    /* The function backend: the container profile (which also refuses new
     * namespaces, so no user namespace to gain capabilities in), plus no
     * ptrace or process_vm_*, and sockets of the local, IP and
     * netlink-route families only (its network is its own namespace's;
     * not vsock, packet or alg), socketpair(AF_UNIX) only. */
    CRL_SECCOMP_FUNCTION,
};

/* Fill *prog with a malloc'd filter; free with crl_seccomp_free(). */
int crl_seccomp_build(enum crl_seccomp_profile profile, struct sock_fprog *prog,
                      struct crl_err *err);
void crl_seccomp_free(struct sock_fprog *prog);

#endif
