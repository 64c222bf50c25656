/* GET /v1/functions[/{name}] and POST /v1/functions/{name}/call. */
#ifndef CRL_API_HANDLERS_FUNCTIONS_H
#define CRL_API_HANDLERS_FUNCTIONS_H

struct crl_req;

/* GET /v1/functions: every function registered, as read now. */
void crl_h_functions_list(struct crl_req *r);
/* GET /v1/functions/{name}: one, with its schema. */
void crl_h_function_inspect(struct crl_req *r);
/* POST /v1/functions/{name}/call: a sandbox made for the call, the
 * function run in it, the sandbox destroyed, then the answer.  Its state
 * is the call, which outlives a request its client left: the cancel hook
 * detaches it (the function is killed, its sandbox still destroyed). */
void crl_h_function_call(struct crl_req *r);
void crl_h_function_call_cancel(struct crl_req *r);

#endif
