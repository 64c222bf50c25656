/* What the checkpoint store's tests share (tests/unit/test_ckpt_*.c): a
 * scratch directory and file helpers, trees copied, overlaid and compared,
 * and the restore format checked and applied, so that every restore is
 * compared exactly with its source.  Header-only and static inline, as
 * tap.h is: each program is built from its one .c (the Makefile's
 * tests/test_% rule) and uses a part of these. */
#ifndef CRL_TESTS_CKPT_FIXTURE_H
#define CRL_TESTS_CKPT_FIXTURE_H

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/traj/ckpt.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

static char dir[4096];

static inline void make_dir(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/test_ckpt.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
}

static inline void remove_dir(void)
{
    crl_rm_rf_at(AT_FDCWD, dir);
}

/* "dir/<fmt>", in one of 16 rotating buffers. */
static inline const char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *at(const char *fmt, ...)
{
    static char bufs[16][4096];
    static int k;
    char *b = bufs[k++ % 16];
    int n = snprintf(b, 4096, "%s/", dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, 4096 - (size_t)n, fmt, ap);
    va_end(ap);
    return b;
}

static inline void must(int ok, const char *what, const char *path)
{
    if (!ok) {
        char m[4200];
        snprintf(m, sizeof(m), "%s %s: %s", what, path, strerror(errno));
        bail_out(m);
    }
}

static inline void wfile_len(const char *path, const void *data, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    must(fd >= 0, "create", path);
    must(crl_write_full(fd, data, len) == 0, "write", path);
    must(fchmod(fd, mode) == 0, "chmod", path);
    close(fd);
}

static inline void wfile(const char *path, const char *content, mode_t mode)
{
    wfile_len(path, content, strlen(content), mode);
}

static inline void mkd(const char *path, mode_t mode)
{
    must(mkdir(path, mode) == 0 && chmod(path, mode) == 0, "mkdir", path);
}

static inline void set_mtime(const char *path, time_t s, long ns)
{
    struct timespec ts[2] = {{s, ns}, {s, ns}};
    must(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) == 0, "utimensat", path);
}

static inline void own(const char *path, uid_t u, gid_t g)
{
    must(lchown(path, u, g) == 0, "lchown", path);
}

static inline void xset(const char *path, const char *name, const char *value)
{
    must(lsetxattr(path, name, value, strlen(value), 0) == 0, "setxattr", path);
}

static inline void rm(const char *path)
{
    must(crl_rm_rf_at(AT_FDCWD, path) == 0, "rm -rf", path);
}

static inline struct crl_ckpt_store *open_store(const char *sub)
{
    struct crl_ckpt_store *s;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_ckpt_store_open(at("%s", sub), &s, &e) < 0)
        bail_out(e.msg);
    return s;
}

static inline size_t count_blobs(const char *sub)
{
    DIR *d = opendir(at("%s/sha256", sub));
    size_t n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static inline int take_ex(struct crl_ckpt_store *s, struct crl_ckpt_index *idx, const char *root,
                          enum crl_layer_format fmt, uid_t shift, char id[CRL_CKPT_ID_MAX],
                          struct crl_ckpt_stats *st, struct crl_err *e)
{
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    must(fd >= 0, "open", root);
    struct crl_snapshot_view v = {fd, fmt, shift, shift};
    char parent[CRL_CKPT_ID_MAX];
    snprintf(parent, sizeof(parent), "%s", crl_ckpt_index_id(idx));
    int r = crl_ckpt_take(s, idx, parent, &v, id, st, e);
    close(fd);
    return r;
}

static inline int take(struct crl_ckpt_store *s, struct crl_ckpt_index *idx, const char *root,
                       enum crl_layer_format fmt, uid_t shift, char id[CRL_CKPT_ID_MAX],
                       struct crl_ckpt_stats *st)
{
    struct crl_err e = CRL_ERR_INIT;
    int r = take_ex(s, idx, root, fmt, shift, id, st, &e);
    if (r < 0)
        diag("take %s: %s", root, e.msg);
    return r;
}

/* ---- trees: copy, overlay, compare ---- */

static inline bool ignored_xattr(const char *name)
{
    return strncmp(name, "user.", 5) != 0 || strncmp(name, "user.overlay.", 13) == 0;
}

/* Make dst's user.* xattrs (but user.overlay.*) those of src (NULL: none). */
static inline void copy_xattrs(const char *src, const char *dst)
{
    char names[8192], val[8192];
    ssize_t n = llistxattr(dst, names, sizeof(names));
    for (char *p = names; n > 0 && p < names + n; p += strlen(p) + 1)
        if (!ignored_xattr(p))
            lremovexattr(dst, p);
    n = src ? llistxattr(src, names, sizeof(names)) : 0;
    for (char *p = names; n > 0 && p < names + n; p += strlen(p) + 1) {
        if (ignored_xattr(p))
            continue;
        ssize_t l = lgetxattr(src, p, val, sizeof(val));
        must(l >= 0 && lsetxattr(dst, p, val, (size_t)l, 0) == 0, "copy xattr", dst);
    }
}

static inline void copy_meta(const char *src, const char *dst, const struct stat *st)
{
    own(dst, st->st_uid, st->st_gid);
    if (!S_ISLNK(st->st_mode)) {
        must(chmod(dst, st->st_mode & 07777) == 0, "chmod", dst);
        copy_xattrs(src, dst);
    }
    set_mtime(dst, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

static inline void copy_file(const char *src, const char *dst, const struct stat *st)
{
    if (S_ISLNK(st->st_mode)) {
        char t[4096];
        ssize_t n = readlink(src, t, sizeof(t) - 1);
        must(n >= 0, "readlink", src);
        t[n] = 0;
        must(symlink(t, dst) == 0, "symlink", dst);
    } else if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode)) {
        must(mknod(dst, st->st_mode, st->st_rdev) == 0, "mknod", dst);
    } else {
        int in = open(src, O_RDONLY | O_CLOEXEC);
        int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        must(in >= 0 && out >= 0, "copy", src);
        char buf[65536];
        ssize_t n;
        while ((n = read(in, buf, sizeof(buf))) > 0)
            must(crl_write_full(out, buf, (size_t)n) == 0, "write", dst);
        close(in);
        close(out);
    }
    copy_meta(src, dst, st);
}

static inline int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of a directory (NULL-terminated; free with free_names). */
static inline char **list_names(const char *path)
{
    DIR *d = opendir(path);
    size_t n = 0, cap = 16;
    char **v = calloc(cap, sizeof(*v));
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n + 1 >= cap)
            v = realloc(v, (cap *= 2) * sizeof(*v));
        v[n++] = strdup(de->d_name);
    }
    if (d)
        closedir(d);
    v[n] = NULL;
    qsort(v, n, sizeof(*v), cmp_strp);
    return v;
}

static inline void free_names(char **v)
{
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static inline void copy_tree(const char *src, const char *dst)
{
    char **names = list_names(src);
    for (char **p = names; *p; p++) {
        char s[4096], d[4096];
        snprintf(s, sizeof(s), "%s/%s", src, *p);
        snprintf(d, sizeof(d), "%s/%s", dst, *p);
        struct stat st;
        must(lstat(s, &st) == 0, "lstat", s);
        if (S_ISDIR(st.st_mode)) {
            mkd(d, 0700);
            copy_tree(s, d);
            copy_meta(s, d, &st);
        } else {
            copy_file(s, d, &st);
        }
    }
    free_names(names);
}

static inline bool left_out(const char *name, const struct stat *st)
{
    return strncmp(name, ".wh.", 4) == 0 ||
           !(S_ISREG(st->st_mode) || S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode) ||
             (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)));
}

/* What overlayfs would show: `upper` applied over `target` (a copy of the
 * lower dir), by overlayfs's rules, with what a checkpoint leaves out left
 * out here too. */
static inline void overlay_apply(const char *upper, const char *target)
{
    char **names = list_names(upper);
    for (char **p = names; *p; p++) {
        char u[4096], t[4096];
        snprintf(u, sizeof(u), "%s/%s", upper, *p);
        snprintf(t, sizeof(t), "%s/%s", target, *p);
        struct stat us, ts;
        must(lstat(u, &us) == 0, "lstat", u);
        if (left_out(*p, &us))
            continue;
        bool exists = lstat(t, &ts) == 0;
        if (S_ISCHR(us.st_mode)) {
            rm(t);
        } else if (S_ISDIR(us.st_mode)) {
            char v[8];
            ssize_t n = lgetxattr(u, "user.overlay.opaque", v, sizeof(v));
            bool opaque = n == 1 && v[0] == 'y';
            if (exists && (!S_ISDIR(ts.st_mode) || opaque)) {
                rm(t);
                exists = false;
            }
            if (!exists)
                mkd(t, 0700);
            overlay_apply(u, t);
            copy_meta(u, t, &us);
        } else {
            rm(t);
            copy_file(u, t, &us);
        }
    }
    free_names(names);
}

static int ndiff;

static inline void differ(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void differ(const char *fmt, ...)
{
    if (ndiff++ >= 20)
        return;
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    diag("  differs: %s", m);
}

static inline uint32_t unshifted(uint32_t id, uint32_t shift)
{
    return id >= shift ? id - shift : 65534;
}

static inline void compare_xattrs(const char *a, const char *b, const char *rel)
{
    char na[8192], nb[8192];
    ssize_t la = llistxattr(a, na, sizeof(na)), lb = llistxattr(b, nb, sizeof(nb));
    for (int side = 0; side < 2; side++) {
        char *names = side ? nb : na;
        ssize_t len = side ? lb : la;
        const char *self = side ? b : a, *other = side ? a : b;
        for (char *p = names; len > 0 && p < names + len; p += strlen(p) + 1) {
            if (ignored_xattr(p))
                continue;
            char v1[8192], v2[8192];
            ssize_t l1 = lgetxattr(self, p, v1, sizeof(v1));
            ssize_t l2 = lgetxattr(other, p, v2, sizeof(v2));
            if (l1 != l2 || (l1 > 0 && memcmp(v1, v2, (size_t)l1) != 0))
                differ("%s: xattr %s", rel, p);
        }
    }
}

static inline bool same_content(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
    bool same = fa >= 0 && fb >= 0;
    char x[65536], y[65536];
    while (same) {
        ssize_t n = crl_read_full(fa, x, sizeof(x)), m = crl_read_full(fb, y, sizeof(y));
        if (n != m || n < 0 || memcmp(x, y, (size_t)n) != 0)
            same = false;
        if (n <= 0)
            break;
    }
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
    return same;
}

/* Every difference between `a` (the source: owners are host ids, shifted
 * by `shift`) and `b` (a restore), bar what a checkpoint leaves out. */
static inline void compare_dir(const char *a, const char *b, const char *rel, uint32_t shift)
{
    char **na = list_names(a), **nb = list_names(b);
    char **p = na, **q = nb;
    while (*p || *q) {
        char pa[4096], pb[4096], r[4096];
        int c = !*p ? 1 : !*q ? -1 : strcmp(*p, *q);
        const char *name = c <= 0 ? *p : *q;
        snprintf(pa, sizeof(pa), "%s/%s", a, name);
        snprintf(pb, sizeof(pb), "%s/%s", b, name);
        snprintf(r, sizeof(r), "%s%s%s", rel, *rel ? "/" : "", name);
        struct stat sa, sb;
        if (c != 0) {
            struct stat s;
            if (lstat(c < 0 ? pa : pb, &s) == 0 && left_out(name, &s) && c < 0)
                ; /* not checkpointed: rightly absent */
            else
                differ("%s: only in %s", r, c < 0 ? "the source" : "the restore");
            if (c < 0)
                p++;
            else
                q++;
            continue;
        }
        p++, q++;
        if (lstat(pa, &sa) < 0 || lstat(pb, &sb) < 0) {
            differ("%s: lstat", r);
            continue;
        }
        if (left_out(name, &sa) || S_ISCHR(sa.st_mode)) {
            differ("%s: restored, but checkpoints leave it out", r);
            continue;
        }
        if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT)) {
            differ("%s: type %o, restored %o", r, sa.st_mode & S_IFMT, sb.st_mode & S_IFMT);
            continue;
        }
        if (!S_ISLNK(sa.st_mode) && (sa.st_mode & 07777) != (sb.st_mode & 07777))
            differ("%s: mode %o, restored %o", r, sa.st_mode & 07777, sb.st_mode & 07777);
        if (unshifted(sa.st_uid, shift) != sb.st_uid || unshifted(sa.st_gid, shift) != sb.st_gid)
            differ("%s: owner %u:%u, restored %u:%u", r, sa.st_uid, sa.st_gid, sb.st_uid,
                   sb.st_gid);
        if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec || sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec)
            differ("%s: mtime %lld.%09ld, restored %lld.%09ld", r, (long long)sa.st_mtim.tv_sec,
                   sa.st_mtim.tv_nsec, (long long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
        if (S_ISREG(sa.st_mode) && (sa.st_size != sb.st_size || !same_content(pa, pb)))
            differ("%s: content", r);
        if (S_ISLNK(sa.st_mode)) {
            char ta[4096] = "", tb[4096] = "";
            if (readlink(pa, ta, sizeof(ta) - 1) < 0 || readlink(pb, tb, sizeof(tb) - 1) < 0 ||
                strcmp(ta, tb) != 0)
                differ("%s: symlink target %s, restored %s", r, ta, tb);
        } else {
            compare_xattrs(pa, pb, r);
        }
        if (S_ISDIR(sa.st_mode))
            compare_dir(pa, pb, r, shift);
    }
    free_names(na);
    free_names(nb);
}

static inline int compare_trees(const char *a, const char *b, uint32_t shift)
{
    ndiff = 0;
    compare_dir(a, b, "", shift);
    return ndiff;
}

/* ---- the restore format: a checker and a small applier ---- */

/* Invariants of the stream: relative paths without "./", each path once,
 * parents before children, numeric owners only, an opaque marker right
 * after its directory.  Returns the problems found. */
static inline int tar_lint(int fd, size_t *entries)
{
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
        diag("lint: %s", archive_error_string(a));
        archive_read_free(a);
        return 1;
    }
    char **paths = NULL;
    size_t n = 0;
    int bad = 0;
    bool prev_dir = false;
    struct archive_entry *e;
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        /* libarchive writes a directory's name with a trailing '/', as
         * tar does. */
        char p[4096];
        snprintf(p, sizeof(p), "%s", archive_entry_pathname(e));
        size_t pl = strlen(p);
        if (pl > 1 && p[pl - 1] == '/' && archive_entry_filetype(e) == AE_IFDIR)
            p[pl - 1] = 0;
        const char *base = strrchr(p, '/');
        base = base ? base + 1 : p;
        if (p[0] == '/' || strncmp(p, "./", 2) == 0 || strstr(p, "//") || !*p)
            bad++, diag("lint: path %s", p);
        const char *un = archive_entry_uname(e), *gn = archive_entry_gname(e);
        if ((un && *un) || (gn && *gn))
            bad++, diag("lint: %s has owner names", p);
        for (size_t i = 0; i < n; i++)
            if (strcmp(paths[i], p) == 0)
                bad++, diag("lint: %s twice", p);
        if (strcmp(base, ".wh..wh..opq") == 0) {
            size_t dl = (size_t)(base - p) - 1;
            if (!prev_dir || strlen(paths[n - 1]) != dl || strncmp(paths[n - 1], p, dl) != 0)
                bad++, diag("lint: %s is not right after its directory", p);
        }
        /* A parent in the stream comes before: none may appear later. */
        for (size_t i = 0; i < n; i++) {
            size_t l = strlen(p);
            if (strncmp(paths[i], p, l) == 0 && paths[i][l] == '/')
                bad++, diag("lint: %s after its child %s", p, paths[i]);
        }
        prev_dir = archive_entry_filetype(e) == AE_IFDIR;
        paths = realloc(paths, (n + 1) * sizeof(*paths));
        paths[n++] = strdup(p);
    }
    if (r != ARCHIVE_EOF)
        bad++, diag("lint: %s", archive_error_string(a));
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    archive_read_free(a);
    if (entries)
        *entries = n;
    return bad;
}

static inline void set_entry_xattrs(const char *path, struct archive_entry *e)
{
    copy_xattrs(NULL, path);
    const char *name;
    const void *value;
    size_t size;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
        must(lsetxattr(path, name, value, size, 0) == 0, "setxattr", path);
}

struct dir_time {
    char path[4096];
    struct timespec t;
};

/* The restore format, applied as the backend would: whiteouts remove,
 * opaque markers empty, an entry replaces what was at its path (a dir
 * stays a dir), directory times last. */
static inline int apply_tar(int fd, const char *root)
{
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    if (archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK)
        return -1;
    struct dir_time *dirs = NULL;
    size_t nd = 0;
    struct archive_entry *e;
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        const char *p = archive_entry_pathname(e);
        char full[4096], parent[4096];
        snprintf(full, sizeof(full), "%s/%s", root, p);
        const char *slash = strrchr(p, '/');
        const char *base = slash ? slash + 1 : p;
        snprintf(parent, sizeof(parent), "%s/%.*s", root, slash ? (int)(slash - p) : 0, p);
        if (strcmp(base, ".wh..wh..opq") == 0) {
            char **names = list_names(parent);
            for (char **q = names; *q; q++) {
                char c[8200];
                snprintf(c, sizeof(c), "%s/%s", parent, *q);
                rm(c);
            }
            free_names(names);
            continue;
        }
        if (strncmp(base, ".wh.", 4) == 0) {
            char c[8200];
            snprintf(c, sizeof(c), "%s/%s", parent, base + 4);
            rm(c);
            continue;
        }
        struct stat st;
        bool exists = lstat(full, &st) == 0;
        mode_t type = archive_entry_filetype(e);
        if (exists && !(type == AE_IFDIR && S_ISDIR(st.st_mode)))
            rm(full), exists = false;
        const char *hl = archive_entry_hardlink(e);
        if (hl) {
            char target[4096];
            snprintf(target, sizeof(target), "%s/%s", root, hl);
            must(link(target, full) == 0, "link", full);
            continue;
        }
        if (type == AE_IFDIR) {
            if (!exists)
                mkd(full, 0700);
            own(full, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e));
            must(chmod(full, archive_entry_perm(e)) == 0, "chmod", full);
            set_entry_xattrs(full, e);
            dirs = realloc(dirs, (nd + 1) * sizeof(*dirs));
            snprintf(dirs[nd].path, sizeof(dirs[nd].path), "%s", full);
            dirs[nd++].t = (struct timespec){archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
            continue;
        }
        if (type == AE_IFLNK) {
            must(symlink(archive_entry_symlink(e), full) == 0, "symlink", full);
        } else if (type == AE_IFREG) {
            int out = open(full, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            must(out >= 0, "create", full);
            const void *buf;
            size_t len;
            la_int64_t off;
            while (archive_read_data_block(a, &buf, &len, &off) == ARCHIVE_OK)
                must(pwrite(out, buf, len, off) == (ssize_t)len, "write", full);
            close(out);
            own(full, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e));
            must(chmod(full, archive_entry_perm(e)) == 0, "chmod", full);
            set_entry_xattrs(full, e);
        } else {
            diag("apply: %s has type %o", p, type);
            continue;
        }
        if (type == AE_IFLNK) /* (chown clears setuid: a file's owner is set before its mode) */
            own(full, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e));
        set_mtime(full, archive_entry_mtime(e), archive_entry_mtime_nsec(e));
    }
    for (size_t i = nd; i-- > 0;)
        must(utimensat(AT_FDCWD, dirs[i].path, (struct timespec[2]){dirs[i].t, dirs[i].t}, 0) == 0,
             "utimensat", dirs[i].path);
    free(dirs);
    bool ok = r == ARCHIVE_EOF;
    if (!ok)
        diag("apply: %s", archive_error_string(a));
    archive_read_free(a);
    return ok ? 0 : -1;
}

/* Restore checkpoint `id` over a copy of `base` (NULL: nothing) into
 * `out`, checking the stream on the way.  0, or -1 with a diag. */
static inline int restore(struct crl_ckpt_store *s, const char *id, const char *base,
                          const char *out, struct crl_ckpt_stats *st)
{
    rm(out);
    mkd(out, 0755);
    if (base)
        copy_tree(base, out);
    int fd = memfd_create("ckpt.tar", MFD_CLOEXEC);
    must(fd >= 0, "memfd_create", "");
    struct crl_err e = CRL_ERR_INIT;
    if (crl_ckpt_write_tar(s, id, fd, st, &e) < 0) {
        diag("write_tar %s: %s", id, e.msg);
        close(fd);
        return -1;
    }
    lseek(fd, 0, SEEK_SET);
    int bad = tar_lint(fd, NULL);
    lseek(fd, 0, SEEK_SET);
    int r = bad ? -1 : apply_tar(fd, out);
    close(fd);
    return r;
}

static inline void check_restore(struct crl_ckpt_store *s, const char *id, const char *src_,
                                 const char *base_, uint32_t shift, const char *what)
{
    char src[4096], base[4096], out[4096];
    snprintf(src, sizeof(src), "%s", src_);
    snprintf(base, sizeof(base), "%s", base_ ? base_ : "");
    snprintf(out, sizeof(out), "%s", at("out"));
    struct crl_ckpt_stats st;
    if (restore(s, id, base_ ? base : NULL, out, &st) < 0) {
        fail("%s: restore", what);
        return;
    }
    int n = compare_trees(src, out, shift);
    ok(n == 0, "%s: the restore is the source (%d differences)", what, n);
}

static inline double ms(unsigned long long ns)
{
    return (double)ns / 1e6;
}

#endif
