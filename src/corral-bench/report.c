#include "report.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/fdio.h"
#include "bench.h"

void crl_bench_machine(struct crl_bench_machine *m)
{
    time_t now = time(NULL);
    strftime(m->date, sizeof(m->date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    uname(&m->u);
    m->cpus = sysconf(_SC_NPROCESSORS_ONLN);
}

void crl_bench_loadavg(char *buf, size_t cap)
{
    buf[0] = 0;
    if (crl_read_file_at(AT_FDCWD, "/proc/loadavg", buf, cap) > 0) {
        char *p = buf;
        for (int k = 0; k < 3 && p; k++)
            p = strchr(p + 1, ' ');
        if (p)
            *p = 0;
    }
}

void crl_bench_report_head(const struct crl_bench_run *run)
{
    const struct crl_bench_machine *m = &run->machine;
    printf("corral %s  %s  host %s (%s %s, %ld CPUs)  load %s -> %s", run->cmd->name, m->date,
           run->host_id, m->u.sysname, m->u.release, m->cpus, run->load0, run->load1);
}

json_t *crl_bench_report_json(const struct crl_bench_run *run, const char *bench)
{
    const struct crl_bench_machine *m = &run->machine;
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s}", "bench", bench, "date", m->date,
                     "host_id", run->host_id, "kernel", m->u.release, "cpus", (json_int_t)m->cpus,
                     "load_before", run->load0, "load_after", run->load1);
}

void crl_bench_report_line(json_t *j)
{
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (line)
        printf("%s\n", line);
    free(line);
}

void crl_bench_table_head(const struct crl_bench_table *t, const char *title)
{
    printf("  %-*s %8s %8s %*s\n", t->label, title, "p50 ms", "p99 ms", t->rate, "per s");
}

void crl_bench_table_row(const struct crl_bench_table *t, const char *what,
                         const struct crl_bench_stats *s, bool with_rate)
{
    printf("  %-*s %8.*f %8.*f", t->label, what, t->prec, s->p50, t->prec, s->p99);
    if (with_rate)
        printf(" %*.1f", t->rate, s->rate);
    else if (t->pad)
        printf(" %*s", t->rate, "");
    putchar('\n');
}

double crl_bench_ratio(double a, double b)
{
    return b > 0 ? a / b : NAN;
}

json_t *crl_bench_json_real(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

void crl_bench_json_ratio(json_t *j, const char *key, double a, double b)
{
    json_object_set_new(j, key, crl_bench_json_real(crl_bench_ratio(a, b)));
}
