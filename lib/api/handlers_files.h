/* GET and PUT .../files?path=P: one file as raw bytes, or a directory as a
 * tar stream, both ways. */
#ifndef CRL_API_HANDLERS_FILES_H
#define CRL_API_HANDLERS_FILES_H

#include <stdbool.h>
#include <stddef.h>

struct crl_req;

/* A read; called again when resumed (it asks the sandbox once). */
void crl_h_files_get(struct crl_req *r);
/* An upload, at its headers: true when its body streams straight to the
 * sandbox (crl_h_files_put_body), false when it is held whole (a
 * trajectory's step). */
bool crl_h_files_put_begin(struct crl_req *r);
/* A chunk of the body: 0 when taken (*len is then 0, or the upload failed
 * and the rest is dropped), -1 when it cannot be taken yet: the caller
 * suspends the request, and is handed the rest again once resumed. */
int crl_h_files_put_body(struct crl_req *r, const char *data, size_t *len);
/* The body is in (or the stream is ready, or its pipe has room): send
 * what is held, end the upload, answer once the helper exits. */
void crl_h_files_put(struct crl_req *r);
void crl_h_files_drained(struct crl_req *r);
void crl_h_files_cancel(struct crl_req *r);

#endif
