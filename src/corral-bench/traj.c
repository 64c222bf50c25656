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
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "bench.h"
#include "daemon.h"
#include "peer.h"
#include "../corral/cli.h"

#define DEFAULT_ITERATIONS 200
#define DEFAULT_IMAGE "busybox"
#define FILE_BYTES 4096
#define RESTORE_STEPS 50
#define FORK_SHALLOW 10 /* a fork from a shallower step, to see what depth costs */
#define MAX_SANDBOXES 8
#define MAX_TRAJS 8
#define EXEC_CMD "echo x >> /root/f"
#define PUT_PATH "/root/w"
/* 4: A's steps, each a file of BIG_BYTES (RESP_ROUNDS rounds of RESP_STEPS
 * steps, each way), and B probed for RESP_IDLE_S a round with A idle. */
#define BIG_BYTES (16 << 20)
#define RESP_ROUNDS 3
#define RESP_STEPS 8
#define RESP_IDLE_S 2
#define RESP_MAX_SAMPLES 20000 /* B's execs kept per kind of window */
#define RESP_MEMORY_MB 128     /* A's: the file is in its writable layer, a tmpfs */

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

/* ---- what one run holds ---- */

enum { A_PLAIN, B_NONE, C_EVERY, N_KINDS };
static const char *const kind_mode[N_KINDS] = {NULL, "none", "every-step"};
/* 4: what sandbox A does while B is probed */
enum { W_IDLE, W_PLAIN, W_EVERY, N_WINDOWS };

struct results {
    char host_id[32];
    /* 1: per-step overhead, [kind]; the command's own time (duration_s);
     * and from the step records of (b) and (c), the checkpoint's time */
    struct crl_bench_samples exec[N_KINDS], exec_proc[N_KINDS], put[N_KINDS];
    struct crl_bench_samples exec_ckpt, put_ckpt;
    /* 2: fast-forward */
    struct crl_bench_samples ff_plain, ff_record, ff_replay, ff_resume_create;
    /* 3: restore */
    struct crl_bench_samples rs_resume_create, rs_forward, rs_live, rs_restore, rs_live_exec,
        rs_live_ckpt, rs_plain_exec, rs_first_exec, rs_fork, rs_fork_shallow, rs_create;
    long long rs_ckpt_bytes; /* what the 50 steps' checkpoints stored */
    size_t restores;
    /* 4: responsiveness: B's execs by what A does meanwhile, A's steps
     * (none, every-step) and the checkpoints of the latter */
    struct crl_bench_samples rp_b[N_WINDOWS], rp_a[2], rp_a_proc[2], rp_ckpt;
    double rp_stored_mib; /* a checkpoint's bytes_stored, mean */
};

static void results_free(struct results *r)
{
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

struct bench {
    const char *url; /* NULL: $CORRAL_URL */
    struct crl_client *c;
    const char *image;
    size_t n, warm;
    bool quiet;
    char tag[64]; /* this run's trajectory ids start with it */
    /* what to remove on the way out */
    char sandboxes[MAX_SANDBOXES][64];
    char trajs[MAX_TRAJS][96];
    uint64_t rnd;
};

#define STEP(b, ...)                                            \
    do {                                                        \
        if (!(b)->quiet) {                                      \
            fprintf(stderr, "corral bench traj: " __VA_ARGS__); \
            fputc('\n', stderr);                                \
        }                                                       \
    } while (0)

static void add(struct crl_bench_samples *s, double ms)
{
    s->ms[s->n++] = ms;
    s->wall_s += ms / 1e3; /* interleaved phases: a side's rate is over its own time */
}

/* xorshift64*: file contents that differ from call to call (so no
 * checkpoint finds them stored already) and do not compress. */
static uint64_t next_rnd(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1DULL;
}

static void fill(char *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = next_rnd(&x);
        memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
    }
}

/* ---- sandboxes and trajectories, tracked for the way out ---- */

/* Note `id` in the first free one of `n` slots of `width` bytes. */
static void track(char *slots, size_t n, size_t width, const char *id)
{
    for (size_t i = 0; i < n; i++, slots += width)
        if (!slots[0]) {
            snprintf(slots, width, "%s", id);
            return;
        }
}

static void sandbox_forget(struct bench *b, const char *id)
{
    for (size_t i = 0; i < MAX_SANDBOXES; i++)
        if (strcmp(b->sandboxes[i], id) == 0)
            b->sandboxes[i][0] = 0;
}

/* The bench's spec: the image, `memory_mb` (admission control never
 * limits), a label, and the trajectory `traj` in checkpoint mode `mode` if
 * given. */
static json_t *spec_of(const struct bench *b, const char *traj, const char *mode, int memory_mb)
{
    json_t *spec = json_pack("{s:s, s:{s:i}, s:{s:s}}", "image", b->image, "resources", "memory_mb",
                             memory_mb, "labels", "corral-bench", "1");
    if (spec && traj)
        json_object_set_new(
            spec, "trajectory",
            json_pack("{s:s, s:s}", "id", traj, "checkpoint", mode ? mode : "every-step"));
    return spec;
}

/* Create a sandbox of `memory_mb` (recording `traj` if not NULL), its id
 * into id[0..64), timed to the 201 into *ms (may be NULL). */
static int sandbox_create_mb(struct bench *b, const char *traj, const char *mode, int memory_mb,
                             char *id, double *ms, struct crl_err *err)
{
    json_auto_t *spec = spec_of(b, traj, mode, memory_mb);
    json_auto_t *sb = NULL;
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_create(b->c, spec, &sb, err) < 0)
        return crl_err_prefix(err, "creating a sandbox%s%s", traj ? " recording " : "",
                              traj ? traj : "");
    if (ms)
        *ms = crl_bench_ms_since(t0);
    snprintf(id, 64, "%s", crl_cli_str(sb, "id", ""));
    track(b->sandboxes[0], MAX_SANDBOXES, sizeof(b->sandboxes[0]), id);
    return 0;
}

static int sandbox_create(struct bench *b, const char *traj, const char *mode, char *id, double *ms,
                          struct crl_err *err)
{
    return sandbox_create_mb(b, traj, mode, 64, id, ms, err);
}

static int sandbox_destroy(struct bench *b, char *id, struct crl_err *err)
{
    if (!id[0])
        return 0;
    struct crl_err e = CRL_ERR_INIT;
    int rc = crl_client_destroy(b->c, id, NULL, &e);
    if (rc < 0 && e.code != CRL_E_NOT_FOUND) {
        *err = e;
        return crl_err_prefix(err, "destroying %s", id);
    }
    sandbox_forget(b, id);
    id[0] = 0;
    return 0;
}

/* The trajectory id `name` of this run, into id[0..96), to remove after. */
static void traj_name(struct bench *b, const char *name, char *id)
{
    snprintf(id, 96, "%s-%s", b->tag, name);
    track(b->trajs[0], MAX_TRAJS, sizeof(b->trajs[0]), id);
}

static int traj_remove(struct bench *b, const char *id, struct crl_err *err)
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
static void cleanup_all(struct bench *b)
{
    for (size_t i = 0; i < MAX_SANDBOXES; i++) {
        struct crl_err e = CRL_ERR_INIT;
        if (b->sandboxes[i][0] && sandbox_destroy(b, b->sandboxes[i], &e) < 0)
            fprintf(stderr, "corral: bench traj: %s\n", e.msg);
    }
    for (size_t i = 0; i < MAX_TRAJS; i++) {
        struct crl_err e = CRL_ERR_INIT;
        if (b->trajs[i][0] && traj_remove(b, b->trajs[i], &e) < 0)
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

/* An exec timed to its whole answer into *ms; it must exit 0.  *out (may
 * be NULL) gets the result. */
static int exec_call(struct bench *b, const char *id, json_t *req, int replayed, double *ms,
                     json_t **out, struct crl_err *err)
{
    json_auto_t *res = NULL;
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_exec(b->c, id, req, &res, err) < 0)
        return crl_err_prefix(err, "exec in %s", id);
    *ms = crl_bench_ms_since(t0);
    if (crl_client_exit_status(res) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "exec in %s ended with status %d (%s): %s", id,
                           crl_client_exit_status(res), crl_cli_str(res, "reason", "?"),
                           crl_cli_str(res, "stderr", ""));
    if (check_replayed(res, replayed, "an exec", err) < 0)
        return crl_err_prefix(err, "sandbox %s", id);
    if (out)
        *out = steal_pointer(&res);
    return 0;
}

/* PUT data[0..len) at `path`, timed to the answer into *ms. */
static int put_call(struct bench *b, const char *id, const char *path, const char *data, size_t len,
                    int replayed, double *ms, struct crl_err *err)
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

static int traj_get(struct bench *b, const char *id, json_t **out, struct crl_err *err)
{
    char path[160];
    snprintf(path, sizeof(path), "/v1/trajectories/%s", id);
    if (crl_client_request(b->c, "GET", path, NULL, out, NULL, err) < 0)
        return crl_err_prefix(err, "GET %s", path);
    return 0;
}

static double step_ckpt_ms(json_t *step)
{
    json_t *s = json_object_get(json_object_get(step, "checkpoint_stats"), "seconds");
    return json_is_number(s) ? json_number_value(s) * 1e3 : NAN;
}

/* ---- 1. per-step overhead ---- */

/* The checkpoint times of the measured steps of `kind` (past the first
 * `skip` of that kind) of trajectory `traj`. */
static int ckpt_times(struct bench *b, const char *traj, const char *kind, size_t skip,
                      struct crl_bench_samples *out, struct crl_err *err)
{
    json_auto_t *t = NULL;
    if (traj_get(b, traj, &t, err) < 0 || crl_bench_samples_alloc(out, b->n, err) < 0)
        return -1;
    size_t seen = 0, i;
    json_t *step;
    json_array_foreach(json_object_get(t, "steps"), i, step)
    {
        if (strcmp(crl_cli_str(step, "kind", ""), kind) != 0 || seen++ < skip)
            continue;
        double ms = step_ckpt_ms(step);
        if (!isnan(ms) && out->n < b->n)
            add(out, ms);
    }
    return 0;
}

static int overhead(struct bench *b, struct results *r, struct crl_err *err)
{
    char ids[N_KINDS][64] = {"", "", ""}, trajs[N_KINDS][96] = {"", "", ""};
    json_auto_t *req = json_pack("{s:s}", "cmd", EXEC_CMD);
    char data[FILE_BYTES];
    for (int k = 0; k < N_KINDS; k++) {
        if (kind_mode[k])
            traj_name(b, kind_mode[k], trajs[k]);
        if (sandbox_create(b, kind_mode[k] ? trajs[k] : NULL, kind_mode[k], ids[k], NULL, err) <
                0 ||
            crl_bench_samples_alloc(&r->exec[k], b->n, err) < 0 ||
            crl_bench_samples_alloc(&r->exec_proc[k], b->n, err) < 0 ||
            crl_bench_samples_alloc(&r->put[k], b->n, err) < 0)
            return -1;
    }
    /* Each iteration calls all three, which goes first rotating, so that
     * drift in the machine's load hits them alike. */
    STEP(b, "exec `%s`: no trajectory, checkpoint none, every-step, interleaved (%zu each)",
         EXEC_CMD, b->n);
    for (size_t i = 0; i < b->warm + b->n; i++)
        for (int j = 0; j < N_KINDS; j++) {
            int k = (int)((i + (size_t)j) % N_KINDS);
            double ms;
            json_auto_t *res = NULL;
            if (exec_call(b, ids[k], req, kind_mode[k] ? 0 : -1, &ms, &res, err) < 0)
                return -1;
            if (i < b->warm)
                continue;
            add(&r->exec[k], ms);
            add(&r->exec_proc[k], json_number_value(json_object_get(res, "duration_s")) * 1e3);
        }
    STEP(b, "PUT %d bytes of %s: the same three, interleaved (%zu each)", FILE_BYTES, PUT_PATH,
         b->n);
    for (size_t i = 0; i < b->warm + b->n; i++)
        for (int j = 0; j < N_KINDS; j++) {
            int k = (int)((i + (size_t)j) % N_KINDS);
            double ms;
            fill(data, sizeof(data), next_rnd(&b->rnd));
            if (put_call(b, ids[k], PUT_PATH, data, sizeof(data), kind_mode[k] ? 0 : -1, &ms, err) <
                0)
                return -1;
            if (i >= b->warm)
                add(&r->put[k], ms);
        }
    if (ckpt_times(b, trajs[C_EVERY], "exec", b->warm, &r->exec_ckpt, err) < 0 ||
        ckpt_times(b, trajs[C_EVERY], "file_write", b->warm, &r->put_ckpt, err) < 0)
        return -1;
    for (int k = 0; k < N_KINDS; k++)
        if (sandbox_destroy(b, ids[k], err) < 0 ||
            (trajs[k][0] && traj_remove(b, trajs[k], err) < 0))
            return -1;
    return 0;
}

/* ---- 2. fast-forward ---- */

/* Call i of the mixed sequence: an exec (even i) that appends to a log and
 * prints its length, or a PUT (odd i) of 4 KiB that depend on i alone, so
 * that the resumed client sends the same bytes. */
static int mixed_call(struct bench *b, const char *id, size_t i, int replayed, double *ms,
                      char **stdout_out, struct crl_err *err)
{
    if (i % 2 == 0) {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "echo %zu >> /root/ff.log; wc -l < /root/ff.log", i);
        json_auto_t *req = json_pack("{s:s}", "cmd", cmd);
        json_auto_t *res = NULL;
        if (exec_call(b, id, req, replayed, ms, &res, err) < 0)
            return -1;
        if (stdout_out) {
            free(*stdout_out);
            *stdout_out = strdup(crl_cli_str(res, "stdout", ""));
        }
        return 0;
    }
    char path[64], data[FILE_BYTES];
    snprintf(path, sizeof(path), "/root/ff/f-%zu", i % 16);
    fill(data, sizeof(data), i);
    return put_call(b, id, path, data, sizeof(data), replayed, ms, err);
}

static int fast_forward(struct bench *b, struct results *r, struct crl_err *err)
{
    char rec[64] = "", plain[64] = "", traj[96];
    size_t n = b->n;
    cleanup_free char **outs = calloc(n, sizeof(char *));
    int rc = -1;
    if (!outs)
        return crl_err_sys(err, ENOMEM, "allocating");
    traj_name(b, "ff", traj);
    if (crl_bench_samples_alloc(&r->ff_plain, n, err) < 0 ||
        crl_bench_samples_alloc(&r->ff_record, n, err) < 0 ||
        crl_bench_samples_alloc(&r->ff_replay, n, err) < 0 ||
        crl_bench_samples_alloc(&r->ff_resume_create, 1, err) < 0 ||
        sandbox_create(b, traj, "every-step", rec, NULL, err) < 0 ||
        sandbox_create(b, NULL, NULL, plain, NULL, err) < 0)
        goto out;
    STEP(b,
         "fast-forward: %zu calls recorded (every-step) and run with no trajectory, "
         "interleaved",
         n);
    for (size_t i = 0; i < n; i++) {
        double ms_rec, ms_plain;
        bool rec_first = i % 4 < 2; /* an exec and a PUT each way round */
        for (int j = 0; j < 2; j++) {
            if (j == 0 ? rec_first : !rec_first) {
                if (mixed_call(b, rec, i, 0, &ms_rec, &outs[i], err) < 0)
                    goto out;
            } else if (mixed_call(b, plain, i, -1, &ms_plain, NULL, err) < 0) {
                goto out;
            }
        }
        add(&r->ff_record, ms_rec);
        add(&r->ff_plain, ms_plain);
    }
    if (sandbox_destroy(b, rec, err) < 0 || sandbox_destroy(b, plain, err) < 0)
        goto out;
    STEP(b, "fast-forward: a new sandbox resumes %s and gets the same %zu calls", traj, n);
    double ms;
    if (sandbox_create(b, traj, "every-step", rec, &ms, err) < 0)
        goto out;
    r->ff_resume_create.ms[r->ff_resume_create.n++] = ms;
    unsigned long long t0 = crl_now_ns();
    for (size_t i = 0; i < n; i++) {
        cleanup_free char *out = NULL;
        if (mixed_call(b, rec, i, 1, &ms, i % 2 == 0 ? &out : NULL, err) < 0)
            goto out;
        if (out && strcmp(out, outs[i] ? outs[i] : "") != 0) {
            crl_err_set(err, CRL_E_INTERNAL, "replayed step %zu printed '%s', recorded '%s'", i + 1,
                        out, outs[i] ? outs[i] : "");
            goto out;
        }
        r->ff_replay.ms[r->ff_replay.n++] = ms;
    }
    r->ff_replay.wall_s = (double)(crl_now_ns() - t0) / 1e9;
    rc = sandbox_destroy(b, rec, err) < 0 || traj_remove(b, traj, err) < 0 ? -1 : 0;
out:
    for (size_t i = 0; i < n; i++)
        free(outs[i]);
    return rc;
}

/* ---- 3. restore ---- */

/* Step k (1-based) of the 50: a distinct 4 KiB file and a line of a log
 * (the state is in the writable layer, not /tmp). */
static json_t *history_req(size_t k)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p /root/r && head -c %d /dev/urandom > /root/r/f-%zu && echo %zu >> "
             "/root/r/log",
             FILE_BYTES, k, k);
    return json_pack("{s:s}", "cmd", cmd);
}

/* The 51st call of restore `k`: different each time (else the next resume
 * would find it recorded and replay it); it prints the log's length, which
 * must be the 50 lines of the history: the state was restored. */
static json_t *probe_req(size_t k)
{
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "wc -l < /root/r/log; echo restore-%zu", k);
    return json_pack("{s:s}", "cmd", cmd);
}

/* The same shape of command for a fresh plain sandbox, which has no log. */
static json_t *first_req(size_t k)
{
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "wc -l < /dev/null; echo restore-%zu", k);
    return json_pack("{s:s}", "cmd", cmd);
}

static int check_probe(json_t *res, size_t k, struct crl_err *err)
{
    char want[64];
    snprintf(want, sizeof(want), "%d\nrestore-%zu\n", RESTORE_STEPS, k);
    if (strcmp(crl_cli_str(res, "stdout", ""), want) != 0)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "the call after %d steps printed '%s': the state was not restored",
                           RESTORE_STEPS, crl_cli_str(res, "stdout", ""));
    return 0;
}

struct restore_run {
    char sandbox[64];
    double sent_at; /* wall clock, seconds: when the 51st call went out */
};

/* From the trajectory's record: the restore of each run (its sandbox's
 * "live" event less the time its 51st call was sent), and that call's
 * step: the exec (duration_s) and its checkpoint. */
static int restore_split(struct bench *b, const char *traj, const struct restore_run *runs,
                         size_t n, struct results *r, struct crl_err *err)
{
    json_auto_t *t = NULL;
    if (traj_get(b, traj, &t, err) < 0)
        return -1;
    if (crl_bench_samples_alloc(&r->rs_restore, n, err) < 0 ||
        crl_bench_samples_alloc(&r->rs_live_exec, n, err) < 0 ||
        crl_bench_samples_alloc(&r->rs_live_ckpt, n, err) < 0)
        return -1;
    size_t i;
    json_t *e;
    r->rs_ckpt_bytes = 0;
    json_array_foreach(json_object_get(t, "steps"), i, e)
    {
        json_t *bs = json_object_get(json_object_get(e, "checkpoint_stats"), "bytes_stored");
        if (json_integer_value(json_object_get(e, "n")) <= RESTORE_STEPS)
            r->rs_ckpt_bytes += json_integer_value(bs);
        for (size_t k = 0; k < n; k++)
            if (strcmp(crl_cli_str(e, "sandbox", ""), runs[k].sandbox) == 0) {
                add(&r->rs_live_exec, json_number_value(json_object_get(e, "duration_s")) * 1e3);
                add(&r->rs_live_ckpt, step_ckpt_ms(e));
            }
    }
    json_array_foreach(json_object_get(t, "events"), i, e)
    {
        if (strcmp(crl_cli_str(e, "event", ""), "live") != 0)
            continue;
        for (size_t k = 0; k < n; k++)
            if (strcmp(crl_cli_str(e, "sandbox", ""), runs[k].sandbox) == 0)
                add(&r->rs_restore,
                    (json_number_value(json_object_get(e, "time")) - runs[k].sent_at) * 1e3);
    }
    if (r->rs_restore.n != n || r->rs_live_exec.n != n)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "trajectory %s has %zu live events and %zu live steps of the %zu "
                           "restores",
                           traj, r->rs_restore.n, r->rs_live_exec.n, n);
    return 0;
}

/* POST .../fork {"step": step} of sandbox `id`, timed to the 201 into
 * *out; the new sandbox must have the state of that step (as many lines
 * in the log, and files beside it), and is then destroyed. */
static int fork_step(struct bench *b, const char *id, int step, struct crl_bench_samples *out,
                     struct crl_err *err)
{
    char path[128], fork_id[64], want[32];
    json_auto_t *body = json_pack("{s:i}", "step", step);
    json_auto_t *fk = NULL;
    json_auto_t *res = NULL;
    json_auto_t *wc = json_pack("{s:s}", "cmd", "wc -l < /root/r/log; ls /root/r | wc -l");
    double ms;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/fork", id);
    if (crl_bench_check_interrupted(err) < 0)
        return -1;
    unsigned long long t0 = crl_now_ns();
    if (crl_client_request(b->c, "POST", path, body, &fk, NULL, err) < 0)
        return crl_err_prefix(err, "POST %s {\"step\": %d}", path, step);
    add(out, crl_bench_ms_since(t0));
    snprintf(fork_id, sizeof(fork_id), "%s", crl_cli_str(fk, "id", ""));
    track(b->sandboxes[0], MAX_SANDBOXES, sizeof(b->sandboxes[0]), fork_id);
    snprintf(want, sizeof(want), "%d\n%d\n", step, step + 1);
    if (exec_call(b, fork_id, wc, -1, &ms, &res, err) < 0)
        return -1;
    if (strcmp(crl_cli_str(res, "stdout", ""), want) != 0)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "a fork from step %d has '%s' for the log's lines and files", step,
                           crl_cli_str(res, "stdout", ""));
    return sandbox_destroy(b, fork_id, err);
}

static int restore(struct bench *b, struct results *r, struct crl_err *err)
{
    char rec[64] = "", plain[64] = "", sb[64] = "", traj[96];
    size_t n = r->restores;
    cleanup_free struct restore_run *runs = calloc(n, sizeof(*runs));
    if (!runs)
        return crl_err_sys(err, ENOMEM, "allocating");
    traj_name(b, "restore", traj);
    struct crl_bench_samples *all[] = {&r->rs_resume_create, &r->rs_forward,    &r->rs_live,
                                       &r->rs_plain_exec,    &r->rs_first_exec, &r->rs_fork,
                                       &r->rs_fork_shallow,  &r->rs_create};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(all); i++)
        if (crl_bench_samples_alloc(all[i], n, err) < 0)
            return -1;
    STEP(b, "restore: a %d-step history, recorded (every-step) and in a plain sandbox",
         RESTORE_STEPS);
    if (sandbox_create(b, traj, "every-step", rec, NULL, err) < 0 ||
        sandbox_create(b, NULL, NULL, plain, NULL, err) < 0)
        return -1;
    for (size_t k = 1; k <= RESTORE_STEPS; k++) {
        json_auto_t *req = history_req(k);
        double ms;
        if (exec_call(b, rec, req, 0, &ms, NULL, err) < 0 ||
            exec_call(b, plain, req, -1, &ms, NULL, err) < 0)
            return -1;
    }
    if (sandbox_destroy(b, rec, err) < 0)
        return -1;
    STEP(b,
         "restore: %zu times resume, %d replayed, a 51st call live; the same call in the "
         "plain sandbox; forks from steps %d and %d, and a plain create",
         n, RESTORE_STEPS, RESTORE_STEPS, FORK_SHALLOW);
    for (size_t k = 0; k < n; k++) {
        double ms;
        if (sandbox_create(b, traj, "every-step", sb, &ms, err) < 0)
            return -1;
        add(&r->rs_resume_create, ms);
        unsigned long long t0 = crl_now_ns();
        for (size_t s = 1; s <= RESTORE_STEPS; s++) {
            json_auto_t *req = history_req(s);
            if (exec_call(b, sb, req, 1, &ms, NULL, err) < 0)
                return -1;
        }
        add(&r->rs_forward, crl_bench_ms_since(t0));
        json_auto_t *probe = probe_req(k);
        /* the 51st call and the plain exec, which goes first alternating */
        for (int j = 0; j < 2; j++) {
            json_auto_t *res = NULL;
            if ((j == 0) == (k % 2 == 0)) {
                snprintf(runs[k].sandbox, sizeof(runs[k].sandbox), "%s", sb);
                runs[k].sent_at = crl_wall_s();
                if (exec_call(b, sb, probe, 0, &ms, &res, err) < 0)
                    return -1;
                add(&r->rs_live, ms);
            } else {
                if (exec_call(b, plain, probe, -1, &ms, &res, err) < 0)
                    return -1;
                add(&r->rs_plain_exec, ms);
            }
            if (check_probe(res, k, err) < 0)
                return -1;
        }
        /* forks from steps 50 and 10 (of the sandbox now live on the
         * trajectory) and a plain create, which goes first rotating */
        for (int j = 0; j < 3; j++) {
            int op = (int)((k + (size_t)j) % 3);
            if (op == 0 && fork_step(b, sb, RESTORE_STEPS, &r->rs_fork, err) < 0)
                return -1;
            if (op == 1 && fork_step(b, sb, FORK_SHALLOW, &r->rs_fork_shallow, err) < 0)
                return -1;
            if (op != 2)
                continue;
            /* and its first exec: a new sandbox's first exec, as the 51st
             * call is, with no restore before it */
            char other[64];
            json_auto_t *first = first_req(k);
            if (sandbox_create(b, NULL, NULL, other, &ms, err) < 0)
                return -1;
            add(&r->rs_create, ms);
            if (exec_call(b, other, first, -1, &ms, NULL, err) < 0)
                return -1;
            add(&r->rs_first_exec, ms);
            if (sandbox_destroy(b, other, err) < 0)
                return -1;
        }
        if (sandbox_destroy(b, sb, err) < 0)
            return -1;
    }
    if (restore_split(b, traj, runs, n, r, err) < 0)
        return -1;
    return sandbox_destroy(b, plain, err) < 0 || traj_remove(b, traj, err) < 0 ? -1 : 0;
}

/* ---- 4. responsiveness ---- */

/* Execs of `true` in sandbox B, back to back, until told to stop. */
struct prober {
    struct bench b; /* its own client */
    const char *sandbox;
    struct crl_bench_samples *into;
    atomic_bool stop;
    int rc;
    struct crl_err err;
};

static void *probe(void *p)
{
    struct prober *pr = p;
    json_auto_t *req = json_pack("{s:s}", "cmd", "true");
    while (!atomic_load(&pr->stop) && pr->into->n < RESP_MAX_SAMPLES) {
        double ms;
        if (exec_call(&pr->b, pr->sandbox, req, -1, &ms, NULL, &pr->err) < 0) {
            pr->rc = -1;
            break;
        }
        add(pr->into, ms);
    }
    return NULL;
}

/* Step k of A: the previous file goes (A's tmpfs holds one) and a new one
 * of random bytes is written, which its checkpoint must read, hash,
 * compress and store. */
static json_t *big_req(size_t k)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -f /tmp/big*; head -c %d /dev/urandom > /tmp/big%zu", BIG_BYTES,
             k);
    return json_pack("{s:s}", "cmd", cmd);
}

/* A sandbox A: its id, `replayed` as exec_call() takes it, and where its
 * steps' latencies and the commands' own times (duration_s) go. */
struct stepper {
    const char *id;
    int replayed;
    struct crl_bench_samples *lat, *proc;
};

/* One window: B probed from a thread of its own (on client `pc`) while
 * this one makes RESP_STEPS steps in `a`, or with `a` NULL sleeps
 * RESP_IDLE_S. */
static int window(struct bench *b, struct crl_client *pc, const char *sb_b, const struct stepper *a,
                  size_t *k, struct crl_bench_samples *b_into, struct crl_err *err)
{
    struct prober pr = {.b = {.c = pc}, .sandbox = sb_b, .into = b_into};
    atomic_init(&pr.stop, false);
    pthread_t t;
    int e = pthread_create(&t, NULL, probe, &pr);
    if (e != 0)
        return crl_err_sys(err, e, "pthread_create");
    int rc = 0;
    if (!a) {
        struct timespec tick = {0, 50 * 1000 * 1000};
        for (int i = 0; i < RESP_IDLE_S * 20 && !crl_cli_interrupted; i++)
            nanosleep(&tick, NULL);
        rc = crl_bench_check_interrupted(err);
    }
    for (size_t i = 0; a && i < RESP_STEPS && rc == 0; i++) {
        json_auto_t *req = big_req((*k)++);
        json_auto_t *res = NULL;
        double ms;
        if ((rc = exec_call(b, a->id, req, a->replayed, &ms, &res, err)) < 0)
            break;
        add(a->lat, ms);
        add(a->proc, json_number_value(json_object_get(res, "duration_s")) * 1e3);
    }
    atomic_store(&pr.stop, true);
    pthread_join(t, NULL);
    if (rc == 0 && pr.rc < 0) {
        *err = pr.err;
        rc = -1;
    }
    return rc;
}

/* The checkpoint of each of A's recorded steps: its time, and the mean of
 * what it stored, which must be about the file (else the file was not in
 * the writable layer, and nothing was measured). */
static int resp_ckpts(struct bench *b, const char *traj, struct results *r, struct crl_err *err)
{
    json_auto_t *t = NULL;
    if (traj_get(b, traj, &t, err) < 0 ||
        crl_bench_samples_alloc(&r->rp_ckpt, RESP_ROUNDS * RESP_STEPS, err) < 0)
        return -1;
    double stored = 0;
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(t, "steps"), i, step)
    {
        double ms = step_ckpt_ms(step);
        if (isnan(ms) || r->rp_ckpt.n == RESP_ROUNDS * RESP_STEPS)
            continue;
        add(&r->rp_ckpt, ms);
        stored += (double)json_integer_value(
            json_object_get(json_object_get(step, "checkpoint_stats"), "bytes_stored"));
    }
    if (r->rp_ckpt.n == 0)
        return crl_err_set(err, CRL_E_INTERNAL, "trajectory %s has no checkpoints", traj);
    r->rp_stored_mib = stored / (double)r->rp_ckpt.n / (1 << 20);
    if (r->rp_stored_mib < (double)BIG_BYTES / 2 / (1 << 20))
        return crl_err_set(err, CRL_E_INTERNAL,
                           "a step's checkpoint stored %.1f MiB: its %d MiB file is not in the "
                           "writable layer",
                           r->rp_stored_mib, BIG_BYTES >> 20);
    return 0;
}

static int responsiveness(struct bench *b, struct results *r, struct crl_err *err)
{
    char probed[64] = "", a_plain[64] = "", a_every[64] = "", traj[96];
    cleanup_client struct crl_client *pc = NULL;
    if (crl_client_open(b->url, NULL, &pc, err) < 0)
        return -1;
    traj_name(b, "resp", traj);
    for (int w = 0; w < N_WINDOWS; w++)
        if (crl_bench_samples_alloc(&r->rp_b[w], RESP_MAX_SAMPLES, err) < 0)
            return -1;
    for (int i = 0; i < 2; i++)
        if (crl_bench_samples_alloc(&r->rp_a[i], RESP_ROUNDS * RESP_STEPS, err) < 0 ||
            crl_bench_samples_alloc(&r->rp_a_proc[i], RESP_ROUNDS * RESP_STEPS, err) < 0)
            return -1;
    if (sandbox_create(b, NULL, NULL, probed, NULL, err) < 0 ||
        sandbox_create_mb(b, NULL, NULL, RESP_MEMORY_MB, a_plain, NULL, err) < 0 ||
        sandbox_create_mb(b, traj, "every-step", RESP_MEMORY_MB, a_every, NULL, err) < 0)
        return -1;
    /* B's warm-up, on the prober's client */
    struct bench pb = {.c = pc};
    json_auto_t *t = json_pack("{s:s}", "cmd", "true");
    for (size_t i = 0; i < b->warm; i++) {
        double ms;
        if (exec_call(&pb, probed, t, -1, &ms, NULL, err) < 0)
            return -1;
    }
    STEP(b,
         "responsiveness: exec `true` in %s while A idles %d s, makes %d steps of a %d MiB "
         "file with no trajectory, and %d recording every-step; %d rounds",
         probed, RESP_IDLE_S, RESP_STEPS, BIG_BYTES >> 20, RESP_STEPS, RESP_ROUNDS);
    const struct stepper as[2] = {{a_plain, -1, &r->rp_a[0], &r->rp_a_proc[0]},
                                  {a_every, 0, &r->rp_a[1], &r->rp_a_proc[1]}};
    size_t k = 0;
    for (int round = 0; round < RESP_ROUNDS; round++)
        for (int j = 0; j < N_WINDOWS; j++) {
            int w = (round + j) % N_WINDOWS; /* which goes first rotates */
            const struct stepper *a = w == W_IDLE ? NULL : &as[w == W_EVERY];
            if (window(b, pc, probed, a, &k, &r->rp_b[w], err) < 0)
                return -1;
        }
    if (resp_ckpts(b, traj, r, err) < 0)
        return -1;
    return sandbox_destroy(b, probed, err) < 0 || sandbox_destroy(b, a_plain, err) < 0 ||
                   sandbox_destroy(b, a_every, err) < 0 || traj_remove(b, traj, err) < 0
               ? -1
               : 0;
}

/* ---- the run ---- */

static int measure(const char *url, struct bench *b, struct results *r, struct crl_err *err)
{
    cleanup_client struct crl_client *c = NULL;
    json_auto_t *h = NULL;
    if (crl_client_open(url, NULL, &c, err) < 0)
        return -1;
    b->c = c;
    int rc = crl_client_request(c, "GET", "/v1/host", NULL, &h, NULL, err);
    if (rc == 0) {
        snprintf(r->host_id, sizeof(r->host_id), "%s", crl_cli_str(h, "host_id", "?"));
        rc = overhead(b, r, err);
    }
    if (rc == 0)
        rc = fast_forward(b, r, err);
    if (rc == 0)
        rc = restore(b, r, err);
    if (rc == 0)
        rc = responsiveness(b, r, err);
    cleanup_all(b);
    b->c = NULL;
    return rc;
}

/* ---- the report ---- */

static void row(const char *what, const struct crl_bench_stats *s, bool with_rate)
{
    if (with_rate)
        printf("  %-56s %8.2f %8.2f %9.1f\n", what, s->p50, s->p99, s->rate);
    else
        printf("  %-56s %8.2f %8.2f\n", what, s->p50, s->p99);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : NAN;
}

static json_t *real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

/* b-a, c-a (p50 and p99) and c/a (p50) of a phase. */
static void overhead_line(const char *what, const struct crl_bench_stats *s)
{
    printf("  %s: none - plain %+.2f ms (p99 %+.2f), every-step - plain %+.2f ms (p99 %+.2f); "
           "every-step / plain %.2fx at p50\n",
           what, s[B_NONE].p50 - s[A_PLAIN].p50, s[B_NONE].p99 - s[A_PLAIN].p99,
           s[C_EVERY].p50 - s[A_PLAIN].p50, s[C_EVERY].p99 - s[A_PLAIN].p99,
           ratio(s[C_EVERY].p50, s[A_PLAIN].p50));
}

static json_t *overhead_json(const struct crl_bench_stats *s, const struct crl_bench_stats *proc,
                             const struct crl_bench_stats *ckpt)
{
    static const char *const names[N_KINDS] = {"plain", "none", "every_step"};
    json_t *j = json_object();
    for (int k = 0; k < N_KINDS; k++) {
        json_t *o = crl_bench_stats_json(&s[k], true);
        if (proc)
            json_object_set_new(o, "duration", crl_bench_stats_json(&proc[k], false));
        json_object_set_new(j, names[k], o);
    }
    json_object_set_new(j, "checkpoint", crl_bench_stats_json(ckpt, false));
    json_object_set_new(j, "none_minus_plain_p50_ms", json_real(s[B_NONE].p50 - s[A_PLAIN].p50));
    json_object_set_new(j, "every_step_minus_plain_p50_ms",
                        json_real(s[C_EVERY].p50 - s[A_PLAIN].p50));
    json_object_set_new(j, "none_minus_plain_p99_ms", json_real(s[B_NONE].p99 - s[A_PLAIN].p99));
    json_object_set_new(j, "every_step_minus_plain_p99_ms",
                        json_real(s[C_EVERY].p99 - s[A_PLAIN].p99));
    json_object_set_new(j, "ratio_every_step_vs_plain_p50",
                        real_or_null(ratio(s[C_EVERY].p50, s[A_PLAIN].p50)));
    return j;
}

static void report(struct results *r, const struct bench *b, const char *cmdline, const char *load0,
                   const char *load1, bool json_only)
{
    struct crl_bench_stats ex[N_KINDS], exp[N_KINDS], pu[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) {
        ex[k] = crl_bench_stats_of(&r->exec[k]);
        exp[k] = crl_bench_stats_of(&r->exec_proc[k]);
        pu[k] = crl_bench_stats_of(&r->put[k]);
    }
    struct crl_bench_stats exc = crl_bench_stats_of(&r->exec_ckpt),
                           puc = crl_bench_stats_of(&r->put_ckpt),
                           ffp = crl_bench_stats_of(&r->ff_plain),
                           ffr = crl_bench_stats_of(&r->ff_record),
                           ffy = crl_bench_stats_of(&r->ff_replay),
                           ffc = crl_bench_stats_of(&r->ff_resume_create),
                           rsc = crl_bench_stats_of(&r->rs_resume_create),
                           rsf = crl_bench_stats_of(&r->rs_forward),
                           rsl = crl_bench_stats_of(&r->rs_live),
                           rsr = crl_bench_stats_of(&r->rs_restore),
                           rse = crl_bench_stats_of(&r->rs_live_exec),
                           rsk = crl_bench_stats_of(&r->rs_live_ckpt),
                           rsp = crl_bench_stats_of(&r->rs_plain_exec),
                           rs1 = crl_bench_stats_of(&r->rs_first_exec),
                           rfk = crl_bench_stats_of(&r->rs_fork),
                           rfs = crl_bench_stats_of(&r->rs_fork_shallow),
                           rcr = crl_bench_stats_of(&r->rs_create),
                           rpk = crl_bench_stats_of(&r->rp_ckpt);
    struct crl_bench_stats rpb[N_WINDOWS], rpa[2], rpp[2];
    for (int w = 0; w < N_WINDOWS; w++)
        rpb[w] = crl_bench_stats_of(&r->rp_b[w]);
    for (int i = 0; i < 2; i++) {
        rpa[i] = crl_bench_stats_of(&r->rp_a[i]);
        rpp[i] = crl_bench_stats_of(&r->rp_a_proc[i]);
    }
    struct crl_bench_machine m;
    crl_bench_machine(&m);

    if (!json_only) {
        char what[128];
        printf("corral bench traj  %s  host %s (%s %s, %ld CPUs)  load %s -> %s  %zu iterations, "
               "image %s\n",
               m.date, r->host_id, m.u.sysname, m.u.release, m.cpus, load0, load1, b->n, b->image);
        printf("command: %s\n\n", cmdline);
        printf("  %-56s %8s %8s %9s\n", "", "p50 ms", "p99 ms", "per s");
        printf("  1. per-step overhead, interleaved\n");
        row("exec `" EXEC_CMD "`, no trajectory", &ex[A_PLAIN], true);
        row("  trajectory, checkpoint none", &ex[B_NONE], true);
        row("  trajectory, checkpoint every-step", &ex[C_EVERY], true);
        row("    of which the checkpoint (checkpoint_stats)", &exc, false);
        row("  the command itself, no trajectory (duration_s)", &exp[A_PLAIN], false);
        row("  the command itself, none", &exp[B_NONE], false);
        row("  the command itself, every-step", &exp[C_EVERY], false);
        snprintf(what, sizeof(what), "PUT %d bytes, no trajectory", FILE_BYTES);
        row(what, &pu[A_PLAIN], true);
        row("  trajectory, checkpoint none", &pu[B_NONE], true);
        row("  trajectory, checkpoint every-step", &pu[C_EVERY], true);
        row("    of which the checkpoint (checkpoint_stats)", &puc, false);
        snprintf(what, sizeof(what), "  2. fast-forward, %zu calls (execs and PUTs alternating)",
                 b->n);
        printf("%s\n", what);
        row("live, no trajectory", &ffp, true);
        row("live, recording (every-step)", &ffr, true);
        row("create, resuming the trajectory (once)", &ffc, false);
        row("replayed (steps/s: over the phase's wall time)", &ffy, true);
        printf("  3. restore, %zu times (a %d-step history, %.0f KiB of checkpoints)\n",
               r->restores, RESTORE_STEPS, (double)r->rs_ckpt_bytes / 1024);
        row("create, resuming the trajectory", &rsc, false);
        snprintf(what, sizeof(what), "%d replayed calls, in all", RESTORE_STEPS);
        row(what, &rsf, false);
        snprintf(what, sizeof(what), "call %d, live: restore + exec + checkpoint",
                 RESTORE_STEPS + 1);
        row(what, &rsl, false);
        row("  of which the restore (to the \"live\" event)", &rsr, false);
        row("  of which the exec (the step's duration_s)", &rse, false);
        row("  of which the checkpoint (checkpoint_stats)", &rsk, false);
        row("the same exec, plain sandbox in the same state", &rsp, false);
        row("first exec in a new plain sandbox (wc -l < /dev/null)", &rs1, false);
        snprintf(what, sizeof(what), "fork {\"step\": %d}", RESTORE_STEPS);
        row(what, &rfk, false);
        snprintf(what, sizeof(what), "fork {\"step\": %d}", FORK_SHALLOW);
        row(what, &rfs, false);
        row("plain create", &rcr, false);
        printf("  4. responsiveness: exec `true` in sandbox B while A steps, %d rounds\n",
               RESP_ROUNDS);
        snprintf(what, sizeof(what), "B, A idle (%d s a round)", RESP_IDLE_S);
        row(what, &rpb[W_IDLE], true);
        snprintf(what, sizeof(what), "B, A stepping with no trajectory (%d steps a round)",
                 RESP_STEPS);
        row(what, &rpb[W_PLAIN], true);
        row("B, A stepping, trajectory every-step", &rpb[W_EVERY], true);
        snprintf(what, sizeof(what), "A's step (a new %d MiB file), no trajectory",
                 BIG_BYTES >> 20);
        row(what, &rpa[0], true);
        row("A's step, every-step", &rpa[1], true);
        snprintf(what, sizeof(what), "  of which the checkpoint (%.1f MiB stored each)",
                 r->rp_stored_mib);
        row(what, &rpk, false);
        row("A's command itself, no trajectory (duration_s)", &rpp[0], false);
        row("A's command itself, every-step", &rpp[1], false);
        printf("\n");
        overhead_line("exec", ex);
        overhead_line("PUT", pu);
        printf("  fast-forward: %.0f steps/s replayed against %.0f/s live recording (%.1fx) and "
               "%.0f/s live with no trajectory (%.1fx)\n",
               ffy.rate, ffr.rate, ratio(ffy.rate, ffr.rate), ffp.rate, ratio(ffy.rate, ffp.rate));
        printf("  call %d (p50): %.2f ms against %.2f ms for the same exec in a plain sandbox "
               "(%.1fx, %+.2f ms) and %.2f ms for a new sandbox's first exec (%+.2f ms); the "
               "restore alone %.2f ms\n",
               RESTORE_STEPS + 1, rsl.p50, rsp.p50, ratio(rsl.p50, rsp.p50), rsl.p50 - rsp.p50,
               rs1.p50, rsl.p50 - rs1.p50, rsr.p50);
        printf("  fork from step %d (p50): %.2f ms against a create's %.2f ms (%.1fx, %+.2f ms); "
               "from step %d: %.2f ms (%+.2f ms)\n\n",
               RESTORE_STEPS, rfk.p50, rcr.p50, ratio(rfk.p50, rcr.p50), rfk.p50 - rcr.p50,
               FORK_SHALLOW, rfs.p50, rfs.p50 - rcr.p50);
        /* a checkpoint that held up corrald's loop would hold up one of
         * B's execs for as long: the max shows it where p99 might not */
        printf("  B's exec while A records every-step: p50 %.2f ms against %.2f with A idle "
               "(%.2fx), p99 %.2f against %.2f (%.2fx), max %.2f against %.2f; while A makes "
               "the same steps with no trajectory: p50 %.2f (%.2fx), p99 %.2f (%.2fx), max "
               "%.2f\n\n",
               rpb[W_EVERY].p50, rpb[W_IDLE].p50, ratio(rpb[W_EVERY].p50, rpb[W_IDLE].p50),
               rpb[W_EVERY].p99, rpb[W_IDLE].p99, ratio(rpb[W_EVERY].p99, rpb[W_IDLE].p99),
               rpb[W_EVERY].max, rpb[W_IDLE].max, rpb[W_PLAIN].p50,
               ratio(rpb[W_PLAIN].p50, rpb[W_IDLE].p50), rpb[W_PLAIN].p99,
               ratio(rpb[W_PLAIN].p99, rpb[W_IDLE].p99), rpb[W_PLAIN].max);
    }
    json_auto_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:I, s:s, s:s}", "bench", "corral traj",
                  "date", m.date, "host_id", r->host_id, "kernel", m.u.release, "cpus",
                  (json_int_t)m.cpus, "load_before", load0, "load_after", load1, "iterations",
                  (json_int_t)b->n, "image", b->image, "command", cmdline);
    json_object_set_new(j, "exec", overhead_json(ex, exp, &exc));
    json_object_set_new(j, "put_4k", overhead_json(pu, NULL, &puc));
    json_object_set_new(
        j, "fast_forward",
        json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "live_plain", crl_bench_stats_json(&ffp, true),
                  "live_recording", crl_bench_stats_json(&ffr, true), "resume_create",
                  crl_bench_stats_json(&ffc, false), "replayed", crl_bench_stats_json(&ffy, true),
                  "ratio_replayed_vs_recording", real_or_null(ratio(ffy.rate, ffr.rate)),
                  "ratio_replayed_vs_plain", real_or_null(ratio(ffy.rate, ffp.rate))));
    json_t *rs = json_pack(
        "{s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "steps",
        (json_int_t)RESTORE_STEPS, "runs", (json_int_t)r->restores, "checkpoint_bytes",
        (json_int_t)r->rs_ckpt_bytes, "resume_create", crl_bench_stats_json(&rsc, false),
        "forward_all", crl_bench_stats_json(&rsf, false), "live_call",
        crl_bench_stats_json(&rsl, false), "restore", crl_bench_stats_json(&rsr, false),
        "live_exec", crl_bench_stats_json(&rse, false), "live_checkpoint",
        crl_bench_stats_json(&rsk, false), "plain_exec", crl_bench_stats_json(&rsp, false), "fork",
        crl_bench_stats_json(&rfk, false), "create", crl_bench_stats_json(&rcr, false));
    json_object_set_new(rs, "first_exec_new_sandbox", crl_bench_stats_json(&rs1, false));
    json_object_set_new(rs, "fork_shallow_step", json_integer(FORK_SHALLOW));
    json_object_set_new(rs, "fork_shallow", crl_bench_stats_json(&rfs, false));
    json_object_set_new(rs, "ratio_live_call_vs_plain_exec_p50",
                        real_or_null(ratio(rsl.p50, rsp.p50)));
    json_object_set_new(rs, "ratio_fork_vs_create_p50", real_or_null(ratio(rfk.p50, rcr.p50)));
    json_object_set_new(j, "restore", rs);
    json_t *rp =
        json_pack("{s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:f}", "file_bytes",
                  (json_int_t)BIG_BYTES, "rounds", (json_int_t)RESP_ROUNDS, "steps_per_round",
                  (json_int_t)RESP_STEPS, "idle_s_per_round", (json_int_t)RESP_IDLE_S, "b_a_idle",
                  crl_bench_stats_json(&rpb[W_IDLE], true), "b_a_plain",
                  crl_bench_stats_json(&rpb[W_PLAIN], true), "b_a_every_step",
                  crl_bench_stats_json(&rpb[W_EVERY], true), "a_step_plain",
                  crl_bench_stats_json(&rpa[0], true), "a_step_every_step",
                  crl_bench_stats_json(&rpa[1], true), "a_checkpoint",
                  crl_bench_stats_json(&rpk, false), "a_checkpoint_mib_stored", r->rp_stored_mib);
    static const char *const b_keys[N_WINDOWS] = {"b_a_idle", "b_a_plain", "b_a_every_step"};
    for (int w = 0; w < N_WINDOWS; w++)
        json_object_set_new(json_object_get(rp, b_keys[w]), "max_ms", json_real(rpb[w].max));
    json_object_set_new(json_object_get(rp, "a_step_plain"), "duration",
                        crl_bench_stats_json(&rpp[0], false));
    json_object_set_new(json_object_get(rp, "a_step_every_step"), "duration",
                        crl_bench_stats_json(&rpp[1], false));
    json_object_set_new(rp, "ratio_every_step_vs_idle_p50",
                        real_or_null(ratio(rpb[W_EVERY].p50, rpb[W_IDLE].p50)));
    json_object_set_new(rp, "ratio_every_step_vs_idle_p99",
                        real_or_null(ratio(rpb[W_EVERY].p99, rpb[W_IDLE].p99)));
    json_object_set_new(rp, "ratio_plain_vs_idle_p50",
                        real_or_null(ratio(rpb[W_PLAIN].p50, rpb[W_IDLE].p50)));
    json_object_set_new(rp, "ratio_plain_vs_idle_p99",
                        real_or_null(ratio(rpb[W_PLAIN].p99, rpb[W_IDLE].p99)));
    json_object_set_new(j, "responsiveness", rp);
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (line)
        printf("%s\n", line);
    free(line);
}

int crl_bench_traj(int argc, char **argv)
{
    enum { OPT_START = CRL_CLI_OPT_OTHER, OPT_ITER, OPT_IMAGE, OPT_JSON };
    static const struct option opts[] = {{"start-daemon", no_argument, 0, OPT_START},
                                         {"iterations", required_argument, 0, OPT_ITER},
                                         {"image", required_argument, 0, OPT_IMAGE},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool start = false, json_only = false;
    long long iterations = DEFAULT_ITERATIONS;
    const char *image = DEFAULT_IMAGE;
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
        case OPT_IMAGE:
            if (!crl_client_image_name_ok(optarg))
                return crl_cli_usage(argv[0], "--image: '%s' is not an image name", optarg);
            image = optarg;
            break;
        case OPT_JSON: json_only = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (start && geteuid() != 0)
        return crl_cli_failf("bench traj: --start-daemon needs root (corrald does)");

    /* The command line, for the report: "corral bench traj ..." */
    char cmdline[512];
    int off = snprintf(cmdline, sizeof(cmdline), "corral %s", argv[0]);
    for (int i = 1; i < argc && off > 0 && (size_t)off < sizeof(cmdline); i++)
        off += snprintf(cmdline + off, sizeof(cmdline) - (size_t)off, " %s", argv[i]);

    struct bench b = {.image = image, .n = (size_t)iterations, .quiet = json_only};
    b.warm = b.n / 10 > 5 ? b.n / 10 : 5;
    b.rnd = crl_now_ns() | 1;
    /* Trajectory ids of this run alone: on a shared corrald, never another's. */
    snprintf(b.tag, sizeof(b.tag), "bench-traj-%d-%llx", (int)getpid(),
             (unsigned long long)time(NULL));
    struct results r = {.restores = b.n / 10 > 5 ? b.n / 10 : 5};

    crl_cli_catch_signals(NULL);
    struct crl_bench_daemon d = {0};
    const char *url;
    int brc = crl_bench_begin(start, &d, &url, "bench traj");
    if (brc)
        return brc;
    char load0[64], load1[64];
    crl_bench_loadavg(load0, sizeof(load0));
    b.url = url;
    int rc = measure(url, &b, &r, &err);
    crl_bench_loadavg(load1, sizeof(load1));
    crl_bench_end(start, &d, rc, "bench traj");
    if (rc == 0)
        report(&r, &b, cmdline, load0, load1, json_only);
    results_free(&r);
    if (rc < 0) {
        if (crl_cli_interrupted)
            return 128 + crl_cli_interrupted;
        crl_err_prefix(&err, "bench traj");
        return crl_cli_fail(&err);
    }
    return 0;
}
