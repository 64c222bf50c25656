/* A pool of network namespaces with only loopback, up.  They are made by
 * corrald, so they belong to the host's user namespace: root inside a
 * sandbox has no CAP_NET_ADMIN over its network, which keeps netfilter and
 * friends out of reach.  Creating a namespace costs a few hundred
 * microseconds and its teardown is deferred work in the kernel, so they are
 * kept and reused: once every process of a sandbox is gone, nothing of it
 * remains in its namespace (its sockets closed, and it could change no
 * configuration there). */
#ifndef CRL_OS_NETNS_H
#define CRL_OS_NETNS_H

#include "../util/err.h"

struct crl_netns_pool;

int crl_netns_pool_new(unsigned max_idle, struct crl_netns_pool **out, struct crl_err *err);
void crl_netns_pool_free(struct crl_netns_pool *p);
/* A namespace fd for a new sandbox: from the pool, or made now.  Must be
 * called from a single-threaded process's thread (it unshares). */
int crl_netns_get(struct crl_netns_pool *p, struct crl_err *err);
/* Give a namespace back once nothing runs in it. */
void crl_netns_put(struct crl_netns_pool *p, int fd);
/* Fill the pool to `target` idle namespaces (idle-time work). */
int crl_netns_fill(struct crl_netns_pool *p, unsigned target, struct crl_err *err);
unsigned crl_netns_idle(const struct crl_netns_pool *p);
/* Back to corrald's own namespace (host_fd) after a moment in a
 * sandbox's; aborts if that fails, rather than run on in the sandbox's. */
void crl_netns_return(int host_fd);
/* An AF_INET socket (`type`, with SOCK_CLOEXEC added) of the namespace
 * netns_fd: corrald enters it for the call only.  -1 with errno. */
int crl_netns_socket(struct crl_netns_pool *p, int netns_fd, int type);

#endif
