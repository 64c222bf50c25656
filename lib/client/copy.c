#include "copy.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"

#define TAR_BLOCK (64 * 1024)

/* Last component of a path, ignoring trailing slashes, into buf. */
static const char *base_name(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = 0;
    char *slash = strrchr(buf, '/');
    return slash && slash[1] ? slash + 1 : buf;
}

/* A helper thread and the socket end it works on; the other end is the
 * transfer's.  A socket pair, not a pipe, so a write after the other side
 * gave up is EPIPE without SIGPIPE. */
struct tar_job {
    pthread_t thread;
    bool started;
    int fd;
    char *root; /* the local directory */
    int dirfd;  /* it, open, for extracting (the caller closes it) */
    int rc;
    struct crl_err err;
};

static int tar_job_start(struct tar_job *j, void *(*fn)(void *), int *other_fd, struct crl_err *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return crl_err_sys(err, errno, "socketpair");
    j->fd = sv[0];
    int rc = pthread_create(&j->thread, NULL, fn, j);
    if (rc != 0) {
        close(sv[0]);
        close(sv[1]);
        j->fd = -1;
        return crl_err_sys(err, rc, "starting the tar thread");
    }
    j->started = true;
    *other_fd = sv[1];
    return 0;
}

/* Wait for the thread; its descriptor is closed by then. */
static void tar_job_join(struct tar_job *j)
{
    if (j->started)
        pthread_join(j->thread, NULL);
    j->started = false;
}

/* ---- a local directory as a tar stream ---- */

static la_ssize_t tar_write_cb(struct archive *a, void *ud, const void *buf, size_t len)
{
    struct tar_job *j = ud;
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(j->fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            archive_set_error(a, errno, "sending the archive");
            return -1;
        }
        done += (size_t)n;
    }
    return (la_ssize_t)len;
}

static int write_zeros(struct archive *w, la_int64_t n)
{
    static const char zeros[4096];
    while (n > 0) {
        size_t k = n > (la_int64_t)sizeof(zeros) ? sizeof(zeros) : (size_t)n;
        if (archive_write_data(w, zeros, k) < 0)
            return -1;
        n -= (la_int64_t)k;
    }
    return 0;
}

static int tar_entry_data(struct archive *d, struct archive *w, struct archive_entry *e,
                          struct crl_err *err)
{
    const void *buf;
    size_t len;
    la_int64_t off, pos = 0;
    int r;
    while ((r = archive_read_data_block(d, &buf, &len, &off)) == ARCHIVE_OK) {
        /* A hole (should read_disk report one) becomes zeros: the entry is not sparse. */
        if ((off > pos && write_zeros(w, off - pos) < 0) || archive_write_data(w, buf, len) < 0)
            return crl_err_set(err, CRL_E_UNAVAILABLE, "sending %s: %s",
                               archive_entry_sourcepath(e), archive_error_string(w));
        pos = off + (la_int64_t)len;
    }
    if (r != ARCHIVE_EOF)
        return crl_err_set(err, CRL_E_INTERNAL, "reading %s: %s", archive_entry_sourcepath(e),
                           archive_error_string(d));
    return 0;
}

static int tar_out(struct tar_job *j, struct archive *d, struct archive *w)
{
    struct crl_err *err = &j->err;
    size_t rootlen = strlen(j->root);
    /* Names and xattrs of this machine mean nothing in the sandbox. */
    archive_read_disk_set_symlink_physical(d);
    archive_read_disk_set_behavior(d, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                          ARCHIVE_READDISK_NO_FFLAGS | ARCHIVE_READDISK_NO_SPARSE);
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(w, TAR_BLOCK) != ARCHIVE_OK ||
        /* End right after the end-of-archive blocks: corrald's extractor
         * stops reading there, and padding behind it would meet a closed pipe. */
        archive_write_set_bytes_in_last_block(w, 1) != ARCHIVE_OK ||
        archive_write_open(w, j, NULL, tar_write_cb, NULL) != ARCHIVE_OK)
        return crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(w));
    if (archive_read_disk_open(d, j->root) != ARCHIVE_OK)
        return crl_err_set(err, CRL_E_NOT_FOUND, "reading %s: %s", j->root,
                           archive_error_string(d));
    for (;;) {
        struct archive_entry *e = archive_entry_new();
        if (!e)
            return crl_err_sys(err, ENOMEM, "tar");
        int r = archive_read_next_header2(d, e);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(e);
            break;
        }
        if (r < ARCHIVE_WARN) {
            crl_err_set(err, CRL_E_INTERNAL, "reading %s: %s", j->root, archive_error_string(d));
            archive_entry_free(e);
            return -1;
        }
        archive_read_disk_descend(d);
        const char *src = archive_entry_pathname(e);
        const char *rel = strncmp(src, j->root, rootlen) == 0 ? src + rootlen : src;
        while (*rel == '/')
            rel++;
        if (!*rel) { /* the directory itself: its contents go into the target */
            archive_entry_free(e);
            continue;
        }
        unsigned type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            crl_err_set(err, CRL_E_INVALID,
                        "%s is not a file, directory or symlink; only those can be copied", src);
            archive_entry_free(e);
            return -1;
        }
        archive_entry_copy_sourcepath(e, src);
        archive_entry_copy_pathname(e, rel);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        archive_entry_copy_uname(e, NULL);
        archive_entry_copy_gname(e, NULL);
        archive_entry_sparse_clear(e);
        if (archive_write_header(w, e) < ARCHIVE_WARN) {
            crl_err_set(err, CRL_E_UNAVAILABLE, "sending %s: %s", src, archive_error_string(w));
            archive_entry_free(e);
            return -1;
        }
        int rc = type == AE_IFREG && archive_entry_size(e) > 0 ? tar_entry_data(d, w, e, err) : 0;
        archive_entry_free(e);
        if (rc < 0)
            return -1;
    }
    if (archive_write_close(w) != ARCHIVE_OK)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "tar: %s", archive_error_string(w));
    return 0;
}

static void *tar_out_thread(void *p)
{
    struct tar_job *j = p;
    struct archive *d = archive_read_disk_new();
    struct archive *w = archive_write_new();
    if (!d || !w)
        j->rc = crl_err_sys(&j->err, ENOMEM, "libarchive");
    else
        j->rc = tar_out(j, d, w);
    if (w)
        archive_write_free(w);
    if (d)
        archive_read_free(d);
    /* The end of the stream tells the transfer the archive is complete. */
    close(j->fd);
    j->fd = -1;
    return NULL;
}

struct put_src {
    struct tar_job *job;
    int fd;
};

/* The archive's bytes; at their end, the thread's verdict: a directory that
 * could not be read in full must fail the upload, not end it early. */
static ssize_t put_dir_source(void *ctx, char *buf, size_t len, struct crl_err *err)
{
    struct put_src *s = ctx;
    for (;;) {
        ssize_t n = read(s->fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return crl_err_sys(err, errno, "reading the archive");
        if (n > 0)
            return n;
        tar_job_join(s->job); /* it closed its end: it is done */
        if (s->job->rc < 0) {
            *err = s->job->err;
            return -1;
        }
        return 0;
    }
}

int crl_copy_dir_stream(const char *local, crl_copy_send_fn send, void *ctx, struct crl_err *err)
{
    cleanup_free char *root = strdup(local);
    if (!root)
        return crl_err_sys(err, ENOMEM, "copying %s", local);
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        root[--n] = 0;
    struct tar_job j = {.fd = -1, .root = root, .dirfd = -1};
    struct put_src src = {.job = &j, .fd = -1};
    if (tar_job_start(&j, tar_out_thread, &src.fd, err) < 0)
        return -1;
    int rc = send(ctx, put_dir_source, &src, err);
    close(src.fd); /* a thread still writing gets EPIPE and stops */
    tar_job_join(&j);
    if (rc < 0 && j.rc < 0 && j.err.code != CRL_E_UNAVAILABLE)
        *err = j.err; /* the local side's failure is the cause */
    return rc;
}

struct put_dir {
    struct crl_client *c;
    const char *id, *path;
};

static int put_dir_send(void *ctx, crl_client_source_fn source, void *src_ctx, struct crl_err *err)
{
    struct put_dir *p = ctx;
    return crl_client_put_source(p->c, p->id, p->path, source, src_ctx, -1, "application/x-tar", -1,
                                 NULL, err);
}

static int put_dir(struct crl_client *c, const char *local, const char *id, const char *path,
                   struct crl_err *err)
{
    struct put_dir p = {c, id, path};
    return crl_copy_dir_stream(local, put_dir_send, &p, err);
}

int crl_copy_to_sandbox(struct crl_client *c, const char *local, const char *id, const char *path,
                        struct crl_err *err)
{
    char name[NAME_MAX + 1];
    cleanup_free char *target = NULL;
    bool to_dir = path[0] && path[strlen(path) - 1] == '/';
    if (strcmp(local, "-") == 0) {
        if (to_dir)
            return crl_err_set(err, CRL_E_INVALID, "copying stdin needs a file path, not '%s'",
                               path);
        /* Sent chunked, to its end: a size taken from fstat() would be
         * wrong for stdin not at the file's start, or a file still growing. */
        return crl_client_put(c, id, path, STDIN_FILENO, -1, NULL, -1, NULL, err);
    }
    struct stat st;
    if (stat(local, &st) < 0)
        return crl_err_sys(err, errno, "%s", local);
    if (S_ISDIR(st.st_mode))
        return put_dir(c, local, id, path, err);
    if (!S_ISREG(st.st_mode))
        return crl_err_set(err, CRL_E_INVALID, "%s is not a file or directory", local);
    if (to_dir) {
        if (asprintf(&target, "%s%s", path, base_name(local, name, sizeof(name))) < 0) {
            target = NULL;
            return crl_err_sys(err, ENOMEM, "copying %s", local);
        }
        path = target;
    }
    cleanup_close int fd = crl_openat(AT_FDCWD, local, O_RDONLY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "%s", local);
    int rc = crl_client_put(c, id, path, fd, (long long)st.st_size, NULL, (int)(st.st_mode & 07777),
                            NULL, err);
    if (rc < 0 && err && strstr(err->msg, "Is a directory")) {
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s (to copy into the directory, write %s/)", err->msg, path);
        memcpy(err->msg, msg, sizeof(msg));
    }
    return rc;
}

/* ---- a tar stream into a local directory ---- */

static int untar_entry(struct archive *a, struct archive *w, struct archive_entry *e,
                       struct crl_err *err)
{
    const char *name = archive_entry_pathname(e);
    unsigned type = archive_entry_filetype(e);
    /* libarchive refuses these too; checked here for messages that say why. */
    if (!name || name[0] == '/')
        return crl_err_set(err, CRL_E_INVALID, "the archive has an absolute name '%s'",
                           name ? name : "");
    if (archive_entry_hardlink(e))
        return crl_err_set(err, CRL_E_INVALID, "the archive has a hard link '%s'", name);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        return crl_err_set(err, CRL_E_INVALID, "'%s' in the archive: not a file, dir or symlink",
                           name);
    /* A file the sandbox made setuid must not become one of ours (root's,
     * when we run as root) on this machine; setgid and sticky go with it,
     * as cp(1) drops them all when it does not keep the owner. */
    archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
    if (archive_write_header(w, e) < ARCHIVE_WARN)
        return crl_err_set(err, CRL_E_INVALID, "extracting '%s': %s", name,
                           archive_error_string(w));
    const void *buf;
    size_t len;
    la_int64_t off;
    int r;
    while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
        if (archive_write_data_block(w, buf, len, off) < ARCHIVE_WARN)
            return crl_err_set(err, CRL_E_INTERNAL, "writing %s: %s", name,
                               archive_error_string(w));
    if (r != ARCHIVE_EOF)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "reading the archive: %s",
                           archive_error_string(a));
    if (archive_write_finish_entry(w) < ARCHIVE_WARN)
        return crl_err_set(err, CRL_E_INTERNAL, "writing %s: %s", name, archive_error_string(w));
    return 0;
}

static int untar(struct tar_job *j, struct archive *a, struct archive *w)
{
    /* Names stay relative and are extracted from the target directory as
     * the working directory, so libarchive's own guards all apply: no
     * absolute names, no '..', nothing written through a symlink.  The
     * working directory is this thread's alone (CLONE_FS unshared), so the
     * rest of the process keeps its own. */
    if (unshare(CLONE_FS) < 0)
        return crl_err_sys(&j->err, errno, "unshare(CLONE_FS)");
    if (fchdir(j->dirfd) < 0)
        return crl_err_sys(&j->err, errno, "fchdir(%s)", j->root);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_filter_none(a);
    archive_write_disk_set_options(
        w, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
               ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
               ARCHIVE_EXTRACT_UNLINK);
    if (archive_read_open_fd(a, j->fd, TAR_BLOCK) != ARCHIVE_OK)
        return crl_err_set(&j->err, CRL_E_INTERNAL, "reading the archive: %s",
                           archive_error_string(a));
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN)
            return crl_err_set(&j->err, CRL_E_UNAVAILABLE, "reading the archive: %s",
                               archive_error_string(a));
        if (untar_entry(a, w, e, &j->err) < 0)
            return -1;
    }
    if (archive_write_close(w) != ARCHIVE_OK)
        return crl_err_set(&j->err, CRL_E_INTERNAL, "extracting into %s: %s", j->root,
                           archive_error_string(w));
    return 0;
}

static void *untar_thread(void *p)
{
    struct tar_job *j = p;
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    if (!a || !w)
        j->rc = crl_err_sys(&j->err, ENOMEM, "libarchive");
    else
        j->rc = untar(j, a, w);
    if (w)
        archive_write_free(w);
    if (a)
        archive_read_free(a);
    /* Closing our end makes a transfer still sending fail at once. */
    close(j->fd);
    j->fd = -1;
    return NULL;
}

struct get_ctx {
    const char *path; /* in the sandbox */
    const char *local;
    int fd; /* where the bytes go (ours unless it is stdout) */
    bool own_fd;
    char *dst; /* a file: where it goes, */
    char *tmp; /* and the name it has until it is complete */
    struct tar_job job;
};

/* A file is written under a temporary name beside its target and renamed
 * over it once complete, so a failed download leaves neither half a file
 * nor a clobbered one.  Like cp(1), it keeps the mode of the file it
 * replaces; a new file gets its mode in the sandbox (as corrald says it,
 * else 0666) less the umask, and never setuid, setgid or sticky. */
static int open_local_file(struct get_ctx *g, int sandbox_mode, struct crl_err *err)
{
    char name[NAME_MAX + 1];
    struct stat st;
    int n = stat(g->local, &st) == 0 && S_ISDIR(st.st_mode)
                ? asprintf(&g->dst, "%s/%s", g->local, base_name(g->path, name, sizeof(name)))
                : asprintf(&g->dst, "%s", g->local);
    if (n < 0) {
        g->dst = NULL;
        return crl_err_sys(err, ENOMEM, "copying %s", g->path);
    }
    mode_t keep = 0;
    if (lstat(g->dst, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return crl_err_set(err, CRL_E_INVALID, "%s is a directory", g->dst);
        if (S_ISREG(st.st_mode))
            keep = st.st_mode & 0777;
    }
    cleanup_free char *dir_buf = strdup(g->dst);
    if (!dir_buf)
        return crl_err_sys(err, ENOMEM, "copying %s", g->path);
    const char *dir = dirname(dir_buf);
    const char *base = base_name(g->dst, name, sizeof(name));
    for (int tries = 0; tries < 100; tries++) {
        unsigned char r[6];
        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
            return crl_err_sys(err, errno, "getrandom");
        free(g->tmp);
        if (asprintf(&g->tmp, "%s/.%.200s.corral-%02x%02x%02x%02x%02x%02x", dir, base, r[0], r[1],
                     r[2], r[3], r[4], r[5]) < 0) {
            g->tmp = NULL;
            return crl_err_sys(err, ENOMEM, "copying %s", g->path);
        }
        g->fd = crl_openat(AT_FDCWD, g->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
        if (g->fd >= 0 || errno != EEXIST)
            break;
    }
    if (g->fd < 0) {
        int e = errno;
        free(g->tmp);
        g->tmp = NULL;
        return crl_err_sys(err, e, "creating a file in %s", dir);
    }
    g->own_fd = true;
    if (!keep && sandbox_mode >= 0) {
        mode_t mask = umask(0);
        umask(mask);
        keep = (mode_t)sandbox_mode & 0777 & ~mask;
    }
    if (keep && fchmod(g->fd, keep) < 0)
        return crl_err_sys(err, errno, "fchmod(%s)", g->tmp);
    return 0;
}

static int get_sink(void *ctx, bool is_dir, int mode, int *fd, struct crl_err *err)
{
    struct get_ctx *g = ctx;
    if (strcmp(g->local, "-") == 0) {
        *fd = STDOUT_FILENO; /* a directory comes out as the tar stream */
        return 0;
    }
    if (!is_dir) {
        if (open_local_file(g, mode, err) < 0)
            return -1;
        *fd = g->fd;
        return 0;
    }
    struct stat st;
    if (stat(g->local, &st) == 0 && !S_ISDIR(st.st_mode))
        return crl_err_set(err, CRL_E_INVALID, "%s is a directory but %s is not", g->path,
                           g->local);
    if (crl_mkdir_p(g->local, 0777) < 0)
        return crl_err_sys(err, errno, "creating %s", g->local);
    g->job.dirfd = crl_openat(AT_FDCWD, g->local, O_RDONLY | O_DIRECTORY, 0);
    if (g->job.dirfd < 0)
        return crl_err_sys(err, errno, "%s", g->local);
    g->job.root = (char *)g->local;
    if (tar_job_start(&g->job, untar_thread, &g->fd, err) < 0)
        return -1;
    g->own_fd = true;
    *fd = g->fd;
    return 0;
}

int crl_copy_from_sandbox(struct crl_client *c, const char *id, const char *path, const char *local,
                          struct crl_err *err)
{
    struct get_ctx g = {.path = path, .local = local, .fd = -1, .job = {.fd = -1, .dirfd = -1}};
    int rc = crl_client_get(c, id, path, get_sink, &g, err);
    bool extracting = g.job.started;
    /* Closing the socket tells the extractor the archive is complete. */
    if (g.own_fd && close(g.fd) < 0 && rc == 0 && !extracting)
        rc = crl_err_sys(err, errno, "writing %s", g.tmp ? g.tmp : local);
    tar_job_join(&g.job);
    if (g.job.dirfd >= 0)
        close(g.job.dirfd);
    if (g.tmp) {
        if (rc == 0 && rename(g.tmp, g.dst) < 0)
            rc = crl_err_sys(err, errno, "renaming %s to %s", g.tmp, g.dst);
        if (rc < 0)
            unlink(g.tmp);
    }
    free(g.tmp);
    free(g.dst);
    /* A failed extraction explains a broken transfer better than EPIPE does. */
    if (extracting && g.job.rc < 0 && (rc == 0 || (err && err->sys_errno == EPIPE))) {
        if (err)
            *err = g.job.err;
        return -1;
    }
    return rc;
}
