/* corral bench density: idle container sandboxes by the thousand.  It fills
 * the host by levels (100, 1,000, 10,000, then --sandboxes) and at each one
 * measures the host memory each idle sandbox costs and the latency of a
 * create, an exec, a list and a destroy, so that what grows with the count
 * shows; beside them the machine's floors (fork, fork+exec, posix_spawn).
 * It stops at the first refusal and says it, since where a host stops is a
 * figure too. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

static const char help[] =
    "usage: corral bench density [OPTIONS]\n"
    "\n"
    "Fill the host with idle busybox container sandboxes (64 MiB limit each, made\n"
    "two at a time), by levels of 100, 1,000, 10,000 and N, and measure at each:\n"
    "  - host memory per sandbox: MemTotal - MemAvailable over the count, against\n"
    "    before the first (the kernel's memory included), and its unreclaimable\n"
    "    slab, page tables and kernel stacks;\n"
    "  - the p50 of the level's last 100 creates, of 50 execs of /bin/true spread\n"
    "    over the live sandboxes, of 50 destroys (then made again), and of a list\n"
    "    of every sandbox and of one by a label only one has;\n"
    "  - against the level of 100: the goals are 500 kB or less per sandbox and\n"
    "    create and exec within 1.5x of it;\n"
    "and, for scale, the machine's floors: fork+exit, fork+exec, posix_spawn.\n"
    "A refusal (the host full) ends the fill; the levels reached are reported.\n"
    "Needs root (corrald does); kernel limits such as pid_max are the host's.\n"
    "\n"
    "  --start-daemon      run a private corrald (default flags) for the bench\n"
    "  --sandboxes N       the top level (default 20000)\n"
    "  --iterations N      samples of each floor (default 200)\n"
    "  --json              print only the JSON line\n";

#define MAX_LEVELS 4
#define TIMED 50 /* execs and destroys per level */

/* Host memory, in kB, from /proc/meminfo. */
struct mem {
    long long used, slab_unreclaim, page_tables, kernel_stack;
};

static int mem_read(struct mem *m, struct crl_err *err)
{
    char buf[8192];
    if (crl_read_file_at(AT_FDCWD, "/proc/meminfo", buf, sizeof(buf)) < 0)
        return crl_err_sys(err, errno, "reading /proc/meminfo");
    static const char *const keys[] = {
        "MemTotal:", "MemAvailable:", "SUnreclaim:", "PageTables:", "KernelStack:"};
    long long v[5] = {-1, -1, -1, -1, -1};
    for (size_t k = 0; k < CRL_ARRAY_SIZE(keys); k++) {
        char *p = strstr(buf, keys[k]);
        if (p)
            v[k] = strtoll(p + strlen(keys[k]), NULL, 10);
    }
    if (v[0] < 0 || v[1] < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "/proc/meminfo has no MemTotal or MemAvailable");
    *m = (struct mem){v[0] - v[1], v[2], v[3], v[4]};
    return 0;
}

/* One level's figures. */
struct level {
    size_t count;
    double used_kb, slab_kb, tables_kb, stacks_kb; /* per sandbox */
    struct crl_bench_samples create, exec, destroy, list, list_one;
};

struct results {
    struct level lv[MAX_LEVELS];
    size_t n_levels, made;
    char refused[400];
    struct crl_bench_samples fork_exit, fork_exec, spawn;
};

/* The live sandboxes, by index; made[i][0] is 0 for a slot not in use. */
struct fill {
    json_t *spec;
    char (*ids)[CRL_BENCH_ID_MAX];
    size_t from;                 /* the first index of this phase */
    struct crl_bench_samples *t; /* creates' latencies, by i - from (may be NULL) */
};

static int create_one(struct crl_client *c, void *ctx, size_t i, struct crl_err *err)
{
    struct fill *f = ctx;
    json_auto_t *sb = NULL;
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_create(c, f->spec, &sb, err) < 0)
        return -1;
    if (f->t)
        f->t->ms[i] = crl_bench_ms_since(t0);
    snprintf(f->ids[f->from + i], CRL_BENCH_ID_MAX, "%s", crl_cli_str(sb, "id", ""));
    return 0;
}

static int destroy_one(struct crl_client *c, void *ctx, size_t i, struct crl_err *err)
{
    struct fill *f = ctx;
    char *id = f->ids[f->from + i];
    if (!id[0])
        return 0;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_client_destroy(c, id, NULL, &e) < 0 && e.code != CRL_E_NOT_FOUND) {
        *err = e;
        return -1;
    }
    id[0] = 0;
    return 0;
}

/* Sandboxes [from, to) made two at a time; the creates' latencies into t
 * (may be NULL).  A capacity refusal ends it without an error: *refused
 * gets the message.  *to becomes how far it got. */
static int fill_to(struct crl_bench_run *run, struct fill *f, size_t from, size_t *to,
                   struct crl_bench_samples *t, char *refused, size_t cap, struct crl_err *err)
{
    double wall;
    f->from = from;
    f->t = t;
    if (t && crl_bench_samples_alloc(t, *to - from, err) < 0)
        return -1;
    struct crl_err e = CRL_ERR_INIT;
    int rc = crl_bench_parallel(run->url, 2, *to - from, create_one, f, &wall, &e);
    /* Keep every sandbox made, in index order: a refused one leaves a gap. */
    size_t kept = from, nt = 0;
    for (size_t i = from; i < *to; i++) {
        if (!f->ids[i][0])
            continue;
        if (t)
            t->ms[nt++] = t->ms[i - from];
        if (kept != i) {
            memcpy(f->ids[kept], f->ids[i], CRL_BENCH_ID_MAX);
            f->ids[i][0] = 0;
        }
        kept++;
    }
    if (t) {
        t->n = nt;
        t->wall_s = wall;
    }
    *to = kept;
    if (rc < 0 && e.code != CRL_E_CAPACITY) {
        *err = e;
        return -1;
    }
    if (rc < 0)
        snprintf(refused, cap, "%s", e.msg);
    return 0;
}

/* The last `keep` samples of s only (the level's last creates). */
static void keep_last(struct crl_bench_samples *s, size_t keep)
{
    if (s->n > keep) {
        memmove(s->ms, s->ms + (s->n - keep), keep * sizeof(*s->ms));
        s->n = keep;
    }
}

struct spread {
    struct crl_client *c;
    char (*ids)[CRL_BENCH_ID_MAX];
    size_t live;
    json_t *req;
};

static int exec_spread(void *ctx, size_t i, struct crl_err *err)
{
    struct spread *s = ctx;
    double ms;
    /* a stride coprime with any count: every part of the table is visited */
    return crl_bench_exec(s->c, s->ids[(i * 7919) % s->live], s->req, &ms, NULL, err);
}

static int list_all(void *ctx, size_t i, struct crl_err *err)
{
    struct spread *s = ctx;
    json_auto_t *out = NULL;
    return crl_client_list(s->c, NULL, 0, &out, err);
}

static int list_one(void *ctx, size_t i, struct crl_err *err)
{
    struct spread *s = ctx;
    json_auto_t *out = NULL;
    const char *sel[] = {"corral-bench-density=one"};
    if (crl_client_list(s->c, sel, 1, &out, err) < 0)
        return -1;
    if (json_array_size(json_object_get(out, "sandboxes")) != 1)
        return crl_err_set(err, CRL_E_INTERNAL, "a list by a label only one sandbox has found %zu",
                           json_array_size(json_object_get(out, "sandboxes")));
    return 0;
}

/* Destroy the last TIMED sandboxes one at a time, timed, then make them
 * again (untimed), so that the level keeps its count. */
static int destroy_timed(struct crl_bench_run *run, struct spread *s, struct fill *f,
                         struct crl_bench_samples *out, struct crl_err *err)
{
    size_t n = s->live < TIMED ? s->live : TIMED, from = s->live - n;
    if (crl_bench_samples_alloc(out, n, err) < 0)
        return -1;
    f->from = from;
    for (size_t i = 0; i < n; i++) {
        unsigned long long t0 = crl_now_ns();
        if (destroy_one(s->c, f, i, err) < 0)
            return -1;
        crl_bench_samples_add(out, crl_bench_ms_since(t0));
    }
    char refused[8];
    size_t to = s->live;
    if (fill_to(run, f, from, &to, NULL, refused, sizeof(refused), err) < 0)
        return -1;
    if (to != s->live)
        return crl_err_set(err, CRL_E_CAPACITY, "%zu destroyed sandboxes could not be made again",
                           s->live - to);
    return 0;
}

static int measure_level(struct crl_bench_run *run, struct fill *f, const struct mem *m0,
                         struct level *lv, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "/bin/true");
    struct spread s = {.ids = f->ids, .live = lv->count, .req = req};
    struct mem m;
    if (crl_client_open(run->url, NULL, &c, err) < 0)
        return -1;
    s.c = c;
    sleep(1); /* what a create left to the kernel's workers settles */
    if (mem_read(&m, err) < 0)
        return -1;
    double n = (double)lv->count;
    lv->used_kb = (double)(m.used - m0->used) / n;
    lv->slab_kb = (double)(m.slab_unreclaim - m0->slab_unreclaim) / n;
    lv->tables_kb = (double)(m.page_tables - m0->page_tables) / n;
    lv->stacks_kb = (double)(m.kernel_stack - m0->kernel_stack) / n;
    crl_bench_step(run, "%zu sandboxes: %.0f kB each; exec, list, destroy", lv->count, lv->used_kb);
    if (crl_bench_timed(5, TIMED, exec_spread, &s, &lv->exec, err) < 0 ||
        crl_bench_timed(1, 5, list_all, &s, &lv->list, err) < 0 ||
        crl_bench_timed(1, 20, list_one, &s, &lv->list_one, err) < 0)
        return -1;
    return destroy_timed(run, &s, f, &lv->destroy, err);
}

/* Make the one sandbox a list by label finds. */
static int label_first(struct crl_bench_run *run, struct fill *f, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *spec = json_deep_copy(f->spec);
    json_object_set_new(json_object_get(spec, "labels"), "corral-bench-density",
                        json_string("one"));
    json_auto_t *sb = NULL;
    if (crl_client_open(run->url, NULL, &c, err) < 0 || crl_client_create(c, spec, &sb, err) < 0)
        return -1;
    snprintf(f->ids[0], CRL_BENCH_ID_MAX, "%s", crl_cli_str(sb, "id", ""));
    return 0;
}

static int measure_floors(struct crl_bench_run *run, struct results *r, struct crl_err *err)
{
    size_t n = run->o.iterations, warm = crl_bench_warmup(n);
    char *const argv[] = {"true", NULL};
    crl_bench_step(run, "the machine's floors: fork+exit, fork+exec, posix_spawn (%zu each)", n);
    return crl_bench_fork_exit(warm, n, &r->fork_exit, err) < 0 ||
                   crl_bench_fork_exec("/bin/true", argv, NULL, warm, n, &r->fork_exec, err) < 0 ||
                   crl_bench_spawn("/bin/true", warm, n, &r->spawn, err) < 0
               ? -1
               : 0;
}

static int measure_fill(struct crl_bench_run *run, struct results *r, struct fill *f,
                        struct crl_err *err)
{
    size_t top = run->o.sandboxes, levels[MAX_LEVELS], nl = 0;
    for (size_t l = 100; l < top && nl < MAX_LEVELS - 1; l *= 10)
        levels[nl++] = l;
    levels[nl++] = top;
    struct mem m0;
    /* warm up (spawners, the network namespaces' pool), then the baseline */
    size_t w = 20;
    crl_bench_step(run, "warming up (%zu sandboxes made and destroyed)", w);
    if (fill_to(run, f, 0, &w, NULL, r->refused, sizeof(r->refused), err) < 0)
        return -1;
    double wall;
    f->from = 0;
    if (crl_bench_parallel(run->url, 2, w, destroy_one, f, &wall, err) < 0)
        return -1;
    if (r->refused[0])
        return crl_err_set(err, CRL_E_CAPACITY, "warming up: %s", r->refused);
    sleep(1);
    if (mem_read(&m0, err) < 0 || label_first(run, f, err) < 0)
        return -1;
    r->made = 1;
    for (size_t k = 0; k < nl && !r->refused[0]; k++) {
        struct level *lv = &r->lv[r->n_levels];
        size_t to = levels[k];
        crl_bench_step(run, "making sandboxes %zu to %zu", r->made + 1, to);
        if (fill_to(run, f, r->made, &to, &lv->create, r->refused, sizeof(r->refused), err) < 0)
            return -1;
        r->made = to;
        keep_last(&lv->create, 100);
        lv->count = to;
        r->n_levels++;
        if (measure_level(run, f, &m0, lv, err) < 0)
            return -1;
    }
    return 0;
}

static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    struct results *r = res;
    {
        cleanup_client struct crl_client *c = NULL;
        if (crl_client_open(run->url, NULL, &c, err) < 0 ||
            crl_bench_host(c, run->host_id, sizeof(run->host_id), NULL, err) < 0)
            return -1;
    }
    if (measure_floors(run, r, err) < 0)
        return -1;
    json_auto_t *spec = crl_bench_spec("busybox", 64);
    struct fill f = {.spec = spec, .ids = calloc(run->o.sandboxes + 1, CRL_BENCH_ID_MAX)};
    if (!f.ids)
        return crl_err_sys(err, ENOMEM, "sandbox ids");
    int rc = measure_fill(run, r, &f, err);
    crl_bench_step(run, "destroying the %zu sandboxes", r->made);
    double wall;
    struct crl_err derr = CRL_ERR_INIT;
    f.from = 0;
    if (crl_bench_parallel(run->url, 2, run->o.sandboxes + 1, destroy_one, &f, &wall, &derr) < 0) {
        fprintf(stderr, "corral: bench density: destroying: %s\n", derr.msg);
        if (rc == 0) {
            *err = derr;
            rc = -1;
        }
    }
    free(f.ids);
    return rc;
}

/* ---- the report ---- */

static void results_free(void *res)
{
    struct results *r = res;
    for (size_t k = 0; k < MAX_LEVELS; k++)
        crl_bench_samples_free_each(&r->lv[k].create, &r->lv[k].exec, &r->lv[k].destroy,
                                    &r->lv[k].list, &r->lv[k].list_one, NULL);
    crl_bench_samples_free_each(&r->fork_exit, &r->fork_exec, &r->spawn, NULL);
}

static json_t *level_json(const struct level *lv)
{
    struct crl_bench_stats c = crl_bench_stats_of(&lv->create), e = crl_bench_stats_of(&lv->exec),
                           d = crl_bench_stats_of(&lv->destroy), l = crl_bench_stats_of(&lv->list),
                           o = crl_bench_stats_of(&lv->list_one);
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:o, s:o, s:o, s:o, s:o}", "sandboxes",
                     (json_int_t)lv->count, "host_kb_each", lv->used_kb, "slab_unreclaim_kb_each",
                     lv->slab_kb, "page_tables_kb_each", lv->tables_kb, "kernel_stack_kb_each",
                     lv->stacks_kb, "create", crl_bench_stats_json(&c, false), "exec",
                     crl_bench_stats_json(&e, false), "destroy", crl_bench_stats_json(&d, false),
                     "list_all", crl_bench_stats_json(&l, false), "list_by_label",
                     crl_bench_stats_json(&o, false));
}

static void report(const struct crl_bench_run *run, void *res)
{
    struct results *r = res;
    struct crl_bench_stats fe = crl_bench_stats_of(&r->fork_exit),
                           fx = crl_bench_stats_of(&r->fork_exec),
                           sp = crl_bench_stats_of(&r->spawn);
    json_auto_t *levels = json_array();
    for (size_t k = 0; k < r->n_levels; k++)
        json_array_append_new(levels, level_json(&r->lv[k]));
    const struct level *lo = r->n_levels ? &r->lv[0] : NULL,
                       *hi = r->n_levels ? &r->lv[r->n_levels - 1] : NULL;
    double create_x = NAN, exec_x = NAN;
    if (lo) {
        create_x = crl_bench_ratio(crl_bench_stats_of(&hi->create).p50,
                                   crl_bench_stats_of(&lo->create).p50);
        exec_x =
            crl_bench_ratio(crl_bench_stats_of(&hi->exec).p50, crl_bench_stats_of(&lo->exec).p50);
    }
    bool reached = hi && hi->count >= run->o.sandboxes;
    if (!run->o.json_only) {
        crl_bench_report_head(run);
        printf("  up to %zu idle busybox sandboxes\n\n", run->o.sandboxes);
        printf("  %-9s %9s %9s %9s %9s | %8s %8s %8s %9s %9s\n", "sandboxes", "host kB", "slab kB",
               "tables", "stacks", "create", "exec", "destroy", "list all", "list one");
        printf("  %-9s %9s %9s %9s %9s | %8s %8s %8s %9s %9s\n", "", "each", "each", "kB each",
               "kB each", "p50 ms", "p50 ms", "p50 ms", "p50 ms", "p50 ms");
        for (size_t k = 0; k < r->n_levels; k++) {
            const struct level *lv = &r->lv[k];
            printf("  %-9zu %9.0f %9.0f %9.1f %9.1f | %8.2f %8.2f %8.2f %9.1f %9.2f\n", lv->count,
                   lv->used_kb, lv->slab_kb, lv->tables_kb, lv->stacks_kb,
                   crl_bench_stats_of(&lv->create).p50, crl_bench_stats_of(&lv->exec).p50,
                   crl_bench_stats_of(&lv->destroy).p50, crl_bench_stats_of(&lv->list).p50,
                   crl_bench_stats_of(&lv->list_one).p50);
        }
        printf("\n  floors: fork+exit %.3f ms, fork+exec /bin/true %.3f ms, posix_spawn %.3f ms "
               "(p50)\n",
               fe.p50, fx.p50, sp.p50);
        if (r->refused[0])
            printf("  the host refused sandbox %zu: %s\n", r->made + 1, r->refused);
        if (hi) {
            printf("  goal: %zu sandboxes: %s\n", run->o.sandboxes,
                   reached ? "reached" : "NOT reached");
            printf("  goal: 500 kB or less each at %zu: %.0f kB, %s\n", hi->count, hi->used_kb,
                   hi->used_kb <= 500 ? "holds" : "does NOT hold");
            printf("  goal: create p50 at %zu within 1.5x of at %zu: %.2fx, %s\n", hi->count,
                   lo->count, create_x, create_x <= 1.5 ? "holds" : "does NOT hold");
            printf("  goal: exec p50 at %zu within 1.5x of at %zu: %.2fx, %s\n\n", hi->count,
                   lo->count, exec_x, exec_x <= 1.5 ? "holds" : "does NOT hold");
        }
    }
    json_auto_t *j = crl_bench_report_json(run, "density");
    json_object_set_new(j, "requested", json_integer((json_int_t)run->o.sandboxes));
    json_object_set_new(j, "reached", json_integer((json_int_t)r->made));
    json_object_set_new(j, "refused", r->refused[0] ? json_string(r->refused) : json_null());
    json_object_set(j, "levels", levels);
    json_object_set_new(j, "host_fork_exit", crl_bench_stats_json(&fe, false));
    json_object_set_new(j, "host_fork_exec", crl_bench_stats_json(&fx, false));
    json_object_set_new(j, "host_spawn", crl_bench_stats_json(&sp, false));
    json_object_set_new(j, "ratio_create_p50_top_vs_100", crl_bench_json_real(create_x));
    json_object_set_new(j, "ratio_exec_p50_top_vs_100", crl_bench_json_real(exec_x));
    crl_bench_report_line(j);
}

const struct crl_bench_cmd crl_bench_density = {
    .name = "bench density",
    .help = help,
    .root = NULL,
    .takes = CRL_BENCH_TAKES_SANDBOXES,
    .count_min = 100,
    .count_max = 1000000,
    .defaults = {.iterations = 200, .sandboxes = 20000},
    .ops = {measure, report, results_free, sizeof(struct results)},
};
