/* Background processes (lib/core/process.h): start, list, inspect, forget;
 * their output from an offset as NDJSON; their stdin as a streamed body;
 * signals, a terminal's size, waiting for the end; and an attach, an
 * upgraded connection whose bytes are the process's input one way and its
 * output the other (what `corral sh` and `corral attach` use). */
#ifndef CRL_API_HANDLERS_PROCESSES_H
#define CRL_API_HANDLERS_PROCESSES_H

#include <stdbool.h>
#include <stddef.h>

struct crl_req;
struct crl_api;

void crl_h_processes_list(struct crl_req *r);
void crl_h_process_start(struct crl_req *r);
void crl_h_process_inspect(struct crl_req *r);
void crl_h_process_forget(struct crl_req *r);
void crl_h_process_output(struct crl_req *r);
void crl_h_process_drained(struct crl_req *r);
bool crl_h_process_stdin_begin(struct crl_req *r);
int crl_h_process_stdin_body(struct crl_req *r, const char *data, size_t *len);
void crl_h_process_stdin(struct crl_req *r);
void crl_h_process_attach(struct crl_req *r);
void crl_h_process_signal(struct crl_req *r);
void crl_h_process_resize(struct crl_req *r);
void crl_h_process_wait(struct crl_req *r);
/* Their cancel and free hooks: the state a request holds (a process's
 * reference, its place among the process's listeners). */
void crl_h_process_cancel(struct crl_req *r);
void crl_h_process_free(struct crl_req *r);
/* corrald stops: close every attached connection. */
void crl_h_processes_stop(struct crl_api *a);

#endif
