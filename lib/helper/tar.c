#include "tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "stream.h"

int crl_tar_out(int out_fd, char *msg, size_t msglen)
{
    int ret = -1;
    struct archive *w = archive_write_new();
    struct archive *d = archive_read_disk_new();
    if (!w || !d) {
        snprintf(msg, msglen, "libarchive: out of memory");
        goto out;
    }
    /* No user/group name lookups: they would load NSS modules from the sandbox. */
    archive_read_disk_set_symlink_physical(d);
    archive_read_disk_set_behavior(d, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_open_fd(w, out_fd) != ARCHIVE_OK) {
        snprintf(msg, msglen, "tar: %s", archive_error_string(w));
        goto out;
    }
    if (archive_read_disk_open(d, ".") != ARCHIVE_OK) {
        snprintf(msg, msglen, "reading the directory: %s", archive_error_string(d));
        goto out;
    }
    for (;;) {
        struct archive_entry *e = archive_entry_new();
        int r = archive_read_next_header2(d, e);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(e);
            break;
        }
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            snprintf(msg, msglen, "reading the directory: %s", archive_error_string(d));
            archive_entry_free(e);
            goto out;
        }
        archive_read_disk_descend(d);
        const char *name = archive_entry_pathname(e);
        if (strcmp(name, ".") == 0) {
            archive_entry_free(e);
            continue;
        }
        if (strncmp(name, "./", 2) == 0)
            archive_entry_copy_pathname(e, name + 2);
        if (archive_write_header(w, e) < ARCHIVE_WARN) {
            snprintf(msg, msglen, "tar: %s", archive_error_string(w));
            archive_entry_free(e);
            goto out;
        }
        if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
            const void *buf;
            size_t len;
            la_int64_t off;
            /* read_disk hands out the file's data block by block. */
            while ((r = archive_read_data_block(d, &buf, &len, &off)) == ARCHIVE_OK)
                if (archive_write_data(w, buf, len) < 0) {
                    snprintf(msg, msglen, "tar: %s", archive_error_string(w));
                    archive_entry_free(e);
                    goto out;
                }
            if (r != ARCHIVE_EOF) {
                snprintf(msg, msglen, "reading %s: %s", archive_entry_pathname(e),
                         archive_error_string(d));
                archive_entry_free(e);
                goto out;
            }
        }
        archive_entry_free(e);
    }
    if (archive_write_close(w) != ARCHIVE_OK) {
        snprintf(msg, msglen, "tar: %s", archive_error_string(w));
        goto out;
    }
    ret = 0;
out:
    if (d)
        archive_read_free(d);
    if (w)
        archive_write_free(w);
    return ret;
}

int crl_tar_in(int in_fd, unsigned long *entries, char *msg, size_t msglen)
{
    int ret = -1;
    *entries = 0;
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    if (!a || !w) {
        snprintf(msg, msglen, "libarchive: out of memory");
        goto out;
    }
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_filter_none(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_filter_xz(a);
    archive_write_disk_set_options(w, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                          ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                          ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                          ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
    if (archive_read_open_fd(a, in_fd, 64 * 1024) != ARCHIVE_OK) {
        snprintf(msg, msglen, "the body is not a tar archive: %s", archive_error_string(a));
        goto out;
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            snprintf(msg, msglen, "the body is not a valid tar archive: %s",
                     archive_error_string(a));
            goto out;
        }
        /* Device nodes and fifos are never created from an upload. */
        unsigned type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            snprintf(msg, msglen, "tar entry '%s' is not a file, directory or symlink",
                     archive_entry_pathname(e));
            goto out;
        }
        if (archive_write_header(w, e) < ARCHIVE_WARN) {
            snprintf(msg, msglen, "extracting '%s': %s", archive_entry_pathname(e),
                     archive_error_string(w));
            goto out;
        }
        const void *buf;
        size_t len;
        la_int64_t off;
        while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
            if (archive_write_data_block(w, buf, len, off) < ARCHIVE_WARN) {
                snprintf(msg, msglen, "writing '%s': %s", archive_entry_pathname(e),
                         archive_error_string(w));
                goto out;
            }
        if (r != ARCHIVE_EOF) {
            snprintf(msg, msglen, "reading '%s' from the archive: %s", archive_entry_pathname(e),
                     archive_error_string(a));
            goto out;
        }
        if (archive_write_finish_entry(w) < ARCHIVE_WARN) {
            snprintf(msg, msglen, "finishing '%s': %s", archive_entry_pathname(e),
                     archive_error_string(w));
            goto out;
        }
        (*entries)++;
    }
    if (archive_write_close(w) != ARCHIVE_OK) {
        snprintf(msg, msglen, "extracting: %s", archive_error_string(w));
        goto out;
    }
    ret = 0;
out:
    if (a)
        archive_read_free(a);
    if (w)
        archive_write_free(w);
    return ret;
}

int crl_tar_status_of_errno(int e)
{
    switch (e) {
    case ENOENT: return CRL_STREAM_NOENT;
    case ENOTDIR: return CRL_STREAM_NOTDIR;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return CRL_STREAM_NOSPACE; /* EFBIG: a file over disk_mb (RLIMIT_FSIZE) */
    case EACCES:
    case EPERM:
    case EROFS: return CRL_STREAM_DENIED;
    case EISDIR: return CRL_STREAM_ISDIR;
    case ELOOP:
    case EXDEV:
    case ENAMETOOLONG: return CRL_STREAM_BAD_INPUT; /* a path we will not follow */
    default: return CRL_STREAM_FAILED;
    }
}

/* ---- applying a change set ---- */

/* The paths an apply has created, for the opaque markers that follow:
 * an open-addressing set of strings. */
struct path_set {
    char **slot;
    size_t cap, n; /* cap: 0 or a power of two */
};

static size_t path_hash(const char *s)
{
    uint64_t x = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++)
        x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)x;
}

static size_t set_find(char **slot, size_t cap, const char *p)
{
    size_t i = path_hash(p) & (cap - 1);
    while (slot[i] && strcmp(slot[i], p) != 0)
        i = (i + 1) & (cap - 1);
    return i;
}

static bool set_has(const struct path_set *s, const char *p)
{
    return s->cap && s->slot[set_find(s->slot, s->cap, p)];
}

static int set_add(struct path_set *s, const char *p)
{
    if (set_has(s, p))
        return 0;
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        char **slot = calloc(cap, sizeof(*slot));
        if (!slot)
            return -1;
        for (size_t k = 0; k < s->cap; k++)
            if (s->slot[k])
                slot[set_find(slot, cap, s->slot[k])] = s->slot[k];
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    char *copy = strdup(p);
    if (!copy)
        return -1;
    s->slot[set_find(s->slot, s->cap, p)] = copy;
    s->n++;
    return 0;
}

static void set_free(struct path_set *s)
{
    for (size_t k = 0; k < s->cap; k++)
        free(s->slot[k]);
    free(s->slot);
}

/* An entry's name as a clean relative path ("./a//b/" is "a/b", the root
 * ""), or NULL; else why it is refused. */
static const char *clean_path(const char *in, char *out, size_t cap)
{
    if (!in || !in[0])
        return "an empty name: refused";
    if (in[0] == '/')
        return "an absolute path: refused";
    size_t o = 0;
    for (const char *p = in; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return "a path with '..': refused";
        if (!(n == 1 && p[0] == '.')) {
            if (o + 1 + n >= cap)
                return "a name too long: refused";
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    out[o] = 0;
    return NULL;
}

/* The directory `rel` ("" for the current one), reached without following
 * a symlink or leaving the tree; -1 with errno (ELOOP, EXDEV, ENOENT...).
 * libarchive checks the paths it extracts the same way; these are the
 * paths it never sees (whiteouts, opaque dirs, a directory in the way). */
static int open_beneath(const char *rel)
{
    struct open_how how = {
        .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    return (int)syscall(SYS_openat2, AT_FDCWD, rel[0] ? rel : ".", &how, sizeof(how));
}

/* open_beneath() failed: a symlink (or a file) where a directory should be
 * is a path this apply will not follow. */
static bool not_followed(int e)
{
    return e == ELOOP || e == EXDEV || e == ENOTDIR;
}

/* D/.wh.NAME: D/NAME goes, whatever it is. */
static int whiteout(const char *dir, const char *name)
{
    cleanup_close int dfd = open_beneath(dir);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    return crl_rm_rf_at(dfd, name);
}

/* D/.wh..wh..opq: of what D holds, only what this apply made stays. */
static int make_opaque(const char *dir, const struct path_set *made)
{
    int dfd = open_beneath(dir);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    cleanup_close int keep = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = keep >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        close(dfd);
        return -1;
    }
    /* names first, removals after: no readdir over a changing directory */
    char **doomed = NULL;
    size_t n = 0, cap = 0;
    int ret = 0;
    char full[PATH_MAX];
    struct dirent *de;
    while (ret == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(full, sizeof(full), "%s%s%s", dir, dir[0] ? "/" : "", de->d_name);
        if (set_has(made, full))
            continue;
        if (n == cap) {
            char **v = realloc(doomed, (cap = cap ? cap * 2 : 16) * sizeof(*v));
            if (!v) {
                ret = -1;
                break;
            }
            doomed = v;
        }
        if (!(doomed[n] = strdup(de->d_name)))
            ret = -1;
        else
            n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        if (ret == 0 && crl_rm_rf_at(keep, doomed[i]) < 0)
            ret = -1;
        free(doomed[i]);
    }
    free(doomed);
    if (ret < 0 && !errno)
        errno = ENOMEM;
    return ret;
}

/* A non-directory over a directory (an image's dir replaced by a file):
 * the directory goes first, contents and all; libarchive would only rmdir. */
static int clear_dir_in_the_way(const char *dir, const char *name)
{
    cleanup_close int dfd = open_beneath(dir);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    return S_ISDIR(st.st_mode) ? crl_rm_rf_at(dfd, name) : 0;
}

/* user.* only, and not overlayfs' own user.overlay.* (a layer's whiteouts
 * and redirects, which an overlay refuses to have set through it). */
static void keep_user_xattrs(struct archive_entry *e)
{
    if (archive_entry_xattr_reset(e) == 0)
        return;
    struct archive_entry *kept = archive_entry_new();
    const char *name;
    const void *value;
    size_t size;
    bool dropped = false;
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
        if (kept && strncmp(name, "user.", 5) == 0 && strncmp(name, "user.overlay.", 13) != 0 &&
            archive_entry_filetype(e) != AE_IFLNK) /* no user.* on symlinks */
            archive_entry_xattr_add_entry(kept, name, value, size);
        else
            dropped = true;
    }
    if (dropped && kept) {
        archive_entry_xattr_clear(e);
        archive_entry_xattr_reset(kept);
        while (archive_entry_xattr_next(kept, &name, &value, &size) == ARCHIVE_OK)
            archive_entry_xattr_add_entry(e, name, value, size);
    }
    if (kept)
        archive_entry_free(kept);
}

/* Directories' times, set once nothing more changes in them: libarchive
 * sets an existing directory's at once, and a whiteout or opaque marker
 * that follows its entry would change them again. */
struct dir_time {
    char *path;
    struct timespec ts[2]; /* atime, mtime */
};

struct dir_times {
    struct dir_time *v;
    size_t n, cap;
};

static int dir_times_add(struct dir_times *d, const char *path, struct archive_entry *e)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 32;
        struct dir_time *v = realloc(d->v, cap * sizeof(*v));
        if (!v)
            return -1;
        d->v = v;
        d->cap = cap;
    }
    struct dir_time *t = &d->v[d->n];
    if (!(t->path = strdup(path)))
        return -1;
    t->ts[0] = (struct timespec){.tv_nsec = UTIME_OMIT};
    if (archive_entry_atime_is_set(e))
        t->ts[0] = (struct timespec){archive_entry_atime(e), archive_entry_atime_nsec(e)};
    t->ts[1] = (struct timespec){archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
    d->n++;
    return 0;
}

/* Children before parents: setting a child's times changes nothing of its
 * parent's, but this order is also how a tree is left. */
static int dir_times_apply(struct dir_times *d, char *msg, size_t msglen)
{
    for (size_t i = d->n; i-- > 0;) {
        cleanup_close int fd = open_beneath(d->v[i].path);
        if (fd < 0 || futimens(fd, d->v[i].ts) < 0) {
            int e = errno;
            snprintf(msg, msglen, "restoring /%s: setting its times: %s", d->v[i].path,
                     strerror(e));
            return not_followed(e) ? CRL_STREAM_BAD_INPUT : crl_tar_status_of_errno(e);
        }
    }
    return CRL_STREAM_OK;
}

static void dir_times_free(struct dir_times *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->v[i].path);
    free(d->v);
}

static int refuse(char *msg, size_t msglen, const char *path, const char *why)
{
    snprintf(msg, msglen, "restoring /%s: %s", path, why);
    return CRL_STREAM_BAD_INPUT;
}

/* A whiteout, an opaque marker or a directory in the way that failed:
 * through a symlink, refused; else the file system's error. */
static int sys_failed(char *msg, size_t msglen, const char *path, const char *what)
{
    int e = errno;
    if (not_followed(e)) {
        snprintf(msg, msglen, "restoring /%s%s: a path through a symlink or a file: refused", path,
                 what);
        return CRL_STREAM_BAD_INPUT;
    }
    snprintf(msg, msglen, "restoring /%s%s: %s", path, what, strerror(e));
    return crl_tar_status_of_errno(e);
}

/* libarchive said no: with an errno, the file system failed (the disk
 * is full...); without, a refusal (a path through a symlink...). */
static int write_failed(struct archive *w, const char *path, char *msg, size_t msglen)
{
    int e = archive_errno(w);
    const char *s = archive_error_string(w);
    if (e > 0 && (!s || !strncmp(s, "Write failed", 12) || !strncmp(s, "Can't create", 12)))
        snprintf(msg, msglen, "restoring /%s: %s", path, strerror(e));
    else if (e > 0)
        snprintf(msg, msglen, "restoring /%s: %s: %s", path, s, strerror(e));
    else
        snprintf(msg, msglen, "restoring /%s: %s", path, s ? s : "refused");
    return e > 0 ? crl_tar_status_of_errno(e) : CRL_STREAM_BAD_INPUT;
}

int crl_tar_apply(int in_fd, unsigned flags, unsigned long *entries, char *msg, size_t msglen)
{
    int code = CRL_STREAM_FAILED;
    struct path_set made = {0};
    struct dir_times times = {0};
    char path[PATH_MAX], link[PATH_MAX], dir[PATH_MAX];
    *entries = 0;
    snprintf(msg, msglen, "restoring: out of memory");
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    if (!a || !w)
        goto out;
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_filter_none(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_filter_xz(a);
    /* No uid/gid lookups: owners are numeric (and the sandbox's NSS
     * modules are never loaded). */
    int opts = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_XATTR |
               ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
               ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS;
    if (flags & CRL_TAR_APPLY_OWNERS)
        opts |= ARCHIVE_EXTRACT_OWNER;
    archive_write_disk_set_options(w, opts);
    if (archive_read_open_fd(a, in_fd, 64 * 1024) != ARCHIVE_OK) {
        snprintf(msg, msglen, "restoring: not a tar archive: %s", archive_error_string(a));
        code = CRL_STREAM_BAD_INPUT;
        goto out;
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            snprintf(msg, msglen, "restoring: not a valid tar archive after %lu entries: %s",
                     *entries, archive_error_string(a));
            code = CRL_STREAM_BAD_INPUT;
            goto out;
        }
        const char *name = archive_entry_pathname(e), *why;
        if ((why = clean_path(name, path, sizeof(path)))) {
            code = refuse(msg, msglen, name && name[0] == '/' ? name + 1 : name ? name : "", why);
            goto out;
        }
        const char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 0, path);
        if (strncmp(base, ".wh.", 4) == 0) {
            const char *target = base + 4;
            if (strcmp(target, ".wh..opq") == 0) {
                if (!dir[0]) {
                    code = refuse(msg, msglen, path, "the root cannot be made opaque");
                    goto out;
                }
                if (make_opaque(dir, &made) < 0) {
                    code = sys_failed(msg, msglen, dir, " (emptying an opaque directory)");
                    goto out;
                }
            } else if (!target[0] || strncmp(target, ".wh.", 4) == 0 || !strcmp(target, ".") ||
                       !strcmp(target, "..")) {
                code = refuse(msg, msglen, path, "not a whiteout this format has");
                goto out;
            } else if (whiteout(dir, target) < 0) {
                snprintf(link, sizeof(link), "%s%s%s", dir, dir[0] ? "/" : "", target);
                code = sys_failed(msg, msglen, link, " (a whiteout)");
                goto out;
            }
            archive_read_data_skip(a);
            (*entries)++;
            continue;
        }
        if (!path[0]) { /* the root itself: never changed */
            archive_read_data_skip(a);
            continue;
        }
        const char *hard = archive_entry_hardlink(e);
        unsigned type = archive_entry_filetype(e);
        if (hard) {
            if (clean_path(hard, link, sizeof(link)) || !link[0]) {
                code = refuse(msg, msglen, path, "a hard link out of the tree: refused");
                goto out;
            }
            archive_entry_copy_hardlink(e, link);
        } else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            code = refuse(msg, msglen, path, "device nodes, fifos and sockets are never restored");
            goto out;
        }
        archive_entry_copy_pathname(e, path);
        keep_user_xattrs(e);
        if (!(flags & CRL_TAR_APPLY_OWNERS)) {
            /* Everything is ours; as the owner we keep setuid/setgid bits
             * (libarchive drops them from files it does not chown). */
            archive_entry_set_uid(e, geteuid());
            archive_entry_set_gid(e, getegid());
        }
        if ((hard || type != AE_IFDIR) && clear_dir_in_the_way(dir, base) < 0) {
            code = sys_failed(msg, msglen, path, "");
            goto out;
        }
        if (archive_write_header(w, e) != ARCHIVE_OK) {
            code = write_failed(w, path, msg, msglen);
            goto out;
        }
        const void *buf;
        size_t len;
        la_int64_t off;
        while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
            if (archive_write_data_block(w, buf, len, off) != ARCHIVE_OK) {
                code = write_failed(w, path, msg, msglen);
                goto out;
            }
        if (r != ARCHIVE_EOF) {
            snprintf(msg, msglen, "restoring /%s: reading the archive: %s", path,
                     archive_error_string(a));
            code = CRL_STREAM_BAD_INPUT;
            goto out;
        }
        if (archive_write_finish_entry(w) != ARCHIVE_OK) {
            code = write_failed(w, path, msg, msglen);
            goto out;
        }
        if (set_add(&made, path) < 0 ||
            (type == AE_IFDIR && !hard && dir_times_add(&times, path, e) < 0)) {
            snprintf(msg, msglen, "restoring /%s: out of memory", path);
            goto out;
        }
        (*entries)++;
    }
    /* Directories get their modes and times last, once nothing more is
     * written into them. */
    if (archive_write_close(w) != ARCHIVE_OK) {
        const char *s = archive_error_string(w);
        int e = archive_errno(w);
        snprintf(msg, msglen, "restoring directories: %s%s%s", s ? s : "failed", e > 0 ? ": " : "",
                 e > 0 ? strerror(e) : "");
        code = e > 0 ? crl_tar_status_of_errno(e) : CRL_STREAM_FAILED;
        goto out;
    }
    if ((code = dir_times_apply(&times, msg, msglen)) != CRL_STREAM_OK)
        goto out;
    snprintf(msg, msglen, "entries=%lu", *entries);
out:
    if (a)
        archive_read_free(a);
    if (w)
        archive_write_free(w);
    set_free(&made);
    dir_times_free(&times);
    return code;
}
