#include "jail.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../util/cleanup.h"
#include "root.h"
#include "step.h"

/* Newer than Debian 12's headers. */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#define CRL_LANDLOCK_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define CRL_LANDLOCK_SCOPE_SIGNAL (1ULL << 1)

struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI 4 */
    uint64_t scoped;             /* ABI 6 */
};

#define FS_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define FS_FILE_RW \
    (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE)

/* Read: the sandbox's /etc (what of the host's a program needs, and the
 * files made for it) and its own /proc (its pid namespace's).  Read and
 * execute: the host's system dirs in the root; read and write: its
 * devices (root.h lists both). */
static const char *const read_paths[] = {"/etc", "/proc"};

int crl_landlock_abi(void)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int)abi;
}

static uint64_t fs_rights(int abi)
{
    uint64_t all = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1 */
    if (abi >= 2)
        all |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        all |= LANDLOCK_ACCESS_FS_TRUNCATE;
    if (abi >= 5)
        all |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
    return all;
}

static int add_rule(int ruleset, const char *path, int dirfd, uint64_t access, bool must)
{
    int fd = dirfd >= 0 ? dup(dirfd) : open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return must ? -errno : 0; /* /lib64 and friends may not exist */
    struct landlock_path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
    long r = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    if (r < 0 && errno == EINVAL && !must) {
        /* a file: only file rights apply to it */
        pb.allowed_access &= FS_FILE_RW | LANDLOCK_ACCESS_FS_EXECUTE;
        r = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    }
    int e = errno;
    close(fd);
    return r < 0 ? -e : 0;
}

int crl_jail_ruleset(int scratch_fd, const struct crl_zyg_claim *c)
{
    int abi = crl_landlock_abi();
    if (abi < 1)
        return -ENOSYS;
    uint64_t all = fs_rights(abi);
    /* No network rules: the sandbox's network namespace is its boundary
     * (loopback only, or what its policy gives it). */
    struct ll_ruleset_attr attr = {.handled_access_fs = all};
    size_t size = sizeof(uint64_t);
    if (abi >= 6) {
        attr.scoped = CRL_LANDLOCK_SCOPE_ABSTRACT_UNIX | CRL_LANDLOCK_SCOPE_SIGNAL;
        size = sizeof(attr);
    }
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0); /* close-on-exec */
    if (rs < 0)
        return -errno;
    /* listing any directory of the root: all of it is the sandbox's */
    int r = add_rule(rs, "/", -1, LANDLOCK_ACCESS_FS_READ_DIR, true);
    char path[64];
    for (size_t i = 0; r == 0 && i < CRL_FNROOT_N_SYSTEM_DIRS; i++) {
        snprintf(path, sizeof(path), "/%s", crl_fnroot_system_dirs[i]);
        r = add_rule(rs, path, -1, FS_READ | LANDLOCK_ACCESS_FS_EXECUTE, false);
    }
    for (size_t i = 0; r == 0 && i < CRL_ARRAY_SIZE(read_paths); i++)
        r = add_rule(rs, read_paths[i], -1, FS_READ, false);
    for (size_t i = 0; r == 0 && i < CRL_FNROOT_N_DEV_NODES; i++) {
        snprintf(path, sizeof(path), "/dev/%s", crl_fnroot_dev_nodes[i]);
        r = add_rule(rs, path, -1, FS_FILE_RW, false);
    }
    if (r == 0) /* POSIX shared memory and semaphores: the sandbox's own, on its tmpfs */
        r = add_rule(rs, "/dev/shm", -1, all & ~LANDLOCK_ACCESS_FS_EXECUTE, false);
    if (r == 0) /* the scratch dir: everything, executing included (scripts) */
        r = add_rule(rs, NULL, scratch_fd, all, true);
    /* volumes: everything, as the scratch dir; reading, if read-only */
    for (uint32_t i = 0; r == 0 && i < c->n_volumes; i++)
        r = add_rule(rs, c->volume_paths[i], -1,
                     c->volumes_ro & (1u << i) ? FS_READ | LANDLOCK_ACCESS_FS_EXECUTE : all, true);
    if (r < 0) {
        close(rs);
        return r;
    }
    return rs;
}

static int set_limit(int res, rlim_t v)
{
    struct rlimit rl = {v, v};
    return setrlimit(res, &rl) < 0 ? -errno : 0;
}

int crl_jail_enter(const struct crl_jail *j, const char **step)
{
    /* stdio at 0-2; the scratch dir and cgroup files stay until used */
    for (int i = 0; i < 3; i++)
        STEP("stdio", neg_errno(dup2(j->stdio[i], i)));
    if (j->status_fd != j->status_at)
        STEP("status", neg_errno(dup3(j->status_fd, j->status_at, O_CLOEXEC)));
    STEP("setsid", neg_errno(setsid()));
    if (j->tty)
        STEP("tty", neg_errno(ioctl(0, TIOCSCTTY, 0)));
    for (unsigned i = 0; i < j->n_cgroup_fds; i++)
        STEP("cgroup", write(j->cgroup_fds[i], "0", 1) == 1 ? 0 : -errno);
    STEP("rlimit", set_limit(RLIMIT_NOFILE, j->nofile));
    STEP("rlimit", set_limit(RLIMIT_NPROC, j->nproc));
    STEP("rlimit", set_limit(RLIMIT_CORE, 0));
    STEP("chdir", neg_errno(fchdir(j->scratch_fd)));
    STEP("creds", neg_errno(setgroups(0, NULL)));
    STEP("creds", neg_errno(setresgid(j->gid, j->gid, j->gid)));
    STEP("creds", neg_errno(setresuid(j->uid, j->uid, j->uid)));
    /* The uid change made it non-dumpable; a call that executes nothing
     * (python) would stay so, its /proc/self then root's.  It is its own. */
    STEP("dumpable", neg_errno(prctl(PR_SET_DUMPABLE, 1)));
    /* a credential change clears it: set it now; the call dies with its zygote */
    STEP("pdeathsig", neg_errno(prctl(PR_SET_PDEATHSIG, SIGKILL)));
    STEP("no_new_privs", neg_errno(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)));
    STEP("landlock", neg_errno(syscall(SYS_landlock_restrict_self, j->landlock_fd, 0)));
    /* Everything but stdio goes before the filter (close_range stays allowed
     * after, but nothing of ours is left to close then). */
    STEP("close", neg_errno((int)syscall(SYS_close_range, 3, j->status_at - 1, 0)));
    STEP("close", neg_errno((int)syscall(SYS_close_range, j->status_at + 1, ~0u, 0)));
    STEP("seccomp", neg_errno(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, j->seccomp)));
    return 0;
}
