/* Stateful code contexts (docs/api.md, Code): a kernel per context, a
 * background process of the sandbox's own running the image's python3 with
 * lib/core/code_kernel.py, whose globals persist between cells.  Cells of a
 * context run one at a time, in order; a cell's answer is its stdout and
 * stderr, its typed results (text, png, html, json, ...: the last
 * expression's value and matplotlib's figures) and its error with the
 * traceback.  The kernel runs with the sandbox's privileges and what it
 * sends is hostile input: each answer is one nonce-prefixed JSON line of
 * bounded size, and only the fields and types below are taken from it.
 *
 * A cell past its timeout gets SIGINT (KeyboardInterrupt, its error), and
 * if that does not end it, its kernel is killed and started again: the
 * context loses its state and says so.  A kernel that dies (the cell
 * exited the interpreter) is started again at the next cell. */
#ifndef CRL_CORE_CODE_H
#define CRL_CORE_CODE_H

#include <jansson.h>
#include <stdbool.h>

#include "sandbox.h"

#define CRL_CODE_MAX_CONTEXTS 32        /* a sandbox's */
#define CRL_CODE_MAX_ANSWER (64u << 20) /* a cell's answer line */
#define CRL_CODE_DEFAULT "default"

struct crl_code_ctx;

/* The answer (a new reference, the callee's) or why there is none. */
typedef void (*crl_code_done_fn)(void *ctx, json_t *answer, const struct crl_err *err);

/* Run `code` in context `name` (made, as "default" is, at its first use
 * when it does not exist), at most timeout_s (0: none).  `done` runs once,
 * unless cancelled. */
struct crl_code_cell *crl_code_run(struct crl_sandbox *sb, const char *name, const char *code,
                                   double timeout_s, crl_code_done_fn done, void *ctx,
                                   struct crl_err *err);
void crl_code_cancel(struct crl_code_cell *c);

/* Make a context (its kernel starts now), list, restart (its state goes),
 * remove. */
json_t *crl_code_context_create(struct crl_sandbox *sb, const char *cwd, struct crl_err *err);
json_t *crl_code_context_list(struct crl_sandbox *sb);
json_t *crl_code_context_restart(struct crl_sandbox *sb, const char *name, struct crl_err *err);
/* remove answers the context as it was (a new reference), or NULL */
json_t *crl_code_context_remove(struct crl_sandbox *sb, const char *name, struct crl_err *err);

/* One line a kernel wrote (without its newline), read as hostile input
 * (lib/core/code_answer.c).  ANSWER: the answer to cell `want` (<0: none
 * is awaited), built again in *out with execution_count `count`; READY:
 * the kernel's first line; MALFORMED: behind the nonce, but not a JSON
 * object; OTHER: not an answer, or one for no cell awaited. */
enum crl_code_line {
    CRL_CODE_LINE_OTHER,
    CRL_CODE_LINE_READY,
    CRL_CODE_LINE_ANSWER,
    CRL_CODE_LINE_MALFORMED,
};
enum crl_code_line crl_code_answer(const char *s, size_t n, const char *nonce, long long want,
                                   unsigned long count, json_t **out);

#endif
