/* corral bench traj's four phases (traj.c has the command): each makes
 * its sandboxes and trajectories, measures into b->r, and removes them;
 * what an error leaves, traj.c removes on the way out. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "traj.h"

static const char *const kind_mode[N_KINDS] = {NULL, "none", "every-step"};

/* ---- 1. per-step overhead ---- */

/* The checkpoint times of the measured steps of `kind` (past the first
 * `skip` of that kind) of trajectory `traj`. */
static int ckpt_times(struct crl_bench_traj *b, const char *traj, const char *kind, size_t skip,
                      struct crl_bench_samples *out, struct crl_err *err)
{
    json_auto_t *t = NULL;
    if (crl_bench_traj_get(b, traj, &t, err) < 0 || crl_bench_samples_alloc(out, b->n, err) < 0)
        return -1;
    size_t seen = 0, i;
    json_t *step;
    json_array_foreach(json_object_get(t, "steps"), i, step)
    {
        if (strcmp(crl_cli_str(step, "kind", ""), kind) != 0 || seen++ < skip)
            continue;
        double ms = crl_bench_traj_ckpt_ms(step);
        if (!isnan(ms) && out->n < b->n)
            crl_bench_samples_add(out, ms);
    }
    return 0;
}

int crl_bench_traj_overhead(struct crl_bench_traj *b, struct crl_err *err)
{
    struct crl_bench_traj_results *r = &b->r;
    char ids[N_KINDS][CRL_BENCH_ID_MAX] = {"", "", ""}, trajs[N_KINDS][TRAJ_ID_MAX] = {"", "", ""};
    json_auto_t *req = json_pack("{s:s}", "cmd", EXEC_CMD);
    char data[FILE_BYTES];
    for (int k = 0; k < N_KINDS; k++) {
        if (kind_mode[k])
            crl_bench_traj_name(b, kind_mode[k], trajs[k]);
        if (crl_bench_traj_sandbox(b, kind_mode[k] ? trajs[k] : NULL, kind_mode[k], SANDBOX_MB,
                                   ids[k], NULL, err) < 0 ||
            crl_bench_samples_alloc(&r->exec[k], b->n, err) < 0 ||
            crl_bench_samples_alloc(&r->exec_proc[k], b->n, err) < 0 ||
            crl_bench_samples_alloc(&r->put[k], b->n, err) < 0)
            return -1;
    }
    /* Each iteration calls all three, which goes first rotating, so that
     * drift in the machine's load hits them alike. */
    crl_bench_step(b->run,
                   "exec `%s`: no trajectory, checkpoint none, every-step, interleaved (%zu each)",
                   EXEC_CMD, b->n);
    for (size_t i = 0; i < b->warm + b->n; i++)
        for (int j = 0; j < N_KINDS; j++) {
            int k = (int)((i + (size_t)j) % N_KINDS);
            double ms;
            json_auto_t *res = NULL;
            if (crl_bench_traj_exec(b->c, ids[k], req, kind_mode[k] ? 0 : -1, &ms, &res, err) < 0)
                return -1;
            if (i < b->warm)
                continue;
            crl_bench_samples_add(&r->exec[k], ms);
            crl_bench_samples_add(&r->exec_proc[k],
                                  json_number_value(json_object_get(res, "duration_s")) * 1e3);
        }
    crl_bench_step(b->run, "PUT %d bytes of %s: the same three, interleaved (%zu each)", FILE_BYTES,
                   PUT_PATH, b->n);
    for (size_t i = 0; i < b->warm + b->n; i++)
        for (int j = 0; j < N_KINDS; j++) {
            int k = (int)((i + (size_t)j) % N_KINDS);
            double ms;
            crl_bench_traj_fill(data, sizeof(data), crl_bench_traj_rnd(&b->rnd));
            if (crl_bench_traj_put(b, ids[k], PUT_PATH, data, sizeof(data), kind_mode[k] ? 0 : -1,
                                   &ms, err) < 0)
                return -1;
            if (i >= b->warm)
                crl_bench_samples_add(&r->put[k], ms);
        }
    if (ckpt_times(b, trajs[C_EVERY], "exec", b->warm, &r->exec_ckpt, err) < 0 ||
        ckpt_times(b, trajs[C_EVERY], "file_write", b->warm, &r->put_ckpt, err) < 0)
        return -1;
    for (int k = 0; k < N_KINDS; k++)
        if (crl_bench_sandbox_destroy(&b->sbs, ids[k], err) < 0 ||
            (trajs[k][0] && crl_bench_traj_remove(b, trajs[k], err) < 0))
            return -1;
    return 0;
}

/* ---- 2. fast-forward ---- */

/* Call i of the mixed sequence: an exec (even i) that appends to a log and
 * prints its length, or a PUT (odd i) of 4 KiB that depend on i alone, so
 * that the resumed client sends the same bytes. */
static int mixed_call(struct crl_bench_traj *b, const char *id, size_t i, int replayed, double *ms,
                      char **stdout_out, struct crl_err *err)
{
    if (i % 2 == 0) {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "echo %zu >> /root/ff.log; wc -l < /root/ff.log", i);
        json_auto_t *req = json_pack("{s:s}", "cmd", cmd);
        json_auto_t *res = NULL;
        if (crl_bench_traj_exec(b->c, id, req, replayed, ms, &res, err) < 0)
            return -1;
        if (stdout_out) {
            free(*stdout_out);
            *stdout_out = strdup(crl_cli_str(res, "stdout", ""));
        }
        return 0;
    }
    char path[64], data[FILE_BYTES];
    snprintf(path, sizeof(path), "/root/ff/f-%zu", i % 16);
    crl_bench_traj_fill(data, sizeof(data), i);
    return crl_bench_traj_put(b, id, path, data, sizeof(data), replayed, ms, err);
}

int crl_bench_traj_fast_forward(struct crl_bench_traj *b, struct crl_err *err)
{
    struct crl_bench_traj_results *r = &b->r;
    char rec[CRL_BENCH_ID_MAX] = "", plain[CRL_BENCH_ID_MAX] = "", traj[TRAJ_ID_MAX];
    size_t n = b->n;
    cleanup_free char **outs = calloc(n, sizeof(char *));
    int rc = -1;
    if (!outs)
        return crl_err_sys(err, ENOMEM, "allocating");
    crl_bench_traj_name(b, "ff", traj);
    if (crl_bench_samples_alloc(&r->ff_plain, n, err) < 0 ||
        crl_bench_samples_alloc(&r->ff_record, n, err) < 0 ||
        crl_bench_samples_alloc(&r->ff_replay, n, err) < 0 ||
        crl_bench_samples_alloc(&r->ff_resume_create, 1, err) < 0 ||
        crl_bench_traj_sandbox(b, traj, "every-step", SANDBOX_MB, rec, NULL, err) < 0 ||
        crl_bench_traj_sandbox(b, NULL, NULL, SANDBOX_MB, plain, NULL, err) < 0)
        goto out;
    crl_bench_step(b->run,
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
        crl_bench_samples_add(&r->ff_record, ms_rec);
        crl_bench_samples_add(&r->ff_plain, ms_plain);
    }
    if (crl_bench_sandbox_destroy(&b->sbs, rec, err) < 0 ||
        crl_bench_sandbox_destroy(&b->sbs, plain, err) < 0)
        goto out;
    crl_bench_step(b->run, "fast-forward: a new sandbox resumes %s and gets the same %zu calls",
                   traj, n);
    double ms;
    if (crl_bench_traj_sandbox(b, traj, "every-step", SANDBOX_MB, rec, &ms, err) < 0)
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
    rc = crl_bench_sandbox_destroy(&b->sbs, rec, err) < 0 || crl_bench_traj_remove(b, traj, err) < 0
             ? -1
             : 0;
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
    char sandbox[CRL_BENCH_ID_MAX];
    double sent_at; /* wall clock, seconds: when the 51st call went out */
};

/* From the trajectory's record: the restore of each run (its sandbox's
 * "live" event less the time its 51st call was sent), and that call's
 * step: the exec (duration_s) and its checkpoint. */
static int restore_split(struct crl_bench_traj *b, const char *traj, const struct restore_run *runs,
                         size_t n, struct crl_bench_traj_results *r, struct crl_err *err)
{
    json_auto_t *t = NULL;
    if (crl_bench_traj_get(b, traj, &t, err) < 0)
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
                crl_bench_samples_add(&r->rs_live_exec,
                                      json_number_value(json_object_get(e, "duration_s")) * 1e3);
                crl_bench_samples_add(&r->rs_live_ckpt, crl_bench_traj_ckpt_ms(e));
            }
    }
    json_array_foreach(json_object_get(t, "events"), i, e)
    {
        if (strcmp(crl_cli_str(e, "event", ""), "live") != 0)
            continue;
        for (size_t k = 0; k < n; k++)
            if (strcmp(crl_cli_str(e, "sandbox", ""), runs[k].sandbox) == 0)
                crl_bench_samples_add(
                    &r->rs_restore,
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
static int fork_step(struct crl_bench_traj *b, const char *id, int step,
                     struct crl_bench_samples *out, struct crl_err *err)
{
    char path[128], fork_id[CRL_BENCH_ID_MAX], want[32];
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
    crl_bench_samples_add(out, crl_bench_ms_since(t0));
    snprintf(fork_id, sizeof(fork_id), "%s", crl_cli_str(fk, "id", ""));
    if (crl_bench_sandbox_track(&b->sbs, fork_id, err) < 0)
        return -1;
    snprintf(want, sizeof(want), "%d\n%d\n", step, step + 1);
    if (crl_bench_traj_exec(b->c, fork_id, wc, -1, &ms, &res, err) < 0)
        return -1;
    if (strcmp(crl_cli_str(res, "stdout", ""), want) != 0)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "a fork from step %d has '%s' for the log's lines and files", step,
                           crl_cli_str(res, "stdout", ""));
    return crl_bench_sandbox_destroy(&b->sbs, fork_id, err);
}

int crl_bench_traj_restore(struct crl_bench_traj *b, struct crl_err *err)
{
    struct crl_bench_traj_results *r = &b->r;
    char rec[CRL_BENCH_ID_MAX] = "", plain[CRL_BENCH_ID_MAX] = "", sb[CRL_BENCH_ID_MAX] = "",
         traj[TRAJ_ID_MAX];
    size_t n = r->restores;
    cleanup_free struct restore_run *runs = calloc(n, sizeof(*runs));
    if (!runs)
        return crl_err_sys(err, ENOMEM, "allocating");
    crl_bench_traj_name(b, "restore", traj);
    struct crl_bench_samples *all[] = {&r->rs_resume_create, &r->rs_forward,    &r->rs_live,
                                       &r->rs_plain_exec,    &r->rs_first_exec, &r->rs_fork,
                                       &r->rs_fork_shallow,  &r->rs_create};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(all); i++)
        if (crl_bench_samples_alloc(all[i], n, err) < 0)
            return -1;
    crl_bench_step(b->run,
                   "restore: a %d-step history, recorded (every-step) and in a plain sandbox",
                   RESTORE_STEPS);
    if (crl_bench_traj_sandbox(b, traj, "every-step", SANDBOX_MB, rec, NULL, err) < 0 ||
        crl_bench_traj_sandbox(b, NULL, NULL, SANDBOX_MB, plain, NULL, err) < 0)
        return -1;
    for (size_t k = 1; k <= RESTORE_STEPS; k++) {
        json_auto_t *req = history_req(k);
        double ms;
        if (crl_bench_traj_exec(b->c, rec, req, 0, &ms, NULL, err) < 0 ||
            crl_bench_traj_exec(b->c, plain, req, -1, &ms, NULL, err) < 0)
            return -1;
    }
    if (crl_bench_sandbox_destroy(&b->sbs, rec, err) < 0)
        return -1;
    crl_bench_step(b->run,
                   "restore: %zu times resume, %d replayed, a 51st call live; the same call in the "
                   "plain sandbox; forks from steps %d and %d, and a plain create",
                   n, RESTORE_STEPS, RESTORE_STEPS, FORK_SHALLOW);
    for (size_t k = 0; k < n; k++) {
        double ms;
        if (crl_bench_traj_sandbox(b, traj, "every-step", SANDBOX_MB, sb, &ms, err) < 0)
            return -1;
        crl_bench_samples_add(&r->rs_resume_create, ms);
        unsigned long long t0 = crl_now_ns();
        for (size_t s = 1; s <= RESTORE_STEPS; s++) {
            json_auto_t *req = history_req(s);
            if (crl_bench_traj_exec(b->c, sb, req, 1, &ms, NULL, err) < 0)
                return -1;
        }
        crl_bench_samples_add(&r->rs_forward, crl_bench_ms_since(t0));
        json_auto_t *probe = probe_req(k);
        /* the 51st call and the plain exec, which goes first alternating */
        for (int j = 0; j < 2; j++) {
            json_auto_t *res = NULL;
            if ((j == 0) == (k % 2 == 0)) {
                snprintf(runs[k].sandbox, sizeof(runs[k].sandbox), "%s", sb);
                runs[k].sent_at = crl_wall_s();
                if (crl_bench_traj_exec(b->c, sb, probe, 0, &ms, &res, err) < 0)
                    return -1;
                crl_bench_samples_add(&r->rs_live, ms);
            } else {
                if (crl_bench_traj_exec(b->c, plain, probe, -1, &ms, &res, err) < 0)
                    return -1;
                crl_bench_samples_add(&r->rs_plain_exec, ms);
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
            char other[CRL_BENCH_ID_MAX];
            json_auto_t *first = first_req(k);
            if (crl_bench_traj_sandbox(b, NULL, NULL, SANDBOX_MB, other, &ms, err) < 0)
                return -1;
            crl_bench_samples_add(&r->rs_create, ms);
            if (crl_bench_traj_exec(b->c, other, first, -1, &ms, NULL, err) < 0)
                return -1;
            crl_bench_samples_add(&r->rs_first_exec, ms);
            if (crl_bench_sandbox_destroy(&b->sbs, other, err) < 0)
                return -1;
        }
        if (crl_bench_sandbox_destroy(&b->sbs, sb, err) < 0)
            return -1;
    }
    if (restore_split(b, traj, runs, n, r, err) < 0)
        return -1;
    return crl_bench_sandbox_destroy(&b->sbs, plain, err) < 0 ||
                   crl_bench_traj_remove(b, traj, err) < 0
               ? -1
               : 0;
}

/* ---- 4. responsiveness ---- */

/* Execs of `true` in sandbox B, back to back, until told to stop. */
struct prober {
    struct crl_client *c; /* its own */
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
        if (crl_bench_traj_exec(pr->c, pr->sandbox, req, -1, &ms, NULL, &pr->err) < 0) {
            pr->rc = -1;
            break;
        }
        crl_bench_samples_add(pr->into, ms);
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
static int window(struct crl_bench_traj *b, struct crl_client *pc, const char *sb_b,
                  const struct stepper *a, size_t *k, struct crl_bench_samples *b_into,
                  struct crl_err *err)
{
    struct prober pr = {.c = pc, .sandbox = sb_b, .into = b_into};
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
        if ((rc = crl_bench_traj_exec(b->c, a->id, req, a->replayed, &ms, &res, err)) < 0)
            break;
        crl_bench_samples_add(a->lat, ms);
        crl_bench_samples_add(a->proc, json_number_value(json_object_get(res, "duration_s")) * 1e3);
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
static int resp_ckpts(struct crl_bench_traj *b, const char *traj, struct crl_bench_traj_results *r,
                      struct crl_err *err)
{
    json_auto_t *t = NULL;
    if (crl_bench_traj_get(b, traj, &t, err) < 0 ||
        crl_bench_samples_alloc(&r->rp_ckpt, RESP_ROUNDS * RESP_STEPS, err) < 0)
        return -1;
    double stored = 0;
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(t, "steps"), i, step)
    {
        double ms = crl_bench_traj_ckpt_ms(step);
        if (isnan(ms) || r->rp_ckpt.n == RESP_ROUNDS * RESP_STEPS)
            continue;
        crl_bench_samples_add(&r->rp_ckpt, ms);
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

int crl_bench_traj_responsiveness(struct crl_bench_traj *b, struct crl_err *err)
{
    struct crl_bench_traj_results *r = &b->r;
    char probed[CRL_BENCH_ID_MAX] = "", a_plain[CRL_BENCH_ID_MAX] = "",
         a_every[CRL_BENCH_ID_MAX] = "", traj[TRAJ_ID_MAX];
    cleanup_client struct crl_client *pc = NULL;
    if (crl_client_open(b->run->url, NULL, &pc, err) < 0)
        return -1;
    crl_bench_traj_name(b, "resp", traj);
    for (int w = 0; w < N_WINDOWS; w++)
        if (crl_bench_samples_alloc(&r->rp_b[w], RESP_MAX_SAMPLES, err) < 0)
            return -1;
    for (int i = 0; i < 2; i++)
        if (crl_bench_samples_alloc(&r->rp_a[i], RESP_ROUNDS * RESP_STEPS, err) < 0 ||
            crl_bench_samples_alloc(&r->rp_a_proc[i], RESP_ROUNDS * RESP_STEPS, err) < 0)
            return -1;
    if (crl_bench_traj_sandbox(b, NULL, NULL, SANDBOX_MB, probed, NULL, err) < 0 ||
        crl_bench_traj_sandbox(b, NULL, NULL, RESP_MEMORY_MB, a_plain, NULL, err) < 0 ||
        crl_bench_traj_sandbox(b, traj, "every-step", RESP_MEMORY_MB, a_every, NULL, err) < 0)
        return -1;
    /* B's warm-up, on the prober's client */
    json_auto_t *t = json_pack("{s:s}", "cmd", "true");
    for (size_t i = 0; i < b->warm; i++) {
        double ms;
        if (crl_bench_traj_exec(pc, probed, t, -1, &ms, NULL, err) < 0)
            return -1;
    }
    crl_bench_step(
        b->run,
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
    return crl_bench_sandbox_destroy(&b->sbs, probed, err) < 0 ||
                   crl_bench_sandbox_destroy(&b->sbs, a_plain, err) < 0 ||
                   crl_bench_sandbox_destroy(&b->sbs, a_every, err) < 0 ||
                   crl_bench_traj_remove(b, traj, err) < 0
               ? -1
               : 0;
}
