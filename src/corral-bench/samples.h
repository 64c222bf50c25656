/* Timing and samples: the latencies of a measured phase, their statistics,
 * and the loop that times an operation `warm` times unmeasured and then
 * `n` times measured. */
#ifndef CORRAL_BENCH_SAMPLES_H
#define CORRAL_BENCH_SAMPLES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../../lib/util/err.h"

/* Latencies of one measured phase, in milliseconds, and its wall time. */
struct crl_bench_samples {
    double *ms;
    size_t n;
    double wall_s;
};

/* Room for n samples (none taken yet). */
int crl_bench_samples_alloc(struct crl_bench_samples *s, size_t n, struct crl_err *err);
void crl_bench_samples_free(struct crl_bench_samples *s);
/* crl_bench_samples_free() of each argument, up to a NULL. */
void crl_bench_samples_free_each(struct crl_bench_samples *s, ...) __attribute__((sentinel));
/* Append src's samples to dst's (and its wall time), for a figure
 * measured in several rounds. */
int crl_bench_samples_append(struct crl_bench_samples *dst, const struct crl_bench_samples *src,
                             struct crl_err *err);
/* One sample of a phase interleaved with others: its latency, and its own
 * time added to the wall time, so that a side's rate is over its own time.
 * There must be room for it. */
void crl_bench_samples_add(struct crl_bench_samples *s, double ms);

/* Nearest-rank percentiles of a phase; rate is operations per second of its
 * wall time. */
struct crl_bench_stats {
    double p50, p99, mean, min, max, rate;
    size_t n;
};
/* Sorts s->ms in place. */
struct crl_bench_stats crl_bench_stats_of(const struct crl_bench_samples *s);
/* {"p50_ms", "p99_ms", "mean_ms", "n"} and "rate_per_s" if with_rate. */
json_t *crl_bench_stats_json(const struct crl_bench_stats *s, bool with_rate);

/* The unmeasured operations before a figure of n: a tenth, at least 5. */
size_t crl_bench_warmup(size_t n);
/* Milliseconds since t0 (crl_now_ns()). */
double crl_bench_ms_since(unsigned long long t0);
/* CRL_E_UNAVAILABLE "interrupted" once a signal asked the bench to stop
 * (crl_cli_interrupted); 0 otherwise. */
int crl_bench_check_interrupted(struct crl_err *err);

/* One operation of a timed phase: the i-th, counting the warm-up's. */
typedef int (*crl_bench_op_fn)(void *ctx, size_t i, struct crl_err *err);
/* op(ctx, i) `warm` times unmeasured, then `n` times each timed from its
 * call to its return, into *out (allocated here); out->wall_s is the wall
 * time of the measured ones.  Stops at the first failure, or once a signal
 * asked the bench to stop. */
int crl_bench_timed(size_t warm, size_t n, crl_bench_op_fn op, void *ctx,
                    struct crl_bench_samples *out, struct crl_err *err);

#endif
