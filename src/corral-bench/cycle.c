/* corral bench: sandbox cycles (create, exec /bin/true, destroy) and exec
 * round trips through the API, against `crun run` of a copy of the same rootfs and a
 * bare posix_spawn of the same binary, measured on this machine in one run.
 * It prints figures and ratios and never judges an absolute time. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "bench.h"
#include "daemon.h"
#include "peer.h"
#include "../corral/cli.h"

#define DEFAULT_ITERATIONS 200
#define MAX_CONC 2

static const char help[] =
    "usage: corral bench [OPTIONS]\n"
    "       corral bench images [OPTIONS]  (image import, create and disk: see its --help)\n"
    "       corral bench functions [OPTIONS]  (the function backend's calls: see its --help)\n"
    "       corral bench traj [OPTIONS]  (trajectories: step overhead, fast-forward, restore)\n"
    "\n"
    "Measure, on this machine and in one run:\n"
    "  1. sandbox cycles through the API: create (64 MiB), exec /bin/true,\n"
    "     destroy, one at a time and two in parallel: p50, p99, cycles/s;\n"
    "  2. exec round trips of /bin/true in one live sandbox: p50, p99;\n"
    "  3. the peers: `crun run` of a writable copy of the busybox rootfs, one at a time and\n"
    "     two in parallel, and posix_spawn+wait of the same /bin/true;\n"
    "  4. the ratios: our cycles/s over crun's at concurrency 2, and exec p50\n"
    "     over posix_spawn p50.\n"
    "Prints a table and a JSON line.  Uses corrald at $CORRAL_URL unless\n"
    "--start-daemon; crun runs need root (as corrald does).\n"
    "\n"
    "  --start-daemon      run a private corrald (next to this corral, fresh state\n"
    "                      in a temporary directory) for the bench, stop it after\n"
    "  --iterations N      measured operations per figure (default 200)\n"
    "  --json              print only the JSON line\n";

/* ---- corral cycles, one client per thread ---- */

struct worker {
    const char *url;
    size_t n;
    json_t *spec;
    double *cycle, *create, *exec, *destroy; /* n each */
    int rc;
    struct crl_err err;
};

static json_t *true_request(void)
{
    return json_pack("{s:[s]}", "cmd", "/bin/true");
}

static int check_result(json_t *res, struct crl_err *err)
{
    if (crl_client_exit_status(res) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "/bin/true in a sandbox ended with status %d (%s)",
                           crl_client_exit_status(res), crl_cli_str(res, "reason", "?"));
    return 0;
}

static int one_cycle(struct crl_client *c, struct worker *w, size_t i, json_t *req)
{
    json_auto_t *sb = NULL;
    json_auto_t *res = NULL;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_create(c, w->spec, &sb, &w->err) < 0)
        return crl_err_prefix(&w->err, "create");
    unsigned long long t1 = crl_now_ns();
    const char *id = crl_cli_str(sb, "id", "");
    int rc = crl_client_exec(c, id, req, &res, &w->err);
    if (rc < 0)
        crl_err_prefix(&w->err, "exec in %s", id);
    else
        rc = check_result(res, &w->err);
    unsigned long long t2 = crl_now_ns();
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_destroy(c, id, NULL, &derr) < 0 && rc == 0) {
        w->err = derr;
        return crl_err_prefix(&w->err, "destroy %s", id);
    }
    unsigned long long t3 = crl_now_ns();
    if (rc < 0)
        return -1;
    if (w->cycle) {
        w->cycle[i] = (double)(t3 - t0) / 1e6;
        w->create[i] = (double)(t1 - t0) / 1e6;
        w->exec[i] = (double)(t2 - t1) / 1e6;
        w->destroy[i] = (double)(t3 - t2) / 1e6;
    }
    return 0;
}

static void *cycle_worker(void *p)
{
    struct worker *w = p;
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *req = true_request();
    w->rc = crl_client_open(w->url, NULL, &c, &w->err);
    for (size_t i = 0; i < w->n && w->rc == 0; i++) {
        if (crl_cli_interrupted)
            w->rc = crl_err_set(&w->err, CRL_E_UNAVAILABLE, "interrupted");
        else
            w->rc = one_cycle(c, w, i, req);
    }
    return NULL;
}

struct cycles {
    struct crl_bench_samples cycle, create, exec, destroy;
};

static void cycles_free(struct cycles *cy)
{
    crl_bench_samples_free(&cy->cycle);
    crl_bench_samples_free(&cy->create);
    crl_bench_samples_free(&cy->exec);
    crl_bench_samples_free(&cy->destroy);
}

/* `n` cycles shared by `conc` threads; with `cy` NULL, a warm-up. */
static int run_cycles(const char *url, json_t *spec, int conc, size_t n, struct cycles *cy,
                      struct crl_err *err)
{
    struct worker w[MAX_CONC];
    pthread_t t[MAX_CONC];
    if (cy) {
        struct crl_bench_samples *all[] = {&cy->cycle, &cy->create, &cy->exec, &cy->destroy};
        for (size_t k = 0; k < CRL_ARRAY_SIZE(all); k++) {
            all[k]->ms = calloc(n ? n : 1, sizeof(double));
            all[k]->n = n;
            if (!all[k]->ms)
                return crl_err_sys(err, ENOMEM, "allocating samples");
        }
    }
    size_t off = 0;
    for (int i = 0; i < conc; i++) {
        size_t share = n / (size_t)conc + ((size_t)i < n % (size_t)conc ? 1 : 0);
        w[i] = (struct worker){.url = url, .n = share, .spec = spec};
        if (cy) {
            w[i].cycle = cy->cycle.ms + off;
            w[i].create = cy->create.ms + off;
            w[i].exec = cy->exec.ms + off;
            w[i].destroy = cy->destroy.ms + off;
        }
        off += share;
    }
    unsigned long long t0 = crl_now_ns();
    int started = 0, rc = 0;
    for (; started < conc; started++) {
        int e = pthread_create(&t[started], NULL, cycle_worker, &w[started]);
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
    if (cy)
        cy->cycle.wall_s = cy->create.wall_s = cy->exec.wall_s = cy->destroy.wall_s = wall;
    return rc;
}

/* Exec round trips in one live sandbox. */
static int run_execs(const char *url, json_t *spec, size_t warm, size_t n,
                     struct crl_bench_samples *out, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *sb = NULL;
    json_auto_t *req = true_request();
    out->ms = calloc(n ? n : 1, sizeof(double));
    out->n = 0;
    if (!out->ms)
        return crl_err_sys(err, ENOMEM, "allocating samples");
    if (crl_client_open(url, NULL, &c, err) < 0 || crl_client_create(c, spec, &sb, err) < 0)
        return -1;
    const char *id = crl_cli_str(sb, "id", "");
    int rc = 0;
    unsigned long long start = crl_now_ns();
    for (size_t i = 0; i < warm + n && rc == 0; i++) {
        json_auto_t *res = NULL;
        if (i == warm)
            start = crl_now_ns();
        unsigned long long t0 = crl_now_ns();
        rc = crl_client_exec(c, id, req, &res, err);
        unsigned long long t1 = crl_now_ns();
        if (rc == 0)
            rc = check_result(res, err);
        if (rc == 0 && crl_cli_interrupted)
            rc = crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
        if (rc == 0 && i >= warm)
            out->ms[out->n++] = (double)(t1 - t0) / 1e6;
    }
    out->wall_s = (double)(crl_now_ns() - start) / 1e9;
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_destroy(c, id, NULL, &derr) < 0 && rc == 0) {
        *err = derr;
        rc = -1;
    }
    return rc;
}

/* ---- the report ---- */

static void row(const char *what, const struct crl_bench_stats *s, bool with_rate)
{
    if (with_rate)
        printf("  %-40s %8.2f %8.2f %10.1f\n", what, s->p50, s->p99, s->rate);
    else
        printf("  %-40s %8.2f %8.2f %10s\n", what, s->p50, s->p99, "");
}

/* The busybox rootfs corrald's sandboxes use, for the peers: its EROFS
 * layer, mounted read-only at a temporary directory (`out`; unmount with
 * crl_bench_layer_release). */
static int find_rootfs(struct crl_client *c, char *out, size_t cap, char *host_id, size_t hcap,
                       struct crl_err *err)
{
    json_auto_t *h = NULL;
    if (crl_client_request(c, "GET", "/v1/host", NULL, &h, NULL, err) < 0)
        return -1;
    snprintf(host_id, hcap, "%s", crl_cli_str(h, "host_id", "?"));
    return crl_bench_layer_mount(c, "busybox", out, cap, NULL, err);
}

struct results {
    struct cycles c1, c2;
    struct crl_bench_samples exec, crun1, crun2, spawn;
    bool crun_ok;
    char crun_err[480];
};

static void results_free(struct results *r)
{
    cycles_free(&r->c1);
    cycles_free(&r->c2);
    crl_bench_samples_free(&r->exec);
    crl_bench_samples_free(&r->crun1);
    crl_bench_samples_free(&r->crun2);
    crl_bench_samples_free(&r->spawn);
}

static int measure_with(const char *url, const char *rootfs, size_t n, bool quiet,
                        struct results *r, struct crl_err *err)
{
    size_t warm = n / 10 > 5 ? n / 10 : 5;
    json_auto_t *spec = json_pack("{s:{s:i}, s:{s:s}}", "resources", "memory_mb", 64, "labels",
                                  "corral-bench", "1");
#define STEP(...)                                          \
    do {                                                   \
        if (!quiet) {                                      \
            fprintf(stderr, "corral bench: " __VA_ARGS__); \
            fputc('\n', stderr);                           \
        }                                                  \
    } while (0)
    STEP("warming up (%zu cycles)", warm);
    if (run_cycles(url, spec, 1, warm, NULL, err) < 0)
        return -1;
    STEP("corral cycles, 1 at a time (%zu)", n);
    if (run_cycles(url, spec, 1, n, &r->c1, err) < 0)
        return -1;
    STEP("corral cycles, 2 in parallel (%zu)", n);
    if (run_cycles(url, spec, 2, n, &r->c2, err) < 0)
        return -1;
    STEP("corral exec round trips (%zu)", n);
    if (run_execs(url, spec, warm, n, &r->exec, err) < 0)
        return -1;
    STEP("crun run, 1 at a time and 2 in parallel (%zu each)", n);
    char *bundle = NULL;
    struct crl_err cerr = CRL_ERR_INIT;
    r->crun_ok = crl_bench_crun_bundle(rootfs, &bundle, &cerr) == 0 &&
                 crl_bench_crun(bundle, warm, n, &r->crun1, &r->crun2, &cerr) == 0;
    crl_bench_crun_bundle_remove(bundle);
    if (!r->crun_ok) {
        snprintf(r->crun_err, sizeof(r->crun_err), "%s", cerr.msg);
        fprintf(stderr, "corral: bench: the crun peer failed: %s\n", cerr.msg);
    }
    if (crl_cli_interrupted)
        return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
    STEP("posix_spawn of %s/bin/true (%zu)", rootfs, n);
    char truebin[PATH_MAX + 16];
    snprintf(truebin, sizeof(truebin), "%s/bin/true", rootfs);
    return crl_bench_spawn(truebin, warm, n, &r->spawn, err);
#undef STEP
}

static int measure(const char *url, size_t n, bool quiet, struct results *r, char *host_id,
                   size_t hcap, struct crl_err *err)
{
    char rootfs[PATH_MAX];
    {
        cleanup_client struct crl_client *c = NULL;
        if (crl_client_open(url, NULL, &c, err) < 0 ||
            find_rootfs(c, rootfs, sizeof(rootfs), host_id, hcap, err) < 0)
            return -1;
    }
    int ret = measure_with(url, rootfs, n, quiet, r, err);
    crl_bench_layer_release(rootfs);
    return ret;
}

static void report(const struct results *r, size_t n, const char *host_id, const char *load0,
                   const char *load1, bool json_only)
{
    struct crl_bench_stats c1 = crl_bench_stats_of(&r->c1.cycle),
                           c2 = crl_bench_stats_of(&r->c2.cycle);
    struct crl_bench_stats c1c = crl_bench_stats_of(&r->c1.create),
                           c1e = crl_bench_stats_of(&r->c1.exec),
                           c1d = crl_bench_stats_of(&r->c1.destroy);
    struct crl_bench_stats ex = crl_bench_stats_of(&r->exec), sp = crl_bench_stats_of(&r->spawn);
    struct crl_bench_stats k1 = {0}, k2 = {0};
    if (r->crun_ok) {
        k1 = crl_bench_stats_of(&r->crun1);
        k2 = crl_bench_stats_of(&r->crun2);
    }
    double ratio = r->crun_ok && k2.rate > 0 ? c2.rate / k2.rate : NAN;
    double exec_x = sp.p50 > 0 ? ex.p50 / sp.p50 : NAN;
    struct crl_bench_machine m;
    crl_bench_machine(&m);

    if (!json_only) {
        printf("corral bench  %s  host %s (%s %s, %ld CPUs)  load %s -> %s  %zu iterations\n\n",
               m.date, host_id, m.u.sysname, m.u.release, m.cpus, load0, load1, n);
        printf("  %-40s %8s %8s %10s\n", "", "p50 ms", "p99 ms", "per s");
        row("corral cycle, 1 at a time", &c1, true);
        row("  create", &c1c, false);
        row("  exec /bin/true", &c1e, false);
        row("  destroy", &c1d, false);
        row("corral cycle, 2 in parallel", &c2, true);
        row("corral exec /bin/true (live sandbox)", &ex, true);
        if (r->crun_ok) {
            row("crun run /bin/true, 1 at a time", &k1, true);
            row("crun run /bin/true, 2 in parallel", &k2, true);
        } else {
            printf("  %-40s %s\n", "crun run", "failed (see above)");
        }
        row("host posix_spawn /bin/true", &sp, true);
        printf("\n");
        if (r->crun_ok)
            printf("  cycles/s at concurrency 2: corral %.1f / crun %.1f = %.2fx (target >= 3x)\n",
                   c2.rate, k2.rate, ratio);
        printf("  exec p50: corral %.2f ms vs posix_spawn %.2f ms = %.1fx (+%.2f ms through "
               "the API)\n\n",
               ex.p50, sp.p50, exec_x, ex.p50 - sp.p50);
    }
    json_auto_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:I}", "bench", "corral", "date", m.date,
                  "host_id", host_id, "kernel", m.u.release, "cpus", (json_int_t)m.cpus,
                  "load_before", load0, "load_after", load1, "iterations", (json_int_t)n);
    json_object_set_new(j, "corral_cycle_c1", crl_bench_stats_json(&c1, true));
    json_object_set_new(j, "corral_create_c1", crl_bench_stats_json(&c1c, false));
    json_object_set_new(j, "corral_exec_in_cycle_c1", crl_bench_stats_json(&c1e, false));
    json_object_set_new(j, "corral_destroy_c1", crl_bench_stats_json(&c1d, false));
    json_object_set_new(j, "corral_cycle_c2", crl_bench_stats_json(&c2, true));
    json_object_set_new(j, "corral_exec", crl_bench_stats_json(&ex, true));
    json_object_set_new(j, "crun_cycle_c1",
                        r->crun_ok ? crl_bench_stats_json(&k1, true) : json_null());
    json_object_set_new(j, "crun_cycle_c2",
                        r->crun_ok ? crl_bench_stats_json(&k2, true) : json_null());
    if (!r->crun_ok)
        json_object_set_new(j, "crun_error", json_string(r->crun_err));
    json_object_set_new(j, "host_spawn", crl_bench_stats_json(&sp, true));
    json_object_set_new(j, "ratio_cycles_c2_vs_crun",
                        isnan(ratio) ? json_null() : json_real(ratio));
    json_object_set_new(j, "ratio_exec_p50_vs_spawn",
                        isnan(exec_x) ? json_null() : json_real(exec_x));
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (line)
        printf("%s\n", line);
    free(line);
}

int crl_bench_cycle(int argc, char **argv)
{
    enum { OPT_START = CRL_CLI_OPT_OTHER, OPT_ITER, OPT_JSON };
    static const struct option opts[] = {{"start-daemon", no_argument, 0, OPT_START},
                                         {"iterations", required_argument, 0, OPT_ITER},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool start = false, json_only = false;
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
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (geteuid() != 0)
        return crl_cli_failf("bench: needs root, for crun (and for corrald with --start-daemon)");

    crl_cli_catch_signals(NULL);
    struct crl_bench_daemon d = {0};
    const char *url;
    int brc = crl_bench_begin(start, &d, &url, "bench");
    if (brc)
        return brc;
    char load0[64], load1[64], host_id[32];
    struct results r = {0};
    crl_bench_loadavg(load0, sizeof(load0));
    int rc = measure(url, (size_t)iterations, json_only, &r, host_id, sizeof(host_id), &err);
    crl_bench_loadavg(load1, sizeof(load1));
    crl_bench_end(start, &d, rc, "bench");
    if (rc == 0)
        report(&r, (size_t)iterations, host_id, load0, load1, json_only);
    results_free(&r);
    if (rc < 0) {
        crl_err_prefix(&err, "bench");
        return crl_cli_fail(&err);
    }
    return 0;
}
