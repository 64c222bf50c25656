/* corral bench functions: what a call to the function backend costs,
 * measured on this machine in one run against the peers a caller would
 * otherwise use, and against the host's floor:
 *
 *   1. python `print(1)` through the API (an exec in a python function
 *      sandbox) against `python3 -c 'print(1)'`, interleaved;
 *   2. shell `true` through the API, as argv and as a /bin/sh -c string;
 *   3. calls/s of shell `true` at concurrency 2;
 *   4. the host's floor: fork+exit+wait of this small C process,
 *      fork+exec+wait of /bin/true, and fork+exit+wait of a python3 that
 *      imported what the python zygote preloads, with a child that exits
 *      at once and with one that runs print(1) first;
 *   5. what a function sandbox costs: create (until ready) and destroy
 *      (until gone), one at a time, shell and python.
 *
 * With --baseline DIR, a second private corrald runs from the binaries in
 * DIR (an earlier build), and the two are measured in turns, so that a
 * change is judged against what it changed in the same run.
 *
 * It prints figures, ratios and the goals beside them, and never
 * judges an absolute time. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "api.h"
#include "bench.h"
#include "peer.h"
#include "python.h"

#define CONC 2
#define SPACED_MS 50 /* between calls, in the spaced python run */
/* The goals (issue 4, "Speed"), printed beside the figures. */
#define GOAL_PYTHON_X 10.0
#define GOAL_SHELL_P50_MS 0.5
#define GOAL_C2_PER_S 2000.0

static const char help[] =
    "usage: corral bench functions [OPTIONS]\n"
    "\n"
    "Measure the function backend, on this machine and in one run:\n"
    "  1. python: exec {\"cmd\": \"print(1)\"} in a python function sandbox, each\n"
    "     timed to its answer on a kept-alive connection, against fork+exec+wait\n"
    "     of `python3 -c 'print(1)'` (stdout read from a pipe), interleaved:\n"
    "     p50, p99 and the ratio of the p50s;\n"
    "  2. shell: exec {\"cmd\": [\"true\"]} and {\"cmd\": \"true\"} (/bin/sh -c) in a\n"
    "     shell function sandbox: p50, p99;\n"
    "  3. calls/s of {\"cmd\": [\"true\"]} from two threads, each with its own\n"
    "     connection, into the same shell sandbox;\n"
    "  4. the host's floor: fork+exit+wait of this process, fork+exec+wait of\n"
    "     /bin/true, and fork+exit+wait of a python3 that imported what the\n"
    "     python zygote preloads, and of one whose child runs print(1) (timed\n"
    "     inside it);\n"
    "  5. create (until ready) and destroy (until gone) of a shell and of a\n"
    "     python function sandbox, one at a time.\n"
    "Prints a table and a JSON line.  Uses corrald at $CORRAL_URL unless\n"
    "--start-daemon.\n"
    "\n"
    "  --start-daemon      run a private corrald (next to this corral, fresh state\n"
    "                      in a temporary directory) for the bench, stop it after\n"
    "  --baseline DIR      also run a private corrald from the binaries in DIR (an\n"
    "                      earlier build: corrald and its helpers), measure both in\n"
    "                      turns, two rounds each, and compare (implies\n"
    "                      --start-daemon)\n"
    "  --iterations N      measured operations per figure (default 300)\n"
    "  --json              print only the JSON line\n";

struct results {
    char python[PATH_MAX];
    struct crl_bench_samples py, py_peer, sh_argv, sh_c, c2, fork_exit, fork_exec, py_spaced;
    struct crl_bench_samples py_proc, sh_argv_proc, sh_c_proc; /* duration_s */
    struct crl_bench_samples create_sh, destroy_sh, create_py, destroy_py;
    struct crl_bench_python_floor floor;
    long rss_self_kb, rss_zygote_kb;
};

/* This build's results, and with --baseline the baseline's. */
struct both {
    struct results r, base;
};

/* The figures, in the JSON line's order: their samples in struct
 * results, their key, and whether the key has a rate. */
enum { PY, PYP, PEER, PYS, SA, SAP, SC, SCP, C2, FE, FX, FP, FPR, CSH, DSH, CPY, DPY, N_FIGS };
static const struct {
    size_t set;
    const char *key;
    bool rate;
} figs[N_FIGS] = {
    [PY] = {offsetof(struct results, py), "python_function", true},
    [PYP] = {offsetof(struct results, py_proc), "python_function_duration", false},
    [PEER] = {offsetof(struct results, py_peer), "python3_c_peer", true},
    [PYS] = {offsetof(struct results, py_spaced), "python_function_spaced", false},
    [SA] = {offsetof(struct results, sh_argv), "shell_function_argv", true},
    [SAP] = {offsetof(struct results, sh_argv_proc), "shell_function_argv_duration", false},
    [SC] = {offsetof(struct results, sh_c), "shell_function_sh_c", true},
    [SCP] = {offsetof(struct results, sh_c_proc), "shell_function_sh_c_duration", false},
    [C2] = {offsetof(struct results, c2), "shell_function_argv_c2_one_sandbox", true},
    [FE] = {offsetof(struct results, fork_exit), "floor_fork_exit_self", true},
    [FX] = {offsetof(struct results, fork_exec), "floor_fork_exec_true", true},
    [FP] = {offsetof(struct results, floor.bare), "floor_fork_exit_python", true},
    [FPR] = {offsetof(struct results, floor.run), "floor_fork_print_exit_python", true},
    [CSH] = {offsetof(struct results, create_sh), "create_shell", false},
    [DSH] = {offsetof(struct results, destroy_sh), "destroy_shell", false},
    [CPY] = {offsetof(struct results, create_py), "create_python", false},
    [DPY] = {offsetof(struct results, destroy_py), "destroy_python", false},
};

static struct crl_bench_samples *set_of(struct results *r, int k)
{
    return (struct crl_bench_samples *)((char *)r + figs[k].set);
}

static void results_free(struct results *r)
{
    for (int k = 0; k < N_FIGS; k++)
        crl_bench_samples_free(set_of(r, k));
}

static void both_free(void *res)
{
    struct both *b = res;
    results_free(&b->r);
    results_free(&b->base);
}

/* One round's results added to the run's (moved: `src` is freed). */
static int results_add(struct results *dst, struct results *src, struct crl_err *err)
{
    int rc = 0;
    for (int k = 0; k < N_FIGS && rc == 0; k++)
        rc = crl_bench_samples_append(set_of(dst, k), set_of(src, k), err);
    memcpy(dst->python, src->python, sizeof(dst->python));
    memcpy(dst->floor.version, src->floor.version, sizeof(dst->floor.version));
    dst->floor.rss_kb = src->floor.rss_kb;
    dst->rss_self_kb = src->rss_self_kb;
    dst->rss_zygote_kb = src->rss_zygote_kb;
    results_free(src);
    return rc;
}

/* ---- calls through the API ---- */

static int sandbox_create(struct crl_bench_sandboxes *sbs, const char *runtime, char *id,
                          double *ms, struct crl_err *err)
{
    json_auto_t *spec = crl_bench_spec(NULL, 0);
    json_object_set_new(spec, "backend", json_string("function"));
    json_object_set_new(spec, "runtime", json_string(runtime));
    if (crl_bench_sandbox_create(sbs, spec, id, ms, err) < 0)
        return crl_err_prefix(err, "creating a %s function sandbox", runtime);
    return 0;
}

/* One exec, timed from the request to its whole answer; it must exit 0
 * and, with `expect`, print exactly that.  *proc_ms (may be NULL) gets
 * the result's duration_s: corrald's clock from the spawn to the exit. */
static int call(struct crl_client *c, const char *id, json_t *req, const char *expect, double *ms,
                double *proc_ms, struct crl_err *err)
{
    json_auto_t *res = NULL;
    if (crl_bench_exec(c, id, req, ms, &res, err) < 0)
        return -1;
    if (expect && strcmp(crl_cli_str(res, "stdout", ""), expect) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "exec in %s printed '%s', not '%s'", id,
                           crl_cli_str(res, "stdout", ""), expect);
    if (proc_ms)
        *proc_ms = json_number_value(json_object_get(res, "duration_s")) * 1e3;
    return 0;
}

/* A function sandbox's life: `warm` unmeasured then `n` measured creates
 * (timed until it is ready) and destroys (until it is gone), one at a time. */
static int cycles(struct crl_bench_sandboxes *sbs, const char *runtime, size_t warm, size_t n,
                  struct crl_bench_samples *create, struct crl_bench_samples *destroy,
                  struct crl_err *err)
{
    if (crl_bench_samples_alloc(create, n, err) < 0 || crl_bench_samples_alloc(destroy, n, err) < 0)
        return -1;
    for (size_t i = 0; i < warm + n; i++) {
        char id[CRL_BENCH_ID_MAX] = "";
        double ms;
        if (sandbox_create(sbs, runtime, id, &ms, err) < 0)
            return -1;
        unsigned long long t1 = crl_now_ns();
        if (crl_bench_sandbox_destroy(sbs, id, err) < 0)
            return -1;
        if (i < warm)
            continue;
        crl_bench_samples_add(create, ms);
        crl_bench_samples_add(destroy, crl_bench_ms_since(t1));
    }
    return 0;
}

/* Calls of one request, one at a time, with the commands' own times. */
struct serial {
    struct crl_client *c;
    const char *id;
    json_t *req;
    size_t warm;
    struct crl_bench_samples *proc;
};

static int serial_call(void *ctx, size_t i, struct crl_err *err)
{
    struct serial *s = ctx;
    double ms, pms;
    if (call(s->c, s->id, s->req, NULL, &ms, &pms, err) < 0)
        return -1;
    if (i >= s->warm)
        s->proc->ms[s->proc->n++] = pms;
    return 0;
}

static int calls(struct crl_client *c, const char *id, json_t *req, size_t warm, size_t n,
                 struct crl_bench_samples *out, struct crl_bench_samples *proc, struct crl_err *err)
{
    struct serial s = {c, id, req, warm, proc};
    if (crl_bench_samples_alloc(proc, n, err) < 0 ||
        crl_bench_timed(warm, n, serial_call, &s, out, err) < 0)
        return -1;
    proc->wall_s = out->wall_s;
    return 0;
}

/* Python: our exec and the peer, alternating which goes first. */
static int python_vs_peer(struct crl_client *c, const char *id, const char *python, size_t warm,
                          size_t n, struct results *r, struct crl_err *err)
{
    json_auto_t *req = json_pack("{s:s}", "cmd", "print(1)");
    if (crl_bench_samples_alloc(&r->py, n, err) < 0 ||
        crl_bench_samples_alloc(&r->py_peer, n, err) < 0 ||
        crl_bench_samples_alloc(&r->py_proc, n, err) < 0)
        return -1;
    for (size_t i = 0; i < warm + n; i++) {
        double ours = 0, proc = 0, peer = 0;
        for (int k = 0; k < 2; k++) {
            int rc = (k == 0) == (i % 2 == 0) ? call(c, id, req, "1\n", &ours, &proc, err)
                                              : crl_bench_python_print(python, &peer, err);
            if (rc < 0)
                return -1;
        }
        if (i < warm)
            continue;
        crl_bench_samples_add(&r->py, ours);
        crl_bench_samples_add(&r->py_peer, peer);
        r->py_proc.ms[r->py_proc.n++] = proc;
    }
    r->py_proc.wall_s = r->py.wall_s;
    return 0;
}

/* An agent calls tools between thoughts, not back to back: the same call
 * with SPACED_MS between calls, which is when the zygote's spares (forked
 * ahead) are ready. */
static int python_spaced(struct crl_client *c, const char *id, size_t warm, size_t n,
                         struct crl_bench_samples *out, struct crl_err *err)
{
    json_auto_t *req = json_pack("{s:s}", "cmd", "print(1)");
    if (crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    for (size_t i = 0; i < warm + n; i++) {
        struct timespec gap = {0, SPACED_MS * 1000000L};
        double ms;
        nanosleep(&gap, NULL);
        if (call(c, id, req, "1\n", &ms, NULL, err) < 0)
            return -1;
        if (i >= warm)
            out->ms[out->n++] = ms;
    }
    return 0;
}

/* Concurrency 2: one client (connection) per thread, one sandbox. */
struct parallel {
    const char *id;
    json_t *req;
    struct crl_bench_samples *out; /* NULL: a warm-up */
};

static int parallel_call(struct crl_client *c, void *ctx, size_t i, struct crl_err *err)
{
    struct parallel *p = ctx;
    double ms;
    if (call(c, p->id, p->req, NULL, &ms, NULL, err) < 0)
        return -1;
    if (p->out)
        p->out->ms[i] = ms;
    return 0;
}

static int parallel_calls(const char *url, const char *id, size_t n, struct crl_bench_samples *out,
                          struct crl_err *err)
{
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "true");
    struct parallel p = {id, req, out};
    double wall;
    if (out && crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    if (crl_bench_parallel(url, CONC, n, parallel_call, &p, &wall, err) < 0)
        return -1;
    if (out) {
        out->n = n;
        out->wall_s = wall;
    }
    return 0;
}

/* ---- the run ---- */

/* The python function sandbox: against the peer, spaced, the zygote's RSS. */
static int measure_python(struct crl_bench_run *run, struct crl_bench_sandboxes *sbs, size_t n,
                          struct results *r, struct crl_err *err)
{
    size_t warm = crl_bench_warmup(n);
    char id[CRL_BENCH_ID_MAX];
    if (sandbox_create(sbs, "python", id, NULL, err) < 0)
        return -1;
    crl_bench_step(run, "python print(1): function exec and %s -c, interleaved (%zu each)",
                   r->python, n);
    if (python_vs_peer(sbs->c, id, r->python, warm, n, r, err) < 0)
        return -1;
    crl_bench_step(run, "python print(1), %d ms apart (%zu)", SPACED_MS, n / 4 + 1);
    if (python_spaced(sbs->c, id, warm / 4 + 1, n / 4 + 1, &r->py_spaced, err) < 0)
        return -1;
    json_auto_t *sb = NULL;
    r->rss_zygote_kb = -1;
    if (crl_client_inspect(sbs->c, id, &sb, NULL) == 0) {
        json_t *zp = json_object_get(json_object_get(sb, "function"), "zygote_pid");
        if (json_is_integer(zp))
            r->rss_zygote_kb = crl_bench_rss_kb((pid_t)json_integer_value(zp));
    }
    return crl_bench_sandbox_destroy(sbs, id, err);
}

/* The shell function sandbox: argv, sh -c, two threads. */
static int measure_shell(struct crl_bench_run *run, const char *url,
                         struct crl_bench_sandboxes *sbs, size_t n, struct results *r,
                         struct crl_err *err)
{
    size_t warm = crl_bench_warmup(n);
    char id[CRL_BENCH_ID_MAX];
    if (sandbox_create(sbs, "shell", id, NULL, err) < 0)
        return -1;
    json_auto_t *argv_req = json_pack("{s:[s]}", "cmd", "true");
    json_auto_t *sh_req = json_pack("{s:s}", "cmd", "true");
    crl_bench_step(run, "shell [\"true\"] (%zu)", n);
    if (calls(sbs->c, id, argv_req, warm, n, &r->sh_argv, &r->sh_argv_proc, err) < 0)
        return -1;
    crl_bench_step(run, "shell \"true\" through /bin/sh -c (%zu)", n);
    if (calls(sbs->c, id, sh_req, warm, n, &r->sh_c, &r->sh_c_proc, err) < 0)
        return -1;
    crl_bench_step(run, "shell [\"true\"], %d threads into one sandbox (%zu)", CONC, n);
    if (parallel_calls(url, id, warm, NULL, err) < 0 || parallel_calls(url, id, n, &r->c2, err) < 0)
        return -1;
    return crl_bench_sandbox_destroy(sbs, id, err);
}

/* The host's floor: forks of this process, of /bin/true, of python3. */
static int measure_floor(struct crl_bench_run *run, size_t n, struct results *r,
                         struct crl_err *err)
{
    size_t warm = crl_bench_warmup(n);
    char *const true_argv[] = {"true", NULL};
    crl_bench_step(run, "floor: fork+exit+wait of this process (%zu)", n);
    r->rss_self_kb = crl_bench_rss_kb(0);
    if (crl_bench_fork_exit(warm, n, &r->fork_exit, err) < 0)
        return -1;
    crl_bench_step(run, "floor: fork+exec+wait of /bin/true (%zu)", n);
    if (crl_bench_fork_exec("/bin/true", true_argv, "", warm, n, &r->fork_exec, err) < 0)
        return -1;
    crl_bench_step(run,
                   "floor: forks of python3 with the zygote's imports (%zu, and %zu running "
                   "print(1))",
                   n, n);
    return crl_bench_python_floor(r->python, warm, n, &r->floor, err);
}

/* Everything, against the corrald at `url`, into r (and the host's floor if
 * `floor`). */
static int measure_one(struct crl_bench_run *run, const char *url, size_t n, bool floor,
                       struct results *r, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    if (crl_client_open(url, NULL, &c, err) < 0)
        return -1;
    struct crl_bench_sandboxes sbs = {.c = c, .who = run->cmd->name};
    size_t warm = crl_bench_warmup(n);
    int rc = crl_bench_host(c, run->host_id, sizeof(run->host_id), NULL, err);
    if (rc == 0)
        rc = crl_bench_python_find(r->python, sizeof(r->python), err);
    if (rc == 0)
        rc = measure_python(run, &sbs, n, r, err);
    if (rc == 0)
        rc = measure_shell(run, url, &sbs, n, r, err);
    if (rc == 0) {
        crl_bench_step(run, "function sandboxes: create and destroy, shell and python (%zu each)",
                       n);
        rc = cycles(&sbs, "shell", warm, n, &r->create_sh, &r->destroy_sh, err) < 0 ||
                     cycles(&sbs, "python", warm, n, &r->create_py, &r->destroy_py, err) < 0
                 ? -1
                 : 0;
    }
    if (rc == 0 && floor)
        rc = measure_floor(run, n, r, err);
    crl_bench_sandboxes_clear(&sbs);
    return rc;
}

/* Two builds in turns, two rounds each, half the iterations a round, the
 * order swapped in the second round so that a drift in the machine's load
 * falls on both alike. */
static int measure_both(struct crl_bench_run *run, struct both *b, struct crl_err *err)
{
    size_t n = run->o.iterations, half = n / 2 > 10 ? n / 2 : 10;
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < 2; k++) {
            bool this_build = (k == 0) == (round == 1);
            struct results one = {0};
            crl_bench_step(run, "round %d of 2: %s", round + 1,
                           this_build ? "this build" : "baseline");
            /* the host's floor is the host's: measured in this build's rounds */
            int rc = measure_one(run, this_build ? run->url : run->base_url, half, this_build, &one,
                                 err);
            if (rc == 0)
                rc = results_add(this_build ? &b->r : &b->base, &one, err);
            else
                results_free(&one);
            if (rc < 0)
                return crl_err_prefix(err, "%s", this_build ? "this build" : "the baseline");
        }
    return 0;
}

static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    struct both *b = res;
    if (run->o.baseline)
        return measure_both(run, b, err);
    return measure_one(run, run->url, run->o.iterations, true, &b->r, err);
}

/* ---- the report ---- */

static const struct crl_bench_table table = {.label = 58, .prec = 3, .rate = 9};

static json_t *kb_or_null(long kb)
{
    return kb >= 0 ? json_integer(kb) : json_null();
}

/* The figures two builds are compared on (--baseline): p50s, and the
 * concurrency-2 rate. */
static const struct {
    const char *name, *label;
    int fig;
    bool rate;
} compared[] = {
    {"create_shell", "create a shell function sandbox (p50 ms)", CSH, false},
    {"create_python", "create a python function sandbox (p50 ms)", CPY, false},
    {"destroy_shell", "destroy a shell function sandbox (p50 ms)", DSH, false},
    {"destroy_python", "destroy a python function sandbox (p50 ms)", DPY, false},
    {"python_print", "python exec \"print(1)\" (p50 ms)", PY, false},
    {"python_print_spaced", "python exec \"print(1)\", spaced (p50 ms)", PYS, false},
    {"shell_argv", "shell exec [\"true\"] (p50 ms)", SA, false},
    {"shell_sh_c", "shell exec \"true\" (p50 ms)", SC, false},
    {"shell_c2_rate", "shell [\"true\"] at concurrency 2 (calls/s)", C2, true},
};

static double compared_value(struct results *r, size_t i)
{
    struct crl_bench_stats st = crl_bench_stats_of(set_of(r, compared[i].fig));
    return compared[i].rate ? st.rate : st.p50;
}

/* This build against the baseline, figure by figure: the table, and a
 * JSON object of {this, baseline, ratio}. */
static json_t *compare(struct results *r, struct results *base, bool json_only)
{
    json_t *o = json_object();
    if (!json_only)
        printf("  %-50s %10s %10s %8s\n", "this build against --baseline", "this", "baseline",
               "ratio");
    for (size_t i = 0; i < CRL_ARRAY_SIZE(compared); i++) {
        double va = compared_value(r, i), vb = compared_value(base, i);
        double x = crl_bench_ratio(va, vb);
        if (!json_only)
            printf("  %-50s %10.3f %10.3f %7.2fx\n", compared[i].label, va, vb, x);
        json_object_set_new(o, compared[i].name,
                            json_pack("{s:o, s:o, s:o}", "this", crl_bench_json_real(va),
                                      "baseline", crl_bench_json_real(vb), "ratio",
                                      crl_bench_json_real(x)));
    }
    if (!json_only)
        printf("\n");
    return o;
}

static void print_table(const struct results *r, const struct crl_bench_stats *f)
{
    char spaced[96], threads[96], self[96], python[96];
    snprintf(spaced, sizeof(spaced), "function python: exec \"print(1)\", %d ms apart", SPACED_MS);
    snprintf(threads, sizeof(threads), "function shell: exec [\"true\"], %d threads, 1 sandbox",
             CONC);
    snprintf(self, sizeof(self), "floor: fork+exit+wait, this process (RSS %.1f MiB)",
             (double)r->rss_self_kb / 1024);
    snprintf(python, sizeof(python), "floor: fork+exit+wait, python3 + preload (RSS %.1f MiB)",
             (double)r->floor.rss_kb / 1024);
    const char *of_which = "  of which spawn to exit (duration_s)";
    const struct {
        const char *what;
        int fig;
        bool rate;
    } rows[] = {
        {"function python: exec \"print(1)\"", PY, true},
        {of_which, PYP, false},
        {spaced, PYS, true},
        {"peer: python3 -c 'print(1)' (fork+exec+wait, pipe)", PEER, true},
        {"function shell: exec [\"true\"]", SA, true},
        {of_which, SAP, false},
        {"function shell: exec \"true\" (/bin/sh -c)", SC, true},
        {of_which, SCP, false},
        {threads, C2, true},
        {self, FE, true},
        {"floor: fork+exec+wait /bin/true (pipe)", FX, true},
        {python, FP, true},
        {"floor: fork+print(1)+exit+wait, same python3, no jail", FPR, true},
        {"function shell sandbox: create (until ready)", CSH, true},
        {"function shell sandbox: destroy (until gone)", DSH, true},
        {"function python sandbox: create (until ready)", CPY, true},
        {"function python sandbox: destroy (until gone)", DPY, true},
    };
    crl_bench_table_head(&table, "");
    for (size_t i = 0; i < CRL_ARRAY_SIZE(rows); i++)
        crl_bench_table_row(&table, rows[i].what, &f[rows[i].fig], rows[i].rate);
    printf("\n");
}

static void print_ratios(const struct results *r, const struct crl_bench_stats *f)
{
    printf("  python print(1) p50: python3 -c %.2f ms / function %.2f ms = %.1fx (goal >= "
           "%.0fx); %d ms apart: %.1fx\n",
           f[PEER].p50, f[PY].p50, crl_bench_ratio(f[PEER].p50, f[PY].p50), GOAL_PYTHON_X,
           SPACED_MS, crl_bench_ratio(f[PEER].p50, f[PYS].p50));
    printf("  python print(1) p50 over python3's own fork+print(1)+exit: %.1fx (%+.2f ms; the "
           "zygote's RSS %.1f MiB)\n",
           crl_bench_ratio(f[PY].p50, f[FPR].p50), f[PY].p50 - f[FPR].p50,
           (double)r->rss_zygote_kb / 1024);
    printf("  shell [\"true\"] p50: %.3f ms (goal < %.1f ms); %.1fx the host's fork+exec+wait "
           "of /bin/true (%+.3f ms)\n",
           f[SA].p50, GOAL_SHELL_P50_MS, crl_bench_ratio(f[SA].p50, f[FX].p50),
           f[SA].p50 - f[FX].p50);
    printf("  calls/s at concurrency %d, shell [\"true\"]: %.1f (goal >= %.0f); 1 at a time: "
           "%.1f\n\n",
           CONC, f[C2].rate, GOAL_C2_PER_S, f[SA].rate);
}

static void report(const struct crl_bench_run *run, void *res)
{
    struct both *b = res;
    struct results *r = &b->r;
    struct crl_bench_stats f[N_FIGS];
    for (int k = 0; k < N_FIGS; k++)
        f[k] = crl_bench_stats_of(set_of(r, k));
    if (!run->o.json_only) {
        crl_bench_report_head(run);
        printf("  %zu iterations\npython3: %s (%s)\n\n", run->o.iterations, r->python,
               r->floor.version);
        print_table(r, f);
        print_ratios(r, f);
    }
    json_auto_t *j = crl_bench_report_json(run, "corral functions");
    json_object_set_new(j, "iterations", json_integer((json_int_t)run->o.iterations));
    json_object_set_new(j, "python3", json_string(r->python));
    json_object_set_new(j, "python3_version", json_string(r->floor.version));
    for (int k = 0; k < N_FIGS; k++)
        json_object_set_new(j, figs[k].key, crl_bench_stats_json(&f[k], figs[k].rate));
    if (run->o.baseline)
        json_object_set_new(j, "against_baseline", compare(r, &b->base, run->o.json_only));
    json_object_set_new(j, "rss_kb",
                        json_pack("{s:o, s:o, s:o}", "self", kb_or_null(r->rss_self_kb),
                                  "python_floor", kb_or_null(r->floor.rss_kb), "python_zygote",
                                  kb_or_null(r->rss_zygote_kb)));
    crl_bench_json_ratio(j, "ratio_python_peer_vs_function_p50", f[PEER].p50, f[PY].p50);
    crl_bench_json_ratio(j, "ratio_python_function_vs_fork_print_p50", f[PY].p50, f[FPR].p50);
    crl_bench_json_ratio(j, "ratio_shell_function_vs_fork_exec_p50", f[SA].p50, f[FX].p50);
    json_object_set_new(j, "goals",
                        json_pack("{s:f, s:f, s:f}", "python_peer_vs_function_p50", GOAL_PYTHON_X,
                                  "shell_argv_p50_ms", GOAL_SHELL_P50_MS, "shell_c2_per_s",
                                  GOAL_C2_PER_S));
    crl_bench_report_line(j);
}

const struct crl_bench_cmd crl_bench_functions = {
    .name = "bench functions",
    .help = help,
    .takes = CRL_BENCH_TAKES_BASELINE,
    .defaults = {.iterations = 300},
    .ops = {measure, report, both_free, sizeof(struct both)},
};
