#include "samples.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/util/fdio.h"
#include "../corral/cli.h"

int crl_bench_samples_alloc(struct crl_bench_samples *s, size_t n, struct crl_err *err)
{
    s->ms = calloc(n ? n : 1, sizeof(double));
    s->n = 0;
    s->wall_s = 0;
    if (!s->ms)
        return crl_err_sys(err, ENOMEM, "allocating samples");
    return 0;
}

void crl_bench_samples_free(struct crl_bench_samples *s)
{
    free(s->ms);
    s->ms = NULL;
    s->n = 0;
}

void crl_bench_samples_free_each(struct crl_bench_samples *s, ...)
{
    va_list ap;
    va_start(ap, s);
    for (; s; s = va_arg(ap, struct crl_bench_samples *))
        crl_bench_samples_free(s);
    va_end(ap);
}

int crl_bench_samples_append(struct crl_bench_samples *dst, const struct crl_bench_samples *src,
                             struct crl_err *err)
{
    double *ms = realloc(dst->ms, (dst->n + src->n + 1) * sizeof(double));
    if (!ms)
        return crl_err_sys(err, ENOMEM, "samples");
    memcpy(ms + dst->n, src->ms, src->n * sizeof(double));
    dst->ms = ms;
    dst->n += src->n;
    dst->wall_s += src->wall_s;
    return 0;
}

void crl_bench_samples_add(struct crl_bench_samples *s, double ms)
{
    s->ms[s->n++] = ms;
    s->wall_s += ms / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct crl_bench_stats crl_bench_stats_of(const struct crl_bench_samples *s)
{
    struct crl_bench_stats st = {0};
    if (s->n == 0)
        return st;
    qsort(s->ms, s->n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->ms[i];
    size_t i50 = (size_t)ceil(0.50 * (double)s->n), i99 = (size_t)ceil(0.99 * (double)s->n);
    st.p50 = s->ms[i50 ? i50 - 1 : 0];
    st.p99 = s->ms[i99 ? i99 - 1 : 0];
    st.min = s->ms[0];
    st.max = s->ms[s->n - 1];
    st.mean = sum / (double)s->n;
    st.n = s->n;
    st.rate = s->wall_s > 0 ? (double)s->n / s->wall_s : 0;
    return st;
}

json_t *crl_bench_stats_json(const struct crl_bench_stats *s, bool with_rate)
{
    json_t *j = json_pack("{s:f, s:f, s:f, s:I}", "p50_ms", s->p50, "p99_ms", s->p99, "mean_ms",
                          s->mean, "n", (json_int_t)s->n);
    if (with_rate)
        json_object_set_new(j, "rate_per_s", json_real(s->rate));
    return j;
}

size_t crl_bench_warmup(size_t n)
{
    return n / 10 > 5 ? n / 10 : 5;
}

double crl_bench_ms_since(unsigned long long t0)
{
    return (double)(crl_now_ns() - t0) / 1e6;
}

int crl_bench_check_interrupted(struct crl_err *err)
{
    if (crl_cli_interrupted)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
    return 0;
}

int crl_bench_timed(size_t warm, size_t n, crl_bench_op_fn op, void *ctx,
                    struct crl_bench_samples *out, struct crl_err *err)
{
    if (crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n; i++) {
        if (crl_bench_check_interrupted(err) < 0)
            return -1;
        unsigned long long t0 = crl_now_ns();
        if (op(ctx, i, err) < 0)
            return -1;
        unsigned long long t1 = crl_now_ns();
        if (i == warm)
            start = t0;
        if (i >= warm)
            out->ms[out->n++] = (double)(t1 - t0) / 1e6;
    }
    out->wall_s = (double)(crl_now_ns() - start) / 1e9;
    return 0;
}
