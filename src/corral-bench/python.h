/* The python peers of `corral bench functions`: `python3 -c 'print(1)'`,
 * what a caller would otherwise run, and the python floor, forks of a
 * python3 that imported what the python zygote preloads. */
#ifndef CORRAL_BENCH_PYTHON_H
#define CORRAL_BENCH_PYTHON_H

#include <stddef.h>

#include "../../lib/util/err.h"
#include "samples.h"

/* The python3 to compare with, into out: the system's (the zygote embeds
 * the system's libpython), else the first in $PATH. */
int crl_bench_python_find(char *out, size_t cap, struct crl_err *err);

/* fork+exec+wait of `python3 -c 'print(1)'`, stdout read from a pipe,
 * timed into *ms; it must print "1\n". */
int crl_bench_python_print(const char *python, double *ms, struct crl_err *err);

/* What the python floor measured: fork+exit+wait of a child that exits at
 * once (bare) and of one that runs print(1) as the zygote's child does
 * (run), the interpreter's version and its VmRSS in kB. */
struct crl_bench_python_floor {
    struct crl_bench_samples bare, run;
    char version[32];
    long rss_kb;
};
/* The floor in a python3 -I of its own: `warm` unmeasured then `n`
 * measured forks of each kind, timed inside it. */
int crl_bench_python_floor(const char *python, size_t warm, size_t n,
                           struct crl_bench_python_floor *out, struct crl_err *err);

#endif
