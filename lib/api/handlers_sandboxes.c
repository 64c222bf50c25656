/* The host and its sandboxes: health, metrics, the host's description, and
 * the sandboxes' list, create, inspect and destroy. */
#include <stdlib.h>
#include <string.h>

#include "../core/records.h"
#include "../traj/traj.h"
#include "cluster.h"
#include "handlers_sandboxes.h"
#include "handlers_traj.h"
#include "request.h"
#include "service_server.h"

void crl_h_healthz(struct crl_req *r)
{
    crl_req_json(r, 200,
                 json_pack("{s:s, s:s}", "status", "ok", "host_id", r->api->host->cfg.host_id));
}

void crl_h_metrics(struct crl_req *r)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    char *hm = crl_host_metrics(r->api->host);
    if (hm)
        crl_buf_append(&b, hm, strlen(hm));
    free(hm);
    crl_trajs_metrics(r->api->trajs, &b);
    crl_buf_append(&b, "", 1);
    char *m = b.data;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        m ? strlen(m) : 0, m ? m : (char *)"", m ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    crl_req_respond(r, 200, resp);
}

void crl_h_host(struct crl_req *r)
{
    crl_req_json(r, 200, crl_host_info_json(r->api->host));
}

void crl_h_sandboxes_list(struct crl_req *r)
{
    json_t *local = crl_host_list_json(r->api->host);
    if (!crl_cluster_list_sandboxes(r, local))
        crl_h_sandboxes_list_answer(r, local);
}

void crl_h_sandboxes_list_answer(struct crl_req *r, json_t *merged)
{
    static const char *const states[] = {"creating",   "ready",     "paused", "failed",
                                         "destroying", "destroyed", "lost",   NULL};
    static const struct crl_list_spec list = {
        .items = "sandboxes", .order = "created_at", .key = "id", .states = states};
    crl_req_list(r, merged, &list);
}

/* A create's state is the trajectory it opened ("trajectory" in its spec)
 * before its sandbox existed: the sandbox takes it, or it is closed (a new
 * one, never used, is removed). */
static void traj_close(struct crl_req *r)
{
    crl_traj_close(r->state);
    r->state = NULL;
}

void crl_h_sandbox_create_free(struct crl_req *r)
{
    traj_close(r);
}

/* The new sandbox takes the trajectory, if any. */
static int attach(struct crl_req *r, struct crl_sandbox *sb, struct crl_err *err)
{
    struct crl_traj *t = r->state;
    if (!t)
        return 0;
    int rc = crl_h_traj_attach(r->api->trajs, sb, &t, err);
    r->state = t;
    return rc;
}

/* The create of an Idempotency-Key ended: with its sandbox, or not. */
static void idem_end(struct crl_req *r, const char *id)
{
    if (r->idem_key[0])
        crl_idem_end(r->api->idem, r->idem_key, id);
    r->idem_key[0] = 0;
}

/* A sandbox made under an Idempotency-Key keeps the key in its record: a
 * corrald that adopts it after a restart still replays it to a retry. */
static void note_idem(struct crl_req *r, struct crl_sandbox *sb)
{
    char digest[CRL_DIGEST_LEN + 1];
    double at;
    if (!r->idem_key[0] || crl_idem_get(r->api->idem, r->idem_key, digest, &at) < 0)
        return;
    json_t *o = json_pack("{s:s, s:s, s:f}", "key", r->idem_key, "digest", digest, "at", at);
    crl_sandbox_note(sb, "idempotency", o);
    json_decref(o);
}

static void created(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    struct crl_err terr = CRL_ERR_INIT;
    /* A sandbox the client hears of is its key's; any other end of the
     * create forgets the key, so that a retry runs anew. */
    bool ok = false;
    if (err) {
        traj_close(r); /* a new trajectory goes with the sandbox */
        if (!r->gone && !r->client_gone)
            crl_req_error(r, err);
    } else if (r->gone || r->client_gone) {
        /* The client left before its sandbox was ready: nobody knows its id. */
        crl_host_destroy(sb->host, sb, "client_gone", NULL, NULL, NULL);
    } else if (attach(r, sb, &terr) < 0) {
        crl_host_destroy(sb->host, sb, "trajectory_failed", NULL, NULL, NULL);
        crl_req_error(r, &terr);
    } else {
        ok = true;
        note_idem(r, sb);
        crl_req_json(r, 201, crl_h_traj_sandbox_json(sb, crl_sandbox_json(sb)));
        if (r->resp && r->placement[0]) { /* other hosts were asked first */
            char all[sizeof(r->placement) + 48];
            snprintf(all, sizeof(all), "%s, %s=201", r->placement, r->api->host->cfg.host_id);
            MHD_add_response_header(r->resp, "X-Corral-Placement", all);
        }
    }
    idem_end(r, ok ? sb->id : NULL);
    crl_req_pending_done(r);
}

/* A create retried with its Idempotency-Key: the sandbox the first made. */
static void replay(struct crl_req *r, const char *id)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_sandbox *sb = crl_host_find(r->api->host, id, &err);
    if (!sb) {
        crl_err_set(&err, CRL_E_CONFLICT,
                    "Idempotency-Key %s made sandbox %s, which is gone (destroyed and forgotten)",
                    r->idem_key, id);
        crl_req_error(r, &err);
        return;
    }
    crl_req_json(r, 200, crl_h_traj_sandbox_json(sb, crl_sandbox_json(sb)));
    if (r->resp)
        MHD_add_response_header(r->resp, "Idempotent-Replayed", "true");
}

/* The image of a create is here now, pulled from another host: the create
 * goes on, placed here still. */
static void image_pulled(struct crl_req *r, const struct crl_err *err)
{
    if (err)
        crl_req_error(r, err);
    else
        crl_h_sandbox_create(r);
}

void crl_h_sandbox_create(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_spec spec;
    if (crl_spec_parse(r->body.data, r->body.len, &spec, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    if (crl_cluster_place_create(r, &spec) ||             /* another host makes it */
        crl_cluster_pull_image(r, &spec, image_pulled)) { /* made once its image is here */
        crl_spec_free(&spec);
        return;
    }
    const char *key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
    if (key) {
        char id[64];
        int k = crl_idem_begin(r->api->idem, key, r->body.data, r->body.len, id, sizeof(id), &err);
        if (k <= 0) {
            crl_spec_free(&spec);
            if (k == 0) {
                snprintf(r->idem_key, sizeof(r->idem_key), "%s", key);
                replay(r, id);
                r->idem_key[0] = 0;
            } else {
                crl_req_error(r, &err);
            }
            return;
        }
        snprintf(r->idem_key, sizeof(r->idem_key), "%s", key);
    }
    /* Its services are answered by corrald: listening from the first. */
    if (spec.services && crl_service_server_start(r->api, &err) < 0) {
        crl_spec_free(&spec);
        idem_end(r, NULL);
        crl_req_error(r, &err);
        return;
    }
    struct crl_traj *t = NULL;
    if (spec.trajectory[0] &&
        crl_traj_open(r->api->trajs, spec.trajectory, &spec, NULL, false, &t, &err) < 0) {
        crl_spec_free(&spec);
        idem_end(r, NULL);
        crl_req_error(r, &err);
        return;
    }
    r->state = t;
    r->pending++;
    if (crl_host_create(r->api->host, &spec, created, r, &err) < 0) {
        r->pending--;
        crl_spec_free(&spec);
        traj_close(r);
        idem_end(r, NULL);
        crl_req_error(r, &err);
    }
}

static void destroyed(struct crl_sandbox *sb, const struct crl_err *err, void *ctx)
{
    struct crl_req *r = ctx;
    if (!r->gone)
        crl_req_json(r, 200, crl_sandbox_json(sb));
    crl_req_pending_done(r);
}

void crl_h_sandbox_inspect(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    json_t *lost = NULL;
    if (crl_req_sandbox(r, &err) < 0 && (lost = crl_records_lost(r->api->host, r->route.id)))
        crl_req_json(r, 200, json_incref(lost)); /* the previous run's: lost, and why */
    else if (!r->sb)
        crl_req_error(r, &err);
    else
        crl_req_json(r, 200, crl_h_traj_sandbox_json(r->sb, crl_sandbox_json(r->sb)));
}

void crl_h_sandbox_destroy(struct crl_req *r)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_req_sandbox(r, &err) < 0) {
        crl_req_error(r, &err);
        return;
    }
    r->pending++;
    if (crl_host_destroy(r->api->host, r->sb, "destroyed", destroyed, r, &err) < 0) {
        r->pending--;
        crl_req_error(r, &err);
    }
}
