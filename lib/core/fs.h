/* The filesystem API over a sandbox's backend (docs/api.md, Filesystem):
 * an operation (stat, list, mkdir, move, remove) or a watch, run by the
 * shared implementation (lib/helper/fsop.h) where the backend runs it (its
 * stream op, kinds CRL_STREAM_FS and CRL_STREAM_WATCH), its answer read
 * here.  Backend-neutral, as exec.c is.
 *
 * What comes back was made inside the sandbox, so it is checked before it
 * goes anywhere: an answer must be one JSON object of bounded size, an
 * event a JSON object of a known type with string paths, which is built
 * again from those fields alone. */
#ifndef CRL_CORE_FS_H
#define CRL_CORE_FS_H

#include <jansson.h>
#include <stdbool.h>

#include "sandbox.h"

#define CRL_FS_MAX_ANSWER (64u << 20) /* a list of 100,000 entries fits */
#define CRL_FS_MAX_EVENT 16384        /* one event's line */

struct crl_fs_call;
struct crl_fs_watch;

/* The answer (a new reference, the callee's) or why there is none. */
typedef void (*crl_fs_done_fn)(void *ctx, json_t *answer, const struct crl_err *err);

/* Run `request` (borrowed: {"op", "path", ...}) as uid:gid of the sandbox.
 * `done` runs once, later, unless the call is cancelled first. */
struct crl_fs_call *crl_fs_call(struct crl_sandbox *sb, json_t *request, uid_t uid, gid_t gid,
                                crl_fs_done_fn done, void *ctx, struct crl_err *err);
/* Its client left: no callback; what runs finishes on its own. */
void crl_fs_call_cancel(struct crl_fs_call *c);

struct crl_fs_watch_cbs {
    void (*started)(void *ctx);                          /* the helper runs */
    void (*event)(void *ctx, json_t *event);             /* borrowed */
    void (*ended)(void *ctx, const struct crl_err *err); /* NULL err: the directory went */
};

/* Watch `path` (with `recursive`, what is below it too) as uid:gid. */
struct crl_fs_watch *crl_fs_watch(struct crl_sandbox *sb, const char *path, bool recursive,
                                  uid_t uid, gid_t gid, const struct crl_fs_watch_cbs *cbs,
                                  void *ctx, struct crl_err *err);
/* Take no more events for now (a slow reader: the helper blocks, and the
 * kernel's queue, not corrald, holds what comes, reporting an overflow). */
void crl_fs_watch_hold(struct crl_fs_watch *w, bool hold);
/* End it: no more callbacks. */
void crl_fs_watch_stop(struct crl_fs_watch *w);

/* A helper's end (enum crl_stream_status, or 128 + a signal) and last
 * line as the error a client gets; 0 for CRL_STREAM_OK. */
int crl_fs_error(int code, const char *msg, struct crl_err *err);

#endif
