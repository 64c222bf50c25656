#include "init.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <linux/sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../../util/rawsys.h"
#include "spawn_proto.h"

/* Tell the spawner why building the sandbox failed (corral-init reports
 * success). */
NO_SAN static long report(int sock, int err, unsigned step)
{
    struct crl_spawn_reply r;
    char *p = (char *)&r;
    for (unsigned i = 0; i < sizeof(r); i++)
        p[i] = 0;
    r.op = CRL_SPAWN_REPLY;
    r.err = err;
    r.step = step;
    struct iovec iov = {.iov_base = &r, .iov_len = sizeof(r)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    return crl_raw3(SYS_sendmsg, sock, &mh, MSG_NOSIGNAL);
}

#define CHECK(expr, step)                   \
    do {                                    \
        long r_ = (expr);                   \
        if (r_ < 0) {                       \
            report(sync, (int)-r_, (step)); \
            crl_raw_exit(1);                \
        }                                   \
    } while (0)

NO_SAN static long raw_mount(const char *src, const char *dst, const char *type,
                             unsigned long flags, const char *data)
{
    return crl_raw5(SYS_mount, src, dst, type, flags, data);
}

/* A bind mount made read-only: two calls, as the kernel wants. */
NO_SAN static long bind_ro(const char *src, const char *dst, unsigned long extra)
{
    long r = raw_mount(src, dst, NULL, MS_BIND, NULL);
    if (r < 0)
        return r;
    return raw_mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | extra, NULL);
}

NO_SAN static long touch(const char *path)
{
    long fd =
        crl_raw4(SYS_openat, AT_FDCWD, path, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return fd;
    crl_raw1(SYS_close, fd);
    return 0;
}

NO_SAN static long mkdir_ok(const char *path, int mode)
{
    long r = crl_raw3(SYS_mkdirat, AT_FDCWD, path, mode);
    return r == -EEXIST ? 0 : r;
}

/* A volume's mount at `path` (absolute, normal: the spec checked it), its
 * directories made as needed.  Only after pivot_root: every component,
 * symlinks too, resolves in the sandbox's own tree.  A path that is not a
 * directory (a file, a symlink's final component) is refused by the
 * kernel: ENOTDIR. */
NO_SAN static long mount_volume(int fd, const char *path)
{
    char dir[CRL_SPAWN_VOLUME_PATH];
    long n = 0;
    for (; path[n] && n < CRL_SPAWN_VOLUME_PATH - 1; n++) {
        dir[n] = path[n];
        if (n > 0 && path[n] == '/') {
            dir[n] = 0;
            long r = mkdir_ok(dir, 0755);
            if (r < 0)
                return r;
            dir[n] = '/';
        }
    }
    dir[n] = 0;
    long r = mkdir_ok(dir, 0755);
    if (r < 0)
        return r;
    return crl_raw5(SYS_move_mount, fd, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH);
}

/* Receive the idmapped image layer mounts from the spawner (top first),
 * then our /proc/PID/timens_offsets; returns how many descriptors came. */
NO_SAN static long recv_fds(int sock, int *fds)
{
    char byte;
    union {
        char buf[CMSG_SPACE(sizeof(int) * (CRL_SPAWN_MAX_LAYERS + CRL_SPAWN_MAX_VOLUMES + 3))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    long r = crl_raw3(SYS_recvmsg, sock, &mh, MSG_CMSG_CLOEXEC);
    if (r < 0)
        return r;
    if (r == 0)
        return -EPIPE;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (!cm || cm->cmsg_type != SCM_RIGHTS || (mh.msg_flags & MSG_CTRUNC))
        return -EPROTO;
    long n = (long)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    const unsigned char *d = CMSG_DATA(cm);
    for (long i = 0; i < n; i++)
        __builtin_memcpy(&fds[i], d + i * (long)sizeof(int), sizeof(int));
    return n >= 2 ? n : -EPROTO;
}

/* The length of the string at p, which must end before `end`; -1 if not. */
NO_SAN static long bounded_len(const char *p, const char *end)
{
    for (const char *q = p; q < end; q++)
        if (!*q)
            return q - p;
    return -1;
}

/* Write the run-time files ("name\0contents\0" pairs) into runtime/etc. */
NO_SAN static long write_files(const char *p, const char *end)
{
    static const char dir[] = "runtime/etc/";
    while (p < end) {
        long nlen = bounded_len(p, end);
        long dlen = nlen < 0 ? -1 : bounded_len(p + nlen + 1, end);
        if (dlen < 0 || nlen == 0 || nlen + sizeof(dir) > 64)
            return -EPROTO;
        char path[64];
        unsigned long k = 0;
        for (const char *c = dir; *c;)
            path[k++] = *c++;
        for (long i = 0; i < nlen; i++)
            path[k++] = p[i];
        path[k] = 0;
        const char *data = p + nlen + 1;
        long fd = crl_raw4(SYS_openat, AT_FDCWD, path,
                           O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return fd;
        for (long off = 0; off < dlen;) {
            long w = crl_raw3(SYS_write, fd, data + off, dlen - off);
            if (w == -EINTR)
                continue;
            if (w <= 0) {
                crl_raw1(SYS_close, fd);
                return w ? w : -EIO;
            }
            off += w;
        }
        crl_raw1(SYS_close, fd);
        p = data + dlen + 1;
    }
    return 0;
}

/* "l<i>" into p; returns the end. */
NO_SAN static char *layer_name(char *p, long i)
{
    char digits[12];
    int k = 0;
    do
        digits[k++] = (char)('0' + i % 10);
    while ((i /= 10) > 0);
    *p++ = 'l';
    while (k)
        *p++ = digits[--k];
    *p = 0;
    return p;
}

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

/* Files of /proc that reveal or poke at the host kernel: covered by /dev/null. */
static const char *const proc_masked_files[] = {
    "root/proc/kcore",       "root/proc/keys",          "root/proc/timer_list",
    "root/proc/sched_debug", "root/proc/kpagecount",    "root/proc/kpageflags",
    "root/proc/kpagecgroup", "root/proc/latency_stats", "root/proc/kmsg",
    "root/proc/config.gz",
};
static const char *const proc_masked_dirs[] = {"root/proc/acpi", "root/proc/scsi"};
/* Kernel tunables stay readable but not writable. */
static const char *const proc_readonly[] = {"root/proc/sys", "root/proc/sysrq-trigger",
                                            "root/proc/irq", "root/proc/bus", "root/proc/fs"};

/* Put fd at `to` without close-on-exec (dup3 refuses from == to). */
NO_SAN static long move_fd(long from, int to)
{
    if (from == to)
        return crl_raw3(SYS_fcntl, to, F_SETFD, 0);
    long r = crl_raw3(SYS_dup3, from, to, 0);
    if (r >= 0)
        crl_raw1(SYS_close, from);
    return r;
}

/* fd at `to`, close-on-exec. */
NO_SAN static long move_fd_cloexec(long from, int to)
{
    long r = crl_raw3(SYS_dup3, from, to, O_CLOEXEC);
    if (r >= 0)
        crl_raw1(SYS_close, from);
    return r;
}

/* Where the descriptors we keep wait, out of the way of what we open. */
enum { HIGH_SYNC = 1000, HIGH_INIT = 1001, HIGH_TMPFS = 1002, HIGH_SPARE = 1003 };

NO_SAN int crl_init_main(void *arg)
{
    struct crl_init_args *a = arg;

    /* The fd table is a copy of the spawner's: keep only the create socket
     * and the corral-init binary (the spawner's end of the socket comes
     * with the go, below: held from the start, it would keep us from
     * seeing the spawner die while we wait). */
    long r0 = crl_raw3(SYS_fcntl, a->sync_fd, F_DUPFD_CLOEXEC, HIGH_SYNC);
    long r1 = crl_raw3(SYS_fcntl, a->init_fd, F_DUPFD_CLOEXEC, HIGH_INIT);
    if (r0 != HIGH_SYNC || r1 != HIGH_INIT)
        crl_raw_exit(1);
    crl_raw3(SYS_close_range, 0, HIGH_SYNC - 1, 0);
    crl_raw3(SYS_close_range, HIGH_INIT + 1, ~0u, 0);
    int sync = HIGH_SYNC;

    int lower[CRL_SPAWN_MAX_LAYERS + CRL_SPAWN_MAX_VOLUMES + 3];
    long n_lower = recv_fds(sync, lower);
    CHECK(n_lower, CRL_STEP_SYNC);
    CHECK(n_lower < 3 + (long)a->n_volumes ? -EPROTO : 0, CRL_STEP_SYNC);
    CHECK(move_fd_cloexec(lower[--n_lower], HIGH_SPARE), CRL_STEP_SYNC);
    int timens_fd = lower[--n_lower];
    n_lower -= a->n_volumes; /* the volumes' follow the layers' */
    const int *volume_fds = lower + n_lower;

    /* The spawner has written our uid/gid maps: become root of the sandbox. */
    CHECK(crl_raw2(SYS_setgroups, 0, NULL), CRL_STEP_CREDS);
    CHECK(crl_raw3(SYS_setresgid, 0, 0, 0), CRL_STEP_CREDS);
    CHECK(crl_raw3(SYS_setresuid, 0, 0, 0), CRL_STEP_CREDS);
    /* The spawner moved us into the sandbox's cgroups; make that the cgroup root we see. */
    CHECK(crl_raw1(SYS_unshare, CLONE_NEWCGROUP), CRL_STEP_CGROUPNS);
    /* Clocks of the sandbox's own: a time namespace we enter when we
     * execute corral-init.  Its offsets go in through the descriptor the
     * spawner opened: our /proc/self/timens_offsets belongs to host root
     * (we share the spawner's non-dumpable memory), not to us. */
    CHECK(crl_raw1(SYS_unshare, CLONE_NEWTIME), CRL_STEP_TIMENS);
    CHECK(crl_raw3(SYS_write, timens_fd, a->timens, crl_raw_strlen(a->timens)), CRL_STEP_TIMENS);
    crl_raw1(SYS_close, timens_fd);
    CHECK(crl_raw2(SYS_sethostname, a->hostname, crl_raw_strlen(a->hostname)), CRL_STEP_CREDS);

    /* The writable layer: one tmpfs holds the overlay's upper and work dirs
     * and /dev/shm, so disk_mb caps them all together. */
    CHECK(raw_mount("tmpfs", a->workdir, "tmpfs", MS_NOSUID | MS_NODEV, a->tmpfs_opts),
          CRL_STEP_TMPFS);
    /* kept out of the way of the layer fds, whose numbers come free below */
    long tmpfs_fd = crl_raw4(SYS_openat, AT_FDCWD, a->workdir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    CHECK(tmpfs_fd, CRL_STEP_TMPFS);
    CHECK(move_fd_cloexec(tmpfs_fd, HIGH_TMPFS), CRL_STEP_TMPFS);
    tmpfs_fd = HIGH_TMPFS;
    CHECK(crl_raw1(SYS_chdir, a->workdir), CRL_STEP_TMPFS);
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "upper", 0755), CRL_STEP_TMPFS);
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "work", 0700), CRL_STEP_TMPFS);
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "root", 0755), CRL_STEP_TMPFS);
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "shm", 01777), CRL_STEP_TMPFS);
    CHECK(crl_raw3(SYS_fchmodat, AT_FDCWD, "shm", 01777), CRL_STEP_TMPFS); /* umask */
    /* /etc/hosts, /etc/hostname and /etc/resolv.conf, as a machine has
     * them, in a lower layer of their own above the image's: ordinary
     * files of the merged root (a rename over one works, unlike over
     * Docker's bind mounts), nothing in the upper dir, and so in no
     * checkpoint, until the user changes one, and gone with the tmpfs. */
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "runtime", 0755), CRL_STEP_FILES);
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "runtime/etc", 0755), CRL_STEP_FILES);
    CHECK(write_files(a->files, a->files + a->files_len), CRL_STEP_FILES);
    /* Each layer at l<i>, and the overlay's option string naming them.
     * xino: the layers are different filesystems (EROFS images, the
     * tmpfs), and without it a directory's d_ino from readdir is not its
     * st_ino; with it every inode number carries its layer in its top
     * bits, unique and on one st_dev. */
    static const char head[] = "lowerdir=runtime:",
                      tail[] = ",upperdir=upper,workdir=work,userxattr,volatile,xino=on";
    char opts[sizeof(head) + CRL_SPAWN_MAX_LAYERS * 5 + sizeof(tail)];
    char *o = opts;
    for (const char *c = head; *c;)
        *o++ = *c++;
    for (long i = 0; i < n_lower; i++) {
        char name[16];
        layer_name(name, i);
        CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, name, 0755), CRL_STEP_LOWER);
        CHECK(crl_raw5(SYS_move_mount, lower[i], "", AT_FDCWD, name, MOVE_MOUNT_F_EMPTY_PATH),
              CRL_STEP_LOWER);
        crl_raw1(SYS_close, lower[i]);
        if (i)
            *o++ = ':';
        o = layer_name(o, i);
    }
    for (const char *c = tail; *c;)
        *o++ = *c++;
    *o = 0;
    CHECK(raw_mount("overlay", "root", "overlay", MS_NOSUID | MS_NODEV, opts), CRL_STEP_OVERLAY);

    CHECK(mkdir_ok("root/proc", 0555), CRL_STEP_PROC);
    CHECK(raw_mount("proc", "root/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL),
          CRL_STEP_PROC);

    /* /dev: a small tmpfs with the host's harmless character devices bound in
     * (a user namespace cannot mknod), a private devpts, and /dev/shm. */
    CHECK(mkdir_ok("root/dev", 0755), CRL_STEP_DEV);
    CHECK(raw_mount("tmpfs", "root/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k"),
          CRL_STEP_DEV);
    char path[64], host[32];
    for (unsigned i = 0; i < sizeof(dev_nodes) / sizeof(dev_nodes[0]); i++) {
        const char *n = dev_nodes[i];
        unsigned k = 0, j = 0;
        for (const char *s = "root/dev/"; *s;)
            path[k++] = *s++;
        for (const char *s = "/dev/"; *s;)
            host[j++] = *s++;
        for (const char *s = n; *s; s++)
            path[k++] = *s, host[j++] = *s;
        path[k] = 0;
        host[j] = 0;
        CHECK(touch(path), CRL_STEP_DEV);
        CHECK(raw_mount(host, path, NULL, MS_BIND, NULL), CRL_STEP_DEV);
    }
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "root/dev/pts", 0755), CRL_STEP_DEV);
    CHECK(raw_mount("devpts", "root/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                    "newinstance,ptmxmode=0666,mode=0620,gid=5"),
          CRL_STEP_DEV);
    CHECK(crl_raw3(SYS_symlinkat, "pts/ptmx", AT_FDCWD, "root/dev/ptmx"), CRL_STEP_DEV);
    CHECK(crl_raw3(SYS_symlinkat, "/proc/self/fd", AT_FDCWD, "root/dev/fd"), CRL_STEP_DEV);
    CHECK(crl_raw3(SYS_symlinkat, "/proc/self/fd/0", AT_FDCWD, "root/dev/stdin"), CRL_STEP_DEV);
    CHECK(crl_raw3(SYS_symlinkat, "/proc/self/fd/1", AT_FDCWD, "root/dev/stdout"), CRL_STEP_DEV);
    CHECK(crl_raw3(SYS_symlinkat, "/proc/self/fd/2", AT_FDCWD, "root/dev/stderr"), CRL_STEP_DEV);
    CHECK(crl_raw3(SYS_mkdirat, AT_FDCWD, "root/dev/shm", 01777), CRL_STEP_DEV);
    CHECK(raw_mount("shm", "root/dev/shm", NULL, MS_BIND, NULL), CRL_STEP_DEV);
    CHECK(raw_mount(NULL, "root/dev", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
                    "mode=0755,size=64k"),
          CRL_STEP_DEV);

    /* /tmp is the overlay's own directory, not a mount: what is written
     * there is part of the writable layer, and so of a checkpoint (the
     * upper dir is all a snapshot sees).  An image without one gets it. */
    long made_tmp = crl_raw3(SYS_mkdirat, AT_FDCWD, "root/tmp", 01777);
    if (made_tmp == 0)
        CHECK(crl_raw3(SYS_fchmodat, AT_FDCWD, "root/tmp", 01777), CRL_STEP_TMP); /* umask */
    else if (made_tmp != -EEXIST)
        CHECK(made_tmp, CRL_STEP_TMP);

    /* /sys is masked: a fresh sysfs needs a network namespace owned by the
     * sandbox (ours is the host's, on purpose), and the host's would show
     * every other sandbox's cgroup.  Software falls back to /proc. */
    CHECK(mkdir_ok("root/sys", 0555), CRL_STEP_SYS);
    CHECK(raw_mount("sysfs-masked", "root/sys", "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555"),
          CRL_STEP_SYS);

    for (unsigned i = 0; i < sizeof(proc_masked_files) / sizeof(proc_masked_files[0]); i++) {
        long r = raw_mount("/dev/null", proc_masked_files[i], NULL, MS_BIND, NULL);
        if (r < 0 && r != -ENOENT)
            CHECK(r, CRL_STEP_MASK);
    }
    for (unsigned i = 0; i < sizeof(proc_masked_dirs) / sizeof(proc_masked_dirs[0]); i++) {
        long r = raw_mount("tmpfs", proc_masked_dirs[i], "tmpfs",
                           MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k");
        if (r < 0 && r != -ENOENT)
            CHECK(r, CRL_STEP_MASK);
    }
    for (unsigned i = 0; i < sizeof(proc_readonly) / sizeof(proc_readonly[0]); i++) {
        long r = bind_ro(proc_readonly[i], proc_readonly[i], MS_NOSUID | MS_NODEV | MS_NOEXEC);
        if (r < 0 && r != -ENOENT)
            CHECK(r, CRL_STEP_MASK);
    }

    /* Into the new root; the host's tree is detached from this namespace. */
    CHECK(crl_raw1(SYS_chdir, "root"), CRL_STEP_PIVOT);
    CHECK(crl_raw2(SYS_pivot_root, ".", "."), CRL_STEP_PIVOT);
    CHECK(crl_raw2(SYS_umount2, ".", MNT_DETACH), CRL_STEP_PIVOT);
    CHECK(crl_raw1(SYS_chdir, "/"), CRL_STEP_PIVOT);
    long root_fd = crl_raw4(SYS_openat, AT_FDCWD, "/", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    CHECK(root_fd, CRL_STEP_PIVOT);
    for (unsigned i = 0; i < a->n_volumes; i++) {
        CHECK(mount_volume(volume_fds[i], a->volume_paths[i]), CRL_STEP_VOLUME);
        crl_raw1(SYS_close, volume_fds[i]);
    }

    /* Die with the spawner while the sandbox is being built (set after the
     * uid change above, which clears the parent-death signal); cleared
     * before the exec, below. */
    CHECK(crl_raw2(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL), CRL_STEP_CREDS);
    /* The identity every process of the sandbox's inherits from corral-init,
     * which forks them: root keeps Docker's capabilities (the rest leave the
     * bounding set, so the exec leaves us those alone), no_new_privs, and
     * the seccomp filter, installed once here rather than at every exec. */
    for (int cap = 0; cap <= a->last_cap; cap++)
        if (cap > 63 || !(KEEP_CAPS & (1ull << cap)))
            CHECK(crl_raw2(SYS_prctl, PR_CAPBSET_DROP, cap), CRL_STEP_CREDS);
    CHECK(crl_raw5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), CRL_STEP_SECCOMP);
    CHECK(crl_raw3(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, a->seccomp), CRL_STEP_SECCOMP);

    /* corral-init reports with these, at the numbers it expects. */
    CHECK(move_fd(root_fd, 4), CRL_STEP_EXEC);
    CHECK(move_fd(tmpfs_fd, 5), CRL_STEP_EXEC);
    CHECK(move_fd(HIGH_SYNC, 3), CRL_STEP_EXEC);
    sync = 3;
    CHECK(move_fd(HIGH_SPARE, CRL_INIT_SPARE_FD), CRL_STEP_EXEC);
    /* Built: the sandbox outlives its spawner and corrald from here on,
     * and a spawner started anew takes it over (CRL_SPAWN_ADOPT).  A
     * spawner that dies before our report fails the create, and corrald
     * kills its cgroup, us in it. */
    CHECK(crl_raw2(SYS_prctl, PR_SET_PDEATHSIG, 0), CRL_STEP_EXEC);
    static char *const argv[] = {(char *)"corral-init", NULL};
    static char *const envp[] = {NULL};
    CHECK(crl_raw5(SYS_execveat, HIGH_INIT, "", argv, envp, AT_EMPTY_PATH), CRL_STEP_EXEC);
    return 1;
}
