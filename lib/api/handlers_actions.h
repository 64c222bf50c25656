/* POST .../pause and .../resume. */
#ifndef CRL_API_HANDLERS_ACTIONS_H
#define CRL_API_HANDLERS_ACTIONS_H

struct crl_req;

/* 200 with the sandbox paused, and the memory its pause gave back. */
void crl_h_pause(struct crl_req *r);
/* 200 with the sandbox running again. */
void crl_h_resume(struct crl_req *r);

#endif
