/* A trajectory's steps over the API (traj_step.c): the route table's step
 * entries of a sandbox that records a trajectory go through here. */
#ifndef CRL_API_TRAJ_STEP_H
#define CRL_API_TRAJ_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/backend.h"
#include "../traj/traj.h"

struct crl_req;

/* Once the body is in, for an entry with a step kind: false when the
 * request is no step (its sandbox records no trajectory): its endpoint
 * runs as always.  True when the step has it: answered from the log, run
 * live through it (the answer is recorded before it is sent), waiting its
 * turn, or refused.  The step's state and hooks hang on the request
 * (r->step, r->step_ops) until it is freed. */
bool crl_step_take(struct crl_req *r);
/* PUT .../files at its headers: true when the upload is a step, held whole
 * (up to 64 MiB) to be hashed and recorded; r->body_limit says so. */
bool crl_step_holds_upload(struct crl_req *r);
/* A files GET of a step: the file (fd, which this closes) is read whole
 * and recorded, then answered; `path` names it in errors. */
void crl_step_capture_file(struct crl_req *r, int fd, uint64_t size, const char *path);

/* Restoring checkpoint prep.ckpt ("" for the image) into sb: its material
 * built on the trajectory worker, then the backend's restore op.  The
 * caller sets sb, prep.ckpt, req.done and req.ctx; req.done runs at the end
 * either way.  prep is the caller's to free (crl_traj_restore_job_free). */
struct crl_step_restore {
    struct crl_sandbox *sb;
    struct crl_traj_restore_job prep;
    struct crl_restore_req req;
};
void crl_step_restore_init(struct crl_step_restore *rs);
void crl_step_restore_start(struct crl_trajs *ts, struct crl_step_restore *rs);

#endif
