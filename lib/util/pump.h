/* Bytes both ways between two connected stream sockets, on the event
 * loop, until each side has ended: what one sends is written to the other,
 * held back (no more read) while the other reads slowly; one side's end of
 * stream is passed on as a shutdown of writing once what it sent is
 * written.  The port proxy's tunnels and the services' relay use it. */
#ifndef CRL_UTIL_PUMP_H
#define CRL_UTIL_PUMP_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "loop.h"

#define CRL_PUMP_HIGH (1u << 20) /* bytes held for a side before its peer is read no more */

struct crl_pump {
    struct crl_loop *loop;
    int fd[2];
    struct crl_watch w[2];
    struct crl_buf to[2]; /* bytes for fd[i], read from the other */
    bool eof[2];          /* fd[i] sent all it will */
    /* Both sides ended, or one failed: the owner stops the pump and closes
     * the descriptors (the pump closes none). */
    void (*done)(struct crl_pump *p);
    void *data;
};

/* Set p up between fd0 and fd1 (nonblocking); nothing is watched yet, so
 * that bytes already read from either (crl_pump_queue) can be queued. */
void crl_pump_init(struct crl_pump *p, struct crl_loop *loop, int fd0, int fd1,
                   void (*done)(struct crl_pump *p), void *data);
/* Bytes for fd[i], before those the other side will send. */
int crl_pump_queue(struct crl_pump *p, int i, const void *data, size_t len);
int crl_pump_start(struct crl_pump *p);
/* Stop watching and free the buffers (the descriptors are the caller's). */
void crl_pump_stop(struct crl_pump *p);

#endif
