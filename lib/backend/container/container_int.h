/* The container backend, corrald's side, shared by its files:
 *
 *   container.c  the ops table; a sandbox's life (create, teardown and
 *                drain, pause, usage); the backend's start and end
 *   spawners.c   the spawners: requests to them, their replies and
 *                events, their restarts
 *   procs.c      what runs in a sandbox through a spawner: processes,
 *                files (open, streams), checkpoints (snapshot, restore)
 *
 * cgroups, network namespaces and stdio pipes are made here; everything
 * that enters a sandbox's namespaces is asked of a spawner (spawn_proto.h;
 * the spawner itself is spawner.c).  See docs/architecture.md. */
#ifndef CRL_CONTAINER_CONTAINER_INT_H
#define CRL_CONTAINER_CONTAINER_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "../../core/backend.h"
#include "../../core/sandbox.h"
#include "../../os/cgroup.h"
#include "../../util/cleanup.h"
#include "../../util/loop.h"
#include "spawn_proto.h"

#define MAX_SPAWNERS 16

enum pending_kind { P_CREATE, P_SPAWN, P_OPEN, P_STREAM, P_RESTORE, P_ADOPT };

struct pending {
    uint64_t id;
    enum pending_kind kind;
    struct crl_sandbox *sb;
    void *obj;     /* crl_proc, crl_open_req, crl_stream_req or ctr_restore */
    char leaf[24]; /* a stream's cgroup leaf, removed when it ends */
    struct pending *next;
};

/* A process of ours that a spawner will report the exit of. */
struct running {
    pid_t pid;
    enum pending_kind kind; /* P_SPAWN, P_STREAM or P_RESTORE */
    struct crl_sandbox *sb;
    void *obj;
    char leaf[24];
    struct running *next;
};

struct spawner {
    struct ctr_state *st;
    unsigned idx;
    pid_t pid;
    int sock;
    bool ready;             /* said hello: takes requests */
    unsigned failures;      /* restarts in a row that did not say hello */
    struct crl_timer timer; /* the next restart, or the hello's deadline */
    struct crl_watch w;
    unsigned inflight;
    struct pending *pending;
    struct running *running;
};

struct ctr_state {
    struct crl_host *host;
    struct spawner sp[MAX_SPAWNERS];
    unsigned n_sp;
    uint64_t next_id;
    char spawner_path[PATH_MAX];
    char workdir[PATH_MAX];
    char *msg;
};

struct ctr_sandbox {
    struct crl_cgroup *cg;
    int netns_fd;
    int pidfd;
    pid_t pid;
    int tmpfs_fd;
    struct crl_timens timens; /* its clock offsets, fixed at create */
    unsigned spawner;
    struct crl_watch w_init;
    bool init_dead;
    bool adopted;        /* its PID 1 outlived the spawner that made it: nobody we know reaps it */
    uint64_t adopt_seq;  /* since its last takeover: leaves below e<this> are the old run's */
    uint64_t init_start; /* its PID 1's start time and pid namespace (lib/os/proc.h) */
    uint64_t init_pidns;
    bool releasing;
    struct crl_cgroup_reclaim last_pause; /* what the last pause gave back */
    bool create_failed;                   /* draining after a create that failed half-way */
    struct crl_err create_err;            /* ... and why */
    unsigned drain_tries;
    struct crl_timer drain_timer;
};

struct ctr_proc {
    char leaf[24];
    unsigned spawner;
    int kept;           /* where its PID 1 keeps our ends of its stdio (CRL_EXEC_F_KEEP), or -1 */
    uint64_t start;     /* its start time (lib/os/proc.h), for its record */
    bool on_pidfd;      /* no spawner knows it (taken back by this corrald, or its
                           spawner died): its end comes from its pidfd */
    struct crl_watch w; /* on_pidfd: on its pidfd */
    struct crl_timer t; /* on_pidfd and ended: till PID 1 has reaped it */
    unsigned status_tries;
};

/* A checkpoint being restored by a helper in the sandbox (spawner.c). */
struct ctr_restore {
    struct crl_restore_req *rq;
    struct crl_sandbox *sb; /* a reference is held */
    int msg_fd;             /* the helper's last words */
};

extern struct ctr_state *crl_ctr_state; /* one container backend per host process */

/* ---- spawners.c ---- */

/* A spawner that takes requests (the least loaded), or NULL with err. */
struct spawner *crl_ctr_pick_spawner(struct ctr_state *st, struct crl_err *err);
/* A spawner for a request about a running sandbox (the least loaded);
 * NULL with err. */
struct spawner *crl_ctr_spawner_for(struct crl_sandbox *sb, struct crl_err *err);
/* The spawner that created the sandbox and holds its PID 1; NULL with err. */
struct spawner *crl_ctr_home_spawner(struct crl_sandbox *sb, struct crl_err *err);
/* Send a request (its fds with it) and remember what answers it. */
int crl_ctr_send_req(struct spawner *s, struct crl_spawn_req *rq, size_t len, const int *fds,
                     int nfds, enum pending_kind kind, struct crl_sandbox *sb, void *obj,
                     const char *leaf, struct crl_err *err);
/* A process of the sandbox's the spawner will report the exit of. */
void crl_ctr_add_running(struct spawner *s, pid_t pid, enum pending_kind kind,
                         struct crl_sandbox *sb, void *obj, const char *leaf);
/* ... no longer: a handover lets it go. */
void crl_ctr_forget_running(struct spawner *s, pid_t pid);
/* A spawner's failure, with the step it names, as an error. */
void crl_ctr_spawn_error(const struct crl_spawn_reply *r, const char *what, struct crl_err *err);
int crl_ctr_start_spawner(struct ctr_state *st, unsigned i, bool wait, struct crl_err *err);

/* ---- container.c ---- */

/* The spawner's answer to CREATE. */
void crl_ctr_create_done(struct crl_sandbox *sb, const struct crl_spawn_reply *r, int *fds,
                         int nfds);
/* A spawner said hello after its predecessor died: it takes over the
 * sandboxes that one made (their PID 1s live on); ADOPT's answer (r NULL:
 * that spawner died too, before it answered). */
void crl_ctr_adopt_all(struct spawner *s);
void crl_ctr_adopt_done(struct crl_sandbox *sb, const struct crl_spawn_reply *r);
/* The children a PID 1 that spawner `s` took over still runs for the
 * spawner before (CRL_SPAWN_KIDS, fd: their pids): ended, with their leaves. */
void crl_ctr_kids(struct spawner *s, const struct crl_spawn_reply *r, int fd);

/* ---- procs.c: the replies and exits a spawner reports, and the ops ---- */

void crl_ctr_spawn_done(struct spawner *s, struct crl_sandbox *sb, struct crl_proc *p,
                        const struct crl_spawn_reply *r, int *fds, int nfds);
void crl_ctr_proc_exited(struct crl_sandbox *sb, struct crl_proc *p,
                         const struct crl_spawn_reply *r);
void crl_ctr_open_done(struct crl_sandbox *sb, struct crl_open_req *o,
                       const struct crl_spawn_reply *r, int *fds, int nfds);
void crl_ctr_stream_started(struct spawner *s, struct crl_sandbox *sb, struct crl_stream_req *t,
                            const char *leaf, const struct crl_spawn_reply *r, int *fds, int nfds);
void crl_ctr_restore_started(struct spawner *s, struct crl_sandbox *sb, struct ctr_restore *cr,
                             const char *leaf, const struct crl_spawn_reply *r, int *fds, int nfds);
void crl_ctr_restore_exited(struct crl_sandbox *sb, struct ctr_restore *cr, const char *leaf,
                            int code);
void crl_ctr_restore_finish(struct ctr_restore *cr, const struct crl_err *err);
void crl_ctr_remove_leaf(struct crl_sandbox *sb, const char *leaf);
/* Ops: a session's shell, recorded and taken back by a corrald started anew. */
json_t *crl_ctr_proc_record(struct crl_sandbox *sb, struct crl_proc *p);
int crl_ctr_adopt_proc(struct crl_sandbox *sb, struct crl_proc *p, json_t *rec,
                       struct crl_err *err);
void crl_ctr_release_proc(struct crl_sandbox *sb, struct crl_proc *p);
/* Its spawner died: does it run on (a session's shell, whose stdio its
 * PID 1 keeps), its end heard from its pidfd? */
bool crl_ctr_proc_outlives_spawner(struct crl_sandbox *sb, struct crl_proc *p);

int crl_ctr_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err);
int crl_ctr_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope);
int crl_ctr_signal(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
                   struct crl_err *err);
int crl_ctr_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err);
int crl_ctr_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err);
int crl_ctr_snapshot(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err);
int crl_ctr_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err);

#endif
