/* A request passed on to the host of the cluster that serves it (a
 * sandbox's owner, or where a create was placed), its answer passed back
 * as it comes: streamed both ways, so an exec's output, a tar of files or
 * an upload of any size crosses hosts as it would reach the owner itself.
 *
 * Each forwarded request has a thread of its own that runs libcurl; it
 * and the loop share only two pipes (the body in, the answer out) and a
 * cancel flag, so corrald's loop never waits for the other host.  The
 * answer's head comes first on its pipe (status, then the headers, as
 * lines), checked before anything of it is used: another host's garbage
 * is a 502 here, not a crash. */
#ifndef CRL_API_PROXY_H
#define CRL_API_PROXY_H

#include <stdbool.h>
#include <stddef.h>

#include "../util/err.h"

struct crl_req;

/* At a request's headers (server.c): if it names a sandbox another host
 * of the cluster owns, take it (true): pass it on, body and all, or
 * answer why it cannot be (its host is lost, unknown).  false: this host
 * serves it. */
bool crl_proxy_route(struct crl_req *r);

/* The head of a forwarded answer came: return true to have it passed to
 * the client, false to drop it (the caller answers, or forwards again). */
typedef bool (*crl_proxy_head_cb)(struct crl_req *r, unsigned status, const char *host_id);

/* Forward r, its body held whole (body, len), to host_id at addr; `head`
 * (may be NULL) hears the answer's status first.  The request is
 * suspended until the answer comes. */
int crl_proxy_forward(struct crl_req *r, const char *host_id, const char *addr, const char *body,
                      size_t len, crl_proxy_head_cb head, struct crl_err *err);

/* Headers added to what is passed on: the host that forwarded it (a
 * forwarded request is never forwarded again), and a create's placement
 * (the host it reaches creates it). */
#define CRL_PROXY_FORWARDED_BY "X-Corral-Forwarded-By"
#define CRL_PROXY_PLACED "X-Corral-Placed"

#endif
