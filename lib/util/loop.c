#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdio.h"
#include "log.h"

#define LOOP_BATCH 256

struct crl_loop {
    int epfd;
    bool stop;
    struct crl_timer **heap; /* 1-based */
    size_t heap_len;
    size_t heap_alloc;
    crl_prepare_cb prepare;
    void *prepare_data;
    struct epoll_event batch[LOOP_BATCH];
    int batch_len;
    int batch_pos;
};

struct crl_loop *crl_loop_new(void)
{
    struct crl_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        free(l);
        return NULL;
    }
    return l;
}

void crl_loop_free(struct crl_loop *l)
{
    if (!l)
        return;
    close(l->epfd);
    free(l->heap);
    free(l);
}

int crl_watch_start(struct crl_loop *l, struct crl_watch *w, int fd, uint32_t events, crl_io_cb cb,
                    void *data)
{
    w->fd = fd;
    w->events = events;
    w->cb = cb;
    w->data = data;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        crl_log_syscall(NULL, errno, "epoll_ctl(ADD, %d)", fd);
        return -1;
    }
    w->active = true;
    return 0;
}

int crl_watch_modify(struct crl_loop *l, struct crl_watch *w, uint32_t events)
{
    if (!w->active || w->events == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0) {
        crl_log_syscall(NULL, errno, "epoll_ctl(MOD, %d)", w->fd);
        return -1;
    }
    w->events = events;
    return 0;
}

void crl_watch_stop(struct crl_loop *l, struct crl_watch *w)
{
    if (!w->active)
        return;
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    w->active = false;
    /* An event for this watch may still sit later in the current batch. */
    for (int i = l->batch_pos; i < l->batch_len; i++)
        if (l->batch[i].data.ptr == w)
            l->batch[i].data.ptr = NULL;
}

/* ---- timers: a binary min-heap on due_ns ---- */

static void heap_swap(struct crl_loop *l, size_t a, size_t b)
{
    struct crl_timer *t = l->heap[a];
    l->heap[a] = l->heap[b];
    l->heap[b] = t;
    l->heap[a]->heap_idx = a;
    l->heap[b]->heap_idx = b;
}

static void heap_up(struct crl_loop *l, size_t i)
{
    while (i > 1 && l->heap[i / 2]->due_ns > l->heap[i]->due_ns) {
        heap_swap(l, i, i / 2);
        i /= 2;
    }
}

static void heap_down(struct crl_loop *l, size_t i)
{
    for (;;) {
        size_t m = i, c = 2 * i;
        if (c <= l->heap_len && l->heap[c]->due_ns < l->heap[m]->due_ns)
            m = c;
        if (c + 1 <= l->heap_len && l->heap[c + 1]->due_ns < l->heap[m]->due_ns)
            m = c + 1;
        if (m == i)
            return;
        heap_swap(l, i, m);
        i = m;
    }
}

void crl_timer_stop(struct crl_loop *l, struct crl_timer *t)
{
    size_t i = t->heap_idx;
    if (!i)
        return;
    t->heap_idx = 0;
    struct crl_timer *last = l->heap[l->heap_len--];
    if (last == t)
        return;
    l->heap[i] = last;
    last->heap_idx = i;
    heap_up(l, i);
    heap_down(l, last->heap_idx);
}

void crl_timer_start(struct crl_loop *l, struct crl_timer *t, uint64_t delay_ns, crl_timer_cb cb,
                     void *data)
{
    crl_timer_stop(l, t);
    t->due_ns = crl_now_ns() + delay_ns;
    t->cb = cb;
    t->data = data;
    if (l->heap_len + 1 >= l->heap_alloc) {
        size_t n = l->heap_alloc ? l->heap_alloc * 2 : 64;
        struct crl_timer **h = realloc(l->heap, n * sizeof(*h));
        if (!h)
            abort(); /* a timer that silently never fires would leak sandboxes */
        l->heap = h;
        l->heap_alloc = n;
    }
    l->heap[++l->heap_len] = t;
    t->heap_idx = l->heap_len;
    heap_up(l, l->heap_len);
}

static void run_timers(struct crl_loop *l)
{
    uint64_t now = crl_now_ns();
    while (l->heap_len && l->heap[1]->due_ns <= now) {
        struct crl_timer *t = l->heap[1];
        crl_timer_stop(l, t);
        t->cb(t);
    }
}

void crl_loop_set_prepare(struct crl_loop *l, crl_prepare_cb cb, void *data)
{
    l->prepare = cb;
    l->prepare_data = data;
}

int crl_loop_once(struct crl_loop *l, int timeout_ms)
{
    if (l->prepare) {
        int p = l->prepare(l, l->prepare_data);
        if (p >= 0 && (timeout_ms < 0 || p < timeout_ms))
            timeout_ms = p;
    }
    if (l->heap_len) {
        uint64_t now = crl_now_ns(), due = l->heap[1]->due_ns;
        int t = due <= now ? 0 : (int)((due - now + 999999) / 1000000);
        if (timeout_ms < 0 || t < timeout_ms)
            timeout_ms = t;
    }
    int n = epoll_wait(l->epfd, l->batch, LOOP_BATCH, timeout_ms);
    if (n < 0) {
        if (errno == EINTR)
            return 0;
        crl_log_syscall(NULL, errno, "epoll_wait");
        return -1;
    }
    l->batch_len = n;
    for (l->batch_pos = 0; l->batch_pos < l->batch_len;) {
        struct epoll_event *ev = &l->batch[l->batch_pos++];
        struct crl_watch *w = ev->data.ptr;
        if (w && w->active)
            w->cb(w, ev->events);
    }
    l->batch_len = l->batch_pos = 0;
    run_timers(l);
    return 0;
}

int crl_loop_run(struct crl_loop *l)
{
    l->stop = false;
    while (!l->stop)
        if (crl_loop_once(l, -1) < 0)
            return -1;
    return 0;
}

void crl_loop_stop(struct crl_loop *l)
{
    l->stop = true;
}
