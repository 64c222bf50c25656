/* The container backend: its ops table, a sandbox's life, and the
 * backend's start and end (container_int.h says how its files divide the
 * work). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#include <jansson.h>

#include "../../core/etc.h"
#include "../../core/host.h"
#include "../../os/proc.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "container.h"
#include "container_int.h"

struct ctr_state *crl_ctr_state;

/* ---- sandbox teardown ---- */

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
    crl_backend_net_release(sb, c->netns_fd, quarantine);
    c->netns_fd = -1;
    close_fd(&c->pidfd);
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
    /* A zombie is in no cgroup.procs, yet it holds its pid: the init the
     * spawner has yet to reap still counts (signal 0 finds it until then).
     * An adopted one is the host's init's to reap, not waited for. */
    bool zombie =
        c->pidfd >= 0 && !c->adopted && syscall(SYS_pidfd_send_signal, c->pidfd, 0, NULL, 0) == 0;
    /* Empty, its cgroups may still be busy for a moment: tidy them here,
     * where waiting costs nothing, so that release never waits. */
    bool busy = n == 0 && c->cg && crl_cgroup_tidy(c->cg, c->create_failed) < 0 && errno == EBUSY;
    if ((n > 0 || zombie || busy) && c->drain_tries++ < 5000) {
        if (n > 0 && c->drain_tries % 500 == 1)
            crl_cgroup_kill_all(c->cg, NULL);
        crl_timer_start(sb->host->loop, &c->drain_timer, 1000000, drain, sb);
        return;
    }
    if (zombie)
        crl_warn(sb->id, "init (pid %d) not reaped after 5s", c->pid);
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
    /* Its pid namespace died with it, and start_drain() kills what ran
     * outside (stream helpers): nothing of it runs, so the destroy is
     * answered now and the cgroups are tidied and released after (or at
     * once, by start_drain(), which may free the sandbox: last). */
    crl_sandbox_stopped(sb);
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
    if (c->cg)
        crl_cgroup_release(c->cg, true, NULL);
    crl_backend_net_release(sb, c->netns_fd, false);
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
    char text[3][512], ns[64];
    crl_backend_net_nameserver(sb, ns, sizeof(ns));
    int n[3] = {crl_etc_hostname(text[0], sizeof(text[0]), sb->id),
                crl_etc_hosts(text[1], sizeof(text[1]), sb->id),
                crl_etc_resolv_conf(text[2], sizeof(text[2]),
                                    crl_net_mode_name(crl_net_policy_mode(sb->spec.network)), ns)};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        int w = n[i] < 0 ? -1 : snprintf(out + off, cap - off, "%s%c%s%c", names[i], 0, text[i], 0);
        if (w < 0 || (size_t)w >= cap - off)
            return 0;
        off += (size_t)w;
    }
    return off;
}

void crl_ctr_create_done(struct crl_sandbox *sb, const struct crl_spawn_reply *r, int *fds,
                         int nfds)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    if (r->err || nfds != 2) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (r->err)
            crl_ctr_spawn_error(r, "building the sandbox", &err);
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
    c->tmpfs_fd = fds[1];
    c->pid = r->pid;
    struct crl_proc_identity id;
    if (crl_proc_identity(c->pid, &id) == 0) { /* for its record: who to adopt */
        c->init_start = id.start;
        c->init_pidns = id.pidns;
    }
    crl_watch_start(sb->host->loop, &c->w_init, c->pidfd, EPOLLIN, init_exited, sb);
    crl_sandbox_created(sb, NULL);
}

/* What corrald holds of a sandbox it makes or adopts: nothing yet. */
static struct ctr_sandbox *new_priv(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = calloc(1, sizeof(*c));
    if (!c) {
        crl_err_sys(err, ENOMEM, "sandbox");
        return NULL;
    }
    c->netns_fd = c->pidfd = c->tmpfs_fd = -1;
    sb->priv = c;
    return c;
}

/* Have spawner s take over a sandbox's PID 1 (its answer: adopt_done). */
static int send_adopt(struct spawner *s, struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_spawn_req rq = {.op = CRL_SPAWN_ADOPT, .u.adopt.pid1 = c->pid};
    snprintf(rq.u.adopt.sandbox, sizeof(rq.u.adopt.sandbox), "%s", sb->id);
    crl_sandbox_ref(sb); /* the answer's */
    if (crl_ctr_send_req(s, &rq, sizeof(rq), &c->pidfd, 1, P_ADOPT, sb, NULL, "", err) < 0) {
        crl_sandbox_unref(sb);
        return -1;
    }
    c->spawner = s->idx;
    c->adopt_seq = sb->next_seq + 1; /* what runs in leaves below this, PID 1's KIDS names */
    return 0;
}

void crl_ctr_adopt_all(struct spawner *s)
{
    for (struct crl_sandbox *sb = s->st->host->sandboxes; sb; sb = sb->next) {
        struct ctr_sandbox *c = sb->ops == &crl_container_backend ? sb->priv : NULL;
        if (!c || c->spawner != s->idx || c->pidfd < 0 || c->init_dead || c->releasing)
            continue;
        struct crl_err err = CRL_ERR_INIT;
        if (send_adopt(s, sb, &err) < 0)
            crl_sandbox_failed(sb, "init_lost", "its spawner died, and the new one: %s", err.msg);
    }
}

void crl_ctr_adopt_done(struct crl_sandbox *sb, const struct crl_spawn_reply *r)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_err err = CRL_ERR_INIT;
    if (!r || !c || c->init_dead || c->releasing) {
        /* it ended meanwhile, or the spawner died too: asked of the next */
    } else if (r->err) {
        crl_ctr_spawn_error(r, "its spawner died, and the new one could not take it over", &err);
        crl_sandbox_failed(sb, "init_lost", "%s", err.msg);
    } else {
        c->adopted = true;
        crl_info(sb->id, "taken over by spawner %u", c->spawner);
    }
    crl_sandbox_unref(sb);
}

struct kids_ctx {
    struct crl_sandbox *sb;
    const int32_t *kids;
    size_t n;
    unsigned killed, kept;
};

/* Is the leaf a process's we took back (a session's shell)? */
static bool taken_back(struct crl_sandbox *sb, const char *leaf)
{
    for (struct crl_proc *p = sb->procs; p; p = p->next_in_sb) {
        struct ctr_proc *cp = p->priv;
        if (cp && cp->on_pidfd && strcmp(cp->leaf, leaf) == 0)
            return true;
    }
    return false;
}

/* An exec leaf of the run before whose command is one of PID 1's kids:
 * its stdio was that run's, so it goes, with everything it started; but
 * a session's shell this corrald took back stays. */
static void kill_kid_leaf(const char *leaf, const pid_t *pids, size_t n, void *ctx)
{
    struct kids_ctx *k = ctx;
    struct ctr_sandbox *c = k->sb->priv;
    char *end;
    unsigned long long seq = leaf[0] == 'e' ? strtoull(leaf + 1, &end, 10) : 0;
    if (leaf[0] != 'e' || *end || seq >= c->adopt_seq)
        return;
    if (taken_back(k->sb, leaf)) {
        k->kept++;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        pid_t ns_pid = crl_proc_ns_pid(pids[i]);
        for (size_t j = 0; ns_pid > 0 && j < k->n; j++)
            if (k->kids[j] == ns_pid) {
                crl_cgroup_kill_leaf(c->cg, leaf, 0, NULL);
                k->killed++;
                return;
            }
    }
}

void crl_ctr_kids(struct spawner *s, const struct crl_spawn_reply *r, int fd)
{
    struct crl_err e = CRL_ERR_INIT;
    char id[sizeof(((struct crl_sandbox *)0)->id)];
    snprintf(id, sizeof(id), "%.*s", (int)sizeof(r->msg), r->msg);
    struct crl_sandbox *sb = crl_host_find(s->st->host, id, &e);
    struct ctr_sandbox *c = sb && sb->ops == &crl_container_backend ? sb->priv : NULL;
    if (!c || c->pid != r->pid || c->spawner != s->idx || c->init_dead || c->releasing || !c->cg)
        sb = NULL; /* it ended meanwhile */
    static int32_t kids[4096];
    size_t n = r->size > 0 && r->size <= 4096 ? (size_t)r->size : 0;
    if (!sb || fd < 0 || r->size < 0 || r->size > 4096 ||
        (n && pread(fd, kids, n * sizeof(int32_t), 0) != (ssize_t)(n * sizeof(int32_t)))) {
        if (sb)
            crl_warn(sb->id, "takeover: its PID 1's list of children is unreadable");
        return;
    }
    struct kids_ctx k = {.sb = sb, .kids = kids, .n = n};
    if (n)
        crl_cgroup_leaves(((struct ctr_sandbox *)sb->priv)->cg, kill_kid_leaf, &k);
    crl_info(sb->id,
             "taken over: %zu command(s) still ran for the spawner before; %u ended, with "
             "what they started (their output went to a process that is gone); %u session "
             "shell(s) taken back",
             n, k.killed, k.kept);
}

/* ---- adoption by a corrald started anew (lib/core/host.c) ---- */

static json_t *ctr_adopt_record(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c || !c->cg || c->pid <= 0 || !c->init_start)
        return NULL;
    uint64_t cpu_base, oom_base;
    crl_cgroup_bases(c->cg, &cpu_base, &oom_base);
    return json_pack("{s:s, s:i, s:I, s:I, s:i, s:I, s:I}", "cgroup", crl_cgroup_name(c->cg),
                     "init_pid", (int)c->pid, "init_start", (json_int_t)c->init_start, "pidns",
                     (json_int_t)c->init_pidns, "proto", CRL_INIT_PROTO, "cpu_base_ns",
                     (json_int_t)cpu_base, "oom_base", (json_int_t)oom_base);
}

/* Is the recorded PID 1 the process that has its pid now? */
static int check_init(json_t *rec, pid_t *pid, const char **why, struct crl_err *err)
{
    *pid = (pid_t)json_integer_value(json_object_get(rec, "init_pid"));
    struct crl_proc_identity id;
    if (json_integer_value(json_object_get(rec, "proto")) != CRL_INIT_PROTO) {
        *why = "init_protocol";
        return crl_err_set(err, CRL_E_CONFLICT, "its PID 1 speaks protocol %lld, this corrald %d",
                           (long long)json_integer_value(json_object_get(rec, "proto")),
                           CRL_INIT_PROTO);
    }
    if (*pid <= 1 || crl_proc_identity(*pid, &id) < 0) {
        *why = "init_gone";
        return crl_err_set(err, CRL_E_CONFLICT, "its PID 1 (pid %d) is gone", (int)*pid);
    }
    if ((json_int_t)id.start != json_integer_value(json_object_get(rec, "init_start")) ||
        (json_int_t)id.pidns != json_integer_value(json_object_get(rec, "pidns"))) {
        *why = "init_mismatch";
        return crl_err_set(err, CRL_E_CONFLICT,
                           "pid %d is another process now than its PID 1 (start time or pid "
                           "namespace differ)",
                           (int)*pid);
    }
    return 0;
}

static int ctr_adopt_check(struct crl_host *h, json_t *rec, const char **why, struct crl_err *err)
{
    pid_t pid;
    return check_init(rec, &pid, why, err);
}

struct stray_ctx {
    struct ctr_sandbox *c;
    uint64_t max_seq;
};

/* A leaf of the run before: a stream's or a restore's helper (they died
 * with their spawner: whatever is left goes), or an exec's (kept until
 * PID 1 names its running children: what finished leaves its daemons). */
static void stray_leaf(const char *leaf, const pid_t *pids, size_t n, void *ctx)
{
    struct stray_ctx *sc = ctx;
    char *end;
    unsigned long long seq = strtoull(leaf + 1, &end, 10);
    if (*end)
        return;
    if (seq > sc->max_seq)
        sc->max_seq = seq;
    if (leaf[0] == 't' || leaf[0] == 'r') {
        crl_cgroup_kill_leaf(sc->c->cg, leaf, 0, NULL);
        crl_cgroup_remove_leaf(sc->c->cg, leaf);
    }
}

static int ctr_adopt(struct crl_sandbox *sb, json_t *rec, bool *paused, const char **why,
                     struct crl_err *err)
{
    struct crl_host *h = sb->host;
    struct ctr_sandbox *c = new_priv(sb, err);
    if (!c)
        return -1;
    pid_t pid;
    struct stat self_net, net;
    struct statfs sf;
    struct crl_proc_identity id;
    char path[64];
    /* The pidfd first, then the identity again: a pid reused between the
     * check and the open would fail it. */
    if (check_init(rec, &pid, why, err) < 0)
        goto fail;
    c->pid = pid;
    if ((c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0 || crl_proc_identity(pid, &id) < 0 ||
        (json_int_t)id.start != json_integer_value(json_object_get(rec, "init_start"))) {
        *why = "init_gone";
        crl_err_set(err, CRL_E_CONFLICT, "its PID 1 (pid %d) is gone", (int)pid);
        goto fail;
    }
    c->init_start = id.start;
    c->init_pidns = id.pidns;
    *why = "cgroup_mismatch";
    if (crl_cgroup_adopt(h->cgroups, json_string_value(json_object_get(rec, "cgroup")),
                         (uint64_t)json_integer_value(json_object_get(rec, "cpu_base_ns")),
                         (uint64_t)json_integer_value(json_object_get(rec, "oom_base")), &c->cg,
                         err) < 0)
        goto fail;
    if (!crl_cgroup_has_pid(c->cg, pid)) {
        crl_err_set(err, CRL_E_CONFLICT, "its PID 1 (pid %d) is not in its cgroup %s", (int)pid,
                    crl_cgroup_name(c->cg));
        goto fail;
    }
    /* Its network namespace, never the host's; its tmpfs, from PID 1. */
    *why = "init_mismatch";
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    if ((c->netns_fd = crl_openat(AT_FDCWD, path, O_RDONLY, 0)) < 0 ||
        stat("/proc/self/ns/net", &self_net) < 0 || fstat(c->netns_fd, &net) < 0 ||
        net.st_ino == self_net.st_ino) {
        crl_err_set(err, CRL_E_CONFLICT, "its PID 1 (pid %d) has no network namespace of its own",
                    (int)pid);
        goto fail;
    }
    c->tmpfs_fd = (int)syscall(SYS_pidfd_getfd, c->pidfd, CRL_INIT_TMPFS_FD, 0);
    if (c->tmpfs_fd < 0 || fstatfs(c->tmpfs_fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC) {
        crl_err_sys(err, c->tmpfs_fd < 0 ? errno : EPROTO, "taking its tmpfs from its PID 1");
        goto fail;
    }
    /* Checked through the pidfd: the /proc files read above were its. */
    if (syscall(SYS_pidfd_send_signal, c->pidfd, 0, NULL, 0) < 0) {
        *why = "init_gone";
        crl_err_sys(err, errno, "its PID 1 (pid %d)", (int)pid);
        goto fail;
    }
    struct stray_ctx sc = {.c = c};
    crl_cgroup_leaves(c->cg, stray_leaf, &sc);
    sb->next_seq = sc.max_seq; /* new leaves never reuse an old one's name */
    c->adopted = true;         /* not our spawners' child: no zombie of it to wait for */
    *why = "adopt_failed";
    struct spawner *s = crl_ctr_pick_spawner(crl_ctr_state, err);
    if (!s || send_adopt(s, sb, err) < 0)
        goto fail;
    crl_watch_start(h->loop, &c->w_init, c->pidfd, EPOLLIN, init_exited, sb);
    *paused = crl_cgroup_frozen(c->cg);
    return 0;
fail:
    if (c->cg)
        crl_cgroup_release(c->cg, false, NULL);
    close_fd(&c->netns_fd);
    close_fd(&c->pidfd);
    close_fd(&c->tmpfs_fd);
    free(c);
    sb->priv = NULL;
    return -1;
}

static void ctr_leave(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    if (!c)
        return;
    crl_watch_stop(sb->host->loop, &c->w_init);
    crl_timer_stop(sb->host->loop, &c->drain_timer);
    if (c->cg)
        crl_cgroup_release(c->cg, false, NULL); /* its empty leaves go, nothing else */
    close_fd(&c->netns_fd);
    close_fd(&c->pidfd);
    close_fd(&c->tmpfs_fd);
    free(c);
    sb->priv = NULL;
}

/* The sandbox has its network namespace: ask a spawner to make it. */
static int spawn(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_state *st = crl_ctr_state;
    struct crl_host *h = sb->host;
    struct ctr_sandbox *c = sb->priv;
    int fds[CRL_SPAWN_MAX_FDS];
    int ncg = 0;
    size_t nl = sb->image->n_layers;
    struct spawner *s = crl_ctr_pick_spawner(st, err);
    if (!s || crl_cgroup_attach_fds(c->cg, ".", fds + nl + 1, &ncg, err) < 0)
        return -1;
    memcpy(fds, sb->image->layer_fds, nl * sizeof(int));
    fds[nl] = c->netns_fd;
    crl_timens_from_now(&c->timens); /* its clocks start now, in every process of it */
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
    /* the volumes' mounts (the host's: the spawner sends idmapped clones) */
    size_t nv = sb->spec.n_volumes;
    rq->u.create.n_volumes = (uint32_t)nv;
    for (size_t i = 0; i < nv; i++) {
        fds[nl + 1 + ncg + i] = sb->volume_fds[i];
        if (sb->spec.volumes[i].read_only)
            rq->u.create.volumes_ro |= 1u << i;
        snprintf(rq->u.create.volume_paths[i], CRL_SPAWN_VOLUME_PATH, "%s",
                 sb->spec.volumes[i].path);
    }
    rq->strings_len = (uint32_t)runtime_files(sb, rq->strings, CRL_SPAWN_MAX_FILES);
    int r = -1;
    if (!rq->strings_len)
        crl_err_set(err, CRL_E_INTERNAL, "the run-time files exceed %d bytes", CRL_SPAWN_MAX_FILES);
    else
        r = crl_ctr_send_req(s, rq, sizeof(*rq) + rq->strings_len, fds,
                             (int)(nl + 1 + (size_t)ncg + nv), P_CREATE, sb, NULL, NULL, err);
    for (int i = 0; i < ncg; i++)
        close(fds[nl + 1 + i]);
    if (r == 0)
        c->spawner = s->idx;
    return r;
}

/* The link was made off the loop (crl_backend_net_claim): go on, or fail
 * the create with nothing of it left. */
static void net_claimed(struct crl_sandbox *sb, int netns_fd, const struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    struct crl_err e = CRL_ERR_INIT;
    c->netns_fd = netns_fd;
    if (err)
        e = *err;
    if (err || spawn(sb, &e) < 0) {
        undo_create(sb);
        crl_sandbox_created(sb, &e);
    }
}

static int ctr_create(struct crl_sandbox *sb, struct crl_err *err)
{
    struct crl_host *h = sb->host;
    struct ctr_sandbox *c = new_priv(sb, err);
    if (!c)
        return -1;
    char name[32];
    snprintf(name, sizeof(name), "s%u", sb->slot);
    struct crl_cgroup_limits lim = {.memory_bytes = (uint64_t)sb->spec.memory_mb << 20,
                                    .pids = sb->spec.pids,
                                    .cpus = sb->spec.cpus};
    size_t nl = sb->image->n_layers;
    if (nl == 0 || nl > CRL_SPAWN_MAX_LAYERS) {
        crl_err_set(err, CRL_E_INVALID, "image %s has %zu layers: 1 to %d are supported",
                    sb->image->name, nl, CRL_SPAWN_MAX_LAYERS);
        goto fail;
    }
    if (!crl_ctr_pick_spawner(crl_ctr_state, err) ||
        crl_cgroup_create(h->cgroups, name, &lim, &c->cg, err) < 0)
        goto fail;
    int fd = crl_backend_net_claim(sb, net_claimed, err);
    if (fd == CRL_NET_PENDING)
        return 0; /* net_claimed goes on */
    if ((c->netns_fd = fd) < 0 || spawn(sb, err) < 0)
        goto fail;
    return 0;
fail:
    undo_create(sb);
    return -1;
}

/* ---- pause ---- */

/* Freeze every process of the sandbox (its init, execs, sessions and
 * helpers: all in its cgroup), then give back what memory the kernel can
 * take from frozen tasks. */
static int ctr_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    return crl_backend_pause_cgroup(sb, c && !c->releasing ? c->cg : NULL, true,
                                    c ? &c->last_pause : NULL, err);
}

static int ctr_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    struct ctr_sandbox *c = sb->priv;
    return crl_backend_pause_cgroup(sb, c && !c->releasing ? c->cg : NULL, false, NULL, err);
}

/* ---- stats ---- */

static int ctr_stats(struct crl_sandbox *sb, struct crl_usage *u)
{
    struct ctr_sandbox *c = sb->priv;
    memset(u, 0, sizeof(*u));
    if (!c || !c->cg)
        return -1;
    crl_backend_cgroup_usage(c->cg, u);
    struct statfs sf;
    if (c->tmpfs_fd >= 0 && fstatfs(c->tmpfs_fd, &sf) == 0) {
        u->disk_limit_bytes = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
        u->disk_bytes = (uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize;
    } else {
        u->disk_limit_bytes = (uint64_t)sb->spec.disk_mb << 20;
    }
    return 0;
}

static int ctr_netns(struct crl_sandbox *sb)
{
    struct ctr_sandbox *c = sb->priv;
    return c ? c->netns_fd : -1;
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
    crl_backend_pause_info(o, &c->last_pause);
    json_t *net = crl_backend_net_json(sb);
    if (net)
        json_object_set_new(o, "network", net);
    return o;
}

static int ctr_init(struct crl_host *h, void **state, struct crl_err *err)
{
    struct ctr_state *st = calloc(1, sizeof(*st));
    if (!st || !(st->msg = malloc(CRL_SPAWN_MAX_MSG))) {
        free(st);
        return crl_err_sys(err, ENOMEM, "container backend");
    }
    st->host = h;
    /* Request ids never repeat across runs: a PID 1 that outlived the run
     * before may still tell of that run's requests. */
    if (getrandom(&st->next_id, sizeof(st->next_id), 0) != (ssize_t)sizeof(st->next_id))
        st->next_id = crl_now_ns();
    st->next_id &= ~(1ull << 63);
    *state = st;
    crl_ctr_state = st;
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
        if (crl_ctr_start_spawner(st, i, true, err) < 0)
            return -1;
        st->n_sp = i + 1;
    }
    return 0;
}

static int ctr_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    /* Processes and cgroups of an earlier corrald that were not adopted
     * were removed by the cgroup reconcile; mounts lived in namespaces that
     * died with them; upper dirs were tmpfs.  Nothing of ours remains on
     * disk to clean. */
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
                crl_ctr_restore_finish(p->obj, &gone);
            free(p);
        }
        while (s->running) {
            struct running *r = s->running;
            s->running = r->next;
            if (r->kind == P_RESTORE)
                crl_ctr_restore_finish(r->obj, &gone);
            free(r);
        }
    }
    free(st->msg);
    free(st);
    crl_ctr_state = NULL;
}

const struct crl_backend_ops crl_container_backend = {
    .name = "container",
    .ports_on_netns = true,
    .volumes = CRL_VOLUMES_MOUNT,
    .admit_mb = 1, /* an idle one takes about 0.8 MiB, most of it the kernel's */
    .fds_held = 4, /* its init's pidfd, its netns, its tmpfs (and v2's memory.peak) */
    .init = ctr_init,
    .reconcile = ctr_reconcile,
    .adopt_record = ctr_adopt_record,
    .adopt_check = ctr_adopt_check,
    .adopt = ctr_adopt,
    .proc_record = crl_ctr_proc_record,
    .adopt_proc = crl_ctr_adopt_proc,
    .release_proc = crl_ctr_release_proc,
    .leave = ctr_leave,
    .shutdown = ctr_shutdown,
    .create = ctr_create,
    .destroy = ctr_destroy,
    .stats = ctr_stats,
    .info = ctr_info,
    .spawn = crl_ctr_spawn,
    .kill = crl_ctr_kill,
    .signal = crl_ctr_signal,
    .resize = crl_backend_pty_resize,
    .open = crl_ctr_open,
    .stream = crl_ctr_stream,
    .snapshot = crl_ctr_snapshot,
    .restore = crl_ctr_restore,
    .pause = ctr_pause,
    .netns = ctr_netns,
    .resume = ctr_resume,
};
