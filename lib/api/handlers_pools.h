/* /v1/pools: the host's warm pools (lib/core/pool.h). */
#ifndef CRL_API_HANDLERS_POOLS_H
#define CRL_API_HANDLERS_POOLS_H

struct crl_req;

void crl_h_pools_list(struct crl_req *r);
void crl_h_pool_inspect(struct crl_req *r);
/* PUT {"template": SPEC, "min": N, "max": M}: make or change it. */
void crl_h_pool_set(struct crl_req *r);
void crl_h_pool_remove(struct crl_req *r);

#endif
