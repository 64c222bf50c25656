/* The host and its sandboxes: /healthz, /metrics, GET /v1/host, and
 * /v1/sandboxes[/{id}]. */
#ifndef CRL_API_HANDLERS_SANDBOXES_H
#define CRL_API_HANDLERS_SANDBOXES_H

struct crl_req;

/* GET /healthz: 200 {"status": "ok", "host_id"} while the daemon serves. */
void crl_h_healthz(struct crl_req *r);
/* GET /metrics: the host's and the trajectories' counters, Prometheus text. */
void crl_h_metrics(struct crl_req *r);
/* GET /v1/host: what the host is and holds. */
void crl_h_host(struct crl_req *r);
/* GET /v1/sandboxes[?label=k=v...]: those with every label asked for. */
void crl_h_sandboxes_list(struct crl_req *r);
/* The list's answer from `list` (taken): this host's, or a cluster's
 * merged (cluster.c). */
void crl_h_sandboxes_list_answer(struct crl_req *r, json_t *list);
/* POST /v1/sandboxes: 201 once the sandbox is ready.  Its state is the
 * trajectory its spec names, opened before the sandbox exists and handed
 * to it once made; the free hook closes one never handed over. */
void crl_h_sandbox_create(struct crl_req *r);
void crl_h_sandbox_create_free(struct crl_req *r);
/* GET /v1/sandboxes/{id}: the sandbox, with its trajectory's place. */
void crl_h_sandbox_inspect(struct crl_req *r);
/* DELETE /v1/sandboxes/{id}: 200 with the sandbox once it is gone. */
void crl_h_sandbox_destroy(struct crl_req *r);

#endif
