/* The daemon's event loop: epoll for descriptors, a binary heap of timers,
 * and a prepare hook that runs before each wait (the HTTP layer uses it to
 * let libmicrohttpd run after a connection is resumed).  Single-threaded:
 * every callback runs on the loop's thread.  The caller owns watch and timer
 * structs (usually embedded in a larger object) and must stop them before
 * freeing that memory. */
#ifndef CRL_UTIL_LOOP_H
#define CRL_UTIL_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

struct crl_loop;
struct crl_watch;
struct crl_timer;

typedef void (*crl_io_cb)(struct crl_watch *w, uint32_t events);
typedef void (*crl_timer_cb)(struct crl_timer *t);
typedef int (*crl_prepare_cb)(struct crl_loop *loop,
                              void *data); /* returns max wait ms, -1: none */

struct crl_watch {
    int fd;
    uint32_t events;
    crl_io_cb cb;
    void *data;
    bool active;
};

struct crl_timer {
    uint64_t due_ns;
    size_t heap_idx; /* 0: not armed */
    crl_timer_cb cb;
    void *data;
};

struct crl_loop *crl_loop_new(void);
void crl_loop_free(struct crl_loop *loop);

int crl_watch_start(struct crl_loop *loop, struct crl_watch *w, int fd, uint32_t events,
                    crl_io_cb cb, void *data);
int crl_watch_modify(struct crl_loop *loop, struct crl_watch *w, uint32_t events);
/* Safe to call from any callback, including for a watch with a pending event. */
void crl_watch_stop(struct crl_loop *loop, struct crl_watch *w);

void crl_timer_start(struct crl_loop *loop, struct crl_timer *t, uint64_t delay_ns, crl_timer_cb cb,
                     void *data);
void crl_timer_stop(struct crl_loop *loop, struct crl_timer *t);
static inline bool crl_timer_armed(const struct crl_timer *t)
{
    return t->heap_idx != 0;
}

void crl_loop_set_prepare(struct crl_loop *loop, crl_prepare_cb cb, void *data);

/* Run until crl_loop_stop(); returns 0, or -1 if epoll itself failed. */
int crl_loop_run(struct crl_loop *loop);
void crl_loop_stop(struct crl_loop *loop);
/* One iteration waiting at most timeout_ms; for tests and shutdown drains. */
int crl_loop_once(struct crl_loop *loop, int timeout_ms);

#endif
