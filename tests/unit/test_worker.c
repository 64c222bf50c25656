/* lib/util/worker: jobs run on a thread of their own, in the order
 * submitted; each comes back to the loop (its done on the loop's thread)
 * with its error; free runs what is still queued, and what a done submits
 * meanwhile, before it returns. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/util/loop.h"
#include "../../lib/util/worker.h"
#include "tap.h"

struct job {
    struct crl_worker_job j;
    int n;
    pthread_t ran_on, done_on;
    bool failed_seen;
    struct crl_worker *resubmit; /* done submits `again` here */
    struct job *again;
};

static int order[16], n_order, n_done;

static int work(struct crl_worker_job *wj, struct crl_err *err)
{
    struct job *j = (struct job *)wj;
    j->ran_on = pthread_self();
    order[n_order++] = j->n;
    return j->n % 3 == 2 ? crl_err_set(err, CRL_E_INVALID, "job %d fails", j->n) : 0;
}

static void done(struct crl_worker_job *wj, const struct crl_err *err)
{
    struct job *j = (struct job *)wj;
    j->done_on = pthread_self();
    j->failed_seen = err && strstr(err->msg, "fails");
    n_done++;
    if (j->resubmit)
        crl_worker_submit(j->resubmit, &j->again->j);
}

static void init(struct job *j, int n)
{
    memset(j, 0, sizeof(*j));
    j->n = n;
    j->j.work = work;
    j->j.done = done;
}

static void test_jobs(void)
{
    struct crl_loop *loop = crl_loop_new();
    struct crl_worker *w;
    struct crl_err e = CRL_ERR_INIT;
    if (!ok(crl_worker_new(loop, "test-worker", &w, &e) == 0, "a worker"))
        bail_out(e.msg);
    struct job jobs[6];
    n_order = n_done = 0;
    for (int i = 0; i < 6; i++) {
        init(&jobs[i], i);
        crl_worker_submit(w, &jobs[i].j);
    }
    for (int t = 0; t < 500 && n_done < 6; t++)
        crl_loop_once(loop, 10);
    is_int(n_done, 6, "every job came back to the loop");
    bool ordered = true, off = true, on_loop = true, errs = true;
    for (int i = 0; i < 6; i++) {
        ordered &= order[i] == i;
        off &= !pthread_equal(jobs[i].ran_on, pthread_self());
        on_loop &= pthread_equal(jobs[i].done_on, pthread_self());
        errs &= jobs[i].failed_seen == (i % 3 == 2);
    }
    ok(ordered, "in the order submitted");
    ok(off, "each ran off the loop's thread");
    ok(on_loop, "and its done ran on it");
    ok(errs, "a failed job's done gets its error, the others none");

    /* Queued at free, and submitted by a done during free: all run. */
    struct job last[3];
    n_order = n_done = 0;
    init(&last[0], 10);
    init(&last[1], 11);
    init(&last[2], 12);
    last[1].resubmit = w;
    last[1].again = &last[2];
    crl_worker_submit(w, &last[0].j);
    crl_worker_submit(w, &last[1].j);
    crl_worker_free(w);
    is_int(n_done, 3, "free ran the queued jobs and one a done submitted");
    ok(order[0] == 10 && order[1] == 11 && order[2] == 12, "in order");
    crl_loop_free(loop);
}

int main(void)
{
    TAP_RUN(test_jobs, 10);
    return done_testing();
}
