#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

struct crl_worker {
    struct crl_loop *loop;
    char name[32];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stopping;
    struct crl_worker_job *queue, *tail, *finished;
    int efd;
    struct crl_watch w;
};

static void *run(void *arg)
{
    struct crl_worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->queue && !w->stopping)
            pthread_cond_wait(&w->cond, &w->lock);
        struct crl_worker_job *j = w->queue;
        if (!j)
            break; /* stopping, and nothing left to do */
        w->queue = j->next;
        if (!w->queue)
            w->tail = NULL;
        pthread_mutex_unlock(&w->lock);
        j->err = (struct crl_err)CRL_ERR_INIT;
        j->rc = j->work(j, &j->err);
        pthread_mutex_lock(&w->lock);
        j->next = w->finished;
        w->finished = j;
        uint64_t one = 1;
        if (write(w->efd, &one, sizeof(one)) < 0) { /* the loop reads it: it cannot fill */
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* On the loop: each finished job's done, oldest first. */
static void hand_back(struct crl_worker *w)
{
    pthread_mutex_lock(&w->lock);
    struct crl_worker_job *j = w->finished, *rev = NULL;
    w->finished = NULL;
    pthread_mutex_unlock(&w->lock);
    while (j) {
        struct crl_worker_job *next = j->next;
        j->next = rev;
        rev = j;
        j = next;
    }
    while (rev) {
        struct crl_worker_job *next = rev->next;
        rev->done(rev, rev->rc < 0 ? &rev->err : NULL);
        rev = next;
    }
}

static void on_finished(struct crl_watch *watch, uint32_t ev)
{
    struct crl_worker *w = watch->data;
    uint64_t n;
    if (read(w->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        crl_warn(NULL, "%s: reading the worker's eventfd: %s", w->name, strerror(errno));
    hand_back(w);
}

int crl_worker_new(struct crl_loop *loop, const char *name, struct crl_worker **out,
                   struct crl_err *err)
{
    struct crl_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return crl_err_sys(err, ENOMEM, "%s: worker", name);
    w->loop = loop;
    snprintf(w->name, sizeof(w->name), "%s", name);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int e;
    if (w->efd < 0) {
        e = errno;
    } else if (crl_watch_start(loop, &w->w, w->efd, EPOLLIN, on_finished, w) < 0) {
        e = errno;
    } else if ((e = pthread_create(&w->thread, NULL, run, w)) == 0) {
        pthread_setname_np(w->thread, w->name);
        *out = w;
        return 0;
    }
    crl_watch_stop(loop, &w->w);
    if (w->efd >= 0)
        close(w->efd);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
    return crl_err_sys(err, e, "%s: start a worker thread", name);
}

void crl_worker_submit(struct crl_worker *w, struct crl_worker_job *j)
{
    j->next = NULL;
    pthread_mutex_lock(&w->lock);
    if (w->tail)
        w->tail->next = j;
    else
        w->queue = j;
    w->tail = j;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void crl_worker_free(struct crl_worker *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    /* A done may submit again (a failure's clean-up): run those here. */
    while (w->finished || w->queue) {
        while (w->queue) {
            struct crl_worker_job *j = w->queue;
            w->queue = j->next;
            j->err = (struct crl_err)CRL_ERR_INIT;
            j->rc = j->work(j, &j->err);
            j->next = w->finished;
            w->finished = j;
        }
        w->tail = NULL;
        hand_back(w);
    }
    crl_watch_stop(w->loop, &w->w);
    close(w->efd);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
}
