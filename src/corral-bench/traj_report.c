/* corral bench traj's report: a table by phase, lines of differences and
 * ratios, and the JSON line. */
#include <stdio.h>

#include "../../lib/util/cleanup.h"
#include "report.h"
#include "traj.h"

static const struct crl_bench_table table = {.label = 56, .prec = 2, .rate = 9};

/* Every figure's statistics. */
struct figures {
    struct crl_bench_stats ex[N_KINDS], exp[N_KINDS], pu[N_KINDS], exc, puc;      /* 1 */
    struct crl_bench_stats ffp, ffr, ffy, ffc;                                    /* 2 */
    struct crl_bench_stats rsc, rsf, rsl, rsr, rse, rsk, rsp, rs1, rfk, rfs, rcr; /* 3 */
    struct crl_bench_stats rpb[N_WINDOWS], rpa[2], rpp[2], rpk;                   /* 4 */
};

static void figures_of(struct crl_bench_traj_results *r, struct figures *f)
{
    for (int k = 0; k < N_KINDS; k++) {
        f->ex[k] = crl_bench_stats_of(&r->exec[k]);
        f->exp[k] = crl_bench_stats_of(&r->exec_proc[k]);
        f->pu[k] = crl_bench_stats_of(&r->put[k]);
    }
    f->exc = crl_bench_stats_of(&r->exec_ckpt);
    f->puc = crl_bench_stats_of(&r->put_ckpt);
    f->ffp = crl_bench_stats_of(&r->ff_plain);
    f->ffr = crl_bench_stats_of(&r->ff_record);
    f->ffy = crl_bench_stats_of(&r->ff_replay);
    f->ffc = crl_bench_stats_of(&r->ff_resume_create);
    f->rsc = crl_bench_stats_of(&r->rs_resume_create);
    f->rsf = crl_bench_stats_of(&r->rs_forward);
    f->rsl = crl_bench_stats_of(&r->rs_live);
    f->rsr = crl_bench_stats_of(&r->rs_restore);
    f->rse = crl_bench_stats_of(&r->rs_live_exec);
    f->rsk = crl_bench_stats_of(&r->rs_live_ckpt);
    f->rsp = crl_bench_stats_of(&r->rs_plain_exec);
    f->rs1 = crl_bench_stats_of(&r->rs_first_exec);
    f->rfk = crl_bench_stats_of(&r->rs_fork);
    f->rfs = crl_bench_stats_of(&r->rs_fork_shallow);
    f->rcr = crl_bench_stats_of(&r->rs_create);
    for (int w = 0; w < N_WINDOWS; w++)
        f->rpb[w] = crl_bench_stats_of(&r->rp_b[w]);
    for (int i = 0; i < 2; i++) {
        f->rpa[i] = crl_bench_stats_of(&r->rp_a[i]);
        f->rpp[i] = crl_bench_stats_of(&r->rp_a_proc[i]);
    }
    f->rpk = crl_bench_stats_of(&r->rp_ckpt);
}

static void row(const char *what, const struct crl_bench_stats *s, bool with_rate)
{
    crl_bench_table_row(&table, what, s, with_rate);
}

/* 1 and 2: the steps, and their fast-forward. */
static void print_steps(const struct crl_bench_traj *b, const struct figures *f)
{
    char what[128];
    printf("  1. per-step overhead, interleaved\n");
    row("exec `" EXEC_CMD "`, no trajectory", &f->ex[A_PLAIN], true);
    row("  trajectory, checkpoint none", &f->ex[B_NONE], true);
    row("  trajectory, checkpoint every-step", &f->ex[C_EVERY], true);
    row("    of which the checkpoint (checkpoint_stats)", &f->exc, false);
    row("  the command itself, no trajectory (duration_s)", &f->exp[A_PLAIN], false);
    row("  the command itself, none", &f->exp[B_NONE], false);
    row("  the command itself, every-step", &f->exp[C_EVERY], false);
    snprintf(what, sizeof(what), "PUT %d bytes, no trajectory", FILE_BYTES);
    row(what, &f->pu[A_PLAIN], true);
    row("  trajectory, checkpoint none", &f->pu[B_NONE], true);
    row("  trajectory, checkpoint every-step", &f->pu[C_EVERY], true);
    row("    of which the checkpoint (checkpoint_stats)", &f->puc, false);
    printf("  2. fast-forward, %zu calls (execs and PUTs alternating)\n", b->n);
    row("live, no trajectory", &f->ffp, true);
    row("live, recording (every-step)", &f->ffr, true);
    row("create, resuming the trajectory (once)", &f->ffc, false);
    row("replayed (steps/s: over the phase's wall time)", &f->ffy, true);
}

/* 3: restore. */
static void print_restore(const struct crl_bench_traj_results *r, const struct figures *f)
{
    char what[128];
    printf("  3. restore, %zu times (a %d-step history, %.0f KiB of checkpoints)\n", r->restores,
           RESTORE_STEPS, (double)r->rs_ckpt_bytes / 1024);
    row("create, resuming the trajectory", &f->rsc, false);
    snprintf(what, sizeof(what), "%d replayed calls, in all", RESTORE_STEPS);
    row(what, &f->rsf, false);
    snprintf(what, sizeof(what), "call %d, live: restore + exec + checkpoint", RESTORE_STEPS + 1);
    row(what, &f->rsl, false);
    row("  of which the restore (to the \"live\" event)", &f->rsr, false);
    row("  of which the exec (the step's duration_s)", &f->rse, false);
    row("  of which the checkpoint (checkpoint_stats)", &f->rsk, false);
    row("the same exec, plain sandbox in the same state", &f->rsp, false);
    row("first exec in a new plain sandbox (wc -l < /dev/null)", &f->rs1, false);
    snprintf(what, sizeof(what), "fork {\"step\": %d}", RESTORE_STEPS);
    row(what, &f->rfk, false);
    snprintf(what, sizeof(what), "fork {\"step\": %d}", FORK_SHALLOW);
    row(what, &f->rfs, false);
    row("plain create", &f->rcr, false);
}

/* 4: responsiveness. */
static void print_responsiveness(const struct crl_bench_traj_results *r, const struct figures *f)
{
    char what[128];
    printf("  4. responsiveness: exec `true` in sandbox B while A steps, %d rounds\n", RESP_ROUNDS);
    snprintf(what, sizeof(what), "B, A idle (%d s a round)", RESP_IDLE_S);
    row(what, &f->rpb[W_IDLE], true);
    snprintf(what, sizeof(what), "B, A stepping with no trajectory (%d steps a round)", RESP_STEPS);
    row(what, &f->rpb[W_PLAIN], true);
    row("B, A stepping, trajectory every-step", &f->rpb[W_EVERY], true);
    snprintf(what, sizeof(what), "A's step (a new %d MiB file), no trajectory", BIG_BYTES >> 20);
    row(what, &f->rpa[0], true);
    row("A's step, every-step", &f->rpa[1], true);
    snprintf(what, sizeof(what), "  of which the checkpoint (%.1f MiB stored each)",
             r->rp_stored_mib);
    row(what, &f->rpk, false);
    row("A's command itself, no trajectory (duration_s)", &f->rpp[0], false);
    row("A's command itself, every-step", &f->rpp[1], false);
    printf("\n");
}

/* b-a, c-a (p50 and p99) and c/a (p50) of a phase. */
static void overhead_line(const char *what, const struct crl_bench_stats *s)
{
    printf("  %s: none - plain %+.2f ms (p99 %+.2f), every-step - plain %+.2f ms (p99 %+.2f); "
           "every-step / plain %.2fx at p50\n",
           what, s[B_NONE].p50 - s[A_PLAIN].p50, s[B_NONE].p99 - s[A_PLAIN].p99,
           s[C_EVERY].p50 - s[A_PLAIN].p50, s[C_EVERY].p99 - s[A_PLAIN].p99,
           crl_bench_ratio(s[C_EVERY].p50, s[A_PLAIN].p50));
}

static void print_lines(const struct figures *f)
{
    const struct crl_bench_stats *idle = &f->rpb[W_IDLE], *plain = &f->rpb[W_PLAIN],
                                 *every = &f->rpb[W_EVERY];
    overhead_line("exec", f->ex);
    overhead_line("PUT", f->pu);
    printf("  fast-forward: %.0f steps/s replayed against %.0f/s live recording (%.1fx) and "
           "%.0f/s live with no trajectory (%.1fx)\n",
           f->ffy.rate, f->ffr.rate, crl_bench_ratio(f->ffy.rate, f->ffr.rate), f->ffp.rate,
           crl_bench_ratio(f->ffy.rate, f->ffp.rate));
    printf("  call %d (p50): %.2f ms against %.2f ms for the same exec in a plain sandbox "
           "(%.1fx, %+.2f ms) and %.2f ms for a new sandbox's first exec (%+.2f ms); the "
           "restore alone %.2f ms\n",
           RESTORE_STEPS + 1, f->rsl.p50, f->rsp.p50, crl_bench_ratio(f->rsl.p50, f->rsp.p50),
           f->rsl.p50 - f->rsp.p50, f->rs1.p50, f->rsl.p50 - f->rs1.p50, f->rsr.p50);
    printf("  fork from step %d (p50): %.2f ms against a create's %.2f ms (%.1fx, %+.2f ms); "
           "from step %d: %.2f ms (%+.2f ms)\n\n",
           RESTORE_STEPS, f->rfk.p50, f->rcr.p50, crl_bench_ratio(f->rfk.p50, f->rcr.p50),
           f->rfk.p50 - f->rcr.p50, FORK_SHALLOW, f->rfs.p50, f->rfs.p50 - f->rcr.p50);
    /* a checkpoint that held up corrald's loop would hold up one of B's
     * execs for as long: the max shows it where p99 might not */
    printf("  B's exec while A records every-step: p50 %.2f ms against %.2f with A idle "
           "(%.2fx), p99 %.2f against %.2f (%.2fx), max %.2f against %.2f; while A makes "
           "the same steps with no trajectory: p50 %.2f (%.2fx), p99 %.2f (%.2fx), max "
           "%.2f\n\n",
           every->p50, idle->p50, crl_bench_ratio(every->p50, idle->p50), every->p99, idle->p99,
           crl_bench_ratio(every->p99, idle->p99), every->max, idle->max, plain->p50,
           crl_bench_ratio(plain->p50, idle->p50), plain->p99,
           crl_bench_ratio(plain->p99, idle->p99), plain->max);
}

/* ---- the JSON line ---- */

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
    crl_bench_json_ratio(j, "ratio_every_step_vs_plain_p50", s[C_EVERY].p50, s[A_PLAIN].p50);
    return j;
}

static json_t *fast_forward_json(const struct figures *f)
{
    return json_pack(
        "{s:o, s:o, s:o, s:o, s:o, s:o}", "live_plain", crl_bench_stats_json(&f->ffp, true),
        "live_recording", crl_bench_stats_json(&f->ffr, true), "resume_create",
        crl_bench_stats_json(&f->ffc, false), "replayed", crl_bench_stats_json(&f->ffy, true),
        "ratio_replayed_vs_recording",
        crl_bench_json_real(crl_bench_ratio(f->ffy.rate, f->ffr.rate)), "ratio_replayed_vs_plain",
        crl_bench_json_real(crl_bench_ratio(f->ffy.rate, f->ffp.rate)));
}

static json_t *restore_json(const struct crl_bench_traj_results *r, const struct figures *f)
{
    json_t *rs = json_pack(
        "{s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "steps",
        (json_int_t)RESTORE_STEPS, "runs", (json_int_t)r->restores, "checkpoint_bytes",
        (json_int_t)r->rs_ckpt_bytes, "resume_create", crl_bench_stats_json(&f->rsc, false),
        "forward_all", crl_bench_stats_json(&f->rsf, false), "live_call",
        crl_bench_stats_json(&f->rsl, false), "restore", crl_bench_stats_json(&f->rsr, false),
        "live_exec", crl_bench_stats_json(&f->rse, false), "live_checkpoint",
        crl_bench_stats_json(&f->rsk, false), "plain_exec", crl_bench_stats_json(&f->rsp, false),
        "fork", crl_bench_stats_json(&f->rfk, false), "create",
        crl_bench_stats_json(&f->rcr, false));
    json_object_set_new(rs, "first_exec_new_sandbox", crl_bench_stats_json(&f->rs1, false));
    json_object_set_new(rs, "fork_shallow_step", json_integer(FORK_SHALLOW));
    json_object_set_new(rs, "fork_shallow", crl_bench_stats_json(&f->rfs, false));
    crl_bench_json_ratio(rs, "ratio_live_call_vs_plain_exec_p50", f->rsl.p50, f->rsp.p50);
    crl_bench_json_ratio(rs, "ratio_fork_vs_create_p50", f->rfk.p50, f->rcr.p50);
    return rs;
}

static json_t *responsiveness_json(const struct crl_bench_traj_results *r, const struct figures *f)
{
    static const char *const b_keys[N_WINDOWS] = {"b_a_idle", "b_a_plain", "b_a_every_step"};
    const struct crl_bench_stats *rpb = f->rpb;
    json_t *rp = json_pack(
        "{s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:f}", "file_bytes",
        (json_int_t)BIG_BYTES, "rounds", (json_int_t)RESP_ROUNDS, "steps_per_round",
        (json_int_t)RESP_STEPS, "idle_s_per_round", (json_int_t)RESP_IDLE_S, "b_a_idle",
        crl_bench_stats_json(&rpb[W_IDLE], true), "b_a_plain",
        crl_bench_stats_json(&rpb[W_PLAIN], true), "b_a_every_step",
        crl_bench_stats_json(&rpb[W_EVERY], true), "a_step_plain",
        crl_bench_stats_json(&f->rpa[0], true), "a_step_every_step",
        crl_bench_stats_json(&f->rpa[1], true), "a_checkpoint",
        crl_bench_stats_json(&f->rpk, false), "a_checkpoint_mib_stored", r->rp_stored_mib);
    for (int w = 0; w < N_WINDOWS; w++)
        json_object_set_new(json_object_get(rp, b_keys[w]), "max_ms", json_real(rpb[w].max));
    json_object_set_new(json_object_get(rp, "a_step_plain"), "duration",
                        crl_bench_stats_json(&f->rpp[0], false));
    json_object_set_new(json_object_get(rp, "a_step_every_step"), "duration",
                        crl_bench_stats_json(&f->rpp[1], false));
    crl_bench_json_ratio(rp, "ratio_every_step_vs_idle_p50", rpb[W_EVERY].p50, rpb[W_IDLE].p50);
    crl_bench_json_ratio(rp, "ratio_every_step_vs_idle_p99", rpb[W_EVERY].p99, rpb[W_IDLE].p99);
    crl_bench_json_ratio(rp, "ratio_plain_vs_idle_p50", rpb[W_PLAIN].p50, rpb[W_IDLE].p50);
    crl_bench_json_ratio(rp, "ratio_plain_vs_idle_p99", rpb[W_PLAIN].p99, rpb[W_IDLE].p99);
    return rp;
}

void crl_bench_traj_report(const struct crl_bench_run *run, void *res)
{
    struct crl_bench_traj *b = res;
    struct crl_bench_traj_results *r = &b->r;
    struct figures f;
    figures_of(r, &f);
    if (!run->o.json_only) {
        crl_bench_report_head(run);
        printf("  %zu iterations, image %s\n", b->n, run->o.image);
        printf("command: %s\n\n", b->cmdline);
        crl_bench_table_head(&table, "");
        print_steps(b, &f);
        print_restore(r, &f);
        print_responsiveness(r, &f);
        print_lines(&f);
    }
    json_auto_t *j = crl_bench_report_json(run, "corral traj");
    json_object_set_new(j, "iterations", json_integer((json_int_t)b->n));
    json_object_set_new(j, "image", json_string(run->o.image));
    json_object_set_new(j, "command", json_string(b->cmdline));
    json_object_set_new(j, "exec", overhead_json(f.ex, f.exp, &f.exc));
    json_object_set_new(j, "put_4k", overhead_json(f.pu, NULL, &f.puc));
    json_object_set_new(j, "fast_forward", fast_forward_json(&f));
    json_object_set_new(j, "restore", restore_json(r, &f));
    json_object_set_new(j, "responsiveness", responsiveness_json(r, &f));
    crl_bench_report_line(j);
}
