#include "file_in.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fdio.h"
#include "../util/path.h"
#include "stream.h"
#include "tar.h"

/* mkdir -p of path's parent, inside the sandbox: the open that follows
 * says what failed. */
static void make_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash && slash > path && (size_t)(slash - path) < sizeof(dir)) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
        crl_mkdir_p(dir, 0755);
    }
}

static int fail_errno(int e, const char *tmp, char *msg, size_t msglen)
{
    if (tmp)
        unlink(tmp);
    snprintf(msg, msglen, "%s", strerror(e));
    return crl_tar_status_of_errno(e);
}

/* Follow `path` while it names a symlink, as open(2) would, into `out`.
 * Our root is the sandbox's (setns into its mount namespace), so no link
 * leads out of it. */
static int follow_links(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    for (int hops = 0; hops < 40; hops++) {
        char target[PATH_MAX];
        ssize_t n = readlink(out, target, sizeof(target) - 1);
        if (n < 0)
            return errno == EINVAL || errno == ENOENT ? 0 : -errno; /* not a link */
        target[n] = 0;
        if (target[0] == '/') {
            snprintf(out, cap, "%s", target);
        } else {
            char *slash = strrchr(out, '/');
            size_t dir = slash ? (size_t)(slash - out) + 1 : 0;
            if (dir + (size_t)n >= cap)
                return -ENAMETOOLONG;
            memcpy(out + dir, target, (size_t)n + 1);
        }
    }
    return -ELOOP;
}

/* Where a new file cannot be made beside the old one (a directory the user
 * may not write, /proc), an existing file is written in place. */
static bool write_in_place(int e)
{
    return e == EACCES || e == EPERM || e == EROFS || e == ENOENT;
}

/* Copy the pipe into a new file beside `path`, as the sandbox's user, and
 * put it in place only once corrald says the upload is whole (a commit
 * byte on `ctl`): a failed or abandoned upload leaves `path` as it was.
 * A path that is a symlink is written through, as open(2) would. */
int crl_file_in(int data, int ctl, const char *path_in, mode_t mode, char *msg, size_t msglen)
{
    make_parent(path_in);
    umask(0);
    char path[PATH_MAX];
    int r = follow_links(path_in, path, sizeof(path));
    if (r < 0)
        return fail_errno(-r, NULL, msg, msglen);
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode))
        return fail_errno(EISDIR, NULL, msg, msglen);
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    snprintf(tmp, sizeof(tmp), "%.*s/.corral-upload-%d", slash ? (int)(slash - path) : 0, path,
             (int)getpid());
    long fd = -EEXIST;
    if (!exists || S_ISREG(sb.st_mode)) {
        unlink(tmp); /* one a killed helper of the same pid left */
        fd = crl_path_open_in_root(AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
    }
    bool in_place = exists && fd < 0 && (fd == -EEXIST || write_in_place((int)-fd));
    if (in_place) /* a device, a fifo, or a directory closed to new files */
        fd = crl_path_open_in_root(AT_FDCWD, path, O_WRONLY | O_TRUNC, 0);
    if (fd < 0)
        return fail_errno((int)-fd, NULL, msg, msglen);
    const char *undo = in_place ? NULL : tmp;
    unsigned long long total = 0;
    for (;;) {
        /* splice moves pages from the pipe to the file without a copy here */
        ssize_t n = splice(data, NULL, (int)fd, NULL, 1 << 20, SPLICE_F_MOVE);
        if (n < 0 && errno == EINVAL) { /* a file system without splice: copy */
            char buf[65536];
            n = read(data, buf, sizeof(buf));
            if (n > 0 && crl_write_full((int)fd, buf, (size_t)n) < 0)
                n = -1;
        }
        if (n == 0)
            break;
        if (n < 0) {
            int e = errno;
            close((int)fd);
            return fail_errno(e, undo, msg, msglen);
        }
        total += (unsigned long long)n;
    }
    if (close((int)fd) < 0)
        return fail_errno(errno, undo, msg, msglen);
    if (in_place) {
        snprintf(msg, msglen, "bytes=%llu", total);
        return CRL_STREAM_OK;
    }
    char c = CRL_STREAM_COMMIT;
    ssize_t n = 1;
    while (ctl >= 0 && (n = read(ctl, &c, 1)) < 0 && errno == EINTR)
        ;
    if (n != 1 || c != CRL_STREAM_COMMIT) {
        unlink(tmp);
        snprintf(msg, msglen, "the upload was abandoned before its end");
        return CRL_STREAM_FAILED;
    }
    if (rename(tmp, path) < 0)
        return fail_errno(errno, tmp, msg, msglen);
    snprintf(msg, msglen, "bytes=%llu", total);
    return CRL_STREAM_OK;
}
