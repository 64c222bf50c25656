/* lib/traj/ckpt: the checkpoint store.  Blobs (round trip, idempotence,
 * dedup, corrupt, truncated and missing ones, stale tmp files); checkpoints
 * of a plain tree and of an overlayfs upper dir across changes, each
 * restored through the tar stream with a small applier of the restore
 * format and compared exactly with the source (types, modes, owners with
 * the uid shift, ns mtimes, contents, symlinks, hard links, user xattrs);
 * the tar's own invariants; identical state giving identical ids; an index
 * rebuilt from the store; a chain flattened past 32; garbage collection
 * (mark and sweep: what stays restores exactly, missing and corrupt
 * manifests, the grace and what makes a blob young again, a million
 * marks); and the cost of a checkpoint of 1,000 files, unchanged and with
 * one file changed (diag figures; no test gates on a time). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/sha256.h"
#include "../../lib/traj/ckpt.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

#define SHIFT 100000u

static char dir[4096];

static void make_dir(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/test_ckpt.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
}

static void remove_dir(void)
{
    crl_rm_rf_at(AT_FDCWD, dir);
}

/* "dir/<fmt>", in one of 16 rotating buffers. */
static const char *at(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *at(const char *fmt, ...)
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

static void must(int ok, const char *what, const char *path)
{
    if (!ok) {
        char m[4200];
        snprintf(m, sizeof(m), "%s %s: %s", what, path, strerror(errno));
        bail_out(m);
    }
}

static void wfile_len(const char *path, const void *data, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    must(fd >= 0, "create", path);
    must(crl_write_full(fd, data, len) == 0, "write", path);
    must(fchmod(fd, mode) == 0, "chmod", path);
    close(fd);
}

static void wfile(const char *path, const char *content, mode_t mode)
{
    wfile_len(path, content, strlen(content), mode);
}

static void mkd(const char *path, mode_t mode)
{
    must(mkdir(path, mode) == 0 && chmod(path, mode) == 0, "mkdir", path);
}

static void set_mtime(const char *path, time_t s, long ns)
{
    struct timespec ts[2] = {{s, ns}, {s, ns}};
    must(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) == 0, "utimensat", path);
}

static void own(const char *path, uid_t u, gid_t g)
{
    must(lchown(path, u, g) == 0, "lchown", path);
}

static void xset(const char *path, const char *name, const char *value)
{
    must(lsetxattr(path, name, value, strlen(value), 0) == 0, "setxattr", path);
}

static void rm(const char *path)
{
    must(crl_rm_rf_at(AT_FDCWD, path) == 0, "rm -rf", path);
}

static struct crl_ckpt_store *open_store(const char *sub)
{
    struct crl_ckpt_store *s;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_ckpt_store_open(at("%s", sub), &s, &e) < 0)
        bail_out(e.msg);
    return s;
}

static size_t count_blobs(const char *sub)
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

static int take_ex(struct crl_ckpt_store *s, struct crl_ckpt_index *idx, const char *root,
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

static int take(struct crl_ckpt_store *s, struct crl_ckpt_index *idx, const char *root,
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

static bool ignored_xattr(const char *name)
{
    return strncmp(name, "user.", 5) != 0 || strncmp(name, "user.overlay.", 13) == 0;
}

/* Make dst's user.* xattrs (but user.overlay.*) those of src (NULL: none). */
static void copy_xattrs(const char *src, const char *dst)
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

static void copy_meta(const char *src, const char *dst, const struct stat *st)
{
    own(dst, st->st_uid, st->st_gid);
    if (!S_ISLNK(st->st_mode)) {
        must(chmod(dst, st->st_mode & 07777) == 0, "chmod", dst);
        copy_xattrs(src, dst);
    }
    set_mtime(dst, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

static void copy_file(const char *src, const char *dst, const struct stat *st)
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

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of a directory (NULL-terminated; free with free_names). */
static char **list_names(const char *path)
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

static void free_names(char **v)
{
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static void copy_tree(const char *src, const char *dst)
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

static bool left_out(const char *name, const struct stat *st)
{
    return strncmp(name, ".wh.", 4) == 0 ||
           !(S_ISREG(st->st_mode) || S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode) ||
             (S_ISCHR(st->st_mode) && st->st_rdev == makedev(0, 0)));
}

/* What overlayfs would show: `upper` applied over `target` (a copy of the
 * lower dir), by overlayfs's rules, with what a checkpoint leaves out left
 * out here too. */
static void overlay_apply(const char *upper, const char *target)
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

static void differ(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void differ(const char *fmt, ...)
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

static uint32_t unshifted(uint32_t id, uint32_t shift)
{
    return id >= shift ? id - shift : 65534;
}

static void compare_xattrs(const char *a, const char *b, const char *rel)
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

static bool same_content(const char *a, const char *b)
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
static void compare_dir(const char *a, const char *b, const char *rel, uint32_t shift)
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

static int compare_trees(const char *a, const char *b, uint32_t shift)
{
    ndiff = 0;
    compare_dir(a, b, "", shift);
    return ndiff;
}

/* ---- the restore format: a checker and a small applier ---- */

/* Invariants of the stream: relative paths without "./", each path once,
 * parents before children, numeric owners only, an opaque marker right
 * after its directory.  Returns the problems found. */
static int tar_lint(int fd, size_t *entries)
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

static void set_entry_xattrs(const char *path, struct archive_entry *e)
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
static int apply_tar(int fd, const char *root)
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
static int restore(struct crl_ckpt_store *s, const char *id, const char *base, const char *out,
                   struct crl_ckpt_stats *st)
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

static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return lstat(a, &x) == 0 && lstat(b, &y) == 0 && x.st_ino == y.st_ino && x.st_dev == y.st_dev;
}

/* ---- blobs ---- */

static void test_blobs(void)
{
    make_dir();
    struct crl_ckpt_store *s = open_store("b");
    struct crl_err e = CRL_ERR_INIT;
    char id[CRL_CKPT_ID_MAX], id2[CRL_CKPT_ID_MAX];
    const char *text = "hello, checkpoint";
    ok(crl_blob_put(s, text, strlen(text), id, &e) == 0 && crl_ckpt_store_sync(s, &e) == 0,
       "put a blob");
    char want[CRL_CKPT_ID_MAX];
    crl_sha256_buf(text, strlen(text), want);
    is_str(id, want, "its id is the sha256 of its bytes");
    struct stat st1, st2;
    must(stat(at("b/sha256/%s", id + 7), &st1) == 0, "stat", "blob");
    ok(crl_blob_put(s, text, strlen(text), id2, &e) == 0 && strcmp(id, id2) == 0,
       "the same bytes again give the same id");
    must(stat(at("b/sha256/%s", id + 7), &st2) == 0, "stat", "blob");
    ok(st1.st_ino == st2.st_ino && st1.st_size == st2.st_size,
       "and the existing blob is not rewritten");
    is_int(count_blobs("b"), 1, "one file in sha256/");

    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, id, &b, 1 << 20, &e) == 0 && b.len == strlen(text) &&
           memcmp(b.data, text, b.len) == 0,
       "get gives the bytes back");
    crl_buf_free(&b);
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    is_int(crl_blob_get(s, id, &b, 4, &e), -1, "get past max fails");
    is_int(e.code, CRL_E_TOO_LARGE, "with CRL_E_TOO_LARGE");
    crl_buf_free(&b);

    /* A big blob, compressible, streamed both ways. */
    size_t big = 3u << 20;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)((i * 7) ^ (i >> 11));
    ok(crl_blob_put(s, data, big, id2, &e) == 0, "put 3 MiB");
    must(stat(at("b/sha256/%s", id2 + 7), &st1) == 0, "stat", "blob");
    diag("3 MiB stored as %lld bytes", (long long)st1.st_size);
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, id2, &b, big, &e) == 0 && b.len == big && memcmp(b.data, data, big) == 0,
       "and get it back");
    crl_buf_free(&b);
    free(data);

    char empty[CRL_CKPT_ID_MAX];
    ok(crl_blob_put(s, "", 0, empty, &e) == 0 && count_blobs("b") == 2,
       "the empty blob is not written");
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, empty, &b, 10, &e) == 0 && b.len == 0, "but it is always there");
    crl_buf_free(&b);

    /* Missing, malformed, corrupt and truncated blobs. */
    char missing[CRL_CKPT_ID_MAX];
    crl_sha256_buf("nope", 4, missing);
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    is_int(crl_blob_get(s, missing, &b, 100, &e), -1, "a missing blob");
    is_int(e.code, CRL_E_NOT_FOUND, "is CRL_E_NOT_FOUND");
    is_int(crl_blob_get(s, "sha256:xyz", &b, 100, &e), -1, "a malformed id");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");
    const char *path = at("b/sha256/%s", id + 7);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    must(fd >= 0, "open", path);
    char c;
    off_t end = lseek(fd, 0, SEEK_END);
    must(pread(fd, &c, 1, end - 3) == 1, "read", path);
    c ^= 0x20;
    must(pwrite(fd, &c, 1, end - 3) == 1, "write", path);
    close(fd);
    is_int(crl_blob_get(s, id, &b, 100, &e), -1, "a corrupt blob");
    is_int(e.code, CRL_E_INTERNAL, "is CRL_E_INTERNAL");
    like(e.msg, id + 7, "naming its file");
    diag("%s", e.msg);
    must(truncate(path, 6) == 0, "truncate", path);
    is_int(crl_blob_get(s, id, &b, 100, &e), -1, "a truncated blob");
    like(e.msg, "corrupt", "is corrupt too: %s", e.msg);
    crl_buf_free(&b);
    crl_ckpt_store_close(s);

    /* tmp/: old leftovers go at open, recent ones stay. */
    wfile(at("b/tmp/old.tmp"), "x", 0600);
    wfile(at("b/tmp/new.tmp"), "x", 0600);
    set_mtime(at("b/tmp/old.tmp"), time(NULL) - 7200, 0);
    s = open_store("b");
    ok(access(at("b/tmp/old.tmp"), F_OK) < 0 && access(at("b/tmp/new.tmp"), F_OK) == 0,
       "open removes tmp files older than an hour, and only those");
    crl_ckpt_store_close(s);
    remove_dir();
}

/* ---- a plain tree across changes ---- */

/* Owned by the sandbox's ids: host id = sandbox id + SHIFT. */
static void sown(const char *path, uid_t u, gid_t g)
{
    own(path, u + SHIFT, g + SHIFT);
}

static void build_tree(void)
{
    mkd(at("src"), 0755);
    mkd(at("src/etc"), 0755);
    wfile(at("src/etc/passwd"), "root:x:0:0::/root:/bin/sh\n", 0644);
    wfile(at("src/etc/shadow"), "root:*:1::::::\n", 0640);
    sown(at("src/etc/shadow"), 0, 42);
    mkd(at("src/home"), 0755);
    mkd(at("src/home/user"), 0700);
    sown(at("src/home/user"), 1000, 1000);
    wfile(at("src/home/user/notes.txt"), "remember the milk\n", 0600);
    sown(at("src/home/user/notes.txt"), 1000, 1000);
    xset(at("src/home/user/notes.txt"), "user.mime", "text/plain");
    xset(at("src/home/user/notes.txt"), "user.bin", "\x01\x02\xff");
    xset(at("src/home/user"), "user.dirattr", "yes");
    wfile(at("src/home/user/empty"), "", 0644);
    wfile(at("src/home/user/dup1"), "same bytes twice", 0644);
    wfile(at("src/home/user/dup2"), "same bytes twice", 0644);
    wfile(at("src/home/user/caf\xc3\xa9.txt"), "utf-8 name", 0644);
    wfile(at("src/home/user/raw\xff.bin"), "not utf-8 name", 0644);
    mkd(at("src/bin"), 0755);
    wfile(at("src/bin/tool"), "#!/bin/sh\necho hi\n", 04755);
    must(symlink("tool", at("src/bin/alias")) == 0, "symlink", "alias");
    must(symlink("/nowhere/at/all", at("src/bin/dangling")) == 0, "symlink", "dangling");
    sown(at("src/bin/dangling"), 7, 7);
    must(link(at("src/bin/tool"), at("src/bin/tool-hard")) == 0, "link", "tool-hard");
    must(link(at("src/bin/tool"), at("src/etc/tool-hard2")) == 0, "link", "tool-hard2");
    /* Big enough to take the streaming path. */
    size_t big = (1u << 20) + 4321;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 251);
    wfile_len(at("src/bin/big"), data, big, 0755);
    free(data);
    must(mkfifo(at("src/fifo"), 0644) == 0, "mkfifo", "fifo");
    wfile(at("src/.wh.sneaky"), "reserved name", 0644);
    own(at("src/etc/passwd"), 5, 5); /* below the shift: unmapped, 65534 */
    set_mtime(at("src/etc/passwd"), 1700000000, 123456789);
    set_mtime(at("src/bin/alias"), 1600000000, 987654321);
    set_mtime(at("src/etc"), 1500000000, 5);
}

static void check_restore(struct crl_ckpt_store *s, const char *id, const char *src_,
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

static void test_plain(void)
{
    make_dir();
    build_tree();
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id1[CRL_CKPT_ID_MAX], id[CRL_CKPT_ID_MAX], prev[CRL_CKPT_ID_MAX], src[4096];
    snprintf(src, sizeof(src), "%s", at("src"));

    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id1, &st) == 0, "first checkpoint");
    ok(crl_digest_valid(id1), "its id is a digest");
    is_int(st.entries, 18, "every kept entry walked (fifo and .wh. name left out)");
    /* Distinct contents: passwd shadow notes dup tool big utf8 raw = 8, plus the manifest. */
    is_int(st.blobs_new, 9, "one blob per distinct content, the empty file none, and the manifest");
    is_int(count_blobs("store"), 9, "as many files in sha256/");
    check_restore(s, id1, src, NULL, SHIFT, "checkpoint 1");
    ok(same_file(at("out/bin/tool"), at("out/bin/tool-hard")) &&
           same_file(at("out/bin/tool"), at("out/etc/tool-hard2")),
       "hard links restored as hard links");
    struct stat sb;
    ok(lstat(at("out/etc/passwd"), &sb) == 0 && sb.st_uid == 65534,
       "an owner below the shift is restored as 65534");
    ok(lstat(at("out/etc/shadow"), &sb) == 0 && sb.st_uid == 0 && sb.st_gid == 42,
       "owners are stored as host id - shift");
    ok(crl_ckpt_check(s, id1, NULL) == 0, "check: the checkpoint is complete");

    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0 && strcmp(id, id1) == 0,
       "unchanged: the same id");
    is_int(st.blobs_new, 0, "and no new blob");
    is_int(count_blobs("store"), 9, "nothing written");

    /* Changes, one checkpoint each, each restored and compared. */
    snprintf(prev, sizeof(prev), "%s", id1);

    /* 2: modify, delete, add two files with the same new content. */
    wfile(at("src/home/user/notes.txt"), "remember the eggs\n", 0600);
    sown(at("src/home/user/notes.txt"), 1000, 1000);
    must(unlink(at("src/etc/shadow")) == 0, "unlink", "shadow");
    wfile(at("src/home/user/new1"), "fresh and duplicated", 0644);
    wfile(at("src/home/user/new2"), "fresh and duplicated", 0644);
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0 && strcmp(id, prev) != 0,
       "step 2: a new checkpoint");
    is_int(st.blobs_new, 3, "step 2: notes, one blob for two new files (dedup), the manifest");
    is_int(st.removed, 1, "step 2: one removal");
    check_restore(s, id, src, NULL, SHIFT, "step 2");
    snprintf(prev, sizeof(prev), "%s", id);

    /* 3: a file becomes a dir, a dir becomes a file, a dir tree goes. */
    rm(at("src/home/user/dup1"));
    mkd(at("src/home/user/dup1"), 0750);
    wfile(at("src/home/user/dup1/inner"), "inside the new dir", 0644);
    rm(at("src/bin"));
    wfile(at("src/bin"), "bin is a file now", 0755);
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 3: file <-> dir");
    check_restore(s, id, src, NULL, SHIFT, "step 3");
    snprintf(prev, sizeof(prev), "%s", id);

    /* 4: metadata only: chmod, chown, an xattr, an mtime; a symlink retargeted. */
    must(chmod(at("src/home/user/new1"), 0600) == 0, "chmod", "new1");
    sown(at("src/home/user/new2"), 33, 33);
    xset(at("src/home/user/new2"), "user.tag", "v2");
    must(lremovexattr(at("src/home/user/notes.txt"), "user.mime") == 0, "removexattr", "notes");
    set_mtime(at("src/etc/passwd"), 1700000001, 1);
    must(symlink("../home", at("src/etc/link")) == 0, "symlink", "link");
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 4: metadata");
    is_int(st.blobs_new, 1, "step 4: only the manifest is new");
    check_restore(s, id, src, NULL, SHIFT, "step 4");
    snprintf(prev, sizeof(prev), "%s", id);

    /* 5: hard links: the first path goes, another stays linked. */
    mkd(at("src/l"), 0755);
    wfile(at("src/l/a"), "linked content", 0644);
    must(link(at("src/l/a"), at("src/l/b")) == 0 && link(at("src/l/a"), at("src/l/c")) == 0, "link",
         "l");
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 5a: three links");
    check_restore(s, id, src, NULL, SHIFT, "step 5a");
    ok(same_file(at("out/l/a"), at("out/l/c")), "step 5a: linked");
    must(unlink(at("src/l/a")) == 0, "unlink", "l/a");
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 5b: the first link goes");
    check_restore(s, id, src, NULL, SHIFT, "step 5b");
    ok(same_file(at("out/l/b"), at("out/l/c")), "step 5b: the other two still linked");
    char id5[CRL_CKPT_ID_MAX];
    snprintf(id5, sizeof(id5), "%s", id);

    /* An older checkpoint still restores to its own state. */
    mkd(at("keep5"), 0755);
    copy_tree(src, at("keep5")); /* (copies break links; compared below without them) */
    rm(at("src/home"));
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 6: a whole tree goes");
    check_restore(s, id, src, NULL, SHIFT, "step 6");
    check_restore(s, id5, at("keep5"), NULL, SHIFT, "step 5 again, after step 6");

    /* The same state, walked from a fresh index, gives the same id; an
     * index rebuilt from the store takes the next checkpoint against it. */
    struct crl_ckpt_index *idx2 = crl_ckpt_index_new();
    char again[CRL_CKPT_ID_MAX];
    struct crl_ckpt_store *s2 = open_store("store2");
    ok(take(s2, idx2, src, CRL_LAYER_PLAIN, SHIFT, again, &st) == 0, "a fresh index");
    crl_ckpt_index_free(idx2);
    struct crl_ckpt_index *loaded = NULL;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_ckpt_index_load(s, id, &loaded, &e) == 0, "index_load %s", e.msg);
    is_str(crl_ckpt_index_id(loaded), id, "the loaded index is of that checkpoint");
    ok(take(s, loaded, src, CRL_LAYER_PLAIN, SHIFT, again, &st) == 0 && strcmp(again, id) == 0,
       "after index_load, no change: the same id");
    is_int(st.blobs_new, 0, "and nothing written");
    ok(st.bytes_read > 0, "(the files were hashed: no fast-path keys after a load)");
    crl_ckpt_index_free(loaded);

    /* A restore, taken against the loaded index, is the same checkpoint. */
    ok(crl_ckpt_index_load(s, id5, &loaded, &e) == 0, "index_load step 5");
    check_restore(s, id5, at("keep5"), NULL, SHIFT, "step 5 restored");
    ok(take(s, loaded, at("out"), CRL_LAYER_PLAIN, 0, again, &st) == 0 && strcmp(again, id5) == 0,
       "a restored tree, walked against the loaded index: the same id (%llu changed)",
       (unsigned long long)st.changed);
    crl_ckpt_index_free(loaded);

    /* The parent must be the index's checkpoint. */
    int fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct crl_snapshot_view v = {fd, CRL_LAYER_PLAIN, SHIFT, SHIFT};
    is_int(crl_ckpt_take(s, idx, id1, &v, again, &st, &e), -1, "a parent the index is not of");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");
    close(fd);

    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    crl_ckpt_store_close(s2);
    remove_dir();
}

static void test_determinism(void)
{
    make_dir();
    mkd(at("a"), 0755);
    mkd(at("a/d"), 0700);
    wfile(at("a/d/f"), "content", 0640);
    xset(at("a/d/f"), "user.k", "v");
    must(symlink("d/f", at("a/s")) == 0, "symlink", "s");
    set_mtime(at("a/d/f"), 1234567890, 42);
    set_mtime(at("a/s"), 1234567890, 43);
    set_mtime(at("a/d"), 1234567890, 44);
    mkd(at("b"), 0755);
    copy_tree(at("a"), at("b"));
    struct crl_ckpt_store *s1 = open_store("s1"), *s2 = open_store("s2");
    struct crl_ckpt_index *i1 = crl_ckpt_index_new(), *i2 = crl_ckpt_index_new();
    char x[CRL_CKPT_ID_MAX], y[CRL_CKPT_ID_MAX];
    ok(take(s1, i1, at("a"), CRL_LAYER_PLAIN, 0, x, NULL) == 0 &&
           take(s2, i2, at("b"), CRL_LAYER_PLAIN, 0, y, NULL) == 0,
       "two copies of a tree, two stores");
    is_str(x, y, "the same state gives the same id (inodes and stores differ)");
    struct crl_ckpt_index *i3 = crl_ckpt_index_new();
    mkd(at("empty"), 0755);
    ok(take(s1, i3, at("empty"), CRL_LAYER_PLAIN, 0, x, NULL) == 0 && x[0] == 0,
       "an empty layer and no parent: no checkpoint (\"\")");
    struct crl_ckpt_stats st;
    int fd = memfd_create("t", MFD_CLOEXEC);
    ok(crl_ckpt_write_tar(s1, "", fd, &st, NULL) == 0 && st.entries == 0,
       "and \"\" restores as nothing");
    close(fd);
    crl_ckpt_index_free(i1);
    crl_ckpt_index_free(i2);
    crl_ckpt_index_free(i3);
    crl_ckpt_store_close(s1);
    crl_ckpt_store_close(s2);
    remove_dir();
}

/* ---- an overlayfs upper dir over an image ---- */

static void whiteout(const char *path)
{
    must(mknod(path, S_IFCHR | 0, makedev(0, 0)) == 0, "mknod", path);
}

static void opaque(const char *path)
{
    xset(path, "user.overlay.opaque", "y");
}

static void check_overlay(struct crl_ckpt_store *s, const char *id, const char *what)
{
    rm(at("expect"));
    mkd(at("expect"), 0755);
    copy_tree(at("lower"), at("expect"));
    overlay_apply(at("upper"), at("expect"));
    check_restore(s, id, at("expect"), at("lower"), 0, what);
}

static void test_overlay(void)
{
    make_dir();
    /* The image. */
    mkd(at("lower"), 0755);
    mkd(at("lower/etc"), 0755);
    wfile(at("lower/etc/hosts"), "127.0.0.1 localhost\n", 0644);
    wfile(at("lower/etc/motd"), "welcome\n", 0644);
    wfile(at("lower/etc/gone"), "to be whited out\n", 0644);
    mkd(at("lower/usr"), 0755);
    mkd(at("lower/usr/lib"), 0755);
    wfile(at("lower/usr/lib/a.so"), "old library a", 0644);
    wfile(at("lower/usr/lib/b.so"), "old library b", 0644);
    mkd(at("lower/var"), 0755);
    mkd(at("lower/var/cache"), 0755);
    wfile(at("lower/var/cache/x"), "cached x", 0644);
    mkd(at("lower/opt"), 0755);
    wfile(at("lower/opt/keep"), "image file under a dir made opaque later", 0644);
    set_mtime(at("lower/etc"), 1000, 1);
    set_mtime(at("lower/usr"), 1000, 2);

    /* Step 1, as overlayfs would leave the upper dir. */
    mkd(at("upper"), 0755);
    mkd(at("upper/etc"), 0755);
    set_mtime(at("upper/etc"), 2000, 1);
    wfile(at("upper/etc/hosts"), "127.0.0.1 localhost sandbox\n", 0644); /* copied up */
    whiteout(at("upper/etc/gone"));
    wfile(at("upper/etc/new"), "created in the sandbox\n", 0600);
    xset(at("upper/etc"), "trusted.overlay.impure", "y"); /* overlayfs's own: ignored */
    xset(at("upper/etc"), "user.overlay.origin", "xx");   /* likewise */
    mkd(at("upper/usr"), 0755);
    mkd(at("upper/usr/lib"), 0700); /* rm -rf usr/lib; mkdir usr/lib */
    opaque(at("upper/usr/lib"));
    wfile(at("upper/usr/lib/c.so"), "new library c", 0644);
    mkd(at("upper/var"), 0755);
    whiteout(at("upper/var/cache")); /* rm -rf var/cache */
    mkd(at("upper/opt"), 0755);
    wfile(at("upper/opt/added"), "added beside an image file", 0644);
    must(mkfifo(at("upper/opt/pipe"), 0600) == 0, "mkfifo", "pipe");
    wfile(at("upper/opt/.wh.fake"), "a file named like a whiteout", 0644);

    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id[CRL_CKPT_ID_MAX];
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 1");
    is_int(st.removed, 2, "two whiteouts");
    check_overlay(s, id, "overlay 1");

    /* The tar says what it should. */
    int fd = memfd_create("t", MFD_CLOEXEC);
    crl_ckpt_write_tar(s, id, fd, NULL, NULL);
    lseek(fd, 0, SEEK_SET);
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    archive_read_open_fd(a, fd, 65536);
    struct archive_entry *e;
    char order[2048] = "";
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
        size_t l = strlen(order);
        snprintf(order + l, sizeof(order) - l, "%s ", archive_entry_pathname(e));
        const char *name;
        const void *val;
        size_t sz;
        archive_entry_xattr_reset(e);
        while (archive_entry_xattr_next(e, &name, &val, &sz) == ARCHIVE_OK)
            if (strncmp(name, "user.", 5) != 0 || strncmp(name, "user.overlay.", 13) == 0)
                fail("the tar carries xattr %s on %s", name, archive_entry_pathname(e));
    }
    archive_read_free(a);
    close(fd);
    is_str(order,
           "etc/ etc/.wh.gone etc/hosts etc/new opt/ opt/added usr/ usr/lib/ "
           "usr/lib/.wh..wh..opq usr/lib/c.so var/ var/.wh.cache ",
           "the tar, in order");

    /* Step 2: a whited-out file comes back; a dir with children in an
     * older manifest becomes opaque; an upper file (over the image) goes. */
    must(unlink(at("upper/etc/gone")) == 0, "unlink", "gone");
    wfile(at("upper/etc/gone"), "back again\n", 0644);
    opaque(at("upper/opt")); /* everything in opt removed, then files recreated */
    must(unlink(at("upper/opt/.wh.fake")) == 0, "unlink", ".wh.fake");
    wfile(at("upper/opt/second"), "second file after opaque", 0644);
    whiteout(at("upper/etc/motd"));
    rm(at("upper/etc/new")); /* only ever in the upper: no whiteout left by overlayfs */
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 2");
    check_overlay(s, id, "overlay 2");

    /* Step 3: an opaque dir goes (a whiteout now), and a whited-out dir
     * comes back as a dir, which overlayfs makes opaque. */
    rm(at("upper/usr/lib"));
    whiteout(at("upper/usr/lib"));
    rm(at("upper/var/cache"));
    mkd(at("upper/var/cache"), 0755);
    opaque(at("upper/var/cache"));
    wfile(at("upper/var/cache/y"), "new cache", 0644);
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 3");
    check_overlay(s, id, "overlay 3");

    /* Step 4: a file over the image's dir; step 5: a dir again. */
    rm(at("upper/usr/lib"));
    wfile(at("upper/usr/lib"), "lib is a file", 0644);
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 4");
    check_overlay(s, id, "overlay 4");
    rm(at("upper/usr/lib"));
    mkd(at("upper/usr/lib"), 0755);
    opaque(at("upper/usr/lib"));
    wfile(at("upper/usr/lib/d.so"), "d", 0644);
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 5");
    check_overlay(s, id, "overlay 5");

    struct crl_ckpt_index *loaded = NULL;
    ok(crl_ckpt_index_load(s, id, &loaded, NULL) == 0, "overlay: index_load");
    char again[CRL_CKPT_ID_MAX];
    ok(take(s, loaded, at("upper"), CRL_LAYER_OVERLAY, 0, again, &st) == 0 &&
           strcmp(again, id) == 0,
       "overlay: after index_load, the same id");
    crl_ckpt_index_free(loaded);
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* PLAIN: a dir that replaces a file is restored opaque over an image. */
static void test_replaced_dir(void)
{
    make_dir();
    mkd(at("image"), 0755);
    mkd(at("image/d"), 0755);
    wfile(at("image/d/from-image"), "must not show through", 0644);
    mkd(at("src"), 0755);
    wfile(at("src/d"), "a file over the image dir", 0644);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    char id[CRL_CKPT_ID_MAX];
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, NULL) == 0, "d is a file");
    rm(at("src/d"));
    mkd(at("src/d"), 0755);
    wfile(at("src/d/mine"), "mine", 0644);
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, NULL) == 0, "d is a dir again");
    struct crl_ckpt_stats st;
    ok(restore(s, id, at("image"), at("out"), &st) == 0, "restored over the image");
    ok(access(at("out/d/mine"), F_OK) == 0 && access(at("out/d/from-image"), F_OK) < 0,
       "the image's contents of d do not show through");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* ---- a long chain ---- */

static json_t *manifest(struct crl_ckpt_store *s, const char *id)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    json_t *j = NULL;
    if (crl_blob_get(s, id, &b, 1 << 24, NULL) == 0)
        j = json_loadb(b.data, b.len, 0, NULL);
    crl_buf_free(&b);
    return j;
}

static void test_deep_chain(void)
{
    make_dir();
    mkd(at("src"), 0755);
    mkd(at("src/d"), 0755);
    wfile(at("src/base"), "always here", 0644);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    char ids[41][CRL_CKPT_ID_MAX];
    int bad_depth = 0, flat_at = 0;
    for (int i = 1; i <= 40; i++) {
        char c[64];
        snprintf(c, sizeof(c), "step %d", i);
        wfile(at("src/counter"), c, 0644);
        if (i % 5 == 0)
            wfile(at("src/d/f%d", i), c, 0644);
        if (i % 7 == 0)
            rm(at("src/d/f%d", i - 2 - (i - 2) % 5));
        if (take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, ids[i], NULL) < 0)
            break;
        char keep[32];
        snprintf(keep, sizeof(keep), "keep%d", i);
        mkd(at("%s", keep), 0755);
        copy_tree(at("src"), at("%s", keep));
        json_t *m = manifest(s, ids[i]);
        int depth = (int)json_integer_value(json_object_get(m, "depth"));
        bool null_parent = json_is_null(json_object_get(m, "parent"));
        int want = i <= 32 ? i : i - 32;
        if (depth != want || null_parent != (want == 1))
            bad_depth++, diag("step %d: depth %d", i, depth);
        if (i == 33 && null_parent)
            flat_at = i;
        if (i > 1 && !null_parent &&
            strcmp(json_string_value(json_object_get(m, "parent")), ids[i - 1]) != 0)
            bad_depth++, diag("step %d: parent is not step %d", i, i - 1);
        json_decref(m);
    }
    is_int(bad_depth, 0, "depths and parents as expected over 40 steps");
    is_int(flat_at, 33, "the 33rd checkpoint is written flattened (parent null)");
    static const int check[] = {1, 31, 32, 33, 34, 40};
    for (size_t k = 0; k < CRL_ARRAY_SIZE(check); k++) {
        char keep[32], what[32];
        snprintf(keep, sizeof(keep), "keep%d", check[k]);
        snprintf(what, sizeof(what), "step %d", check[k]);
        check_restore(s, ids[check[k]], at("%s", keep), NULL, 0, what);
    }
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_ckpt_check(s, ids[40], &e) == 0, "check of step 40: %s", e.msg);
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* ---- damage ---- */

static void test_damage(void)
{
    make_dir();
    mkd(at("src"), 0755);
    wfile(at("src/victim"), "the content that will be damaged", 0644);
    wfile(at("src/other"), "fine", 0644);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    char id[CRL_CKPT_ID_MAX], blob[CRL_CKPT_ID_MAX];
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, NULL) == 0, "a checkpoint");
    const char *content = "the content that will be damaged";
    crl_sha256_buf(content, strlen(content), blob);
    const char *path = at("store/sha256/%s", blob + 7);
    /* Flip a byte of the data (the last 3 bytes are zstd's block end). */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    must(fd >= 0, "open", path);
    char c;
    off_t end = lseek(fd, 0, SEEK_END);
    must(pread(fd, &c, 1, end - 5) == 1, "read", path);
    c ^= 1;
    must(pwrite(fd, &c, 1, end - 5) == 1, "write", path);
    close(fd);
    struct crl_err e = CRL_ERR_INIT;
    int tfd = memfd_create("t", MFD_CLOEXEC);
    is_int(crl_ckpt_write_tar(s, id, tfd, NULL, &e), -1, "restoring over a corrupt blob fails");
    is_int(e.code, CRL_E_INTERNAL, "with CRL_E_INTERNAL");
    like(e.msg, blob + 7, "naming the blob's file");
    like(e.msg, "victim", "and the path: %s", e.msg);
    close(tfd);
    must(unlink(path) == 0, "unlink", path);
    is_int(crl_ckpt_check(s, id, &e), -1, "check: a blob is missing");
    is_int(e.code, CRL_E_NOT_FOUND, "CRL_E_NOT_FOUND");
    like(e.msg, blob, "naming it: %s", e.msg);
    tfd = memfd_create("t", MFD_CLOEXEC);
    is_int(crl_ckpt_write_tar(s, id, tfd, NULL, &e), -1, "restoring it fails");
    is_int(e.code, CRL_E_NOT_FOUND, "with CRL_E_NOT_FOUND");
    close(tfd);
    must(unlink(at("store/sha256/%s", id + 7)) == 0, "unlink", "manifest");
    is_int(crl_ckpt_check(s, id, &e), -1, "check: the manifest is missing");
    is_int(e.code, CRL_E_NOT_FOUND, "CRL_E_NOT_FOUND: %s", e.msg);
    struct crl_ckpt_index *loaded = NULL;
    is_int(crl_ckpt_index_load(s, id, &loaded, &e), -1, "index_load of a missing checkpoint");
    /* A blob that is valid zstd and the right hash but not a manifest. */
    char junk[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "[1,2,3]", 7, junk, NULL);
    is_int(crl_ckpt_check(s, junk, &e), -1, "a blob that is not a manifest");
    like(e.msg, "not a version 1 manifest", "is refused: %s", e.msg);
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* Two writes of the same size within one clock tick leave ctime as it
 * was: a checkpoint must not trust a key that recent.  (Since Linux 6.13
 * a ctime that was read gets a finer one at the next change, on ext4, xfs,
 * btrfs and tmpfs: there this cannot fail; on 6.1 it can.) */
static void test_racy(void)
{
    make_dir();
    mkd(at("src"), 0755);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id[CRL_CKPT_ID_MAX];
    int missed = 0;
    for (int i = 0; i < 20; i++) {
        char c[8];
        snprintf(c, sizeof(c), "v%04d", i);
        wfile(at("src/f"), c, 0644);
        struct timespec keep = {1000000000, 0};
        struct timespec ts[2] = {keep, keep}; /* the same mtime every time too */
        utimensat(AT_FDCWD, at("src/f"), ts, 0);
        if (take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0 || st.changed != 1) {
            missed++;
            continue;
        }
        struct crl_buf b;
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        char blob[CRL_CKPT_ID_MAX];
        crl_sha256_buf(c, strlen(c), blob);
        missed += crl_blob_get(s, blob, &b, 100, NULL) < 0;
        crl_buf_free(&b);
    }
    is_int(missed, 0, "20 rewrites of the same size and mtime at once: each one seen");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* ---- limits: another filesystem, a tree too deep ---- */

static void test_limits(void)
{
    make_dir();
    mkd(at("src"), 0755);
    wfile(at("src/kept"), "kept", 0644);
    mkd(at("src/mnt"), 0755);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id[CRL_CKPT_ID_MAX];
    /* A mount below the layer, in a mount namespace of this test's own. */
    if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
        mount("none", at("src/mnt"), "tmpfs", 0, NULL) == 0) {
        wfile(at("src/mnt/elsewhere"), "on another filesystem", 0644);
        ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) == 0, "a mount below the layer");
        is_int(st.entries, 1, "is left out, and nothing below it is read");
        umount(at("src/mnt"));
    } else {
        skip(2, "cannot mount a tmpfs in a mount namespace of our own");
    }
    /* CRL_CKPT_MAX_DEPTH levels of directories. */
    char path[8192];
    int n = snprintf(path, sizeof(path), "%s/src/deep", dir);
    for (int i = 0; i < CRL_CKPT_MAX_DEPTH + 2; i++) {
        must(mkdir(path, 0755) == 0, "mkdir", path);
        n += snprintf(path + n, sizeof(path) - (size_t)n, "/d");
    }
    struct crl_err e = CRL_ERR_INIT;
    char before[CRL_CKPT_ID_MAX];
    snprintf(before, sizeof(before), "%s", crl_ckpt_index_id(idx));
    is_int(take_ex(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st, &e), -1,
           "a tree deeper than %d levels is refused", CRL_CKPT_MAX_DEPTH);
    is_int(e.code, CRL_E_TOO_LARGE, "CRL_E_TOO_LARGE: %.120s...", e.msg);
    is_str(crl_ckpt_index_id(idx), before, "and the index is as it was");
    rm(at("src/deep"));
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) == 0 &&
           strcmp(id, crl_ckpt_index_id(idx)) == 0,
       "which takes the next checkpoint as if nothing happened");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* The same walk with bare syscalls (getdents64 and fstatat of each name):
 * what an unchanged checkpoint cannot be faster than. */
static void bare_walk(int dfd, unsigned *count)
{
    static char buf[32768] __attribute__((aligned(8))); /* struct dirent64 */
    char names[65536];
    size_t len = 0;
    ssize_t k;
    while ((k = getdents64(dfd, buf, sizeof(buf))) > 0)
        for (ssize_t o = 0; o < k;) {
            struct dirent64 *de = (struct dirent64 *)(void *)(buf + o);
            o += de->d_reclen;
            size_t l = strlen(de->d_name) + 1;
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && len + l < sizeof(names)) {
                memcpy(names + len, de->d_name, l);
                len += l;
            }
        }
    for (size_t o = 0; o < len; o += strlen(names + o) + 1) {
        struct stat st;
        if (fstatat(dfd, names + o, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        (*count)++;
        if (S_ISDIR(st.st_mode)) {
            int fd = openat(dfd, names + o, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0) {
                bare_walk(fd, count);
                close(fd);
            }
        }
    }
}

/* ---- figures ---- */

static double ms(unsigned long long ns)
{
    return (double)ns / 1e6;
}

/* ---- garbage collection ---- */

static const char *blob_file(const char *sub, const char *id)
{
    return at("%s/sha256/%s", sub, id + 7);
}

static bool has_content(const char *sub, const char *content)
{
    char id[CRL_CKPT_ID_MAX];
    crl_sha256_buf(content, strlen(content), id);
    return access(blob_file(sub, id), F_OK) == 0;
}

/* Make a file look written `secs` ago. */
static void age(const char *path, time_t secs)
{
    set_mtime(path, time(NULL) - secs, 0);
}

static bool fresh(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && st.st_mtime >= time(NULL) - 60;
}

/* Two trajectories of two checkpoints each, sharing a content: a is kept,
 * b is not. */
static void test_gc(void)
{
    make_dir();
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *ia = crl_ckpt_index_new(), *ib = crl_ckpt_index_new();
    struct crl_err e = CRL_ERR_INIT;
    char a1[CRL_CKPT_ID_MAX], a2[CRL_CKPT_ID_MAX], b1[CRL_CKPT_ID_MAX], b2[CRL_CKPT_ID_MAX];
    char resp[CRL_CKPT_ID_MAX], orphan[CRL_CKPT_ID_MAX];
    mkd(at("a"), 0755);
    wfile(at("a/shared"), "in both trajectories", 0644);
    wfile(at("a/mine"), "only in a's first step", 0644);
    mkd(at("keep_a1"), 0755);
    copy_tree(at("a"), at("keep_a1"));
    int fails = take(s, ia, at("a"), CRL_LAYER_PLAIN, 0, a1, NULL) < 0;
    wfile(at("a/later"), "a's second step", 0644);
    rm(at("a/mine"));
    fails += take(s, ia, at("a"), CRL_LAYER_PLAIN, 0, a2, NULL) < 0;
    mkd(at("b"), 0755);
    wfile(at("b/copy"), "in both trajectories", 0644);
    wfile(at("b/own"), "only in b", 0644);
    fails += take(s, ib, at("b"), CRL_LAYER_PLAIN, 0, b1, NULL) < 0;
    wfile(at("b/own"), "b's second step", 0644);
    fails += take(s, ib, at("b"), CRL_LAYER_PLAIN, 0, b2, NULL) < 0;
    fails += crl_blob_put(s, "a response body", 15, resp, NULL) < 0;
    fails += crl_blob_put(s, "nobody's", 8, orphan, NULL) < 0;
    is_int(fails, 0, "four checkpoints, two more blobs");
    is_int(count_blobs("store"), 11, "11 blobs: 4 manifests, 5 contents (one shared), 2 others");

    struct crl_ckpt_marks *m = crl_ckpt_marks_new();
    uint64_t missing = 0;
    ok(crl_ckpt_mark_checkpoint(s, m, a2, &missing, &e) == 0 &&
           crl_ckpt_mark_blob(m, resp, &e) == 0,
       "mark a's last checkpoint and a response blob: %s", e.msg);
    is_int(missing, 0, "nothing is missing");
    is_int(crl_ckpt_marks_count(m), 6, "6 marked: 2 manifests, 3 contents, the response");
    ok(crl_ckpt_marked(m, a1) && !crl_ckpt_marked(m, b1) && !crl_ckpt_marked(m, orphan),
       "the parent is marked with its child; b and the orphan are not");
    ok(crl_ckpt_mark_blob(m, NULL, &e) == 0 && crl_ckpt_mark_blob(m, "", &e) == 0 &&
           crl_ckpt_mark_checkpoint(s, m, "", NULL, &e) == 0 && crl_ckpt_marks_count(m) == 6,
       "NULL and \"\" mark nothing");
    is_int(crl_ckpt_mark_blob(m, "sha256:xyz", &e), -1, "a malformed blob id");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");
    is_int(crl_ckpt_mark_checkpoint(s, m, "nope", NULL, &e), -1, "a malformed checkpoint id");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");

    struct crl_ckpt_gc_stats gs;
    crl_err_clear(&e);
    ok(crl_ckpt_sweep(s, m, 0, &gs, &e) == 0, "sweep with a grace of 0: %s", e.msg);
    is_int(gs.blobs_removed, 5, "5 removed: b's 2 manifests and 2 own contents, the orphan");
    is_int(gs.blobs_kept, 6, "the 6 marked kept");
    is_int(gs.young_kept, 0, "none kept as young");
    ok(gs.bytes_removed > 0, "bytes removed counted (%llu)", (unsigned long long)gs.bytes_removed);
    is_int(count_blobs("store"), 6, "6 files left in sha256/");
    ok(access(blob_file("store", b1), F_OK) < 0 && access(blob_file("store", b2), F_OK) < 0 &&
           !has_content("store", "only in b") && !has_content("store", "b's second step") &&
           access(blob_file("store", orphan), F_OK) < 0,
       "b's own blobs and the orphan are gone");
    ok(has_content("store", "in both trajectories"), "the content b shared with a stays");
    ok(has_content("store", "only in a's first step"),
       "a content only a's first checkpoint holds stays: the chain was marked");
    check_restore(s, a2, at("a"), NULL, 0, "a's last checkpoint after the sweep");
    check_restore(s, a1, at("keep_a1"), NULL, 0, "a's first checkpoint after the sweep");
    ok(crl_ckpt_check(s, a2, &e) == 0, "check: a is complete: %s", e.msg);
    is_int(crl_ckpt_check(s, b2, &e), -1, "check: b is gone");
    is_int(e.code, CRL_E_NOT_FOUND, "CRL_E_NOT_FOUND");
    ok(crl_ckpt_sweep(s, m, 0, &gs, &e) == 0 && gs.blobs_removed == 0 && gs.blobs_kept == 6,
       "a second sweep removes nothing");
    crl_ckpt_marks_free(m);

    /* Missing blobs are counted; a chain is read once per set. */
    m = crl_ckpt_marks_new();
    missing = 0;
    ok(crl_ckpt_mark_checkpoint(s, m, b2, &missing, &e) == 0, "mark a checkpoint that is gone");
    is_int(missing, 1, "its manifest is counted missing, not fatal");
    char only_a[CRL_CKPT_ID_MAX];
    crl_sha256_buf("only in a's first step", 22, only_a);
    must(unlink(blob_file("store", only_a)) == 0, "unlink", only_a);
    ok(crl_ckpt_mark_checkpoint(s, m, a2, &missing, &e) == 0, "mark a with a content missing");
    is_int(missing, 2, "the content is counted missing too");
    ok(crl_ckpt_marked(m, only_a), "and still marked");
    wfile(blob_file("store", a1), "not a zstd frame", 0600);
    ok(crl_ckpt_mark_checkpoint(s, m, a2, &missing, &e) == 0 && missing == 2,
       "a chain marked already is not read again (its first manifest now damaged)");
    crl_ckpt_marks_free(m);
    m = crl_ckpt_marks_new();
    is_int(crl_ckpt_mark_checkpoint(s, m, a2, NULL, &e), -1, "a corrupt manifest in the chain");
    is_int(e.code, CRL_E_INTERNAL, "is CRL_E_INTERNAL");
    like(e.msg, a1 + 7, "naming its file: %s", e.msg);
    char junk[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "[1,2,3]", 7, junk, NULL);
    is_int(crl_ckpt_mark_checkpoint(s, m, junk, NULL, &e), -1, "a blob that is not a manifest");
    like(e.msg, "not a version 1 manifest", "is refused: %s", e.msg);
    like(e.msg, "store/sha256/", "naming its file");
    crl_ckpt_marks_free(m);

    crl_ckpt_index_free(ia);
    crl_ckpt_index_free(ib);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* The grace: young blobs stay, a put of an existing blob (or a take that
 * finds its contents and manifest stored) makes it young, old tmp/ files
 * go, a blob a sweep held is put back. */
static void test_gc_young(void)
{
    make_dir();
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_marks *none = crl_ckpt_marks_new();
    struct crl_err e = CRL_ERR_INIT;
    struct crl_ckpt_gc_stats gs;
    char young[CRL_CKPT_ID_MAX], old[CRL_CKPT_ID_MAX], again[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "young", 5, young, NULL);
    crl_blob_put(s, "old", 3, old, NULL);
    age(blob_file("store", old), 7200);
    ok(crl_ckpt_sweep(s, none, 3600, &gs, &e) == 0, "sweep with a grace of an hour: %s", e.msg);
    ok(gs.young_kept == 1 && access(blob_file("store", young), F_OK) == 0,
       "an unmarked blob younger than the grace stays");
    ok(gs.blobs_removed == 1 && access(blob_file("store", old), F_OK) < 0,
       "an unmarked blob older than it goes");

    crl_blob_put(s, "old", 3, old, NULL);
    age(blob_file("store", old), 7200);
    struct stat st1, st2;
    must(stat(blob_file("store", old), &st1) == 0, "stat", old);
    ok(crl_blob_put(s, "old", 3, again, &e) == 0 && fresh(blob_file("store", old)),
       "a put of an existing blob makes its mtime now");
    must(stat(blob_file("store", old), &st2) == 0, "stat", old);
    ok(st1.st_ino == st2.st_ino, "without rewriting it");
    ok(crl_ckpt_sweep(s, none, 3600, &gs, &e) == 0 && gs.young_kept == 2 && gs.blobs_removed == 0,
       "so a sweep keeps it as young");

    /* A take storing contents (small and streamed) and a manifest the store
     * has: each made young. */
    mkd(at("src"), 0755);
    wfile(at("src/small"), "a small content", 0644);
    size_t big = (1u << 20) + 99;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 253);
    wfile_len(at("src/big"), data, big, 0644);
    char small_id[CRL_CKPT_ID_MAX], big_id[CRL_CKPT_ID_MAX], id[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "a small content", 15, small_id, NULL);
    crl_blob_put(s, data, big, big_id, NULL);
    free(data);
    age(blob_file("store", small_id), 7200);
    age(blob_file("store", big_id), 7200);
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats cs;
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &cs) == 0 && cs.blobs_new == 1,
       "a take whose contents are stored: only its manifest is new");
    ok(fresh(blob_file("store", small_id)) && fresh(blob_file("store", big_id)),
       "and both contents, found stored, are made young");
    crl_ckpt_index_free(idx);
    age(blob_file("store", id), 7200);
    idx = crl_ckpt_index_new();
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, again, &cs) == 0 && strcmp(id, again) == 0 &&
           cs.blobs_new == 0,
       "the same state again: the same manifest, nothing written");
    ok(fresh(blob_file("store", id)), "and the manifest, found stored, is made young");
    crl_ckpt_index_free(idx);

    /* tmp/: by age too; names in sha256/ no blob has are left alone. */
    wfile(at("store/tmp/old.tmp"), "x", 0600);
    wfile(at("store/tmp/new.tmp"), "x", 0600);
    age(at("store/tmp/old.tmp"), 100);
    wfile(at("store/sha256/README"), "not a blob", 0600);
    age(at("store/sha256/README"), 7200);
    ok(crl_ckpt_sweep(s, none, 50, &gs, &e) == 0, "sweep with a grace of 50 s: %s", e.msg);
    is_int(gs.tmp_removed, 1, "one tmp file removed");
    ok(access(at("store/tmp/old.tmp"), F_OK) < 0 && access(at("store/tmp/new.tmp"), F_OK) == 0,
       "the one older than the grace");
    ok(access(at("store/sha256/README"), F_OK) == 0, "a name that is no blob's stays");

    is_int(crl_ckpt_sweep(s, none, -1, &gs, &e), -1, "a negative grace");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");

    /* A sweep that died holding a blob: the next open puts it back. */
    char held[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "held by a sweep", 15, held, NULL);
    crl_ckpt_store_close(s);
    must(rename(blob_file("store", held), at("store/tmp/%s.0123456789abcdef.gc", held + 7)) == 0,
         "rename", held);
    age(at("store/tmp/%s.0123456789abcdef.gc", held + 7), 7200);
    s = open_store("store");
    ok(access(blob_file("store", held), F_OK) == 0 &&
           access(at("store/tmp/%s.0123456789abcdef.gc", held + 7), F_OK) < 0,
       "a blob a dead sweep held in tmp/ is put back at open");
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, held, &b, 100, &e) == 0 && b.len == 15, "and reads back");
    crl_buf_free(&b);

    crl_ckpt_marks_free(none);
    crl_ckpt_store_close(s);
    remove_dir();
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void random_id(uint64_t *seed, char id[CRL_CKPT_ID_MAX])
{
    int n = snprintf(id, CRL_CKPT_ID_MAX, "sha256:");
    for (int i = 0; i < 4; i++)
        n += snprintf(id + n, (size_t)(CRL_CKPT_ID_MAX - n), "%016llx",
                      (unsigned long long)splitmix(seed));
}

/* A million marks, the all-zero digest, and digests sharing 16 bytes. */
static void test_marks(void)
{
    enum { N = 1000000 };
    struct crl_ckpt_marks *m = crl_ckpt_marks_new();
    char id[CRL_CKPT_ID_MAX];
    char(*ids)[CRL_CKPT_ID_MAX] = malloc(2 * (size_t)N * sizeof(*ids));
    uint64_t seed = 42;
    for (int i = 0; i < 2 * N; i++)
        random_id(&seed, ids[i]);
    int bad = 0;
    unsigned long long t = crl_now_ns();
    for (int i = 0; i < N; i++)
        bad += crl_ckpt_mark_blob(m, ids[i], NULL) < 0;
    unsigned long long add = crl_now_ns() - t;
    is_int(bad, 0, "a million ids marked");
    is_int(crl_ckpt_marks_count(m), N, "a million in the set");
    t = crl_now_ns();
    for (int i = 0; i < N; i++)
        bad += !crl_ckpt_marked(m, ids[i]);
    unsigned long long hit = crl_now_ns() - t;
    t = crl_now_ns();
    for (int i = N; i < 2 * N; i++)
        bad += crl_ckpt_marked(m, ids[i]);
    unsigned long long miss = crl_now_ns() - t;
    is_int(bad, 0, "each of them is marked, and a million others are not");
    diag("a million marks: %.0f ms to add, %.0f ms to find, %.0f ms to miss a million others",
         ms(add), ms(hit), ms(miss));
    free(ids);

    static const char *const malformed[] = {
        "sha256:",
        "sha256:0123",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
        "sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        "sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(malformed); i++) {
        struct crl_err e = CRL_ERR_INIT;
        bad += crl_ckpt_mark_blob(m, malformed[i], &e) != -1 || e.code != CRL_E_INVALID ||
               crl_ckpt_marked(m, malformed[i]);
    }
    is_int(bad, 0, "malformed ids (short, long, upper case, no or another prefix) are refused");
    char zero[CRL_CKPT_ID_MAX];
    snprintf(zero, sizeof(zero), "sha256:%064d", 0);
    ok(!crl_ckpt_marked(m, zero), "the all-zero digest is not marked");
    ok(crl_ckpt_mark_blob(m, zero, NULL) == 0 && crl_ckpt_marked(m, zero) &&
           crl_ckpt_marks_count(m) == N + 1,
       "until it is");
    crl_ckpt_marks_free(m);

    m = crl_ckpt_marks_new();
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof(id), "sha256:%032x%032x", 0xabcdef, i);
        bad += crl_ckpt_mark_blob(m, id, NULL) < 0 || crl_ckpt_mark_blob(m, id, NULL) < 0;
    }
    for (int i = 0; i < 4000; i++) {
        snprintf(id, sizeof(id), "sha256:%032x%032x", 0xabcdef, i);
        bad += crl_ckpt_marked(m, id) != (i < 2000);
    }
    ok(bad == 0 && crl_ckpt_marks_count(m) == 2000,
       "2,000 ids sharing their first 16 bytes, each marked twice: 2,000 in the set");
    crl_ckpt_marks_free(m);
}

static void test_figures(void)
{
    make_dir();
    mkd(at("src"), 0755);
    for (int d = 0; d < 20; d++) {
        mkd(at("src/d%02d", d), 0755);
        for (int f = 0; f < 50; f++) {
            char c[128];
            snprintf(c, sizeof(c), "file %d of dir %d: a small file, as most are\n", f, d);
            wfile(at("src/d%02d/f%02d.txt", d, f), c, 0644);
        }
    }
    usleep(50000); /* ctimes older than the clock tick: keys are trusted */
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id1[CRL_CKPT_ID_MAX], id[CRL_CKPT_ID_MAX];
    unsigned long long t = crl_now_ns();
    int fails = take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id1, &st) < 0;
    unsigned long long first = crl_now_ns() - t;
    diag("1,020 entries: first checkpoint %.2f ms (%llu blobs, %llu bytes stored)", ms(first),
         (unsigned long long)st.blobs_new, (unsigned long long)st.bytes_stored);

    enum { N = 20 };
    unsigned long long best = ~0ull, sum = 0;
    uint64_t read = 0;
    for (int i = 0; i < N; i++) {
        t = crl_now_ns();
        fails += take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0 || strcmp(id, id1) != 0;
        unsigned long long d = crl_now_ns() - t;
        sum += d;
        best = d < best ? d : best;
        read += st.bytes_read;
    }
    is_int(read, 0, "unchanged, %d times: no file content read (fast-path keys)", N);
    unsigned long long bare = 0, bare_best = ~0ull;
    unsigned count = 0;
    for (int i = 0; i < N; i++) {
        t = crl_now_ns();
        int fd = open(at("src"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bare_walk(fd, &count);
        close(fd);
        unsigned long long d = crl_now_ns() - t;
        bare += d;
        bare_best = d < bare_best ? d : bare_best;
    }
    diag("unchanged checkpoint of 1,020 entries: %.3f ms mean, %.3f ms best; the bare walk "
         "(getdents64 + fstatat, %u entries): %.3f ms mean, %.3f ms best: %.2fx",
         ms(sum / N), ms(best), count / N, ms(bare / N), ms(bare_best),
         (double)best / (double)(bare_best ? bare_best : 1));

    /* One small file changed: its blob, the manifest, two fdatasyncs and a
     * directory fsync.  The syncs, measured alone for comparison. */
    unsigned long long one = 0, one_best = ~0ull;
    for (int i = 0; i < N; i++) {
        char c[64];
        snprintf(c, sizeof(c), "changed %d\n", i);
        wfile(at("src/d07/f13.txt"), c, 0644);
        t = crl_now_ns();
        fails += take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0;
        unsigned long long d = crl_now_ns() - t;
        one += d;
        one_best = d < one_best ? d : one_best;
        fails += st.changed != 1 || st.blobs_new != 2;
    }
    unsigned long long sync = 0;
    for (int i = 0; i < N; i++) {
        char c[64], bid[CRL_CKPT_ID_MAX];
        snprintf(c, sizeof(c), "sync figure %d %llu", i, crl_now_ns());
        t = crl_now_ns();
        fails += crl_blob_put(s, c, strlen(c), bid, NULL) < 0;
        snprintf(c, sizeof(c), "sync figure b %d %llu", i, crl_now_ns());
        fails += crl_blob_put(s, c, strlen(c), bid, NULL) < 0;
        fails += crl_ckpt_store_sync(s, NULL) < 0;
        sync += crl_now_ns() - t;
    }
    double change = ms(one_best) - ms(best) - ms(sync / N);
    diag("one small file changed in 1,020 entries: %.3f ms mean, %.3f ms best; two blob puts and "
         "a sync alone: %.3f ms mean; so beyond the unchanged walk and the syncs, the change "
         "costs ~%.3f ms",
         ms(one / N), ms(one_best), ms(sync / N), change > 0 ? change : 0.0);

    /* The same, on a layer of 10 files. */
    mkd(at("small"), 0755);
    for (int f = 0; f < 10; f++)
        wfile(at("small/f%d", f), "small", 0644);
    struct crl_ckpt_index *sidx = crl_ckpt_index_new();
    fails += take(s, sidx, at("small"), CRL_LAYER_PLAIN, 0, id, &st) < 0;
    unsigned long long small = 0;
    for (int i = 0; i < N; i++) {
        char c[64];
        snprintf(c, sizeof(c), "changed %d\n", i);
        wfile(at("small/f3"), c, 0644);
        t = crl_now_ns();
        fails += take(s, sidx, at("small"), CRL_LAYER_PLAIN, 0, id, &st) < 0;
        small += crl_now_ns() - t;
    }
    diag("one small file changed in 10 entries: %.3f ms mean (syncs ~%.3f ms of it)", ms(small / N),
         ms(sync / N));
    crl_ckpt_index_free(sidx);

    int fd = memfd_create("t", MFD_CLOEXEC);
    t = crl_now_ns();
    fails += crl_ckpt_write_tar(s, id1, fd, &st, NULL) < 0;
    unsigned long long tar = crl_now_ns() - t;
    diag("restore stream of 1,020 entries: %.2f ms, %lld bytes of tar", ms(tar),
         (long long)lseek(fd, 0, SEEK_CUR));
    close(fd);

    struct crl_ckpt_index *loaded = NULL;
    t = crl_now_ns();
    fails += crl_ckpt_index_load(s, crl_ckpt_index_id(idx), &loaded, NULL) < 0;
    unsigned long long load = crl_now_ns() - t;
    t = crl_now_ns();
    fails += take(s, loaded, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0 ||
             strcmp(id, crl_ckpt_index_id(idx)) != 0;
    unsigned long long hashed = crl_now_ns() - t;
    diag("index_load of a %d-deep chain: %.2f ms; the next checkpoint, hashing every file: "
         "%.2f ms (%llu bytes read)",
         N + 1, ms(load), ms(hashed), (unsigned long long)st.bytes_read);
    crl_ckpt_index_free(loaded);
    is_int(fails, 0, "every checkpoint of the figures succeeded as expected");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("not root: the tests chown, mknod whiteouts and set trusted.* xattrs");
    TAP_RUN(test_blobs, 60);
    TAP_RUN(test_plain, 60);
    TAP_RUN(test_determinism, 30);
    TAP_RUN(test_overlay, 60);
    TAP_RUN(test_replaced_dir, 30);
    TAP_RUN(test_deep_chain, 120);
    TAP_RUN(test_damage, 30);
    TAP_RUN(test_racy, 30);
    TAP_RUN(test_limits, 60);
    TAP_RUN(test_gc, 60);
    TAP_RUN(test_gc_young, 60);
    TAP_RUN(test_marks, 120);
    TAP_RUN(test_figures, 120);
    return done_testing();
}
