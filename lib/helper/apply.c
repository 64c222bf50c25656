#include "apply.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/path.h"

/* ---- what a stream has made: a set of paths, for opaque markers ---- */

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

/* ---- directories' modes and times, set last ---- */

/* A directory's mode and times wait until nothing more is written into it:
 * its children change its mtime, and a mode without write (or search)
 * permission would keep an unprivileged apply from filling it. */
struct fixup {
    char *path;
    size_t seq; /* the entry's order: of two for one path, the later wins */
    mode_t mode;
    struct timespec ts[2]; /* atime, mtime */
};

struct fixups {
    struct fixup *v;
    size_t n, cap;
};

static void fixups_free(struct fixups *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->v[i].path);
    free(f->v);
}

/* Children before their parents (a path sorts after its prefix), and of
 * two fixups of one path the later entry's last. */
static int fixup_order(const void *a, const void *b)
{
    const struct fixup *x = a, *y = b;
    int c = strcmp(y->path, x->path);
    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* ---- one apply ---- */

struct ctx {
    const struct crl_apply *o;
    struct archive *a;
    struct crl_apply_stats *st;
    struct crl_err *err;
    const struct crl_path_rules *names;
    unsigned long long resolve;
    const char *noun;     /* what the tree is called in messages */
    const char *name;     /* the entry's name in the tar */
    char path[PATH_MAX];  /* ... normalised: "a/b", the root "" */
    struct path_set made; /* PERFORM: what this stream has made */
    struct fixups dirs;
    size_t seq;
};

/* An entry as a message names it: a restore by its path in the tree
 * ("restoring /etc/x"; `path` may be a whiteout's victim), a layer by its
 * name in the tar ("layer 0: entry ./etc/x"), as their callers always
 * have. */
static const char *subject(const struct ctx *c, const char *path, char *buf, size_t cap)
{
    if (c->o->mode == CRL_APPLY_PERFORM)
        snprintf(buf, cap, "%s /%s", c->o->what, path);
    else
        snprintf(buf, cap, "%s: entry %s", c->o->what, c->name ? c->name : "(unnamed)");
    return buf;
}

static int refuse(struct ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(struct ctx *c, const char *path, const char *fmt, ...)
{
    char subj[PATH_MAX + 64], why[PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return crl_err_set(c->err, CRL_E_INVALID, "%s: %s", subject(c, path, subj, sizeof(subj)), why);
}

/* A system call on `path` failed with `e` (`what`: "" or " (a whiteout)"). */
static int sys_failed(struct ctx *c, int e, const char *path, const char *what)
{
    char subj[PATH_MAX + 64];
    return crl_err_sys(c->err, e, "%s%s", subject(c, path, subj, sizeof(subj)), what);
}

/* A resolution failed with `e` because a symlink (or a file) stood where
 * a directory should be, or a mount was crossed where none may be: a path
 * this apply does not follow. */
static bool not_followed(int e)
{
    return e == ELOOP || e == EXDEV || e == ENOTDIR;
}

/* Resolving `path` failed with `e`: refused if not_followed, else the
 * system call's error. */
static int resolve_failed(struct ctx *c, int e, const char *path, const char *what)
{
    if (not_followed(e)) {
        char subj[PATH_MAX + 64];
        return crl_err_set(c->err, CRL_E_INVALID,
                           "%s%s: a path through a symlink or a file: refused",
                           subject(c, path, subj, sizeof(subj)), what);
    }
    return sys_failed(c, e, path, what);
}

/* `rel` ("" for the tree itself) opened with `flags`, beneath the tree and
 * by c->resolve; -1 with errno. */
static int open_in_tree(const struct ctx *c, const char *rel, int flags)
{
    return crl_path_fd(crl_path_openat2(c->o->root, rel[0] ? rel : ".", flags, 0, c->resolve));
}

/* The directory that holds `path` ("a/b/c": "a/b"), as an O_PATH fd, its
 * missing components made (mode 0755, as tar does) when `make`; *base
 * points at "c".  -1 with errno. */
static int open_parent(const struct ctx *c, const char *path, const char **base, bool make)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 0, path);
    int fd = open_in_tree(c, dir, O_PATH | O_DIRECTORY);
    if (fd >= 0 || errno != ENOENT || !make)
        return fd;
    /* component by component, each made in its parent's fd: a symlink
     * raced in meanwhile is never followed */
    fd = open_in_tree(c, "", O_PATH | O_DIRECTORY);
    for (char *p = dir; fd >= 0 && *p;) {
        char *end = strchrnul(p, '/');
        char keep = *end;
        *end = 0;
        if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        int sub = crl_path_fd(crl_path_openat2(fd, p, O_PATH | O_DIRECTORY, 0, c->resolve));
        int e = errno;
        close(fd);
        errno = e;
        fd = sub;
        *end = keep;
        p = keep ? end + 1 : end;
    }
    return fd;
}

/* Make room for an entry at base: whatever is there goes (a directory
 * with all below it), but a directory stays for a directory; *is_dir says
 * it did. */
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

/* ---- whiteouts ---- */

/* PERFORM, D/.wh.NAME: D/NAME goes, whatever it is. */
static int remove_whiteout(struct ctx *c, const char *dir, const char *target)
{
    char victim[PATH_MAX + NAME_MAX + 2];
    snprintf(victim, sizeof(victim), "%s%s%s", dir, dir[0] ? "/" : "", target);
    cleanup_close int dfd = open_in_tree(c, dir, O_PATH | O_DIRECTORY);
    if (dfd < 0 && errno != ENOENT)
        return resolve_failed(c, errno, victim, " (a whiteout)");
    if (dfd >= 0 && crl_rm_rf_at(dfd, target) < 0)
        return resolve_failed(c, errno, victim, " (a whiteout)");
    return 0;
}

/* PERFORM, D/.wh..wh..opq: of what D holds, only what this stream made
 * stays.  Names first, removals after: no readdir over a changing
 * directory. */
static int empty_opaque(struct ctx *c, const char *dir)
{
    static const char what[] = " (emptying an opaque directory)";
    if (!dir[0])
        return refuse(c, c->path, "the root cannot be made opaque");
    int dfd = open_in_tree(c, dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        return errno == ENOENT ? 0 : resolve_failed(c, errno, dir, what);
    cleanup_close int keep = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = keep >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        close(dfd);
        return sys_failed(c, e, dir, what);
    }
    char **doomed = NULL;
    size_t n = 0, cap = 0;
    int e = 0;
    char full[PATH_MAX + NAME_MAX + 2];
    while (!e) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            e = errno;
            break;
        }
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(full, sizeof(full), "%s/%s", dir, de->d_name);
        if (set_has(&c->made, full))
            continue;
        if (n == cap) {
            char **v = realloc(doomed, (cap = cap ? cap * 2 : 16) * sizeof(*v));
            if (!v) {
                e = ENOMEM;
                break;
            }
            doomed = v;
        }
        if (!(doomed[n] = strdup(de->d_name)))
            e = ENOMEM;
        else
            n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        if (!e && crl_rm_rf_at(keep, doomed[i]) < 0)
            e = errno;
        free(doomed[i]);
    }
    free(doomed);
    return e ? resolve_failed(c, e, dir, what) : 0;
}

/* OVERLAY, D/.wh.NAME: NAME as overlayfs records a deletion. */
static int record_whiteout(struct ctx *c, const char *target)
{
    const char *base;
    cleanup_close int dir = open_parent(c, c->path, &base, true);
    bool is_dir;
    if (dir < 0)
        return resolve_failed(c, errno, c->path, " (a whiteout)");
    if (clear_slot(dir, target, false, &is_dir) < 0 ||
        mknodat(dir, target, S_IFCHR | 0, makedev(0, 0)) < 0)
        return sys_failed(c, errno, c->path, " (a whiteout)");
    return 0;
}

/* OVERLAY, D/.wh..wh..opq: D's opaque xattrs, trusted.* for an overlay
 * the host or a guest mounts (unless CRL_APPLY_USER_OPAQUE), user.* for one
 * mounted in a user namespace. */
static int record_opaque(struct ctx *c)
{
    static const char what[] = " (marking its directory opaque)";
    const char *base;
    cleanup_close int dir = open_parent(c, c->path, &base, true);
    if (dir < 0)
        return resolve_failed(c, errno, c->path, what);
    cleanup_close int d =
        crl_path_fd(crl_path_openat2(dir, ".", O_RDONLY | O_DIRECTORY, 0, c->resolve));
    if (d < 0 ||
        (!(c->o->flags & CRL_APPLY_USER_OPAQUE) &&
         fsetxattr(d, "trusted.overlay.opaque", "y", 1, 0) < 0) ||
        fsetxattr(d, "user.overlay.opaque", "y", 1, 0) < 0)
        return sys_failed(c, errno, c->path, what);
    return 0;
}

static int whiteout(struct ctx *c, const char *dir, const char *target)
{
    bool perform = c->o->mode == CRL_APPLY_PERFORM;
    if (strcmp(target, ".wh..opq") == 0)
        return perform ? empty_opaque(c, dir) : record_opaque(c);
    /* .wh..wh.* are overlayfs' (and aufs') own: a change set has none */
    if (!target[0] || !strcmp(target, ".") || !strcmp(target, "..") ||
        (perform && crl_path_is_whiteout(target, strlen(target))))
        return refuse(c, c->path, "not a whiteout this format has");
    return perform ? remove_whiteout(c, dir, target) : record_whiteout(c, target);
}

/* ---- entries ---- */

static bool xattr_kept(unsigned flags, const char *name)
{
    if (strncmp(name, "user.", 5) == 0) /* not overlayfs' own, which an overlay refuses */
        return strncmp(name, "user.overlay.", 13) != 0;
    return (flags & CRL_APPLY_CAPS) && strcmp(name, "security.capability") == 0;
}

static int set_xattrs(const struct ctx *c, int fd, struct archive_entry *e)
{
    const char *name;
    const void *value;
    size_t size;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
        if (xattr_kept(c->o->flags, name) && fsetxattr(fd, name, value, size, 0) < 0 &&
            (errno != ENOTSUP || (c->o->flags & CRL_APPLY_EXACT)))
            return -1;
    return 0;
}

/* The entry's atime (its mtime when it has none) and mtime. */
static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
    ts[1] = (struct timespec){archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
    ts[0] = ts[1];
    if (archive_entry_atime_is_set(e))
        ts[0] = (struct timespec){archive_entry_atime(e), archive_entry_atime_nsec(e)};
}

/* Owner, then xattrs (a chown drops security.capability; a read-only mode
 * would keep an unprivileged owner from setting user.*), then the mode
 * (after the chown, which clears setuid) and times, which a directory
 * leaves for its fixup. */
static int set_meta(const struct ctx *c, int fd, struct archive_entry *e, bool dir)
{
    if ((c->o->flags & CRL_APPLY_OWNERS) &&
        fchown(fd, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e)) < 0)
        return -1;
    if (set_xattrs(c, fd, e) < 0)
        return -1;
    if (dir)
        return 0;
    struct timespec ts[2];
    entry_times(e, ts);
    if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
        return -1;
    return futimens(fd, ts);
}

/* A file's data, holes left as holes; -2 if the archive failed. */
static int write_data(struct ctx *c, int fd, int64_t size)
{
    const void *buf;
    size_t len;
    la_int64_t off;
    int r;
    while ((r = archive_read_data_block(c->a, &buf, &len, &off)) == ARCHIVE_OK) {
        const char *p = buf;
        while (len) {
            ssize_t w = pwrite(fd, p, len, off);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return -1;
            }
            p += w, len -= (size_t)w, off += w;
            c->st->bytes += (uint64_t)w;
        }
    }
    if (r != ARCHIVE_EOF)
        return -2;
    return ftruncate(fd, size); /* a sparse tail */
}

static int make_file(struct ctx *c, int dir, const char *base, struct archive_entry *e)
{
    cleanup_close int fd = crl_path_fd(
        crl_path_openat2(dir, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600, c->resolve));
    if (fd < 0)
        return resolve_failed(c, errno, c->path, "");
    int r = write_data(c, fd, archive_entry_size(e));
    if (r == -2) {
        const char *s = archive_error_string(c->a);
        return refuse(c, c->path, "reading the archive: %s", s ? s : "truncated");
    }
    if (r < 0 || set_meta(c, fd, e, false) < 0)
        return sys_failed(c, errno, c->path, "");
    return 0;
}

static int make_dir(struct ctx *c, int dir, const char *base, bool exists, struct archive_entry *e)
{
    if (!exists && mkdirat(dir, base, 0700) < 0)
        return sys_failed(c, errno, c->path, "");
    cleanup_close int fd =
        crl_path_fd(crl_path_openat2(dir, base, O_RDONLY | O_DIRECTORY, 0, c->resolve));
    if (fd < 0)
        return resolve_failed(c, errno, c->path, "");
    if (set_meta(c, fd, e, true) < 0)
        return sys_failed(c, errno, c->path, "");
    struct fixups *f = &c->dirs;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 32;
        struct fixup *v = realloc(f->v, cap * sizeof(*v));
        if (!v)
            return sys_failed(c, ENOMEM, c->path, "");
        f->v = v;
        f->cap = cap;
    }
    struct fixup *x = &f->v[f->n];
    if (!(x->path = strdup(c->path)))
        return sys_failed(c, ENOMEM, c->path, "");
    x->seq = c->seq;
    x->mode = archive_entry_perm(e) & 07777;
    entry_times(e, x->ts);
    f->n++;
    return 0;
}

static int make_symlink(struct ctx *c, int dir, const char *base, struct archive_entry *e)
{
    const char *target = archive_entry_symlink(e);
    if (!target)
        return refuse(c, c->path, "a symlink with no target: refused");
    struct timespec ts[2];
    entry_times(e, ts);
    if (symlinkat(target, dir, base) < 0 ||
        ((c->o->flags & CRL_APPLY_OWNERS) &&
         fchownat(dir, base, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
                  AT_SYMLINK_NOFOLLOW) < 0) ||
        utimensat(dir, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
        return sys_failed(c, errno, c->path, "");
    return 0;
}

/* A device node or a fifo (CRL_APPLY_DEVICES): inert, as layers are
 * mounted nodev.  No fchmod on an O_PATH fd, so through /proc/self/fd. */
static int make_node(struct ctx *c, int dir, const char *base, struct archive_entry *e)
{
    mode_t type = archive_entry_filetype(e);
    dev_t dev = type == AE_IFIFO ? 0 : archive_entry_rdev(e);
    if (mknodat(dir, base, type | 0600, dev) < 0)
        return sys_failed(c, errno, c->path, "");
    cleanup_close int fd =
        crl_path_fd(crl_path_openat2(dir, base, O_PATH | O_NOFOLLOW, 0, c->resolve));
    if (fd < 0)
        return resolve_failed(c, errno, c->path, "");
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    struct timespec ts[2];
    entry_times(e, ts);
    if (((c->o->flags & CRL_APPLY_OWNERS) &&
         fchownat(fd, "", (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e), AT_EMPTY_PATH) <
             0) ||
        chmod(p, archive_entry_perm(e) & 07777) < 0 || utimensat(AT_FDCWD, p, ts, 0) < 0)
        return sys_failed(c, errno, c->path, "");
    return 0;
}

/* A hard link to `hard`, which names nothing in the tree (yet). */
static int link_target_missing(struct ctx *c, const char *hard)
{
    return refuse(c, c->path, "a hard link to %s, which is not in this %s: refused", hard, c->noun);
}

/* A hard link's target, checked before anything is changed: the
 * directory that holds it (an O_PATH fd, *tbase its name there), or -1
 * with *err set. */
static int open_link_target(struct ctx *c, const char *hard, char *target, size_t cap,
                            const char **tbase)
{
    /* the root is no file to link to */
    if (crl_path_normalise(hard, strlen(hard), c->names, target, cap) <= 0)
        return refuse(c, c->path, "a hard link out of the %s, to %s outside it: refused", c->noun,
                      hard);
    int tdir = open_parent(c, target, tbase, false);
    if (tdir < 0 && errno == ENOENT)
        return link_target_missing(c, hard);
    if (tdir < 0 && not_followed(errno))
        return refuse(c, c->path, "a hard link to %s through a symlink or a file: refused", hard);
    if (tdir < 0)
        return sys_failed(c, errno, c->path, "");
    return tdir;
}

static int hard_link(struct ctx *c, int dir, const char *base, int tdir, const char *tbase,
                     const char *hard)
{
    if (linkat(tdir, tbase, dir, base, 0) == 0)
        return 0;
    if (errno == ENOENT)
        return link_target_missing(c, hard);
    return sys_failed(c, errno, c->path, "");
}

/* Whether an entry of this type is made (1), skipped (0) or refused (-1). */
static int type_kept(const struct ctx *c, struct archive_entry *e)
{
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFREG || type == AE_IFDIR || type == AE_IFLNK)
        return 1;
    if (!(c->o->flags & CRL_APPLY_DEVICES))
        return -1;
    if (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFIFO)
        return 1;
    return 0; /* sockets: nothing to keep */
}

/* An entry that is neither a whiteout nor the root. */
static int make_entry(struct ctx *c, struct archive_entry *e)
{
    const char *hard = archive_entry_hardlink(e);
    mode_t type = archive_entry_filetype(e);
    int kept = hard ? 1 : type_kept(c, e);
    if (kept < 0)
        return refuse(c, c->path, "device nodes, fifos and sockets are never restored");
    if (kept == 0)
        return 0;
    if (!hard && type == AE_IFCHR && archive_entry_rdev(e) == makedev(0, 0) &&
        c->o->mode == CRL_APPLY_OVERLAY)
        return refuse(c, c->path,
                      "a 0/0 character device, which overlayfs would read as a whiteout: refused");
    char target[PATH_MAX];
    const char *base, *tbase = NULL;
    cleanup_close int tdir = hard ? open_link_target(c, hard, target, sizeof(target), &tbase) : -1;
    if (hard && tdir < 0)
        return -1;
    cleanup_close int dir = open_parent(c, c->path, &base, true);
    if (dir < 0)
        return resolve_failed(c, errno, c->path, "");
    bool is_dir;
    if (clear_slot(dir, base, type == AE_IFDIR && !hard, &is_dir) < 0)
        return resolve_failed(c, errno, c->path, "");
    int r;
    if (hard)
        r = hard_link(c, dir, base, tdir, tbase, hard);
    else if (type == AE_IFREG)
        r = make_file(c, dir, base, e);
    else if (type == AE_IFDIR)
        r = make_dir(c, dir, base, is_dir, e);
    else if (type == AE_IFLNK)
        r = make_symlink(c, dir, base, e);
    else
        r = make_node(c, dir, base, e);
    if (r < 0)
        return -1;
    if (c->o->mode == CRL_APPLY_PERFORM && set_add(&c->made, c->path) < 0)
        return sys_failed(c, ENOMEM, c->path, "");
    c->st->entries++;
    return 0;
}

static int apply_entry(struct ctx *c, struct archive_entry *e)
{
    c->name = archive_entry_pathname(e);
    int r = crl_path_normalise(c->name, c->name ? strlen(c->name) : 0, c->names, c->path,
                               sizeof(c->path));
    if (r < 0) {
        const char *shown = !c->name ? "" : c->name[0] == '/' ? c->name + 1 : c->name;
        return refuse(c, shown, "%s: refused", crl_path_why(r));
    }
    const char *slash = strrchr(c->path, '/');
    const char *base = slash ? slash + 1 : c->path;
    if (crl_path_is_whiteout(base, strlen(base))) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - c->path) : 0, c->path);
        if (whiteout(c, dir, base + 4) < 0)
            return -1;
        c->st->entries++;
        return 0;
    }
    if (!c->path[0]) /* the root itself: never changed */
        return 0;
    return make_entry(c, e);
}

/* Directories' modes and times, deepest first.  One that a later entry
 * removed or replaced (gone, now a file or a symlink) has none to set. */
static int fix_dirs(struct ctx *c)
{
    struct fixups *f = &c->dirs;
    if (f->n)
        qsort(f->v, f->n, sizeof(*f->v), fixup_order);
    for (size_t i = 0; i < f->n; i++) {
        c->name = f->v[i].path;
        cleanup_close int fd = open_in_tree(c, f->v[i].path, O_RDONLY | O_DIRECTORY);
        if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP))
            continue;
        if (fd < 0)
            return resolve_failed(c, errno, f->v[i].path, ": setting its mode and times");
        if (fchmod(fd, f->v[i].mode) < 0 || futimens(fd, f->v[i].ts) < 0)
            return sys_failed(c, errno, f->v[i].path, ": setting its mode and times");
    }
    return 0;
}

int crl_apply_archive(struct archive *a, const struct crl_apply *o, struct crl_apply_stats *st,
                      struct crl_err *err)
{
    struct ctx c = {.o = o, .a = a, .st = st, .err = err};
    bool perform = o->mode == CRL_APPLY_PERFORM;
    c.names = (o->flags & CRL_APPLY_EMPTY_ROOT) ? CRL_PATH_RULES_LAYER : CRL_PATH_RULES_MEMBER;
    c.noun = perform ? "tree" : "layer";
    /* Beneath the tree, through no symlink at all (one planted by the
     * sandbox to lead a restore out included): each component is the
     * tree's own directory.  A change set is applied over a running
     * sandbox's root, whose /dev or volumes are mounts it may name (a
     * directory's times, an opaque marker), so mounts are crossed there;
     * a layer fills a directory the store just made, with nothing mounted
     * below it, so a mount crossed there is refused too. */
    c.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    if (!perform)
        c.resolve |= RESOLVE_NO_XDEV;
    int ret = 0, r;
    uint64_t seen = 0;
    struct archive_entry *e;
    while ((r = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
        if (r < ARCHIVE_WARN) {
            const char *s = archive_error_string(a);
            ret = crl_err_set(err, CRL_E_INVALID,
                              "%s: not a valid tar archive after %llu entries: %s", o->what,
                              (unsigned long long)st->entries, s ? s : "unreadable");
            break;
        }
        if (o->max_entries && ++seen > o->max_entries) { /* the root counts here */
            ret = crl_err_set(err, CRL_E_TOO_LARGE, "%s: more than %llu entries", o->what,
                              (unsigned long long)o->max_entries);
            break;
        }
        c.seq++;
        if ((ret = apply_entry(&c, e)) < 0)
            break;
        archive_read_data_skip(a);
    }
    if (ret == 0)
        ret = fix_dirs(&c);
    set_free(&c.made);
    fixups_free(&c.dirs);
    return ret;
}
