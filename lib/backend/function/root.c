#include "root.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../core/etc.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "step.h"

const char *const crl_fnroot_system_dirs[CRL_FNROOT_N_SYSTEM_DIRS] = {
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};
const char *const crl_fnroot_dev_nodes[CRL_FNROOT_N_DEV_NODES] = {"null", "zero", "full", "random",
                                                                  "urandom"};
/* Files of the host's /etc that programs read to run at all. */
static const char *const etc_from_host[] = {"ld.so.cache", "localtime", "alternatives"};

static const char nsswitch[] = "passwd: files\n"
                               "group: files\n"
                               "shadow: files\n"
                               "hosts: files dns\n"
                               "networks: files\n"
                               "protocols: files\n"
                               "services: files\n";

/* `host` (an absolute path) at `dst` (relative to the cwd), read-only,
 * nosuid and nodev all the way down: one detached copy of its mount tree
 * made read-only as a whole (a legacy bind remount would leave the mounts
 * below it writable), then attached. */
static int bind_ro(const char *host, const char *dst)
{
    cleanup_close int tree = (int)syscall(SYS_open_tree, AT_FDCWD, host,
                                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0)
        return -errno;
    struct mount_attr attr = {
        .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    };
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) <
            0 ||
        syscall(SYS_move_mount, tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return -errno;
    return 0;
}

static int touch(const char *path, mode_t mode)
{
    int fd = crl_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_NOFOLLOW, mode);
    if (fd < 0)
        return -errno;
    close(fd);
    return 0;
}

/* The host's `host` at `dst`: the same symlink, or a read-only bind of the
 * file or directory; nothing if the host has none. */
static int from_host(const char *host, const char *dst)
{
    struct stat st;
    if (lstat(host, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(host, target, sizeof(target) - 1);
        if (n < 0)
            return -errno;
        target[n] = 0;
        return neg_errno(symlink(target, dst));
    }
    int r = S_ISDIR(st.st_mode) ? neg_errno(mkdir(dst, 0755)) : touch(dst, 0644);
    return r < 0 ? r : bind_ro(host, dst);
}

static int write_file(const char *path, const char *text, mode_t mode)
{
    cleanup_close int fd =
        crl_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode);
    if (fd < 0 || crl_write_full(fd, text, strlen(text)) < 0)
        return -errno;
    return 0;
}

/* A generated file of /etc (`len`: what its generator returned). */
static int etc_file(const char *path, const char *text, int len)
{
    return len < 0 ? -ENAMETOOLONG : write_file(path, text, 0644);
}

static int make_dev(const char **step)
{
    char path[64];
    STEP("dev", neg_errno(mkdir("dev", 0755)));
    for (size_t i = 0; i < CRL_FNROOT_N_DEV_NODES; i++) {
        char host[32];
        snprintf(path, sizeof(path), "dev/%s", crl_fnroot_dev_nodes[i]);
        snprintf(host, sizeof(host), "/dev/%s", crl_fnroot_dev_nodes[i]);
        STEP("dev", touch(path, 0666));
        STEP("dev", neg_errno(mount(host, path, NULL, MS_BIND, NULL)));
    }
    STEP("dev", neg_errno(mkdir("dev/shm", 01777)));
    STEP("dev", neg_errno(chmod("dev/shm", 01777))); /* the umask */
    static const char *const links[][2] = {{"/proc/self/fd", "dev/fd"},
                                           {"/proc/self/fd/0", "dev/stdin"},
                                           {"/proc/self/fd/1", "dev/stdout"},
                                           {"/proc/self/fd/2", "dev/stderr"}};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(links); i++)
        STEP("dev", neg_errno(symlink(links[i][0], links[i][1])));
    return 0;
}

int crl_fnroot_build(const char *mountpoint, const char **step)
{
    /* Nothing we mount may reach the host's namespace, nor the host's
     * later mounts ours. */
    STEP("mount-private", neg_errno(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)));
    STEP("tmpfs",
         neg_errno(mount("tmpfs", mountpoint, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")));
    STEP("tmpfs", neg_errno(chdir(mountpoint)));
    char host[32];
    for (size_t i = 0; i < CRL_FNROOT_N_SYSTEM_DIRS; i++) {
        snprintf(host, sizeof(host), "/%s", crl_fnroot_system_dirs[i]);
        STEP("system-dirs", from_host(host, crl_fnroot_system_dirs[i]));
    }
    /* /etc on a tmpfs of its own: what a sandbox writes to its disk can
     * never leave the claim without room for it, nor does /etc count as
     * the sandbox's use of disk_mb. */
    STEP("etc", neg_errno(mkdir("etc", 0755)));
    STEP("etc", neg_errno(mount("tmpfs", "etc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                "size=64k,nr_inodes=64,mode=0755")));
    for (size_t i = 0; i < CRL_ARRAY_SIZE(etc_from_host); i++) {
        char dst[64];
        snprintf(host, sizeof(host), "/etc/%s", etc_from_host[i]);
        snprintf(dst, sizeof(dst), "etc/%s", etc_from_host[i]);
        STEP("etc", from_host(host, dst));
    }
    STEP("etc", write_file("etc/nsswitch.conf", nsswitch, 0644));
    STEP("dev", make_dev(step));
    STEP("proc", neg_errno(mkdir("proc", 0555)));
    STEP("proc", neg_errno(mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)));
    STEP("scratch", neg_errno(mkdir(CRL_FN_SCRATCH + 1, 0700)));
    /* Into it, and the host's tree out of the namespace. */
    STEP("pivot", neg_errno(syscall(SYS_pivot_root, ".", ".")));
    STEP("pivot", neg_errno(umount2(".", MNT_DETACH)));
    STEP("pivot", neg_errno(chdir("/")));
    return 0;
}

int crl_fnroot_prepare(int root_fd, int scratch_fd, unsigned disk_mb, uid_t uid, gid_t gid,
                       const char **step)
{
    /* Its files, /dev/shm and /etc's together. */
    char size[32];
    snprintf(size, sizeof(size), "%um", disk_mb);
    cleanup_close int fs =
        (int)syscall(SYS_fspick, root_fd, "", FSPICK_EMPTY_PATH | FSPICK_CLOEXEC);
    STEP("disk-size", fs < 0 ? -errno : 0);
    STEP("disk-size", neg_errno(syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", size, 0)));
    STEP("disk-size",
         neg_errno(syscall(SYS_fsconfig, fs, FSCONFIG_CMD_RECONFIGURE, NULL, NULL, 0)));
    STEP("scratch", neg_errno(fchownat(scratch_fd, "", uid, gid, AT_EMPTY_PATH)));
    return 0;
}

static bool at_or_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == 0 || path[n] == '/');
}

const char *crl_fnroot_volume_refused(const char *path)
{
    char dir[32];
    for (size_t i = 0; i < CRL_FNROOT_N_SYSTEM_DIRS; i++) {
        snprintf(dir, sizeof(dir), "/%s", crl_fnroot_system_dirs[i]);
        if (at_or_under(path, dir))
            return "a function sandbox's system dirs are the host's, read-only: mount volumes "
                   "elsewhere (/data, or under /scratch)";
    }
    if (at_or_under(path, "/etc"))
        return "a function sandbox's /etc is read-only: mount volumes elsewhere";
    if (strcmp(path, CRL_FN_SCRATCH) == 0)
        return "it would hide the sandbox's scratch dir: mount volumes under it, or elsewhere";
    return NULL;
}

int crl_fnroot_volumes(const struct crl_zyg_claim *c, const int *fds, const char **step)
{
    for (uint32_t i = 0; i < c->n_volumes; i++) {
        char dir[CRL_ZYG_VOLUME_PATH];
        snprintf(dir, sizeof(dir), "%s", c->volume_paths[i]);
        if (dir[0] != '/' || crl_fnroot_volume_refused(dir))
            STEP("volume", -EINVAL);
        for (char *p = dir + 1; *p; p++) {
            if (*p != '/')
                continue;
            *p = 0;
            if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                STEP("volume", -errno);
            *p = '/';
        }
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            STEP("volume", -errno);
        STEP("volume", neg_errno(syscall(SYS_move_mount, fds[i], "", AT_FDCWD, dir,
                                         MOVE_MOUNT_F_EMPTY_PATH)));
    }
    return 0;
}

int crl_fnroot_claim(const struct crl_zyg_claim *c, const char **step)
{
    char t[1024];
    STEP("etc", etc_file("/etc/hostname", t, crl_etc_hostname(t, sizeof(t), c->hostname)));
    STEP("etc", etc_file("/etc/hosts", t, crl_etc_hosts(t, sizeof(t), c->hostname)));
    STEP("etc", etc_file("/etc/resolv.conf", t, crl_etc_resolv_conf(t, sizeof(t), "none", NULL)));
    STEP("etc", etc_file("/etc/passwd", t,
                         crl_etc_passwd(t, sizeof(t), "sandbox", c->uid, c->gid, CRL_FN_SCRATCH)));
    STEP("etc", etc_file("/etc/group", t, crl_etc_group(t, sizeof(t), "sandbox", c->gid)));
    /* and nobody changes it after (the files bound in are read-only mounts of their own) */
    STEP("etc", neg_errno(mount(NULL, "/etc", NULL,
                                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                NULL)));
    return 0;
}
