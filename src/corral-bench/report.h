/* What a bench prints: a table of p50, p99 and rate per figure, lines of
 * ratios, and one JSON line that scripts read, each opening with when and
 * where it ran and the machine's load before and after. */
#ifndef CORRAL_BENCH_REPORT_H
#define CORRAL_BENCH_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/utsname.h>

#include "samples.h"

struct crl_bench_run;

/* When and where a bench ran: the UTC time (2026-11-30T17:00:40Z),
 * uname(2) and the CPUs online. */
struct crl_bench_machine {
    char date[32];
    struct utsname u;
    long cpus;
};
void crl_bench_machine(struct crl_bench_machine *m);
/* The three load averages of /proc/loadavg, "0.42 0.30 0.25". */
void crl_bench_loadavg(char *buf, size_t cap);

/* The report's first words, "corral bench traj  DATE  host ID (Linux 6.18,
 * 2 CPUs)  load 0.42 0.30 0.25 -> 0.50 0.31 0.25", with no newline: each
 * bench ends the line its own way. */
void crl_bench_report_head(const struct crl_bench_run *run);
/* The JSON line's object, opening with {"bench": bench, "date", "host_id",
 * "kernel", "cpus", "load_before", "load_after"}; the caller adds the rest
 * in order and prints it with crl_bench_report_line(). */
json_t *crl_bench_report_json(const struct crl_bench_run *run, const char *bench);
/* Print j on one line (compact, keys in order, six significant digits). */
void crl_bench_report_line(json_t *j);

/* A table's columns: the label's width, the latencies' decimals and the
 * rate's width; with `pad`, a row with no rate is filled to the rate's
 * width with blanks. */
struct crl_bench_table {
    int label, prec, rate;
    bool pad;
};
/* The header: "p50 ms", "p99 ms", "per s" over the columns, `title` over
 * the labels. */
void crl_bench_table_head(const struct crl_bench_table *t, const char *title);
/* A row: what, p50 and p99, and the rate if with_rate. */
void crl_bench_table_row(const struct crl_bench_table *t, const char *what,
                         const struct crl_bench_stats *s, bool with_rate);

/* a / b, or NaN when b is not positive. */
double crl_bench_ratio(double a, double b);
/* A JSON real, or null for NaN. */
json_t *crl_bench_json_real(double v);
/* j[key] = a / b, or null when b is not positive. */
void crl_bench_json_ratio(json_t *j, const char *key, double a, double b);

#endif
