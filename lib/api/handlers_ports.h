/* ANY /v1/sandboxes/{id}/ports/{port}/...: the port proxy. */
#ifndef CRL_API_HANDLERS_PORTS_H
#define CRL_API_HANDLERS_PORTS_H

struct crl_req;

/* The request, passed to the server on `port` of the sandbox's loopback,
 * and its answer streamed back (503 if nothing answers there).  A request
 * with an Upgrade header (WebSocket; "corral-tcp" for a raw stream) that
 * the server (or, for corral-tcp, corrald itself) answers 101 becomes a
 * tunnel: bytes both ways until either side closes. */
void crl_h_port(struct crl_req *r);
void crl_h_port_drained(struct crl_req *r);
void crl_h_port_cancel(struct crl_req *r);
void crl_h_port_free(struct crl_req *r);
/* Close every upgraded connection (before MHD stops). */
struct crl_api;
void crl_h_ports_stop(struct crl_api *a);

#endif
