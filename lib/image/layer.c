#include "layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/sha256.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"

int crl_layer_clean_path(const char *name, char *out, size_t cap)
{
    if (!name || name[0] == '/')
        return -1;
    size_t o = 0;
    const char *p = name;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return -1;
        if (n && !(n == 1 && p[0] == '.')) {
            if (o + n + 2 > cap)
                return -1;
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
        if (*p == '/')
            p++;
    }
    out[o] = 0;
    return 0;
}

/* Open a directory beneath root without following any symlink. */
static int open_beneath(int root, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    long fd;
    do
        fd = syscall(SYS_openat2, root, *path ? path : ".", &how, sizeof(how));
    while (fd < 0 && errno == EINTR);
    return (int)fd;
}

/* The parent directory of `rel` ("a/b/c": "a/b"), made as needed (mode
 * 0755, as tar does for directories it has not seen); *base points at "c". */
static int open_parent(int root, char *rel, const char **base, const char *what, const char *name,
                       struct crl_err *err)
{
    char *slash = strrchr(rel, '/');
    *base = slash ? slash + 1 : rel;
    if (!slash)
        return fcntl(root, F_DUPFD_CLOEXEC, 0);
    *slash = 0;
    int fd = open_beneath(root, rel, O_PATH | O_DIRECTORY);
    if (fd < 0 && errno == ENOENT) {
        /* make each missing component */
        for (char *p = rel;; p++) {
            if (*p == '/' || *p == 0) {
                char c = *p;
                *p = 0;
                if (mkdirat(root, rel, 0755) < 0 && errno != EEXIST) {
                    *p = c;
                    break;
                }
                *p = c;
                if (!c)
                    break;
            }
        }
        fd = open_beneath(root, rel, O_PATH | O_DIRECTORY);
    }
    int e = errno;
    *slash = '/';
    if (fd >= 0)
        return fd;
    if (e == ELOOP || e == EXDEV)
        crl_err_set(err, CRL_E_INVALID, "%s: entry %s goes through a symlink", what, name);
    else if (e == ENOTDIR)
        crl_err_set(err, CRL_E_INVALID, "%s: entry %s is inside something that is not a directory",
                    what, name);
    else
        crl_err_sys(err, e, "%s: entry %s", what, name);
    return -1;
}

static bool xattr_kept(const char *name)
{
    if (strncmp(name, "user.", 5) == 0)
        return strncmp(name, "user.overlay.", 13) != 0;
    return strcmp(name, "security.capability") == 0;
}

/* Remove what is at base (a file, or a directory tree) so an entry can take
 * its place; a directory stays when the new entry is a directory too. */
static int clear_slot(int dir, const char *base, bool want_dir, bool *is_dir)
{
    struct stat st;
    *is_dir = false;
    if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        if (want_dir) {
            *is_dir = true;
            return 0;
        }
        return crl_rm_rf_at(dir, base);
    }
    return unlinkat(dir, base, 0);
}

static int set_xattrs(int fd, struct archive_entry *e)
{
    const char *name;
    const void *value;
    size_t size;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
        if (xattr_kept(name) && fsetxattr(fd, name, value, size, 0) < 0 && errno != ENOTSUP)
            return -1;
    return 0;
}

static int mark_opaque(int dir)
{
    if (fsetxattr(dir, "trusted.overlay.opaque", "y", 1, 0) < 0)
        return -1;
    return fsetxattr(dir, "user.overlay.opaque", "y", 1, 0);
}

static int write_data(struct archive *a, int fd, int64_t size, uint64_t *bytes)
{
    const void *buf;
    size_t len;
    la_int64_t off;
    int r;
    while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
        const char *p = buf;
        while (len) {
            ssize_t w = pwrite(fd, p, len, off);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return -1;
            }
            p += w, len -= (size_t)w, off += w;
            *bytes += (uint64_t)w;
        }
    }
    if (r != ARCHIVE_EOF) {
        errno = EPROTO;
        return -2;
    }
    return ftruncate(fd, size); /* a sparse tail */
}

/* Ownership, then permissions (chown clears setuid), xattrs and times. */
static int set_meta(int fd, struct archive_entry *e)
{
    if (fchown(fd, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e)) < 0)
        return -1;
    if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
        return -1;
    if (set_xattrs(fd, e) < 0)
        return -1;
    struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                             {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    return futimens(fd, ts);
}

struct dir_time {
    char *path;
    struct timespec mtime;
};

static int apply_entry(struct archive *a, struct archive_entry *e, int root, const char *what,
                       struct crl_layer_stats *st, struct dir_time **dirs, size_t *ndirs,
                       struct crl_err *err)
{
    const char *name = archive_entry_pathname(e);
    char rel[4096];
    if (!name)
        return crl_err_set(err, CRL_E_INVALID, "%s: an entry has no name", what);
    if (crl_layer_clean_path(name, rel, sizeof(rel)) < 0)
        return crl_err_set(err, CRL_E_INVALID, "%s: entry %s is absolute or has a '..' component",
                           what, name);
    if (!rel[0])
        return 0; /* the layer's root: nothing to create */
    const char *base;
    cleanup_close int dir = open_parent(root, rel, &base, what, name, err);
    if (dir < 0)
        return -1;

    /* whiteouts */
    if (strcmp(base, WH_OPAQUE) == 0) {
        cleanup_close int d = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d < 0 || mark_opaque(d) < 0)
            return crl_err_sys(err, errno, "%s: marking the directory of %s opaque", what, name);
        return 0;
    }
    if (strncmp(base, WH_PREFIX, 4) == 0) {
        const char *victim = base + 4;
        bool is_dir;
        if (!*victim || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0 ||
            strchr(victim, '/'))
            return crl_err_set(err, CRL_E_INVALID, "%s: whiteout %s names nothing", what, name);
        if (clear_slot(dir, victim, false, &is_dir) < 0 ||
            mknodat(dir, victim, S_IFCHR | 0, makedev(0, 0)) < 0)
            return crl_err_sys(err, errno, "%s: whiteout %s", what, name);
        return 0;
    }

    const char *hl = archive_entry_hardlink(e);
    mode_t type = archive_entry_filetype(e);
    bool is_dir;
    if (clear_slot(dir, base, type == AE_IFDIR && !hl, &is_dir) < 0)
        return crl_err_sys(err, errno, "%s: replacing %s", what, name);

    if (hl) {
        char trel[4096];
        if (crl_layer_clean_path(hl, trel, sizeof(trel)) < 0 || !trel[0])
            return crl_err_set(err, CRL_E_INVALID,
                               "%s: entry %s hard-links to %s, outside the layer", what, name, hl);
        const char *tbase;
        cleanup_close int tdir = open_parent(root, trel, &tbase, what, name, err);
        if (tdir < 0)
            return -1;
        if (linkat(tdir, tbase, dir, base, 0) < 0) {
            if (errno == ENOENT)
                return crl_err_set(err, CRL_E_INVALID,
                                   "%s: entry %s hard-links to %s, which is not in this layer",
                                   what, name, hl);
            return crl_err_sys(err, errno, "%s: hard link %s", what, name);
        }
        return 0;
    }

    int fd = -1;
    switch (type) {
    case AE_IFREG: {
        fd = openat(dir, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return crl_err_sys(err, errno, "%s: create %s", what, name);
        int r = write_data(a, fd, archive_entry_size(e), &st->bytes);
        if (r == -2) {
            close(fd);
            return crl_err_set(err, CRL_E_INVALID, "%s: reading %s: %s", what, name,
                               archive_error_string(a) ? archive_error_string(a) : "truncated");
        }
        if (r < 0 || set_meta(fd, e) < 0) {
            int en = errno;
            close(fd);
            return crl_err_sys(err, en, "%s: write %s", what, name);
        }
        close(fd);
        return 0;
    }
    case AE_IFDIR: {
        if (!is_dir && mkdirat(dir, base, 0700) < 0)
            return crl_err_sys(err, errno, "%s: mkdir %s", what, name);
        fd = openat(dir, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || set_meta(fd, e) < 0) {
            int en = errno;
            if (fd >= 0)
                close(fd);
            return crl_err_sys(err, en, "%s: directory %s", what, name);
        }
        close(fd);
        /* its children change its mtime: set it again at the end */
        struct dir_time *v = realloc(*dirs, (*ndirs + 1) * sizeof(*v));
        if (!v || !(v[*ndirs].path = strdup(rel))) {
            if (v)
                *dirs = v;
            return crl_err_sys(err, ENOMEM, "%s", what);
        }
        v[*ndirs].mtime = (struct timespec){archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
        *dirs = v;
        (*ndirs)++;
        return 0;
    }
    case AE_IFLNK: {
        const char *target = archive_entry_symlink(e);
        if (!target)
            return crl_err_set(err, CRL_E_INVALID, "%s: symlink %s has no target", what, name);
        if (symlinkat(target, dir, base) < 0 ||
            fchownat(dir, base, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
                     AT_SYMLINK_NOFOLLOW) < 0)
            return crl_err_sys(err, errno, "%s: symlink %s", what, name);
        struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                                 {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
        utimensat(dir, base, ts, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    case AE_IFCHR:
    case AE_IFBLK:
    case AE_IFIFO: {
        dev_t dev = type == AE_IFIFO ? 0 : archive_entry_rdev(e);
        if (type == AE_IFCHR && dev == makedev(0, 0))
            return crl_err_set(err, CRL_E_INVALID,
                               "%s: entry %s is a 0/0 character device, which overlayfs would "
                               "read as a whiteout",
                               what, name);
        if (mknodat(dir, base, type | 0600, dev) < 0)
            return crl_err_sys(err, errno, "%s: mknod %s", what, name);
        fd = openat(dir, base, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        char p[64];
        snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
        struct timespec ts[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                                 {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
        int r = fd < 0 ? -1 : 0;
        if (r == 0)
            r = fchownat(fd, "", (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
                         AT_EMPTY_PATH);
        if (r == 0)
            r = chmod(p, archive_entry_perm(e) & 07777);
        if (r == 0)
            r = utimensat(AT_FDCWD, p, ts, 0);
        int en = errno;
        if (fd >= 0)
            close(fd);
        if (r < 0)
            return crl_err_sys(err, en, "%s: device %s", what, name);
        return 0;
    }
    default: /* sockets: nothing to keep */ return 0;
    }
}

int crl_layer_apply(struct archive *a, int root, const char *what, uint64_t max_entries,
                    struct crl_layer_stats *st, struct crl_err *err)
{
    struct dir_time *dirs = NULL;
    size_t ndirs = 0;
    int ret = 0;
    struct archive_entry *e;
    for (;;) {
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            ret = crl_err_set(err, CRL_E_INVALID, "%s: %s", what,
                              archive_error_string(a) ? archive_error_string(a) : "unreadable");
            break;
        }
        if (++st->entries > max_entries) {
            ret = crl_err_set(err, CRL_E_TOO_LARGE, "%s: more than %llu entries", what,
                              (unsigned long long)max_entries);
            break;
        }
        if ((ret = apply_entry(a, e, root, what, st, &dirs, &ndirs, err)) < 0)
            break;
    }
    for (size_t i = ndirs; i-- > 0;) {
        if (ret == 0) {
            int fd = open_beneath(root, dirs[i].path, O_RDONLY | O_DIRECTORY);
            if (fd >= 0) {
                struct timespec ts[2] = {dirs[i].mtime, dirs[i].mtime};
                futimens(fd, ts);
                close(fd);
            }
        }
        free(dirs[i].path);
    }
    free(dirs);
    return ret;
}

/* ---- a directory into a layer tar ---- */

struct tar_out {
    int fd;
    struct crl_sha256 h;
};

static la_ssize_t tar_write(struct archive *a, void *ud, const void *buf, size_t len)
{
    struct tar_out *t = ud;
    if (crl_write_full(t->fd, buf, len) < 0) {
        archive_set_error(a, errno, "write: %s", strerror(errno));
        return -1;
    }
    crl_sha256_update(&t->h, buf, len);
    return (la_ssize_t)len;
}

/* A file's data, holes written as zeros. */
static int copy_data(struct archive *d, struct archive *w, const char *path, struct crl_err *err)
{
    static const char zeros[4096];
    const void *buf;
    size_t len;
    la_int64_t off, pos = 0;
    int r;
    while ((r = archive_read_data_block(d, &buf, &len, &off)) == ARCHIVE_OK) {
        while (pos < off) {
            size_t k = off - pos < (la_int64_t)sizeof(zeros) ? (size_t)(off - pos) : sizeof(zeros);
            if (archive_write_data(w, zeros, k) < 0)
                return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path,
                                   archive_error_string(w));
            pos += (la_int64_t)k;
        }
        if (archive_write_data(w, buf, len) < 0)
            return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path, archive_error_string(w));
        pos = off + (la_int64_t)len;
    }
    if (r != ARCHIVE_EOF)
        return crl_err_set(err, CRL_E_INTERNAL, "reading %s: %s", path, archive_error_string(d));
    return 0;
}

static int tar_entries(struct archive *d, struct archive *w, struct archive_entry_linkresolver *lr,
                       const char *rootfs, struct crl_err *err)
{
    size_t rl = strlen(rootfs);
    for (;;) {
        struct archive_entry *e = archive_entry_new(), *spare = NULL;
        int r = archive_read_next_header2(d, e);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(e);
            return 0;
        }
        if (r < ARCHIVE_WARN) {
            crl_err_set(err, CRL_E_INTERNAL, "reading %s: %s", rootfs, archive_error_string(d));
            archive_entry_free(e);
            return -1;
        }
        archive_read_disk_descend(d);
        const char *src = archive_entry_pathname(e);
        const char *rel = strncmp(src, rootfs, rl) == 0 ? src + rl : src;
        while (*rel == '/')
            rel++;
        mode_t type = archive_entry_filetype(e);
        if (!*rel || (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
            archive_entry_free(e);
            continue;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s", src);
        archive_entry_copy_sourcepath(e, path);
        archive_entry_copy_pathname(e, rel);
        archive_entry_copy_uname(e, NULL);
        archive_entry_copy_gname(e, NULL);
        archive_entry_linkify(lr, &e, &spare);
        int rc = 0;
        if (archive_write_header(w, e) < ARCHIVE_WARN)
            rc = crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path, archive_error_string(w));
        else if (type == AE_IFREG && archive_entry_size(e) > 0 && !archive_entry_hardlink(e))
            rc = copy_data(d, w, path, err);
        archive_entry_free(e);
        archive_entry_free(spare);
        if (rc < 0)
            return -1;
    }
}

int crl_layer_from_dir(const char *rootfs, int fd, char diff_id[CRL_DIGEST_LEN + 1],
                       struct crl_err *err)
{
    struct tar_out t = {.fd = fd};
    if (crl_sha256_init(&t.h) < 0)
        return crl_err_sys(err, ENOMEM, "sha256");
    struct archive *d = archive_read_disk_new();
    struct archive *w = archive_write_new();
    struct archive_entry_linkresolver *lr = archive_entry_linkresolver_new();
    int ret = -1;
    if (!d || !w || !lr) {
        crl_err_sys(err, ENOMEM, "libarchive");
        goto out;
    }
    archive_read_disk_set_symlink_physical(d);
    archive_read_disk_set_behavior(d, ARCHIVE_READDISK_NO_ACL | ARCHIVE_READDISK_NO_FFLAGS |
                                          ARCHIVE_READDISK_NO_SPARSE |
                                          ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
    archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_open(w, &t, NULL, tar_write, NULL) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(w));
        goto out;
    }
    if (archive_read_disk_open(d, rootfs) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "%s: %s", rootfs, archive_error_string(d));
        goto out;
    }
    if (tar_entries(d, w, lr, rootfs, err) < 0)
        goto out;
    if (archive_write_close(w) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", rootfs, archive_error_string(w));
        goto out;
    }
    ret = 0;
out:
    archive_entry_linkresolver_free(lr);
    archive_write_free(w);
    archive_read_free(d);
    if (ret == 0)
        crl_sha256_final(&t.h, diff_id);
    else
        crl_sha256_free(&t.h);
    return ret;
}
