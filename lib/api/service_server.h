/* The sandboxes' services (lib/core/services.h), served by corrald.
 *
 * A sandbox's TCP to a service's address is redirected by its network's
 * table (lib/os/vnet.h) to the service port of the host, where this
 * server accepts it.  Who is calling is the connection's source (a
 * sandbox's address: crl_resolver_sandbox_at), what it called is its
 * original destination (SO_ORIGINAL_DST): a service of that sandbox's spec,
 * at its port, or the connection is closed.  Then:
 *   - an http-mock's connection goes to a libmicrohttpd daemon of its own
 *     (no listener, no auth, nothing of the API: only the mock's routes),
 *     which answers from the route, after its delay, and records the
 *     exchange: in the sandbox's log (GET /v1/sandboxes/{id}/services),
 *     in corrald's log, and in the next step of its trajectory;
 *   - a sandbox service's connection is relayed to its port on the
 *     loopback of the other sandbox (opened in its network namespace), a
 *     byte pump each way, counted in the log.
 * What a sandbox sends is hostile: bodies are held up to a limit, and what
 * is recorded of them is cut at CRL_SVC_RECORD_MAX. */
#ifndef CRL_API_SERVICE_SERVER_H
#define CRL_API_SERVICE_SERVER_H

#include <jansson.h>
#include <stdint.h>

#include "../util/err.h"

#define CRL_SVC_RECORD_MAX (64u << 10) /* of a body, in a recorded exchange */
#define CRL_SVC_LOG_MAX 256            /* exchanges a sandbox's log keeps */
#define CRL_SVC_PENDING_MAX 64         /* and a trajectory's step records, the newest */

struct crl_api;
struct crl_req;
struct crl_sandbox;
struct MHD_Daemon;

/* Listen on the host's service port (every address; connections from
 * outside the sandboxes' range are closed).  Once; later calls return 0. */
int crl_service_server_start(struct crl_api *a, struct crl_err *err);
void crl_service_server_stop(struct crl_api *a);
/* The mocks' daemon, for the API's loop glue (NULL before start). */
struct MHD_Daemon *crl_service_server_daemon(const struct crl_api *a);

/* The exchanges since the last call (a new array, [] when none): what a
 * trajectory step records as its "services"; *dropped says how many older
 * ones did not fit (CRL_SVC_PENDING_MAX). */
json_t *crl_service_take_pending(struct crl_sandbox *sb, uint64_t *dropped);

/* GET /v1/sandboxes/{id}/services */
void crl_h_services(struct crl_req *r);

#endif
