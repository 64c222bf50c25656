/* Warm pools: ready sandboxes made ahead for a template, so that a create
 * that matches one is a claim (docs/architecture.md, "Warm pools").
 *
 * A pool is a name, a template (a sandbox spec: backend, image, limits,
 * network, services) and a floor and a ceiling.  Its sandboxes are
 * ordinary sandboxes of the host's table, built as any other, but hidden
 * from the API (listed, found, counted nowhere but in the pool) until a
 * create claims one: a create whose spec is the template's but for what a
 * claim may set (labels, TTLs, the execs' env and cwd) takes the oldest
 * ready one, which is then the caller's as if just made (its TTLs run from
 * the claim).  A pool keeps as many ready as the floor plus a second of its
 * recent claims, within the ceiling; it fills only while the host has
 * twice the memory admission keeps for explicit creates, and an explicit
 * create refused for capacity sheds an idle pool sandbox, so a pool never
 * takes what a create needs.  One that dies while idle is replaced and
 * counted; a template that can no longer be made (its image removed)
 * leaves the pool failing, with the reason, retrying every 10 s. */
#ifndef CRL_CORE_POOL_H
#define CRL_CORE_POOL_H

#include <jansson.h>
#include <stdbool.h>

#include "../util/buf.h"
#include "../util/err.h"
#include "sandbox.h"

struct crl_host;
struct crl_pool;

#define CRL_POOL_NAME_MAX 63
#define CRL_POOL_MAX_SIZE 4096

/* Make or change pool `name` ([A-Za-z0-9._-], 1-63) of `template` (a
 * create's JSON body, borrowed; no trajectory), keeping min..max ready
 * (max >= min, max >= 1, at most CRL_POOL_MAX_SIZE).  A changed template
 * drains what the old one made.  *out (may be NULL) gets its description. */
int crl_pool_set(struct crl_host *h, const char *name, json_t *template, unsigned min, unsigned max,
                 json_t **out, struct crl_err *err);
/* "NAME:MIN:MAX[:JSON]", corrald's --pool. */
int crl_pool_set_flag(struct crl_host *h, const char *flag, struct crl_err *err);
/* Remove a pool and destroy its idle sandboxes. */
int crl_pool_remove(struct crl_host *h, const char *name, struct crl_err *err);
/* {"pools": [...]}, or one pool's description (CRL_E_NOT_FOUND). */
json_t *crl_pools_json(struct crl_host *h);
json_t *crl_pool_json(struct crl_host *h, const char *name, struct crl_err *err);

/* Host -> pools.  A ready sandbox of a pool whose template spec matches,
 * taken out of it (the caller hands it over); NULL if none. */
struct crl_sandbox *crl_pools_claim(struct crl_host *h, const struct crl_spec *spec);
/* How many ready pool sandboxes are of `img`, and destroy them: an image's
 * removal does not wait for a pool (whose template then fails, saying so). */
unsigned crl_pools_image_users(struct crl_host *h, const struct crl_image *img);
void crl_pools_drain_image(struct crl_host *h, const struct crl_image *img);
/* An explicit create was refused for capacity: destroy one idle pool
 * sandbox, if any, so that the next can be admitted.  True if one went. */
bool crl_pools_shed(struct crl_host *h);
/* Prometheus lines. */
void crl_pools_metrics(struct crl_host *h, struct crl_buf *b);
/* Stop every pool (its idle sandboxes stay in the host's table, for the
 * host's close to destroy). */
void crl_pools_free(struct crl_host *h);

#endif
