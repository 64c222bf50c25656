/* Sessions: a long-lived shell in a sandbox that keeps its working
 * directory and environment between commands, which is how agents mostly
 * work.
 *
 * Each command goes to the shell's stdin as `command eval '<cmd>' </dev/null`
 * followed by two printf's of a marker with a fresh random nonce, one on
 * stdout carrying $?, one on stderr; output is cut at the markers.
 * `command eval` keeps a syntax error from ending a POSIX shell; stdin from
 * /dev/null keeps a command from eating the next one.  A timeout kills what
 * the command started, not the shell, so the session survives it.  See
 * docs/api.md for what a session cannot do (a command that closes the
 * shell's stdout ends it). */
#ifndef CRL_CORE_SESSION_H
#define CRL_CORE_SESSION_H

#include <jansson.h>

#include "exec.h"
#include "sandbox.h"

struct crl_session;

typedef void (*crl_session_open_cb)(struct crl_session *s, const struct crl_err *err, void *ctx);

int crl_session_open(struct crl_sandbox *sb, struct crl_session_req *req, crl_session_open_cb cb,
                     void *ctx, struct crl_err *err);
struct crl_session *crl_session_find(struct crl_sandbox *sb, const char *id, struct crl_err *err);
const char *crl_session_id(const struct crl_session *s);
json_t *crl_session_json(const struct crl_session *s);
json_t *crl_session_list_json(struct crl_sandbox *sb);

/* Run one command (req moved in, even on failure; only cmd, timeout, output
 * cap and stream are used).  CRL_E_CONFLICT if a command is already running. */
int crl_session_run(struct crl_session *s, struct crl_exec_req *req, const struct crl_exec_cbs *cbs,
                    void *ctx, struct crl_err *err);
/* Stop (or go back to) reading the session's output (see crl_exec_pause_output). */
void crl_session_pause_output(struct crl_session *s, bool pause);
/* The client of the running command went away: stop calling back. */
void crl_session_cancel_run(struct crl_session *s);
/* Was the session's shell alive after the last command? */
bool crl_session_alive(const struct crl_session *s);

/* A session the last corrald left running, taken back in an adopted
 * sandbox from its record (the value crl_sandbox_child_is was given);
 * -1 with err saying why not (it is then lost). */
int crl_session_adopt(struct crl_sandbox *sb, const char *id, json_t *rec, struct crl_err *err);

/* Close a session: its shell and what it started are killed, a running
 * command's client and a waiting opener get CRL_E_CONFLICT.  A sandbox's
 * sessions close this way when it ends (an end hook, sandbox.h). */
void crl_session_close(struct crl_session *s);

#endif
