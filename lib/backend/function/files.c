/* The files API and checkpoints of a function sandbox: its scratch dir,
 * opened by corrald beneath the keeper's descriptor of it (function_int.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../core/host.h"
#include "../../helper/fsop.h"
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

/* ---- the filesystem API: a thread of corrald's beneath the scratch dir ----
 *
 * An operation, or a watch (which runs until its reader closes data_fd),
 * on a thread of its own with the sandbox's uid and gid as its filesystem
 * ids (setfsuid: that thread's alone, and without root's file
 * capabilities), under the scratch dir, as lib/helper/fsop.h resolves. */

struct fn_fs {
    struct crl_sandbox *sb;
    struct crl_stream_req *t;
    int root;  /* the scratch dir, the thread's */
    char *arg; /* the request, or the path watched */
    uid_t uid;
    gid_t gid;
    int data_w, msg_w;  /* the thread's ends */
    int done_r, done_w; /* the thread's code, one byte, then EOF */
    struct crl_watch w;
    struct crl_timer started; /* says started, then watches for the end */
};

static void *fs_thread(void *arg)
{
    struct fn_fs *q = arg;
    char msg[512] = "";
    unsigned char code;
    /* A watch only looks (and /proc/self/fd, which it names a directory
     * by, is root's): as root, beneath the scratch dir all the same. */
    bool op = q->t->kind == CRL_STREAM_FS;
    if (op && (syscall(SYS_setfsgid, q->gid) < 0 || syscall(SYS_setfsuid, q->uid) < 0))
        code = CRL_STREAM_FAILED;
    else if (op)
        code = (unsigned char)crl_fsop_run(q->root, q->arg, q->data_w, msg, sizeof(msg));
    else
        code = (unsigned char)crl_fsop_watch(q->root, q->arg, q->t->recursive, q->data_w, msg,
                                             sizeof(msg));
    close(q->data_w);
    close(q->root);
    dprintf(q->msg_w, "%s\n", msg);
    close(q->msg_w);
    /* The loop frees q once it reads this byte: nothing of q after it. */
    int done_w = q->done_w;
    (void)!write(done_w, &code, 1);
    close(done_w);
    return NULL;
}

static void fs_done(struct crl_watch *w, uint32_t ev)
{
    struct fn_fs *q = w->data;
    unsigned char code = CRL_STREAM_FAILED;
    if (read(q->done_r, &code, 1) < 0 && errno == EAGAIN)
        return;
    crl_watch_stop(q->sb->host->loop, &q->w);
    close(q->done_r);
    struct crl_stream_req *t = q->t;
    struct crl_sandbox *sb = q->sb;
    free(q->arg);
    free(q);
    t->done(t, code);
    crl_sandbox_unref(sb);
}

/* Started first, and only then is the end watched for: a thread that is
 * done at once must not end the stream before it has started. */
static void fs_started(struct crl_timer *tm)
{
    struct fn_fs *q = tm->data;
    q->t->started(q->t, NULL);
    crl_watch_start(q->sb->host->loop, &q->w, q->done_r, EPOLLIN, fs_done, q);
}

static int fs_stream(struct crl_sandbox *sb, int scratch, struct crl_stream_req *t,
                     struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    struct fn_fs *q = calloc(1, sizeof(*q));
    int data[2] = {-1, -1}, msg[2] = {-1, -1}, done[2] = {-1, -1};
    if (!q || !(q->arg = strdup(t->path))) {
        crl_err_sys(err, ENOMEM, "a filesystem operation");
        goto fail;
    }
    if (pipe2(data, O_CLOEXEC) < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg) < 0 ||
        pipe2(done, O_CLOEXEC) < 0 || (q->root = fcntl(scratch, F_DUPFD_CLOEXEC, 0)) < 0) {
        crl_err_sys(err, errno, "a filesystem operation's pipes");
        goto fail;
    }
    q->sb = sb;
    q->t = t;
    q->uid = f->uid;
    q->gid = f->gid;
    q->data_w = data[1];
    q->msg_w = msg[1];
    q->done_r = done[0];
    q->done_w = done[1];
    crl_set_nonblock(q->done_r, 1);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&th, &attr, fs_thread, q);
    pthread_attr_destroy(&attr);
    if (e) {
        close(q->root);
        crl_err_sys(err, e, "a filesystem operation's thread");
        goto fail;
    }
    t->data_fd = data[0];
    t->msg_fd = msg[0];
    crl_sandbox_ref(sb);
    crl_timer_start(sb->host->loop, &q->started, 0, fs_started, q); /* after we return */
    return 0;
fail:
    close_fds(data, data[0] >= 0 ? 2 : 0);
    close_fds(msg, msg[0] >= 0 ? 2 : 0);
    close_fds(done, done[0] >= 0 ? 2 : 0);
    if (q)
        free(q->arg);
    free(q);
    return -1;
}

int crl_fn_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err)
{
    struct fn_sandbox *f = sb->priv;
    int scratch = scratch_of(sb, err);
    if (scratch < 0)
        return -1;
    if (t->kind == CRL_STREAM_FS || t->kind == CRL_STREAM_WATCH)
        return fs_stream(sb, scratch, t, err);
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
