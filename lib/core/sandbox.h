/* A sandbox and its life: creating -> ready <-> paused -> destroying ->
 * destroyed, or failed on the way (a create that fails leaves nothing).
 *
 * The host owns sandboxes; backends build and tear them down and report
 * back through crl_sandbox_created(), crl_sandbox_failed() and
 * crl_sandbox_destroyed().  A destroyed sandbox stays visible (state,
 * final usage) for the host's tombstone time, for accounting.
 *
 * lib/core depends one way, each file only on those below it:
 *
 *     host.c          session.c        the table, admission, slots,
 *       |                 |            tombstones, registered backends;
 *       |              exec.c          a shell between commands; one command
 *        \               /
 *         `- sandbox.c -'              one sandbox: its state, timers,
 *               |                      processes, end hooks
 *     backend.h  image.c  spec.c  etc.c
 *
 * sandbox.c reaches its host only through struct crl_sb_owner, and learns
 * of sessions only through the end hooks they register, so the host never
 * calls into exec or sessions. */
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
struct crl_process;
struct crl_code_ctx;
struct crl_pool;
typedef void (*crl_sandbox_cb)(struct crl_sandbox *sb, const struct crl_err *err, void *ctx);
typedef void (*crl_sandbox_hook)(struct crl_sandbox *sb);

struct crl_sb_waiter {
    crl_sandbox_cb cb;
    void *ctx;
    struct crl_sb_waiter *next;
};

/* What the lives of a host's sandboxes add up to (its metrics). */
struct crl_sb_counters {
    uint64_t created, create_failed, destroyed, failed, rejected_capacity, claimed, adopted;
    uint64_t execs, exec_timeouts, exec_ooms;
};

/* The host as the sandboxes it holds see it (host.c fills one in for all
 * of them): the loop their timers run on, the counters their lives add
 * to, and the host's part of their end. */
struct crl_sb_owner {
    struct crl_loop *loop;
    struct crl_sb_counters *counters;
    /* Give back what the host reserved for an ended sandbox: its slot and
     * its share of memory, CPUs and the sandbox count. */
    void (*release)(struct crl_sandbox *sb);
    /* Take an ended sandbox out of the host's table with the table's
     * reference: at once, or (`bury`) after the host's tombstone time. */
    void (*retire)(struct crl_sandbox *sb, bool bury);
    /* A destroy stopped everything of it (crl_sandbox_stopped): it no longer
     * counts as running, though `release` has yet to give back the rest. */
    void (*stopped)(struct crl_sandbox *sb);
    /* It became ready (NULL: nothing to do). */
    void (*ready)(struct crl_sandbox *sb);
    /* What a record of it says changed: its ttl (NULL: nothing to do). */
    void (*changed)(struct crl_sandbox *sb);
};

#define CRL_SB_END_HOOKS 4

struct crl_sandbox {
    char id[40];
    struct crl_host *host; /* for the layers above (backends, API); sandbox.c uses owner */
    const struct crl_sb_owner *owner;
    const struct crl_backend_ops *ops;
    void *priv; /* the backend's */
    struct crl_spec spec;
    struct crl_image *image;              /* NULL on a host that serves no images */
    int volume_fds[CRL_SPEC_MAX_VOLUMES]; /* spec.volumes' mounts or disks: the host's, borrowed */
    enum crl_sb_state state;
    char end_reason[32]; /* why it ended: destroyed, ttl, idle_ttl, init_exited, ... */
    char message[256];   /* what went wrong, for failed sandboxes */
    double created_at, ready_at, ended_at;
    double expires_at;  /* when its ttl ends (wall clock); 0: never, or it is paused for it */
    unsigned timeout_s; /* its ttl as last set: the spec's ttl_s, or POST .../timeout's */
    bool ttl_paused;    /* its ttl (or idle ttl) paused it: a resume starts it again */
    uint64_t last_active_ns;
    struct crl_usage usage; /* final figures once ended */
    unsigned slot;
    bool has_slot;
    bool net_linked;        /* its namespace has a link to the sandboxes' network (backend.c) */
    bool net_tap;           /* and a VM's tap bridged to it (crl_backend_net_tap) */
    bool slot_quarantined;  /* the backend could not empty it: never reuse it */
    bool destroy_requested; /* while creating */
    bool tearing_down;      /* the backend's destroy runs: it ends in crl_sandbox_destroyed */
    bool stopped;           /* ... and nothing of it runs any more (crl_sandbox_stopped) */
    unsigned refs;          /* requests holding it; freed at 0 once gone */
    uint64_t next_seq;
    struct crl_timer ttl_timer, idle_timer, tombstone_timer;
    struct crl_timer claim_timer; /* a claim's answer, on the loop's next turn */
    /* The warm pool it waits in, unclaimed (lib/core/pool.h): nobody's yet,
     * so the API neither lists nor finds it. */
    struct crl_pool *pool;
    struct crl_sandbox *pool_next;
    struct crl_sb_waiter *create_waiters, *destroy_waiters;
    struct crl_proc *procs;
    struct crl_session *sessions; /* session.c's */
    unsigned n_sessions;
    struct crl_process *processes;      /* process.c's: background processes, oldest first */
    struct crl_code_ctx *code_contexts; /* code.c's */
    unsigned n_processes_live, n_processes_ended;
    crl_sandbox_hook end_hooks[CRL_SB_END_HOOKS]; /* see crl_sandbox_on_end() */
    /* Checkpoints and the trajectory (lib/traj/traj.h), owned by the layer
     * above the host; on_gone runs once, when nothing of the sandbox runs
     * any more (crl_sandbox_stopped) or the backend has torn it down. */
    struct crl_traj_sb *traj;
    void (*on_gone)(struct crl_sandbox *sb);
    /* Its services' exchanges (lib/api/service_server.c): the newest, and
     * those no trajectory step holds yet. */
    json_t *svc_log, *svc_pending;
    uint64_t svc_seq, svc_dropped;
    /* What runs in it that its record names, as {kind: {id: true}}:
     * sessions by id, background processes by pid (crl_sandbox_child);
     * and what of that a corrald before this one had when it died, each
     * lost (adopted sandboxes: lib/core/host.c). */
    json_t *children, *lost_children;
    /* What the layers above keep in its record, by name (the API: the
     * Idempotency-Key that made it): crl_sandbox_note. */
    json_t *notes;
    struct crl_sandbox *next, *prev;           /* the host's list, in creation order reversed */
    struct crl_sandbox *next_hash;             /* the host's id index */
    struct crl_sandbox *tomb_next, *tomb_prev; /* the host's ended sandboxes, oldest first */
    bool buried;
    bool handed_over; /* runs on when corrald exits, for the next one (crl_host_close) */
};

void crl_sandbox_ref(struct crl_sandbox *sb);
/* Drop a reference; the last one frees the sandbox. */
void crl_sandbox_unref(struct crl_sandbox *sb);

/* Host -> sandbox: have the backend build a sandbox the host has admitted
 * and holds in its table (owner, ops, spec, slot and image set); cb runs
 * once it is ready or has failed.  If the build cannot even start, returns
 * -1 with *err: the host's part is released and the sandbox retired (gone,
 * unless the caller holds a reference), and cb never runs. */
int crl_sandbox_build(struct crl_sandbox *sb, crl_sandbox_cb cb, void *ctx, struct crl_err *err);
/* Destroy (idempotent); cb runs once it is gone.  One that is still being
 * created is destroyed once it is ready; a failed one is only marked
 * destroyed (the backend has its teardown under way or done). */
int crl_sandbox_destroy(struct crl_sandbox *sb, const char *reason, crl_sandbox_cb cb, void *ctx,
                        struct crl_err *err);

/* Host -> sandbox: a ready sandbox of a pool becomes a create's: it takes
 * spec's labels, TTLs (which run from now) and execs' env and cwd (spec
 * gets the sandbox's old ones, for the caller to free), and cb runs on the
 * loop's next turn, as if it had just been made. */
int crl_sandbox_claim(struct crl_sandbox *sb, struct crl_spec *spec, crl_sandbox_cb cb, void *ctx,
                      struct crl_err *err);

/* Host -> sandbox: one a corrald before this one made, taken over by its
 * backend's adopt, is ready (or paused) again, its ttl where it was. */
void crl_sandbox_adopted(struct crl_sandbox *sb, bool paused, double expires_at, unsigned timeout_s,
                         bool ttl_paused);

/* Host -> sandbox: corrald exits and leaves it running (a handover): what
 * the layers above run in it ends, as at a destroy, and nothing else but
 * processes that outlive corrald (sessions' shells), which are let go. */
void crl_sandbox_hand_over(struct crl_sandbox *sb);

/* Backend -> host. */
void crl_sandbox_created(struct crl_sandbox *sb, const struct crl_err *err);
void crl_sandbox_failed(struct crl_sandbox *sb, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void crl_sandbox_destroyed(struct crl_sandbox *sb);
/* Optional, before crl_sandbox_destroyed() of a destroy: nothing of the
 * sandbox runs any more, so its destroy is answered now and the layers
 * above let go of it (on_gone); its resources (slot, cgroups, admission)
 * stay held until crl_sandbox_destroyed(). */
void crl_sandbox_stopped(struct crl_sandbox *sb);

/* Layers above that run things in a sandbox (sessions) hear of its end
 * here: each hook runs once, when the sandbox starts to end (destroyed or
 * failed), before its processes are killed and before the backend's
 * destroy, to end what it runs.  Registering a hook again does nothing;
 * -1 with CRL_E_INTERNAL past CRL_SB_END_HOOKS different ones. */
int crl_sandbox_on_end(struct crl_sandbox *sb, crl_sandbox_hook hook, struct crl_err *err);

/* A session (kind "session") or background process ("process") of the
 * sandbox begins or ends, for its record. */
void crl_sandbox_child(struct crl_sandbox *sb, const char *kind, const char *id, bool live);
/* ... and is what `what` says (a reference is taken; NULL: it ended): a
 * session whose shell a corrald started anew can take back records that
 * shell (crl_sandbox_proc_record). */
void crl_sandbox_child_is(struct crl_sandbox *sb, const char *kind, const char *id, json_t *what);
/* Keep `value` (a reference is taken) under `name` in its record: an
 * adopted sandbox has its notes again. */
void crl_sandbox_note(struct crl_sandbox *sb, const char *name, json_t *value);
/* If `id` of `kind` was lost with a corrald before this one: why (a
 * message), else NULL. */
const char *crl_sandbox_child_lost(const struct crl_sandbox *sb, const char *kind, const char *id);

/* Activity resets the idle TTL. */
void crl_sandbox_touch(struct crl_sandbox *sb);
/* Its ttl ends `timeout_s` seconds from now (0: never), whatever the spec
 * said: a ready or paused sandbox only (409 otherwise). */
int crl_sandbox_set_timeout(struct crl_sandbox *sb, unsigned timeout_s, struct crl_err *err);
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
/* A started process that is to outlive corrald (a session's shell), as its
 * record keeps it; NULL if its backend cannot take it back.  Adopting
 * (sb adopted, p zeroed but for its owner's fields) sets p up from that
 * record, running and tracked as crl_sandbox_spawn's are; -1 with err
 * (what stops it) if it cannot. */
json_t *crl_sandbox_proc_record(struct crl_sandbox *sb, struct crl_proc *p);
int crl_sandbox_adopt_proc(struct crl_sandbox *sb, struct crl_proc *p, json_t *rec,
                           struct crl_err *err);
/* A handover (sb->handed_over) lets go of a process that outlives corrald:
 * untracked, running on (its owner closes its stdio). */
void crl_sandbox_release_proc(struct crl_sandbox *sb, struct crl_proc *p);
/* The process's owner hands it back once it has exited or never started. */
void crl_sandbox_proc_done(struct crl_sandbox *sb, struct crl_proc *p);

/* Current usage (live from the backend, or the final figures). */
void crl_sandbox_usage(struct crl_sandbox *sb, struct crl_usage *u);
json_t *crl_sandbox_json(struct crl_sandbox *sb);

#endif
