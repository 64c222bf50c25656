/* GET and PUT .../files?path=P: one file as raw bytes, or a directory as a
 * tar stream, both ways.
 *
 * A read opens the path inside the sandbox (lib/util/path.h) and sends the
 * descriptor with sendfile.  Everything else streams through a helper the
 * backend runs inside the sandbox, so what an upload writes is charged to
 * the sandbox's memory and disk and is done with its user's rights. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/path.h"
#include "handlers_files.h"
#include "request.h"
#include "traj_step.h"

#define TAR_READAHEAD (1u << 20) /* stop reading a tar stream while this much waits */

/* A files request's state (r->state). */
struct files {
    struct crl_open_req open;     /* a read: the path opened inside the sandbox */
    struct crl_stream_req stream; /* a tar stream out, or an upload, through the helper */
    char path[4096];
    int fd;             /* an upload's end of the stream */
    struct crl_watch w; /* the tar stream's pipe, or room in the upload's */
    uint64_t bytes;     /* moved so far */
    bool upload_failed; /* the rest of the body is read and dropped */
    struct crl_err upload_err;
    bool stream_exited; /* the helper exited, with stream_code */
    int stream_code;
    size_t body_off; /* a body held whole (a trajectory's step): how much is sent */
};

static struct files *files_of(struct crl_req *r, struct crl_err *err)
{
    if (!r->state) {
        struct files *f = calloc(1, sizeof(*f));
        if (!f) {
            crl_err_sys(err, ENOMEM, "a files request");
            return NULL;
        }
        f->fd = f->stream.data_fd = f->stream.msg_fd = -1;
        r->state = f;
    }
    return r->state;
}

/* ?path=, ?user=UID[:GID] (default root), ?mode=0644 (octal). */
static int parse_params(struct crl_req *r, struct files *f, struct crl_err *err)
{
    const char *path = crl_req_query(r, "path");
    if (crl_path_check(path, "path", err) < 0)
        return -1;
    snprintf(f->path, sizeof(f->path), "%s", path);
    struct crl_user u = {0, 0, true};
    const char *user = crl_req_query(r, "user");
    if (user && crl_user_parse(user, &u, err) < 0)
        return -1;
    f->open.path = f->stream.path = f->path;
    f->open.uid = f->stream.uid = u.uid;
    f->open.gid = f->stream.gid = u.gid;
    f->stream.mode = 0644;
    const char *mode = crl_req_query(r, "mode");
    if (mode) {
        char *end;
        unsigned long m = strtoul(mode, &end, 8);
        if (!*mode || *end || m > 07777)
            return crl_err_set(err, CRL_E_INVALID, "mode '%s' is not an octal file mode", mode);
        f->stream.mode = (mode_t)m;
    }
    return 0;
}

static int begin(struct crl_req *r, struct crl_err *err)
{
    struct files *f = files_of(r, err);
    if (!f || crl_req_sandbox(r, err) < 0 || parse_params(r, f, err) < 0 ||
        crl_sandbox_check_ready(r->sb, err) < 0)
        return -1;
    crl_sandbox_touch(r->sb);
    return 0;
}

/* ---- streams ---- */

static void stream_finish(struct crl_req *r);

static void tar_out_readable(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    struct files *f = r->state;
    char buf[65536];
    while (r->out.len < TAR_READAHEAD) {
        ssize_t n = read(f->stream.data_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            crl_watch_stop(r->api->host->loop, &f->w);
            close(f->stream.data_fd);
            f->stream.data_fd = -1;
            stream_finish(r);
            return;
        }
        f->bytes += (uint64_t)n;
        crl_req_stream_append(r, buf, (size_t)n);
    }
    /* The client is slower than tar: let the pipe fill, tar will wait. */
    crl_watch_modify(r->api->host->loop, &f->w, 0);
}

void crl_h_files_drained(struct crl_req *r)
{
    struct files *f = r->state;
    if (f && f->stream.kind == CRL_STREAM_TAR_OUT && f->w.active && r->out.len < TAR_READAHEAD / 2)
        crl_watch_modify(r->api->host->loop, &f->w, EPOLLIN);
}

/* The helper's last line: an error message, or "bytes=N" / "entries=N". */
static void read_msg(struct crl_req *r, char *msg, size_t cap)
{
    struct files *f = r->state;
    msg[0] = 0;
    if (f->stream.msg_fd < 0)
        return;
    crl_set_nonblock(f->stream.msg_fd, 1);
    ssize_t n = read(f->stream.msg_fd, msg, cap - 1);
    msg[n > 0 ? n : 0] = 0;
    char *nl = strrchr(msg, '\n');
    if (nl && nl[1] == 0)
        *nl = 0;
}

static enum crl_errc status_errc(int code)
{
    switch (code) {
    case CRL_STREAM_BAD_INPUT:
    case CRL_STREAM_NOTDIR:
    case CRL_STREAM_ISDIR: return CRL_E_INVALID;
    case CRL_STREAM_NOENT: return CRL_E_NOT_FOUND;
    case CRL_STREAM_DENIED: return CRL_E_FORBIDDEN;
    case CRL_STREAM_NOSPACE: return CRL_E_NO_SPACE;
    case CRL_STREAM_GONE: return CRL_E_CONFLICT;
    case 128 + 9: return CRL_E_NO_SPACE; /* killed in a live sandbox: it ran out of memory */
    default: return CRL_E_INTERNAL;
    }
}

/* Both the end of the bytes and the helper's exit are needed to answer. */
static void stream_finish(struct crl_req *r)
{
    struct files *f = r->state;
    if (!f->stream_exited || f->stream.data_fd >= 0)
        return;
    char msg[512];
    read_msg(r, msg, sizeof(msg));
    close(f->stream.msg_fd);
    f->stream.msg_fd = -1;
    if (r->gone)
        return;
    int code = f->stream_code;
    if (f->stream.kind == CRL_STREAM_TAR_OUT) {
        if (code != CRL_STREAM_OK)
            crl_warn(r->sb->id, "tar of %s failed after %" PRIu64 " bytes: %s", f->path, f->bytes,
                     msg);
        crl_req_stream_end(r, code != CRL_STREAM_OK);
        return;
    }
    struct crl_err err = CRL_ERR_INIT;
    if (code == CRL_STREAM_OK && !f->upload_failed) {
        unsigned long long n = 0;
        if (f->stream.kind == CRL_STREAM_TAR_IN) {
            sscanf(msg, "entries=%llu", &n);
            crl_req_json(r, 200,
                         json_pack("{s:s, s:I, s:I}", "path", f->path, "entries", (json_int_t)n,
                                   "bytes", (json_int_t)f->bytes));
        } else {
            sscanf(msg, "bytes=%llu", &n);
            crl_req_json(r, 200, json_pack("{s:s, s:I}", "path", f->path, "bytes", (json_int_t)n));
        }
        return;
    }
    if (code == CRL_STREAM_OK || f->upload_err.code == CRL_E_NO_SPACE) {
        crl_req_error(r, &f->upload_err);
        return;
    }
    enum crl_errc ec = status_errc(code);
    if (code == 128 + 9 && r->sb->state != CRL_SB_READY)
        code = CRL_STREAM_GONE, ec = CRL_E_CONFLICT;
    if (code == CRL_STREAM_GONE)
        snprintf(msg, sizeof(msg), "the sandbox ended meanwhile");
    else if (code == 128 + 9)
        snprintf(msg, sizeof(msg), "the sandbox ran out of memory (memory_mb) while writing");
    crl_err_set(&err, ec, "%s %s: %s",
                f->stream.kind == CRL_STREAM_TAR_IN ? "extracting into" : "writing", f->path,
                msg[0] ? msg : "the helper failed");
    crl_req_error(r, &err);
}

static void stream_done(struct crl_stream_req *t, int code)
{
    struct crl_req *r = t->ctx;
    struct files *f = r->state;
    f->stream_exited = true;
    f->stream_code = code;
    /* an upload the helper stopped reading: answer now */
    if (f->stream.kind != CRL_STREAM_TAR_OUT && f->stream.data_fd >= 0 && code != CRL_STREAM_OK) {
        crl_watch_stop(r->api->host->loop, &f->w);
        close(f->stream.data_fd);
        f->stream.data_fd = -1;
        f->fd = -1;
        f->upload_failed = true;
        crl_req_resume(r);
    }
    stream_finish(r);
    crl_req_pending_done(r);
}

static void stream_started(struct crl_stream_req *t, const struct crl_err *err)
{
    struct crl_req *r = t->ctx;
    struct files *f = r->state;
    if (err) {
        if (!r->gone) {
            if (t->kind != CRL_STREAM_TAR_OUT) {
                f->upload_failed = true;
                f->upload_err = *err;
                crl_req_resume(r);
            } else {
                crl_req_error(r, err);
            }
        }
        crl_req_pending_done(r);
        return;
    }
    r->pending++; /* stream_done will come */
    crl_set_nonblock(t->data_fd, 1);
    if (t->kind != CRL_STREAM_TAR_OUT) {
        f->fd = t->data_fd;
        crl_req_resume(r);
    } else if (!r->gone) {
        crl_watch_start(r->api->host->loop, &f->w, t->data_fd, EPOLLIN, tar_out_readable, r);
        struct MHD_Response *resp = crl_req_stream_response(r, "application/x-tar");
        MHD_add_response_header(resp, "X-Corral-Kind", "directory");
        crl_req_respond(r, 200, resp);
    }
    crl_req_pending_done(r);
}

static int start_stream(struct crl_req *r, enum crl_stream_kind kind, struct crl_err *err)
{
    struct files *f = r->state;
    f->stream.kind = kind;
    f->stream.started = stream_started;
    f->stream.done = stream_done;
    f->stream.ctx = r;
    if (!r->sb->ops->stream)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend cannot move files",
                           r->sb->ops->name);
    r->pending++;
    if (r->sb->ops->stream(r->sb, &f->stream, err) < 0) {
        r->pending--;
        return -1;
    }
    return 0;
}

/* ---- GET ---- */

/* One range of RFC 9110 ("bytes=A-B", "bytes=A-", "bytes=-N") of a file
 * of `size` bytes: its start and length, or 400 for any other form (a
 * list of ranges too) and for one that is past the end. */
static int parse_range(const char *v, uint64_t size, uint64_t *from, uint64_t *len,
                       struct crl_err *err)
{
    unsigned long long a = 0, b = 0;
    int n = -1;
    if (strncmp(v, "bytes=", 6) != 0)
        goto bad;
    v += 6;
    if (v[0] == '-') {
        if (sscanf(v + 1, "%llu%n", &b, &n) != 1 || v[1 + n] || b == 0)
            goto bad;
        *from = b < size ? size - b : 0;
        *len = size - *from;
    } else {
        if (sscanf(v, "%llu-%n", &a, &n) != 1 || n < 0)
            goto bad;
        const char *rest = v + n;
        if (*rest && (sscanf(rest, "%llu%n", &b, &n) != 1 || rest[n] || b < a))
            goto bad;
        if (a >= size)
            return crl_err_set(err, CRL_E_INVALID, "range %s starts past the end (%llu bytes)",
                               v - 6, (unsigned long long)size);
        *from = a;
        *len = (*rest && b < size ? b + 1 : size) - a;
    }
    if (*len == 0)
        return crl_err_set(err, CRL_E_INVALID, "range %s is empty: the file has no bytes", v - 6);
    return 0;
bad:
    return crl_err_set(err, CRL_E_INVALID,
                       "Range must be one range of bytes: bytes=A-B, bytes=A- or bytes=-N");
}

static void get_opened(struct crl_open_req *o, int fd, bool is_dir, uint64_t size,
                       const struct crl_err *err)
{
    struct crl_req *r = o->ctx;
    struct files *f = r->state;
    struct crl_err e = CRL_ERR_INIT;
    if (r->gone) {
        if (fd >= 0)
            close(fd);
    } else if (err) {
        crl_req_error(r, err);
    } else if (r->step && is_dir) {
        close(fd);
        crl_err_set(&e, CRL_E_UNSUPPORTED,
                    "%s is a directory: directories (tar streams) are not recorded in a "
                    "trajectory; read files one at a time",
                    f->path);
        crl_req_error(r, &e);
    } else if (r->step) {
        crl_step_capture_file(r, fd, size, f->path); /* kept whole, to log it */
    } else if (is_dir) {
        close(fd);
        if (crl_sandbox_check_ready(r->sb, &e) < 0 || start_stream(r, CRL_STREAM_TAR_OUT, &e) < 0)
            crl_req_error(r, &e);
    } else {
        struct stat st;
        char mode[8] = "", cr[80];
        uint64_t from = 0, len = size;
        const char *range = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Range");
        if (fstat(fd, &st) == 0)
            snprintf(mode, sizeof(mode), "%04o", (unsigned)(st.st_mode & 07777));
        if (range && parse_range(range, size, &from, &len, &e) < 0) {
            close(fd);
            crl_req_error(r, &e);
            crl_req_pending_done(r);
            return;
        }
        struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, from);
        MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
        MHD_add_response_header(resp, "X-Corral-Kind", "file");
        MHD_add_response_header(resp, "Accept-Ranges", "bytes");
        if (mode[0])
            MHD_add_response_header(resp, "X-Corral-Mode", mode);
        if (range) {
            snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)from,
                     (unsigned long long)(from + len - 1), (unsigned long long)size);
            MHD_add_response_header(resp, "Content-Range", cr);
        }
        crl_req_respond(r, range ? 206 : 200, resp);
    }
    crl_req_pending_done(r);
}

void crl_h_files_get(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct files *f = r->state;
    if (f && f->open.ctx) /* already asked */
        return;
    if (begin(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    f = r->state;
    f->open.flags = O_RDONLY;
    f->open.done = get_opened;
    f->open.ctx = r;
    r->pending++;
    if (r->sb->ops->open(r->sb, &f->open, &err) < 0) {
        r->pending--;
        crl_req_error(r, &err);
    }
}

/* ---- PUT ---- */

static bool starting(struct crl_req *r)
{
    struct files *f = r->state;
    return f->fd < 0 && !f->upload_failed;
}

/* The upload's stream to the helper; the body follows once it is ready. */
static void put_start(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (begin(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    bool tar = ct && strncmp(ct, "application/x-tar", 17) == 0;
    if (start_stream(r, tar ? CRL_STREAM_TAR_IN : CRL_STREAM_FILE_IN, &err) < 0)
        crl_req_error(r, &err);
}

bool crl_h_files_put_begin(struct crl_req *r)
{
    if (crl_step_holds_upload(r))
        return false; /* a trajectory's step: held whole, sent when its turn comes */
    put_start(r);
    return true;
}

/* corrald's write of the body failed: the helper stopped reading (its exit
 * says why), or, where the backend gave corrald the file itself (the
 * function backend's scratch dir), the sandbox's disk is full. */
static void write_failed(struct crl_req *r)
{
    struct files *f = r->state;
    f->upload_failed = true;
    if (errno == ENOSPC || errno == EDQUOT)
        crl_err_set(&f->upload_err, CRL_E_NO_SPACE,
                    "writing %s: the sandbox's disk is full (disk_mb)", f->path);
    else
        crl_err_set(&f->upload_err, CRL_E_INTERNAL, "writing %s stopped early", f->path);
}

int crl_h_files_put_body(struct crl_req *r, const char *data, size_t *len)
{
    struct files *f = r->state;
    if (!f || f->upload_failed) {
        *len = 0; /* keep reading the body, to answer once it is in */
        return 0;
    }
    if (starting(r))
        return -1;
    int rc = crl_req_pipe_body(r, f->fd, &f->w, &f->bytes, data, len);
    if (rc < 0) {
        write_failed(r);
        *len = 0;
        return 0;
    }
    return rc > 0 ? -1 : 0;
}

void crl_h_files_put(struct crl_req *r)
{
    struct files *f = r->state;
    bool held = !r->body_streamed;
    if (held && (!f || !f->stream.ctx)) {
        /* A trajectory's step: the body was held whole; now it is sent. */
        put_start(r);
        return;
    }
    if (!f || starting(r))
        return; /* called again once the helper is ready */
    if (held && f->fd >= 0 && !f->upload_failed && f->body_off < r->body.len) {
        size_t left = r->body.len - f->body_off;
        int rc = crl_req_pipe_body(r, f->fd, &f->w, &f->bytes, r->body.data + f->body_off, &left);
        f->body_off = r->body.len - left;
        if (rc > 0)
            return; /* called again once the pipe has room */
        if (rc < 0)
            write_failed(r);
    }
    /* End of the body: the whole of it, so the file may replace what was
     * there; then the helper sees EOF, and its exit answers. */
    if (f->fd >= 0) {
        if (f->stream.kind == CRL_STREAM_FILE_IN && !f->upload_failed) {
            char c = CRL_STREAM_COMMIT;
            if (write(f->stream.msg_fd, &c, 1) != 1)
                crl_debug(r->sb->id, "commit %s: %s", f->path, strerror(errno));
        } else if (f->stream.kind == CRL_STREAM_FILE_IN) {
            shutdown(f->stream.msg_fd, SHUT_WR); /* abandoned */
        }
        close(f->fd);
        f->fd = -1;
        f->stream.data_fd = -1;
    }
    if (!f->stream_exited && f->upload_failed && !r->pending) {
        crl_req_error(r, &f->upload_err); /* it never started */
        return;
    }
    stream_finish(r);
}

void crl_h_files_cancel(struct crl_req *r)
{
    struct files *f = r->state;
    if (!f)
        return;
    if (f->w.active)
        crl_watch_stop(r->api->host->loop, &f->w);
    if (f->fd >= 0 && f->fd != f->stream.data_fd)
        close(f->fd);
    f->fd = -1;
    /* An upload cut short is abandoned, not committed: the helper hears
     * so before it sees the end of the bytes. */
    if (f->stream.msg_fd >= 0)
        shutdown(f->stream.msg_fd, SHUT_WR);
    if (f->stream.data_fd >= 0) {
        close(f->stream.data_fd);
        f->stream.data_fd = -1;
    }
}
