/* The HTTP/JSON API v1 (docs/api.md) over libmicrohttpd, driven from the
 * host's event loop: a unix socket always, a loopback TCP listener with a
 * bearer token when asked. */
#ifndef CRL_API_API_H
#define CRL_API_API_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/host.h"
#include "../util/err.h"

struct crl_api_config {
    const char *unix_path;     /* NULL: none */
    const char *tcp_listen;    /* "127.0.0.1:PORT", NULL: none */
    const char *token;         /* required for TCP */
    bool allow_remote;         /* allow a non-loopback TCP address */
    size_t max_body;           /* JSON request bodies */
    unsigned checkpoint_gc_s;  /* the checkpoint collector's period and grace; 0: never */
    const char *importer_path; /* corral-import; NULL: next to this program */
    /* cluster mode (cluster.h): etcd's members (NULL: a single host),
     * where the others reach this host's API, the lease's time */
    const char *cluster_etcd;
    /* trajectories and their checkpoints live in <shared_dir>/trajectories,
     * which every host of the cluster sees (NULL: <state>/trajectories) */
    const char *shared_dir;
    const char *advertise;
    unsigned cluster_lease_s;
};

struct crl_api;

int crl_api_start(struct crl_host *h, const struct crl_api_config *cfg, struct crl_api **out,
                  struct crl_err *err);
/* The TCP port actually bound (for "127.0.0.1:0"), 0 if none. */
unsigned crl_api_tcp_port(const struct crl_api *a);
void crl_api_stop(struct crl_api *a);

#endif
