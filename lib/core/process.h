/* Background processes: a command started in a sandbox that runs on after
 * the request that started it has been answered, with a handle (its pid in
 * the sandbox) by which any client finds it again: to read its output from
 * an offset (the recent output is kept in a bounded ring), to write to its
 * stdin as a stream and close it, to signal it, its group or its tree, to
 * resize its terminal, to wait for its end.  Backend-neutral: it drives a
 * struct crl_proc through the sandbox's backend, as exec.c does.
 *
 * Output is one sequence of bytes numbered from 0 across stdout and stderr
 * (a terminal's output is all stdout), kept as chunks in the order they
 * were read; a reader holds an offset into it and asks for what follows.
 * Output is never held back for a slow reader: the ring drops its oldest
 * chunks past its size, and a reader behind them learns how many bytes it
 * lost.  Like an exec, a process's output ends when it exits.
 *
 * A record outlives its process (its end, its last output) until it is
 * forgotten (DELETE), pushed out by newer ended ones (CRL_PROCESS_KEEP_ENDED
 * a sandbox), or its sandbox ends; readers hold references. */
#ifndef CRL_CORE_PROCESS_H
#define CRL_CORE_PROCESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "exec.h"
#include "sandbox.h"

#define CRL_PROCESS_KEEP_ENDED 64
#define CRL_PROCESS_MAX_LIVE 1024          /* a sandbox's running background processes */
#define CRL_PROCESS_STDIN_MAX (256u << 10) /* stdin queued in corrald per process */

struct crl_process;

/* A chunk of output: bytes [off, off + len) of the sequence. */
struct crl_chunk {
    struct crl_chunk *next;
    uint64_t off;
    uint32_t len;
    uint8_t stream; /* enum crl_exec_stream */
    char data[];
};

/* Someone waiting on a process: called (on the loop) when output came,
 * stdin has room again, or the process ended; it looks at what changed.
 * It may unsubscribe (itself only) from the call. */
struct crl_process_sub {
    void (*notify)(struct crl_process_sub *s);
    void *ctx;
    struct crl_process_sub *next;
};

typedef void (*crl_process_started_fn)(struct crl_process *x, const struct crl_err *err, void *ctx);

/* Start `req` (moved in, even on failure) in the background; `started`
 * runs once with the process (which has its pid: the caller's reference)
 * or why it never ran (the record is gone then). */
int crl_process_start(struct crl_sandbox *sb, struct crl_exec_req *req,
                      crl_process_started_fn started, void *ctx, struct crl_err *err);
/* A process of the sandbox by its pid (as text: the route's segment), a
 * new reference; CRL_E_NOT_FOUND if the sandbox has no such record. */
struct crl_process *crl_process_find(struct crl_sandbox *sb, const char *pid, struct crl_err *err);
void crl_process_ref(struct crl_process *x);
void crl_process_unref(struct crl_process *x);

int crl_process_pid(const struct crl_process *x);
bool crl_process_ended(const struct crl_process *x);
/* Its end (valid once ended). */
const struct crl_exec_result *crl_process_result(const struct crl_process *x);
json_t *crl_process_json(const struct crl_process *x);
/* {"processes": [...]}, oldest first; `state` NULL, "running" or "exited". */
json_t *crl_process_list_json(struct crl_sandbox *sb, const char *state);

/* Output at or after `from`: the first chunk that ends past it (NULL when
 * there is none yet), and in *lost how many bytes from `from` on the ring
 * no longer holds.  The end of what was read so far is *end. */
const struct crl_chunk *crl_process_output(const struct crl_process *x, uint64_t from,
                                           uint64_t *lost, uint64_t *end);

void crl_process_subscribe(struct crl_process *x, struct crl_process_sub *s);
void crl_process_unsubscribe(struct crl_process *x, struct crl_process_sub *s);

/* Queue bytes for its stdin: takes what fits (*len is left with what did
 * not; the subscriber hears when there is room), and with `eof` closes it
 * once all of it is written (a terminal hears its end-of-file character).
 * CRL_E_CONFLICT once stdin is closed or the process has ended. */
int crl_process_stdin(struct crl_process *x, const char *data, size_t *len, bool eof,
                      struct crl_err *err);
bool crl_process_stdin_open(const struct crl_process *x);
/* A signal (1..64) to it, its group or its tree; CRL_E_CONFLICT once it
 * has ended. */
int crl_process_signal(struct crl_process *x, int sig, enum crl_signal_scope scope,
                       struct crl_err *err);
/* Its terminal's new size. */
int crl_process_resize(struct crl_process *x, unsigned rows, unsigned cols, struct crl_err *err);
/* Forget it: its tree is killed if it runs, and it is no longer listed or
 * found (readers keep their references). */
void crl_process_forget(struct crl_process *x);

/* A signal's number from "TERM", "SIGTERM" or "15"; 0 if it is none. */
int crl_signal_parse(const char *s);

#endif
