#include "fsop.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/path.h"
#include "stream.h"

/* Inside the tree, whatever its symlinks say. */
#define IN_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

static int fail(int code, char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int code, char *msg, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return code;
}

static int status_of(int e)
{
    switch (e) {
    case ENOENT: return CRL_STREAM_NOENT;
    case ENOTDIR: return CRL_STREAM_NOTDIR;
    case ENOSPC:
    case EDQUOT: return CRL_STREAM_NOSPACE;
    case EACCES:
    case EPERM:
    case EROFS: return CRL_STREAM_DENIED;
    case EISDIR: return CRL_STREAM_ISDIR;
    case EEXIST:
    case ENOTEMPTY:
    case EINVAL:
    case EBUSY:
    case EXDEV:
    case ELOOP:
    case ENAMETOOLONG: return CRL_STREAM_BAD_INPUT;
    default: return CRL_STREAM_FAILED;
    }
}

static int sys_fail(int e, const char *path, char *msg, size_t cap)
{
    return fail(status_of(e), msg, cap, "%s: %s", path, strerror(e));
}

/* A request's path, normalised into buf (PATH_MAX). */
static int get_path(json_t *req, const char *key, char *buf, char *msg, size_t cap)
{
    const char *p = json_string_value(json_object_get(req, key));
    if (!p)
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "%s is required (an absolute path)", key);
    int n = crl_path_normalise(p, strlen(p), CRL_PATH_RULES_API, buf, PATH_MAX);
    if (n < 0)
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "%s '%.200s': %s", key, p, crl_path_why(n));
    return CRL_STREAM_OK;
}

/* The parent directory of a normalised path (opened in the tree) and its
 * last component; the root itself has none (EINVAL). */
static int open_parent(int root, const char *path, const char **name)
{
    const char *slash = strrchr(path, '/');
    if (!slash || !slash[1]) {
        errno = EINVAL;
        return -1;
    }
    char dir[PATH_MAX];
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = 0;
    *name = slash + 1;
    return crl_path_fd(crl_path_openat2(root, dir, O_PATH | O_DIRECTORY, 0, IN_ROOT));
}

static const char *type_of(mode_t m)
{
    return S_ISREG(m)                 ? "file"
           : S_ISDIR(m)               ? "dir"
           : S_ISLNK(m)               ? "symlink"
           : S_ISFIFO(m)              ? "fifo"
           : S_ISSOCK(m)              ? "socket"
           : S_ISCHR(m) || S_ISBLK(m) ? "device"
                                      : "other";
}

static json_t *time_json(const struct timespec *ts)
{
    char buf[40];
    struct tm tm;
    time_t t = ts->tv_sec;
    gmtime_r(&t, &tm);
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03ldZ", ts->tv_nsec / 1000000);
    return json_string(buf);
}

/* An entry: `name` in the directory dfd, at `path` in the tree. */
static json_t *entry_json(int dfd, const char *name, const char *path, const struct stat *st)
{
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", (unsigned)(st->st_mode & 07777));
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:o}", "path", path, "name", name,
                          "type", type_of(st->st_mode), "size", (json_int_t)st->st_size, "mode",
                          mode, "uid", (json_int_t)st->st_uid, "gid", (json_int_t)st->st_gid,
                          "mtime", time_json(&st->st_mtim));
    if (o && S_ISLNK(st->st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
        if (n >= 0) {
            target[n] = 0;
            json_object_set_new(o, "symlink_target", json_stringn_nocheck(target, (size_t)n));
            if (!json_is_string(json_object_get(o, "symlink_target")))
                json_object_del(o, "symlink_target");
        }
    }
    return o;
}

/* The entry of a path itself (a symlink there is not followed). */
static json_t *stat_path(int root, const char *path, int *err)
{
    struct stat st;
    const char *name;
    if (strcmp(path, "/") == 0) {
        if (fstat(root, &st) < 0) {
            *err = errno;
            return NULL;
        }
        return entry_json(root, "", "/", &st);
    }
    cleanup_close int dfd = open_parent(root, path, &name);
    if (dfd < 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        *err = errno;
        return NULL;
    }
    return entry_json(dfd, name, path, &st);
}

static int write_json(int out, json_t *o, char *msg, size_t cap)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return fail(CRL_STREAM_FAILED, msg, cap, "out of memory for the answer");
    int r = crl_write_full(out, s, strlen(s));
    free(s);
    return r < 0 ? fail(CRL_STREAM_FAILED, msg, cap, "writing the answer: %s", strerror(errno))
                 : CRL_STREAM_OK;
}

/* ---- list ---- */

struct lister {
    json_t *entries;
    size_t n;
    bool truncated;
};

static int list_dir(struct lister *l, int dfd, const char *path, unsigned depth)
{
    int dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (l->n >= CRL_FS_MAX_ENTRIES) {
            l->truncated = true;
            break;
        }
        char child[PATH_MAX];
        if (snprintf(child, sizeof(child), "%s/%s", strcmp(path, "/") ? path : "", de->d_name) >=
            (int)sizeof(child))
            continue;
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        json_array_append_new(l->entries, entry_json(dfd, de->d_name, child, &st));
        l->n++;
        if (depth > 1 && S_ISDIR(st.st_mode)) {
            /* beneath this directory, never through a symlink */
            cleanup_close int sub =
                openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                list_dir(l, sub, child, depth - 1);
        }
    }
    closedir(d);
    return 0;
}

static int op_list(int root, json_t *req, const char *path, int out, char *msg, size_t cap)
{
    json_int_t depth = 1;
    json_t *d = json_object_get(req, "depth");
    if (d &&
        (!json_is_integer(d) || (depth = json_integer_value(d)) < 1 || depth > CRL_FS_MAX_DEPTH))
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "depth must be 1-%d", CRL_FS_MAX_DEPTH);
    cleanup_close int dfd =
        crl_path_fd(crl_path_openat2(root, path, O_RDONLY | O_DIRECTORY, 0, IN_ROOT));
    if (dfd < 0)
        return sys_fail(errno, path, msg, cap);
    struct lister l = {.entries = json_array()};
    if (!l.entries || list_dir(&l, dfd, path, (unsigned)depth) < 0) {
        json_decref(l.entries);
        return sys_fail(errno ? errno : ENOMEM, path, msg, cap);
    }
    return write_json(
        out,
        json_pack("{s:s, s:o, s:b}", "path", path, "entries", l.entries, "truncated", l.truncated),
        msg, cap);
}

/* ---- mkdir, move, remove ---- */

static int make_dir(int root, const char *path, mode_t mode, bool parents)
{
    const char *name;
    int dfd = open_parent(root, path, &name);
    if (dfd < 0 && errno == ENOENT && parents) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", path);
        char *slash = strrchr(parent, '/');
        *(slash == parent ? slash + 1 : slash) = 0;
        if (make_dir(root, parent, mode, true) < 0)
            return -1;
        dfd = open_parent(root, path, &name);
    }
    if (dfd < 0)
        return -1;
    int r = mkdirat(dfd, name, mode);
    int e = errno;
    if (r < 0 && e == EEXIST && parents) {
        struct stat st;
        if (fstatat(dfd, name, &st, 0) == 0 && S_ISDIR(st.st_mode))
            r = 0;
    }
    close(dfd);
    errno = e;
    return r;
}

static int op_mkdir(int root, json_t *req, const char *path, int out, char *msg, size_t cap)
{
    json_int_t mode = 0755;
    json_t *m = json_object_get(req, "mode");
    if (m && (!json_is_integer(m) || (mode = json_integer_value(m)) < 0 || mode > 07777))
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "mode must be a number 0-07777");
    if (strcmp(path, "/") != 0 &&
        make_dir(root, path, (mode_t)mode, json_is_true(json_object_get(req, "parents"))) < 0)
        return sys_fail(errno, path, msg, cap);
    int e = 0;
    json_t *o = stat_path(root, path, &e);
    return o ? write_json(out, o, msg, cap) : sys_fail(e, path, msg, cap);
}

static int op_move(int root, json_t *req, const char *from, int out, char *msg, size_t cap)
{
    char to[PATH_MAX];
    int r = get_path(req, "to", to, msg, cap);
    if (r != CRL_STREAM_OK)
        return r;
    const char *fname, *tname;
    cleanup_close int fd = open_parent(root, from, &fname);
    if (fd < 0)
        return sys_fail(errno, from, msg, cap);
    cleanup_close int td = open_parent(root, to, &tname);
    if (td < 0)
        return sys_fail(errno, to, msg, cap);
    unsigned flags = json_is_true(json_object_get(req, "overwrite")) ? 0 : RENAME_NOREPLACE;
    if (renameat2(fd, fname, td, tname, flags) < 0)
        return errno == EEXIST ? fail(CRL_STREAM_BAD_INPUT, msg, cap,
                                      "%s exists (overwrite: true replaces it)", to)
                               : sys_fail(errno, from, msg, cap);
    int e = 0;
    json_t *o = stat_path(root, to, &e);
    return o ? write_json(out, o, msg, cap) : sys_fail(e, to, msg, cap);
}

/* Remove what is under dfd's entry `name`, a directory's contents first,
 * never through a symlink; counts what it removed. */
static int remove_tree(int dfd, const char *name, unsigned long *n, unsigned depth)
{
    if (unlinkat(dfd, name, 0) == 0) {
        (*n)++;
        return 0;
    }
    if ((errno != EISDIR && errno != EPERM) || depth > 4096)
        return -1;
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = sub >= 0 ? fdopendir(sub) : NULL;
    if (!d) {
        if (sub >= 0)
            close(sub);
        return -1;
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            r = remove_tree(dirfd(d), de->d_name, n, depth + 1);
    closedir(d);
    if (r == 0 && unlinkat(dfd, name, AT_REMOVEDIR) < 0)
        return -1;
    (*n)++;
    return r;
}

static int op_remove(int root, json_t *req, const char *path, int out, char *msg, size_t cap)
{
    const char *name;
    if (strcmp(path, "/") == 0)
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "/ cannot be removed");
    cleanup_close int dfd = open_parent(root, path, &name);
    if (dfd < 0)
        return sys_fail(errno, path, msg, cap);
    unsigned long n = 0;
    int r;
    if (json_is_true(json_object_get(req, "recursive"))) {
        r = remove_tree(dfd, name, &n, 0);
    } else {
        r = unlinkat(dfd, name, 0);
        if (r < 0 && (errno == EISDIR || errno == EPERM))
            r = unlinkat(dfd, name, AT_REMOVEDIR);
        n = r == 0;
    }
    if (r < 0)
        return errno == ENOTEMPTY ? fail(CRL_STREAM_BAD_INPUT, msg, cap,
                                         "%s is a directory that is not empty (recursive: true "
                                         "removes it all)",
                                         path)
                                  : sys_fail(errno, path, msg, cap);
    return write_json(out, json_pack("{s:s, s:I}", "path", path, "removed", (json_int_t)n), msg,
                      cap);
}

int crl_fsop_run(int root, const char *request, int out, char *msg, size_t cap)
{
    json_error_t je;
    json_auto_t *req = json_loadb(request, strnlen(request, CRL_FS_MAX_REQUEST), 0, &je);
    const char *op = json_string_value(json_object_get(req, "op"));
    char path[PATH_MAX];
    if (!req || !op)
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "not a request: %s", req ? "no op" : je.text);
    int r = get_path(req, "path", path, msg, cap);
    if (r != CRL_STREAM_OK)
        return r;
    if (strcmp(op, "stat") == 0) {
        int e = 0;
        json_t *o = stat_path(root, path, &e);
        return o ? write_json(out, o, msg, cap) : sys_fail(e, path, msg, cap);
    }
    if (strcmp(op, "list") == 0)
        return op_list(root, req, path, out, msg, cap);
    if (strcmp(op, "mkdir") == 0)
        return op_mkdir(root, req, path, out, msg, cap);
    if (strcmp(op, "move") == 0)
        return op_move(root, req, path, out, msg, cap);
    if (strcmp(op, "remove") == 0)
        return op_remove(root, req, path, out, msg, cap);
    return fail(CRL_STREAM_BAD_INPUT, msg, cap, "unknown op '%.40s'", op);
}

/* ---- watch ---- */

struct watcher {
    int ifd, root, out;
    bool recursive;
    char **paths; /* by watch descriptor */
    int cap;
    int n;
    char moved_from[PATH_MAX], moved_dir[PATH_MAX]; /* a rename's first half, held */
    uint32_t cookie;
    bool pending;
};

/* A watch on the directory open at fd: by its /proc/self/fd link, or where
 * /proc is not our pid namespace's (a helper in a sandbox's mount
 * namespace), as our working directory for a moment. */
static int watch_fd(int ifd, int fd)
{
    /* Followed: the link names the directory we opened, inside the tree. */
    const uint32_t mask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                          IN_ATTRIB | IN_DELETE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    int wd = inotify_add_watch(ifd, proc, mask);
    if (wd >= 0 || errno != ENOENT)
        return wd;
    int here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (here < 0)
        return -1;
    wd = fchdir(fd) == 0 ? inotify_add_watch(ifd, ".", mask) : -1;
    int e = errno;
    if (fchdir(here) < 0)
        e = errno;
    close(here);
    errno = e;
    return wd;
}

static int emit(struct watcher *w, json_t *o);

/* A directory made inside a recursive watch is watched from when its
 * create is seen: what was made in it before is told as created then (a
 * create may so come twice, never not at all). */
static int add_watch(struct watcher *w, const char *path, bool announce)
{
    cleanup_close int fd =
        crl_path_fd(crl_path_openat2(w->root, path, O_PATH | O_DIRECTORY, 0, IN_ROOT));
    if (fd < 0)
        return -1;
    if (w->n >= CRL_FS_MAX_WATCHES) {
        errno = ENOSPC;
        return -1;
    }
    int wd = watch_fd(w->ifd, fd);
    if (wd < 0)
        return -1;
    if (wd >= w->cap) {
        int ncap = wd + 64;
        char **np = realloc(w->paths, (size_t)ncap * sizeof(char *));
        if (!np)
            return -1;
        memset(np + w->cap, 0, (size_t)(ncap - w->cap) * sizeof(char *));
        w->paths = np;
        w->cap = ncap;
    }
    free(w->paths[wd]);
    w->paths[wd] = strdup(path);
    w->n++;
    if (!w->recursive)
        return 0;
    int dfd = crl_path_fd(crl_path_openat2(w->root, path, O_RDONLY | O_DIRECTORY, 0, IN_ROOT));
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return 0;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        char child[PATH_MAX];
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            snprintf(child, sizeof(child), "%s/%s", strcmp(path, "/") ? path : "", de->d_name) >=
                (int)sizeof(child))
            continue;
        if (announce)
            emit(w, json_pack("{s:s, s:s, s:s}", "type", "create", "path", child, "dir", path));
        if (de->d_type == DT_DIR)
            add_watch(w, child, announce); /* one that goes meanwhile is not an error */
    }
    closedir(d);
    return 0;
}

static int emit(struct watcher *w, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return -1;
    int r = crl_write_full(w->out, s, strlen(s));
    if (r == 0)
        r = crl_write_full(w->out, "\n", 1);
    free(s);
    return r;
}

/* A rename whose other half did not come: it left the watch. */
static int flush_moved(struct watcher *w)
{
    if (!w->pending)
        return 0;
    w->pending = false;
    return emit(w, json_pack("{s:s, s:s, s:s}", "type", "remove", "path", w->moved_from, "dir",
                             w->moved_dir));
}

static int event(struct watcher *w, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW)
        return emit(w, json_pack("{s:s}", "type", "overflow"));
    if (ev->wd < 0 || ev->wd >= w->cap || !w->paths[ev->wd])
        return 0;
    const char *dir = w->paths[ev->wd];
    if (ev->mask & (IN_DELETE_SELF | IN_IGNORED))
        return 0;
    char path[PATH_MAX];
    if (!ev->len || snprintf(path, sizeof(path), "%s/%s", strcmp(dir, "/") ? dir : "", ev->name) >=
                        (int)sizeof(path))
        return 0;
    const char *type = ev->mask & IN_CREATE       ? "create"
                       : ev->mask & IN_MODIFY     ? "write"
                       : ev->mask & IN_DELETE     ? "remove"
                       : ev->mask & IN_ATTRIB     ? "chmod"
                       : ev->mask & IN_MOVED_FROM ? NULL
                       : ev->mask & IN_MOVED_TO   ? "rename"
                                                  : NULL;
    if (ev->mask & IN_MOVED_FROM) { /* the other half follows at once, or it left */
        if (flush_moved(w) < 0)
            return -1;
        snprintf(w->moved_from, sizeof(w->moved_from), "%s", path);
        snprintf(w->moved_dir, sizeof(w->moved_dir), "%s", dir);
        w->cookie = ev->cookie;
        w->pending = true;
        return 0;
    }
    if (!type)
        return 0;
    json_t *o = json_pack("{s:s, s:s, s:s}", "type", type, "path", path, "dir", dir);
    if ((ev->mask & IN_MOVED_TO) && w->pending && ev->cookie == w->cookie) {
        json_object_set_new(o, "from", json_string(w->moved_from));
        w->pending = false;
    } else if (flush_moved(w) < 0) {
        json_decref(o);
        return -1;
    }
    int r = emit(w, o);
    if (r == 0 && w->recursive && (ev->mask & (IN_CREATE | IN_MOVED_TO)) && (ev->mask & IN_ISDIR))
        add_watch(w, path, true);
    return r;
}

int crl_fsop_watch(int root, const char *path_in, bool recursive, int out, char *msg, size_t cap)
{
    char path[PATH_MAX];
    int n = crl_path_normalise(path_in, strlen(path_in), CRL_PATH_RULES_API, path, sizeof(path));
    if (n < 0)
        return fail(CRL_STREAM_BAD_INPUT, msg, cap, "path '%.200s': %s", path_in, crl_path_why(n));
    struct watcher w = {.root = root, .out = out, .recursive = recursive};
    w.ifd = inotify_init1(IN_CLOEXEC);
    if (w.ifd < 0)
        return sys_fail(errno, "inotify", msg, cap);
    int code = CRL_STREAM_OK;
    if (add_watch(&w, path, false) < 0) {
        code = sys_fail(errno, path, msg, cap);
        goto out;
    }
    if (emit(&w, json_pack("{s:s, s:s, s:b}", "type", "ready", "path", path, "recursive",
                           recursive)) < 0)
        goto out;
    char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        /* A rename's first half waits a while for its second, which the
         * kernel queues just after it but may not have yet: the renaming
         * task may be preempted between the two (20 ms was too short for a
         * guest under emulation on a busy host).  Only a move out of the
         * tree, reported as a remove, waits the whole time. */
        struct pollfd pf[2] = {{.fd = w.ifd, .events = POLLIN}, {.fd = out, .events = 0}};
        int ready = poll(pf, 2, w.pending ? 250 : -1);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready == 0 && flush_moved(&w) < 0)
            break;
        if (pf[1].revents & (POLLERR | POLLHUP))
            break; /* the reader is gone */
        if (!(pf[0].revents & POLLIN))
            continue;
        ssize_t len = read(w.ifd, buf, sizeof(buf));
        if (len <= 0)
            continue;
        bool gone = false;
        for (ssize_t off = 0; off < len;) {
            const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
            if (ev->wd == 1 && (ev->mask & (IN_DELETE_SELF | IN_IGNORED)))
                gone = true; /* the directory watched is gone */
            if (event(&w, ev) < 0)
                goto out;
            off += (ssize_t)(sizeof(*ev) + ev->len);
        }
        if (gone) {
            flush_moved(&w);
            emit(&w, json_pack("{s:s, s:s}", "type", "remove", "path", path));
            break;
        }
    }
out:
    close(w.ifd);
    for (int i = 0; i < w.cap; i++)
        free(w.paths[i]);
    free(w.paths);
    return code;
}
