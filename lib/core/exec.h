/* Running one command in a sandbox and collecting its result: stdin fed
 * in, stdout and stderr read (capped, or streamed), a timeout that kills the
 * command's whole process tree, and the reason it ended.  Backend-neutral:
 * it drives a struct crl_proc through the sandbox's backend. */
#ifndef CRL_CORE_EXEC_H
#define CRL_CORE_EXEC_H

#include <jansson.h>
#include <stdbool.h>

#include "../util/buf.h"
#include "sandbox.h"

enum crl_exec_stream { CRL_STDOUT = 1, CRL_STDERR = 2 };

struct crl_exec_result {
    int exit_code;      /* -1 when signaled */
    int signal;         /* 0 when exited */
    const char *reason; /* exited, signaled, timeout, oom, killed */
    struct crl_buf out, err;
    double duration_s;
    double cpu_s;
    uint64_t peak_memory_bytes;
};

struct crl_exec;

struct crl_exec_cbs {
    /* Optional: the command is running (streams start here). */
    void (*on_start)(void *ctx);
    /* Streaming only: a chunk of output (already capped). */
    void (*on_output)(void *ctx, enum crl_exec_stream s, const char *data, size_t len);
    /* Exactly once, unless cancelled: the result, or why it never ran. */
    void (*on_done)(void *ctx, const struct crl_exec_result *r, const struct crl_err *err);
};

/* Start `req` in the sandbox.  It is moved in, even when this fails. */
struct crl_exec *crl_exec_start(struct crl_sandbox *sb, struct crl_exec_req *req,
                                const struct crl_exec_cbs *cbs, void *ctx, struct crl_err *err);
/* The client went away: kill the command's tree and never call back. */
void crl_exec_cancel(struct crl_exec *x);
/* Stop (or go back to) reading the command's output: a streaming client
 * that reads slowly holds the command back instead of corrald's memory. */
void crl_exec_pause_output(struct crl_exec *x, bool pause);

/* The result as the API returns it; output fields are omitted when streamed. */
json_t *crl_exec_result_json(const struct crl_exec_result *r, bool with_output);
/* {"stdout": "..."} or with "encoding": "base64" for non-UTF-8 bytes. */
json_t *crl_output_json(const char *key, const char *data, size_t len);

/* Compose a process environment: image defaults, then the sandbox's env,
 * then the request's (later wins).  Returns a malloc'd NULL-terminated
 * vector. */
char **crl_env_merge(char *const *a, char *const *b, char *const *c);

/* Shared with background processes (process.c): can the sandbox run a
 * command (ready, with an image)?  Then what `req` runs, into p: its argv
 * (the image's entrypoint and cmd when it gives none), environment (into
 * *envp, the caller's to free), user, cwd, in a session of its own. */
int crl_exec_check(struct crl_sandbox *sb, struct crl_err *err);
int crl_exec_prepare(struct crl_sandbox *sb, struct crl_exec_req *req, struct crl_proc *p,
                     char ***envp, struct crl_err *err);
/* The sandbox's OOM kills so far: a SIGKILL with more of them since the
 * start was the OOM killer's. */
uint64_t crl_exec_oom_kills(struct crl_sandbox *sb);

/* Shared with sessions: how a finished process is described. */
void crl_exec_describe_end(struct crl_proc *p, bool timed_out, bool killed, bool oom,
                           struct crl_exec_result *r);

#endif
