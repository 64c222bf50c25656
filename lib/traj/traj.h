/* Trajectories: the durable record of every call made to a sandbox and its
 * result, with checkpoints of the sandbox's writable state, and the
 * fast-forward through that record that lets a preempted agent resume.
 *
 * On disk, under <state>/trajectories/ (a shared filesystem in a cluster;
 * nothing in it names the host that wrote it beyond provenance):
 *
 *   <id>/log        one lib/traj/journal.h file: a BEGIN record (the spec, the
 *                   state it starts from), then STEP and EVENT records
 *   blobs/          lib/traj/ckpt.h: checkpoints and large bodies, by digest
 *
 * A trajectory is a tree of steps.  Step n (from 1) has a parent (0: the
 * start); a sandbox attached to the trajectory has a cursor, the step it
 * stands on.  Live, each call becomes a child of the cursor and the cursor
 * moves to it.  Attached to an existing trajectory, the sandbox first
 * fast-forwards: a call whose canonical request matches a child of the
 * cursor (the newest such child) is answered from the log and the cursor
 * moves; the first call that matches none makes the sandbox go live on the
 * state of the cursor's step, so the trajectory branches there.
 *
 * One sandbox at a time holds a trajectory (CRL_E_CONFLICT otherwise),
 * enforced in this process by the open table and across processes and
 * hosts by the log's single-writer lock. */
#ifndef CRL_TRAJ_TRAJ_H
#define CRL_TRAJ_TRAJ_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/sandbox.h"
#include "../util/sha256.h"
#include "ckpt.h"
#include "journal.h"

enum crl_traj_record_type {
    CRL_TRAJ_BEGIN = 1,
    CRL_TRAJ_STEP = 2,
    CRL_TRAJ_EVENT = 3,
};

/* Bodies above this go to the blob store, referenced from the record. */
#define CRL_TRAJ_INLINE_MAX (256u << 10)

struct crl_trajs;

/* For /metrics. */
struct crl_traj_counters {
    uint64_t steps_recorded, steps_replayed, went_live, live_failed;
    uint64_t checkpoints, checkpoint_bytes_stored;
    double checkpoint_seconds, record_seconds; /* checkpoint, and append + sync */
};

struct crl_traj_step {
    uint32_t n, parent;
    char hash[CRL_DIGEST_LEN + 1]; /* of the canonical request */
    char kind[16];
    /* The state after the step: a checkpoint id, "" for the image (or the
     * trajectory's base); known is false when the step may have changed
     * state and no checkpoint was taken (checkpoint "none"/"on-request"). */
    char ckpt[CRL_CKPT_ID_MAX];
    bool known;
    struct crl_journal_pos pos; /* its record */
};

struct crl_traj {
    struct crl_trajs *ts;
    char id[CRL_TRAJ_ID_MAX + 1];
    char log_path[4096];
    struct crl_journal *log;
    json_t *spec;                /* as recorded by BEGIN */
    char base[CRL_CKPT_ID_MAX];  /* the state step 0 stands for: "" is the image */
    struct crl_traj_step *steps; /* steps[0] is the start; steps[n] is step n */
    size_t n_steps;              /* not counting the start */
    size_t cap;
    bool created; /* by this open: removed again if never used */
    bool attached;
    char holder[40];                   /* the sandbox that holds it */
    struct crl_journal_reader *reader; /* for answers read back in order */
    struct crl_traj *next;
};

/* What the layer above keeps per sandbox: its checkpoint state, and its
 * trajectory and place in it. */
struct crl_traj_sb {
    struct crl_sandbox *sb;
    struct crl_trajs *ts;
    struct crl_ckpt_index *idx; /* the writable layer as of checkpoint `state` */
    char state[CRL_CKPT_ID_MAX];
    enum crl_checkpoint_mode mode;
    struct crl_traj *traj; /* NULL: checkpoints only (snapshot, fork) */
    uint32_t cursor;
    bool live;                    /* calls run; false while fast-forwarding */
    bool busy;                    /* a step is being answered: one at a time */
    bool broken;                  /* going live failed: the state is not the trajectory's */
    unsigned jobs;                /* queued on the worker: it is freed after the last */
    bool gone;                    /* its sandbox is gone */
    char pinned[CRL_CKPT_ID_MAX]; /* its state, for the collector (under the lock) */
    /* The API layer's: calls waiting for their turn, and what to do with
     * them when the sandbox goes (called before anything is freed). */
    void *waiting;
    unsigned n_waiting;
    void (*gone_hook)(struct crl_traj_sb *s);
    struct crl_traj_sb *next_in_ts;
    char broken_msg[256];
    /* counters for GET /v1/sandboxes/{id} */
    uint64_t replayed, recorded;
};

/* The trajectories under <dir>/trajectories: corrald's state directory,
 * or the directory a cluster's hosts share (--shared-dir). */
int crl_trajs_open(const char *dir, struct crl_loop *loop, struct crl_trajs **out,
                   struct crl_err *err);
void crl_trajs_close(struct crl_trajs *ts);
struct crl_ckpt_store *crl_trajs_store(struct crl_trajs *ts);
struct crl_traj_counters *crl_trajs_counters(struct crl_trajs *ts);
/* The counters as Prometheus text, appended to b. */
void crl_trajs_metrics(struct crl_trajs *ts, struct crl_buf *b);
const char *crl_trajs_dir(const struct crl_trajs *ts);

/* Open trajectory `id` for a sandbox about to be created from `spec`: a new
 * one (its BEGIN record written and durable, starting from checkpoint
 * `base`, NULL for the image) or an existing one, read whole.
 * CRL_E_CONFLICT if it is open already, or was recorded on another
 * backend, runtime or image; CRL_E_INTERNAL naming file and offset for a
 * corrupt log.  With `must_be_new`, an existing one is CRL_E_CONFLICT. */
int crl_traj_open(struct crl_trajs *ts, const char *id, const struct crl_spec *spec,
                  const char *base, bool must_be_new, struct crl_traj **out, struct crl_err *err);
/* Close it (a new one with no steps and never attached is removed). */
void crl_traj_close(struct crl_traj *t);
/* Remove a trajectory that no sandbox holds. */
int crl_traj_remove(struct crl_trajs *ts, const char *id, struct crl_err *err);

/* Per-sandbox state: made on first use, freed with the sandbox. */
struct crl_traj_sb *crl_traj_sb_get(struct crl_trajs *ts, struct crl_sandbox *sb,
                                    struct crl_err *err);
/* Attach an open trajectory to a new sandbox (which then owns it). */
int crl_traj_attach(struct crl_traj_sb *ts, struct crl_traj *t, struct crl_err *err);
/* Where the sandbox stands on its trajectory (id, cursor, the log's steps,
 * live), into its record (crl_sandbox_note "trajectory"): called when any
 * of it changes. */
void crl_traj_noted(struct crl_traj_sb *s);
/* Attach an open trajectory again to the sandbox an adoption took over
 * (lib/api/server.c), where its record's note says it stood: only if it
 * was live there and the log has no step since (else CRL_E_CONFLICT: the
 * trajectory went on elsewhere).  The next checkpoint is a whole one. */
int crl_traj_reattach(struct crl_traj_sb *s, struct crl_traj *t, json_t *note, struct crl_err *err);

/* The newest child of the cursor whose request hashes to `hash`, or NULL. */
const struct crl_traj_step *crl_traj_match(const struct crl_traj_sb *s, const char *hash);
/* The state to go live on at the cursor: a checkpoint id ("" for the
 * image/base) and the step it belongs to (< cursor when the cursor's own
 * state was not checkpointed). */
const char *crl_traj_live_state(const struct crl_traj_sb *s, uint32_t *from_step);
/* Read a step's record back (a new reference). */
int crl_traj_step_record(struct crl_traj *t, uint32_t n, json_t **out, struct crl_err *err);

/* ---- the worker ----
 *
 * What waits on a disk (checkpoints, blob writes, fdatasyncs, restore
 * streams) runs on one worker thread, a job at a time in the order queued,
 * so the loop never waits on it; each job's done runs back on the loop.
 * The worker holds the store's lock for each job; the loop takes it around
 * its own short uses of the store and the logs (replayed answers, events,
 * exports). */
struct crl_traj_job {
    struct crl_trajs *ts;
    int (*work)(struct crl_traj_job *j, struct crl_err *err);        /* worker */
    void (*done)(struct crl_traj_job *j, const struct crl_err *err); /* loop */
    int rc;
    struct crl_err err;
    struct crl_traj_job *next;
    /* A job that reads a sandbox's layer, while its backend fetches it
     * (struct crl_snapshot_req): where the view goes. */
    struct crl_snapshot_req snap;
    struct crl_snapshot_view *view;
};

void crl_trajs_submit(struct crl_trajs *ts, struct crl_traj_job *j);
void crl_trajs_lock(struct crl_trajs *ts);
void crl_trajs_unlock(struct crl_trajs *ts);

/* A checkpoint of the sandbox's writable layer now, incremental to its last
 * one; cb runs on the loop with cj->id the new state.  The caller keeps cj
 * (embedded in something of its own) until cb. */
struct crl_traj_ckpt_job {
    struct crl_traj_job job;
    struct crl_traj_sb *s;
    void (*cb)(struct crl_traj_ckpt_job *cj, const struct crl_err *err);
    void *ctx;
    /* filled in */
    struct crl_snapshot_view view;
    char parent[CRL_CKPT_ID_MAX];
    char id[CRL_CKPT_ID_MAX];
    struct crl_ckpt_stats st;
    double seconds;
};
int crl_traj_checkpoint_start(struct crl_traj_ckpt_job *cj, struct crl_err *err);

/* A restore's material: the chain of `ckpt` ("" for the image) as a tar
 * stream in a memfd (tar_fd, at offset 0) and its index.  Once the
 * backend has applied it, crl_traj_restored() makes it the sandbox's
 * state; crl_traj_restore_job_free() releases what is left. */
struct crl_traj_restore_job {
    struct crl_traj_job job;
    char ckpt[CRL_CKPT_ID_MAX];
    void (*cb)(struct crl_traj_restore_job *rj, const struct crl_err *err);
    void *ctx;
    /* filled in */
    int tar_fd;
    struct crl_ckpt_index *idx;
    struct crl_ckpt_stats st;
};
void crl_traj_restore_prepare(struct crl_trajs *ts, struct crl_traj_restore_job *rj);
void crl_traj_restored(struct crl_traj_sb *s, struct crl_traj_restore_job *rj);
void crl_traj_restore_job_free(struct crl_traj_restore_job *rj);

/* Record a live step as a child of the cursor: `rec` (owned by the job's
 * owner; kind, request, hash, status, response...) gets n, parent and the
 * checkpoint (taken when `changes_state` and the mode is every-step, or
 * `ckpt_given`), after the blobs are stored and their ids set in rec; it is
 * appended and synced; then, on the loop, the cursor moves to it and cb
 * runs.  The sandbox stays busy until cb. */
struct crl_traj_record_job {
    struct crl_traj_job job;
    struct crl_traj_sb *s;
    json_t *rec;
    bool changes_state;
    char ckpt_given[CRL_CKPT_ID_MAX];
    struct {
        const void *data;
        size_t len;
        json_t *obj;     /* where its id goes */
        const char *key; /* under this key */
    } blob[3];
    int n_blobs;
    void (*cb)(struct crl_traj_record_job *rj, const struct crl_err *err);
    void *ctx;
    /* filled in */
    struct crl_traj_step st;
    bool take;
    struct crl_snapshot_view view;
    char parent_state[CRL_CKPT_ID_MAX];
    bool took;
    struct crl_ckpt_stats cs;
    double ckpt_s, record_s;
};
int crl_traj_record_start(struct crl_traj_record_job *rj, struct crl_err *err);

/* Garbage collection of the checkpoint store: every blob that no
 * trajectory's log and no live sandbox's state refers to, and that is older
 * than grace_s (what another host or a job has just written is young), is
 * removed.  A log that cannot be read stops the sweep: what it refers to
 * is unknown.  It runs on the worker, under the lock as every job, so the
 * sandboxes' states it keeps (each one's newest checkpoint, pinned as the
 * worker takes it) are settled. */
struct crl_traj_gc_job {
    struct crl_traj_job job;
    double grace_s;
    void (*cb)(struct crl_traj_gc_job *gj, const struct crl_err *err);
    void *ctx;
    /* filled in */
    uint64_t trajectories, missing;
    struct crl_ckpt_gc_stats st;
    double seconds;
};
void crl_trajs_gc_start(struct crl_trajs *ts, struct crl_traj_gc_job *gj);
/* Collect every period_s seconds with that grace (0: never). */
void crl_trajs_gc_every(struct crl_trajs *ts, unsigned period_s);

/* An EVENT record (attach, live, detach), synced.  Takes the reference to
 * `extra` (its fields, NULL for none), whether it succeeds or not. */
int crl_traj_event(struct crl_traj_sb *s, const char *event, json_t *extra, struct crl_err *err);

/* Listing and reading, for GET /v1/trajectories. */
json_t *crl_trajs_list_json(struct crl_trajs *ts, struct crl_host *h);
/* The trajectory `id`: its spec, steps (with outputs or not), heads, live
 * sandbox.  Each step as recorded; `each` (may be NULL) is called per step
 * instead of collecting them, for NDJSON export. */
int crl_traj_read(struct crl_trajs *ts, const char *id, bool outputs, json_t **out,
                  void (*each)(json_t *step, void *ctx), void *ctx, struct crl_err *err);
/* Which sandbox holds it now, or NULL. */
const char *crl_traj_holder(struct crl_trajs *ts, const char *id);

#endif
