/* corral-bench: the benchmarks behind `corral bench` (docs/benchmarks.md),
 * a program of its own so that the CLI carries none of them.  Each bench
 * is a command (cycle.c, density.c, functions.c, images.c, traj*.c) over the bench
 * library of this directory: this file runs a command (its options, the
 * private daemons, the load around it, the report, the exit status);
 * samples.c times; peer.c and python.c are what Corral is compared with;
 * api.c calls corrald; report.c prints.  Messages name a bench as `corral
 * bench` does ("corral: bench traj: ..."). */
#ifndef CORRAL_BENCH_BENCH_H
#define CORRAL_BENCH_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "../../lib/util/err.h"
#include "daemon.h"
#include "report.h"

/* The options of the benches; each takes --start-daemon, --iterations N,
 * --json and --help, and those of `takes` below. */
struct crl_bench_opts {
    bool start;           /* --start-daemon (--baseline implies it) */
    bool json_only;       /* --json: only the JSON line, no progress */
    size_t iterations;    /* --iterations N */
    size_t imports;       /* --imports N */
    size_t sandboxes;     /* --sandboxes N */
    const char *image;    /* --image NAME */
    const char *baseline; /* --baseline DIR */
};
enum {
    CRL_BENCH_TAKES_IMAGE = 1,
    CRL_BENCH_TAKES_BASELINE = 2,
    CRL_BENCH_TAKES_IMPORTS = 4,
    CRL_BENCH_TAKES_SANDBOXES = 8,
};

struct crl_bench_run;

/* What a bench does with its results: `size` bytes, zeroed at first. */
struct crl_bench_ops {
    /* The measurements, into res: 0, or -1 with *err. */
    int (*measure)(struct crl_bench_run *run, void *res, struct crl_err *err);
    /* The table (unless --json) and the JSON line, once the daemons are gone. */
    void (*report)(const struct crl_bench_run *run, void *res);
    /* Free what res holds (not res itself), measured or not. */
    void (*free)(void *res);
    size_t size;
};

/* A bench: what it takes and what it does. */
struct crl_bench_cmd {
    const char *name; /* "bench functions": in messages, and 'corral NAME --help' */
    const char *help;
    const char *root; /* why it always needs root; NULL: only --start-daemon does */
    unsigned takes;   /* CRL_BENCH_TAKES_* */
    /* The range of --iterations, --imports and --sandboxes; 0: 10 to 1000000. */
    long long count_min, count_max;
    struct crl_bench_opts defaults;
    struct crl_bench_ops ops;
};

/* The benches (cycle.c, density.c, functions.c, images.c, traj.c). */
extern const struct crl_bench_cmd crl_bench_cycle;     /* corral bench */
extern const struct crl_bench_cmd crl_bench_density;   /* corral bench density */
extern const struct crl_bench_cmd crl_bench_functions; /* corral bench functions */
extern const struct crl_bench_cmd crl_bench_images;    /* corral bench images */
extern const struct crl_bench_cmd crl_bench_traj;      /* corral bench traj */
extern const struct crl_bench_cmd crl_bench_processes; /* corral bench processes */

/* One run of a bench. */
struct crl_bench_run {
    const struct crl_bench_cmd *cmd;
    struct crl_bench_opts o;
    int argc;
    char **argv;
    const char *url;      /* the corrald measured; NULL: $CORRAL_URL */
    const char *base_url; /* --baseline's */
    char host_id[32];     /* measure() sets it, for the report */
    char load0[64], load1[64];
    struct crl_bench_machine machine;
    struct crl_bench_daemon d, bd;
};

/* Run bench `cmd` with argv (argv[1] on its options): parse them, check
 * for root, catch signals, start the daemons asked for, measure, stop them
 * (with the end of a daemon's log when the bench failed), report.  The
 * exit status: 0; 2 on a usage error; 128+n after signal n; else 1, the
 * error said once. */
int crl_bench_main(const struct crl_bench_cmd *cmd, int argc, char **argv);

/* A line of progress on stderr, "corral bench traj: ...", unless --json. */
void crl_bench_step(const struct crl_bench_run *run, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
