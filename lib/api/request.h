/* Internal to the API layer: one HTTP request being served. */
#ifndef CRL_API_REQUEST_H
#define CRL_API_REQUEST_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "../core/backend.h"
#include "../core/exec.h"
#include "../functions/functions.h"
#include "../core/host.h"
#include "../core/session.h"
#include "../util/buf.h"
#include "api.h"
#include "router.h"

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
    struct crl_trajs *trajs;         /* <state>/trajectories */
};

struct crl_req {
    struct crl_api *api;
    struct MHD_Connection *conn;
    const char *method;
    char url[128]; /* for logs */
    struct crl_route route;
    bool tcp;
    bool dispatched;
    bool suspended;
    bool gone;            /* MHD finished with the connection; only async callbacks remain */
    bool client_gone;     /* the client hung up: what it asked for is no one's */
    struct crl_watch hup; /* while suspended: MHD does not watch the socket, we do */
    /* the request body, for JSON endpoints */
    struct crl_buf body;
    size_t body_limit;
    struct crl_err body_err;
    bool body_failed;
    /* a response decided while suspended, queued once resumed */
    struct MHD_Response *resp;
    unsigned status;
    /* per endpoint */
    struct crl_sandbox *sb; /* a reference is held */
    struct crl_exec *exec;
    struct crl_session *session;
    /* streamed responses (NDJSON, tar) */
    bool streaming;
    struct crl_buf out;
    bool out_done, out_error;
    bool out_paused;  /* the command's output is held back until the client reads */
    char carry[2][4]; /* an incomplete UTF-8 sequence held for the next chunk */
    size_t carry_len[2];
    /* files */
    struct crl_open_req open;
    struct crl_stream_req stream;
    char path[4096];
    int fd; /* an upload's end of the stream */
    bool upload_failed;
    uint64_t bytes;
    struct crl_err upload_err;
    struct crl_watch w;
    bool stream_exited;
    int stream_code;
    /* images: the import this request feeds */
    struct crl_import *import;
    /* functions: the call this request waits for */
    struct crl_fcall *fcall;
    /* trajectories (handlers_traj.c): the step this request is, a create's
     * trajectory until its sandbox holds it, and an upload held whole */
    struct crl_traj_call *tcall;
    struct crl_traj *topen;
    struct crl_req *twait_next; /* waiting for its sandbox's step in progress */
    bool twaiting;
    bool body_held;
    size_t body_off;
    unsigned pending; /* async operations that will still call back */
    struct crl_req *next;
};

/* Respond now (in the access handler) or, if suspended, on resume. */
void crl_req_respond(struct crl_req *r, unsigned status, struct MHD_Response *resp);
void crl_req_json(struct crl_req *r, unsigned status, json_t *body);
void crl_req_error(struct crl_req *r, const struct crl_err *err);
/* {"error": {"code", "message"}} */
json_t *crl_req_error_json(const struct crl_err *err);
void crl_req_suspend(struct crl_req *r);
void crl_req_resume(struct crl_req *r);
/* A query parameter (URL-decoded), or NULL. */
const char *crl_req_query(struct crl_req *r, const char *key);
/* Look up the route's sandbox, holding a reference in r->sb. */
int crl_req_sandbox(struct crl_req *r, struct crl_err *err);
/* Streamed output: append bytes, wake the reader. */
void crl_req_stream_append(struct crl_req *r, const char *data, size_t len);
void crl_req_stream_end(struct crl_req *r, bool error);
/* One NDJSON line (the value is consumed); -1 if it could not be encoded. */
int crl_req_stream_json(struct crl_req *r, json_t *line);
struct MHD_Response *crl_req_stream_response(struct crl_req *r, const char *content_type);
/* An async operation finished; frees the request if MHD is done with it. */
void crl_req_pending_done(struct crl_req *r);

/* Write an upload's chunk into the nonblocking pipe `fd`.  Returns 0 once
 * all of it is written (*len is then 0); 1 when the pipe is full: r->w
 * waits for room and resumes the request, which the caller suspends, and
 * MHD hands the rest (*len bytes) again; -1 with errno when the reader is
 * gone.  r->bytes counts what was written. */
int crl_req_pipe_body(struct crl_req *r, int fd, const char *data, size_t *len);

/* Endpoint handlers, called once the request body is complete.  A handler
 * either responds or suspends and responds later. */
void crl_h_exec(struct crl_req *r);
void crl_h_session_open(struct crl_req *r);
void crl_h_session_run(struct crl_req *r);
/* Files: begin is called when the headers are in (a PUT streams its body
 * straight to the sandbox), body for each chunk, end when it is complete. */
void crl_h_files_begin(struct crl_req *r);
int crl_h_files_body(struct crl_req *r, const char *data, size_t *len);
void crl_h_files_end(struct crl_req *r);
void crl_h_files_cleanup(struct crl_req *r);
/* The stream reader took output: a paused tar stream may read on. */
void crl_h_files_drained(struct crl_req *r);
void crl_h_exec_cleanup(struct crl_req *r);
/* Images (handlers_images.c).  An import begins at the headers (it
 * starts the importer), takes each chunk of the body, and ends with it; the
 * others are plain JSON endpoints. */
void crl_h_images(struct crl_req *r);
void crl_h_images_import_begin(struct crl_req *r);
int crl_h_images_import_body(struct crl_req *r, const char *data, size_t *len);
void crl_h_images_cleanup(struct crl_req *r);
/* At shutdown: kill and reap every importer still running. */
void crl_h_images_stop(struct crl_api *a);
/* The stream reader took output: a held-back command may write on. */
void crl_h_exec_drained(struct crl_req *r);
/* Functions (handlers_functions.c): list, inspect, call.  Cleanup detaches
 * a call from a request that is going away: the call is killed. */
void crl_h_functions(struct crl_req *r);
void crl_h_functions_cleanup(struct crl_req *r);
/* POST .../pause and .../resume (handlers_actions.c). */
void crl_h_pause(struct crl_req *r);
void crl_h_resume(struct crl_req *r);
/* Trajectories (handlers_traj.c).  A step endpoint of a sandbox that
 * records a trajectory goes through crl_traj_take() first: it answers from
 * the log while fast-forwarding, or goes live and runs the endpoint with
 * crl_req_run_step(), whose answer crl_traj_capture() takes (from
 * crl_req_json/crl_req_error) to record it before it is sent. */
bool crl_traj_take(struct crl_req *r);
bool crl_traj_capture(struct crl_req *r, unsigned status, json_t *body);
/* A files GET of a step: the file's bytes, read whole. */
void crl_traj_capture_file(struct crl_req *r, int fd, uint64_t size);
/* PUT .../files at its headers: does this upload wait whole for its step? */
bool crl_traj_holds_upload(struct crl_req *r);
void crl_req_run_step(struct crl_req *r);
/* Create with "trajectory": open it before, hand it to the sandbox after. */
int crl_traj_create_begin(struct crl_req *r, const struct crl_spec *spec, struct crl_err *err);
int crl_traj_create_end(struct crl_req *r, struct crl_sandbox *sb, struct crl_err *err);
void crl_traj_create_abort(struct crl_req *r);
void crl_h_traj_cleanup(struct crl_req *r);
/* A sandbox's JSON, with its checkpoint state and place in its trajectory. */
json_t *crl_traj_sandbox_json(struct crl_sandbox *sb, json_t *o);
void crl_traj_req_free(struct crl_req *r);
void crl_h_trajectories(struct crl_req *r);
void crl_h_snapshot(struct crl_req *r);
void crl_h_fork(struct crl_req *r);
/* The trajectory layer, made at the API's start. */
struct crl_trajs *crl_api_trajs(struct crl_api *a);

#endif
