/* The container backend, corrald's side: cgroups, network namespaces and
 * stdio pipes are made here; everything that enters a sandbox's namespaces
 * is asked of a spawner (spawn_proto.h).  See docs/architecture.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../../core/backend.h"
#include "../../core/etc.h"
#include "../../core/host.h"
#include "../../core/sandbox.h"
#include "../../helper/tar.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "spawn_proto.h"

#define MAX_SPAWNERS 16

enum pending_kind { P_CREATE, P_SPAWN, P_OPEN, P_STREAM, P_RESTORE };

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
    int root_fd;
    int tmpfs_fd;
    struct crl_spawn_timens timens; /* its clock offsets, fixed at create */
    unsigned spawner;
    struct crl_watch w_init;
    bool init_dead;
    bool releasing;
    bool paused;                          /* frozen: thawed before anything kills it */
    struct crl_cgroup_reclaim last_pause; /* what the last pause gave back */
    bool create_failed;                   /* draining after a create that failed half-way */
    struct crl_err create_err;            /* ... and why */
    unsigned drain_tries;
    struct crl_timer drain_timer;
};

struct ctr_proc {
    char leaf[24];
    unsigned spawner;
};

/* A checkpoint being restored by a helper in the sandbox (spawner.c). */
struct ctr_restore {
    struct crl_restore_req *rq;
    struct crl_sandbox *sb; /* a reference is held */
    int msg_fd;             /* the helper's last words */
};

static struct ctr_state *g_state; /* one container backend per host process */

static int start_spawner(struct ctr_state *st, unsigned i, bool wait, struct crl_err *err);

/* ---- requests ---- */

/* The least busy running spawner; CRL_E_UNAVAILABLE if none runs. */
static struct spawner *pick_spawner(struct ctr_state *st, struct crl_err *err)
{
    struct spawner *best = NULL;
    for (unsigned i = 0; i < st->n_sp; i++)
        if (st->sp[i].ready && (!best || st->sp[i].inflight < best->inflight))
            best = &st->sp[i];
    if (!best)
        crl_err_set(err, CRL_E_UNAVAILABLE, "no container spawner is running");
    return best;
}

/* The spawner for a request about a running sandbox. */
static struct spawner *spawner_for(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing) {
        crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
        return NULL;
    }
    return pick_spawner(g_state, err);
}

static int send_req(struct spawner *s, struct crl_spawn_req *rq, size_t len, const int *fds,
                    int nfds, enum pending_kind kind, struct crl_sandbox *sb, void *obj,
                    const char *leaf, struct crl_err *err)
{
    struct pending *p = malloc(sizeof(*p));
    if (!p)
        return crl_err_sys(err, ENOMEM, "spawner request");
    rq->id = ++s->st->next_id;
    rq->nfds = (uint32_t)nfds;
    if (crl_send_fds(s->sock, rq, len, fds, nfds) < 0) {
        int e = errno;
        free(p);
        crl_log_syscall(sb ? sb->id : NULL, e, "sendmsg(spawner %u)", s->idx);
        return crl_err_sys(err, e, "talking to the spawner");
    }
    p->id = rq->id;
    p->kind = kind;
    p->sb = sb;
    p->obj = obj;
    snprintf(p->leaf, sizeof(p->leaf), "%s", leaf ? leaf : "");
    /* append: replies mostly come in order */
    struct pending **pp = &s->pending;
    while (*pp)
        pp = &(*pp)->next;
    p->next = NULL;
    *pp = p;
    s->inflight++;
    return 0;
}

static struct pending *take_pending(struct spawner *s, uint64_t id)
{
    for (struct pending **pp = &s->pending; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct pending *p = *pp;
            *pp = p->next;
            s->inflight--;
            return p;
        }
    return NULL;
}

static void add_running(struct spawner *s, pid_t pid, enum pending_kind kind,
                        struct crl_sandbox *sb, void *obj, const char *leaf)
{
    struct running *r = malloc(sizeof(*r));
    if (!r) {
        crl_error(sb->id, "out of memory tracking pid %d", pid);
        return;
    }
    *r = (struct running){.pid = pid, .kind = kind, .sb = sb, .obj = obj, .next = s->running};
    snprintf(r->leaf, sizeof(r->leaf), "%s", leaf ? leaf : "");
    s->running = r;
}

static struct running *take_running(struct spawner *s, pid_t pid)
{
    for (struct running **pp = &s->running; *pp; pp = &(*pp)->next)
        if ((*pp)->pid == pid) {
            struct running *r = *pp;
            *pp = r->next;
            return r;
        }
    return NULL;
}

/* A spawner's errno and step, as the API error a user can act on. */
static void spawn_error(const struct crl_spawn_reply *r, const char *what, struct crl_err *err)
{
    const char *step = crl_spawn_step_name(r->step);
    if (r->err == ESRCH && (r->step == CRL_STEP_SETNS || r->step == CRL_STEP_OPEN))
        crl_err_set(err, CRL_E_CONFLICT, "%s: the sandbox is not running", what);
    else if (r->err == ECANCELED)
        crl_err_set(err, CRL_E_CONFLICT, "%s: killed before it started", what);
    else if (r->step == CRL_STEP_EXEC && r->err == ENOENT)
        crl_err_set(err, CRL_E_NOT_FOUND, "%s: executable not found in the sandbox", what);
    else if (r->step == CRL_STEP_EXEC && (r->err == EACCES || r->err == ENOEXEC))
        crl_err_set(err, CRL_E_INVALID, "%s: cannot be executed: %s", what, strerror(r->err));
    else if (r->step == CRL_STEP_CWD)
        crl_err_set(err, r->err == ENOENT ? CRL_E_NOT_FOUND : CRL_E_INVALID,
                    "working directory %s: %s", what, strerror(r->err));
    else if (r->step == CRL_STEP_OPEN && r->err == ENOENT)
        crl_err_set(err, CRL_E_NOT_FOUND, "%s: no such file or directory in the sandbox", what);
    else if (r->step == CRL_STEP_OPEN && r->err == EINVAL)
        crl_err_set(err, CRL_E_INVALID, "%s: not a regular file or directory", what);
    else if (r->step == CRL_STEP_OPEN &&
             (r->err == EISDIR || r->err == ENOTDIR || r->err == ELOOP || r->err == EXDEV))
        crl_err_set(err, CRL_E_INVALID, "%s: %s", what, strerror(r->err));
    else if (r->step == CRL_STEP_OPEN && (r->err == EACCES || r->err == EPERM || r->err == EROFS))
        crl_err_set(err, CRL_E_FORBIDDEN, "%s: %s", what, strerror(r->err));
    else if (r->err == ENOSPC || r->err == EDQUOT)
        crl_err_set(err, CRL_E_NO_SPACE, "%s: the sandbox's disk is full", what);
    else
        crl_err_sys(err, r->err, "%s: %s%s%s", what, step, r->msg[0] ? ": " : "", r->msg);
}

/* ---- sandbox teardown ---- */

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Give back what corrald holds for a sandbox whose processes are all gone.
 * A destroyed sandbox's cgroup is kept for the next one of its slot; a
 * failed create removes it, leaving nothing of the attempt.  A sandbox whose
 * cgroup would not empty is quarantined: its slot and cgroup are never
 * reused and its network namespace is not pooled (a restart reconciles). */
static void release(struct crl_sandbox *sb, bool quarantine)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_host *h = sb->host;
    bool failed_create = c->create_failed;
    struct crl_err create_err = c->create_err;
    crl_timer_stop(h->loop, &c->drain_timer);
    crl_watch_stop(h->loop, &c->w_init);
    crl_debug(sb->id, "released after %u drain turn(s)", c->drain_tries);
    struct crl_err err = CRL_ERR_INIT;
    if (c->cg && crl_cgroup_release(c->cg, failed_create && !quarantine, &err) < 0)
        crl_warn(sb->id, "%s", err.msg);
    c->cg = NULL;
    if (c->netns_fd >= 0) {
        if (quarantine)
            close(c->netns_fd);
        else
            crl_netns_put(h->netns, c->netns_fd);
        c->netns_fd = -1;
    }
    close_fd(&c->pidfd);
    close_fd(&c->root_fd);
    close_fd(&c->tmpfs_fd);
    free(c);
    sb->priv = NULL;
    sb->slot_quarantined = quarantine;
    if (failed_create)
        crl_sandbox_created(sb, &create_err);
    else
        crl_sandbox_destroyed(sb);
}

/* Once init is gone, wait for the cgroup to empty (helpers outside the pid
 * namespace, zombies the spawner has yet to reap), then release.  A timer,
 * not a wait: the loop serves everyone else meanwhile. */
static void drain(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    struct ctr_sandbox *c = sb->priv;
    int n = c->cg ? crl_cgroup_count(c->cg, NULL) : 0;
    /* Empty, its cgroups may still be busy for a moment: tidy them here,
     * where waiting costs nothing, so that release never waits. */
    bool busy = n == 0 && c->cg && crl_cgroup_tidy(c->cg, c->create_failed) < 0 && errno == EBUSY;
    if ((n > 0 || busy) && c->drain_tries++ < 5000) {
        if (n > 0 && c->drain_tries % 500 == 1)
            crl_cgroup_kill_all(c->cg, NULL);
        crl_timer_start(sb->host->loop, &c->drain_timer, 1000000, drain, sb);
        return;
    }
    if (n > 0)
        crl_error(sb->id,
                  "%d process(es) still in the cgroup after 5s: slot quarantined until restart", n);
    release(sb, n > 0);
}

static void start_drain(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    /* Helpers that are not in the sandbox's pid namespace (streams) die too. */
    if (c->cg)
        crl_cgroup_kill_all(c->cg, NULL);
    c->drain_tries = 0;
    c->drain_timer.data = sb;
    drain(&c->drain_timer);
}

static void init_exited(struct crl_watch *w, uint32_t ev)
{
    struct crl_sandbox *sb = w->data;
    struct ctr_sandbox *c = sb->priv;
    crl_watch_stop(sb->host->loop, w);
    c->init_dead = true;
    if (!c->releasing) {
        /* Nobody asked: the sandbox failed.  Its init never exits on its
         * own, so the spawner died or something killed it from outside. */
        crl_sandbox_failed(sb, "init_exited", "the sandbox's init process (pid %d) died", c->pid);
        return;
    }
    start_drain(sb);
}

static void ctr_destroy(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c) {
        crl_sandbox_destroyed(sb);
        return;
    }
    c->releasing = true;
    /* A frozen init (v1) would not die of the SIGKILL until thawed. */
    if (c->paused && c->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_freeze(c->cg, false, &err) < 0)
            crl_warn(sb->id, "destroy: %s", err.msg);
        c->paused = false;
    }
    if (c->init_dead) {
        start_drain(sb);
        return;
    }
    /* Killing a pid namespace's init kills everything in it. */
    if (syscall(SYS_pidfd_send_signal, c->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(sb->id, errno, "pidfd_send_signal(init %d, SIGKILL)", c->pid);
}

/* A create ctr_create began but could not finish: nothing started yet. */
static void undo_create(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_host *h = sb->host;
    if (c->cg)
        crl_cgroup_release(c->cg, true, NULL);
    if (c->netns_fd >= 0)
        crl_netns_put(h->netns, c->netns_fd);
    free(c);
    sb->priv = NULL;
}

/* ---- create ---- */

/* The files a machine has that no image can know: /etc/hostname and
 * /etc/hosts name the sandbox (its id is its hostname), /etc/resolv.conf
 * says how names resolve on its network (lib/core/etc.h).  init.c puts
 * them in a layer above the image's.  Packed as "name\0contents\0" pairs;
 * returns the length, or 0 if `cap` is short. */
static size_t runtime_files(const struct crl_sandbox *sb, char *out, size_t cap)
{
    static const char *const names[3] = {"hostname", "hosts", "resolv.conf"};
    char text[3][512];
    int n[3] = {crl_etc_hostname(text[0], sizeof(text[0]), sb->id),
                crl_etc_hosts(text[1], sizeof(text[1]), sb->id),
                crl_etc_resolv_conf(text[2], sizeof(text[2]), sb->spec.network_mode)};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        int w = n[i] < 0 ? -1 : snprintf(out + off, cap - off, "%s%c%s%c", names[i], 0, text[i], 0);
        if (w < 0 || (size_t)w >= cap - off)
            return 0;
        off += (size_t)w;
    }
    return off;
}

static void create_done(struct crl_sandbox *sb, const struct crl_spawn_reply *r, int *fds, int nfds)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    if (r->err || nfds != 3) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (r->err)
            spawn_error(r, "building the sandbox", &err);
        else
            crl_err_set(&err, CRL_E_INTERNAL, "building the sandbox: spawner sent %d fds", nfds);
        /* The spawner killed what it started; once the cgroup is empty our
         * part goes, and then the create answers. */
        c->releasing = c->create_failed = true;
        c->create_err = err;
        start_drain(sb);
        return;
    }
    c->pidfd = fds[0];
    c->root_fd = fds[1];
    c->tmpfs_fd = fds[2];
    c->pid = r->pid;
    crl_watch_start(sb->host->loop, &c->w_init, c->pidfd, EPOLLIN, init_exited, sb);
    crl_sandbox_created(sb, NULL);
}

static int ctr_create(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_state *st = g_state;
    struct crl_host *h = sb->host;
    struct ctr_sandbox *c = calloc(1, sizeof(*c));
    if (!c)
        return crl_err_sys(err, ENOMEM, "sandbox");
    c->netns_fd = c->pidfd = c->root_fd = c->tmpfs_fd = -1;
    sb->priv = c;
    char name[32];
    snprintf(name, sizeof(name), "s%u", sb->slot);
    struct crl_cgroup_limits lim = {.memory_bytes = (uint64_t)sb->spec.memory_mb << 20,
                                    .pids = sb->spec.pids,
                                    .cpus = sb->spec.cpus};
    int fds[CRL_SPAWN_MAX_FDS];
    int ncg = 0;
    size_t nl = sb->image->n_layers;
    if (nl == 0 || nl > CRL_SPAWN_MAX_LAYERS) {
        crl_err_set(err, CRL_E_INVALID, "image %s has %zu layers: 1 to %d are supported",
                    sb->image->name, nl, CRL_SPAWN_MAX_LAYERS);
        goto fail;
    }
    struct spawner *s = pick_spawner(st, err);
    if (!s)
        goto fail;
    if (crl_cgroup_create(h->cgroups, name, &lim, &c->cg, err) < 0)
        goto fail;
    if ((c->netns_fd = crl_netns_get(h->netns, err)) < 0)
        goto fail;
    if (crl_cgroup_attach_fds(c->cg, ".", fds + nl + 1, &ncg, err) < 0)
        goto fail;
    memcpy(fds, sb->image->layer_fds, nl * sizeof(int));
    fds[nl] = c->netns_fd;
    /* Its clocks start now: minus the host's, in every process of it. */
    struct timespec mono, boot;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_BOOTTIME, &boot);
    c->timens.monotonic_ns = -((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
    c->timens.boottime_ns = -((int64_t)boot.tv_sec * 1000000000 + boot.tv_nsec);
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_CREATE;
    rq->u.create.uid_base = h->cfg.uid_base + sb->slot * 65536u;
    rq->u.create.id_count = 65536;
    rq->u.create.disk_mb = sb->spec.disk_mb;
    rq->u.create.n_layers = (uint32_t)nl;
    rq->u.create.n_cgroup_fds = (uint32_t)ncg;
    rq->u.create.timens = c->timens;
    snprintf(rq->u.create.hostname, sizeof(rq->u.create.hostname), "%s", sb->id);
    snprintf(rq->u.create.workdir, sizeof(rq->u.create.workdir), "%s", st->workdir);
    rq->strings_len = (uint32_t)runtime_files(sb, rq->strings, CRL_SPAWN_MAX_FILES);
    int r = -1;
    if (!rq->strings_len)
        crl_err_set(err, CRL_E_INTERNAL, "the run-time files exceed %d bytes", CRL_SPAWN_MAX_FILES);
    else
        r = send_req(s, rq, sizeof(*rq) + rq->strings_len, fds, (int)nl + 1 + ncg, P_CREATE, sb,
                     NULL, NULL, err);
    for (int i = 0; i < ncg; i++)
        close(fds[nl + 1 + i]);
    if (r < 0)
        goto fail;
    c->spawner = s->idx;
    return 0;
fail:
    undo_create(sb);
    return -1;
}

/* ---- processes ---- */

static int pipe_pair(int *ours, int *theirs, bool ours_writes, struct crl_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "pipe");
    *ours = ours_writes ? p[1] : p[0];
    *theirs = ours_writes ? p[0] : p[1];
    return 0;
}

/* Pack strings one after another, NUL-terminated, into the request. */
static size_t pack(char *dst, size_t off, size_t cap, const char *s)
{
    size_t n = strlen(s) + 1;
    if (off + n > cap)
        return (size_t)-1;
    memcpy(dst + off, s, n);
    return off + n;
}

static void spawn_failed_cleanup(struct crl_proc *p, struct ctr_proc *cp, struct ctr_sandbox *c)
{
    close_fd(&p->in_fd);
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    if (c && c->cg)
        crl_cgroup_remove_leaf(c->cg, cp->leaf);
}

static int ctr_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err)
{
    struct ctr_state *st = g_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = spawner_for(sb, err);
    if (!s)
        return -1;
    struct ctr_proc *cp = calloc(1, sizeof(*cp));
    if (!cp)
        return crl_err_sys(err, ENOMEM, "process");
    p->priv = cp;
    snprintf(cp->leaf, sizeof(cp->leaf), "e%llu", (unsigned long long)p->seq);
    int fds[4 + CRL_CGROUP_MAX_FDS] = {-1, -1, -1, -1};
    int ncg = 0;
    if (pipe_pair(&p->in_fd, &fds[1], true, err) < 0 ||
        pipe_pair(&p->out_fd, &fds[2], false, err) < 0 ||
        pipe_pair(&p->err_fd, &fds[3], false, err) < 0)
        goto fail;
    if (crl_cgroup_attach_fds(c->cg, cp->leaf, fds + 4, &ncg, err) < 0)
        goto fail;
    fds[0] = c->pidfd;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_EXEC;
    rq->u.exec.uid = p->uid;
    rq->u.exec.gid = p->gid;
    rq->u.exec.n_cgroup_fds = (uint32_t)ncg;
    rq->u.exec.flags = p->setsid ? CRL_EXEC_F_SETSID : 0;
    rq->u.exec.timens = c->timens;
    size_t cap = CRL_SPAWN_MAX_MSG - sizeof(*rq), off = 0;
    for (char **a = p->argv; *a && off != (size_t)-1; a++, rq->u.exec.argc++)
        off = pack(rq->strings, off, cap, *a);
    for (char **e = p->envp; e && *e && off != (size_t)-1; e++, rq->u.exec.envc++)
        off = pack(rq->strings, off, cap, *e);
    if (off != (size_t)-1)
        off = pack(rq->strings, off, cap, p->cwd);
    if (off == (size_t)-1) {
        crl_err_set(err, CRL_E_TOO_LARGE, "command and environment exceed %u bytes",
                    CRL_SPAWN_MAX_MSG);
        goto fail;
    }
    rq->strings_len = (uint32_t)off;
    if (send_req(s, rq, sizeof(*rq) + off, fds, 4 + ncg, P_SPAWN, sb, p, NULL, err) < 0)
        goto fail;
    cp->spawner = s->idx;
    for (int i = 1; i < 4 + ncg; i++)
        close(fds[i]);
    return 0;
fail:
    for (int i = 1; i < 4 + ncg; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    spawn_failed_cleanup(p, cp, c);
    free(cp);
    p->priv = NULL;
    return -1;
}

static void spawn_done(struct spawner *s, struct crl_sandbox *sb, struct crl_proc *p,
                       const struct crl_spawn_reply *r, int *fds, int nfds)
{
    struct ctr_proc *cp = p->priv;
    if (r->err || nfds > 1) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        struct crl_err err = CRL_ERR_INIT;
        const char *what = r->step == CRL_STEP_CWD ? p->cwd : p->argv[0];
        if (r->err)
            spawn_error(r, what, &err);
        else
            crl_err_set(&err, CRL_E_INTERNAL, "spawn: %d descriptors", nfds);
        spawn_failed_cleanup(p, cp, sb->priv);
        free(cp);
        p->priv = NULL;
        p->on_start(p, &err);
        return;
    }
    p->pid = r->pid;
    p->pidfd = nfds ? fds[0] : -1; /* none when it has ended already: its exit follows */
    p->started = true;
    add_running(s, r->pid, P_SPAWN, sb, p, NULL);
    p->on_start(p, NULL);
}

static void proc_exited(struct crl_sandbox *sb, struct crl_proc *p, const struct crl_spawn_reply *r)
{
    struct ctr_proc *cp = p->priv;
    struct ctr_sandbox *c = sb->priv;
    p->exited = true;
    p->status = r->status;
    p->cpu_s = (double)(r->utime_us + r->stime_us) / 1e6;
    p->maxrss_bytes = (uint64_t)r->maxrss_kb * 1024;
    close_fd(&p->pidfd);
    /* Daemonised descendants keep the leaf busy; it goes with the sandbox. */
    if (c && c->cg)
        crl_cgroup_remove_leaf(c->cg, cp->leaf);
    free(cp);
    p->priv = NULL;
    p->on_exit(p);
}

static int ctr_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope)
{
    struct ctr_sandbox *c = sb->priv;
    struct ctr_proc *cp = p->priv;
    /* Before its start is confirmed it is already in its leaf: kill there. */
    if (p->exited || !cp)
        return 0;
    if (scope != CRL_KILL_PROC && c && c->cg) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_cgroup_kill_leaf(c->cg, cp->leaf, scope == CRL_KILL_DESCENDANTS ? p->pid : 0,
                                 &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    if (scope != CRL_KILL_DESCENDANTS && p->pidfd >= 0 &&
        syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(sb->id, errno, "pidfd_send_signal(%d, SIGKILL)", p->pid);
    return 0;
}

/* ---- files ---- */

static int ctr_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err)
{
    struct ctr_state *st = g_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = spawner_for(sb, err);
    if (!s)
        return -1;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_OPEN;
    rq->u.open.flags = o->flags;
    rq->u.open.mode = o->mode;
    rq->u.open.uid = o->uid;
    rq->u.open.gid = o->gid;
    size_t off = pack(rq->strings, 0, CRL_SPAWN_MAX_MSG - sizeof(*rq), o->path);
    rq->strings_len = (uint32_t)off;
    return send_req(s, rq, sizeof(*rq) + off, &c->pidfd, 1, P_OPEN, sb, o, NULL, err);
}

static void open_done(struct crl_sandbox *sb, struct crl_open_req *o,
                      const struct crl_spawn_reply *r, int *fds, int nfds)
{
    struct crl_err err = CRL_ERR_INIT;
    if (r->err || nfds != 1) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (r->err)
            spawn_error(r, o->path, &err);
        else
            crl_err_set(&err, CRL_E_INTERNAL, "open: no descriptor");
        o->done(o, -1, false, 0, &err);
        return;
    }
    o->done(o, fds[0], r->kind == CRL_OPEN_DIRECTORY, (uint64_t)r->size, NULL);
}

/* A helper's leaf goes when it ends (its tree is gone or dying). */
static void remove_leaf(struct crl_sandbox *sb, const char *leaf)
{
    struct ctr_sandbox *c = sb->priv;
    if (c && c->cg && leaf[0])
        crl_cgroup_remove_leaf(c->cg, leaf);
}

static int ctr_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err)
{
    struct ctr_state *st = g_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = spawner_for(sb, err);
    if (!s)
        return -1;
    int fds[3 + CRL_CGROUP_MAX_FDS] = {c->pidfd, -1, -1};
    int ncg = 0;
    t->data_fd = t->msg_fd = -1;
    int ret = -1;
    char leaf[32];
    snprintf(leaf, sizeof(leaf), "t%llu", (unsigned long long)++sb->next_seq);
    bool ours_writes = t->kind != CRL_STREAM_TAR_OUT;
    int msg[2];
    if (pipe_pair(&t->data_fd, &fds[1], ours_writes, err) < 0)
        goto out;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg) < 0) {
        crl_err_sys(err, errno, "socketpair");
        goto out;
    }
    t->msg_fd = msg[0];
    fds[2] = msg[1];
    if (crl_cgroup_attach_fds(c->cg, leaf, fds + 3, &ncg, err) < 0)
        goto out;
    struct crl_spawn_req *rq = (struct crl_spawn_req *)st->msg;
    memset(rq, 0, sizeof(*rq));
    rq->op = CRL_SPAWN_STREAM;
    rq->u.stream.kind = t->kind;
    rq->u.stream.mode = t->mode;
    rq->u.stream.uid = t->uid;
    rq->u.stream.gid = t->gid;
    rq->u.stream.n_cgroup_fds = (uint32_t)ncg;
    size_t off = pack(rq->strings, 0, CRL_SPAWN_MAX_MSG - sizeof(*rq), t->path);
    rq->strings_len = (uint32_t)off;
    ret = send_req(s, rq, sizeof(*rq) + off, fds, 3 + ncg, P_STREAM, sb, t, leaf, err);
out:
    for (int i = 1; i < 3 + ncg; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (ret < 0) {
        close_fd(&t->data_fd);
        close_fd(&t->msg_fd);
        remove_leaf(sb, leaf);
    }
    return ret;
}

static void stream_started(struct spawner *s, struct crl_sandbox *sb, struct crl_stream_req *t,
                           const char *leaf, const struct crl_spawn_reply *r, int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (r->err) {
        struct crl_err err = CRL_ERR_INIT;
        spawn_error(r, t->path, &err);
        close_fd(&t->data_fd);
        close_fd(&t->msg_fd);
        remove_leaf(sb, leaf);
        t->started(t, &err);
        return;
    }
    add_running(s, r->pid, P_STREAM, sb, t, leaf);
    t->started(t, NULL);
}

/* ---- checkpoints ---- */

/* The writable layer, straight from the tmpfs corral-init handed us (only
 * the sandbox's mount namespace has it mounted): upper/ is the overlay's
 * upper dir, with its whiteouts (0/0 character devices) and opaque
 * directories (user.overlay.opaque, the mount has `userxattr`), owned by
 * host ids: the sandbox's plus its slot's base.  /tmp is the overlay's; only
 * /dev/shm (POSIX shared memory) lives on the tmpfs outside upper/. */
static int ctr_snapshot(struct crl_sandbox *sb, struct crl_snapshot_view *v, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing || c->tmpfs_fd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    int fd = crl_openat(c->tmpfs_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "opening the writable layer of %s", sb->id);
    v->dir_fd = fd;
    v->format = CRL_LAYER_OVERLAY;
    v->uid_shift = v->gid_shift = sb->host->cfg.uid_base + sb->slot * 65536u;
    return 0;
}

static void restore_finish(struct ctr_restore *cr, const struct crl_err *err)
{
    struct crl_sandbox *sb = cr->sb;
    struct crl_restore_req *rq = cr->rq;
    close_fd(&cr->msg_fd);
    free(cr);
    rq->done(rq, err);
    crl_sandbox_unref(sb);
}

/* The change set is applied, at / of the sandbox's overlay (its mounts
 * left out), by a helper the spawner forks and moves into the sandbox as
 * its root, in a cgroup leaf of its own: writes are the sandbox's and
 * charged to it, and a removal through the overlay makes a whiteout.  (In
 * a paused sandbox the helper is frozen with the rest until a resume.) */
static int ctr_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err)
{
    struct ctr_state *st = g_state;
    struct ctr_sandbox *c = sb->priv;
    struct spawner *s = spawner_for(sb, err);
    if (!s)
        return -1;
    if (c->pidfd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not ready yet", sb->id);
    struct ctr_restore *cr = calloc(1, sizeof(*cr));
    if (!cr)
        return crl_err_sys(err, ENOMEM, "restore");
    cr->rq = rq;
    cr->sb = sb;
    cr->msg_fd = -1;
    int fds[3 + CRL_CGROUP_MAX_FDS] = {c->pidfd, -1, -1};
    int ncg = 0, msg[2], ret = -1;
    char leaf[32];
    snprintf(leaf, sizeof(leaf), "r%llu", (unsigned long long)++sb->next_seq);
    /* a reading of its own: from offset 0, and read-only */
    if ((fds[1] = crl_reopen(rq->tar_fd, O_RDONLY)) < 0) {
        crl_err_sys(err, errno, "reopening the checkpoint (fd %d)", rq->tar_fd);
        goto out;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg) < 0) {
        crl_err_sys(err, errno, "socketpair");
        goto out;
    }
    cr->msg_fd = msg[0];
    fds[2] = msg[1];
    if (crl_cgroup_attach_fds(c->cg, leaf, fds + 3, &ncg, err) < 0)
        goto out;
    struct crl_spawn_req *req = (struct crl_spawn_req *)st->msg;
    memset(req, 0, sizeof(*req));
    req->op = CRL_SPAWN_RESTORE;
    req->u.stream.kind = CRL_STREAM_TAR_IN;
    req->u.stream.n_cgroup_fds = (uint32_t)ncg;
    size_t off = pack(req->strings, 0, CRL_SPAWN_MAX_MSG - sizeof(*req), "/");
    req->strings_len = (uint32_t)off;
    ret = send_req(s, req, sizeof(*req) + off, fds, 3 + ncg, P_RESTORE, sb, cr, leaf, err);
out:
    for (int i = 1; i < 3 + ncg; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (ret < 0) {
        close_fd(&cr->msg_fd);
        remove_leaf(sb, leaf);
        free(cr);
        return -1;
    }
    crl_sandbox_ref(sb);
    return 0;
}

static void restore_started(struct spawner *s, struct crl_sandbox *sb, struct ctr_restore *cr,
                            const char *leaf, const struct crl_spawn_reply *r, int *fds, int nfds)
{
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (r->err) {
        struct crl_err err = CRL_ERR_INIT;
        spawn_error(r, "restoring", &err);
        remove_leaf(sb, leaf);
        restore_finish(cr, &err);
        return;
    }
    add_running(s, r->pid, P_RESTORE, sb, cr, leaf);
}

/* The helper ended with `code` (enum crl_stream_status, or 128 + a signal). */
static void restore_exited(struct crl_sandbox *sb, struct ctr_restore *cr, const char *leaf,
                           int code)
{
    remove_leaf(sb, leaf);
    char msg[600] = "";
    ssize_t n = recv(cr->msg_fd, msg, sizeof(msg) - 1, MSG_DONTWAIT);
    msg[n > 0 ? n : 0] = 0;
    msg[strcspn(msg, "\n")] = 0;
    struct crl_err err = CRL_ERR_INIT;
    bool live = sb->state == CRL_SB_READY || sb->state == CRL_SB_PAUSED;
    restore_finish(cr, crl_restore_error(code, msg, live, &err) < 0 ? &err : NULL);
}

/* ---- pause ---- */

/* Freeze every process of the sandbox (its init, execs, sessions and
 * helpers: all in its cgroup), then give back what memory the kernel can
 * take from frozen tasks. */
static int ctr_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing || !c->cg)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (crl_cgroup_pause(c->cg, sb->id, &c->last_pause, err) < 0)
        return -1;
    c->paused = true;
    return 0;
}

static int ctr_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->releasing || !c->cg)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    if (crl_cgroup_freeze(c->cg, false, err) < 0)
        return -1;
    c->paused = false;
    return 0;
}

/* ---- stats ---- */

static int ctr_stats(struct crl_sandbox *sb, struct crl_usage *u)
{
    struct ctr_sandbox *c = sb->priv;
    memset(u, 0, sizeof(*u));
    if (!c || !c->cg)
        return -1;
    struct crl_cgroup_stats cs;
    crl_cgroup_stats(c->cg, &cs);
    u->cpu_s = (double)cs.cpu_ns / 1e9;
    u->memory_bytes = cs.memory_bytes;
    u->memory_peak_bytes = cs.memory_peak_bytes;
    u->pids = cs.pids;
    u->oom_kills = cs.oom_kills;
    struct statfs sf;
    if (c->tmpfs_fd >= 0 && fstatfs(c->tmpfs_fd, &sf) == 0) {
        u->disk_limit_bytes = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
        u->disk_bytes = (uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize;
    } else {
        u->disk_limit_bytes = (uint64_t)sb->spec.disk_mb << 20;
    }
    return 0;
}

static json_t *ctr_info(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || c->pid <= 0)
        return NULL;
    struct crl_host *h = sb->host;
    json_t *o = json_pack("{s:i, s:I, s:s, s:i}", "init_pid", (json_int_t)c->pid, "uid_base",
                          (json_int_t)(h->cfg.uid_base + sb->slot * 65536u), "cgroup",
                          c->cg ? crl_cgroup_name(c->cg) : "", "spawner", (json_int_t)c->spawner);
    if (o && c->last_pause.how) /* what the last pause gave back, and how */
        json_object_set_new(o, "last_pause",
                            json_pack("{s:s, s:I, s:I}", "memory_release", c->last_pause.how,
                                      "memory_before_bytes", (json_int_t)c->last_pause.before_bytes,
                                      "memory_after_bytes", (json_int_t)c->last_pause.after_bytes));
    return o;
}

/* ---- spawner events ---- */

static void spawner_lost(struct spawner *s);

static void on_spawner(struct crl_watch *w, uint32_t ev)
{
    struct spawner *s = w->data;
    struct ctr_state *st = s->st;
    for (;;) {
        struct crl_spawn_reply r;
        int fds[4];
        int nfds = 4;
        ssize_t n = crl_recv_fds(s->sock, &r, sizeof(r), fds, &nfds);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0 || (size_t)n != sizeof(r)) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            spawner_lost(s);
            return;
        }
        if (!s->ready) { /* a restarted spawner's first word is its hello */
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            if (r.op != CRL_SPAWN_REPLY || r.id != 0) {
                spawner_lost(s);
                return;
            }
            crl_timer_stop(st->host->loop, &s->timer);
            s->ready = true;
            s->failures = 0;
            crl_info(NULL, "spawner %u (pid %d) restarted", s->idx, s->pid);
            continue;
        }
        if (r.op == CRL_SPAWN_EXITED) {
            struct running *run = take_running(s, r.pid);
            if (!run)
                continue; /* a sandbox's init, or a helper we stopped tracking */
            int code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
            if (run->kind == P_SPAWN) {
                proc_exited(run->sb, run->obj, &r);
            } else if (run->kind == P_RESTORE) {
                restore_exited(run->sb, run->obj, run->leaf, code);
            } else {
                struct crl_stream_req *t = run->obj;
                remove_leaf(run->sb, run->leaf);
                t->done(t, code);
            }
            free(run);
            continue;
        }
        struct pending *p = take_pending(s, r.id);
        if (!p) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            crl_warn(NULL, "spawner %u: reply to unknown request %llu", s->idx,
                     (unsigned long long)r.id);
            continue;
        }
        switch (p->kind) {
        case P_CREATE: create_done(p->sb, &r, fds, nfds); break;
        case P_SPAWN: spawn_done(s, p->sb, p->obj, &r, fds, nfds); break;
        case P_OPEN: open_done(p->sb, p->obj, &r, fds, nfds); break;
        case P_STREAM: stream_started(s, p->sb, p->obj, p->leaf, &r, fds, nfds); break;
        case P_RESTORE: restore_started(s, p->sb, p->obj, p->leaf, &r, fds, nfds); break;
        }
        free(p);
    }
    (void)st;
}

static void restart_spawner(struct crl_timer *t)
{
    struct spawner *s = t->data;
    struct crl_err err = CRL_ERR_INIT;
    if (s->st->host->shutting_down)
        return;
    if (start_spawner(s->st, s->idx, false, &err) < 0) {
        crl_error(NULL, "restarting spawner %u: %s", s->idx, err.msg);
        spawner_lost(s);
    }
}

/* A restarted spawner that never said hello. */
static void hello_overdue(struct crl_timer *t)
{
    struct spawner *s = t->data;
    crl_error(NULL, "spawner %u (pid %d) did not say hello within 10s", s->idx, s->pid);
    spawner_lost(s);
}

/* A spawner died: its sandboxes died with it (their init had it as parent).
 * Fail what was in flight and start a new one, on a timer: at once the
 * first time, then backing off to 10 s while restarts keep failing, and
 * never waiting on the loop for its hello. */
static void spawner_lost(struct spawner *s)
{
    struct ctr_state *st = s->st;
    if (s->ready)
        crl_error(NULL, "spawner %u (pid %d) exited; restarting it", s->idx, s->pid);
    else
        s->failures++;
    s->ready = false;
    crl_timer_stop(st->host->loop, &s->timer);
    crl_watch_stop(st->host->loop, &s->w);
    close_fd(&s->sock);
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0); /* killed: prompt */
        s->pid = 0;
    }
    struct crl_spawn_reply r = {.op = CRL_SPAWN_REPLY, .err = EPIPE, .step = CRL_STEP_SYNC};
    snprintf(r.msg, sizeof(r.msg), "the spawner exited");
    while (s->pending) {
        struct pending *p = s->pending;
        s->pending = p->next;
        s->inflight--;
        switch (p->kind) {
        case P_CREATE: create_done(p->sb, &r, NULL, 0); break;
        case P_SPAWN: spawn_done(s, p->sb, p->obj, &r, NULL, 0); break;
        case P_OPEN: open_done(p->sb, p->obj, &r, NULL, 0); break;
        case P_STREAM: stream_started(s, p->sb, p->obj, p->leaf, &r, NULL, 0); break;
        case P_RESTORE: restore_started(s, p->sb, p->obj, p->leaf, &r, NULL, 0); break;
        }
        free(p);
    }
    struct crl_spawn_reply dead = {.op = CRL_SPAWN_EXITED, .status = SIGKILL};
    while (s->running) {
        struct running *run = s->running;
        s->running = run->next;
        if (run->kind == P_SPAWN) {
            proc_exited(run->sb, run->obj, &dead);
        } else if (run->kind == P_RESTORE) {
            restore_exited(run->sb, run->obj, run->leaf, CRL_STREAM_GONE);
        } else {
            struct crl_stream_req *t = run->obj;
            t->done(t, CRL_STREAM_GONE);
        }
        free(run);
    }
    if (st->host->shutting_down)
        return;
    unsigned shift = s->failures < 7 ? s->failures : 7;
    uint64_t delay = s->failures ? 100000000ull << shift : 0; /* 0.1 s, 0.2 s, ... */
    if (delay > 10000000000ull)
        delay = 10000000000ull;
    if (s->failures)
        crl_error(NULL, "spawner %u: restart %u failed; next try in %.1fs", s->idx, s->failures,
                  (double)delay / 1e9);
    crl_timer_start(st->host->loop, &s->timer, delay, restart_spawner, s);
}

/* Start spawner i.  With `wait`, block until its hello (corrald's start:
 * a broken spawner fails it); without, the hello arrives on the loop. */
static int start_spawner(struct ctr_state *st, unsigned i, bool wait, struct crl_err *err)
{
    struct spawner *s = &st->sp[i];
    s->st = st;
    s->idx = i;
    s->sock = -1;
    s->ready = false;
    int pair[2];
    if (crl_seqpacket_pair(pair, CRL_SPAWN_MAX_MSG, err) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pair[1], CRL_SPAWN_FD);
    /* corrald blocks signals it takes through a signalfd: the spawner
     * starts with none blocked and default dispositions. */
    posix_spawnattr_t attr;
    crl_spawnattr_init_clean(&attr);
    /* Settings travel in the environment, not argv: a sandbox's init shares
     * the spawner's memory, so `ps` inside a sandbox shows this argv (and
     * only ptrace, which is refused, could read the environment).  Nothing
     * else of corrald's environment is passed on. */
    char workdir_env[PATH_MAX + 32], level_env[48];
    snprintf(workdir_env, sizeof(workdir_env), "CORRAL_SPAWNER_WORKDIR=%s", st->workdir);
    snprintf(level_env, sizeof(level_env), "CORRAL_SPAWNER_LOG=%s",
             crl_log_max_level >= CRL_LOG_DEBUG ? "debug" : "info");
    char *argv[] = {(char *)"corral-spawner", NULL};
    char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", workdir_env, level_env, NULL};
    pid_t pid;
    int r = posix_spawn(&pid, st->spawner_path, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(pair[1]);
    if (r != 0) {
        close(pair[0]);
        return crl_err_sys(err, r, "starting %s", st->spawner_path);
    }
    if (wait) {
        struct timeval tv = {10, 0};
        setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct crl_spawn_reply hello;
        ssize_t n = recv(pair[0], &hello, sizeof(hello), 0);
        if (n != (ssize_t)sizeof(hello)) {
            close(pair[0]);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return crl_err_set(err, CRL_E_INTERNAL, "spawner %s did not start (see its log above)",
                               st->spawner_path);
        }
    }
    crl_set_nonblock(pair[0], 1);
    s->pid = pid;
    s->sock = pair[0];
    s->inflight = 0;
    if (crl_watch_start(st->host->loop, &s->w, s->sock, EPOLLIN, on_spawner, s) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "watching the spawner socket");
    if (wait)
        s->ready = true;
    else
        crl_timer_start(st->host->loop, &s->timer, 10000000000ull, hello_overdue, s);
    return 0;
}

static int ctr_init(struct crl_host *h, void **state, struct crl_err *err)
{
    struct ctr_state *st = calloc(1, sizeof(*st));
    if (!st || !(st->msg = malloc(CRL_SPAWN_MAX_MSG))) {
        free(st);
        return crl_err_sys(err, ENOMEM, "container backend");
    }
    st->host = h;
    *state = st;
    g_state = st;
    if (h->cfg.spawner_path)
        snprintf(st->spawner_path, sizeof(st->spawner_path), "%s", h->cfg.spawner_path);
    else if (crl_sibling_path("corral-spawner", st->spawner_path, sizeof(st->spawner_path), err) <
             0)
        return -1;
    if (access(st->spawner_path, X_OK) < 0)
        return crl_err_sys(err, errno, "spawner %s", st->spawner_path);
    /* The empty directory every sandbox mounts its tmpfs over, in its own
     * mount namespace: never mounted in the host's. */
    snprintf(st->workdir, sizeof(st->workdir), "%s/mnt", h->run_dir);
    if (mkdir(st->workdir, 0755) < 0 && errno != EEXIST)
        return crl_err_sys(err, errno, "mkdir %s", st->workdir);
    unsigned n = h->cfg.spawners ? h->cfg.spawners : (h->ncpus < 4 ? (h->ncpus ? h->ncpus : 1) : 4);
    if (n > MAX_SPAWNERS)
        n = MAX_SPAWNERS;
    for (unsigned i = 0; i < n; i++) {
        if (start_spawner(st, i, true, err) < 0)
            return -1;
        st->n_sp = i + 1;
    }
    return 0;
}

static int ctr_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    /* Processes and cgroups of an earlier corrald were removed by the cgroup
     * reconcile; mounts lived in namespaces that died with them; upper dirs
     * were tmpfs.  Nothing of ours remains on disk to clean. */
    return 0;
}

static void ctr_shutdown(struct crl_host *h, void *state)
{
    struct ctr_state *st = state;
    for (unsigned i = 0; i < st->n_sp; i++) {
        struct spawner *s = &st->sp[i];
        crl_timer_stop(h->loop, &s->timer);
        crl_watch_stop(h->loop, &s->w);
        close_fd(&s->sock);
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
        }
        /* Sandboxes are gone by now: only a restore's owner is still told. */
        struct crl_err gone = CRL_ERR_INIT;
        crl_err_set(&gone, CRL_E_UNAVAILABLE, "restoring: corrald is shutting down");
        while (s->pending) {
            struct pending *p = s->pending;
            s->pending = p->next;
            if (p->kind == P_RESTORE)
                restore_finish(p->obj, &gone);
            free(p);
        }
        while (s->running) {
            struct running *r = s->running;
            s->running = r->next;
            if (r->kind == P_RESTORE)
                restore_finish(r->obj, &gone);
            free(r);
        }
    }
    free(st->msg);
    free(st);
    g_state = NULL;
}

const struct crl_backend_ops crl_container_backend = {
    .name = "container",
    .init = ctr_init,
    .reconcile = ctr_reconcile,
    .shutdown = ctr_shutdown,
    .create = ctr_create,
    .destroy = ctr_destroy,
    .stats = ctr_stats,
    .info = ctr_info,
    .spawn = ctr_spawn,
    .kill = ctr_kill,
    .open = ctr_open,
    .stream = ctr_stream,
    .snapshot = ctr_snapshot,
    .restore = ctr_restore,
    .pause = ctr_pause,
    .resume = ctr_resume,
};
