/* corral bench: sandbox cycles (create, exec /bin/true, destroy) and exec
 * round trips through the API, against `crun run` of a copy of the same rootfs and a
 * bare posix_spawn of the same binary, measured on this machine in one run.
 * It prints figures and ratios and never judges an absolute time. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "api.h"
#include "bench.h"
#include "peer.h"
#include "python.h"

static const char help[] =
    "usage: corral bench [OPTIONS]\n"
    "       corral bench images [OPTIONS]  (image import, create and disk: see its --help)\n"
    "       corral bench density [OPTIONS]  (idle sandboxes by the thousand: memory, latency)\n"
    "       corral bench functions [OPTIONS]  (the function backend's calls: see its --help)\n"
    "       corral bench traj [OPTIONS]  (trajectories: step overhead, fast-forward, restore)\n"
    "\n"
    "Measure, on this machine and in one run:\n"
    "  1. sandbox cycles through the API: create (64 MiB), exec /bin/true,\n"
    "     destroy, one at a time and two in parallel: p50, p99, cycles/s;\n"
    "  2. exec round trips of /bin/true in one live sandbox: p50, p99;\n"
    "  3. with a warm pool of the same spec (PUT /v1/pools/corral-bench, as many\n"
    "     ready as there are iterations): creates that are claims, one at a time,\n"
    "     and cycles two in parallel; and the cycles and execs again through the\n"
    "     Python SDK (../sdk/python beside this program), its own cost included;\n"
    "  4. the peers: `crun run` of a writable copy of the busybox rootfs, one at a time and\n"
    "     two in parallel, and posix_spawn+wait of the same /bin/true;\n"
    "  5. the ratios: our cycles/s over crun's at concurrency 2 (without and with\n"
    "     the pool), and exec p50 over posix_spawn p50, and which goals hold.\n"
    "Prints a table and a JSON line.  Uses corrald at $CORRAL_URL unless\n"
    "--start-daemon; crun runs need root (as corrald does).\n"
    "\n"
    "  --start-daemon      run a private corrald (next to this corral, fresh state\n"
    "                      in a temporary directory) for the bench, stop it after\n"
    "  --iterations N      measured operations per figure (default 200)\n"
    "  --json              print only the JSON line\n";

/* ---- corral cycles, one client per thread ---- */

struct cycles {
    struct crl_bench_samples cycle, create, exec, destroy;
};

/* A phase of cycles: each thread's calls create, exec and destroy. */
struct phase {
    json_t *spec, *req;
    struct cycles *cy; /* NULL: a warm-up */
};

static int one_cycle(struct crl_client *c, void *ctx, size_t i, struct crl_err *err)
{
    struct phase *p = ctx;
    json_auto_t *sb = NULL;
    double ms;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_create(c, p->spec, &sb, err) < 0)
        return crl_err_prefix(err, "create");
    unsigned long long t1 = crl_now_ns();
    const char *id = crl_cli_str(sb, "id", "");
    int rc = crl_bench_exec(c, id, p->req, &ms, NULL, err);
    unsigned long long t2 = crl_now_ns();
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_destroy(c, id, NULL, &derr) < 0 && rc == 0) {
        *err = derr;
        return crl_err_prefix(err, "destroy %s", id);
    }
    unsigned long long t3 = crl_now_ns();
    if (rc < 0 || !p->cy)
        return rc;
    p->cy->cycle.ms[i] = (double)(t3 - t0) / 1e6;
    p->cy->create.ms[i] = (double)(t1 - t0) / 1e6;
    p->cy->exec.ms[i] = (double)(t2 - t1) / 1e6;
    p->cy->destroy.ms[i] = (double)(t3 - t2) / 1e6;
    return 0;
}

/* `n` cycles shared by `conc` threads; with `cy` NULL, a warm-up. */
static int run_cycles(const char *url, json_t *spec, int conc, size_t n, struct cycles *cy,
                      struct crl_err *err)
{
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "/bin/true");
    struct phase p = {spec, req, cy};
    struct crl_bench_samples *all[4] = {0};
    double wall;
    if (cy) {
        all[0] = &cy->cycle, all[1] = &cy->create, all[2] = &cy->exec, all[3] = &cy->destroy;
        for (size_t k = 0; k < CRL_ARRAY_SIZE(all); k++)
            if (crl_bench_samples_alloc(all[k], n, err) < 0)
                return -1;
    }
    if (crl_bench_parallel(url, conc, n, one_cycle, &p, &wall, err) < 0)
        return -1;
    for (size_t k = 0; cy && k < CRL_ARRAY_SIZE(all); k++) {
        all[k]->n = n;
        all[k]->wall_s = wall;
    }
    return 0;
}

/* Exec round trips in one live sandbox. */
struct live {
    struct crl_client *c;
    const char *id;
    json_t *req;
};

static int live_exec(void *ctx, size_t i, struct crl_err *err)
{
    struct live *l = ctx;
    double ms;
    return crl_bench_exec(l->c, l->id, l->req, &ms, NULL, err);
}

static int run_execs(const char *url, json_t *spec, size_t warm, size_t n,
                     struct crl_bench_samples *out, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "/bin/true");
    char id[CRL_BENCH_ID_MAX] = "";
    if (crl_client_open(url, NULL, &c, err) < 0)
        return -1;
    struct crl_bench_sandboxes sbs = {.c = c, .who = "bench"};
    struct live l = {c, id, req};
    int rc = crl_bench_sandbox_create(&sbs, spec, id, NULL, err);
    if (rc == 0)
        rc = crl_bench_timed(warm, n, live_exec, &l, out, err);
    if (rc == 0)
        rc = crl_bench_sandbox_destroy(&sbs, id, err);
    crl_bench_sandboxes_clear(&sbs);
    return rc;
}

/* ---- with a warm pool ---- */

#define POOL_PATH "/v1/pools/corral-bench"

/* The pool of `spec` with `n` ready, or an error. */
static int pool_fill(struct crl_client *c, json_t *spec, size_t n, struct crl_err *err)
{
    json_auto_t *body =
        json_pack("{s:O, s:I, s:I}", "template", spec, "min", (json_int_t)n, "max", (json_int_t)n);
    json_auto_t *p = NULL;
    if (crl_client_request(c, "PUT", POOL_PATH, body, &p, NULL, err) < 0)
        return crl_err_prefix(err, "PUT %s", POOL_PATH);
    unsigned long long deadline = crl_now_ns() + 120ull * 1000000000ull;
    for (;;) {
        json_decref(p);
        p = NULL;
        if (crl_client_request(c, "GET", POOL_PATH, NULL, &p, NULL, err) < 0)
            return -1;
        if ((size_t)json_integer_value(json_object_get(p, "ready")) >= n)
            return 0;
        if (crl_now_ns() > deadline || crl_bench_check_interrupted(err) < 0)
            return err->msg[0]
                       ? -1
                       : crl_err_set(err, CRL_E_TIMEOUT, "the pool did not fill in 120 s: %s %s",
                                     crl_cli_str(p, "state", "?"),
                                     crl_cli_str(p, "error", crl_cli_str(p, "waiting", "")));
        usleep(20000);
    }
}

struct claims {
    struct crl_client *c;
    json_t *spec;
    char (*ids)[CRL_BENCH_ID_MAX];
};

static int claim_one(void *ctx, size_t i, struct crl_err *err)
{
    struct claims *cl = ctx;
    json_auto_t *sb = NULL;
    if (crl_client_create(cl->c, cl->spec, &sb, err) < 0)
        return crl_err_prefix(err, "create from the pool");
    snprintf(cl->ids[i], CRL_BENCH_ID_MAX, "%s", crl_cli_str(sb, "id", ""));
    return 0;
}

/* Claims timed one at a time (each answered from the pool: it holds as
 * many as are asked), then cycles two in parallel over a full pool again. */
static int run_pool(const char *url, json_t *spec, size_t warm, size_t n,
                    struct crl_bench_samples *claims, struct cycles *cy, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    if (crl_client_open(url, NULL, &c, err) < 0)
        return -1;
    struct claims cl = {.c = c, .spec = spec, .ids = calloc(warm + n, CRL_BENCH_ID_MAX)};
    if (!cl.ids)
        return crl_err_sys(err, ENOMEM, "ids");
    int rc = pool_fill(c, spec, warm + n, err);
    if (rc == 0)
        rc = crl_bench_timed(warm, n, claim_one, &cl, claims, err);
    for (size_t i = 0; i < warm + n; i++)
        if (cl.ids[i][0])
            crl_client_destroy(c, cl.ids[i], NULL, NULL);
    free(cl.ids);
    if (rc == 0)
        rc = pool_fill(c, spec, n, err);
    if (rc == 0)
        rc = run_cycles(url, spec, 2, n, cy, err);
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_request(c, "DELETE", POOL_PATH, NULL, NULL, NULL, &derr) < 0 && rc == 0) {
        *err = derr;
        rc = -1;
    }
    return rc;
}

/* ---- through the Python SDK ---- */

/* The same cycles and execs driven by the Python SDK (sdk/python beside
 * the build: ../sdk/python from this program's directory), in a python3 of
 * its own: two threads with a client each share n cycles, then one client
 * times n execs.  It prints "C ms" per cycle, "W s" for their wall time,
 * "E ms" per exec.  argv: the SDK's directory, url, warm, n, memory_mb. */
static const char sdk_script[] =
    "import sys, threading, time\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "import corral\n"
    "url, warm, n, mem = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])\n"
    "spec = dict(image='busybox', memory_mb=mem, labels={'corral-bench': '1'})\n"
    "def cycle(c, out):\n"
    "    t = time.perf_counter()\n"
    "    sb = c.create(**spec)\n"
    "    assert sb.exec(['/bin/true']).exit_code == 0\n"
    "    sb.destroy()\n"
    "    out.append((time.perf_counter() - t) * 1e3)\n"
    "def share(k, out):\n"
    "    with corral.Client(url) as c:\n"
    "        for _ in range(k):\n"
    "            cycle(c, out)\n"
    "share(warm, [])\n"
    "out = []\n"
    "ts = [threading.Thread(target=share, args=(n // 2 + i * (n % 2), out)) for i in range(2)]\n"
    "t0 = time.perf_counter()\n"
    "[t.start() for t in ts]\n"
    "[t.join() for t in ts]\n"
    "wall = time.perf_counter() - t0\n"
    "print('\\n'.join('C %.6f' % ms for ms in out))\n"
    "print('W %.6f' % wall)\n"
    "with corral.Client(url) as c, c.create(**spec) as sb:\n"
    "    for i in range(warm + n):\n"
    "        t = time.perf_counter()\n"
    "        assert sb.exec(['/bin/true']).exit_code == 0\n"
    "        if i >= warm:\n"
    "            print('E %.6f' % ((time.perf_counter() - t) * 1e3))\n";

static int run_sdk(const char *url, size_t warm, size_t n, struct crl_bench_samples *cycles,
                   struct crl_bench_samples *execs, struct crl_err *err)
{
    char bench[PATH_MAX], sdk[PATH_MAX + 32], python[PATH_MAX], nums[3][24];
    if (crl_sibling_path("corral-bench", bench, sizeof(bench), err) < 0 ||
        crl_bench_python_find(python, sizeof(python), err) < 0)
        return -1;
    char *slash = strrchr(bench, '/');
    if (slash)
        *slash = 0;
    snprintf(sdk, sizeof(sdk), "%s/../sdk/python", bench);
    if (access(sdk, R_OK) < 0)
        return crl_err_set(err, CRL_E_NOT_FOUND, "no Python SDK at %s", sdk);
    const char *u = url ? url : getenv("CORRAL_URL");
    snprintf(nums[0], sizeof(nums[0]), "%zu", warm);
    snprintf(nums[1], sizeof(nums[1]), "%zu", n);
    snprintf(nums[2], sizeof(nums[2]), "%d", 64);
    char *const argv[] = {"python3", "-I",
                          "-c",      (char *)sdk_script,
                          sdk,       (char *)(u ? u : "unix:///run/corral/corrald.sock"),
                          nums[0],   nums[1],
                          nums[2],   NULL};
    int status;
    cleanup_free char *out = NULL;
    if (crl_bench_capture(python, argv, &status, &out, err) < 0)
        return -1;
    if (status != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "the SDK's run ended with wait status %d", status);
    if (crl_bench_samples_alloc(cycles, n, err) < 0 || crl_bench_samples_alloc(execs, n, err) < 0)
        return -1;
    cycles->n = execs->n = 0;
    for (char *line = out; line && *line;) {
        double v = strtod(line + 1, NULL);
        if (line[0] == 'C' && cycles->n < n)
            cycles->ms[cycles->n++] = v;
        else if (line[0] == 'E' && execs->n < n)
            crl_bench_samples_add(execs, v); /* one after another: their sum is the wall time */
        else if (line[0] == 'W')
            cycles->wall_s = v;
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    if (cycles->n != n || execs->n != n)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "the SDK's run printed %zu cycles and %zu execs of %zu each", cycles->n,
                           execs->n, n);
    return 0;
}

/* ---- the run ---- */

struct results {
    struct cycles c1, c2, pool2;
    struct crl_bench_samples claim, sdk2, sdk_exec;
    bool sdk_ok;
    char sdk_err[480];
    struct crl_bench_samples exec, crun1, crun2, spawn;
    bool crun_ok;
    char crun_err[480];
};

static void results_free(void *res)
{
    struct results *r = res;
    crl_bench_samples_free_each(&r->c1.cycle, &r->c1.create, &r->c1.exec, &r->c1.destroy,
                                &r->c2.cycle, &r->c2.create, &r->c2.exec, &r->c2.destroy, &r->exec,
                                &r->pool2.cycle, &r->pool2.create, &r->pool2.exec,
                                &r->pool2.destroy, &r->claim, &r->sdk2, &r->sdk_exec, &r->crun1,
                                &r->crun2, &r->spawn, NULL);
}

/* The peers, on `rootfs`: crun (which may fail: the report says so) and
 * posix_spawn of its /bin/true. */
static int measure_peers(struct crl_bench_run *run, const char *rootfs, size_t warm,
                         struct results *r, struct crl_err *err)
{
    size_t n = run->o.iterations;
    crl_bench_step(run, "crun run, 1 at a time and 2 in parallel (%zu each)", n);
    char *bundle = NULL;
    struct crl_err cerr = CRL_ERR_INIT;
    r->crun_ok = crl_bench_crun_bundle(rootfs, &bundle, &cerr) == 0 &&
                 crl_bench_crun(bundle, warm, n, &r->crun1, &r->crun2, &cerr) == 0;
    crl_bench_crun_bundle_remove(bundle);
    if (!r->crun_ok) {
        snprintf(r->crun_err, sizeof(r->crun_err), "%s", cerr.msg);
        fprintf(stderr, "corral: bench: the crun peer failed: %s\n", cerr.msg);
    }
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    crl_bench_step(run, "posix_spawn of %s/bin/true (%zu)", rootfs, n);
    char truebin[PATH_MAX + 16];
    snprintf(truebin, sizeof(truebin), "%s/bin/true", rootfs);
    return crl_bench_spawn(truebin, warm, n, &r->spawn, err);
}

static int measure_with(struct crl_bench_run *run, const char *rootfs, struct results *r,
                        struct crl_err *err)
{
    size_t n = run->o.iterations, warm = crl_bench_warmup(n);
    json_auto_t *spec = crl_bench_spec(NULL, 64);
    crl_bench_step(run, "warming up (%zu cycles)", warm);
    if (run_cycles(run->url, spec, 1, warm, NULL, err) < 0)
        return -1;
    crl_bench_step(run, "corral cycles, 1 at a time (%zu)", n);
    if (run_cycles(run->url, spec, 1, n, &r->c1, err) < 0)
        return -1;
    crl_bench_step(run, "corral cycles, 2 in parallel (%zu)", n);
    if (run_cycles(run->url, spec, 2, n, &r->c2, err) < 0)
        return -1;
    crl_bench_step(run, "corral exec round trips (%zu)", n);
    if (run_execs(run->url, spec, warm, n, &r->exec, err) < 0)
        return -1;
    crl_bench_step(run, "with a warm pool: claims one at a time, cycles 2 in parallel (%zu each)",
                   n);
    if (run_pool(run->url, spec, warm, n, &r->claim, &r->pool2, err) < 0)
        return -1;
    crl_bench_step(run, "through the Python SDK: cycles 2 in parallel, exec round trips (%zu each)",
                   n);
    struct crl_err serr = CRL_ERR_INIT;
    r->sdk_ok = run_sdk(run->url, warm, n, &r->sdk2, &r->sdk_exec, &serr) == 0;
    if (!r->sdk_ok) {
        snprintf(r->sdk_err, sizeof(r->sdk_err), "%s", serr.msg);
        fprintf(stderr, "corral: bench: the Python SDK's run failed: %s\n", serr.msg);
    }
    return measure_peers(run, rootfs, warm, r, err);
}

/* The busybox rootfs corrald's sandboxes use, for the peers: its EROFS
 * layer, mounted read-only at a temporary directory for the run. */
static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    char rootfs[PATH_MAX];
    {
        cleanup_client struct crl_client *c = NULL;
        if (crl_client_open(run->url, NULL, &c, err) < 0 ||
            crl_bench_host(c, run->host_id, sizeof(run->host_id), NULL, err) < 0 ||
            crl_bench_layer_mount(c, "busybox", rootfs, sizeof(rootfs), NULL, err) < 0)
            return -1;
    }
    int ret = measure_with(run, rootfs, res, err);
    crl_bench_layer_release(rootfs);
    return ret;
}

/* ---- the report ---- */

static const struct crl_bench_table table = {.label = 40, .prec = 2, .rate = 10, .pad = true};

static void report(const struct crl_bench_run *run, void *res)
{
    struct results *r = res;
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
    struct crl_bench_stats cl = crl_bench_stats_of(&r->claim),
                           p2 = crl_bench_stats_of(&r->pool2.cycle), s2 = {0}, se = {0};
    if (r->sdk_ok) {
        s2 = crl_bench_stats_of(&r->sdk2);
        se = crl_bench_stats_of(&r->sdk_exec);
    }
    double ratio = r->crun_ok ? crl_bench_ratio(c2.rate, k2.rate) : NAN;
    double pool_ratio = r->crun_ok ? crl_bench_ratio(p2.rate, k2.rate) : NAN;
    double sdk_ratio = r->sdk_ok && r->crun_ok ? crl_bench_ratio(s2.rate, k2.rate) : NAN;
    double exec_x = crl_bench_ratio(ex.p50, sp.p50);

    if (!run->o.json_only) {
        crl_bench_report_head(run);
        printf("  %zu iterations\n\n", run->o.iterations);
        crl_bench_table_head(&table, "");
        crl_bench_table_row(&table, "corral cycle, 1 at a time", &c1, true);
        crl_bench_table_row(&table, "  create", &c1c, false);
        crl_bench_table_row(&table, "  exec /bin/true", &c1e, false);
        crl_bench_table_row(&table, "  destroy", &c1d, false);
        crl_bench_table_row(&table, "corral cycle, 2 in parallel", &c2, true);
        crl_bench_table_row(&table, "corral exec /bin/true (live sandbox)", &ex, true);
        crl_bench_table_row(&table, "corral create from a warm pool (claim)", &cl, true);
        crl_bench_table_row(&table, "corral cycle with a pool, 2 in parallel", &p2, true);
        if (r->sdk_ok) {
            crl_bench_table_row(&table, "Python SDK cycle, 2 in parallel", &s2, true);
            crl_bench_table_row(&table, "Python SDK exec /bin/true (live sandbox)", &se, true);
        } else {
            printf("  %-40s %s\n", "Python SDK", "failed (see above)");
        }
        if (r->crun_ok) {
            crl_bench_table_row(&table, "crun run /bin/true, 1 at a time", &k1, true);
            crl_bench_table_row(&table, "crun run /bin/true, 2 in parallel", &k2, true);
        } else {
            printf("  %-40s %s\n", "crun run", "failed (see above)");
        }
        crl_bench_table_row(&table, "host posix_spawn /bin/true", &sp, true);
        printf("\n");
        if (r->crun_ok) {
            printf("  cycles/s at concurrency 2: corral %.1f / crun %.1f = %.2fx (goal >= 6x: "
                   "%s)\n",
                   c2.rate, k2.rate, ratio, ratio >= 6 ? "holds" : "does NOT hold");
            printf("  with a pool: corral %.1f / crun %.1f = %.2fx (goal >= 6x: %s)\n", p2.rate,
                   k2.rate, pool_ratio, pool_ratio >= 6 ? "holds" : "does NOT hold");
            if (r->sdk_ok)
                printf("  through the Python SDK: %.1f / crun %.1f = %.2fx (goal >= 6x: %s)\n",
                       s2.rate, k2.rate, sdk_ratio, sdk_ratio >= 6 ? "holds" : "does NOT hold");
        }
        printf("  exec p50: corral %.2f ms vs posix_spawn %.2f ms = %.1fx, +%.2f ms through "
               "the API (goal <= 1.3x: %s)\n",
               ex.p50, sp.p50, exec_x, ex.p50 - sp.p50, exec_x <= 1.3 ? "holds" : "does NOT hold");
        if (r->sdk_ok)
            printf("  the SDK's own cost: exec p50 %.2f ms through it vs %.2f ms from C "
                   "(+%.2f ms)\n",
                   se.p50, ex.p50, se.p50 - ex.p50);
        printf("  claim p50: %.3f ms (goal <= 0.5 ms: %s)\n\n", cl.p50,
               cl.p50 <= 0.5 ? "holds" : "does NOT hold");
    }
    json_auto_t *j = crl_bench_report_json(run, "corral");
    json_object_set_new(j, "iterations", json_integer((json_int_t)run->o.iterations));
    json_object_set_new(j, "corral_cycle_c1", crl_bench_stats_json(&c1, true));
    json_object_set_new(j, "corral_create_c1", crl_bench_stats_json(&c1c, false));
    json_object_set_new(j, "corral_exec_in_cycle_c1", crl_bench_stats_json(&c1e, false));
    json_object_set_new(j, "corral_destroy_c1", crl_bench_stats_json(&c1d, false));
    json_object_set_new(j, "corral_cycle_c2", crl_bench_stats_json(&c2, true));
    json_object_set_new(j, "corral_exec", crl_bench_stats_json(&ex, true));
    json_object_set_new(j, "corral_pool_claim", crl_bench_stats_json(&cl, true));
    json_object_set_new(j, "corral_pool_cycle_c2", crl_bench_stats_json(&p2, true));
    json_object_set_new(j, "sdk_cycle_c2",
                        r->sdk_ok ? crl_bench_stats_json(&s2, true) : json_null());
    json_object_set_new(j, "sdk_exec", r->sdk_ok ? crl_bench_stats_json(&se, true) : json_null());
    if (!r->sdk_ok)
        json_object_set_new(j, "sdk_error", json_string(r->sdk_err));
    json_object_set_new(j, "ratio_sdk_cycles_c2_vs_crun", crl_bench_json_real(sdk_ratio));
    json_object_set_new(j, "crun_cycle_c1",
                        r->crun_ok ? crl_bench_stats_json(&k1, true) : json_null());
    json_object_set_new(j, "crun_cycle_c2",
                        r->crun_ok ? crl_bench_stats_json(&k2, true) : json_null());
    if (!r->crun_ok)
        json_object_set_new(j, "crun_error", json_string(r->crun_err));
    json_object_set_new(j, "host_spawn", crl_bench_stats_json(&sp, true));
    json_object_set_new(j, "ratio_cycles_c2_vs_crun", crl_bench_json_real(ratio));
    json_object_set_new(j, "ratio_pool_cycles_c2_vs_crun", crl_bench_json_real(pool_ratio));
    json_object_set_new(j, "ratio_exec_p50_vs_spawn", crl_bench_json_real(exec_x));
    crl_bench_report_line(j);
}

const struct crl_bench_cmd crl_bench_cycle = {
    .name = "bench",
    .help = help,
    .root = "for crun (and for corrald with --start-daemon)",
    .defaults = {.iterations = 200},
    .ops = {measure, report, results_free, sizeof(struct results)},
};
