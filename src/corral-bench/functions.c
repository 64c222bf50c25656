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
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "bench.h"
#include "daemon.h"
#include "peer.h"
#include "../corral/cli.h"

#define DEFAULT_ITERATIONS 300
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

/* The python floor, timed inside a python3 -I that has imported the
 * modules src/corral-zygote/main.c preloads (keep the two lists alike):
 * fork + waitpid of a child that only calls os._exit(0), then of a child
 * that runs print(1) as the zygote's child does (compiled and evaluated in
 * a fresh namespace, stdout flushed, to /dev/null) before it exits: no
 * jail, no corrald.  argv: warm-up count, measured count.  It prints its
 * version and VmRSS in kB, then a line of the two latencies in ms per
 * measured fork. */
static const char python_floor[] =
    "import sys, os, io, re, json, math, random, time, datetime, collections, itertools,"
    " functools, operator, string, textwrap, typing, dataclasses, decimal, fractions,"
    " statistics, hashlib, base64, pathlib, copy, heapq, bisect, contextlib, traceback,"
    " enum, uuid, csv, struct, shlex, tempfile, glob, fnmatch\n"
    "warm, n = int(sys.argv[1]), int(sys.argv[2])\n"
    "null = os.open('/dev/null', os.O_WRONLY)\n"
    "def bare():\n"
    "    os._exit(0)\n"
    "def run():\n"
    "    os.dup2(null, 1)\n"
    "    exec(compile('print(1)', '<exec>', 'exec'), {'__name__': '__main__'})\n"
    "    sys.stdout.flush()\n"
    "    os._exit(0)\n"
    "def timed(child):\n"
    "    t0 = time.perf_counter_ns()\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        child()\n"
    "    os.waitpid(pid, 0)\n"
    "    return (time.perf_counter_ns() - t0) / 1e6\n"
    "out = [(timed(bare), timed(run)) for i in range(warm + n)][warm:]\n"
    "rss = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')]\n"
    "print(sys.version.split()[0], rss[0] if rss else -1)\n"
    "print('\\n'.join('%.6f %.6f' % t for t in out))\n";

struct results {
    char host_id[32];
    char python[PATH_MAX], python_version[32];
    struct crl_bench_samples py, py_peer, sh_argv, sh_c, c2, fork_exit, fork_exec, fork_py,
        fork_py_run, py_spaced;
    struct crl_bench_samples py_proc, sh_argv_proc, sh_c_proc; /* duration_s */
    struct crl_bench_samples create_sh, destroy_sh, create_py, destroy_py;
    long rss_self_kb, rss_pyfloor_kb, rss_zygote_kb;
};

#define N_SETS 17

/* Every figure's samples, in one order. */
static void results_sets(struct results *r, struct crl_bench_samples **all)
{
    struct crl_bench_samples *sets[N_SETS] = {
        &r->py,           &r->py_peer,   &r->sh_argv,   &r->sh_c,        &r->c2,
        &r->fork_exit,    &r->fork_exec, &r->fork_py,   &r->fork_py_run, &r->py_proc,
        &r->sh_argv_proc, &r->sh_c_proc, &r->py_spaced, &r->create_sh,   &r->destroy_sh,
        &r->create_py,    &r->destroy_py};
    memcpy(all, sets, sizeof(sets));
}

static void results_free(struct results *r)
{
    struct crl_bench_samples *all[N_SETS];
    results_sets(r, all);
    for (size_t i = 0; i < N_SETS; i++)
        crl_bench_samples_free(all[i]);
}

/* One round's results added to the run's (moved: `src` is freed). */
static int results_add(struct results *dst, struct results *src, struct crl_err *err)
{
    struct crl_bench_samples *d[N_SETS], *s[N_SETS];
    results_sets(dst, d);
    results_sets(src, s);
    int rc = 0;
    for (size_t i = 0; i < N_SETS && rc == 0; i++)
        rc = crl_bench_samples_append(d[i], s[i], err);
    memcpy(dst->host_id, src->host_id, sizeof(dst->host_id));
    memcpy(dst->python, src->python, sizeof(dst->python));
    memcpy(dst->python_version, src->python_version, sizeof(dst->python_version));
    dst->rss_self_kb = src->rss_self_kb;
    dst->rss_pyfloor_kb = src->rss_pyfloor_kb;
    dst->rss_zygote_kb = src->rss_zygote_kb;
    results_free(src);
    return rc;
}

#define STEP(quiet, ...)                                             \
    do {                                                             \
        if (!(quiet)) {                                              \
            fprintf(stderr, "corral bench functions: " __VA_ARGS__); \
            fputc('\n', stderr);                                     \
        }                                                            \
    } while (0)

/* VmRSS of /proc/<pid>/status in kB (pid 0: ourselves), -1 if unknown. */
static long rss_kb(pid_t pid)
{
    char path[64], buf[4096];
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/status");
    if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
        return -1;
    const char *p = strstr(buf, "\nVmRSS:");
    return p ? strtol(p + 7, NULL, 10) : -1;
}

/* The python3 to compare with: the system's (the zygote embeds the
 * system's libpython), else the first in $PATH.  Not a PATH lookup first:
 * a version manager's shim there (pyenv) would add its own startup. */
static int find_python(char *out, size_t cap, struct crl_err *err)
{
    const char *path = getenv("PATH");
    snprintf(out, cap, "/usr/bin/python3");
    if (access(out, X_OK) == 0)
        return 0;
    if (!path || !*path)
        path = "/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, cap, "%.*s/python3", (int)len, path);
        if (len > 0 && access(out, X_OK) == 0)
            return 0;
        path += len + (path[len] == ':');
    }
    return crl_err_set(err, CRL_E_NOT_FOUND, "no python3 in /usr/bin or PATH");
}

/* ---- calls through the API ---- */

static int sandbox_create(struct crl_client *c, const char *runtime, char *id, size_t cap,
                          struct crl_err *err)
{
    json_auto_t *spec = json_pack("{s:s, s:s, s:{s:s}}", "backend", "function", "runtime", runtime,
                                  "labels", "corral-bench", "1");
    json_auto_t *sb = NULL;
    if (crl_client_create(c, spec, &sb, err) < 0)
        return crl_err_prefix(err, "creating a %s function sandbox", runtime);
    snprintf(id, cap, "%s", crl_cli_str(sb, "id", ""));
    return 0;
}

static void sandbox_destroy(struct crl_client *c, char *id)
{
    struct crl_err e = CRL_ERR_INIT;
    if (id[0] && crl_client_destroy(c, id, NULL, &e) < 0 && e.code != CRL_E_NOT_FOUND)
        fprintf(stderr, "corral: bench functions: could not destroy %s: %s\n", id, e.msg);
    id[0] = 0;
}

/* One exec, timed from the request to its whole answer; it must exit 0
 * and, with `expect`, print exactly that.  *proc_ms (may be NULL) gets
 * the result's duration_s: corrald's clock from the spawn to the exit. */
static int call(struct crl_client *c, const char *id, json_t *req, const char *expect, double *ms,
                double *proc_ms, struct crl_err *err)
{
    json_auto_t *res = NULL;
    unsigned long long t0 = crl_now_ns();
    int rc = crl_client_exec(c, id, req, &res, err);
    unsigned long long t1 = crl_now_ns();
    if (rc < 0)
        return crl_err_prefix(err, "exec in %s", id);
    if (crl_client_exit_status(res) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "exec in %s ended with status %d (%s): %s", id,
                           crl_client_exit_status(res), crl_cli_str(res, "reason", "?"),
                           crl_cli_str(res, "stderr", ""));
    if (expect && strcmp(crl_cli_str(res, "stdout", ""), expect) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "exec in %s printed '%s', not '%s'", id,
                           crl_cli_str(res, "stdout", ""), expect);
    *ms = (double)(t1 - t0) / 1e6;
    if (proc_ms)
        *proc_ms = json_number_value(json_object_get(res, "duration_s")) * 1e3;
    return 0;
}

/* A function sandbox's life: `warm` unmeasured then `n` measured creates
 * (timed until it is ready) and destroys (until it is gone), one at a time. */
static int cycles(struct crl_client *c, const char *runtime, size_t warm, size_t n,
                  struct crl_bench_samples *create, struct crl_bench_samples *destroy,
                  struct crl_err *err)
{
    if (crl_bench_samples_alloc(create, n, err) < 0 || crl_bench_samples_alloc(destroy, n, err) < 0)
        return -1;
    for (size_t i = 0; i < warm + n; i++) {
        char id[64] = "";
        unsigned long long t0 = crl_now_ns();
        if (crl_bench_check_interrupted(err) < 0 ||
            sandbox_create(c, runtime, id, sizeof(id), err) < 0)
            return -1;
        unsigned long long t1 = crl_now_ns();
        if (crl_client_destroy(c, id, NULL, err) < 0)
            return crl_err_prefix(err, "destroying %s", id);
        unsigned long long t2 = crl_now_ns();
        if (i < warm)
            continue;
        create->ms[create->n++] = (double)(t1 - t0) / 1e6;
        destroy->ms[destroy->n++] = (double)(t2 - t1) / 1e6;
        create->wall_s += (double)(t1 - t0) / 1e9;
        destroy->wall_s += (double)(t2 - t1) / 1e9;
    }
    return 0;
}

/* `warm` unmeasured then `n` measured calls of `req`, one at a time. */
static int calls(struct crl_client *c, const char *id, json_t *req, size_t warm, size_t n,
                 struct crl_bench_samples *out, struct crl_bench_samples *proc, struct crl_err *err)
{
    if (crl_bench_samples_alloc(out, n, err) < 0 || crl_bench_samples_alloc(proc, n, err) < 0)
        return -1;
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n; i++) {
        double ms, pms;
        if (i == warm)
            start = crl_now_ns();
        if (crl_bench_check_interrupted(err) < 0 || call(c, id, req, NULL, &ms, &pms, err) < 0)
            return -1;
        if (i >= warm) {
            out->ms[out->n++] = ms;
            proc->ms[proc->n++] = pms;
        }
    }
    out->wall_s = proc->wall_s = (double)(crl_now_ns() - start) / 1e9;
    return 0;
}

/* Python: our exec and the peer, alternating which goes first. */
static int python_vs_peer(struct crl_client *c, const char *id, const char *python, size_t warm,
                          size_t n, struct results *r, struct crl_err *err)
{
    json_auto_t *req = json_pack("{s:s}", "cmd", "print(1)");
    char *const argv[] = {"python3", "-c", "print(1)", NULL};
    if (crl_bench_samples_alloc(&r->py, n, err) < 0 ||
        crl_bench_samples_alloc(&r->py_peer, n, err) < 0 ||
        crl_bench_samples_alloc(&r->py_proc, n, err) < 0)
        return -1;
    double ours_s = 0, peer_s = 0;
    for (size_t i = 0; i < warm + n; i++) {
        double ours = 0, proc = 0, peer = 0;
        for (int k = 0; k < 2; k++) {
            if (crl_bench_check_interrupted(err) < 0)
                return -1;
            if ((k == 0) == (i % 2 == 0)) {
                if (call(c, id, req, "1\n", &ours, &proc, err) < 0)
                    return -1;
                continue;
            }
            int status;
            cleanup_free char *out = NULL;
            unsigned long long t0 = crl_now_ns();
            if (crl_bench_capture(python, argv, &status, &out, err) < 0)
                return -1;
            peer = (double)(crl_now_ns() - t0) / 1e6;
            if (status != 0 || !out || strcmp(out, "1\n") != 0)
                return crl_err_set(err, CRL_E_INTERNAL,
                                   "%s -c 'print(1)' ended with wait status %d, printing '%s'",
                                   python, status, out ? out : "");
        }
        if (i < warm)
            continue;
        r->py.ms[r->py.n++] = ours;
        r->py_proc.ms[r->py_proc.n++] = proc;
        r->py_peer.ms[r->py_peer.n++] = peer;
        ours_s += ours / 1e3;
        peer_s += peer / 1e3;
    }
    /* Interleaved: each side's rate is over its own time. */
    r->py.wall_s = r->py_proc.wall_s = ours_s;
    r->py_peer.wall_s = peer_s;
    return 0;
}

/* Concurrency 2: one client (connection) per thread, one sandbox. */
struct worker {
    const char *url, *id;
    size_t n;
    double *ms; /* n, or NULL for a warm-up */
    int rc;
    struct crl_err err;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "true");
    w->rc = crl_client_open(w->url, NULL, &c, &w->err);
    for (size_t i = 0; i < w->n && w->rc == 0; i++) {
        double ms;
        w->rc = crl_bench_check_interrupted(&w->err);
        if (w->rc == 0)
            w->rc = call(c, w->id, req, NULL, &ms, NULL, &w->err);
        if (w->rc == 0 && w->ms)
            w->ms[i] = ms;
    }
    return NULL;
}

static int parallel_calls(const char *url, const char *id, size_t n, struct crl_bench_samples *out,
                          struct crl_err *err)
{
    struct worker w[CONC];
    pthread_t t[CONC];
    if (out && crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    size_t off = 0;
    for (int i = 0; i < CONC; i++) {
        size_t share = n / CONC + ((size_t)i < n % CONC ? 1 : 0);
        w[i] = (struct worker){.url = url, .id = id, .n = share, .ms = out ? out->ms + off : NULL};
        off += share;
    }
    unsigned long long t0 = crl_now_ns();
    int started = 0, rc = 0;
    for (; started < CONC; started++) {
        int e = pthread_create(&t[started], NULL, worker_main, &w[started]);
        if (e != 0) {
            rc = crl_err_sys(err, e, "pthread_create");
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    double wall = (double)(crl_now_ns() - t0) / 1e9;
    for (int i = 0; i < started && rc == 0; i++)
        if (w[i].rc < 0) {
            *err = w[i].err;
            rc = -1;
        }
    if (out && rc == 0) {
        out->n = n;
        out->wall_s = wall;
    }
    return rc;
}

/* ---- the python floor ---- */

static int python_fork_floor(const char *python, size_t warm, size_t n, struct results *r,
                             struct crl_err *err)
{
    char w[32], m[32];
    snprintf(w, sizeof(w), "%zu", warm);
    snprintf(m, sizeof(m), "%zu", n);
    char *const argv[] = {"python3", "-I", "-c", (char *)python_floor, w, m, NULL};
    int status;
    cleanup_free char *out = NULL;
    struct crl_bench_samples *bare = &r->fork_py, *run = &r->fork_py_run;
    if (crl_bench_samples_alloc(bare, n, err) < 0 || crl_bench_samples_alloc(run, n, err) < 0 ||
        crl_bench_capture(python, argv, &status, &out, err) < 0)
        return -1;
    if (status != 0 || !out)
        return crl_err_set(err, CRL_E_INTERNAL, "the python fork floor ended with wait status %d",
                           status);
    size_t vlen = strcspn(out, " \n");
    snprintf(r->python_version, sizeof(r->python_version), "%.*s", (int)vlen, out);
    char *p = out + vlen, *end;
    r->rss_pyfloor_kb = strtol(p, &end, 10);
    for (p = end; run->n < n; p = end) {
        double a = strtod(p, &end);
        if (end == p)
            break;
        double b = strtod(p = end, &end);
        if (end == p)
            break;
        bare->ms[bare->n++] = a;
        run->ms[run->n++] = b;
        /* The forks' own time, without the python loop's. */
        bare->wall_s += a / 1e3;
        run->wall_s += b / 1e3;
    }
    if (run->n != n)
        return crl_err_set(err, CRL_E_INTERNAL, "the python fork floor printed %zu of %zu times",
                           run->n, n);
    return 0;
}

/* ---- the run ---- */

static int measure_with(struct crl_client *c, const char *url, size_t n, bool quiet,
                        struct results *r, char *py_id, char *sh_id, struct crl_err *err)
{
    size_t warm = n / 10 > 5 ? n / 10 : 5;
    json_auto_t *h = NULL;
    if (crl_client_request(c, "GET", "/v1/host", NULL, &h, NULL, err) < 0)
        return -1;
    snprintf(r->host_id, sizeof(r->host_id), "%s", crl_cli_str(h, "host_id", "?"));
    if (find_python(r->python, sizeof(r->python), err) < 0)
        return -1;

    if (sandbox_create(c, "python", py_id, 64, err) < 0)
        return -1;
    STEP(quiet, "python print(1): function exec and %s -c, interleaved (%zu each)", r->python, n);
    if (python_vs_peer(c, py_id, r->python, warm, n, r, err) < 0)
        return -1;
    json_auto_t *req_print = json_pack("{s:s}", "cmd", "print(1)");
    /* An agent calls tools between thoughts, not back to back: the same
     * call with SPACED_MS between calls, which is when the zygote's spares
     * (forked ahead) are ready. */
    STEP(quiet, "python print(1), %d ms apart (%zu)", SPACED_MS, n / 4 + 1);
    if (crl_bench_samples_alloc(&r->py_spaced, n / 4 + 1, err) < 0)
        return -1;
    for (size_t i = 0; i < warm / 4 + 1 + n / 4 + 1; i++) {
        struct timespec gap = {0, SPACED_MS * 1000000L};
        double ms;
        nanosleep(&gap, NULL);
        if (crl_bench_check_interrupted(err) < 0 ||
            call(c, py_id, req_print, "1\n", &ms, NULL, err) < 0)
            return -1;
        if (i >= warm / 4 + 1)
            r->py_spaced.ms[r->py_spaced.n++] = ms;
    }
    json_auto_t *sb = NULL;
    r->rss_zygote_kb = -1;
    if (crl_client_inspect(c, py_id, &sb, NULL) == 0) {
        json_t *zp = json_object_get(json_object_get(sb, "function"), "zygote_pid");
        if (json_is_integer(zp))
            r->rss_zygote_kb = rss_kb((pid_t)json_integer_value(zp));
    }
    sandbox_destroy(c, py_id);

    if (sandbox_create(c, "shell", sh_id, 64, err) < 0)
        return -1;
    json_auto_t *argv_req = json_pack("{s:[s]}", "cmd", "true");
    json_auto_t *sh_req = json_pack("{s:s}", "cmd", "true");
    STEP(quiet, "shell [\"true\"] (%zu)", n);
    if (calls(c, sh_id, argv_req, warm, n, &r->sh_argv, &r->sh_argv_proc, err) < 0)
        return -1;
    STEP(quiet, "shell \"true\" through /bin/sh -c (%zu)", n);
    if (calls(c, sh_id, sh_req, warm, n, &r->sh_c, &r->sh_c_proc, err) < 0)
        return -1;
    STEP(quiet, "shell [\"true\"], %d threads into one sandbox (%zu)", CONC, n);
    if (parallel_calls(url, sh_id, warm, NULL, err) < 0 ||
        parallel_calls(url, sh_id, n, &r->c2, err) < 0)
        return -1;
    sandbox_destroy(c, sh_id);

    STEP(quiet, "function sandboxes: create and destroy, shell and python (%zu each)", n);
    if (cycles(c, "shell", warm, n, &r->create_sh, &r->destroy_sh, err) < 0 ||
        cycles(c, "python", warm, n, &r->create_py, &r->destroy_py, err) < 0)
        return -1;

    STEP(quiet, "floor: fork+exit+wait of this process (%zu)", n);
    r->rss_self_kb = rss_kb(0);
    if (crl_bench_fork_exit(warm, n, &r->fork_exit, err) < 0 ||
        crl_bench_check_interrupted(err) < 0)
        return -1;
    STEP(quiet, "floor: fork+exec+wait of /bin/true (%zu)", n);
    char *const true_argv[] = {"true", NULL};
    if (crl_bench_fork_exec("/bin/true", true_argv, "", warm, n, &r->fork_exec, err) < 0 ||
        crl_bench_check_interrupted(err) < 0)
        return -1;
    STEP(quiet, "floor: forks of python3 with the zygote's imports (%zu, and %zu running print(1))",
         n, n);
    return python_fork_floor(r->python, warm, n, r, err);
}

static int measure(const char *url, size_t n, bool quiet, struct results *r, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    char py_id[64] = "", sh_id[64] = "";
    if (crl_client_open(url, NULL, &c, err) < 0)
        return -1;
    int rc = measure_with(c, url, n, quiet, r, py_id, sh_id, err);
    sandbox_destroy(c, py_id);
    sandbox_destroy(c, sh_id);
    return rc;
}

/* ---- the report ---- */

static void row(const char *what, const struct crl_bench_stats *s)
{
    printf("  %-58s %8.3f %8.3f %9.1f\n", what, s->p50, s->p99, s->rate);
}

/* A part of the row above: no rate of its own. */
static void part(const char *what, const struct crl_bench_stats *s)
{
    printf("  %-58s %8.3f %8.3f\n", what, s->p50, s->p99);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : NAN;
}

static json_t *real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static json_t *kb_or_null(long kb)
{
    return kb >= 0 ? json_integer(kb) : json_null();
}

/* The figures two builds are compared on (--baseline): p50s, and the
 * concurrency-2 rate. */
struct compared {
    const char *name, *label;
    struct crl_bench_samples *(*of)(struct results *r);
    bool rate;
};

#define SET(f)                                                  \
    static struct crl_bench_samples *set_##f(struct results *r) \
    {                                                           \
        return &r->f;                                           \
    }
SET(create_sh)
SET(create_py)
SET(destroy_sh)
SET(destroy_py)
SET(py)
SET(py_spaced)
SET(sh_argv)
SET(sh_c)
SET(c2)

static const struct compared compared[] = {
    {"create_shell", "create a shell function sandbox (p50 ms)", set_create_sh, false},
    {"create_python", "create a python function sandbox (p50 ms)", set_create_py, false},
    {"destroy_shell", "destroy a shell function sandbox (p50 ms)", set_destroy_sh, false},
    {"destroy_python", "destroy a python function sandbox (p50 ms)", set_destroy_py, false},
    {"python_print", "python exec \"print(1)\" (p50 ms)", set_py, false},
    {"python_print_spaced", "python exec \"print(1)\", spaced (p50 ms)", set_py_spaced, false},
    {"shell_argv", "shell exec [\"true\"] (p50 ms)", set_sh_argv, false},
    {"shell_sh_c", "shell exec \"true\" (p50 ms)", set_sh_c, false},
    {"shell_c2_rate", "shell [\"true\"] at concurrency 2 (calls/s)", set_c2, true},
};

/* This build against the baseline, figure by figure: the table, and a
 * JSON object of {this, baseline, ratio}. */
static json_t *compare(struct results *r, struct results *base, bool json_only)
{
    json_t *o = json_object();
    if (!json_only)
        printf("  %-50s %10s %10s %8s\n", "this build against --baseline", "this", "baseline",
               "ratio");
    for (size_t i = 0; i < CRL_ARRAY_SIZE(compared); i++) {
        const struct compared *c = &compared[i];
        struct crl_bench_stats a = crl_bench_stats_of(c->of(r)),
                               b = crl_bench_stats_of(c->of(base));
        double va = c->rate ? a.rate : a.p50, vb = c->rate ? b.rate : b.p50;
        if (!json_only)
            printf("  %-50s %10.3f %10.3f %7.2fx\n", c->label, va, vb, ratio(va, vb));
        json_object_set_new(o, c->name,
                            json_pack("{s:o, s:o, s:o}", "this", real_or_null(va), "baseline",
                                      real_or_null(vb), "ratio", real_or_null(ratio(va, vb))));
    }
    if (!json_only)
        printf("\n");
    return o;
}

static void report(struct results *r, struct results *base, size_t n, const char *load0,
                   const char *load1, bool json_only)
{
    struct crl_bench_stats py = crl_bench_stats_of(&r->py), peer = crl_bench_stats_of(&r->py_peer),
                           sa = crl_bench_stats_of(&r->sh_argv), sc = crl_bench_stats_of(&r->sh_c),
                           c2 = crl_bench_stats_of(&r->c2), fe = crl_bench_stats_of(&r->fork_exit),
                           fx = crl_bench_stats_of(&r->fork_exec),
                           fp = crl_bench_stats_of(&r->fork_py),
                           fpr = crl_bench_stats_of(&r->fork_py_run),
                           pyp = crl_bench_stats_of(&r->py_proc),
                           sap = crl_bench_stats_of(&r->sh_argv_proc),
                           scp = crl_bench_stats_of(&r->sh_c_proc),
                           pys = crl_bench_stats_of(&r->py_spaced),
                           csh = crl_bench_stats_of(&r->create_sh),
                           dsh = crl_bench_stats_of(&r->destroy_sh),
                           cpy = crl_bench_stats_of(&r->create_py),
                           dpy = crl_bench_stats_of(&r->destroy_py);
    double py_x = ratio(peer.p50, py.p50);
    struct crl_bench_machine m;
    crl_bench_machine(&m);

    if (!json_only) {
        char what[128];
        printf("corral bench functions  %s  host %s (%s %s, %ld CPUs)  load %s -> %s  %zu "
               "iterations\n",
               m.date, r->host_id, m.u.sysname, m.u.release, m.cpus, load0, load1, n);
        printf("python3: %s (%s)\n\n", r->python, r->python_version);
        printf("  %-58s %8s %8s %9s\n", "", "p50 ms", "p99 ms", "per s");
        row("function python: exec \"print(1)\"", &py);
        part("  of which spawn to exit (duration_s)", &pyp);
        snprintf(what, sizeof(what), "function python: exec \"print(1)\", %d ms apart", SPACED_MS);
        row(what, &pys);
        row("peer: python3 -c 'print(1)' (fork+exec+wait, pipe)", &peer);
        row("function shell: exec [\"true\"]", &sa);
        part("  of which spawn to exit (duration_s)", &sap);
        row("function shell: exec \"true\" (/bin/sh -c)", &sc);
        part("  of which spawn to exit (duration_s)", &scp);
        snprintf(what, sizeof(what), "function shell: exec [\"true\"], %d threads, 1 sandbox",
                 CONC);
        row(what, &c2);
        snprintf(what, sizeof(what), "floor: fork+exit+wait, this process (RSS %.1f MiB)",
                 (double)r->rss_self_kb / 1024);
        row(what, &fe);
        row("floor: fork+exec+wait /bin/true (pipe)", &fx);
        snprintf(what, sizeof(what), "floor: fork+exit+wait, python3 + preload (RSS %.1f MiB)",
                 (double)r->rss_pyfloor_kb / 1024);
        row(what, &fp);
        row("floor: fork+print(1)+exit+wait, same python3, no jail", &fpr);
        row("function shell sandbox: create (until ready)", &csh);
        row("function shell sandbox: destroy (until gone)", &dsh);
        row("function python sandbox: create (until ready)", &cpy);
        row("function python sandbox: destroy (until gone)", &dpy);
        printf("\n");
        printf("  python print(1) p50: python3 -c %.2f ms / function %.2f ms = %.1fx (goal >= "
               "%.0fx); %d ms apart: %.1fx\n",
               peer.p50, py.p50, py_x, GOAL_PYTHON_X, SPACED_MS, ratio(peer.p50, pys.p50));
        printf("  python print(1) p50 over python3's own fork+print(1)+exit: %.1fx (%+.2f ms; the "
               "zygote's RSS %.1f MiB)\n",
               ratio(py.p50, fpr.p50), py.p50 - fpr.p50, (double)r->rss_zygote_kb / 1024);
        printf("  shell [\"true\"] p50: %.3f ms (goal < %.1f ms); %.1fx the host's fork+exec+wait "
               "of /bin/true (%+.3f ms)\n",
               sa.p50, GOAL_SHELL_P50_MS, ratio(sa.p50, fx.p50), sa.p50 - fx.p50);
        printf("  calls/s at concurrency %d, shell [\"true\"]: %.1f (goal >= %.0f); 1 at a time: "
               "%.1f\n\n",
               CONC, c2.rate, GOAL_C2_PER_S, sa.rate);
    }
    json_auto_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:I, s:s}", "bench", "corral functions",
                  "date", m.date, "host_id", r->host_id, "kernel", m.u.release, "cpus",
                  (json_int_t)m.cpus, "load_before", load0, "load_after", load1, "iterations",
                  (json_int_t)n, "python3", r->python);
    json_object_set_new(j, "python3_version", json_string(r->python_version));
    json_object_set_new(j, "python_function", crl_bench_stats_json(&py, true));
    json_object_set_new(j, "python_function_duration", crl_bench_stats_json(&pyp, false));
    json_object_set_new(j, "python3_c_peer", crl_bench_stats_json(&peer, true));
    json_object_set_new(j, "python_function_spaced", crl_bench_stats_json(&pys, false));
    json_object_set_new(j, "shell_function_argv", crl_bench_stats_json(&sa, true));
    json_object_set_new(j, "shell_function_argv_duration", crl_bench_stats_json(&sap, false));
    json_object_set_new(j, "shell_function_sh_c", crl_bench_stats_json(&sc, true));
    json_object_set_new(j, "shell_function_sh_c_duration", crl_bench_stats_json(&scp, false));
    json_object_set_new(j, "shell_function_argv_c2_one_sandbox", crl_bench_stats_json(&c2, true));
    json_object_set_new(j, "floor_fork_exit_self", crl_bench_stats_json(&fe, true));
    json_object_set_new(j, "floor_fork_exec_true", crl_bench_stats_json(&fx, true));
    json_object_set_new(j, "floor_fork_exit_python", crl_bench_stats_json(&fp, true));
    json_object_set_new(j, "floor_fork_print_exit_python", crl_bench_stats_json(&fpr, true));
    json_object_set_new(j, "create_shell", crl_bench_stats_json(&csh, false));
    json_object_set_new(j, "destroy_shell", crl_bench_stats_json(&dsh, false));
    json_object_set_new(j, "create_python", crl_bench_stats_json(&cpy, false));
    json_object_set_new(j, "destroy_python", crl_bench_stats_json(&dpy, false));
    if (base)
        json_object_set_new(j, "against_baseline", compare(r, base, json_only));
    json_object_set_new(j, "rss_kb",
                        json_pack("{s:o, s:o, s:o}", "self", kb_or_null(r->rss_self_kb),
                                  "python_floor", kb_or_null(r->rss_pyfloor_kb), "python_zygote",
                                  kb_or_null(r->rss_zygote_kb)));
    json_object_set_new(j, "ratio_python_peer_vs_function_p50", real_or_null(py_x));
    json_object_set_new(j, "ratio_python_function_vs_fork_print_p50",
                        real_or_null(ratio(py.p50, fpr.p50)));
    json_object_set_new(j, "ratio_shell_function_vs_fork_exec_p50",
                        real_or_null(ratio(sa.p50, fx.p50)));
    json_object_set_new(j, "goals",
                        json_pack("{s:f, s:f, s:f}", "python_peer_vs_function_p50", GOAL_PYTHON_X,
                                  "shell_argv_p50_ms", GOAL_SHELL_P50_MS, "shell_c2_per_s",
                                  GOAL_C2_PER_S));
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (line)
        printf("%s\n", line);
    free(line);
}

/* Two builds in turns, two rounds each, half the iterations a round, the
 * order swapped in the second round so that a drift in the machine's load
 * falls on both alike. */
static int measure_both(const char *url, const char *base_url, size_t n, bool quiet,
                        struct results *r, struct results *base, struct crl_err *err)
{
    size_t half = n / 2 > 10 ? n / 2 : 10;
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < 2; k++) {
            bool this_build = (k == 0) == (round == 1);
            struct results one = {0};
            STEP(quiet, "round %d of 2: %s", round + 1, this_build ? "this build" : "baseline");
            int rc = measure(this_build ? url : base_url, half, quiet, &one, err);
            if (rc == 0)
                rc = results_add(this_build ? r : base, &one, err);
            else
                results_free(&one);
            if (rc < 0)
                return crl_err_prefix(err, "%s", this_build ? "this build" : "the baseline");
        }
    return 0;
}

int crl_bench_functions(int argc, char **argv)
{
    enum { OPT_START = CRL_CLI_OPT_OTHER, OPT_ITER, OPT_JSON, OPT_BASELINE };
    static const struct option opts[] = {{"start-daemon", no_argument, 0, OPT_START},
                                         {"iterations", required_argument, 0, OPT_ITER},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"baseline", required_argument, 0, OPT_BASELINE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool start = false, json_only = false;
    const char *baseline = NULL;
    long long iterations = DEFAULT_ITERATIONS;
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_START: start = true; break;
        case OPT_ITER:
            if (crl_cli_parse_int("--iterations", optarg, 10, 1000000, &iterations, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_JSON: json_only = true; break;
        case OPT_BASELINE: baseline = optarg; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (baseline)
        start = true;
    if (start && geteuid() != 0)
        return crl_cli_failf("bench functions: --start-daemon needs root (corrald does)");

    crl_cli_catch_signals(NULL);
    struct crl_bench_daemon d = {0}, bd = {.bindir = baseline, .tag = "baseline"};
    const char *url, *base_url = NULL;
    int brc = crl_bench_begin(start, &d, &url, "bench functions");
    if (brc)
        return brc;
    if (baseline && (brc = crl_bench_begin(true, &bd, &base_url, "bench functions --baseline"))) {
        crl_bench_end(start, &d, 0, "bench functions");
        return brc;
    }
    char load0[64], load1[64];
    struct results r = {0}, base = {0};
    crl_bench_loadavg(load0, sizeof(load0));
    int rc = baseline ? measure_both(url, base_url, (size_t)iterations, json_only, &r, &base, &err)
                      : measure(url, (size_t)iterations, json_only, &r, &err);
    crl_bench_loadavg(load1, sizeof(load1));
    if (baseline)
        crl_bench_end(true, &bd, rc, "bench functions --baseline");
    crl_bench_end(start, &d, rc, "bench functions");
    if (rc == 0)
        report(&r, baseline ? &base : NULL, (size_t)iterations, load0, load1, json_only);
    results_free(&r);
    results_free(&base);
    if (rc < 0) {
        if (crl_cli_interrupted)
            return 128 + crl_cli_interrupted;
        crl_err_prefix(&err, "bench functions");
        return crl_cli_fail(&err);
    }
    return 0;
}
