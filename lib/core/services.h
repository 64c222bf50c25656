/* Services a sandbox's agent talks to: the `services` list of a spec,
 * parsed and validated here once, and what the daemon decides with.
 *
 *   "services": [
 *     {"name": "shop", "kind": "http-mock", "port": 80, "routes": [ROUTE...]},
 *     {"name": "db", "kind": "sandbox", "sandbox": "sb-...", "port": 5432}
 *   ]
 *   ROUTE = {"method": "GET", "path": GLOB, "status": 200,
 *            "headers": {"Content-Type": "..."}, "body": "..." | JSON,
 *            "delay_ms": 0}
 *
 * A service is reached by its name from inside its sandbox only: the
 * sandbox's resolver answers the name with the service's address (index k
 * of the list: CRL_SERVICE_NET + k + 1, in the benchmarking range no real
 * host holds), and TCP to that address and the service's port reaches it;
 * nothing else does.  "kind" may be left out: a service with "sandbox" is
 * one, else an http-mock.  An http-mock answers HTTP/1.1 on its port (80
 * unless given) with its first route whose method ("*" or left out: any)
 * and path match.  GLOB is an fnmatch(3) pattern of the path ('*' matches
 * any run of characters, '/' included; "?", "[...]"); the query string is
 * not matched.  "body" is sent as it is when a
 * string, else as its JSON text (with Content-Type application/json unless
 * the route's headers say otherwise).  A sandbox service is `port` on the
 * loopback of another sandbox of the same owner. */
#ifndef CRL_CORE_SERVICES_H
#define CRL_CORE_SERVICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "netpolicy.h"

#define CRL_SERVICE_NET 0xc6120000u /* 198.18.0.0/24, host order */
#define CRL_SERVICES_MAX 32
#define CRL_SERVICE_ROUTES_MAX 128
#define CRL_SERVICE_BODY_MAX (1u << 20)   /* a route's body */
#define CRL_SERVICE_BODIES_MAX (4u << 20) /* every body of a sandbox's services */
#define CRL_SERVICE_DELAY_MAX_MS 60000u

enum crl_service_kind { CRL_SERVICE_MOCK, CRL_SERVICE_SANDBOX };

struct crl_mock_route {
    char method[16]; /* "" for any */
    char *path;      /* a pattern */
    unsigned status;
    json_t *headers; /* an object of strings */
    char *body;
    size_t body_len;
    bool json_body; /* given as JSON: sent with its JSON type unless headers say */
    json_t *body_json;
    unsigned delay_ms;
};

struct crl_service {
    char name[CRL_NET_NAME_MAX + 1]; /* lowercased, no trailing dot */
    enum crl_service_kind kind;
    unsigned port;
    char sandbox[64]; /* CRL_SERVICE_SANDBOX: its id */
    struct crl_mock_route *routes;
    size_t nroutes;
};

struct crl_services {
    struct crl_service *v;
    size_t n;
};

/* Parse and validate a `services` array into *out (initialised by the
 * call; on failure it holds nothing to free).  Errors are CRL_E_INVALID
 * and name the field ("services[1].routes[0].status") and what is wrong. */
int crl_services_from_json(json_t *services, struct crl_services *out, struct crl_err *err);
/* The list as given, normalised: it parses back into the same. */
json_t *crl_services_to_json(const struct crl_services *s);
void crl_services_free(struct crl_services *s);

/* The service of this name (case-insensitive, a trailing dot tolerated),
 * or NULL; *index its place in the list. */
const struct crl_service *crl_services_find(const struct crl_services *s, const char *name,
                                            size_t *index);
/* The service at address addr:port (host order), or NULL. */
const struct crl_service *crl_services_at(const struct crl_services *s, uint32_t addr,
                                          unsigned port);
static inline uint32_t crl_service_address(size_t index)
{
    return CRL_SERVICE_NET + (uint32_t)index + 1;
}

/* A mock's first route for this method and path (no query), or NULL. */
const struct crl_mock_route *crl_mock_match(const struct crl_service *svc, const char *method,
                                            const char *path, size_t *index);

#endif
