#include "idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/rawclone.h"
#include "../util/rawsys.h"

int crl_mount_idmapped(int mnt, int userns, bool read_only)
{
    int tree =
        (int)syscall(SYS_open_tree, mnt, "", AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return -1;
    struct mount_attr attr = {
        .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID |
                    (read_only ? MOUNT_ATTR_RDONLY : 0),
        .userns_fd = (uint64_t)userns,
    };
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
        int e = errno;
        close(tree);
        errno = e;
        return -1;
    }
    return tree;
}

/* The namespace's placeholder: it closes its copy of the pipe's write end
 * and waits for ours to close.  It shares our memory (CLONE_VM), so raw
 * system calls only, and reads the pipe's numbers from the parent's p,
 * which must not change until it has ended. */
NO_SAN static int hold(void *arg)
{
    const int *p = arg;
    char b;
    crl_raw1(SYS_close, p[1]);
    crl_raw3(SYS_read, p[0], (long)&b, 1);
    return 0;
}

static int write_map(pid_t pid, const char *file, uint32_t base, uint32_t count)
{
    char path[64], map[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
    int n = snprintf(map, sizeof(map), "0 %u %u\n", base, count);
    return crl_write_file_at(AT_FDCWD, path, map) < 0 || n <= 0 ? -1 : 0;
}

int crl_userns_of_range(uint32_t base, uint32_t count, struct crl_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "a user namespace: pipe");
    enum { STACK = 16384 };
    char *stack = malloc(STACK);
    long pid = stack
                   ? crl_raw_clone(CLONE_VM | CLONE_NEWUSER | SIGCHLD, stack + STACK, NULL, hold, p)
                   : -ENOMEM;
    int fd = -1;
    if (pid < 0) {
        crl_err_sys(err, (int)-pid, "a user namespace: clone");
        close(p[1]);
    } else {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%ld/ns/user", pid);
        if (write_map((pid_t)pid, "uid_map", base, count) < 0 ||
            write_map((pid_t)pid, "gid_map", base, count) < 0)
            crl_err_sys(err, errno, "a user namespace: its id maps");
        else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            crl_err_sys(err, errno, "a user namespace: %s", path);
        /* p stays as it is until the child is reaped: it reads p[1] (our
         * memory) whenever it runs, perhaps only after this close. */
        close(p[1]);
        while (waitpid((pid_t)pid, NULL, __WALL) < 0 && errno == EINTR)
            ;
    }
    close(p[0]);
    free(stack);
    return fd;
}
