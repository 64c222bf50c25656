#include "qmp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../util/buf.h"

/* A command sent or waiting to be: its text and descriptor until it is
 * written, its reply callback until it is answered. */
struct cmd {
    json_int_t id;
    char name[64];
    char *text; /* NULL once written */
    size_t len, off;
    int fd; /* to pass with it, -1 for none; closed once sent */
    crl_qmp_reply_fn cb;
    void *ctx;
};

enum state { GREETING, CAPABILITIES, READY, FAILED };

struct crl_qmp {
    struct crl_loop *loop;
    int fd;
    struct crl_watch w;
    const struct crl_qmp_ops *ops;
    void *ctx;
    enum state state;
    struct crl_buf in;
    struct cmd cmds[CRL_QMP_PENDING_MAX + 1]; /* in order sent; [0] is the oldest */
    unsigned n;
    json_int_t next_id;
    char version[32];
    bool in_callback, closing; /* closed from a callback: freed when it returns */
};

json_t *crl_qmp_parse_line(const char *line, size_t len, struct crl_err *err)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n'))
        len--;
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        crl_err_set(err, CRL_E_INTERNAL, "QMP: a line that is not JSON: %s", je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        crl_err_set(err, CRL_E_INTERNAL, "QMP: a line that is not a JSON object");
        return NULL;
    }
    return j;
}

static void free_cmd(struct cmd *c)
{
    free(c->text);
    c->text = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* Answer every waiting command with err, and say the connection failed. */
static void fail(struct crl_qmp *q, const struct crl_err *err)
{
    if (q->state == FAILED)
        return;
    q->state = FAILED;
    crl_watch_stop(q->loop, &q->w);
    bool was = q->in_callback;
    q->in_callback = true;
    for (unsigned i = 0; i < q->n; i++) {
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, err->code, "QMP %s: %s", q->cmds[i].name, err->msg);
        free_cmd(&q->cmds[i]);
        if (q->cmds[i].cb && !q->closing)
            q->cmds[i].cb(q, NULL, &e, q->cmds[i].ctx);
    }
    q->n = 0;
    if (q->ops->fail && !q->closing)
        q->ops->fail(q, err, q->ctx);
    q->in_callback = was;
}

/* The connection failed for this reason. */
static void failed(struct crl_qmp *q, const char *why)
{
    struct crl_err e = CRL_ERR_INIT;
    crl_err_set(&e, CRL_E_INTERNAL, "QMP: %s", why);
    fail(q, &e);
}

/* Write what is queued, oldest first; a descriptor goes with its
 * command's first byte.  Returns -1 on a write error (the connection failed). */
static int flush(struct crl_qmp *q)
{
    bool waiting = false;
    for (unsigned i = 0; i < q->n && !waiting; i++) {
        struct cmd *c = &q->cmds[i];
        /* Before capabilities are accepted only that command goes. */
        if (!c->text || q->state == GREETING || (q->state != READY && c->id != 0))
            continue;
        while (c->off < c->len) {
            struct iovec iov = {c->text + c->off, c->len - c->off};
            char ctl[CMSG_SPACE(sizeof(int))];
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
            if (c->fd >= 0) {
                memset(ctl, 0, sizeof(ctl));
                m.msg_control = ctl;
                m.msg_controllen = sizeof(ctl);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &c->fd, sizeof(int));
            }
            ssize_t w = sendmsg(q->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                waiting = errno == EAGAIN;
                if (waiting)
                    break;
                continue;
            }
            if (w < 0) {
                failed(q, errno == EPIPE ? "writing to QEMU: it closed the connection"
                                         : "writing to QEMU failed");
                return -1;
            }
            if (c->fd >= 0) {
                close(c->fd);
                c->fd = -1;
            }
            c->off += (size_t)w;
        }
        if (c->off == c->len) {
            free(c->text);
            c->text = NULL;
        }
    }
    crl_watch_modify(q->loop, &q->w, EPOLLIN | (waiting ? EPOLLOUT : 0));
    return 0;
}

static int queue(struct crl_qmp *q, const char *command, json_t *args, int fd, crl_qmp_reply_fn cb,
                 void *ctx, struct crl_err *err)
{
    if (q->state == FAILED) {
        json_decref(args);
        return crl_err_set(err, CRL_E_UNAVAILABLE, "QMP %s: the connection to QEMU failed",
                           command);
    }
    if (q->n >= CRL_QMP_PENDING_MAX + (q->state != READY)) {
        json_decref(args);
        return crl_err_set(err, CRL_E_CAPACITY, "QMP %s: %u commands are waiting already", command,
                           q->n);
    }
    struct cmd *c = &q->cmds[q->n];
    memset(c, 0, sizeof(*c));
    c->id = q->next_id++;
    c->fd = -1;
    snprintf(c->name, sizeof(c->name), "%s", command);
    json_t *msg = json_pack("{s:s, s:I}", "execute", command, "id", c->id);
    if (msg && args)
        json_object_set(msg, "arguments", args);
    json_decref(args);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text)
        return crl_err_sys(err, ENOMEM, "QMP %s", command);
    size_t len = strlen(text);
    c->text = realloc(text, len + 2);
    if (!c->text) {
        free(text);
        return crl_err_sys(err, ENOMEM, "QMP %s", command);
    }
    memcpy(c->text + len, "\n", 2);
    c->len = len + 1;
    if (fd >= 0 && (c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        free(c->text);
        return crl_err_sys(err, errno, "QMP %s: dup the descriptor to pass", command);
    }
    c->cb = cb;
    c->ctx = ctx;
    q->n++;
    return flush(q) < 0
               ? crl_err_set(err, CRL_E_UNAVAILABLE, "QMP %s: the connection failed", command)
               : 0;
}

int crl_qmp_command(struct crl_qmp *q, const char *command, json_t *args, int fd,
                    crl_qmp_reply_fn cb, void *ctx, struct crl_err *err)
{
    return queue(q, command, args, fd, cb, ctx, err);
}

static void caps_done(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    if (err)
        return; /* the connection failed: ops->fail says so */
    q->state = READY;
    if (q->ops->ready)
        q->ops->ready(q, q->ctx);
    if (q->state == READY && !q->closing)
        flush(q);
}

static void greeting(struct crl_qmp *q, json_t *msg)
{
    json_t *v = json_object_get(json_object_get(json_object_get(msg, "QMP"), "version"), "qemu");
    if (!json_is_object(json_object_get(msg, "QMP")) || !json_is_object(v)) {
        failed(q, "the first line is not QEMU's greeting");
        return;
    }
    snprintf(q->version, sizeof(q->version), "%lld.%lld.%lld",
             (long long)json_integer_value(json_object_get(v, "major")),
             (long long)json_integer_value(json_object_get(v, "minor")),
             (long long)json_integer_value(json_object_get(v, "micro")));
    q->state = CAPABILITIES;
    flush(q); /* qmp_capabilities, queued first with id 0 */
}

static void answer(struct crl_qmp *q, json_t *msg)
{
    json_t *id = json_object_get(msg, "id"), *ret = json_object_get(msg, "return"),
           *error = json_object_get(msg, "error");
    /* QEMU answers in order: the oldest written command is this one. */
    if (!q->n || q->cmds[0].text || !json_is_integer(id) ||
        json_integer_value(id) != q->cmds[0].id || (!ret && !json_is_object(error))) {
        failed(q, "an answer to no command of ours");
        return;
    }
    struct cmd c = q->cmds[0];
    memmove(&q->cmds[0], &q->cmds[1], (q->n - 1) * sizeof(q->cmds[0]));
    q->n--;
    struct crl_err e = CRL_ERR_INIT;
    if (!ret) {
        const char *cls = json_string_value(json_object_get(error, "class"));
        const char *desc = json_string_value(json_object_get(error, "desc"));
        crl_err_set(&e, CRL_E_INTERNAL, "QMP %s: %s: %s", c.name, cls ? cls : "Error",
                    desc ? desc : "(no description)");
    }
    if (c.cb)
        c.cb(q, ret, ret ? NULL : &e, c.ctx);
}

static void dispatch(struct crl_qmp *q, json_t *msg)
{
    if (q->state == GREETING) {
        greeting(q, msg);
        return;
    }
    const char *event = json_string_value(json_object_get(msg, "event"));
    if (event) {
        if (q->ops->event)
            q->ops->event(q, event, json_object_get(msg, "data"), q->ctx);
        return;
    }
    answer(q, msg);
}

static void on_io(struct crl_watch *w, uint32_t events)
{
    struct crl_qmp *q = w->data;
    q->in_callback = true;
    if ((events & EPOLLOUT) && flush(q) < 0)
        goto out;
    for (int rounds = 0; rounds < 16 && q->state != FAILED && !q->closing; rounds++) {
        char buf[16384];
        ssize_t r = recv(q->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (r <= 0) {
            failed(q, r == 0 || errno == ECONNRESET ? "QEMU closed the connection"
                                                    : "reading from QEMU failed");
            break;
        }
        if (crl_buf_append(&q->in, buf, (size_t)r) < 0 || crl_buf_truncated(&q->in)) {
            failed(q, "a line over 1 MiB");
            break;
        }
        char *nl;
        while (q->state != FAILED && !q->closing && q->in.len &&
               (nl = memchr(q->in.data, '\n', q->in.len))) {
            size_t n = (size_t)(nl - q->in.data) + 1;
            struct crl_err e = CRL_ERR_INIT;
            json_t *msg = crl_qmp_parse_line(q->in.data, n, &e);
            crl_buf_consume(&q->in, n);
            if (!msg) {
                fail(q, &e);
                break;
            }
            dispatch(q, msg);
            json_decref(msg);
        }
    }
out:
    q->in_callback = false;
    if (q->closing)
        crl_qmp_close(q);
}

int crl_qmp_open(struct crl_loop *loop, int fd, const struct crl_qmp_ops *ops, void *ctx,
                 struct crl_qmp **out, struct crl_err *err)
{
    struct crl_qmp *q = calloc(1, sizeof(*q));
    if (!q)
        return crl_err_sys(err, ENOMEM, "QMP");
    q->loop = loop;
    q->fd = fd;
    q->ops = ops;
    q->ctx = ctx;
    crl_buf_init(&q->in, CRL_QMP_LINE_MAX);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        crl_watch_start(loop, &q->w, fd, EPOLLIN, on_io, q) < 0) {
        crl_err_sys(err, errno, "QMP: watch the socket");
        crl_buf_free(&q->in);
        free(q);
        return -1;
    }
    /* Queued now, written once the greeting is in. */
    if (queue(q, "qmp_capabilities", NULL, -1, caps_done, NULL, err) < 0) {
        crl_watch_stop(loop, &q->w);
        crl_buf_free(&q->in);
        free(q);
        return -1;
    }
    *out = q;
    return 0;
}

void crl_qmp_close(struct crl_qmp *q)
{
    if (!q)
        return;
    q->closing = true;
    if (q->in_callback)
        return; /* freed when the callback returns */
    if (q->state != FAILED) {
        /* The waiting commands hear of it; nothing else runs. */
        q->closing = false;
        q->in_callback = true;
        struct crl_err e = CRL_ERR_INIT;
        crl_err_set(&e, CRL_E_UNAVAILABLE, "closed");
        static const struct crl_qmp_ops none;
        q->ops = &none;
        fail(q, &e);
    }
    crl_watch_stop(q->loop, &q->w);
    for (unsigned i = 0; i < q->n; i++)
        free_cmd(&q->cmds[i]);
    close(q->fd);
    crl_buf_free(&q->in);
    free(q);
}

bool crl_qmp_ready(const struct crl_qmp *q)
{
    return q->state == READY;
}

const char *crl_qmp_version(const struct crl_qmp *q)
{
    return q->version;
}
