#include "pump.h"

#include <errno.h>
#include <sys/socket.h>

void crl_pump_init(struct crl_pump *p, struct crl_loop *loop, int fd0, int fd1,
                   void (*done)(struct crl_pump *p), void *data)
{
    *p = (struct crl_pump){.loop = loop, .fd = {fd0, fd1}, .done = done, .data = data};
    for (int i = 0; i < 2; i++)
        crl_buf_init(&p->to[i], CRL_BUF_UNBOUNDED);
}

int crl_pump_queue(struct crl_pump *p, int i, const void *data, size_t len)
{
    return len ? crl_buf_append(&p->to[i], data, len) : 0;
}

/* What each side waits for: room to read into the other's buffer, or
 * bytes of its own buffer to write. */
static void arm(struct crl_pump *p)
{
    for (int i = 0; i < 2; i++) {
        uint32_t ev = 0;
        if (!p->eof[i] && p->to[1 - i].len < CRL_PUMP_HIGH)
            ev |= EPOLLIN;
        if (p->to[i].len)
            ev |= EPOLLOUT;
        crl_watch_modify(p->loop, &p->w[i], ev);
    }
}

static void on_io(struct crl_watch *w, uint32_t events)
{
    struct crl_pump *p = w->data;
    int i = w == &p->w[0] ? 0 : 1;
    if (p->to[i].len) {
        ssize_t n = send(p->fd[i], p->to[i].data, p->to[i].len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
            p->done(p);
            return;
        }
        if (n > 0)
            crl_buf_consume(&p->to[i], (size_t)n);
        if (!p->to[i].len && p->eof[1 - i])
            shutdown(p->fd[i], SHUT_WR); /* the other side's end, passed on */
    }
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !p->eof[i]) {
        char buf[64 * 1024];
        ssize_t n = recv(p->fd[i], buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN) {
            p->done(p);
            return;
        }
        if (n == 0) {
            p->eof[i] = true;
            if (!p->to[1 - i].len)
                shutdown(p->fd[1 - i], SHUT_WR);
        } else if (n > 0 && crl_buf_append(&p->to[1 - i], buf, (size_t)n) < 0) {
            p->done(p);
            return;
        }
    }
    if (p->eof[0] && p->eof[1] && !p->to[0].len && !p->to[1].len) {
        p->done(p);
        return;
    }
    arm(p);
}

int crl_pump_start(struct crl_pump *p)
{
    if (crl_watch_start(p->loop, &p->w[0], p->fd[0], 0, on_io, p) < 0)
        return -1;
    if (crl_watch_start(p->loop, &p->w[1], p->fd[1], 0, on_io, p) < 0) {
        crl_watch_stop(p->loop, &p->w[0]);
        return -1;
    }
    arm(p);
    return 0;
}

void crl_pump_stop(struct crl_pump *p)
{
    for (int i = 0; i < 2; i++) {
        crl_watch_stop(p->loop, &p->w[i]);
        crl_buf_free(&p->to[i]);
    }
}
