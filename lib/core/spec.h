/* The sandbox spec and the exec/session requests: parsed and validated in
 * one place (here), shared by the daemon, the CLI and the tests.  Parsing is
 * strict: unknown fields, wrong types and out-of-range values are errors that
 * name the field.  Defaults and limits are documented in docs/api.md. */
#ifndef CRL_CORE_SPEC_H
#define CRL_CORE_SPEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../image/store.h"
#include "../util/err.h"
#include "netpolicy.h"
#include "services.h"

#define CRL_SPEC_MAX_LABELS 64
#define CRL_SPEC_MAX_ENV 256
#define CRL_TRAJ_ID_MAX 128             /* a trajectory id's length */
#define CRL_SPEC_FUNCTION_MEMORY_MB 128 /* the function backend's default memory_mb */
#define CRL_EXEC_DEFAULT_TIMEOUT_S 300.0
#define CRL_EXEC_MAX_TIMEOUT_S 86400.0
#define CRL_EXEC_DEFAULT_OUTPUT (1u << 20)
#define CRL_EXEC_MAX_OUTPUT (64u << 20)
#define CRL_EXEC_MAX_ARGS_BYTES (1u << 20)

struct crl_kv {
    char *key;
    char *value;
};

/* A volume mounted at create (docs/api.md, Volumes). */
#define CRL_SPEC_MAX_VOLUMES 8
#define CRL_VOLUME_NAME_MAX 63
#define CRL_VOLUME_PATH_MAX 255
struct crl_spec_volume {
    char name[CRL_VOLUME_NAME_MAX + 1];
    char path[CRL_VOLUME_PATH_MAX + 1]; /* absolute, normal, not "/" nor under /proc /sys /dev */
    bool read_only;
};

/* A volume's name: 1-63 of [a-z0-9_.-], starting with a letter or digit. */
bool crl_volume_name_ok(const char *name);

struct crl_spec {
    char backend[16];
    char runtime[16]; /* the function backend's: shell or python ("" for the others) */
    char image[CRL_IMAGE_NAME_MAX + 1];
    double cpus;
    unsigned memory_mb;
    unsigned pids;
    unsigned disk_mb;
    struct crl_net_policy *network; /* NULL: mode none; owned, moves with the spec */
    struct crl_services *services;  /* NULL: none; owned, moves with the spec */
    unsigned ttl_s;                 /* 0: none */
    unsigned idle_ttl_s;            /* 0: none */
    bool pause_on_ttl;              /* "on_ttl": "pause" (else "destroy") */
    struct crl_kv labels[CRL_SPEC_MAX_LABELS];
    size_t n_labels;
    char **env;                      /* "K=V", NULL-terminated; defaults for every exec */
    char *cwd;                       /* default working directory of execs */
    struct crl_spec_volume *volumes; /* malloc'd, n_volumes of them */
    size_t n_volumes;
    /* The trajectory this sandbox records (or fast-forwards through): "" for none. */
    char trajectory[CRL_TRAJ_ID_MAX + 1];
    enum crl_checkpoint_mode {
        CRL_CKPT_EVERY_STEP, /* after every step that can change state */
        CRL_CKPT_ON_REQUEST, /* only on POST .../snapshot */
        CRL_CKPT_NONE,
    } checkpoint;
};

/* A trajectory id: 1-128 of [A-Za-z0-9._-], starting with a letter or digit. */
bool crl_traj_id_ok(const char *id);
const char *crl_checkpoint_mode_name(enum crl_checkpoint_mode m);

void crl_spec_init(struct crl_spec *s);
void crl_spec_free(struct crl_spec *s);
/* Parse and validate a create request body into *s (initialised by the call). */
int crl_spec_parse(const char *json, size_t len, struct crl_spec *s, struct crl_err *err);
int crl_spec_from_json(json_t *root, struct crl_spec *s, struct crl_err *err);
json_t *crl_spec_to_json(const struct crl_spec *s);
/* labels as the API takes them: an object of at most CRL_SPEC_MAX_LABELS
 * printable strings of 255 bytes, keys 1-63 of [A-Za-z0-9._/-]. */
int crl_labels_check(json_t *v, struct crl_err *err);
/* Does the sandbox match every "k=v" selector? */
bool crl_spec_labels_match(const struct crl_spec *s, const struct crl_kv *sel, size_t n);
/* Parse a "k=v" label selector or flag. */
int crl_label_parse(const char *kv, struct crl_kv *out, struct crl_err *err);

/* The user a process runs as, inside the sandbox. */
struct crl_user {
    uid_t uid;
    gid_t gid;
    bool set; /* given: otherwise the image's user */
};
int crl_user_parse(const char *s, struct crl_user *u, struct crl_err *err);

struct crl_exec_req {
    char **argv; /* NULL-terminated; NULL: the image's entrypoint and cmd */
    bool shell;  /* cmd was a string, run with /bin/sh -c */
    char **env;  /* "K=V" given with the request, NULL-terminated */
    char *cwd;   /* NULL: the sandbox default */
    struct crl_user user;
    char *stdin_data;
    size_t stdin_len;
    double timeout_s; /* 0: none */
    size_t max_output;
    bool stream;
    /* a background process's (POST .../processes) */
    bool tty;
    unsigned short rows, cols; /* tty: its window */
    char *tag;
    size_t ring_bytes; /* output kept for clients that attach */
    bool hidden;       /* corrald's own (a code context's kernel): not listed, not found */
};

#define CRL_TTY_DEFAULT_ROWS 24
#define CRL_TTY_DEFAULT_COLS 80
#define CRL_TTY_MAX 4096 /* rows or columns */
#define CRL_PROCESS_TAG_MAX 128
#define CRL_PROCESS_RING_DEFAULT (1u << 20)
#define CRL_PROCESS_RING_MAX (64u << 20)

/* What a request runs: an exec, a session's command (cmd only, a
 * string), a background process (no output cap or stream; a terminal, a
 * tag and how much output to keep instead; no timeout unless given). */
enum crl_exec_kind { CRL_EXEC_KIND_EXEC, CRL_EXEC_KIND_SESSION, CRL_EXEC_KIND_PROCESS };

void crl_exec_req_free(struct crl_exec_req *r);
int crl_exec_req_parse(const char *json, size_t len, enum crl_exec_kind kind,
                       struct crl_exec_req *r, struct crl_err *err);
/* A terminal's size: {"rows": R, "cols": C}, each 1..CRL_TTY_MAX. */
int crl_tty_size_parse(json_t *v, const char *what, unsigned short *rows, unsigned short *cols,
                       struct crl_err *err);

struct crl_session_req {
    char id[24]; /* "": a new id; set only by corrald itself (a trajectory's reopen) */
    char **env;
    char *cwd;
    char *shell; /* default /bin/sh */
    struct crl_user user;
};
void crl_session_req_free(struct crl_session_req *r);
int crl_session_req_parse(const char *json, size_t len, struct crl_session_req *r,
                          struct crl_err *err);

/* Helpers shared with other request parsers. */
int crl_json_load(const char *json, size_t len, json_t **out, struct crl_err *err);
/* "an object", "a string", ...: a JSON value's type, for messages. */
const char *crl_json_type_name(const json_t *v);
/* Every key of `obj` must be in `allowed` (else CRL_E_INVALID naming
 * where.key): a misspelt field is an error, not a silent default. */
int crl_json_check_keys(json_t *obj, const char *where, const char *const *allowed, size_t n,
                        struct crl_err *err);
/* An integer in [lo, hi], or a string of at most maxlen bytes without NUL;
 * `name` names the field in the message. */
int crl_json_get_uint(json_t *v, const char *name, long long lo, long long hi, unsigned *out,
                      struct crl_err *err);
/* A time as every answer of the API gives it: RFC 3339 in UTC with
 * milliseconds ("2026-12-03T13:16:01.778Z"); null for 0 (never). */
json_t *crl_json_time(double wall_s);
/* The same for a stored record's times (numbers of seconds): each of
 * `keys` in o that is a number becomes such a string. */
void crl_json_times(json_t *o, const char *const *keys, size_t n);
int crl_json_get_string(json_t *v, const char *name, size_t maxlen, const char **out,
                        struct crl_err *err);
void crl_strv_free(char **v);
/* A copy of a NULL-terminated vector of strings; NULL when out of memory. */
char **crl_strv_dup(char *const *v);
size_t crl_strv_len(char *const *v);

#endif
