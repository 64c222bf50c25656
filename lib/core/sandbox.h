/* A sandbox and its life: creating -> ready -> (failed) -> destroyed.
 *
 * The host owns sandboxes; backends build and tear them down and report
 * back through crl_sandbox_created(), crl_sandbox_failed() and
 * crl_sandbox_destroyed().  A destroyed sandbox stays visible (state,
 * final usage) for the host's tombstone time, for accounting. */
#ifndef CRL_CORE_SANDBOX_H
#define CRL_CORE_SANDBOX_H

#include <jansson.h>
#include <stdbool.h>

#include "backend.h"
#include "image.h"
#include "../util/loop.h"
#include "spec.h"

enum crl_sb_state {
    CRL_SB_CREATING,
    CRL_SB_READY,
    CRL_SB_PAUSED,
    CRL_SB_FAILED,
    CRL_SB_DESTROYING,
    CRL_SB_DESTROYED,
};

const char *crl_sb_state_name(enum crl_sb_state s);

struct crl_sandbox;
struct crl_session;
typedef void (*crl_sandbox_cb)(struct crl_sandbox *sb, const struct crl_err *err, void *ctx);

struct crl_sb_waiter {
    crl_sandbox_cb cb;
    void *ctx;
    struct crl_sb_waiter *next;
};

struct crl_sandbox {
    char id[40];
    struct crl_host *host;
    const struct crl_backend_ops *ops;
    void *priv; /* the backend's */
    struct crl_spec spec;
    struct crl_image *image;
    enum crl_sb_state state;
    char end_reason[32]; /* why it ended: destroyed, ttl, idle_ttl, init_exited, ... */
    char message[256];   /* what went wrong, for failed sandboxes */
    double created_at, ready_at, ended_at;
    uint64_t last_active_ns;
    struct crl_usage usage; /* final figures once ended */
    unsigned slot;
    bool has_slot;
    bool slot_quarantined;  /* the backend could not empty it: never reuse it */
    bool destroy_requested; /* while creating */
    bool tearing_down;      /* the backend's destroy runs: it ends in crl_sandbox_destroyed */
    unsigned refs;          /* requests holding it; freed at 0 once gone */
    uint64_t next_seq;
    struct crl_timer ttl_timer, idle_timer, tombstone_timer;
    struct crl_sb_waiter *create_waiters, *destroy_waiters;
    struct crl_proc *procs;
    struct crl_session *sessions;
    /* Checkpoints and the trajectory (lib/traj/traj.h), owned by the layer
     * above the host; on_gone runs once, when the backend has torn it down. */
    struct crl_traj_sb *traj;
    void (*on_gone)(struct crl_sandbox *sb);
    struct crl_sandbox *next, *prev;           /* the host's list, in creation order reversed */
    struct crl_sandbox *next_hash;             /* the host's id index */
    struct crl_sandbox *tomb_next, *tomb_prev; /* the host's ended sandboxes, oldest first */
    bool buried;
};

void crl_sandbox_ref(struct crl_sandbox *sb);
void crl_sandbox_unref(struct crl_sandbox *sb);

/* Backend -> host. */
void crl_sandbox_created(struct crl_sandbox *sb, const struct crl_err *err);
void crl_sandbox_failed(struct crl_sandbox *sb, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void crl_sandbox_destroyed(struct crl_sandbox *sb);

/* Activity resets the idle TTL. */
void crl_sandbox_touch(struct crl_sandbox *sb);
/* Is it in a state to run things?  A paused sandbox is resumed first, so
 * any exec, file or session call wakes it.  Fills err (CRL_E_CONFLICT) if
 * not. */
int crl_sandbox_check_ready(struct crl_sandbox *sb, struct crl_err *err);

/* ready -> paused: every process stopped, what memory can be released
 * given back (the backend's pause).  Idempotent on a paused sandbox.  Its
 * ttl keeps running; its idle time does not (resuming starts it afresh).
 * CRL_E_UNSUPPORTED for a backend without the op, CRL_E_CONFLICT in any
 * other state. */
int crl_sandbox_pause(struct crl_sandbox *sb, struct crl_err *err);
/* paused -> ready (a ready sandbox is left as it is). */
int crl_sandbox_resume(struct crl_sandbox *sb, struct crl_err *err);

/* Processes: start one through the backend, tracking it on the sandbox. */
int crl_sandbox_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err);
/* The process's owner hands it back once it has exited or never started. */
void crl_sandbox_proc_done(struct crl_sandbox *sb, struct crl_proc *p);

/* Current usage (live from the backend, or the final figures). */
void crl_sandbox_usage(struct crl_sandbox *sb, struct crl_usage *u);
json_t *crl_sandbox_json(struct crl_sandbox *sb);

#endif
