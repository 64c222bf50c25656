#include "seccomp.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"

/* Denied outright with EPERM. */
static const char *const container_denied[] = {
    /* the filesystem tree and mounts */
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    /* namespaces: no nesting, no joining */
    "unshare",
    "setns",
    /* the kernel itself */
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "nfsservctl",
    "sysfs",
    "_sysctl",
    "uselib",
    "ustat",
    "vhangup",
    "iopl",
    "ioperm",
    "create_module",
    "get_kernel_syms",
    "query_module",
    /* large, bug-prone kernel surfaces */
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "open_by_handle_at",
    "name_to_handle_at",
    /* keyrings are not namespaced */
    "keyctl",
    "add_key",
    "request_key",
    /* clocks are host-wide */
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "stime",
    /* NUMA and memory policy of other processes */
    "move_pages",
    "migrate_pages",
    "mbind",
    "set_mempolicy",
    "set_mempolicy_home_node",
    /* other processes' memory outside ptrace's checks */
    "process_madvise",
    "kcmp",
    "pidfd_getfd",
    "vm86",
    "vm86old",
};

static int build_container(scmp_filter_ctx ctx, struct crl_err *err)
{
    for (size_t i = 0; i < CRL_ARRAY_SIZE(container_denied); i++) {
        int nr = seccomp_syscall_resolve_name(container_denied[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture */
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        if (r < 0)
            return crl_err_sys(err, -r, "seccomp rule for %s", container_denied[i]);
    }
    /* clone(2) is allowed, but not with a namespace flag: one rule per bit,
     * since a filter cannot test "any of these bits". */
    static const unsigned long ns_flags[] = {CLONE_NEWNS,     CLONE_NEWUTS, CLONE_NEWIPC,
                                             CLONE_NEWUSER,   CLONE_NEWPID, CLONE_NEWNET,
                                             CLONE_NEWCGROUP, 0x00000080 /* CLONE_NEWTIME */};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(ns_flags); i++) {
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
        if (r < 0)
            return crl_err_sys(err, -r, "seccomp rule for clone");
    }
    return 0;
}

static int build_no_new_code(scmp_filter_ctx ctx, struct crl_err *err)
{
    static const char *const calls[] = {"mmap", "mprotect", "pkey_mprotect"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(calls); i++) {
        int nr = seccomp_syscall_resolve_name(calls[i]);
        if (nr == __NR_SCMP_ERROR)
            continue;
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                                 SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
        if (r < 0)
            return crl_err_sys(err, -r, "seccomp rule for %s", calls[i]);
    }
    int r;
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(execve), 0)) < 0 ||
        (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(execveat), 0)) < 0)
        return crl_err_sys(err, -r, "seccomp rule for execve");
    return 0;
}

static int build_function(scmp_filter_ctx ctx, struct crl_err *err)
{
    static const char *const calls[] = {"ptrace", "process_vm_readv", "process_vm_writev"};
    int r;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(calls); i++) {
        int nr = seccomp_syscall_resolve_name(calls[i]);
        if (nr != __NR_SCMP_ERROR && (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
            return crl_err_sys(err, -r, "seccomp rule for %s", calls[i]);
    }
    /* Sockets of the families a program uses on its own network (its
     * namespace's loopback, or what its policy gives it) and nothing else:
     * not vsock (a way to the host that no namespace bounds), packet, alg
     * (the kernel's crypto), or the long tail of rarely used families.
     * netlink: route only (getaddrinfo's AI_ADDRCONFIG asks it).
     * socketpair(2): AF_UNIX only. */
    static const int families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
    for (int fam = 0; fam < AF_NETLINK; fam++) {
        bool allowed = false;
        for (size_t i = 0; i < CRL_ARRAY_SIZE(families); i++)
            allowed |= families[i] == fam;
        if (!allowed && (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket),
                                              1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)fam))) < 0)
            return crl_err_sys(err, -r, "seccomp rule for socket");
    }
    if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                              SCMP_A0(SCMP_CMP_GT, (scmp_datum_t)AF_NETLINK))) < 0 ||
        (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
                              SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)AF_NETLINK),
                              SCMP_A2(SCMP_CMP_NE, (scmp_datum_t)NETLINK_ROUTE))) < 0 ||
        (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
                              SCMP_A0(SCMP_CMP_NE, AF_UNIX))) < 0)
        return crl_err_sys(err, -r, "seccomp rule for socket");
    return 0;
}

int crl_seccomp_build(enum crl_seccomp_profile profile, struct sock_fprog *prog,
                      struct crl_err *err)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return crl_err_set(err, CRL_E_INTERNAL, "seccomp_init failed");
    int ret = -1;
    int r;
    cleanup_close int fd = -1;
    if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
        (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0) {
        crl_err_sys(err, -r, "seccomp attributes");
        goto out;
    }
    if (profile == CRL_SECCOMP_NO_NEW_CODE) {
        if (build_no_new_code(ctx, err) < 0)
            goto out;
    } else {
        if (build_container(ctx, err) < 0)
            goto out;
        if (profile == CRL_SECCOMP_FUNCTION && build_function(ctx, err) < 0)
            goto out;
        /* clone3 passes its flags in memory a filter cannot read: make it look
         * absent, so libc falls back to clone(2), whose flags we can check. */
        if ((r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0) {
            crl_err_sys(err, -r, "seccomp rule for clone3");
            goto out;
        }
    }

    fd = memfd_create("corral-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        crl_err_sys(err, errno, "memfd_create");
        goto out;
    }
    if ((r = seccomp_export_bpf(ctx, fd)) < 0) {
        crl_err_sys(err, -r, "seccomp_export_bpf");
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter)) {
        crl_err_set(err, CRL_E_INTERNAL, "seccomp_export_bpf wrote a malformed program");
        goto out;
    }
    struct sock_filter *insns = malloc((size_t)st.st_size);
    if (!insns) {
        crl_err_sys(err, ENOMEM, "seccomp program");
        goto out;
    }
    if (pread(fd, insns, (size_t)st.st_size, 0) != st.st_size) {
        free(insns);
        crl_err_sys(err, errno, "reading the seccomp program");
        goto out;
    }
    prog->filter = insns;
    prog->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
    ret = 0;
out:
    seccomp_release(ctx);
    return ret;
}

void crl_seccomp_free(struct sock_fprog *prog)
{
    free(prog->filter);
    prog->filter = NULL;
    prog->len = 0;
}
