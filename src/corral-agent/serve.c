/* The agent's one event loop: the host's byte stream, every exec's pipes,
 * a signalfd for SIGCHLD (and SIGIO: the host came or went), and the files
 * being transferred.
 *
 * Output to the host is queued in one buffer (`out`) written as the port
 * takes it; nothing is read from a pipe or a file while that buffer is
 * over OUT_HIGH, and nothing past a stream's send window (struct
 * crl_agent_window), so a slow host costs the guest at most OUT_HIGH plus
 * a frame.  STDIN and DATA the host sends are bounded by the windows this
 * end grants: a CREDIT goes back as the bytes reach the pipe or the file. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/agent/proto.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../../lib/util/log.h"
#include "../../lib/util/path.h"
#include "serve_int.h"

/* ---- output ---- */

int crl_ga_queue(struct agent *a, uint16_t type, uint32_t stream, const void *p, uint32_t len,
                 struct crl_err *err)
{
    size_t at = a->out.len;
    if (crl_buf_append(&a->out, "\0\0\0\0\0\0\0\0\0\0\0\0", CRL_AGENT_HEADER_SIZE) < 0 ||
        (len && crl_buf_append(&a->out, p, len) < 0))
        return crl_err_sys(err, ENOMEM, "queueing a frame of %u bytes", len);
    struct crl_agent_frame f = {.type = type, .stream = stream, .len = len, .payload = p};
    if (crl_agent_frame_check(CRL_AGENT_SIDE_GUEST, &f, err) < 0) {
        a->out.len = at;
        return -1;
    }
    crl_agent_put_header((uint8_t *)a->out.data + at, type, stream, len);
    return 0;
}

int crl_ga_queue_json(struct agent *a, uint16_t type, uint32_t stream, char *json, size_t len,
                      struct crl_err *err)
{
    int r = crl_ga_queue(a, type, stream, json, (uint32_t)len, err);
    free(json);
    return r;
}

/* What the messages take as text: UTF-8 (a cut may have split a
 * character) without control characters. */
static void text_clean(char *s)
{
    crl_utf8_sanitize(s);
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = ' ';
}

/* ERROR on a stream (or on 0: the agent is about to hang up). */
int crl_ga_send_error(struct agent *a, uint32_t stream, const char *msg, struct crl_err *err)
{
    struct crl_agent_error m;
    snprintf(m.message, sizeof(m.message), "%s", msg);
    text_clean(m.message);
    char *j;
    size_t n;
    if (crl_agent_build_error(&m, &j, &n, err) < 0)
        return -1;
    return crl_ga_queue_json(a, CRL_AGENT_ERROR, stream, j, n, err);
}

int crl_ga_send_result(struct agent *a, uint32_t stream, int errnum, const char *msg,
                       struct crl_err *err)
{
    struct crl_agent_result m = {.ok = msg == NULL, .error_no = errnum};
    if (msg) {
        snprintf(m.error, sizeof(m.error), "%s", msg);
        text_clean(m.error);
    }
    char *j;
    size_t n;
    if (crl_agent_build_result(&m, &j, &n, err) < 0)
        return -1;
    return crl_ga_queue_json(a, CRL_AGENT_RESULT, stream, j, n, err);
}

int crl_ga_send_credit(struct agent *a, struct stream *s, bool force, struct crl_err *err)
{
    if (s->ungranted == 0 || (!force && s->ungranted < GRANT_AT))
        return 0;
    if (crl_agent_window_grant(&s->win, s->ungranted, err) < 0)
        return -1;
    uint8_t f[CRL_AGENT_CREDIT_FRAME_SIZE];
    crl_agent_encode_credit(f, s->id, s->ungranted);
    s->ungranted = 0;
    if (crl_buf_append(&a->out, f, sizeof(f)) < 0)
        return crl_err_sys(err, ENOMEM, "queueing a CREDIT");
    return 0;
}

/* Write what the port takes.  0, or -1 with errno (EPIPE: the host left). */
static int flush_some(struct agent *a)
{
    while (a->out.len > 0) {
        ssize_t n = write(a->port, a->out.data, a->out.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n < 0)
            return -1;
        crl_buf_consume(&a->out, (size_t)n);
    }
    return 0;
}

/* ---- streams ---- */

static struct stream *find(struct agent *a, uint32_t id)
{
    for (struct stream *s = a->streams; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

struct stream *crl_ga_stream_new(struct agent *a, uint32_t id, enum kind kind)
{
    struct stream *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->id = id;
    s->kind = kind;
    s->out[0] = s->out[1] = s->in = s->fd = s->leaf = s->tty = -1;
    crl_buf_init(&s->in_buf, CRL_BUF_UNBOUNDED);
    crl_agent_window_init(&s->win);
    s->next = a->streams;
    a->streams = s;
    a->n_streams++;
    return s;
}

/* Forget a stream; an exec's process group is killed first if it runs
 * (its child is reaped, unclaimed, by the SIGCHLD handler). */
void crl_ga_stream_drop(struct agent *a, struct stream *s)
{
    for (struct stream **pp = &a->streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    a->n_streams--;
    if (s->kind == K_EXEC && s->pid > 0)
        kill(-s->pid, SIGKILL);
    close_fd(&s->out[0]);
    close_fd(&s->out[1]);
    close_fd(&s->in);
    close_fd(&s->fd);
    close_fd(&s->leaf);
    close_fd(&s->tty);
    crl_buf_free(&s->in_buf);
    free(s);
}

/* A stream the host's frame broke: ERROR on it, then it is gone. */
int crl_ga_stream_fail(struct agent *a, struct stream *s, uint32_t id, const char *msg,
                       struct crl_err *err)
{
    crl_warn(NULL, "stream %u: %s", id, msg);
    if (s)
        crl_ga_stream_drop(a, s);
    return crl_ga_send_error(a, id, msg, err);
}

/* ---- the host's frames ---- */

static int send_hello(struct agent *a, struct crl_err *err)
{
    struct crl_agent_hello h = {.proto = CRL_AGENT_PROTO_VERSION};
    struct utsname u;
    snprintf(h.agent, sizeof(h.agent), "%s", CRL_GA_VERSION);
    snprintf(h.kernel, sizeof(h.kernel), "%s", uname(&u) == 0 ? u.release : "unknown");
    char *j;
    size_t n;
    if (crl_agent_build_hello(&h, &j, &n, err) < 0)
        return -1;
    return crl_ga_queue_json(a, CRL_AGENT_HELLO, 0, j, n, err);
}

static void drop_all(struct agent *a);

static int do_config(struct agent *a, const struct crl_agent_frame *f, struct crl_err *err)
{
    struct crl_agent_config *c = calloc(1, sizeof(*c));
    if (!c)
        return crl_err_sys(err, ENOMEM, "CONFIG");
    int r = crl_agent_parse_config(f->payload, f->len, c, err);
    if (r == 0 && a->o->pid1)
        r = crl_ga_init_config(c, !a->configured, err);
    else if (r == 0 && a->o->service)
        r = crl_ga_service_config(c, err);
    /* PID 1 of a full system hands over to its init once READY is out. */
    static char init[CRL_AGENT_MAX_PATH + 1];
    bool handover = r == 0 && a->o->pid1 && !a->configured && c->init[0];
    if (handover)
        snprintf(init, sizeof(init), "%s", c->init);
    explicit_bzero(c->seed, sizeof(c->seed));
    free(c);
    if (r < 0)
        return -1; /* a guest that cannot take its config cannot serve */
    if (a->o->pid1 && !a->configured) {
        /* The root moved: files are resolved in the new one. */
        close_fd(&a->rootfd);
        a->rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (a->rootfd < 0)
            return crl_err_sys(err, errno, "open the new root");
    }
    a->configured = true;
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    struct crl_agent_ready m = {.uptime_ms = ts.tv_sec * 1000 + ts.tv_nsec / 1000000};
    char *j;
    size_t n;
    if (crl_agent_build_ready(&m, &j, &n, err) < 0 ||
        crl_ga_queue_json(a, CRL_AGENT_READY, 0, j, n, err) < 0)
        return -1;
    if (!handover)
        return 0;
    /* The host hears READY before the port closes: then it waits for the
     * service's HELLO.  What it sent meanwhile is the new agent's. */
    crl_set_nonblock(a->port, 0);
    while (a->out.len)
        if (flush_some(a) < 0)
            return crl_err_sys(err, errno, "READY before the hand-over");
    close_fd(&a->port);
    drop_all(a);
    crl_ga_reap(a);
    return crl_ga_exec_init(init, err);
}

/* A frame on a stream that is not open: late STDIN, CREDIT, SIGNAL,
 * RESIZE or DATA for one that just ended is a race, not an error. */
static bool late(uint16_t type)
{
    return type == CRL_AGENT_STDIN || type == CRL_AGENT_CREDIT || type == CRL_AGENT_SIGNAL ||
           type == CRL_AGENT_DATA || type == CRL_AGENT_ERROR || type == CRL_AGENT_RESIZE;
}

static int on_stream_frame(struct agent *a, const struct crl_agent_frame *f, struct crl_err *err)
{
    struct stream *s = find(a, f->stream);
    char msg[160], tn[16];
    const char *name = crl_agent_type_name(f->type, tn, sizeof(tn));
    struct crl_err perr = CRL_ERR_INIT;
    if (f->type == CRL_AGENT_EXEC || f->type == CRL_AGENT_FILE_GET ||
        f->type == CRL_AGENT_FILE_PUT) {
        if (s) {
            snprintf(msg, sizeof(msg), "%s on stream %u, which is open", name, f->stream);
            return crl_ga_stream_fail(a, s, f->stream, msg, err);
        }
        if (!a->configured)
            return crl_ga_stream_fail(a, NULL, f->stream, "the agent has had no CONFIG yet", err);
        if (a->n_streams >= MAX_STREAMS) {
            snprintf(msg, sizeof(msg), "%zu streams are open, the most this agent serves",
                     a->n_streams);
            return crl_ga_stream_fail(a, NULL, f->stream, msg, err);
        }
        return f->type == CRL_AGENT_EXEC ? crl_ga_exec_start(a, f->stream, f, err)
                                         : crl_ga_file_start(a, f->stream, f, err);
    }
    if (!s)
        return late(f->type)
                   ? 0
                   : crl_ga_stream_fail(a, NULL, f->stream, "a frame on a stream not open", err);
    if (crl_agent_window_received(&s->win, f, &perr) < 0)
        return crl_ga_stream_fail(a, s, f->stream, perr.msg, err);
    switch (f->type) {
    case CRL_AGENT_CREDIT:
        if (crl_agent_window_credit(&s->win, f, &perr) < 0)
            return crl_ga_stream_fail(a, s, f->stream, perr.msg, err);
        return 0;
    case CRL_AGENT_ERROR:
        crl_info(NULL, "stream %u: the host abandoned it", f->stream);
        crl_ga_stream_drop(a, s);
        return 0;
    case CRL_AGENT_STDIN:
        if (s->kind != K_EXEC || !s->has_stdin || s->in_eof) {
            snprintf(msg, sizeof(msg), "STDIN on stream %u, %s", f->stream,
                     s->kind != K_EXEC ? "which is not an exec"
                     : !s->has_stdin   ? "whose EXEC did not ask for stdin"
                                       : "after its end");
            return crl_ga_stream_fail(a, s, f->stream, msg, err);
        }
        if (f->len == 0) {
            s->in_eof = true;
        } else if (crl_buf_append(&s->in_buf, f->payload, f->len) < 0) {
            return crl_err_sys(err, ENOMEM, "STDIN of %u bytes", f->len);
        }
        return crl_ga_exec_stdin(a, s, err);
    case CRL_AGENT_SIGNAL: {
        struct crl_agent_signal m;
        if (s->kind != K_EXEC)
            return crl_ga_stream_fail(a, s, f->stream, "SIGNAL on a stream that is not an exec",
                                      err);
        if (crl_agent_parse_signal(f->payload, f->len, &m, &perr) < 0)
            return crl_ga_stream_fail(a, s, f->stream, perr.msg, err);
        if (s->pid > 0)
            crl_ga_exec_signal(s, &m);
        return 0;
    }
    case CRL_AGENT_RESIZE: {
        struct crl_agent_resize m;
        if (s->kind != K_EXEC || s->tty < 0)
            return crl_ga_stream_fail(a, s, f->stream, "RESIZE on a stream without a terminal",
                                      err);
        if (crl_agent_parse_resize(f->payload, f->len, &m, &perr) < 0)
            return crl_ga_stream_fail(a, s, f->stream, perr.msg, err);
        struct winsize ws = {.ws_row = (unsigned short)m.rows, .ws_col = (unsigned short)m.cols};
        if (ioctl(s->tty, TIOCSWINSZ, &ws) < 0)
            crl_warn(NULL, "stream %u: resizing its terminal: %s", f->stream, strerror(errno));
        return 0;
    }
    case CRL_AGENT_DATA:
        if (s->kind != K_PUT)
            return crl_ga_stream_fail(a, s, f->stream, "DATA on a stream that is not a FILE_PUT",
                                      err);
        return crl_ga_file_data(a, s, f, err);
    default:
        snprintf(msg, sizeof(msg), "%s is not a frame the agent takes on a stream", name);
        return crl_ga_stream_fail(a, s, f->stream, msg, err);
    }
}

/* 1: go on; 0: the host ended the session; -1: *err. */
static int on_frame(struct agent *a, const struct crl_agent_frame *f, struct crl_err *err)
{
    if (f->stream != 0)
        return on_stream_frame(a, f, err) < 0 ? -1 : 1;
    switch (f->type) {
    case CRL_AGENT_CONFIG: return do_config(a, f, err) < 0 ? -1 : 1;
    case CRL_AGENT_PING: {
        uint8_t p[CRL_AGENT_PING_FRAME_SIZE];
        crl_agent_encode_ping(p, CRL_AGENT_PONG, crl_agent_frame_u64(f));
        return crl_buf_append(&a->out, p, sizeof(p)) < 0 ? crl_err_sys(err, ENOMEM, "PONG") : 1;
    }
    case CRL_AGENT_PONG: return 1;
    case CRL_AGENT_BYE: return 0;
    case CRL_AGENT_ERROR: {
        struct crl_agent_error m;
        struct crl_err perr = CRL_ERR_INIT;
        if (crl_agent_parse_error(f->payload, f->len, &m, &perr) == 0)
            crl_warn(NULL, "the host hangs up: %s", m.message);
        return 0;
    }
    default: {
        char tn[16];
        return crl_err_set(err, CRL_E_INVALID, "%s on stream 0 is not for the agent",
                           crl_agent_type_name(f->type, tn, sizeof(tn)));
    }
    }
}

/* Feed what the port gave; 1: go on, 0: the host ended it, -1: *err (the
 * host broke the protocol, or the agent cannot go on). */
static int on_input(struct agent *a, const uint8_t *p, size_t len, struct crl_err *err)
{
    size_t off = 0;
    for (;;) {
        off += crl_agent_dec_feed(&a->dec, p + off, len - off);
        struct crl_agent_frame f;
        int r;
        while ((r = crl_agent_dec_next(&a->dec, &f, err)) == 1) {
            int g = on_frame(a, &f, err);
            if (g <= 0)
                return g;
        }
        if (r < 0)
            return -1;
        if (off == len)
            return 1;
    }
}

/* ---- the loop ---- */

static void drop_all(struct agent *a)
{
    while (a->streams)
        crl_ga_stream_drop(a, a->streams);
}

/* PID 1's port: is the host's end open?  Closed, the port polls as hung up
 * and reads end of file until someone connects (a restored guest's host
 * connects after the restore). */
static bool host_connected(int port)
{
    struct pollfd p = {.fd = port, .events = POLLOUT};
    return poll(&p, 1, 0) >= 0 && !(p.revents & POLLHUP);
}

/* virtio_console sends SIGIO to the port's owner when the host opens or
 * closes its end (and when data comes: so only while the host is away), so
 * a guest waiting for its host need not poll. */
static void port_async(struct agent *a, bool on)
{
    int fl = fcntl(a->port, F_GETFL);
    a->sigio = on && fl >= 0 && fcntl(a->port, F_SETOWN, getpid()) == 0 &&
               fcntl(a->port, F_SETFL, fl | O_ASYNC) == 0;
    if (!on && fl >= 0)
        fcntl(a->port, F_SETFL, fl & ~O_ASYNC);
}

/* The host went away (PID 1): what it opened is over; a new host gets a
 * new HELLO. */
static int disconnected(struct agent *a, struct crl_err *err)
{
    crl_info(NULL, "the host closed the port");
    a->connected = false;
    port_async(a, true);
    drop_all(a);
    crl_buf_consume(&a->out, a->out.len);
    crl_agent_dec_free(&a->dec);
    return crl_agent_dec_init(&a->dec, CRL_AGENT_SIDE_GUEST, err);
}

static int loop(struct agent *a, struct crl_err *err)
{
    struct pollfd *pfd = NULL;
    size_t cap = 0;
    int ret = -1;
    for (;;) {
        if (crl_ga_reconnects(a->o) && !a->connected && host_connected(a->port)) {
            a->connected = true;
            port_async(a, false);
            crl_info(NULL, "the host opened the port");
            if (send_hello(a, err) < 0)
                goto out;
        }
        if (a->done && a->out.len == 0) {
            ret = 0;
            goto out;
        }
        size_t need = 2 + 3 * a->n_streams;
        if (need > cap) {
            struct pollfd *n = realloc(pfd, need * sizeof(*pfd));
            if (!n) {
                crl_err_sys(err, ENOMEM, "poll set");
                goto out;
            }
            pfd = n;
            cap = need;
        }
        size_t np = 0;
        bool producing = a->out.len < OUT_HIGH && !a->done;
        int timeout = -1;
        pfd[np++] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
        if (a->connected)
            pfd[np++] = (struct pollfd){
                .fd = a->port,
                .events = (short)((a->done ? 0 : POLLIN) | (a->out.len ? POLLOUT : 0))};
        else
            /* Look for the host again: at SIGIO, or now and then in case
             * the signal is lost (and often without it). */
            timeout = a->sigio ? 1000 : 20;
        for (struct stream *s = a->streams; s; s = s->next) {
            if (s->kind == K_EXEC) {
                for (int i = 0; i < 2; i++)
                    if (s->out[i] >= 0 && producing && s->win.send > 0)
                        pfd[np++] = (struct pollfd){.fd = s->out[i], .events = POLLIN};
                if (s->in >= 0 && s->in_buf.len > 0)
                    pfd[np++] = (struct pollfd){.fd = s->in, .events = POLLOUT};
            } else if (s->kind == K_GET && producing && s->win.send > 0) {
                timeout = 0; /* a regular file is always readable */
            }
        }
        int n = poll(pfd, (nfds_t)np, timeout);
        if (n < 0 && errno != EINTR) {
            crl_err_sys(err, errno, "poll");
            goto out;
        }
        if (n < 0)
            continue;
        /* Which fds are ready, by fd: the streams' list may change below. */
        for (size_t i = 0; i < np; i++) {
            if (!pfd[i].revents)
                continue;
            int fd = pfd[i].fd;
            if (fd == a->sigfd) {
                struct signalfd_siginfo si;
                while (read(a->sigfd, &si, sizeof(si)) > 0)
                    ;
                crl_ga_reap(a);
                if (crl_ga_reconnects(a->o))
                    crl_ga_exec_tidy();
                continue;
            }
            if (fd == a->port) {
                if (pfd[i].revents & POLLOUT && flush_some(a) < 0) {
                    if (!crl_ga_reconnects(a->o)) {
                        ret = errno == EPIPE ? 0 : crl_err_sys(err, errno, "write to the host");
                        goto out;
                    }
                    if (disconnected(a, err) < 0)
                        goto out;
                    continue;
                }
                if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                uint8_t buf[CHUNK];
                ssize_t r = read(a->port, buf, sizeof(buf));
                if (r < 0 && (errno == EINTR || errno == EAGAIN))
                    continue;
                if (r <= 0 && !crl_ga_reconnects(a->o)) {
                    ret = r == 0 || errno == ECONNRESET
                              ? 0
                              : crl_err_sys(err, errno, "read from the host");
                    goto out;
                }
                if (r <= 0) {
                    if (disconnected(a, err) < 0)
                        goto out;
                    continue;
                }
                int g = on_input(a, buf, (size_t)r, err);
                if (g < 0) {
                    /* Say why before hanging up, if the port still takes it. */
                    struct crl_err e2 = CRL_ERR_INIT;
                    crl_warn(NULL, "the host broke the protocol: %s", err->msg);
                    if (crl_ga_send_error(a, 0, err->msg, &e2) == 0) {
                        crl_set_nonblock(a->port, 0);
                        flush_some(a);
                    }
                    goto out;
                }
                if (g == 0) {
                    uint8_t bye[CRL_AGENT_HEADER_SIZE];
                    crl_agent_encode_empty(bye, CRL_AGENT_BYE, 0);
                    drop_all(a);
                    crl_buf_append(&a->out, bye, sizeof(bye));
                    a->done = true;
                }
                continue;
            }
            for (struct stream *s = a->streams; s; s = s->next) {
                int r = 0;
                if (s->kind != K_EXEC)
                    continue;
                if (fd == s->out[0] || fd == s->out[1])
                    r = crl_ga_exec_output(a, s, fd == s->out[0] ? 0 : 1, err);
                else if (fd == s->in)
                    r = crl_ga_exec_stdin(a, s, err);
                else
                    continue;
                if (r < 0)
                    goto out;
                break;
            }
        }
        /* Files, and execs that have ended. */
        for (struct stream *s = a->streams, *next; s; s = next) {
            next = s->next;
            int r = 0;
            if (s->kind == K_GET && a->out.len < OUT_HIGH && !a->done)
                r = crl_ga_file_send(a, s, err);
            else if (s->kind == K_EXEC)
                r = crl_ga_exec_maybe_end(a, s, err);
            if (r < 0)
                goto out;
        }
        if (a->connected && a->out.len && flush_some(a) < 0 && errno != EPIPE) {
            crl_err_sys(err, errno, "write to the host");
            goto out;
        }
    }
out:
    free(pfd);
    return ret;
}

int crl_ga_serve(const struct crl_ga_opts *o, struct crl_err *err)
{
    struct agent a = {
        .o = o, .port = o->fd, .sigfd = -1, .rootfd = -1, .connected = !crl_ga_reconnects(o)};
    crl_buf_init(&a.out, CRL_BUF_UNBOUNDED);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGIO);
    signal(SIGPIPE, SIG_IGN);
    /* A child's children are reaped here too, as PID 1 reaps everything. */
    if (!o->pid1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);
    int ret = -1;
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0 ||
        (a.sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        crl_err_sys(err, errno, "signalfd for SIGCHLD");
        goto out;
    }
    a.rootfd = open(o->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (a.rootfd < 0) {
        crl_err_sys(err, errno, "open the root %s", o->root);
        goto out;
    }
    if (crl_set_nonblock(a.port, 1) < 0 || fcntl(a.port, F_SETFD, FD_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "O_NONBLOCK on fd %d", a.port);
        goto out;
    }
    if (crl_ga_reconnects(o))
        port_async(&a, true);
    if (crl_agent_dec_init(&a.dec, CRL_AGENT_SIDE_GUEST, err) < 0)
        goto out;
    if (a.connected && send_hello(&a, err) < 0)
        goto out_dec;
    ret = loop(&a, err);
out_dec:
    crl_agent_dec_free(&a.dec);
out:
    drop_all(&a);
    crl_ga_reap(&a);
    crl_buf_free(&a.out);
    close_fd(&a.rootfd);
    close_fd(&a.sigfd);
    return ret;
}
