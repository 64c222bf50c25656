/* Registered tools ("functions"): JSON definitions under a directory
 * (<state>/functions/NAME.json), loaded lazily and reloaded when the
 * directory changes, and what a call of one needs: the arguments checked
 * against its schema, the spec of the sandbox it runs in, the exec request
 * that runs it, and its answer made from the exec's result.  The API layer
 * (lib/api/handlers_functions.c) drives the sandbox; nothing here does I/O
 * but reading the definitions and the Python sources they name.
 *
 * A definition (docs/api.md, "Functions"):
 *   {"name": "add", "runtime": "python", "entry": "add.py:add",
 *    "description": "...", "limits": {"timeout_s": 10, ...},
 *    "schema": {JSON schema of the arguments}}
 * or, for an executable that reads the arguments on stdin and writes one
 * JSON value on stdout, "runtime": "shell", "entry": {"exec": ["/bin/cat"]}. */
#ifndef CRL_FUNCTIONS_FUNCTIONS_H
#define CRL_FUNCTIONS_FUNCTIONS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/err.h"
#include "../core/exec.h"
#include "../core/spec.h"

#define CRL_FUNCTION_NAME_MAX 64
#define CRL_FUNCTION_MAX_ARGS (1u << 20)     /* a call's body */
#define CRL_FUNCTION_MAX_DEF (1u << 20)      /* a NAME.json */
#define CRL_FUNCTION_MAX_SOURCE (512u << 10) /* a Python entry's file */
#define CRL_FUNCTION_STDOUT_SHOWN (4u << 10) /* of a failed call's stdout */
#define CRL_FUNCTION_LABEL "corral.function" /* on each call's sandbox */

enum crl_function_kind { CRL_FN_PYTHON, CRL_FN_EXEC };

struct crl_function_limits {
    double timeout_s;  /* 0: none */
    size_t max_output; /* per stream */
    /* 0 (or 0.0): the sandbox spec's default */
    unsigned memory_mb;
    double cpus;
    unsigned pids;
};

struct crl_function {
    unsigned refs;
    char name[CRL_FUNCTION_NAME_MAX + 1];
    char *error; /* a malformed definition: why; nothing else below is set */
    char runtime[16];
    enum crl_function_kind kind;
    char *description;
    json_t *schema; /* NULL: any arguments */
    json_t *entry;  /* as written, for GET */
    struct crl_function_limits limits;
    /* CRL_FN_PYTHON: FILE.py:CALLABLE, and FILE's source as last read */
    char file[CRL_FUNCTION_NAME_MAX + 8];
    char callable[CRL_FUNCTION_NAME_MAX + 1];
    char *dir; /* where FILE is */
    char *source;
    size_t source_len;
    dev_t src_dev;
    ino_t src_ino;
    off_t src_size;
    int64_t src_mtime_ns;
    /* CRL_FN_EXEC */
    char **argv;
};

void crl_function_ref(struct crl_function *fn);
void crl_function_unref(struct crl_function *fn);

/* Is `name` a function name: 1-64 of [a-z0-9_-]? */
bool crl_function_name_ok(const char *name);

/* Parse the definition `def` of the function `name` (its file's name less
 * .json), whose Python files live in `dir`.  Returns a function with one
 * reference: a usable one, or on a malformed definition one whose `error`
 * says why (NULL only when memory runs out, with *err filled). */
struct crl_function *crl_function_parse(const char *name, json_t *def, const char *dir,
                                        struct crl_err *err);

/* {"name", "runtime", "description", "schema"} or {"name", "error"};
 * `full` adds "entry" and "limits" (GET /v1/functions/{name}). */
json_t *crl_function_json(const struct crl_function *fn, bool full);

/* The call's arguments: a JSON value of at most CRL_FUNCTION_MAX_ARGS bytes
 * (an empty body is {}), checked against the schema.  CRL_E_JSON,
 * CRL_E_TOO_LARGE or CRL_E_INVALID naming the path that failed. */
int crl_function_args(const struct crl_function *fn, const char *body, size_t len, json_t **out,
                      struct crl_err *err);

/* The spec of the sandbox a call runs in: backend function, the runtime,
 * the limits, the label corral.function=NAME.  *spec is initialised. */
int crl_function_spec(const struct crl_function *fn, struct crl_spec *spec, struct crl_err *err);

/* The exec request of a call: the runner (Python) or the argv (exec),
 * stdin the arguments as JSON, the timeout; streamed, so that the caller
 * sees a flood as it comes (max_output is one byte over the limit: a
 * stream that reaches it overflowed).  A Python entry's file is read again
 * if it changed since it was last read. */
int crl_function_exec_req(struct crl_function *fn, json_t *args, struct crl_exec_req *req,
                          struct crl_err *err);

/* The Python program that runs a Python entry (exposed for the tests). */
char *crl_function_runner(const char *file, const char *callable, const char *source, size_t len);

/* What a finished call answers.  `r` is the exec's result (its reason,
 * exit code, signal, duration); `out` and `err_out` what the function
 * wrote, capped at the limit; `overflow` that it wrote more than that
 * (and was killed for it). */
json_t *crl_function_answer(const struct crl_exec_result *r, const char *out, size_t out_len,
                            const char *err_out, size_t err_len, bool overflow);

/* ---- the directory of definitions ---- */

struct crl_functions;

/* A registry over `dir` (which need not exist yet: no functions then).
 * Nothing is read until the first lookup. */
struct crl_functions *crl_functions_new(const char *dir);
void crl_functions_free(struct crl_functions *fs);
/* Re-read the definitions if the directory changed since the last look. */
void crl_functions_refresh(struct crl_functions *fs);
/* The function `name` with a reference for the caller, or NULL with
 * CRL_E_NOT_FOUND naming the known ones. */
struct crl_function *crl_functions_get(struct crl_functions *fs, const char *name,
                                       struct crl_err *err);
/* {"functions": [...]}, sorted by name. */
json_t *crl_functions_list_json(struct crl_functions *fs);

#endif
