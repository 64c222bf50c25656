/* libcorral's client: the v1 HTTP/JSON API (docs/api.md) over libcurl, on
 * corrald's unix socket or its loopback TCP listener with a bearer token.
 *
 * A `struct crl_client` owns one curl easy handle, so the connection is kept
 * alive between requests.  It is not thread-safe: use one client per thread
 * (each thread opens its own; they share nothing).
 *
 * Every call follows the error contract of lib/util/err.h: it returns -1 and
 * fills *err.  An error answer from corrald becomes err->code (the server's
 * `code`, through crl_errc_from_name()) and err->msg (its `message`);
 * failing to reach corrald is CRL_E_UNAVAILABLE. */
#ifndef CRL_CLIENT_CLIENT_H
#define CRL_CLIENT_CLIENT_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../util/err.h"

#define CRL_CLIENT_DEFAULT_URL "unix:///run/corral/corrald.sock"

struct crl_client;

/* Connect to `url` (`unix:///abs/path.sock` or `http://HOST:PORT`) with
 * `token` (NULL or "" for none).  A NULL url means $CORRAL_URL, else
 * CRL_CLIENT_DEFAULT_URL; a NULL token means $CORRAL_TOKEN.  Nothing is
 * sent yet: an unreachable daemon shows at the first request.  With
 * $CORRAL_DEBUG set, each request's trace (headers, not bodies) goes to
 * stderr with the Authorization header's value redacted. */
int crl_client_open(const char *url, const char *token, struct crl_client **out,
                    struct crl_err *err);
void crl_client_close(struct crl_client *c);
static inline void crl__client_closep(struct crl_client **c)
{
    crl_client_close(*c);
}
/* A client closed when it goes out of scope. */
#define cleanup_client __attribute__((cleanup(crl__client_closep)))
/* The URL the client talks to, for messages. */
const char *crl_client_url(const struct crl_client *c);

/* While *flag is non-zero, requests stop at their next progress check (at
 * least once a second) with CRL_E_UNAVAILABLE "interrupted".  A signal
 * handler sets it; NULL turns the check off. */
void crl_client_set_cancel(struct crl_client *c, volatile sig_atomic_t *flag);
/* Did the last failed request stop because of the cancel flag? */
bool crl_client_cancelled(const struct crl_client *c);
/* The HTTP status of the last request's answer (an error answer's too), 0
 * when none came (corrald unreachable, the transfer cut before an answer). */
long crl_client_last_status(const struct crl_client *c);

/* One request.  `path` starts with '/' and is sent as is (the helpers
 * below escape their parameters).  `body` (borrowed, may be NULL) is sent
 * as JSON.  On a 2xx answer, *out (if out is not NULL) receives the parsed
 * body, or NULL when it is empty; the caller json_decref()s it.  *status
 * (if not NULL) receives the HTTP status, 0 if none came. */
int crl_client_request(struct crl_client *c, const char *method, const char *path, json_t *body,
                       json_t **out, long *status, struct crl_err *err);

/* Called for each line of an NDJSON answer, parsed; the callee borrows it.
 * Return -1 with *err filled to stop the transfer with that error. */
typedef int (*crl_client_line_fn)(void *ctx, json_t *line, struct crl_err *err);

/* A request whose 2xx answer is NDJSON: `on_line` sees each line as it
 * arrives.  An error answer is mapped to *err as crl_client_request does. */
int crl_client_stream(struct crl_client *c, const char *method, const char *path, json_t *body,
                      crl_client_line_fn on_line, void *ctx, long *status, struct crl_err *err);

/* ---- typed helpers ---- */

/* Is `id` shaped like a sandbox id (1-63 of [A-Za-z0-9._-])?  The helpers
 * refuse other ids with CRL_E_INVALID before sending anything. */
bool crl_client_id_ok(const char *id);

/* A connection of its own to corrald, switched by `GET path` (Upgrade:
 * `protocol`) to that protocol: its socket, whose bytes are the protocol's
 * from here on (corral-tcp: the stream of a sandbox's port).  -1 with
 * *err as corrald answered (the 503 of a port nothing listens on, say). */
int crl_client_tunnel(struct crl_client *c, const char *path, const char *protocol,
                      struct crl_err *err);

/* POST /v1/sandboxes with `spec` (borrowed, NULL for the defaults); *out
 * is the ready sandbox. */
int crl_client_create(struct crl_client *c, json_t *spec, json_t **out, struct crl_err *err);
/* GET /v1/sandboxes/{id}. */
int crl_client_inspect(struct crl_client *c, const char *id, json_t **out, struct crl_err *err);
/* GET /v1/sandboxes with every "k=v" of labels[0..n) as a selector. */
int crl_client_list(struct crl_client *c, const char *const *labels, size_t n, json_t **out,
                    struct crl_err *err);
/* GET of a collection (/v1/volumes, ...) with `label=K=V` selectors. */
int crl_client_list_of(struct crl_client *c, const char *collection, const char *const *labels,
                       size_t n, json_t **out, struct crl_err *err);
/* DELETE /v1/sandboxes/{id}; *out (may be NULL) is the destroyed sandbox. */
int crl_client_destroy(struct crl_client *c, const char *id, json_t **out, struct crl_err *err);

/* POST /v1/sandboxes/{id}/exec with `req` (borrowed; "stream" is left as
 * given); *out is the result object. */
int crl_client_exec(struct crl_client *c, const char *id, json_t *req, json_t **out,
                    struct crl_err *err);

enum crl_client_fd { CRL_CLIENT_STDOUT = 1, CRL_CLIENT_STDERR = 2 };

/* Output of a streamed command, decoded (base64 chunks included), in the
 * order corrald sent it.  Return -1 with *err filled to stop. */
typedef int (*crl_client_output_fn)(void *ctx, enum crl_client_fd which, const char *data,
                                    size_t len, struct crl_err *err);

/* Run a command with "stream": true (set on a copy of `req`, which is
 * borrowed) at `path` (the exec endpoint, or a session's run endpoint);
 * output goes to on_output as it arrives and *result receives the final
 * `result` object.  A stream that ends without one is an error. */
int crl_client_run_stream(struct crl_client *c, const char *path, json_t *req,
                          crl_client_output_fn on_output, void *ctx, json_t **result,
                          struct crl_err *err);
/* crl_client_run_stream() on POST /v1/sandboxes/{id}/exec. */
int crl_client_exec_stream(struct crl_client *c, const char *id, json_t *req,
                           crl_client_output_fn on_output, void *ctx, json_t **result,
                           struct crl_err *err);

/* Sessions: open one (`req` borrowed, may be NULL) and get its id into
 * sid[0..cap); run a command in it streamed; close it. */
int crl_client_session_open(struct crl_client *c, const char *id, json_t *req, char *sid,
                            size_t cap, struct crl_err *err);
int crl_client_session_run_stream(struct crl_client *c, const char *id, const char *sid,
                                  json_t *req, crl_client_output_fn on_output, void *ctx,
                                  json_t **result, struct crl_err *err);
int crl_client_session_close(struct crl_client *c, const char *id, const char *sid,
                             struct crl_err *err);

/* The exit status a shell would give for an exec result: exit_code when the
 * command exited, 128+n when signal n killed it (137 for oom and killed),
 * 124 on timeout (like timeout(1)); -1 if `result` is not a result. */
int crl_client_exit_status(json_t *result);

/* ---- files ---- */

/* PUT the bytes read from `fd` to `path` in sandbox `id`.  `size` is their
 * count: exactly that many are sent, and an end of file before it fails
 * the upload; -1 sends what is read until end of file, chunked.
 * `content_type` NULL sends a file; "application/x-tar" an archive to
 * extract into the directory `path`.  `mode` (< 0: corrald's default)
 * becomes ?mode=.  *out (may be NULL) is corrald's answer. */
int crl_client_put(struct crl_client *c, const char *id, const char *path, int fd, long long size,
                   const char *content_type, int mode, json_t **out, struct crl_err *err);

/* Where an upload's bytes come from: fill buf[0..len) and return how many
 * were put there, 0 at the end, or -1 with *err filled to abort the upload
 * (corrald then sees a broken request, never a complete one). */
typedef ssize_t (*crl_client_source_fn)(void *ctx, char *buf, size_t len, struct crl_err *err);

/* A source of bytes already in memory: ctx is a struct crl_client_mem,
 * {.data, .len} (off from 0). */
struct crl_client_mem {
    const char *data;
    size_t len, off;
};
ssize_t crl_client_mem_source(void *ctx, char *buf, size_t len, struct crl_err *err);

/* crl_client_put() with the bytes from `source`. */
int crl_client_put_source(struct crl_client *c, const char *id, const char *path,
                          crl_client_source_fn source, void *ctx, long long size,
                          const char *content_type, int mode, json_t **out, struct crl_err *err);

/* Any upload: `method` `path` (sent as is) with the bytes from `source` as
 * the body, `size` of them (-1: chunked, to the source's end), as
 * `content_type` (NULL: application/octet-stream).  *out (may be NULL) is
 * corrald's answer, parsed. */
int crl_client_upload(struct crl_client *c, const char *method, const char *path,
                      crl_client_source_fn source, void *ctx, long long size,
                      const char *content_type, json_t **out, struct crl_err *err);

/* ---- images ---- */

/* Is `name` made of the characters of an image reference (NAME[:TAG],
 * REGISTRY/PATH:TAG, an id), at most 255 of them?  Such a name goes into
 * /v1/images/{name} as it is. */
bool crl_client_image_name_ok(const char *name);
/* POST /v1/images[?name=NAME][&ref=REF] with an archive (docker-archive or
 * oci-archive, maybe compressed) from `source`, `size` bytes (-1: chunked);
 * `ref` (may be NULL) picks one image of several.  *out is the imported
 * image. */
int crl_client_image_import(struct crl_client *c, const char *name, const char *ref,
                            crl_client_source_fn source, void *ctx, long long size, json_t **out,
                            struct crl_err *err);
/* The same with the archive read from `fd`: exactly `size` bytes, or to
 * its end when `size` is -1. */
int crl_client_image_import_fd(struct crl_client *c, const char *name, const char *ref, int fd,
                               long long size, json_t **out, struct crl_err *err);

/* Called once the answer to a GET of a path is known to be good, before
 * any byte of it: `is_dir` says whether a tar stream of a directory
 * follows; `mode` is a file's permission bits in the sandbox (07777), or
 * -1 if corrald did not say.  Set *fd to where the bytes go (the callee
 * keeps ownership) and return 0, or return -1 with *err filled. */
typedef int (*crl_client_sink_fn)(void *ctx, bool is_dir, int mode, int *fd, struct crl_err *err);

/* GET `path` of sandbox `id` into the descriptor `sink` chooses.  Writes to
 * a socket never raise SIGPIPE. */
int crl_client_get(struct crl_client *c, const char *id, const char *path, crl_client_sink_fn sink,
                   void *ctx, struct crl_err *err);

/* GET `path` (sent as is, any endpoint) and write a 2xx answer's body to
 * `fd` byte for byte as it arrives; an error answer is mapped to *err as
 * crl_client_request does, and nothing of it reaches fd. */
int crl_client_download(struct crl_client *c, const char *path, int fd, struct crl_err *err);

#endif
