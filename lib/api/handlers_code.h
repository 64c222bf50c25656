/* Code contexts (docs/api.md, Code): POST .../code runs a cell; the
 * contexts are made, listed, restarted and removed (lib/core/code.h). */
#ifndef CRL_API_HANDLERS_CODE_H
#define CRL_API_HANDLERS_CODE_H

struct crl_req;

void crl_h_code_run(struct crl_req *r);
void crl_h_code_cancel(struct crl_req *r);
void crl_h_code_contexts_list(struct crl_req *r);
void crl_h_code_context_create(struct crl_req *r);
void crl_h_code_context_restart(struct crl_req *r);
void crl_h_code_context_remove(struct crl_req *r);

#endif
