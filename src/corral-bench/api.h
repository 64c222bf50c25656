/* The benches' calls to corrald: the spec of a bench's sandbox, an exec
 * timed to its answer, sandboxes tracked so that none outlives a run, and
 * calls shared by threads with a client each. */
#ifndef CORRAL_BENCH_API_H
#define CORRAL_BENCH_API_H

#include <jansson.h>
#include <stddef.h>

#include "../../lib/client/client.h"
#include "../../lib/util/err.h"

#define CRL_BENCH_ID_MAX 64 /* a sandbox id and its NUL */
#define CRL_BENCH_MAX_CONC 2

/* A sandbox spec labelled corral-bench=1: of `image` unless NULL (corrald's
 * default), with resources.memory_mb unless 0 (64 MiB keeps admission
 * control out of the way).  NULL when out of memory. */
json_t *crl_bench_spec(const char *image, int memory_mb);

/* GET /v1/host: its host_id into host_id[0..cap) ("?" if it has none), and
 * the answer into *out if not NULL. */
int crl_bench_host(struct crl_client *c, char *host_id, size_t cap, json_t **out,
                   struct crl_err *err);

/* POST /v1/sandboxes/{id}/exec of req, timed from the request to its whole
 * answer into *ms; the command must exit 0.  *out (may be NULL) gets the
 * result.  Fails at once if a signal asked the bench to stop. */
int crl_bench_exec(struct crl_client *c, const char *id, json_t *req, double *ms, json_t **out,
                   struct crl_err *err);

/* The sandboxes a bench made and has not destroyed yet, on client c; `who`
 * ("bench images") names the bench in what crl_bench_sandboxes_clear()
 * says.  Zero-initialise it, then set c and who. */
struct crl_bench_sandboxes {
    struct crl_client *c;
    const char *who;
    char (*ids)[CRL_BENCH_ID_MAX];
    size_t n, cap;
};
/* Create a sandbox of spec, timed to the 201 into *ms (may be NULL), its id
 * into id[0..CRL_BENCH_ID_MAX) (may be NULL) and tracked. */
int crl_bench_sandbox_create(struct crl_bench_sandboxes *s, json_t *spec, char *id, double *ms,
                             struct crl_err *err);
/* Track sandbox `id`, made otherwise (a fork); if it cannot be, it is
 * destroyed at once and the error is out of memory. */
int crl_bench_sandbox_track(struct crl_bench_sandboxes *s, const char *id, struct crl_err *err);
/* Destroy sandbox `id` (a caller's copy, not one of s->ids) and forget it;
 * id[0] becomes 0.  An empty id, or a sandbox already gone, is no error. */
int crl_bench_sandbox_destroy(struct crl_bench_sandboxes *s, char *id, struct crl_err *err);
/* Destroy the newest tracked sandbox. */
int crl_bench_sandbox_destroy_last(struct crl_bench_sandboxes *s, struct crl_err *err);
/* On the way out: destroy every one still tracked, newest first, saying on
 * stderr which would not go, and free the table. */
void crl_bench_sandboxes_clear(struct crl_bench_sandboxes *s);

/* Call i of a phase, on the calling thread's own client. */
typedef int (*crl_bench_call_fn)(struct crl_client *c, void *ctx, size_t i, struct crl_err *err);
/* n calls of fn shared by `conc` threads (at most CRL_BENCH_MAX_CONC),
 * each with a client of its own on `url` (NULL: $CORRAL_URL) and a
 * contiguous share of the i, so that fn may write sample i unlocked.
 * *wall_s gets the phase's wall time.  The first failure is the phase's;
 * a signal stops it. */
int crl_bench_parallel(const char *url, int conc, size_t n, crl_bench_call_fn fn, void *ctx,
                       double *wall_s, struct crl_err *err);

#endif
