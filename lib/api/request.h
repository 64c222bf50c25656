/* Internal to the API layer: one HTTP request being served, and what every
 * endpoint's handler does with it (request.c): answer it, suspend it while
 * asynchronous work runs, stream an answer, feed an upload into a pipe.
 *
 * A handler knows its own request and nothing of the other endpoints: the
 * route table (routes.def) is the one place that knows them all, and the
 * server (server.c) drives a request through its entry's hooks. */
#ifndef CRL_API_REQUEST_H
#define CRL_API_REQUEST_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>

#include "../core/host.h"
#include "../util/buf.h"
#include "../util/err.h"
#include "../util/loop.h"
#include "api.h"
#include "idempotency.h"
#include "router.h"

struct crl_functions;
struct crl_trajs;
struct crl_import;
struct crl_handler;
struct crl_req;
struct crl_step;
struct crl_cluster;

/* What a trajectory's step (traj_step.c) hooks into its request. */
struct crl_step_ops {
    /* The endpoint answers: true when the step took the answer (it answers
     * once it is recorded), and with it the reference to body. */
    bool (*capture)(struct crl_req *r, unsigned status, json_t *body);
    void (*cancel)(struct crl_req *r); /* the client or MHD is gone */
    void (*free)(struct crl_req *r);   /* the request goes */
};

struct crl_api {
    struct crl_host *host;
    struct crl_api_config cfg;
    struct MHD_Daemon *unix_d, *tcp_d;
    struct crl_watch unix_w, tcp_w;
    int unix_fd, tcp_fd;
    unsigned tcp_port;
    char unix_path[4096];
    char *token;
    struct crl_req *reqs; /* every request in flight, to resume them at stop */
    /* image imports: each runs corral-import, which may outlive its request */
    struct crl_import *imports;
    unsigned n_imports;
    char importer_path[4096];
    struct crl_functions *functions; /* <state>/functions, read when asked */
    struct crl_tunnel *tunnels;      /* upgraded port-proxy connections (handlers_ports.c) */
    struct crl_attach *attaches;     /* upgraded attaches to processes (handlers_processes.c) */
    struct crl_trajs *trajs;         /* <state>/trajectories */
    struct crl_svc_server *svc;      /* the sandboxes' services, once one has any */
    struct crl_idem *idem;           /* creates' Idempotency-Keys (idempotency.h) */
    struct crl_cluster *cluster;     /* cluster mode (cluster.h), NULL for a single host */
};

/* libmicrohttpd on corrald's loop, for each daemon of the API's: its
 * epoll descriptor's watch runs it, and its log goes to corrald's. */
void crl_api_mhd_run(struct crl_watch *w, uint32_t ev);
void crl_api_mhd_log(void *cls, const char *fmt, va_list ap);

struct crl_req {
    struct crl_api *api;
    struct MHD_Connection *conn;
    const char *method;
    char url[128];               /* for logs */
    const char *path;            /* the whole path (MHD's, for the request's life) */
    struct crl_route route;      /* the ids in its path */
    const struct crl_handler *h; /* its entry in the route table; NULL before */
    bool tcp;
    bool dispatched;
    bool suspended;
    bool gone;            /* MHD finished with the connection; only async callbacks remain */
    bool client_gone;     /* the client hung up: what it asked for is no one's */
    struct crl_watch hup; /* while suspended: MHD does not watch the socket, we do */
    /* the request body: each chunk to h->body when it streams, else held */
    bool body_streamed;
    struct crl_buf body;
    size_t body_limit;
    struct crl_err body_err;
    bool body_failed;
    /* a response decided while suspended, queued once resumed */
    struct MHD_Response *resp;
    unsigned status;
    struct crl_sandbox *sb; /* a reference is held */
    /* streamed responses (NDJSON, tar) */
    bool streaming;
    struct crl_buf out;
    bool out_done, out_error;
    /* The endpoint's own: its handler allocates it and its entry's cancel
     * and free hooks let go of it; no one else looks inside. */
    void *state;
    /* A trajectory's step (traj_step.c), which wraps the endpoint: its
     * state and its hooks. */
    struct crl_step *step;
    const struct crl_step_ops *step_ops;
    unsigned pending;                    /* async operations that will still call back */
    char idem_key[CRL_IDEM_KEY_MAX + 1]; /* a create's Idempotency-Key, "" for none */
    /* a create's placement in a cluster (cluster.c): this host makes it
     * (placed), the hosts offered it so far and what each answered */
    bool placed;
    bool image_pulled; /* it waited for its image from another host, once */
    char tried[3][32];
    unsigned n_tried;
    char placement[160];
    struct crl_req *next;
};

/* Respond now (in the access handler) or, if suspended, on resume.  Takes
 * the response. */
void crl_req_respond(struct crl_req *r, unsigned status, struct MHD_Response *resp);
/* Respond with `body` as JSON.  Takes the reference to body (a trajectory's
 * step keeps it to record it, else it is freed once encoded). */
void crl_req_json(struct crl_req *r, unsigned status, json_t *body);
/* crl_req_json(r, status, body) if body is not NULL (taking it), else
 * crl_req_error(r, err): for what returns a new value or fails. */
void crl_req_json_or_error(struct crl_req *r, unsigned status, json_t *body,
                           const struct crl_err *err);
/* The one place an error becomes an HTTP status and a JSON body, with its
 * headers (Retry-After, WWW-Authenticate, Allow). */
void crl_req_error(struct crl_req *r, const struct crl_err *err);
/* {"error": {"code", "message"}}: a new reference, the caller's. */
json_t *crl_req_error_json(const struct crl_err *err);
/* Hold the connection while asynchronous work runs (a client that hangs
 * up meanwhile cancels it); resume it to answer, or to be called again. */
void crl_req_suspend(struct crl_req *r);
void crl_req_resume(struct crl_req *r);
/* A query parameter (URL-decoded), or NULL. */
const char *crl_req_query(struct crl_req *r, const char *key);
/* A boolean query parameter (true, false, 1, 0) into *out, `def` when it
 * is absent; -1 with CRL_E_INVALID naming it otherwise. */
int crl_req_query_bool(struct crl_req *r, const char *key, bool def, bool *out,
                       struct crl_err *err);
/* The `label=k=v` query parameters of a list: every one must match. */
struct crl_label_sel {
    struct crl_kv kv[CRL_SPEC_MAX_LABELS];
    size_t n;
};
int crl_req_label_sel(struct crl_req *r, struct crl_label_sel *ls, struct crl_err *err);
void crl_label_sel_free(struct crl_label_sel *ls);
/* A list endpoint's answer (docs/api.md, Lists): `answer` (taken) holds
 * the array `items`, which is ordered by its items' `order` field (NULL:
 * none) then `key`, filtered by the request's `state=S` (one of `states`;
 * NULL: the list has no state) and `label=K=V` (the items' `labels`, or
 * their spec's; no_labels: the list has none), and cut to the page that
 * `cursor` and `limit` ask for; `next_cursor` says where the next starts
 * (null: this was the last).  A bad parameter is a 400 that names it. */
struct crl_list_spec {
    const char *items;
    const char *order;
    const char *key;
    const char *const *states; /* NULL-terminated */
    bool no_labels;
};
void crl_req_list(struct crl_req *r, json_t *answer, const struct crl_list_spec *ls);
/* Look up the route's sandbox, holding a reference in r->sb. */
int crl_req_sandbox(struct crl_req *r, struct crl_err *err);
/* Streamed output (after crl_req_stream_response() was responded):
 * append bytes and wake the reader; end it, cut short on error. */
void crl_req_stream_append(struct crl_req *r, const char *data, size_t len);
void crl_req_stream_end(struct crl_req *r, bool error);
/* One NDJSON line.  Takes the reference to `line`; -1 if it could not be
 * encoded. */
int crl_req_stream_json(struct crl_req *r, json_t *line);
/* A response of unknown length read from r->out as it fills (the entry's
 * drained hook hears when the client took some), to pass to
 * crl_req_respond(). */
struct MHD_Response *crl_req_stream_response(struct crl_req *r, const char *content_type);
/* An async operation finished; frees the request if MHD is done with it. */
void crl_req_pending_done(struct crl_req *r);
/* The free hook of an endpoint whose state is plain memory. */
void crl_req_free_state(struct crl_req *r);
/* MHD is done with the request: what runs for it stops, and it is freed
 * once its async operations are over. */
void crl_req_finished(struct crl_req *r);

/* Write an upload's chunk into the nonblocking pipe `fd`.  Returns 0 once
 * all of it is written (*len is then 0); 1 when the pipe is full: `w`
 * waits for room and resumes the request, which the caller suspends, and
 * MHD hands the rest (*len bytes) again; -1 with errno when the reader is
 * gone.  *bytes (if not NULL) counts what was written. */
int crl_req_pipe_body(struct crl_req *r, int fd, struct crl_watch *w, uint64_t *bytes,
                      const char *data, size_t *len);

#endif
