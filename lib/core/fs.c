#include "fs.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../helper/stream.h"
#include "../util/buf.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

/* One operation or watch: its stream through the backend, what it read. */
struct fsop {
    struct crl_stream_req t;
    struct crl_sandbox *sb;
    char *arg;
    bool watch;
    struct crl_watch w;
    struct crl_buf data; /* a call's answer; a watch's line in progress */
    bool running, cancelled, held, over;
    crl_fs_done_fn done;
    const struct crl_fs_watch_cbs *cbs;
    void *ctx;
};

int crl_fs_error(int code, const char *msg, struct crl_err *err)
{
    switch (code) {
    case CRL_STREAM_OK: return 0;
    case CRL_STREAM_NOENT: return crl_err_set(err, CRL_E_NOT_FOUND, "%s", msg);
    case CRL_STREAM_NOTDIR:
    case CRL_STREAM_ISDIR:
    case CRL_STREAM_BAD_INPUT: return crl_err_set(err, CRL_E_INVALID, "%s", msg);
    case CRL_STREAM_DENIED: return crl_err_set(err, CRL_E_FORBIDDEN, "%s", msg);
    case CRL_STREAM_NOSPACE: return crl_err_set(err, CRL_E_NO_SPACE, "%s (disk_mb)", msg);
    case CRL_STREAM_GONE: return crl_err_set(err, CRL_E_CONFLICT, "the sandbox ended meanwhile");
    default:
        if (code >= 128)
            return crl_err_set(err, CRL_E_CONFLICT, "the operation was killed (signal %d)%s%s",
                               code - 128, msg[0] ? ": " : "", msg);
        return crl_err_set(err, CRL_E_INTERNAL, "%s", msg[0] ? msg : "the operation failed");
    }
}

static void op_free(struct fsop *o)
{
    struct crl_sandbox *sb = o->sb;
    crl_watch_stop(sb->owner->loop, &o->w);
    close_fd(&o->t.data_fd);
    close_fd(&o->t.msg_fd);
    crl_buf_free(&o->data);
    free(o->arg);
    free(o);
    crl_sandbox_unref(sb);
}

/* An event line from the sandbox, checked and built again. */
static json_t *event_of(const char *line, size_t len)
{
    static const char *const types[] = {"create", "write",    "remove", "rename",
                                        "chmod",  "overflow", "ready"};
    json_error_t je;
    json_auto_t *in = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    const char *type = json_string_value(json_object_get(in, "type"));
    bool known = false;
    for (size_t i = 0; type && i < CRL_ARRAY_SIZE(types); i++)
        known |= strcmp(type, types[i]) == 0;
    if (!known)
        return NULL;
    json_t *out = json_pack("{s:s}", "type", type);
    static const char *const keys[] = {"path", "dir", "from"};
    for (size_t i = 0; out && i < CRL_ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(in, keys[i]);
        if (json_is_string(v) && json_string_value(v)[0] == '/')
            json_object_set(out, keys[i], v);
    }
    if (json_is_boolean(json_object_get(in, "recursive")))
        json_object_set(out, "recursive", json_object_get(in, "recursive"));
    return out;
}

/* A watch's complete lines, each an event for the client. */
static void lines(struct fsop *o)
{
    char *nl;
    size_t used = 0;
    while (!o->cancelled && (nl = memchr(o->data.data + used, '\n', o->data.len - used))) {
        size_t n = (size_t)(nl - (o->data.data + used));
        json_t *ev = event_of(o->data.data + used, n);
        if (ev)
            o->cbs->event(o->ctx, ev);
        else
            crl_warn(o->sb->id, "watch of %s: a malformed event dropped", o->arg);
        json_decref(ev);
        used += n + 1;
    }
    crl_buf_consume(&o->data, used);
    if (o->data.len > CRL_FS_MAX_EVENT) { /* no line that long is ours */
        crl_warn(o->sb->id, "watch of %s: an event over %u bytes dropped", o->arg,
                 CRL_FS_MAX_EVENT);
        crl_buf_consume(&o->data, o->data.len);
    }
}

/* Read what there is, `turns` reads at most; false at its end. */
static bool pump(struct fsop *o, int turns)
{
    char buf[65536];
    for (int turn = 0; turn < turns; turn++) {
        ssize_t n = read(o->t.data_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        if (n <= 0)
            return false;
        if (!o->watch && o->data.len + (size_t)n > CRL_FS_MAX_ANSWER) {
            o->over = true;
            return false;
        }
        if (crl_buf_append(&o->data, buf, (size_t)n) < 0)
            return false;
        if (o->watch)
            lines(o);
    }
    return true;
}

static void on_data(struct crl_watch *w, uint32_t ev)
{
    struct fsop *o = w->data;
    if (!pump(o, 16)) { /* 1 MiB a turn of the loop at most */
        crl_watch_stop(o->sb->owner->loop, &o->w);
        close_fd(&o->t.data_fd);
    }
}

static void started(struct crl_stream_req *t, const struct crl_err *err)
{
    struct fsop *o = t->ctx;
    if (err) {
        if (!o->cancelled && o->watch)
            o->cbs->ended(o->ctx, err);
        else if (!o->cancelled)
            o->done(o->ctx, NULL, err);
        op_free(o);
        return;
    }
    o->running = true;
    crl_set_nonblock(o->t.data_fd, 1);
    if (o->cancelled) {
        close_fd(&o->t.data_fd); /* its helper sees its reader gone */
        if (o->watch && o->sb->ops->stream_cancel)
            o->sb->ops->stream_cancel(o->sb, &o->t);
        return;
    }
    crl_watch_start(o->sb->owner->loop, &o->w, o->t.data_fd, o->held ? 0 : EPOLLIN, on_data, o);
    if (o->watch && o->cbs->started)
        o->cbs->started(o->ctx);
}

static void finished(struct crl_stream_req *t, int code)
{
    struct fsop *o = t->ctx;
    char msg[600] = "";
    /* Its writer is gone: what is left is all there, up to the end. */
    if (o->t.data_fd >= 0 && !o->cancelled && !o->held)
        pump(o, INT32_MAX);
    if (o->t.msg_fd >= 0) {
        ssize_t n = read(o->t.msg_fd, msg, sizeof(msg) - 1);
        msg[n > 0 ? n : 0] = 0;
        msg[strcspn(msg, "\n")] = 0;
    }
    if (!o->cancelled) {
        struct crl_err err = CRL_ERR_INIT;
        if (o->watch) {
            o->cbs->ended(o->ctx, crl_fs_error(code, msg, &err) < 0 ? &err : NULL);
        } else if (crl_fs_error(code, msg, &err) < 0) {
            o->done(o->ctx, NULL, &err);
        } else if (o->over) {
            crl_err_set(&err, CRL_E_TOO_LARGE, "the answer is over %u MiB",
                        CRL_FS_MAX_ANSWER >> 20);
            o->done(o->ctx, NULL, &err);
        } else {
            json_error_t je;
            json_t *a = json_loadb(o->data.data ? o->data.data : "", o->data.len,
                                   JSON_REJECT_DUPLICATES, &je);
            if (!json_is_object(a)) {
                json_decref(a);
                a = NULL;
                crl_err_set(&err, CRL_E_INTERNAL, "the sandbox's answer is not a JSON object");
            }
            o->done(o->ctx, a, a ? NULL : &err);
        }
    }
    op_free(o);
}

static struct fsop *op_start(struct crl_sandbox *sb, enum crl_stream_kind kind, char *arg,
                             uid_t uid, gid_t gid, struct crl_err *err)
{
    if (!arg) {
        crl_err_sys(err, ENOMEM, "a filesystem request");
        return NULL;
    }
    if (crl_sandbox_check_ready(sb, err) < 0 || !sb->ops->stream) {
        if (!err->code)
            crl_err_set(err, CRL_E_UNSUPPORTED, "the %s backend has no filesystem API",
                        sb->ops->name);
        free(arg);
        return NULL;
    }
    struct fsop *o = calloc(1, sizeof(*o));
    if (!o) {
        free(arg);
        crl_err_sys(err, ENOMEM, "a filesystem request");
        return NULL;
    }
    o->sb = sb;
    crl_sandbox_ref(sb);
    o->arg = arg;
    o->watch = kind == CRL_STREAM_WATCH;
    crl_buf_init(&o->data, CRL_BUF_UNBOUNDED);
    o->t = (struct crl_stream_req){.kind = kind,
                                   .path = arg,
                                   .uid = uid,
                                   .gid = gid,
                                   .data_fd = -1,
                                   .msg_fd = -1,
                                   .started = started,
                                   .done = finished,
                                   .ctx = o};
    return o;
}

static int op_run(struct fsop *o, struct crl_err *err)
{
    if (o->sb->ops->stream(o->sb, &o->t, err) < 0) {
        o->t.data_fd = o->t.msg_fd = -1;
        op_free(o);
        return -1;
    }
    crl_sandbox_touch(o->sb);
    return 0;
}

struct crl_fs_call *crl_fs_call(struct crl_sandbox *sb, json_t *request, uid_t uid, gid_t gid,
                                crl_fs_done_fn done, void *ctx, struct crl_err *err)
{
    struct fsop *o = op_start(sb, CRL_STREAM_FS, json_dumps(request, JSON_COMPACT), uid, gid, err);
    if (!o)
        return NULL;
    o->done = done;
    o->ctx = ctx;
    return op_run(o, err) < 0 ? NULL : (struct crl_fs_call *)o;
}

void crl_fs_call_cancel(struct crl_fs_call *c)
{
    struct fsop *o = (struct fsop *)c;
    o->cancelled = true; /* it is quick: it ends, and its end frees it */
}

struct crl_fs_watch *crl_fs_watch(struct crl_sandbox *sb, const char *path, bool recursive,
                                  uid_t uid, gid_t gid, const struct crl_fs_watch_cbs *cbs,
                                  void *ctx, struct crl_err *err)
{
    struct fsop *o = op_start(sb, CRL_STREAM_WATCH, strdup(path), uid, gid, err);
    if (!o)
        return NULL;
    o->t.recursive = recursive;
    o->cbs = cbs;
    o->ctx = ctx;
    return op_run(o, err) < 0 ? NULL : (struct crl_fs_watch *)o;
}

void crl_fs_watch_hold(struct crl_fs_watch *w, bool hold)
{
    struct fsop *o = (struct fsop *)w;
    o->held = hold;
    if (o->running && o->t.data_fd >= 0)
        crl_watch_modify(o->sb->owner->loop, &o->w, hold ? 0 : EPOLLIN);
}

void crl_fs_watch_stop(struct crl_fs_watch *w)
{
    struct fsop *o = (struct fsop *)w;
    o->cancelled = true;
    if (!o->running)
        return; /* its start closes it */
    crl_watch_stop(o->sb->owner->loop, &o->w);
    close_fd(&o->t.data_fd);
    if (o->sb->ops->stream_cancel)
        o->sb->ops->stream_cancel(o->sb, &o->t);
}
