/* The v1 API's routes: a method and path to an entry of the route table
 * (routes.def), its endpoint and its ids.  Pure string work, unit-tested and
 * fuzzed on its own (tests/unit/test_http.c, tests/fuzz/fuzz_router.c). */
#ifndef CRL_API_ROUTER_H
#define CRL_API_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

enum crl_endpoint {
    CRL_EP_NONE = 0,
    CRL_EP_HEALTHZ,
    CRL_EP_METRICS,
    CRL_EP_HOST,
    CRL_EP_HOSTS,            /* GET list (a cluster's, or this host alone) */
    CRL_EP_HOST_DRAIN,       /* POST drain, DELETE undo */
    CRL_EP_POOLS,            /* GET list */
    CRL_EP_POOL,             /* GET inspect, PUT set, DELETE remove */
    CRL_EP_VOLUMES,          /* GET list, POST create */
    CRL_EP_VOLUME,           /* GET inspect, DELETE remove */
    CRL_EP_IMAGES,           /* GET list, POST import */
    CRL_EP_IMAGE,            /* GET inspect, DELETE remove */
    CRL_EP_IMAGE_TAG,        /* POST; GET and DELETE: the image named "tag" */
    CRL_EP_IMAGE_GC,         /* POST; GET and DELETE: the image named "gc" */
    CRL_EP_BLOB,             /* GET: a blob of the image store, by digest */
    CRL_EP_SANDBOXES,        /* GET list, POST create */
    CRL_EP_SANDBOX,          /* GET inspect, DELETE destroy */
    CRL_EP_EXEC,             /* POST */
    CRL_EP_SESSIONS,         /* GET list, POST open */
    CRL_EP_SESSION,          /* DELETE close */
    CRL_EP_SESSION_RUN,      /* POST */
    CRL_EP_FILES,            /* GET read, PUT write */
    CRL_EP_CODE,             /* POST: a cell */
    CRL_EP_CODE_CONTEXTS,    /* GET list, POST create */
    CRL_EP_CODE_CONTEXT,     /* DELETE remove, POST restart */
    CRL_EP_FS,               /* GET stat|list, POST mkdir|move|remove */
    CRL_EP_FS_WATCH,         /* GET: NDJSON events */
    CRL_EP_PROCESSES,        /* GET list, POST start */
    CRL_EP_PROCESS,          /* GET inspect, DELETE forget */
    CRL_EP_PROCESS_OUTPUT,   /* GET: NDJSON from an offset */
    CRL_EP_PROCESS_STDIN,    /* POST: bytes to its stdin */
    CRL_EP_PROCESS_ATTACH,   /* GET with Upgrade: its terminal's bytes both ways */
    CRL_EP_PROCESS_ACTION,   /* POST signal|resize|wait */
    CRL_EP_SANDBOX_ACTION,   /* POST pause|resume|snapshot|fork, PATCH network, GET services */
    CRL_EP_PORT,             /* any method: a request to a port in the sandbox */
    CRL_EP_FUNCTIONS,        /* GET list */
    CRL_EP_FUNCTION,         /* GET inspect */
    CRL_EP_FUNCTION_CALL,    /* POST */
    CRL_EP_TRAJECTORIES,     /* GET list */
    CRL_EP_TRAJECTORY,       /* GET inspect, DELETE remove */
    CRL_EP_TRAJECTORY_STEPS, /* GET: NDJSON, a step a line */
    CRL_EP_TRAJECTORY_GC,    /* POST; GET and DELETE: the trajectory named "gc" */
    CRL_EP__COUNT
};

#define CRL_ROUTE_ID_MAX 64
#define CRL_ROUTE_NAME_MAX 256 /* an image name, CRL_IMAGE_NAME_MAX and its NUL */

struct crl_route {
    enum crl_endpoint ep;
    char id[CRL_ROUTE_ID_MAX];     /* sandbox id */
    char sub[CRL_ROUTE_ID_MAX];    /* session id, process id, or the action's name */
    char name[CRL_ROUTE_NAME_MAX]; /* image name: all of the path after /v1/images/;
                                      a function's name; a trajectory's id; a process's
                                      action */
    /* methods the endpoint takes, for 405 and Allow */
    const char *allow;
    int entry; /* the entry in routes.def for the method asked for, or -1 */
};

/* Match a request path (no query string) and method against the route
 * table (routes.def).  Returns false for an unknown path (404).  A known
 * path fills the route: route->entry is the index of the entry for
 * `method`, or -1 when the path does not take it (405: route->allow says
 * what it takes); a NULL method matches the path alone (entry -1). */
bool crl_route_find(const char *path, const char *method, struct crl_route *route);
/* crl_route_find(path, NULL, route): the path's endpoint, ids and Allow. */
bool crl_route_match(const char *path, struct crl_route *route);
/* Is `method` one of the comma-separated `allow` list? */
bool crl_route_allows(const struct crl_route *route, const char *method);
/* The table: how many entries, and an entry's method and pattern. */
int crl_route_count(void);
const char *crl_route_method(int entry);
const char *crl_route_pattern(int entry);

/* "Bearer <token>" against the expected token, in constant time. */
bool crl_auth_bearer_ok(const char *header, const char *token);

/* Parse "HOST:PORT" or "[V6]:PORT" for the TCP listener; `loopback` tells
 * whether it is 127.0.0.0/8 or ::1.  Returns -1 on a malformed address. */
struct sockaddr_storage;
int crl_parse_listen(const char *s, struct sockaddr_storage *ss, unsigned *len, bool *loopback);

#endif
