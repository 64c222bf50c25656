/* POST .../pause and .../resume; PATCH .../network. */
#ifndef CRL_API_HANDLERS_ACTIONS_H
#define CRL_API_HANDLERS_ACTIONS_H

struct crl_req;

/* 200 with the sandbox paused, and the memory its pause gave back. */
void crl_h_pause(struct crl_req *r);
/* 200 with the sandbox running again. */
void crl_h_resume(struct crl_req *r);
/* 200 with the sandbox whose ttl now ends {"timeout_s": N} from now. */
void crl_h_timeout(struct crl_req *r);
/* 200 with the sandbox under its new network policy (the body: a network
 * object, as at create). */
void crl_h_network(struct crl_req *r);
/* The same change, made again by a trajectory's replay; answers nothing. */
void crl_h_network_replayed(struct crl_req *r);

#endif
