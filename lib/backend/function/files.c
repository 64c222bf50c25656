/* The files API and checkpoints of a function sandbox: its scratch dir,
 * opened by corrald beneath the keeper's descriptor of it (function_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../core/host.h"
#include "../../util/path.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "function_int.h"

/* ---- files: the scratch dir, opened by corrald beneath it ---- */

struct fn_open {
    struct crl_timer t;
    struct crl_open_req *o;
    int fd;
    bool is_dir;
    uint64_t size;
    struct crl_err err;
};

static void open_done(struct crl_timer *t)
{
    struct fn_open *fo = t->data;
    fo->o->done(fo->o, fo->fd, fo->is_dir, fo->size, fo->err.code ? &fo->err : NULL);
    free(fo);
}

/* The scratch dir of a sandbox whose files may be touched, or -1 with err. */
static int scratch_of(struct crl_sandbox *sb, struct crl_err *err)
{
    struct keeper *k = crl_fn_serving(sb, err);
    return k ? k->scratch_fd : -1;
}

int crl_fn_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
    struct fn_open *fo = calloc(1, sizeof(*fo));
    if (!fo)
        return crl_err_sys(err, ENOMEM, "open");
    fo->o = o;
    fo->fd = -1;
    long fd = crl_path_open_in_root(scratch, o->path, o->flags | O_NOFOLLOW, o->mode);
    struct stat st;
    if (fd < 0) {
        int e = (int)-fd;
        crl_err_set(&fo->err, e == ENOENT ? CRL_E_NOT_FOUND : CRL_E_INVALID, "%s: %s", o->path,
                    strerror(e));
    } else if (fstat((int)fd, &st) < 0 ||
               ((o->flags & O_CREAT) && fchown((int)fd, f->uid, f->gid) < 0)) {
        crl_err_sys(&fo->err, errno, "%s", o->path);
        close((int)fd);
    } else {
        fo->fd = (int)fd;
        fo->is_dir = S_ISDIR(st.st_mode);
        fo->size = (uint64_t)st.st_size;
    }
    crl_timer_start(sb->host->loop, &fo->t, 0, open_done, fo);
    return 0;
}

/* A single file written into the scratch dir, whole or not at all: a
 * temporary file beside it (owned by the sandbox's uid), renamed over it
 * once corrald commits; corrald writes the bytes straight into it, and
 * the sandbox's tmpfs holds them (disk_mb). */
struct fn_upload {
    struct crl_sandbox *sb;
    struct crl_stream_req *t;
    struct crl_watch w;
    struct crl_timer timer;
    int dir_fd, file_fd, ours;
    bool committed;
    char tmp[48];
    char base[256];
};

static void upload_free(struct fn_upload *u)
{
    struct crl_loop *loop = u->sb->host->loop;
    if (u->w.active)
        crl_watch_stop(loop, &u->w);
    crl_timer_stop(loop, &u->timer);
    close_fd(&u->ours);
    close_fd(&u->file_fd);
    close_fd(&u->dir_fd);
    free(u);
}

static void upload_msg(struct crl_watch *w, uint32_t ev)
{
    struct fn_upload *u = w->data;
    char c;
    ssize_t n;
    while ((n = read(u->ours, &c, 1)) == 1)
        u->committed |= c == CRL_STREAM_COMMIT;
    if (n < 0 && errno == EAGAIN && !u->committed)
        return;
    /* committed, or abandoned (shut or closed without the commit) */
    crl_watch_stop(u->sb->host->loop, &u->w);
    int code = CRL_STREAM_FAILED;
    struct stat st;
    char msg[64] = "the upload was abandoned\n";
    if (u->committed && fsync(u->file_fd) == 0 && fstat(u->file_fd, &st) == 0 &&
        renameat(u->dir_fd, u->tmp, u->dir_fd, u->base) == 0) {
        code = CRL_STREAM_OK;
        snprintf(msg, sizeof(msg), "bytes=%llu\n", (unsigned long long)st.st_size);
    } else {
        if (u->committed)
            snprintf(msg, sizeof(msg), "%s\n", strerror(errno));
        code = u->committed && errno == ENOSPC ? CRL_STREAM_NOSPACE : CRL_STREAM_FAILED;
        unlinkat(u->dir_fd, u->tmp, 0);
    }
    if (write(u->ours, msg, strlen(msg)) < 0)
        crl_debug(u->sb->id, "upload message: %s", strerror(errno));
    struct crl_stream_req *t = u->t;
    upload_free(u);
    t->done(t, code);
    (void)ev;
}

static void upload_started(struct crl_timer *tm)
{
    struct fn_upload *u = tm->data;
    u->t->started(u->t, NULL);
}

int crl_fn_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
    if (t->kind != CRL_STREAM_FILE_IN)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "the function backend moves single files only, not directories (tar)");
    struct fn_upload *u = calloc(1, sizeof(*u));
    if (!u)
        return crl_err_sys(err, ENOMEM, "upload");
    u->sb = sb;
    u->t = t;
    u->dir_fd = u->file_fd = u->ours = -1;
    /* the parent, resolved beneath the scratch dir; the name in it */
    char parent[4096];
    const char *slash = strrchr(t->path, '/');
    snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - t->path) : 0, t->path);
    snprintf(u->base, sizeof(u->base), "%s", slash ? slash + 1 : t->path);
    if (!u->base[0] || strcmp(u->base, ".") == 0 || strcmp(u->base, "..") == 0) {
        upload_free(u);
        return crl_err_set(err, CRL_E_INVALID, "%s: not a file name", t->path);
    }
    long dfd = crl_path_open_in_root(scratch, parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        upload_free(u);
        return crl_err_set(err, dfd == -ENOENT ? CRL_E_NOT_FOUND : CRL_E_INVALID, "%s: %s",
                           parent[0] ? parent : "/", strerror((int)-dfd));
    }
    u->dir_fd = (int)dfd;
    snprintf(u->tmp, sizeof(u->tmp), ".corral-upload-%llx", (unsigned long long)crl_now_ns());
    u->file_fd =
        openat(u->dir_fd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int sp[2] = {-1, -1};
    if (u->file_fd < 0 || fchown(u->file_fd, f->uid, f->gid) < 0 ||
        fchmod(u->file_fd, t->mode & 07777) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
        int e = errno;
        if (u->file_fd >= 0)
            unlinkat(u->dir_fd, u->tmp, 0);
        upload_free(u);
        return crl_err_sys(err, e, "%s", t->path);
    }
    u->ours = sp[1];
    crl_set_nonblock(u->ours, 1);
    t->msg_fd = sp[0];
    t->data_fd = fcntl(u->file_fd, F_DUPFD_CLOEXEC, 0);
    if (t->data_fd < 0 ||
        crl_watch_start(sb->host->loop, &u->w, u->ours, EPOLLIN, upload_msg, u) < 0) {
        int e = errno;
        close_fd(&t->data_fd);
        close_fd(&t->msg_fd);
        unlinkat(u->dir_fd, u->tmp, 0);
        upload_free(u);
        return crl_err_sys(err, e, "%s", t->path);
    }
    crl_timer_start(sb->host->loop, &u->timer, 0, upload_started, u);
    return 0;
}

/* ---- checkpoints ---- */

/* The scratch dir is the whole writable tree: what a sandbox owns there
 * (its uid, its gid) is stored as 0. */
int crl_fn_snapshot(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
    int fd = crl_openat(scratch, ".", O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "opening the scratch dir");
    v->dir_fd = fd;
    v->format = CRL_LAYER_PLAIN;
    v->uid_shift = f->uid;
    v->gid_shift = f->gid;
    return 0;
}
