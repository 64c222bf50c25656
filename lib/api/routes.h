/* What serves each entry of the route table (routes.def): the hooks the
 * server (server.c) and a trajectory's step (traj_step.c) call. */
#ifndef CRL_API_ROUTES_H
#define CRL_API_ROUTES_H

#include <stdbool.h>
#include <stddef.h>

struct crl_req;

struct crl_handler {
    /* The body is in (or none comes): answer, or suspend and answer later. */
    void (*run)(struct crl_req *r);
    /* At the headers, for an endpoint whose body may be large: true when it
     * takes the body chunk by chunk (body), false to have it held whole for
     * run.  It may answer already (an error). */
    bool (*begin)(struct crl_req *r);
    /* A chunk: as crl_h_files_put_body() says (handlers_files.h). */
    int (*body)(struct crl_req *r, const char *data, size_t *len);
    /* The request was resumed and is still unanswered: it waited for the
     * sandbox, or for room in a pipe. */
    void (*resumed)(struct crl_req *r);
    /* The client read some of a streamed answer: a producer held back may
     * go on. */
    void (*drained)(struct crl_req *r);
    /* The per-endpoint state (request.h): stop what runs for a request its
     * client left (cancel), and free it when the request goes (free). */
    void (*cancel)(struct crl_req *r);
    void (*free)(struct crl_req *r);
    /* A trajectory's step of this kind (traj_step.c); changes: it may
     * change the sandbox's state, so a checkpoint follows it. */
    const char *step;
    bool changes;
    /* A step that sets how the sandbox runs rather than what is in it
     * (its network): done again when the step is answered from the log,
     * so that a sandbox that goes live after a replay runs as it did. */
    void (*replayed)(struct crl_req *r);
    size_t body_max; /* a JSON body's limit, when tighter than the daemon's */
};

/* The handler of entry `entry` of the table (crl_route_find()'s), or NULL. */
const struct crl_handler *crl_routes_handler(int entry);

#endif
