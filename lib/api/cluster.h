/* The API's side of cluster mode (lib/cluster/): this host's membership,
 * the record it publishes, which host owns a sandbox, where a create goes,
 * and the hosts' endpoints (/v1/hosts). */
#ifndef CRL_API_CLUSTER_H
#define CRL_API_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#include "../cluster/member.h"
#include "../core/spec.h"
#include "../util/err.h"
#include "handlers_images.h"

struct crl_api;
struct crl_req;
struct crl_cluster;

struct crl_cluster_config {
    const char *etcd;      /* NULL: no cluster (a single host) */
    const char *advertise; /* http://ADDR:PORT */
    unsigned lease_ttl_s;  /* 0: 10 */
};

int crl_cluster_start(struct crl_api *a, const struct crl_cluster_config *cfg,
                      struct crl_cluster **out, struct crl_err *err);
void crl_cluster_stop(struct crl_cluster *c);

/* Which host owns sandbox `id`: 0 this one (or an id that names no
 * host: this host answers it), 1 another (its id and address into host
 * and addr), -1 with *err when no host can answer for it (its host is
 * lost, or unknown to the cluster). */
int crl_cluster_owner(struct crl_cluster *c, const char *id, char *host, size_t hcap, char *addr,
                      size_t acap, struct crl_err *err);

/* A create's placement, before this host makes anything: false when this
 * host makes it; true when it was passed on, or answered (no host has
 * room, this host is not a member). */
bool crl_cluster_place_create(struct crl_req *r, const struct crl_spec *spec);

/* A create placed here of an image this host lacks: true when it now
 * waits for the image to be pulled from another host (crl_h_images_pull(),
 * `done` runs when it is here or cannot be had), or was answered with why
 * not; false when it goes on (the image is here, no cluster, pulled once
 * already). */
bool crl_cluster_pull_image(struct crl_req *r, const struct crl_spec *spec, crl_pull_done_fn done);

/* A list of sandboxes in a cluster: this host's and every other reachable
 * host's, merged, then filtered and paged as one (crl_req_list).  false:
 * this host's alone (no cluster, or the request was forwarded). */
bool crl_cluster_list_sandboxes(struct crl_req *r, json_t *local);

/* GET /v1/hosts; POST and DELETE /v1/hosts/{name}/drain. */
void crl_h_hosts_list(struct crl_req *r);
void crl_h_host_drain(struct crl_req *r);
void crl_h_host_drain_free(struct crl_req *r);

#endif
