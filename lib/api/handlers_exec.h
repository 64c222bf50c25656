/* Commands: POST .../exec, and sessions (list, open, close, run), answered
 * as one JSON result or streamed as NDJSON. */
#ifndef CRL_API_HANDLERS_EXEC_H
#define CRL_API_HANDLERS_EXEC_H

struct crl_req;

/* POST .../exec: run a command, answer with its result (or stream its
 * output, then the result).  Its state holds what runs. */
void crl_h_exec(struct crl_req *r);
/* POST .../sessions/{sub}/run: the same, in a session's shell. */
void crl_h_session_run(struct crl_req *r);
/* Their cancel hook: a command whose client left is killed. */
void crl_h_exec_cancel(struct crl_req *r);
/* Their drained hook: a command held back by a slow reader writes on. */
void crl_h_exec_drained(struct crl_req *r);
/* GET .../sessions: the sandbox's sessions. */
void crl_h_sessions_list(struct crl_req *r);
/* POST .../sessions: 201 with the session once its shell runs. */
void crl_h_session_open(struct crl_req *r);
/* DELETE .../sessions/{sub}: 200 with the session, closed. */
void crl_h_session_close(struct crl_req *r);

#endif
