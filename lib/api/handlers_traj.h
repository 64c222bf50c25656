/* The trajectory endpoints beside the steps (traj_step.h): snapshot, fork
 * and /v1/trajectories; and what a sandbox's create and JSON need of its
 * trajectory. */
#ifndef CRL_API_HANDLERS_TRAJ_H
#define CRL_API_HANDLERS_TRAJ_H

#include <jansson.h>

#include "../util/err.h"

struct crl_req;
struct crl_sandbox;
struct crl_traj;
struct crl_trajs;

/* POST .../snapshot {"name"?}: a checkpoint of the sandbox now (a step of
 * the trajectory it records, if any). */
void crl_h_snapshot(struct crl_req *r);
/* POST .../fork {"step" | "checkpoint", "trajectory"?}: 201 with a new
 * sandbox of the same spec, in the state asked for. */
void crl_h_fork(struct crl_req *r);
/* POST /v1/trajectories/gc {"grace_s"?}: collect checkpoint blobs that no
 * trajectory references. */
void crl_h_trajectories_gc(struct crl_req *r);
/* The free hook of those three: their work's state (r->state). */
void crl_h_traj_free(struct crl_req *r);
/* GET /v1/trajectories: every trajectory, and which sandbox holds it. */
void crl_h_trajectories_list(struct crl_req *r);
/* GET /v1/trajectories/{name}[?outputs=1]: its steps, whole. */
void crl_h_trajectory_inspect(struct crl_req *r);
/* DELETE /v1/trajectories/{name}: one no sandbox holds. */
void crl_h_trajectory_remove(struct crl_req *r);
/* GET /v1/trajectories/{name}/steps: NDJSON, a step a line. */
void crl_h_trajectory_steps(struct crl_req *r);

/* Attach trajectory *t, opened for a sandbox about to be created, to that
 * sandbox now made: it takes *t (set to NULL) once it has a place for it,
 * even if the attach then fails; until then *t stays the caller's. */
int crl_h_traj_attach(struct crl_trajs *ts, struct crl_sandbox *sb, struct crl_traj **t,
                      struct crl_err *err);
/* A sandbox's JSON `o` with its checkpoint state and place in its
 * trajectory: takes the reference to o and returns it. */
json_t *crl_h_traj_sandbox_json(struct crl_sandbox *sb, json_t *o);

#endif
