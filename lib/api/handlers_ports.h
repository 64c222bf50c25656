/* ANY /v1/sandboxes/{id}/ports/{port}/...: the port proxy. */
#ifndef CRL_API_HANDLERS_PORTS_H
#define CRL_API_HANDLERS_PORTS_H

struct crl_req;

/* The request, passed to the server on `port` of the sandbox's loopback,
 * and its answer streamed back (502 if nothing answers there). */
void crl_h_port(struct crl_req *r);
void crl_h_port_drained(struct crl_req *r);
void crl_h_port_cancel(struct crl_req *r);
void crl_h_port_free(struct crl_req *r);

#endif
