/* GET and PUT .../files?path=P: one file as raw bytes, or a directory as a
 * tar stream, both ways.  The path is opened inside the sandbox by the
 * backend (lib/core/path.h); bytes then flow between that descriptor and
 * the connection without a copy in between where the kernel allows. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/path.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "request.h"

#define TAR_READAHEAD (1u << 20) /* stop reading a tar stream while this much waits */

static bool is_put(struct crl_req *r)
{
    return strcmp(r->method, "PUT") == 0;
}

/* ?user=UID[:GID] (default root); ?mode=0644 (octal). */
static int parse_params(struct crl_req *r, struct crl_err *err)
{
    const char *path = crl_req_query(r, "path");
    if (crl_path_check(path, "path", err) < 0)
        return -1;
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->open.path = r->path;
    r->open.uid = r->open.gid = 0;
    const char *user = crl_req_query(r, "user");
    if (user) {
        struct crl_user u;
        if (crl_user_parse(user, &u, err) < 0)
            return -1;
        r->open.uid = u.uid;
        r->open.gid = u.gid;
    }
    r->open.mode = 0644;
    const char *mode = crl_req_query(r, "mode");
    if (mode) {
        char *end;
        unsigned long m = strtoul(mode, &end, 8);
        if (!*mode || *end || m > 07777)
            return crl_err_set(err, CRL_E_INVALID, "mode '%s' is not an octal file mode", mode);
        r->open.mode = (mode_t)m;
    }
    return 0;
}

/* ---- directory as tar ---- */

static void tar_finish(struct crl_req *r);

static void tar_out_readable(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    char buf[65536];
    while (r->out.len < TAR_READAHEAD) {
        ssize_t n = read(r->tar.data_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            crl_watch_stop(r->api->host->loop, &r->w);
            close(r->tar.data_fd);
            r->tar.data_fd = -1;
            tar_finish(r);
            return;
        }
        r->bytes += (uint64_t)n;
        crl_req_stream_append(r, buf, (size_t)n);
    }
    /* The client is slower than tar: let the pipe fill, tar will wait. */
    crl_watch_modify(r->api->host->loop, &r->w, 0);
}

static void tar_out_drained(struct crl_req *r)
{
    if (r->w.active && r->out.len < TAR_READAHEAD / 2)
        crl_watch_modify(r->api->host->loop, &r->w, EPOLLIN);
}

static void read_msg(struct crl_req *r, char *msg, size_t cap)
{
    msg[0] = 0;
    if (r->tar.msg_fd < 0)
        return;
    crl_set_nonblock(r->tar.msg_fd, 1);
    ssize_t n = read(r->tar.msg_fd, msg, cap - 1);
    msg[n > 0 ? n : 0] = 0;
    char *nl = strrchr(msg, '\n');
    if (nl && nl[1] == 0)
        *nl = 0;
}

/* Both the stream's end and the helper's exit are needed to finish. */
static void tar_finish(struct crl_req *r)
{
    if (!r->tar_exited || (!r->tar.in && r->tar.data_fd >= 0))
        return;
    char msg[512];
    read_msg(r, msg, sizeof(msg));
    close(r->tar.msg_fd);
    r->tar.msg_fd = -1;
    if (r->gone)
        return;
    if (!r->tar.in) {
        if (r->tar_code != 0)
            crl_warn(r->sb->id, "tar of %s failed after %" PRIu64 " bytes: %s", r->path, r->bytes,
                     msg);
        crl_req_stream_end(r, r->tar_code != 0);
        return;
    }
    struct crl_err err = CRL_ERR_INIT;
    if (r->upload_failed) {
        crl_req_error(r, &r->upload_err);
    } else if (r->tar_code == 0) {
        unsigned long entries = 0;
        sscanf(msg, "entries=%lu", &entries);
        crl_req_json(r, 200,
                     json_pack("{s:s, s:I, s:I}", "path", r->path, "entries", (json_int_t)entries,
                               "bytes", (json_int_t)r->bytes));
    } else {
        crl_err_set(&err,
                    r->tar_code == 2   ? CRL_E_INVALID
                    : r->tar_code == 4 ? CRL_E_INVALID
                                       : CRL_E_INTERNAL,
                    "extracting into %s: %s", r->path, msg[0] ? msg : "the tar helper failed");
        crl_req_error(r, &err);
    }
}

static void tar_done(struct crl_tar_req *t, int code)
{
    struct crl_req *r = t->ctx;
    r->tar_exited = true;
    r->tar_code = code;
    tar_finish(r);
    crl_req_pending_done(r);
}

static void tar_started(struct crl_tar_req *t, const struct crl_err *err)
{
    struct crl_req *r = t->ctx;
    if (err) {
        if (!r->gone) {
            if (t->in) {
                r->upload_failed = true;
                r->upload_err = *err;
                crl_req_resume(r);
            } else {
                crl_req_error(r, err);
            }
        }
        crl_req_pending_done(r);
        return;
    }
    r->pending++; /* tar_done will come */
    crl_set_nonblock(t->data_fd, 1);
    if (t->in) {
        r->fd = t->data_fd;
        crl_req_resume(r);
    } else if (!r->gone) {
        crl_watch_start(r->api->host->loop, &r->w, t->data_fd, EPOLLIN, tar_out_readable, r);
        struct MHD_Response *resp = crl_req_stream_response(r, "application/x-tar");
        MHD_add_response_header(resp, "X-Corral-Kind", "directory");
        crl_req_respond(r, 200, resp);
    }
    crl_req_pending_done(r);
}

static int start_tar(struct crl_req *r, bool in, struct crl_err *err)
{
    r->tar = (struct crl_tar_req){.path = r->path,
                                  .in = in,
                                  .started = tar_started,
                                  .done = tar_done,
                                  .ctx = r,
                                  .data_fd = -1,
                                  .msg_fd = -1};
    r->pending++;
    if (r->sb->ops->tar(r->sb, &r->tar, err) < 0) {
        r->pending--;
        return -1;
    }
    return 0;
}

/* ---- GET ---- */

static void get_opened(struct crl_open_req *o, int fd, bool is_dir, uint64_t size,
                       const struct crl_err *err)
{
    struct crl_req *r = o->ctx;
    struct crl_err e = CRL_ERR_INIT;
    if (r->gone) {
        if (fd >= 0)
            close(fd);
    } else if (err) {
        crl_req_error(r, err);
    } else if (is_dir) {
        close(fd);
        if (start_tar(r, false, &e) < 0)
            crl_req_error(r, &e);
    } else {
        struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)size, fd);
        MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
        MHD_add_response_header(resp, "X-Corral-Kind", "file");
        crl_req_respond(r, 200, resp);
    }
    crl_req_pending_done(r);
}

/* ---- PUT ---- */

static void put_opened(struct crl_open_req *o, int fd, bool is_dir, uint64_t size,
                       const struct crl_err *err)
{
    struct crl_req *r = o->ctx;
    if (r->gone) {
        if (fd >= 0)
            close(fd);
    } else {
        if (err) {
            r->upload_failed = true;
            r->upload_err = *err;
        } else {
            r->fd = fd;
        }
        crl_req_resume(r);
    }
    crl_req_pending_done(r);
}

static bool opening(struct crl_req *r)
{
    return r->fd < 0 && !r->upload_failed;
}

void crl_h_files_begin(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0 || parse_params(r, &err) < 0 ||
        crl_sandbox_check_ready(r->sb, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    crl_sandbox_touch(r->sb);
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    r->upload_tar = ct && strncmp(ct, "application/x-tar", 17) == 0;
    if (r->upload_tar) {
        if (start_tar(r, true, &err) < 0)
            crl_req_error(r, &err);
        return;
    }
    r->open.flags = O_WRONLY | O_CREAT | O_TRUNC;
    r->open.mkdirs = true;
    r->open.done = put_opened;
    r->open.ctx = r;
    r->pending++;
    if (r->sb->ops->open(r->sb, &r->open, &err) < 0) {
        r->pending--;
        crl_req_error(r, &err);
    }
}

static void pipe_writable(struct crl_watch *w, uint32_t ev)
{
    struct crl_req *r = w->data;
    crl_watch_stop(r->api->host->loop, w);
    crl_req_resume(r);
}

int crl_h_files_body(struct crl_req *r, const char *data, size_t *len)
{
    if (r->upload_failed) {
        *len = 0; /* keep reading the body, to answer once it is in */
        return 0;
    }
    if (opening(r))
        return -1;
    while (*len) {
        ssize_t n = write(r->fd, data, *len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* the tar helper is behind: wait for room, MHD keeps the rest */
            crl_watch_start(r->api->host->loop, &r->w, r->fd, EPOLLOUT, pipe_writable, r);
            return -1;
        }
        if (n < 0) {
            r->upload_failed = true;
            if (r->upload_tar && errno == EPIPE)
                crl_err_set(&r->upload_err, CRL_E_INVALID, "extracting into %s stopped early",
                            r->path);
            else
                crl_err_sys(&r->upload_err, errno, "writing %s", r->path);
            *len = 0;
            return 0;
        }
        data += n;
        *len -= (size_t)n;
        r->bytes += (uint64_t)n;
    }
    return 0;
}

void crl_h_files_end(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (!is_put(r)) {
        if (r->open.ctx) /* already asked */
            return;
        if (crl_req_sandbox(r, &err) < 0 || parse_params(r, &err) < 0 ||
            crl_sandbox_check_ready(r->sb, &err) < 0) {
            crl_req_error(r, &err);
            return;
        }
        crl_sandbox_touch(r->sb);
        r->open.flags = O_RDONLY;
        r->open.done = get_opened;
        r->open.ctx = r;
        r->pending++;
        if (r->sb->ops->open(r->sb, &r->open, &err) < 0) {
            r->pending--;
            crl_req_error(r, &err);
        }
        return;
    }
    if (opening(r))
        return; /* called again once the file or the tar helper is ready */
    if (r->upload_tar) {
        /* End of the archive: the helper's exit answers. */
        if (r->fd >= 0) {
            close(r->fd);
            r->fd = -1;
            r->tar.data_fd = -1;
        }
        tar_finish(r);
        return;
    }
    if (r->upload_failed) {
        crl_req_error(r, &r->upload_err);
        return;
    }
    int fd = r->fd;
    r->fd = -1;
    if (close(fd) < 0) {
        crl_err_sys(&err, errno, "writing %s", r->path);
        crl_req_error(r, &err);
        return;
    }
    crl_req_json(r, 200, json_pack("{s:s, s:I}", "path", r->path, "bytes", (json_int_t)r->bytes));
}

void crl_h_files_cleanup(struct crl_req *r)
{
    if (r->route.ep != CRL_EP_FILES)
        return;
    if (r->w.active)
        crl_watch_stop(r->api->host->loop, &r->w);
    if (r->fd >= 0) {
        close(r->fd);
        if (r->tar.data_fd == r->fd)
            r->tar.data_fd = -1;
        r->fd = -1;
    }
    if (r->tar.data_fd >= 0) {
        close(r->tar.data_fd);
        r->tar.data_fd = -1;
    }
}

void crl_h_files_drained(struct crl_req *r)
{
    if (r->route.ep == CRL_EP_FILES && !r->tar.in)
        tar_out_drained(r);
}
