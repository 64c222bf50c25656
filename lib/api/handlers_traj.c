/* The trajectory endpoints beside the steps (traj_step.c): POST
 * .../snapshot (itself a step of a sandbox that records one), POST
 * .../fork, and GET/DELETE /v1/trajectories, its steps and POST
 * /v1/trajectories/gc; and what a sandbox's create and JSON need of its
 * trajectory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../traj/traj.h"
#include "handlers_traj.h"
#include "request.h"
#include "traj_step.h"

/* The state (r->state) of a snapshot, a fork or a collection. */
struct traj_req {
    /* a checkpoint taken for a snapshot, or for a fork from now */
    struct crl_traj_ckpt_job ckpt;
    char *snapshot_name;
    struct crl_traj_gc_job gc;
    /* a fork: its source and where it starts; the new sandbox, its
     * trajectory until it holds it, and the state restored into it */
    struct crl_sandbox *source;
    int64_t fork_step;
    json_t *fork_body;
    struct crl_traj *topen;
    struct crl_traj_sb *s;
    struct crl_step_restore restore;
};

static struct traj_req *traj_req_new(struct crl_req *r, struct crl_err *err, const char *what)
{
    struct traj_req *x = calloc(1, sizeof(*x));
    if (!x) {
        crl_err_sys(err, ENOMEM, "%s", what);
        return NULL;
    }
    crl_step_restore_init(&x->restore);
    r->state = x;
    return x;
}

void crl_h_traj_free(struct crl_req *r)
{
    struct traj_req *x = r->state;
    if (!x)
        return;
    crl_traj_restore_job_free(&x->restore.prep);
    json_decref(x->fork_body);
    free(x->snapshot_name);
    if (x->source)
        crl_sandbox_unref(x->source);
    crl_traj_close(x->topen); /* a new one, never used, is removed */
    free(x);
    r->state = NULL;
}

/* ---- a sandbox's trajectory ---- */

int crl_h_traj_attach(struct crl_trajs *ts, struct crl_sandbox *sb, struct crl_traj **t,
                      struct crl_err *err)
{
    struct crl_traj_sb *s = crl_traj_sb_get(ts, sb, err);
    if (!s)
        return -1;
    struct crl_traj *held = *t;
    *t = NULL; /* the sandbox's now, closed when it is gone */
    return crl_traj_attach(s, held, err);
}

json_t *crl_h_traj_sandbox_json(struct crl_sandbox *sb, json_t *o)
{
    struct crl_traj_sb *s = sb->traj;
    if (!s || !json_is_object(o))
        return o;
    json_t *j = json_pack("{s:s*, s:s}", "state", s->state[0] ? s->state : NULL, "mode",
                          crl_checkpoint_mode_name(s->mode));
    if (s->traj) {
        json_object_set_new(j, "trajectory", json_string(s->traj->id));
        json_object_set_new(j, "step", json_integer(s->cursor));
        json_object_set_new(j, "live", json_boolean(s->live));
        json_object_set_new(j, "steps_replayed", json_integer((json_int_t)s->replayed));
        json_object_set_new(j, "steps_recorded", json_integer((json_int_t)s->recorded));
        if (s->broken)
            json_object_set_new(j, "broken", json_string(s->broken_msg));
    }
    json_object_set_new(o, "checkpoints", j);
    return o;
}

/* ---- snapshot ---- */

static void snapshot_taken(struct crl_traj_ckpt_job *cj, const struct crl_err *err)
{
    struct crl_req *r = cj->ctx;
    struct traj_req *x = r->state;
    if (err) {
        crl_req_error(r, err);
    } else {
        const struct crl_ckpt_stats *st = &cj->st;
        crl_req_json(r, 200,
                     json_pack("{s:s, s:s, s:s*, s:{s:I, s:I, s:I, s:I, s:f}}", "sandbox",
                               r->sb->id, "checkpoint", cj->id, "name", x->snapshot_name, "stats",
                               "entries", (json_int_t)st->entries, "changed",
                               (json_int_t)st->changed, "removed", (json_int_t)st->removed,
                               "bytes_stored", (json_int_t)st->bytes_stored, "seconds",
                               cj->seconds));
    }
    crl_req_pending_done(r);
}

void crl_h_snapshot(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL;
    if (crl_req_sandbox(r, &err) < 0 || crl_sandbox_check_ready(r->sb, &err) < 0)
        goto fail;
    if (r->body.len) {
        if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
            goto fail;
        json_t *n = json_object_get(body, "name");
        if (!json_is_object(body) || json_object_size(body) > (n ? 1u : 0u) ||
            (n && (!json_is_string(n) || json_string_length(n) > 128))) {
            crl_err_set(&err, CRL_E_INVALID,
                        "a snapshot request is {\"name\": \"...\"} (at most 128 bytes), or empty");
            goto fail;
        }
    }
    struct crl_traj_sb *s = crl_traj_sb_get(r->api->trajs, r->sb, &err);
    struct traj_req *x;
    if (!s || !(x = traj_req_new(r, &err, "snapshot")))
        goto fail;
    const char *name = json_string_value(json_object_get(body, "name"));
    if (name && !(x->snapshot_name = strdup(name))) {
        crl_err_sys(&err, ENOMEM, "snapshot");
        goto fail;
    }
    json_decref(body);
    body = NULL;
    x->ckpt.s = s;
    x->ckpt.cb = snapshot_taken;
    x->ckpt.ctx = r;
    r->pending++;
    if (crl_traj_checkpoint_start(&x->ckpt, &err) < 0) {
        r->pending--;
        goto fail;
    }
    return;
fail:
    json_decref(body);
    crl_req_error(r, &err);
}

/* ---- fork ---- */

static void fork_answer(struct crl_req *r, struct crl_sandbox *sb)
{
    struct traj_req *x = r->state;
    const char *ck = x->restore.prep.ckpt;
    json_t *o = crl_h_traj_sandbox_json(sb, crl_sandbox_json(sb));
    json_object_set_new(o, "forked_from",
                        json_pack("{s:s, s:o, s:o}", "sandbox", x->source->id, "step",
                                  x->fork_step >= 0 ? json_integer(x->fork_step) : json_null(),
                                  "checkpoint", ck[0] ? json_string(ck) : json_null()));
    crl_req_json(r, 201, o);
}

static void fork_restored(struct crl_restore_req *rq, const struct crl_err *err)
{
    struct crl_req *r = rq->ctx;
    struct traj_req *x = r->state;
    struct crl_sandbox *sb = x->s->sb;
    if (err) {
        crl_host_destroy(sb->host, sb, "restore_failed", NULL, NULL, NULL);
        if (!r->gone)
            crl_req_error(r, err);
    } else {
        crl_traj_restored(x->s, &x->restore.prep);
        x->s->live = true;
        crl_traj_noted(x->s);
        if (r->gone || r->client_gone)
            crl_host_destroy(sb->host, sb, "client_gone", NULL, NULL, NULL);
        else
            fork_answer(r, sb);
    }
    crl_traj_restore_job_free(&x->restore.prep);
    crl_req_pending_done(r);
}

static void fork_created(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    struct traj_req *x = r->state;
    struct crl_err e = CRL_ERR_INIT;
    if (err) {
        crl_traj_close(x->topen); /* a new trajectory goes with the sandbox */
        x->topen = NULL;
        if (!r->gone)
            crl_req_error(r, err);
        crl_req_pending_done(r);
        return;
    }
    if ((x->topen && crl_h_traj_attach(r->api->trajs, sb, &x->topen, &e) < 0) ||
        !(x->s = crl_traj_sb_get(r->api->trajs, sb, &e))) {
        crl_host_destroy(sb->host, sb, "restore_failed", NULL, NULL, NULL);
        if (!r->gone)
            crl_req_error(r, &e);
        crl_req_pending_done(r);
        return;
    }
    x->restore.sb = sb;
    x->restore.req.done = fork_restored;
    x->restore.req.ctx = r;
    crl_step_restore_start(r->api->trajs, &x->restore);
}

/* The new sandbox: the source's spec, with the trajectory asked for, if any. */
static void fork_create(struct crl_req *r)
{
    struct traj_req *x = r->state;
    struct crl_err err = CRL_ERR_INIT;
    struct crl_spec spec;
    crl_spec_init(&spec);
    json_t *spec_json = crl_spec_to_json(&x->source->spec);
    json_t *traj = json_object_get(x->fork_body, "trajectory");
    json_object_del(spec_json, "trajectory");
    if (traj)
        json_object_set(spec_json, "trajectory", traj);
    int rc = crl_spec_from_json(spec_json, &spec, &err);
    json_decref(spec_json);
    if (rc < 0 ||
        (spec.trajectory[0] && crl_traj_open(r->api->trajs, spec.trajectory, &spec,
                                             x->restore.prep.ckpt, true, &x->topen, &err) < 0)) {
        crl_spec_free(&spec);
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_host_create(r->api->host, &spec, fork_created, r, &err) < 0) {
        r->pending--;
        crl_spec_free(&spec);
        crl_traj_close(x->topen);
        x->topen = NULL;
        crl_req_error(r, &err);
    }
}

static void fork_checkpointed(struct crl_traj_ckpt_job *cj, const struct crl_err *err)
{
    struct crl_req *r = cj->ctx;
    struct traj_req *x = r->state;
    if (err) {
        crl_req_error(r, err);
    } else if (!r->gone && !r->client_gone) {
        snprintf(x->restore.prep.ckpt, sizeof(x->restore.prep.ckpt), "%s", cj->id);
        fork_create(r);
    }
    crl_req_pending_done(r);
}

/* Which state a fork starts from, as its request (body, borrowed) asks:
 * step N of the sandbox's trajectory, a checkpoint by id, or (neither) its
 * state now, checkpointed on the worker.  0: x->restore.prep.ckpt is set;
 * 1: it will be (fork_checkpointed). */
static int fork_state(struct crl_req *r, json_t *body, struct traj_req *x, struct crl_err *err)
{
    struct crl_sandbox *sb = r->sb;
    json_t *step = json_object_get(body, "step");
    json_t *ck = json_object_get(body, "checkpoint");
    x->fork_step = -1;
    if (step && ck)
        return crl_err_set(err, CRL_E_INVALID, "give step or checkpoint, not both");
    if (step) {
        struct crl_traj_sb *s = sb->traj;
        if (!json_is_integer(step) || json_integer_value(step) < 0)
            return crl_err_set(err, CRL_E_INVALID, "step must be a step number (0 or more)");
        if (!s || !s->traj)
            return crl_err_set(err, CRL_E_INVALID,
                               "sandbox %s records no trajectory: fork it from its state now "
                               "or from a checkpoint",
                               sb->id);
        json_int_t n = json_integer_value(step);
        if ((size_t)n > s->traj->n_steps)
            return crl_err_set(err, CRL_E_NOT_FOUND,
                               "step %lld does not exist in trajectory %s (it has %zu steps)",
                               (long long)n, s->traj->id, s->traj->n_steps);
        uint32_t k = (uint32_t)n;
        while (k && !s->traj->steps[k].known)
            k = s->traj->steps[k].parent;
        if (k != (uint32_t)n)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "the state after step %lld of trajectory %s was not checkpointed "
                               "(checkpoint mode %s); the nearest is step %u",
                               (long long)n, s->traj->id, crl_checkpoint_mode_name(s->mode), k);
        x->fork_step = n;
        snprintf(x->restore.prep.ckpt, sizeof(x->restore.prep.ckpt), "%s", s->traj->steps[k].ckpt);
        return 0;
    }
    if (ck) {
        if (!json_is_string(ck))
            return crl_err_set(err, CRL_E_INVALID, "checkpoint must be a checkpoint id string");
        crl_trajs_lock(r->api->trajs);
        int rc = crl_ckpt_check(crl_trajs_store(r->api->trajs), json_string_value(ck), err);
        crl_trajs_unlock(r->api->trajs);
        if (rc < 0)
            return -1;
        snprintf(x->restore.prep.ckpt, sizeof(x->restore.prep.ckpt), "%s", json_string_value(ck));
        return 0;
    }
    if (crl_sandbox_check_ready(sb, err) < 0)
        return -1;
    struct crl_traj_sb *s = crl_traj_sb_get(r->api->trajs, sb, err);
    if (!s)
        return -1;
    if (s->traj && !s->live) { /* fast-forwarding: its state is that of the cursor */
        uint32_t from;
        const char *id = crl_traj_live_state(s, &from);
        if (from != s->cursor)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "the state at step %u of trajectory %s was not checkpointed",
                               s->cursor, s->traj->id);
        snprintf(x->restore.prep.ckpt, sizeof(x->restore.prep.ckpt), "%s", id);
        x->fork_step = s->cursor;
        return 0;
    }
    if (s->busy)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is running a step; fork it after",
                           sb->id);
    x->ckpt.s = s;
    x->ckpt.cb = fork_checkpointed;
    x->ckpt.ctx = r;
    r->pending++;
    if (crl_traj_checkpoint_start(&x->ckpt, err) < 0) {
        r->pending--;
        return -1;
    }
    return 1;
}

void crl_h_fork(struct crl_req *r)
{
    static const char *const keys[] = {"step", "checkpoint", "trajectory"};
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL;
    if (crl_req_sandbox(r, &err) < 0)
        goto fail;
    if (r->body.len && crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
        goto fail;
    if (!body)
        body = json_object();
    if (!json_is_object(body)) {
        crl_err_set(&err, CRL_E_INVALID, "a fork request is a JSON object");
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < 3; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known) {
            crl_err_set(&err, CRL_E_INVALID,
                        "unknown field '%s' in a fork request (step, checkpoint, trajectory)", key);
            goto fail;
        }
    }
    struct traj_req *x = traj_req_new(r, &err, "fork");
    if (!x)
        goto fail;
    x->source = r->sb;
    crl_sandbox_ref(r->sb);
    x->fork_body = body;
    body = NULL;
    int rc = fork_state(r, x->fork_body, x, &err);
    if (rc < 0)
        goto fail;
    if (rc == 0)
        fork_create(r);
    return;
fail:
    json_decref(body);
    crl_req_error(r, &err);
}

/* ---- /v1/trajectories ---- */

/* A step of GET .../steps: borrowed, one NDJSON line. */
static void each_line(json_t *step, void *ctx)
{
    struct crl_req *r = ctx;
    crl_req_stream_json(r, json_incref(step));
}

static void collected(struct crl_traj_gc_job *gj, const struct crl_err *err)
{
    struct crl_req *r = gj->ctx;
    if (err)
        crl_req_error(r, err);
    else
        crl_req_json(r, 200,
                     json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "trajectories",
                               (json_int_t)gj->trajectories, "blobs_removed",
                               (json_int_t)gj->st.blobs_removed, "bytes_removed",
                               (json_int_t)gj->st.bytes_removed, "blobs_kept",
                               (json_int_t)gj->st.blobs_kept, "young_kept",
                               (json_int_t)gj->st.young_kept, "tmp_removed",
                               (json_int_t)gj->st.tmp_removed, "missing", (json_int_t)gj->missing,
                               "grace_s", gj->grace_s, "seconds", gj->seconds));
    crl_req_pending_done(r);
}

/* POST /v1/trajectories/gc {"grace_s": N}: default an hour. */
void crl_h_trajectories_gc(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *body = NULL;
    double grace = 3600;
    if (r->body.len) {
        if (crl_json_load(r->body.data, r->body.len, &body, &err) < 0)
            goto fail;
        json_t *g = json_object_get(body, "grace_s");
        if (!json_is_object(body) || json_object_size(body) > (g ? 1u : 0u) ||
            (g && (!json_is_number(g) || json_number_value(g) < 0))) {
            crl_err_set(&err, CRL_E_INVALID,
                        "a gc request is {\"grace_s\": seconds (0 or more)}, or empty");
            goto fail;
        }
        if (g)
            grace = json_number_value(g);
    }
    json_decref(body);
    struct traj_req *x = traj_req_new(r, &err, "gc");
    if (!x) {
        crl_req_error(r, &err);
        return;
    }
    x->gc.grace_s = grace;
    x->gc.cb = collected;
    x->gc.ctx = r;
    r->pending++;
    crl_trajs_gc_start(r->api->trajs, &x->gc);
    return;
fail:
    json_decref(body);
    crl_req_error(r, &err);
}

void crl_h_trajectories_list(struct crl_req *r)
{
    static const struct crl_list_spec list = {
        .items = "trajectories", .order = "created_at", .key = "id"};
    crl_req_list(r, crl_trajs_list_json(r->api->trajs, r->api->host), &list);
}

void crl_h_trajectory_remove(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT, ignored = CRL_ERR_INIT;
    json_t *was = NULL;
    if (crl_traj_read(r->api->trajs, r->route.name, false, &was, NULL, NULL, &ignored) == 0) {
        json_object_del(was, "steps"); /* as the list gives it */
        json_object_del(was, "events");
    }
    if (crl_traj_remove(r->api->trajs, r->route.name, &err) < 0) {
        json_decref(was);
        crl_req_error(r, &err);
    } else {
        crl_req_json(r, 200, was ? was : json_pack("{s:s}", "id", r->route.name));
    }
}

void crl_h_trajectory_steps(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_trajs *ts = r->api->trajs;
    json_t *o = NULL;
    /* Read first, so that a missing or corrupt log is an error, not a cut stream. */
    if (crl_traj_read(ts, r->route.name, false, &o, NULL, NULL, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    json_decref(o);
    crl_req_respond(r, 200, crl_req_stream_response(r, "application/x-ndjson"));
    int rc = crl_traj_read(ts, r->route.name, true, &o, each_line, r, &err);
    if (rc == 0)
        json_decref(o);
    crl_req_stream_end(r, rc < 0);
}

void crl_h_trajectory_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *o = NULL;
    const char *outputs = crl_req_query(r, "outputs");
    bool with = outputs && (strcmp(outputs, "1") == 0 || strcmp(outputs, "true") == 0);
    if (crl_traj_read(r->api->trajs, r->route.name, with, &o, NULL, NULL, &err) < 0)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 200, o);
}
