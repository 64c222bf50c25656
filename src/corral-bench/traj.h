/* corral bench traj's parts (traj.c, traj_phases.c, traj_report.c): what
 * one run holds, and the calls its phases share.  Not for other benches. */
#ifndef CORRAL_BENCH_TRAJ_H
#define CORRAL_BENCH_TRAJ_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/client/client.h"
#include "../../lib/util/err.h"
#include "api.h"
#include "bench.h"
#include "samples.h"

#define SANDBOX_MB 64 /* admission control never limits */
#define FILE_BYTES 4096
#define RESTORE_STEPS 50
#define FORK_SHALLOW 10 /* a fork from a shallower step, to see what depth costs */
#define MAX_TRAJS 8
#define TRAJ_ID_MAX 96
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

/* 1: the three kinds of sandbox, and their trajectories' checkpoint modes */
enum { A_PLAIN, B_NONE, C_EVERY, N_KINDS };
/* 4: what sandbox A does while B is probed */
enum { W_IDLE, W_PLAIN, W_EVERY, N_WINDOWS };

struct crl_bench_traj_results {
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

/* One run: its client, and what to remove on the way out. */
struct crl_bench_traj {
    const struct crl_bench_run *run;
    struct crl_client *c;
    size_t n, warm;
    char tag[64]; /* this run's trajectory ids start with it */
    char cmdline[512];
    struct crl_bench_sandboxes sbs;
    char trajs[MAX_TRAJS][TRAJ_ID_MAX];
    uint64_t rnd;
    struct crl_bench_traj_results r;
};

/* Create a sandbox of the bench's image and `memory_mb`, recording `traj`
 * in checkpoint mode `mode` if traj is not NULL: its id into
 * id[0..CRL_BENCH_ID_MAX), timed to the 201 into *ms (may be NULL). */
int crl_bench_traj_sandbox(struct crl_bench_traj *b, const char *traj, const char *mode,
                           int memory_mb, char *id, double *ms, struct crl_err *err);
/* The trajectory id `name` of this run, into id[0..TRAJ_ID_MAX), tracked
 * to be removed on the way out. */
void crl_bench_traj_name(struct crl_bench_traj *b, const char *name, char *id);
/* DELETE it (gone already is no error) and forget it. */
int crl_bench_traj_remove(struct crl_bench_traj *b, const char *id, struct crl_err *err);
/* GET /v1/trajectories/{id} into *out. */
int crl_bench_traj_get(struct crl_bench_traj *b, const char *id, json_t **out, struct crl_err *err);
/* A step record's checkpoint time in ms, NaN if it has none. */
double crl_bench_traj_ckpt_ms(json_t *step);

/* crl_bench_exec() whose answer must say "replayed": `replayed` (-1: a
 * sandbox with no trajectory, whose answers have none). */
int crl_bench_traj_exec(struct crl_client *c, const char *id, json_t *req, int replayed, double *ms,
                        json_t **out, struct crl_err *err);
/* PUT data[0..len) at `path`, timed to the answer into *ms, checked so. */
int crl_bench_traj_put(struct crl_bench_traj *b, const char *id, const char *path, const char *data,
                       size_t len, int replayed, double *ms, struct crl_err *err);

/* xorshift64*: file contents that differ from call to call (so no
 * checkpoint finds them stored already) and do not compress. */
uint64_t crl_bench_traj_rnd(uint64_t *x);
/* buf[0..len) of such bytes, from `seed`. */
void crl_bench_traj_fill(char *buf, size_t len, uint64_t seed);

/* The four phases (traj_phases.c), into b->r. */
int crl_bench_traj_overhead(struct crl_bench_traj *b, struct crl_err *err);
int crl_bench_traj_fast_forward(struct crl_bench_traj *b, struct crl_err *err);
int crl_bench_traj_restore(struct crl_bench_traj *b, struct crl_err *err);
int crl_bench_traj_responsiveness(struct crl_bench_traj *b, struct crl_err *err);

/* The table and the JSON line (traj_report.c); res is a struct
 * crl_bench_traj. */
void crl_bench_traj_report(const struct crl_bench_run *run, void *res);

#endif
