/* corral bench traj: what recording a trajectory costs (docs/api.md,
 * "Trajectories"), measured on this machine in one run against the same
 * calls with no trajectory:
 *
 *   1. per-step overhead: an exec that changes state, and a 4 KiB file
 *      write, in a sandbox with no trajectory, one recording with
 *      checkpoint "none" (the log record and its fdatasync) and one with
 *      "every-step" (and a checkpoint of the writable layer), interleaved;
 *   2. fast-forward: N mixed calls recorded, the sandbox destroyed, the
 *      same N calls sent to a new sandbox resuming the trajectory, against
 *      the same calls run live;
 *   3. restore: a 50-step trajectory resumed, fast-forwarded and brought
 *      live by a 51st call (restoring the state of step 50), against the
 *      same exec in a sandbox that has that state already; and a fork from
 *      step 50 against a plain create;
 *   4. responsiveness: execs of `true` in a plain sandbox B, from a thread
 *      of their own, while sandbox A steps (each step a fresh 16 MiB file),
 *      recording a trajectory every-step or none, against B with A idle:
 *      whether a checkpoint's disk work stalls the other sandboxes.
 *
 * Everything it creates (sandboxes, trajectories) is removed on the way
 * out, on an error or Ctrl-C too.  It prints figures and ratios and never
 * judges an absolute time. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "traj.h"

#define DEFAULT_IMAGE "busybox"

static const char help[] =
    "usage: corral bench traj [OPTIONS]\n"
    "\n"
    "Measure trajectories (docs/api.md), on this machine and in one run:\n"
    "  1. per-step overhead: exec `" EXEC_CMD "` and a 4 KiB PUT of " PUT_PATH " in\n"
    "     (a) a sandbox with no trajectory, (b) one recording a trajectory with\n"
    "     checkpoint \"none\", (c) one with \"every-step\", interleaved: p50, p99,\n"
    "     b-a, c-a and c/a;\n"
    "  2. fast-forward: N calls (execs and 4 KiB PUTs, alternating) recorded,\n"
    "     the sandbox destroyed, the same N sent to a new sandbox resuming the\n"
    "     trajectory: replayed steps/s against the same calls run live;\n"
    "  3. restore: a 50-step trajectory (each step a 4 KiB file and a line of a\n"
    "     log), resumed, fast-forwarded, then a 51st, different exec, which\n"
    "     restores step 50's state first: its latency against the same exec in a\n"
    "     sandbox already in that state, the restore alone (from the\n"
    "     trajectory's \"live\" event); and POST .../fork {\"step\": 50} (and 10)\n"
    "     against a plain create;\n"
    "  4. responsiveness: exec `true` in a plain sandbox B from a thread of its own,\n"
    "     while sandbox A makes steps that each write a fresh 16 MiB file, back to\n"
    "     back, (a) with no trajectory and (b) recording every-step, against B\n"
    "     with A idle: p50, p99 and the ratios (3 rounds, 8 steps each way a round,\n"
    "     2 s idle).\n"
    "Prints a table and a JSON line.  Uses corrald at $CORRAL_URL unless\n"
    "--start-daemon.  Sandboxes and trajectories it made are removed after\n"
    "(their checkpoints, some 400 MiB, stay in corrald's store until its next\n"
    "checkpoint gc past the grace: 'corral traj gc').\n"
    "\n"
    "  --start-daemon      run a private corrald (next to this corral, fresh state\n"
    "                      in a temporary directory) for the bench, stop it after\n"
    "  --iterations N      measured operations per figure, and N steps in 2\n"
    "                      (default 200; restores: a tenth, at least 5)\n"
    "  --image NAME        the sandboxes' image (default " DEFAULT_IMAGE ")\n"
    "  --json              print only the JSON line\n";

static void results_free(void *res)
{
    struct crl_bench_traj_results *r = &((struct crl_bench_traj *)res)->r;
    for (int k = 0; k < N_KINDS; k++) {
        crl_bench_samples_free(&r->exec[k]);
        crl_bench_samples_free(&r->exec_proc[k]);
        crl_bench_samples_free(&r->put[k]);
    }
    struct crl_bench_samples *all[] = {
        &r->exec_ckpt,     &r->put_ckpt,         &r->ff_plain,         &r->ff_record,
        &r->ff_replay,     &r->ff_resume_create, &r->rs_resume_create, &r->rs_forward,
        &r->rs_live,       &r->rs_restore,       &r->rs_live_exec,     &r->rs_live_ckpt,
        &r->rs_plain_exec, &r->rs_first_exec,    &r->rs_fork,          &r->rs_fork_shallow,
        &r->rs_create,     &r->rp_b[0],          &r->rp_b[1],          &r->rp_b[2],
        &r->rp_a[0],       &r->rp_a[1],          &r->rp_a_proc[0],     &r->rp_a_proc[1],
        &r->rp_ckpt};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(all); i++)
        crl_bench_samples_free(all[i]);
}

uint64_t crl_bench_traj_rnd(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1DULL;
}

void crl_bench_traj_fill(char *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = crl_bench_traj_rnd(&x);
        memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
    }
}

/* ---- sandboxes and trajectories, tracked for the way out ---- */

int crl_bench_traj_sandbox(struct crl_bench_traj *b, const char *traj, const char *mode,
                           int memory_mb, char *id, double *ms, struct crl_err *err)
{
    json_auto_t *spec = crl_bench_spec(b->run->o.image, memory_mb);
    if (spec && traj)
        json_object_set_new(
            spec, "trajectory",
            json_pack("{s:s, s:s}", "id", traj, "checkpoint", mode ? mode : "every-step"));
    if (crl_bench_sandbox_create(&b->sbs, spec, id, ms, err) < 0)
        return crl_err_prefix(err, "creating a sandbox%s%s", traj ? " recording " : "",
                              traj ? traj : "");
    return 0;
}

void crl_bench_traj_name(struct crl_bench_traj *b, const char *name, char *id)
{
    snprintf(id, TRAJ_ID_MAX, "%s-%s", b->tag, name);
    for (size_t i = 0; i < MAX_TRAJS; i++)
        if (!b->trajs[i][0]) {
            snprintf(b->trajs[i], TRAJ_ID_MAX, "%s", id);
            return;
        }
}

int crl_bench_traj_remove(struct crl_bench_traj *b, const char *id, struct crl_err *err)
{
    char path[160];
    struct crl_err e = CRL_ERR_INIT;
    snprintf(path, sizeof(path), "/v1/trajectories/%s", id);
    if (crl_client_request(b->c, "DELETE", path, NULL, NULL, NULL, &e) < 0 &&
        e.code != CRL_E_NOT_FOUND) {
        *err = e;
        return crl_err_prefix(err, "removing trajectory %s", id);
    }
    for (size_t i = 0; i < MAX_TRAJS; i++)
        if (strcmp(b->trajs[i], id) == 0)
            b->trajs[i][0] = 0;
    return 0;
}

/* Everything still tracked: sandboxes first (a trajectory a sandbox holds
 * cannot be removed). */
static void cleanup_all(struct crl_bench_traj *b)
{
    crl_bench_sandboxes_clear(&b->sbs);
    for (size_t i = 0; i < MAX_TRAJS; i++) {
        struct crl_err e = CRL_ERR_INIT;
        if (b->trajs[i][0] && crl_bench_traj_remove(b, b->trajs[i], &e) < 0)
            fprintf(stderr, "corral: bench traj: %s\n", e.msg);
    }
}

/* ---- calls ---- */

static const char *replayed_name(int v)
{
    return v < 0 ? "none" : v ? "true" : "false";
}

/* `replayed` of a step's answer must be `want` (-1: a sandbox with no
 * trajectory, whose answers have none). */
static int check_replayed(json_t *res, int want, const char *what, struct crl_err *err)
{
    json_t *rp = json_object_get(res, "replayed");
    int got = json_is_boolean(rp) ? json_is_true(rp) : -1;
    if (got != want)
        return crl_err_set(err, CRL_E_INTERNAL, "%s answered \"replayed\": %s, expected %s", what,
                           replayed_name(got), replayed_name(want));
    return 0;
}

int crl_bench_traj_exec(struct crl_client *c, const char *id, json_t *req, int replayed, double *ms,
                        json_t **out, struct crl_err *err)
{
    json_auto_t *res = NULL;
    if (crl_bench_exec(c, id, req, ms, &res, err) < 0)
        return -1;
    if (check_replayed(res, replayed, "an exec", err) < 0)
        return crl_err_prefix(err, "sandbox %s", id);
    if (out)
        *out = steal_pointer(&res);
    return 0;
}

int crl_bench_traj_put(struct crl_bench_traj *b, const char *id, const char *path, const char *data,
                       size_t len, int replayed, double *ms, struct crl_err *err)
{
    struct crl_client_mem src = {.data = data, .len = len};
    json_auto_t *res = NULL;
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_put_source(b->c, id, path, crl_client_mem_source, &src, (long long)len, NULL, -1,
                              &res, err) < 0)
        return crl_err_prefix(err, "PUT %s in %s", path, id);
    *ms = crl_bench_ms_since(t0);
    if (check_replayed(res, replayed, "a file write", err) < 0)
        return crl_err_prefix(err, "sandbox %s", id);
    return 0;
}

int crl_bench_traj_get(struct crl_bench_traj *b, const char *id, json_t **out, struct crl_err *err)
{
    char path[160];
    snprintf(path, sizeof(path), "/v1/trajectories/%s", id);
    if (crl_client_request(b->c, "GET", path, NULL, out, NULL, err) < 0)
        return crl_err_prefix(err, "GET %s", path);
    return 0;
}

double crl_bench_traj_ckpt_ms(json_t *step)
{
    json_t *s = json_object_get(json_object_get(step, "checkpoint_stats"), "seconds");
    return json_is_number(s) ? json_number_value(s) * 1e3 : NAN;
}

/* ---- the run ---- */

/* What the options set: the sizes, the command line for the report, this
 * run's trajectory tag. */
static void prepare(struct crl_bench_traj *b, const struct crl_bench_run *run)
{
    b->run = run;
    b->n = run->o.iterations;
    b->warm = crl_bench_warmup(b->n);
    b->r.restores = crl_bench_warmup(b->n);
    b->rnd = crl_now_ns() | 1;
    /* The command line, for the report: "corral bench traj ..." */
    int off = snprintf(b->cmdline, sizeof(b->cmdline), "corral %s", run->cmd->name);
    for (int i = 1; i < run->argc && off > 0 && (size_t)off < sizeof(b->cmdline); i++)
        off += snprintf(b->cmdline + off, sizeof(b->cmdline) - (size_t)off, " %s", run->argv[i]);
    /* Trajectory ids of this run alone: on a shared corrald, never another's. */
    snprintf(b->tag, sizeof(b->tag), "bench-traj-%d-%llx", (int)getpid(),
             (unsigned long long)time(NULL));
}

static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    struct crl_bench_traj *b = res;
    cleanup_client struct crl_client *c = NULL;
    prepare(b, run);
    if (crl_client_open(run->url, NULL, &c, err) < 0)
        return -1;
    b->c = c;
    b->sbs = (struct crl_bench_sandboxes){.c = c, .who = run->cmd->name};
    int rc = crl_bench_host(c, run->host_id, sizeof(run->host_id), NULL, err);
    if (rc == 0)
        rc = crl_bench_traj_overhead(b, err);
    if (rc == 0)
        rc = crl_bench_traj_fast_forward(b, err);
    if (rc == 0)
        rc = crl_bench_traj_restore(b, err);
    if (rc == 0)
        rc = crl_bench_traj_responsiveness(b, err);
    cleanup_all(b);
    b->c = NULL;
    return rc;
}

const struct crl_bench_cmd crl_bench_traj = {
    .name = "bench traj",
    .help = help,
    .takes = CRL_BENCH_TAKES_IMAGE,
    .defaults = {.iterations = 200, .image = DEFAULT_IMAGE},
    .ops = {measure, crl_bench_traj_report, results_free, sizeof(struct crl_bench_traj)},
};
