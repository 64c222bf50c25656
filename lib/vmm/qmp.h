/* A QMP client on corrald's event loop: how corrald drives each QEMU of the
 * microvm and vm backends (issue 13).
 *
 * QMP is JSON text over a stream socket, one message a line: QEMU's
 * greeting ({"QMP": {...}}), then answers to commands ({"return": ...,
 * "id": N} or {"error": {"class", "desc"}, "id": N}) and events
 * ({"event": NAME, "data": {...}, "timestamp": {...}}).  The client reads
 * the greeting, sends qmp_capabilities, and is ready when QEMU has answered
 * it; commands may be sent before that and go out once it is.
 *
 * QEMU runs a hostile guest: what it says is checked before use.  A line
 * over CRL_QMP_LINE_MAX, a line that is not a JSON object, an answer
 * nobody asked for, or the socket's end makes the connection fail: every
 * command still waiting gets the error, and on_fail runs once. */
#ifndef CRL_VMM_QMP_H
#define CRL_VMM_QMP_H

#include <jansson.h>
#include <stdbool.h>

#include "../util/err.h"
#include "../util/loop.h"

#define CRL_QMP_LINE_MAX (1u << 20)
#define CRL_QMP_PENDING_MAX 64 /* commands sent and not yet answered */

struct crl_qmp;

struct crl_qmp_ops {
    void (*ready)(struct crl_qmp *q, void *ctx); /* capabilities accepted */
    void (*event)(struct crl_qmp *q, const char *name, json_t *data, void *ctx); /* borrowed */
    void (*fail)(struct crl_qmp *q, const struct crl_err *err, void *ctx);       /* once */
};

/* The answer to a command: `ret` (borrowed: take a reference to keep it)
 * when QEMU returned, else err (CRL_E_INTERNAL naming the command and
 * QEMU's error class and description, or why the connection failed). */
typedef void (*crl_qmp_reply_fn)(struct crl_qmp *q, json_t *ret, const struct crl_err *err,
                                 void *ctx);

/* Speak QMP on fd (a connected stream socket, made nonblocking here; the
 * client owns and closes it).  ops and ctx are kept. */
int crl_qmp_open(struct crl_loop *loop, int fd, const struct crl_qmp_ops *ops, void *ctx,
                 struct crl_qmp **out, struct crl_err *err);
/* Close the socket; commands still waiting get an error ("closed"), and
 * ops->fail does not run.  May be called from any of the client's
 * callbacks: then it is done when that callback returns. */
void crl_qmp_close(struct crl_qmp *q);

/* Send `command` with `args` (taken; NULL for none).  With fd >= 0 the
 * descriptor goes with it (SCM_RIGHTS), for getfd and add-fd.  The reply
 * callback runs once, later, on the loop. */
int crl_qmp_command(struct crl_qmp *q, const char *command, json_t *args, int fd,
                    crl_qmp_reply_fn cb, void *ctx, struct crl_err *err);

bool crl_qmp_ready(const struct crl_qmp *q);
/* QEMU's version from its greeting ("8.2.1"), "" before it. */
const char *crl_qmp_version(const struct crl_qmp *q);

/* For tests and the fuzzer: how one line from QEMU is read.  Returns the
 * message (a new reference) or NULL with *err saying what is wrong. */
json_t *crl_qmp_parse_line(const char *line, size_t len, struct crl_err *err);

#endif
