/* The agent server's internals, shared by serve.c (the loop, the output
 * queue, the streams), exec.c (EXEC and its process) and files.c
 * (FILE_GET and FILE_PUT).  crl_ga_: the guest agent's own names
 * (crl_agent_ is lib/agent's protocol). */
#ifndef CRL_GA_SERVE_INT_H
#define CRL_GA_SERVE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "../../lib/agent/proto.h"
#include "../../lib/util/buf.h"
#include "agent.h"

#define OUT_HIGH (256u * 1024u) /* stop producing while this much is queued */
#define CHUNK (64u * 1024u)     /* most bytes of one STDOUT, STDERR or DATA frame */
#define GRANT_AT (32u * 1024u)  /* consumed bytes worth a CREDIT */
#define MAX_STREAMS 1024

enum kind { K_EXEC, K_GET, K_PUT };

struct stream {
    struct stream *next;
    uint32_t id;
    enum kind kind;
    struct crl_agent_window win;
    uint32_t ungranted; /* bytes of the host's consumed and not yet granted back */
    /* K_EXEC */
    pid_t pid;             /* 0 once reaped */
    int out[2];            /* the child's stdout [0] and stderr [1], -1 at end of file */
    int in;                /* its stdin, -1 when closed */
    struct crl_buf in_buf; /* STDIN bytes the pipe has not taken yet */
    bool in_eof;           /* the host sent STDIN's end: close once in_buf drains */
    bool has_stdin;        /* the EXEC asked for STDIN frames */
    int status;
    struct rusage ru;
    int leaf; /* K_EXEC as PID 1: its cgroup in the guest (a directory), or -1 */
    int tty;  /* K_EXEC with a terminal: its master (out[0] and in are dups), or -1 */
    /* K_GET, K_PUT */
    int fd;
};

struct agent {
    const struct crl_ga_opts *o;
    int port;
    int sigfd;
    int rootfd;
    struct crl_agent_dec dec;
    struct crl_buf out;
    struct stream *streams;
    size_t n_streams;
    bool connected;  /* PID 1: the host's end of the port is open */
    bool sigio;      /* PID 1: the port raises SIGIO when the host comes or goes */
    bool configured; /* a CONFIG was applied */
    bool done;       /* BYE: flush and end */
};

/* ---- serve.c ---- */

/* Queue a frame for the host (checked as the guest may send it). */
int crl_ga_queue(struct agent *a, uint16_t type, uint32_t stream, const void *p, uint32_t len,
                 struct crl_err *err);
/* The same with a JSON payload from a builder, which it frees. */
int crl_ga_queue_json(struct agent *a, uint16_t type, uint32_t stream, char *json, size_t len,
                      struct crl_err *err);
int crl_ga_send_error(struct agent *a, uint32_t stream, const char *msg, struct crl_err *err);
/* RESULT: ok when msg is NULL, else the error and errnum (0: none). */
int crl_ga_send_result(struct agent *a, uint32_t stream, int errnum, const char *msg,
                       struct crl_err *err);
/* CREDIT back what the host's bytes consumed, once worth it (or forced). */
int crl_ga_send_credit(struct agent *a, struct stream *s, bool force, struct crl_err *err);
struct stream *crl_ga_stream_new(struct agent *a, uint32_t id, enum kind kind);
/* Forget a stream; an exec's process group is killed if it runs. */
void crl_ga_stream_drop(struct agent *a, struct stream *s);
/* ERROR on stream id (s, if open, dropped): the host's frame broke it. */
int crl_ga_stream_fail(struct agent *a, struct stream *s, uint32_t id, const char *msg,
                       struct crl_err *err);

/* ---- exec.c ---- */

/* An EXEC on a new stream: the process started, or an EXIT start_failed. */
int crl_ga_exec_start(struct agent *a, uint32_t id, const struct crl_agent_frame *f,
                      struct crl_err *err);
/* Queued STDIN into the pipe, closed at the host's end; CREDIT back. */
int crl_ga_exec_stdin(struct agent *a, struct stream *s, struct crl_err *err);
/* One chunk of stdout (i 0) or stderr (1) within the window. */
int crl_ga_exec_output(struct agent *a, struct stream *s, int i, struct crl_err *err);
/* EXIT, and the stream gone, once the child is reaped and its pipes ended. */
int crl_ga_exec_maybe_end(struct agent *a, struct stream *s, struct crl_err *err);
/* Signal an exec's tree (or its descendants only): every process of its
 * cgroup in the guest, however it detached; without one, of the session
 * and the process group it leads. */
void crl_ga_exec_signal(struct stream *s, const struct crl_agent_signal *m);
/* Remove the execs' cgroups that nothing runs in any more. */
void crl_ga_exec_tidy(void);
/* Reap every child that ended (PID 1 reaps orphans too). */
void crl_ga_reap(struct agent *a);

/* ---- files.c ---- */

/* A FILE_GET or FILE_PUT on a new stream: the file opened, or a RESULT. */
int crl_ga_file_start(struct agent *a, uint32_t id, const struct crl_agent_frame *f,
                      struct crl_err *err);
/* One chunk of a file being read; at its end the empty DATA and RESULT. */
int crl_ga_file_send(struct agent *a, struct stream *s, struct crl_err *err);
/* A DATA frame of a FILE_PUT; the empty one ends it with a RESULT. */
int crl_ga_file_data(struct agent *a, struct stream *s, const struct crl_agent_frame *f,
                     struct crl_err *err);

#endif
