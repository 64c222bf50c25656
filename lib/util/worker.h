/* A thread that runs jobs off the event loop, one at a time in the order
 * submitted, and hands each back to the loop when it is done (an eventfd
 * the loop watches).  What takes milliseconds of kernel work, such as a
 * sandbox's network set-up over netlink and nftables, runs there, so the
 * loop goes on serving everything else meanwhile. */
#ifndef CRL_UTIL_WORKER_H
#define CRL_UTIL_WORKER_H

#include "err.h"
#include "loop.h"

struct crl_worker;

struct crl_worker_job {
    /* On the worker thread: touches nothing the loop uses meanwhile. */
    int (*work)(struct crl_worker_job *j, struct crl_err *err);
    /* On the loop, once work returned: err is NULL if it returned 0. */
    void (*done)(struct crl_worker_job *j, const struct crl_err *err);
    int rc;
    struct crl_err err;
    struct crl_worker_job *next;
};

int crl_worker_new(struct crl_loop *loop, const char *name, struct crl_worker **out,
                   struct crl_err *err);
/* Queue j (the caller keeps it until its done runs). */
void crl_worker_submit(struct crl_worker *w, struct crl_worker_job *j);
/* Run every job still queued, hand each back (its done runs here, on the
 * loop's thread), stop the thread and free.  NULL is fine. */
void crl_worker_free(struct crl_worker *w);

#endif
