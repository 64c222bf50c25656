/* corral-bench: the benchmarks behind `corral bench` (docs/benchmarks.md),
 * a program of their own so that the CLI carries none of them.  Each bench
 * is a command over the bench library of this directory; its messages
 * name it as `corral bench` does ("corral: bench traj: ..."). */
#ifndef CORRAL_BENCH_BENCH_H
#define CORRAL_BENCH_BENCH_H

/* The commands: argv[0] is the command's name. */
int crl_bench_cycle(int argc, char **argv);     /* corral bench */
int crl_bench_functions(int argc, char **argv); /* corral bench functions */
int crl_bench_images(int argc, char **argv);    /* corral bench images */
int crl_bench_traj(int argc, char **argv);      /* corral bench traj */

#endif
